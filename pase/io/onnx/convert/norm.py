"""Element-wise and normalising operators: pointwise ops (fused into the layer that
made their input where possible), batch, instance and layer normalisation, softmax
and the cross-entropy losses."""

from __future__ import annotations

from math import prod

from pase.errors import FormatError
from pase.io.onnx.convert.registry import converter
from pase.io.onnx.fusion import fusion_target, try_bias
from pase.io.onnx.shapes import broadcast, letters, norm_axis
from pase.io.onnx.values import Act, Const

# -- element-wise ---------------------------------------------------------------------------------


def elementwise(imp, ins: list, pointwise: bool, out_shape=None) -> Act:
    """An element-wise op over ``ins``: fused as a bias or pointwise op when it reads one
    activation, an Einsum when one operand is broadcast, else an Elementwise layer.
    Constants folded at the export batch are resized to this import's; trainable
    initializers among ``ins`` (a position embedding, an RMSNorm scale) become extra
    weights of the layer that takes the op. Raises FormatError when the shapes do not
    broadcast."""
    acts = [v for v in ins if isinstance(v, Act)]
    lead = next((a for a in acts if a.batch_axis is not None), acts[0])
    ins = [imp.rebatch(v, lead) if isinstance(v, Const) else v for v in ins]
    consts = [v for v in ins if isinstance(v, Const)]
    shapes = [v.shape for v in ins if v is not None]
    if out_shape is None:
        try:
            out_shape = broadcast(shapes, imp.where())
        except FormatError as exc:
            raise FormatError(f"{exc}{imp.batch_hint()}") from None
    out_shape = tuple(out_shape)
    shift = len(out_shape) - len(lead.shape)
    axis = lead.batch_axis + shift if lead.batch_axis is not None and shift >= 0 else None
    outer = lead.outer
    if axis is not None and out_shape[axis] != lead.shape[lead.batch_axis]:
        axis, outer = None, 1
    image = lead.image and len(out_shape) == 4
    distinct: dict = {}
    for a in acts:
        if a.src is not None or a.shape == out_shape:
            distinct.setdefault(a.key(), a)
    live = [a for a in distinct.values() if a.src is not None]
    if not live:
        return Act(out_shape, None, 0, axis, image, outer)
    dims = letters(len(out_shape), axis, image)
    if len(distinct) == 1 and live[0].shape == out_shape:
        x = live[0]
        if imp.node.op_type == "Add" and len(consts) == 1 and try_bias(x, consts[0]):
            return x
        # One activation (x + c, x * f(x)...): a pointwise op of the layer that made x.
        target = fusion_target(x)
        if target is not None:
            target.params["pointwise"] = target.params.get("pointwise", 0) + 1
            _keep_parameters(imp, target, consts)
            return x
        spec = imp.emit("Elementwise", dict(shape=list(out_shape), dims=list(dims), inputs=1, pointwise=1), [x])
        _keep_parameters(imp, spec, consts)
        return Act.of(spec, 0, axis, image, outer)
    full = [a for a in distinct.values() if a.shape == out_shape]
    partial = [a for a in distinct.values() if a.shape != out_shape]
    if len(full) == 1 and len(partial) == 1:
        einsum = _broadcast_einsum(imp, full[0], partial[0], out_shape, dims)
        if einsum is not None:
            _keep_parameters(imp, einsum, consts)
            return Act.of(einsum, 0, axis, image, outer)
    inputs = full + [imp.adapt(a, out_shape) for a in partial]
    spec = imp.emit("Elementwise", dict(shape=list(out_shape), dims=list(dims), inputs=len(inputs),
                                        pointwise=int(pointwise)), inputs)
    _keep_parameters(imp, spec, consts)
    return Act.of(spec, 0, axis, image, outer)


def _keep_parameters(imp, spec, consts) -> None:
    """The trainable initializers among ``consts`` as extra weights of layer ``spec``."""
    for c in consts:
        imp.extra_weight(spec, c)


def _broadcast_einsum(imp, full: Act, part: Act, out_shape, dims):
    """A binary op with one operand broadcast: an Einsum such as ``bhst,bt->bhst``."""
    shift = len(out_shape) - len(part.shape)
    if shift < 0:
        return None
    keep = [i for i, d in enumerate(part.shape) if d == out_shape[i + shift] and d > 1]
    if not keep:
        return None
    squeezed = tuple(part.shape[i] for i in keep)
    if any(d != 1 for i, d in enumerate(part.shape) if i not in keep):
        return None
    src = imp.reshape(part, squeezed)
    term = "".join(dims[i + shift] for i in keep)
    eq = f"{''.join(dims)},{term}->{''.join(dims)}"
    return imp.emit("Einsum", dict(equation=eq, sizes=dict(zip(dims, out_shape))), [full, src])


@converter("Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf",
           "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Softplus", "Softsign", "Mish", "Clip", "Sin", "Cos",
           "Sign", "Floor", "Ceil", "Round", "Not", "ThresholdedRelu", "IsNaN", "IsInf", "Swish",
           act_first=True, const_shape="first")
@converter("PRelu", inputs=2, act_first=True, const_shape="first")
def pointwise_unary(imp, ins, attrs):
    """A pointwise function of input 0 (PRelu's slope is a weight)."""
    return [elementwise(imp, [ins[0]], True)]


@converter("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
           "Xor", "Mod", "BitwiseAnd", "BitwiseOr", inputs=2, const_shape="broadcast")
@converter("Where", inputs=3, const_shape="broadcast")
@converter("Max", "Min", "Sum", "Mean", const_shape="broadcast")
def pointwise_nary(imp, ins, attrs):
    """A broadcasting element-wise op of its inputs; sums and differences cost no pointwise FLOPs."""
    return [elementwise(imp, [v for v in ins if v is not None], imp.node.op_type not in ("Add", "Sub", "Sum"))]


