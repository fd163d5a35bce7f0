"""Window operators over images: Conv (2-D, and 1-D as a height-1 image) becomes
Conv2D (GroupedConv2D with ``group > 1``, dilated ones included), pooling becomes
Pooling (a global pool of a non-square map: ReduceMean)."""

from __future__ import annotations

from pase.errors import FormatError
from pase.io.onnx.convert.registry import Unsupported, converter
from pase.io.onnx.shapes import letters
from pase.io.onnx.values import Act, Const


def _window(imp, x_shape, kernel, attrs, *, ceil_mode=False, dilation=1):
    """Per spatial axis: (stride, symmetric pad) reproducing ONNX's output size, or Unsupported.
    ``kernel`` is the effective one (a dilated kernel's span); windows other than a
    convolution's (``dilation`` None) refuse dilation."""
    spatial = x_shape[2:]
    nd = len(spatial)
    strides = [int(s) for s in attrs.get("strides", [1] * nd)]
    dil = [int(d) for d in attrs.get("dilations", [1] * nd)]
    if len(strides) != nd or len(kernel) != nd:
        raise FormatError(f"{imp.where()}: kernel {kernel} or strides {strides} do not fit input {x_shape}")
    if any(d != (dilation or 1) for d in dil):
        raise Unsupported("dilation" if dilation is None else "different dilations along height and width")
    if any(s <= 0 for s in strides) or any(k <= 0 for k in kernel):
        raise FormatError(f"{imp.where()}: strides {strides} and kernel {kernel} must be positive")
    auto = attrs.get("auto_pad", "NOTSET")
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * nd)]
    if len(pads) != 2 * nd or any(p < 0 for p in pads):
        raise FormatError(f"{imp.where()}: pads {pads} do not fit input {x_shape}")
    result = []
    for i in range(nd):
        size, k, s = spatial[i], kernel[i], strides[i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max((out - 1) * s + k - size, 0)
        elif auto == "VALID":
            total = 0
            out = (size - k) // s + 1
        else:
            total = pads[i] + pads[i + nd]
            span = size + total - k
            out = (-(-span // s) if ceil_mode else span // s) + 1
        if out <= 0:
            raise FormatError(f"{imp.where()}: input size {size} with kernel {k} leaves no output")
        # A symmetric pad giving the same output size: half the total, or the least that suffices.
        least = max(0, -(-((out - 1) * s + k - size) // 2))
        for p in (total // 2, -(-total // 2), least, least + 1):
            if (size + 2 * p - k) // s + 1 == out:
                break
        else:
            raise Unsupported("padding that no symmetric pad reproduces")
        result.append((s, p))
    return result


@converter("Conv", inputs=2, act_first=True)
def conv(imp, ins, attrs):
    """A Conv2D layer with a constant weight (GroupedConv2D for ``group > 1``); a bias
    input is fused. A dilated kernel sizes the window by its span, its weights and FLOPs
    by its taps."""
    x, w = ins[0], ins[1]
    bias = len(ins) > 2 and ins[2] is not None
    if not isinstance(w, Const):
        raise Unsupported("weights computed at run time")
    groups = int(attrs.get("group", 1))
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise Unsupported(f"{len(x.shape) - 2}-D convolution") if len(x.shape) > 4 else FormatError(
            f"{imp.where()}: input {x.shape} and weight {w.shape} do not fit a convolution")
    if groups < 1 or x.shape[1] % groups or w.shape[0] % groups or w.shape[1] * groups != x.shape[1]:
        raise FormatError(f"{imp.where()}: weight {w.shape} with group={groups} expects {w.shape[1] * groups} input "
                          f"channels, input has {x.shape[1]}; the weight's second axis times group must be the "
                          "input's channels")
    one_d = len(x.shape) == 3
    kernel = list(w.shape[2:])
    dilations = [int(d) for d in attrs.get("dilations", [1] * len(kernel))]
    dilation = dilations[0] if dilations else 1
    if dilation < 1:
        raise FormatError(f"{imp.where()}: dilations {dilations} must be positive")
    win = _window(imp, x.shape, [(k - 1) * dilation + 1 for k in kernel], attrs, dilation=dilation)
    if one_d:
        x = imp.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        kernel = [1] + kernel
        win = [(win[0][0], 0)] + win
    (sh, ph), (sw, pw) = win
    b, c, height, width = x.shape
    if sh != sw:
        if height == 1 and kernel[0] == 1 and ph == 0:
            sh = sw
        elif width == 1 and kernel[1] == 1 and pw == 0:
            sw = sh
        else:
            raise Unsupported("different strides along height and width")
    pad = ph if ph == pw else [ph, pw]
    window = dict(height=height, width=width, r=kernel[0], s=kernel[1], stride=sh, pad=pad, pointwise=0, bias=bias,
                  dilation=dilation)
    sources = {"weight": w, "bias": ins[2] if bias else None}
    if groups == 1:
        spec = imp.emit("Conv2D", dict(b=b, c=c, n=w.shape[0], **window), [x], sources=sources)
    else:
        spec = imp.emit("GroupedConv2D", dict(b=b, g=groups, c=c // groups, n=w.shape[0] // groups, **window), [x],
                        sources=sources)
    out = Act.of(spec, 0, 0 if x.batch_axis == 0 else None, True)
    if one_d:
        out = imp.reshape(out, (b, w.shape[0], out.shape[3]))
    return [out]


@converter("MaxPool", "AveragePool", "LpPool", act_first=True)
def pool(imp, ins, attrs):
    """A Pooling layer with a square window (an Lp pool costs as an average)."""
    mode = "max" if imp.node.op_type == "MaxPool" else "avg"
    x = ins[0]
    if len(x.shape) != 4:
        raise Unsupported(f"{len(x.shape) - 2}-D pooling")
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    if len(kernel) != 2:
        raise FormatError(f"{imp.where()}: kernel_shape {kernel} does not fit input {x.shape}")
    if kernel[0] != kernel[1]:
        raise Unsupported(f"non-square kernel {kernel}")
    win = _window(imp, x.shape, kernel, attrs, ceil_mode=bool(attrs.get("ceil_mode", 0)), dilation=None)
    (sh, ph), (sw, pw) = win
    if sh != sw or ph != pw:
        raise Unsupported("different strides or pads along height and width")
    b, c, height, width = x.shape
    spec = imp.emit("Pooling", dict(b=b, c=c, height=height, width=width, kernel=kernel[0], stride=sh, pad=ph,
                                    mode=mode), [x])
    return [Act.of(spec, 0, x.batch_axis, True)]


@converter("GlobalAveragePool", "GlobalMaxPool", act_first=True)
def global_pool(imp, ins, attrs):
    """A Pooling over the whole (square) map, else a ReduceMean over the spatial axes."""
    mode = "max" if imp.node.op_type == "GlobalMaxPool" else "avg"
    x = ins[0]
    if len(x.shape) < 3:
        raise FormatError(f"{imp.where()}: global pooling needs an input of rank 3 or more, got {x.shape}")
    if len(x.shape) == 4 and x.shape[2] == x.shape[3]:
        b, c, h, w = x.shape
        spec = imp.emit("Pooling", dict(b=b, c=c, height=h, width=w, kernel=h, stride=h, pad=0, mode=mode), [x])
        return [Act.of(spec, 0, x.batch_axis, True)]
    dims = letters(len(x.shape), x.batch_axis, x.image)
    spec = imp.emit("ReduceMean", dict(shape=list(x.shape), dims=list(dims), reduce=list(dims[2:])), [x])
    out = Act.of(spec, 0, x.batch_axis if x.batch_axis in (0, 1) else None)
    return [imp.reshape(out, x.shape[:2] + (1,) * (len(x.shape) - 2))]
