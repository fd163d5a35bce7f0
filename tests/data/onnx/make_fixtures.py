"""Write the ONNX test fixtures of this folder from models built of torch's own modules.

Run from the repository root with torch installed (``pip install -e '.[torch]'``):

    python tests/data/onnx/make_fixtures.py

For each model it writes ``NAME.onnx`` (exported by :func:`pase.io.torch.export_onnx_bytes`,
the same path as :func:`pase.from_torch`) and records in ``fixtures.json`` the input shapes,
torch's parameter count and the forward FLOPs counted by ``torch.utils.flop_counter``.
Weights larger than ``INLINE_LIMIT`` elements are replaced by references to an external data
file that is not shipped: the importer must never need (or read) them, and the fixtures stay small.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from pase.io.torch import export_onnx_bytes  # noqa: E402

INLINE_LIMIT = 256
MISSING_FILE = "weights-not-shipped.bin"


class RNNLM(nn.Module):
    """Embedding + 2-layer LSTM + linear projection, with its cross-entropy loss."""

    def __init__(self, vocab=2000, width=128):
        super().__init__()
        self.vocab = vocab
        self.embedding = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=2, batch_first=True)
        self.projection = nn.Linear(width, vocab)

    def forward(self, ids, targets):
        hidden, _ = self.lstm(self.embedding(ids))
        logits = self.projection(hidden)
        return nn.functional.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 10),
    )
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256, batch_first=True), num_layers=2,
        enable_nested_tensor=False,
    )
    return {
        "mlp": (mlp, (torch.randn(64, 784),)),
        "cnn": (cnn, (torch.randn(8, 3, 32, 32),)),
        "rnnlm": (RNNLM(), (torch.randint(0, 2000, (8, 20)), torch.randint(0, 2000, (8, 20)))),
        "transformer": (encoder, (torch.randn(8, 32, 64),)),
    }


def strip_weights(model: onnx.ModelProto) -> int:
    """Point every initializer above INLINE_LIMIT elements at a file that does not exist."""
    stripped = 0
    for t in model.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n <= INLINE_LIMIT:
            continue
        size = len(t.raw_data) or n * 4
        for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
            t.ClearField(field)
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in (("location", MISSING_FILE), ("length", str(size))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        stripped += 1
    return stripped


def main() -> None:
    record = {}
    for name, (module, inputs) in models().items():
        module.train()
        with FlopCounterMode(display=False) as counter:
            module(*inputs)
        data = export_onnx_bytes(module, inputs)
        model = onnx.load_model_from_string(data)
        stripped = strip_weights(model) if name != "cnn" else 0
        (HERE / f"{name}.onnx").write_bytes(model.SerializeToString())
        record[name] = {
            "inputs": [list(x.shape) for x in inputs],
            "parameters": sum(p.numel() for p in module.parameters()),
            "forward_flops": int(counter.get_total_flops()),
            "external_weights": stripped,
            "torch": torch.__version__,
        }
        print(name, record[name])
    (HERE / "fixtures.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
