"""Matrix products: Gemm and 2-D MatMul with a weight become FullyConnected layers,
other MatMuls and Einsum (batched, attention ``q k^T``) become Einsum layers."""

from __future__ import annotations

from math import prod

from pase.errors import FormatError
from pase.io.onnx.convert.norm import elementwise
from pase.io.onnx.convert.registry import Unsupported, converter
from pase.io.onnx.fusion import bias_or_pointwise
from pase.io.onnx.shapes import broadcast
from pase.io.onnx.values import Act, Const


@converter("Gemm", inputs=2)
def gemm(imp, ins, attrs):
    """``op(A) op(B) + C``: a FullyConnected layer for an activation times a weight, else a
    matrix product; a constant C is fused as the bias, an activation C added element-wise."""
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise FormatError(f"{imp.where()}: Gemm needs 2-D inputs, got {a.shape} and {b.shape}")
    if isinstance(a, Act) and attrs.get("transA", 0):
        a = imp.transpose(a, [1, 0])
    elif attrs.get("transA", 0):
        a = Const(a.shape[::-1], None, a.source)
    if isinstance(b, Act) and attrs.get("transB", 0):
        b = imp.transpose(b, [1, 0])
    elif attrs.get("transB", 0):
        b = Const(b.shape[::-1], None, b.source)
    m, k = a.shape
    if b.shape[0] != k:
        raise FormatError(f"{imp.where()}: inner dimensions differ: {a.shape} x {b.shape}")
    n = b.shape[1]
    if isinstance(a, Act) and isinstance(b, Const):
        bias = isinstance(c, Const) and prod(c.shape) > 0
        spec = imp.emit("FullyConnected", dict(b=m, n=n, c=k, pointwise=0, bias=bias), [a],
                        sources={"weight": b, "bias": c})
        out = Act.of(spec, 0, 0 if a.batch_axis == 0 else None, outer=a.outer)
    else:
        out = matmul(imp, a, b)
        if isinstance(c, Const) and prod(c.shape) > 0:
            bias_or_pointwise(out, c)
    if isinstance(c, Act):
        out = elementwise(imp, [out, c], False)
    return [out]


@converter("MatMul", inputs=2)
def matmul_node(imp, ins, attrs):
    """A MatMul node: :func:`matmul` of its inputs."""
    return [matmul(imp, ins[0], ins[1])]


def matmul(imp, a, b) -> Act:
    """``a @ b`` with numpy's broadcasting: FullyConnected for a 2-D activation times a
    weight, else an Einsum whose letters keep the batch axis traced."""
    where = imp.where()
    ra, rb = len(a.shape), len(b.shape)
    if ra == 0 or rb == 0:
        raise FormatError(f"{where}: MatMul of a scalar")
    ka = a.shape[-1]
    kb = b.shape[0] if rb == 1 else b.shape[-2]
    if ka != kb:
        raise FormatError(f"{where}: inner dimensions differ: {a.shape} x {b.shape}")
    if isinstance(a, Act) and isinstance(b, Const) and ra == 2 and rb == 2:
        spec = imp.emit("FullyConnected", dict(b=a.shape[0], n=b.shape[1], c=ka, pointwise=0, bias=False), [a],
                        sources={"weight": b})
        return Act.of(spec, 0, 0 if a.batch_axis == 0 else None, outer=a.outer)
    lead_a = a.shape[:-2] if ra >= 2 else ()
    lead_b = b.shape[:-2] if rb >= 2 else ()
    lead = broadcast([lead_a, lead_b], where)
    weight_b = isinstance(b, Const)
    m_letter, k_letter, n_letter = ("s", "d", "e") if weight_b else ("s", "d", "t")
    # Where the batch axis lands in the output: a leading axis, or the rows (m) of A.
    batch_pos, outer = None, 1
    for x, r in ((a, ra), (b, rb)):
        if not isinstance(x, Act) or x.batch_axis is None:
            continue
        ax = x.batch_axis
        if r >= 2 and ax < r - 2:
            batch_pos = ax + len(lead) - (r - 2)
        elif x is a and r >= 2 and ax == r - 2:
            batch_pos = len(lead)
        if batch_pos is not None:
            outer = x.outer
            break
    if batch_pos == len(lead):
        m_letter = "b"
    spare = [c for c in "shgfijlmopqruvwxyzac" if c not in (m_letter, k_letter, n_letter)]
    lead_letters = ["b" if i == batch_pos else spare.pop(0) for i in range(len(lead))]
    sizes = {ll: d for ll, d in zip(lead_letters, lead)}
    sizes[k_letter] = ka
    if ra >= 2:
        sizes[m_letter] = a.shape[-2]
    if rb >= 2:
        sizes[n_letter] = b.shape[-1]

    def operand(x, r, tail):
        lead_x = x.shape[:-2] if r >= 2 else ()
        shift = len(lead) - len(lead_x)
        keep = [i for i, d in enumerate(lead_x) if not (d == 1 and lead[i + shift] != 1)]
        letters = "".join(lead_letters[i + shift] for i in keep) + tail
        if len(keep) != len(lead_x) and isinstance(x, Act):
            x = imp.reshape(x, tuple(lead_x[i] for i in keep) + x.shape[len(lead_x):])
        return x, letters

    a2, ta = operand(a, ra, (m_letter if ra >= 2 else "") + k_letter)
    b2, tb = operand(b, rb, k_letter + (n_letter if rb >= 2 else ""))
    out_term = "".join(lead_letters) + (m_letter if ra >= 2 else "") + (n_letter if rb >= 2 else "")
    eq = f"{ta},{tb}->{out_term}"
    weights = [i for i, x in enumerate((a2, b2)) if isinstance(x, Const)]
    inputs = [x for x in (a2, b2) if isinstance(x, Act)]
    spec = imp.emit("Einsum", dict(equation=eq, sizes=sizes, weights=weights, pointwise=0, bias=False), inputs,
                    sources={f"w{i}": (a2, b2)[i] for i in weights})
    return Act.of(spec, 0, out_term.index("b") if "b" in out_term and batch_pos is not None else None, outer=outer)


@converter("Einsum")
def einsum(imp, ins, attrs):
    """An Einsum layer with the node's equation (implicit output made explicit); constant
    operands are its weights."""
    eq = str(attrs.get("equation", "")).replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->", 1)
    else:
        lhs = eq
        letters = [c for c in lhs if c.isalpha()]
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise FormatError(f"{imp.where()}: equation {eq!r} has {len(terms)} operands, the node {len(ins)}")
    if "." in eq:
        raise Unsupported("ellipsis in the equation")
    sizes = {}
    for t, x in zip(terms, ins):
        if len(t) != len(x.shape) or not t.isalpha():
            raise FormatError(f"{imp.where()}: term {t!r} does not fit an operand of shape {x.shape}")
        if len(set(t)) != len(t):
            raise Unsupported("repeated index (diagonal)")
        for c, d in zip(t, x.shape):
            if sizes.setdefault(c, d) != d:
                raise Unsupported("broadcasting in the equation")
    weights = [i for i, x in enumerate(ins) if isinstance(x, Const)]
    inputs = [x for x in ins if isinstance(x, Act)]
    spec = imp.emit("Einsum", dict(equation=f"{lhs}->{rhs}", sizes=sizes, weights=weights, pointwise=0, bias=False),
                    inputs, sources={f"w{i}": ins[i] for i in weights})
    return [Act.of(spec, 0, rhs.index("b") if "b" in rhs else None)]
