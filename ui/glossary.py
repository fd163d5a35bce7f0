"""What the dimension letters of each op mean (b batch, n output features...), for the Learn page and hover text.

The letters of an op with fixed dimensions are read from its builder's
docstring (``over ``b n c````), or else from its one-letter parameters; their
meanings come from :data:`COMMON`, overridden per op where a letter means
something else there (``s`` is a kernel's columns in a convolution but the
sequence in an embedding). Ops whose letters the graph names (Einsum,
Elementwise, Softmax...) use the letters the sample models use.
"""

from __future__ import annotations

import inspect
import re
from functools import cache

from pase.ops.registry import OPS

__all__ = ["COMMON", "OVERRIDES", "op_letters", "glossary", "meaning", "describe_dims"]

# The usual meaning of each letter, in the models PaSE ships (CNNs, RNNs, transformers).
COMMON: dict[str, str] = {
    "b": "batch",
    "n": "output features (channels)",
    "c": "input features (channels); per-head width in attention",
    "h": "image rows; attention heads in transformers",
    "w": "image columns",
    "r": "kernel rows",
    "s": "sequence positions",
    "k": "key positions (attention); the contracted dimension of a GEMM",
    "d": "model width (features per position)",
    "e": "hidden units (feed-forward or LSTM)",
    "v": "vocabulary",
    "l": "stacked layers; the compressed key-value width of latent attention (DeepSeek's MLA)",
    "q": "the compressed query width of latent attention (DeepSeek's MLA)",
    "i": "GEMM rows",
    "j": "GEMM columns",
}

# Where an op's letter means something other than COMMON's.
OVERRIDES: dict[str, dict[str, str]] = {
    "Conv2D": {"c": "input channels", "n": "output channels (filters)", "h": "output rows", "w": "output columns",
               "r": "kernel rows", "s": "kernel columns"},
    "Pooling": {"c": "channels", "h": "output rows", "w": "output columns"},
    "BatchNorm": {"c": "channels", "h": "image rows", "w": "image columns"},
    "FullyConnected": {"n": "output features", "c": "input features"},
    "Embedding": {"s": "sequence positions", "d": "embedding width", "v": "vocabulary (table rows)"},
    "LSTM": {"l": "stacked LSTM layers", "s": "sequence steps (never split)", "d": "input features",
             "e": "hidden units"},
    "GroupedConv2D": {"g": "groups (split without communication)", "c": "input channels per group",
                      "n": "output channels per group", "h": "output rows", "w": "output columns",
                      "r": "kernel rows", "s": "kernel columns"},
    "MoERouter": {"s": "tokens of a sequence", "d": "model width"},
    "MoEExperts": {"c": "slots per expert and sequence (its capacity)", "x": "experts (expert parallelism)",
                   "d": "model width", "f": "hidden units of an expert"},
    "MoECombine": {"s": "tokens of a sequence", "d": "model width"},
}


@cache
def op_letters(op: str) -> tuple[str, ...]:
    """The dimension letters of ``op`` in order, from its builder's docstring or one-letter parameters; () when
    the graph names them (Einsum, Elementwise...)."""
    build = OPS[op].build
    first = (inspect.getdoc(build) or "").split("\n\n")[0]
    found = re.search(r"over ``([a-z](?: [a-z])*)``", first)
    if found:
        return tuple(found.group(1).split())
    return tuple(p for p in inspect.signature(build).parameters if len(p) == 1)


def meaning(op: str, letter: str) -> str | None:
    """What ``letter`` means in a layer of ``op`` (None for a letter no shipped model uses)."""
    return OVERRIDES.get(op, {}).get(letter) or COMMON.get(letter)


def glossary() -> dict[str, dict[str, str]]:
    """Op -> letter -> meaning for every registered op; ops whose letters the graph names get ``"*"``, a note."""
    out = {}
    for op in OPS:
        letters = op_letters(op)
        if letters:
            out[op] = {d: meaning(op, d) or "?" for d in letters}
        else:
            out[op] = {"*": "letters named by the graph; the sample models use them as in the common list"}
    return out


def summary(op: str) -> str:
    """The first sentence of ``op``'s builder docstring."""
    return (inspect.getdoc(OPS[op].build) or "").split("\n")[0]


def describe_dims(op: str, dims) -> str:
    """``"b batch, n output features, c input features"`` for hover text: each letter with its meaning."""
    return ", ".join(f"{d} {meaning(op, d)}" if meaning(op, d) else d for d in dims)
