"""What the importer holds for each ONNX tensor, and the layers it will build.

Every tensor is an :class:`Act` (an activation: a layer's output or a graph
input) or a :class:`Const` (a constant, with its value when it is small enough
to fold). A :class:`Spec` is a pase layer still to be built: fusion edits its
parameters until :mod:`pase.io.onnx.build` turns the specs into a graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Spec:
    """A pase layer to build: builder op, name, keyword params, and one activation per input slot."""

    op: str
    name: str
    params: dict
    inputs: list  # Act (with or without producer) or None per slot
    out_shapes: list
    node: str
    logsoftmax: bool = False
    # Weight name -> the initializer it is (Const.source): weights that name the same
    # initializer are one parameter, tied in the graph.
    sources: dict = field(default_factory=dict)
    # Trainable initializers this layer reads outside its weight slots (a position
    # embedding added to its output, a class token concatenated, an RMSNorm scale):
    # (initializer, its full shape, the shape it is read at), extra weights of the layer.
    extras: list = field(default_factory=list)


@dataclass(eq=False)
class Act:
    """An activation: output ``index`` of layer ``src``, or a graph input when ``src`` is None."""

    shape: tuple
    src: Spec | None = None
    index: int = 0
    batch_axis: int | None = None
    image: bool = False
    outer: int = 1  # the batch axis holds outer x batch x inner elements (merged axes)

    def key(self):
        """Identifies the tensor: equal for two Acts of the same layer output."""
        return (id(self.src), self.index) if self.src is not None else id(self)

    @classmethod
    def of(cls, spec: Spec, index: int = 0, batch_axis: int | None = None, image: bool = False,
           outer: int = 1) -> Act:
        """Output ``index`` of layer ``spec``; ``outer`` is kept only with a batch axis."""
        return cls(tuple(spec.out_shapes[index]), spec, index, batch_axis, image, outer if batch_axis is not None else 1)


@dataclass(eq=False)
class Const:
    """A constant tensor: its shape, and its value when known and small enough to fold."""

    shape: tuple
    value: np.ndarray | None = None
    # The trainable initializer this constant is, or a view of (transposed, sliced,
    # broadcast, rows gathered): its name; "" for anything else.
    source: str = ""

    @classmethod
    def of(cls, value, source: str = "") -> Const:
        """A constant holding ``value``, its shape taken from the array."""
        value = np.asarray(value)
        return cls(tuple(int(d) for d in value.shape), value, source)


@dataclass(eq=False)
class Unknown:
    """A tensor whose shape cannot be known: an output of an unsupported operator that
    shape inference does not size. Nodes reading it are not converted (their outputs are
    Unknown too), so that no shape is guessed and every unsupported operator is listed."""

    shape: tuple = ()
