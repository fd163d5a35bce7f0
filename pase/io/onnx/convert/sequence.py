"""Sequence operators: LSTM (a bidirectional one as two LSTMs and a Concat) and the
embedding lookup that a Gather from a weight table is."""

from __future__ import annotations

from math import prod

from pase.errors import FormatError
from pase.io.onnx.convert.registry import Unsupported, converter
from pase.io.onnx.values import Act, Const


def embedding(imp, weight: Const, ids: Act, axis: int) -> Act:
    """Rows ``ids`` of the table ``weight``: an Embedding layer."""
    if len(weight.shape) != 2 or axis not in (0, -2):
        raise Unsupported("gather from a weight other than an embedding table")
    v, d = weight.shape
    shape = ids.shape
    if len(shape) == 0:
        raise Unsupported("gather of one row")
    flat = (shape[0], prod(shape[1:])) if len(shape) >= 2 else (shape[0], 1)
    ids2 = imp.reshape(ids, flat) if ids.src is not None else Act(flat, None, 0, ids.batch_axis)
    spec = imp.emit("Embedding", dict(b=flat[0], s=flat[1], d=d, v=v), [ids2 if ids2.src is not None else None],
                    sources={"weight": weight})
    out = Act.of(spec, 0, 0 if ids.batch_axis == 0 else None)
    return imp.reshape(out, tuple(shape) + (d,))


@converter("LSTM", inputs=3, act_first=True)
def lstm(imp, ins, attrs):
    """One LSTM layer per direction over the ``(b, s, d)`` view of the input; the final
    states as loose outputs."""
    x, w = ins[0], ins[1]
    if not isinstance(w, Const) or not isinstance(ins[2], Const):
        raise Unsupported("weights computed at run time")
    if len(x.shape) != 3 or len(w.shape) != 3:
        raise FormatError(f"{imp.where()}: input {x.shape} and weight {w.shape} do not fit an LSTM")
    hidden = int(attrs.get("hidden_size", w.shape[1] // 4))
    direction = attrs.get("direction", "forward")
    layout = int(attrs.get("layout", 0))
    dirs = 2 if direction == "bidirectional" else 1
    if w.shape[0] != dirs or w.shape[1] != 4 * hidden:
        raise FormatError(f"{imp.where()}: weight {w.shape} does not fit hidden size {hidden}, {dirs} direction(s)")
    xb = x if layout == 1 else imp.transpose(x, [1, 0, 2])
    b, s, d = xb.shape
    if d != w.shape[2]:
        raise FormatError(f"{imp.where()}: input width {d} differs from the weight's {w.shape[2]}")
    outs = []
    for k in range(dirs):
        suffix = "" if dirs == 1 else (".forward", ".backward")[k]
        spec = imp.emit("LSTM", dict(l=1, b=b, s=s, d=d, e=hidden), [xb if xb.src is not None else None], suffix)
        outs.append(Act.of(spec, 0, 0))
    if dirs == 1:
        y = outs[0]
    else:
        both = imp.emit("Concat", dict(shapes=[[b, s, hidden]] * 2, dims=["b", "s", "e"], axis="e"), outs, ".concat")
        y = Act.of(both, 0, 0)
    y = imp.reshape(y, (b, s, dirs, hidden))  # (b, s, dirs, e)
    y = y if layout == 1 else imp.transpose(y, [1, 2, 0, 3])  # (s, dirs, b, e)
    state = (dirs, b, hidden) if layout == 0 else (b, dirs, hidden)
    return [y, Act(state, None), Act(state, None)]
