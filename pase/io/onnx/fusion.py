"""Fusion, the paper's convention: a bias or a pointwise op applied to one layer's
output becomes a parameter of that layer instead of a layer of its own."""

from __future__ import annotations

from pase.io.onnx.values import Act, Const, Spec


def fusion_target(act: Act) -> Spec | None:
    """The layer that takes a pointwise op applied to ``act``: its producer, looking
    through data movement and batch norms; None when there is none."""
    spec = act.src
    seen = 0
    while spec is not None and seen < 64:
        if "pointwise" in spec.params:
            return spec
        if spec.op in ("Reshape", "Transpose", "Split", "BatchNorm") and isinstance(spec.inputs[0], Act):
            spec = spec.inputs[0].src
            seen += 1
            continue
        return None
    return None


def try_bias(act: Act, const: Const) -> bool:
    """Add constant ``const`` to ``act`` as the bias of the layer that made it, when that
    layer has no bias yet and ``const`` runs along its output features; True when done."""
    spec = act.src
    if spec is None or spec.params.get("bias", True) or act.index != 0:
        return False
    shape = tuple(const.shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    out = act.shape
    if spec.op in ("FullyConnected", "Einsum"):
        if spec.op == "Einsum" and not spec.params.get("weights"):
            return False
        if shape != (out[-1],):
            return False
        if spec.op == "Einsum":
            eq = spec.params["equation"]
            lhs, rhs = eq.split("->")
            weight_letters = "".join(lhs.split(",")[i] for i in spec.params["weights"])
            if rhs[-1] not in weight_letters:
                return False
    elif spec.op == "Conv2D":
        if shape not in ((out[1], 1, 1),):
            return False
    else:
        return False
    spec.params["bias"] = True
    if const.source:
        spec.sources["bias"] = const.source
    return True


def bias_or_pointwise(out: Act, c: Const) -> None:
    """Fuse the addition of constant ``c`` to ``out``: a bias when it is one, else a pointwise op."""
    if not try_bias(out, c):
        target = fusion_target(out)
        if target is not None:
            target.params["pointwise"] = target.params.get("pointwise", 0) + 1