# -- normalisation --------------------------------------------------------------------------------


@converter("BatchNormalization", inputs=5, act_first=True)
@converter("InstanceNormalization", inputs=3, act_first=True)
def batch_norm(imp, ins, attrs):
    """A BatchNorm over the channels (axis 1), the input viewed as ``b c h w``."""
    x = ins[0]
    if len(x.shape) < 2:
        raise FormatError(f"{imp.where()}: batch normalisation of a tensor of rank {len(x.shape)}")
    shape4 = x.shape if len(x.shape) == 4 else (x.shape[0], x.shape[1], 1, prod(x.shape[2:]))
    x4 = imp.reshape(x, shape4)
    spec = imp.emit("BatchNorm", dict(b=shape4[0], c=shape4[1], h=shape4[2], w=shape4[3]), [x4])
    out = imp.reshape(Act.of(spec, 0, x4.batch_axis, True), x.shape)
    return [out] + [Act((x.shape[1],), None) for _ in range(4)]


def _normalised(imp, x: Act, axis: int, op: str, **extra):
    """A LayerNorm/Softmax over axes ``axis..`` (merged into one by a reshape when several)."""
    rank = len(x.shape)
    axis = norm_axis(axis, rank, imp.where())
    shape = x.shape if axis == rank - 1 else x.shape[:axis] + (prod(x.shape[axis:]),)
    x2 = imp.reshape(x, shape)
    dims = letters(len(shape), x2.batch_axis, x2.image)
    spec = imp.emit(op, dict(shape=list(shape), dims=list(dims), axis=dims[-1], **extra), [x2])
    return spec, x2


@converter("LayerNormalization", inputs=2, act_first=True)
def layer_norm(imp, ins, attrs):
    """A LayerNorm over the axes from ``axis`` on; mean and inverse deviation as loose outputs."""
    x = ins[0]
    spec, x2 = _normalised(imp, x, int(attrs.get("axis", -1)), "LayerNorm")
    out = imp.reshape(Act.of(spec, 0, x2.batch_axis, x2.image), x.shape)
    return [out, Act((), None), Act((), None)]


@converter("Softmax", "LogSoftmax", act_first=True)
def softmax(imp, ins, attrs):
    """A Softmax along ``axis`` (before opset 13: over the axes from ``axis`` on), marked
    when it is a LogSoftmax so that a following NLL loss can fuse with it."""
    log = imp.node.op_type == "LogSoftmax"
    x = ins[0]
    rank = len(x.shape)
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    axis = norm_axis(axis, rank, imp.where())
    if imp.opset >= 13 or axis == rank - 1:
        dims = letters(rank, x.batch_axis, x.image)
        spec = imp.emit("Softmax", dict(shape=list(x.shape), dims=list(dims), axis=dims[axis]), [x])
        spec.logsoftmax = log
        return [Act.of(spec, 0, x.batch_axis, x.image)]
    spec, x2 = _normalised(imp, x, axis, "Softmax")
    spec.logsoftmax = log
    return [imp.reshape(Act.of(spec, 0, x2.batch_axis), x.shape)]


# -- losses ---------------------------------------------------------------------------------------


def _loss(imp, scores: Act, labels, reduction: str, fuse_from_logsoftmax: bool):
    """A SoftmaxCrossEntropy of ``scores`` (classes on axis 1) against ``labels``; with
    ``fuse_from_logsoftmax``, the LogSoftmax that made ``scores`` becomes it."""
    if len(scores.shape) < 2:
        raise FormatError(f"{imp.where()}: scores of shape {scores.shape} have no class axis")
    label_shape = scores.shape[:1] + scores.shape[2:]
    label_act = labels if isinstance(labels, Act) and labels.src is not None else None
    if label_act is not None and label_act.shape != label_shape:
        label_act = imp.adapt(label_act, label_shape)
    spec = scores.src
    if (fuse_from_logsoftmax and spec is not None and spec.op == "Softmax" and spec.logsoftmax
            and scores.index == 0 and spec.params["axis"] == spec.params["dims"][1]
            and tuple(spec.params["shape"]) == scores.shape):
        # LogSoftmax -> NLL loss: one SoftmaxCrossEntropy vertex.
        spec.op = "SoftmaxCrossEntropy"
        spec.inputs = [spec.inputs[0], label_act]
        spec.out_shapes = [label_shape]
        out_spec = spec
    else:
        dims = letters(len(scores.shape), scores.batch_axis)
        out_spec = imp.emit("SoftmaxCrossEntropy", dict(shape=list(scores.shape), dims=list(dims), axis=dims[1]),
                            [scores, label_act])
    if reduction == "none":
        return Act.of(out_spec, 0, scores.batch_axis if scores.batch_axis == 0 else None)
    return Act((), None)


@converter("SoftmaxCrossEntropyLoss", inputs=2, act_first=True)
def softmax_cross_entropy(imp, ins, attrs):
    """The loss, and the log-probabilities as a loose output."""
    loss = _loss(imp, ins[0], ins[1], attrs.get("reduction", "mean"), False)
    return [loss, Act(ins[0].shape, None)]


@converter("NegativeLogLikelihoodLoss", inputs=2, act_first=True)
def nll_loss(imp, ins, attrs):
    """The loss, one vertex with the LogSoftmax before it when nothing else reads that."""
    single = imp.consumers.get(imp.node.input[0], 0) == 1
    return [_loss(imp, ins[0], ins[1], attrs.get("reduction", "mean"), single)]
