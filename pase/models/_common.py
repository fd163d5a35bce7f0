"""Helpers shared by the sample builders: a graph under construction that tracks tensor shapes.

Not public: the builders in :mod:`pase.models` are the interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pase import ops as L
from pase.errors import GraphError
from pase.ir.graph import Graph, Layer

Source = str | tuple[str, int] | None


def check_positive(model: str, **values) -> None:
    """Raise ``GraphError`` naming the model and argument unless every value is a positive int."""
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise GraphError(f"{model}: {key} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Image:
    """An image-shaped activation ``(b, c, h, w)`` and the output that produces it (None: graph input)."""

    src: Source
    c: int
    h: int
    w: int


class ConvNetBuilder:
    """Adds convolutional-network layers to a :class:`Graph`, threading :class:`Image` handles.

    Batch normalisation is its own ``BatchNorm`` vertex after a bias-free
    convolution. The ReLU that follows a convolution (directly or after its
    BatchNorm) is counted as one fused pointwise op of the convolution: the
    same tensor size, so the same FLOPs, without a vertex of its own.
    """

    def __init__(self, name: str, batch: int):
        self.graph = Graph(name)
        self.b = batch

    def add(self, layer: Layer, inputs: Sequence[Source] = ()) -> Layer:
        self.graph.add_layer(layer, list(inputs))
        return layer

    def conv(self, name: str, x: Image, n: int, r: int, s: int | None = None, *, stride: int = 1,
             pad: int | tuple[int, int] = 0, relu: bool = True, bn: bool = True, bn_name: str | None = None,
             bias: bool | None = None) -> Image:
        """Convolution (with a bias unless ``bn`` by default), then a BatchNorm vertex when ``bn``."""
        layer = self.add(
            L.conv2d(name, self.b, x.c, x.h, x.w, n, r, s, stride=stride, pad=pad,
                     pointwise=int(relu), bias=(not bn) if bias is None else bias),
            [x.src],
        )
        _, _, h, w = layer.outputs[0].shape
        out = Image(name, n, h, w)
        return self.batch_norm(bn_name or f"{name}.bn", out) if bn else out

    def batch_norm(self, name: str, x: Image) -> Image:
        self.add(L.batch_norm(name, self.b, x.c, x.h, x.w), [x.src])
        return Image(name, x.c, x.h, x.w)

    def pool(self, name: str, x: Image, kernel: int, stride: int | None = None, *, pad: int = 0,
             mode: str = "max") -> Image:
        layer = self.add(L.pooling(name, self.b, x.c, x.h, x.w, kernel, stride, pad=pad, mode=mode), [x.src])
        _, c, h, w = layer.outputs[0].shape
        return Image(name, c, h, w)

    def concat(self, name: str, xs: Sequence[Image]) -> Image:
        shapes = [(self.b, x.c, x.h, x.w) for x in xs]
        self.add(L.concat(name, shapes, ("b", "c", "h", "w"), "c"), [x.src for x in xs])
        return Image(name, sum(x.c for x in xs), xs[0].h, xs[0].w)

    def residual(self, name: str, xs: Sequence[Image], *, relu: bool = True) -> Image:
        x = xs[0]
        self.add(L.elementwise(name, (self.b, x.c, x.h, x.w), ("b", "c", "h", "w"), inputs=len(xs),
                               pointwise=int(relu)), [y.src for y in xs])
        return Image(name, x.c, x.h, x.w)

    def classifier(self, x: Image, classes: int, *, pool: str = "avgpool", fc: str = "fc",
                   loss: str = "loss") -> Graph:
        """Global average pool (a ReduceMean over ``h w``), fully connected layer, softmax cross-entropy."""
        self.add(L.reduce_mean(pool, (self.b, x.c, x.h, x.w), ("b", "c", "h", "w"), ("h", "w")), [x.src])
        return self.head(pool, x.c, classes, fc=fc, loss=loss)

    def head(self, src: Source, features: int, classes: int, *, fc: str = "fc", loss: str = "loss") -> Graph:
        """Final fully connected layer to ``classes`` logits and the softmax cross-entropy loss."""
        self.add(L.fully_connected(fc, self.b, classes, features), [src])
        self.add(L.softmax_cross_entropy(loss, (self.b, classes), ("b", "n")), [fc])
        self.graph.validate()
        return self.graph
