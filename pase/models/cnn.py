"""Convolutional sample graphs: AlexNet, InceptionV3, ResNet-101, DenseNet-121.

Each follows torchvision's definition of the network, so the parameter counts
can be checked against published ones. Conventions shared by all four:

* a convolution's iteration space is ``b c h w n r s`` and a fully connected
  layer's ``b n c``; activations between layers are ``(b, c, h, w)``;
* BatchNorm is a vertex of its own after a bias-free convolution; the ReLU
  after a convolution (directly or after its BatchNorm) is a fused pointwise
  op of the convolution, the ReLU after a residual add a fused op of the add;
* dropout is left out (no parameters, negligible FLOPs); the global average
  pool is a ``ReduceMean`` over ``h w``; the loss is a ``SoftmaxCrossEntropy``
  over ``b n``.
"""

from __future__ import annotations

from pase import ops as L
from pase.ir.graph import Graph
from pase.models._common import ConvNetBuilder, Image, check_positive

__all__ = ["alexnet", "inception3", "resnet101", "densenet121"]


def alexnet(batch: int = 128, classes: int = 1000) -> Graph:
    """AlexNet as in torchvision (the one-GPU variant of Krizhevsky's "one weird trick").

    224 x 224 x 3 input; five convolutions with 64, 192, 384, 256, 256 filters
    (11x11 stride 4, 5x5, 3x3, 3x3, 3x3), three 3x3 stride-2 max pools, a
    flatten to 9216 features, fully connected layers 4096, 4096, ``classes``,
    softmax cross-entropy; ReLUs fused into the convolutions and the first two
    fully connected layers (``pointwise=1``). 13 layers.

    Parameters: 61,100,840 with 1000 classes. Forward multiply-adds: about
    0.71 G per image.

    Examples
    --------
    >>> g = alexnet(batch=32)
    >>> len(g), g.parameter_count
    (13, 61100840)
    """
    check_positive("alexnet", batch=batch, classes=classes)
    net = ConvNetBuilder("alexnet", batch)
    x = Image(None, 3, 224, 224)
    x = net.conv("conv1", x, 64, 11, stride=4, pad=2, bn=False)
    x = net.pool("pool1", x, 3, 2)
    x = net.conv("conv2", x, 192, 5, pad=2, bn=False)
    x = net.pool("pool2", x, 3, 2)
    x = net.conv("conv3", x, 384, 3, pad=1, bn=False)
    x = net.conv("conv4", x, 256, 3, pad=1, bn=False)
    x = net.conv("conv5", x, 256, 3, pad=1, bn=False)
    x = net.pool("pool5", x, 3, 2)
    features = x.c * x.h * x.w
    b = batch
    net.add(L.reshape("flatten", (b, x.c, x.h, x.w), ("b", "c", "h", "w"), (b, features)), [x.src])
    net.add(L.fully_connected("fc6", b, 4096, features, pointwise=1), ["flatten"])
    net.add(L.fully_connected("fc7", b, 4096, 4096, pointwise=1), ["fc6"])
    return net.head("fc7", 4096, classes, fc="fc8", loss="softmax")


# -- ResNet ---------------------------------------------------------------------------------


def _bottleneck(net: ConvNetBuilder, name: str, x: Image, width: int, stride: int) -> Image:
    """ResNet v1.5 bottleneck: 1x1 (width), 3x3 (width, stride), 1x1 (4 width); projection shortcut if needed."""
    y = net.conv(f"{name}.conv1", x, width, 1, bn_name=f"{name}.bn1")
    y = net.conv(f"{name}.conv2", y, width, 3, stride=stride, pad=1, bn_name=f"{name}.bn2")
    y = net.conv(f"{name}.conv3", y, 4 * width, 1, relu=False, bn_name=f"{name}.bn3")
    shortcut = x
    if stride != 1 or x.c != 4 * width:
        shortcut = net.conv(f"{name}.downsample", x, 4 * width, 1, stride=stride, relu=False,
                            bn_name=f"{name}.downsample.bn")
    return net.residual(f"{name}.add", [y, shortcut], relu=True)


def _resnet(name: str, blocks: tuple[int, ...], batch: int, classes: int) -> Graph:
    check_positive(name, batch=batch, classes=classes)
    net = ConvNetBuilder(name, batch)
    x = net.conv("conv1", Image(None, 3, 224, 224), 64, 7, stride=2, pad=3, bn_name="bn1")
    x = net.pool("maxpool", x, 3, 2, pad=1)
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        for i in range(count):
            x = _bottleneck(net, f"layer{stage + 1}.{i}", x, width, 2 if i == 0 and stage > 0 else 1)
    return net.classifier(x, classes)


def resnet101(batch: int = 128, classes: int = 1000) -> Graph:
    """ResNet-101 (He et al. 2016) as torchvision's v1.5: stride on the 3x3 convolution of a bottleneck.

    224 x 224 x 3 input; 7x7 stride-2 convolution (64), 3x3 stride-2 max
    pool; 3, 4, 23, 3 bottleneck blocks of widths 64, 128, 256, 512 (output
    4x width), each 1x1, 3x3, 1x1 bias-free convolutions with BatchNorm
    vertices, a projection shortcut (1x1 convolution + BatchNorm) on the
    first block of each stage, and a residual ``Elementwise`` add with the
    ReLU fused (``pointwise=1``); global average pool, fully connected layer,
    softmax cross-entropy. 245 layers.

    Parameters: 44,549,160 with 1000 classes. Forward multiply-adds: about
    7.8 G per image.

    Examples
    --------
    >>> g = resnet101(batch=32)
    >>> len(g), g.parameter_count
    (245, 44549160)
    """
    return _resnet("resnet101", (3, 4, 23, 3), batch, classes)


# -- InceptionV3 ----------------------------------------------------------------------------


def _inception_a(net, name, x, pool_features):
    b1 = net.conv(f"{name}.branch1x1", x, 64, 1)
    b5 = net.conv(f"{name}.branch5x5_1", x, 48, 1)
    b5 = net.conv(f"{name}.branch5x5_2", b5, 64, 5, pad=2)
    b3 = net.conv(f"{name}.branch3x3dbl_1", x, 64, 1)
    b3 = net.conv(f"{name}.branch3x3dbl_2", b3, 96, 3, pad=1)
    b3 = net.conv(f"{name}.branch3x3dbl_3", b3, 96, 3, pad=1)
    bp = net.pool(f"{name}.avgpool", x, 3, 1, pad=1, mode="avg")
    bp = net.conv(f"{name}.branch_pool", bp, pool_features, 1)
    return net.concat(f"{name}.concat", [b1, b5, b3, bp])


def _inception_b(net, name, x):
    b3 = net.conv(f"{name}.branch3x3", x, 384, 3, stride=2)
    bd = net.conv(f"{name}.branch3x3dbl_1", x, 64, 1)
    bd = net.conv(f"{name}.branch3x3dbl_2", bd, 96, 3, pad=1)
    bd = net.conv(f"{name}.branch3x3dbl_3", bd, 96, 3, stride=2)
    bp = net.pool(f"{name}.maxpool", x, 3, 2)
    return net.concat(f"{name}.concat", [b3, bd, bp])


def _inception_c(net, name, x, c7):
    b1 = net.conv(f"{name}.branch1x1", x, 192, 1)
    b7 = net.conv(f"{name}.branch7x7_1", x, c7, 1)
    b7 = net.conv(f"{name}.branch7x7_2", b7, c7, 1, 7, pad=(0, 3))
    b7 = net.conv(f"{name}.branch7x7_3", b7, 192, 7, 1, pad=(3, 0))
    bd = net.conv(f"{name}.branch7x7dbl_1", x, c7, 1)
    bd = net.conv(f"{name}.branch7x7dbl_2", bd, c7, 7, 1, pad=(3, 0))
    bd = net.conv(f"{name}.branch7x7dbl_3", bd, c7, 1, 7, pad=(0, 3))
    bd = net.conv(f"{name}.branch7x7dbl_4", bd, c7, 7, 1, pad=(3, 0))
    bd = net.conv(f"{name}.branch7x7dbl_5", bd, 192, 1, 7, pad=(0, 3))
    bp = net.pool(f"{name}.avgpool", x, 3, 1, pad=1, mode="avg")
    bp = net.conv(f"{name}.branch_pool", bp, 192, 1)
    return net.concat(f"{name}.concat", [b1, b7, bd, bp])


def _inception_d(net, name, x):
    b3 = net.conv(f"{name}.branch3x3_1", x, 192, 1)
    b3 = net.conv(f"{name}.branch3x3_2", b3, 320, 3, stride=2)
    b7 = net.conv(f"{name}.branch7x7x3_1", x, 192, 1)
    b7 = net.conv(f"{name}.branch7x7x3_2", b7, 192, 1, 7, pad=(0, 3))
    b7 = net.conv(f"{name}.branch7x7x3_3", b7, 192, 7, 1, pad=(3, 0))
    b7 = net.conv(f"{name}.branch7x7x3_4", b7, 192, 3, stride=2)
    bp = net.pool(f"{name}.maxpool", x, 3, 2)
    return net.concat(f"{name}.concat", [b3, b7, bp])


def _inception_e(net, name, x):
    b1 = net.conv(f"{name}.branch1x1", x, 320, 1)
    b3 = net.conv(f"{name}.branch3x3_1", x, 384, 1)
    b3 = net.concat(f"{name}.branch3x3.concat", [
        net.conv(f"{name}.branch3x3_2a", b3, 384, 1, 3, pad=(0, 1)),
        net.conv(f"{name}.branch3x3_2b", b3, 384, 3, 1, pad=(1, 0)),
    ])
    bd = net.conv(f"{name}.branch3x3dbl_1", x, 448, 1)
    bd = net.conv(f"{name}.branch3x3dbl_2", bd, 384, 3, pad=1)
    bd = net.concat(f"{name}.branch3x3dbl.concat", [
        net.conv(f"{name}.branch3x3dbl_3a", bd, 384, 1, 3, pad=(0, 1)),
        net.conv(f"{name}.branch3x3dbl_3b", bd, 384, 3, 1, pad=(1, 0)),
    ])
    bp = net.pool(f"{name}.avgpool", x, 3, 1, pad=1, mode="avg")
    bp = net.conv(f"{name}.branch_pool", bp, 192, 1)
    return net.concat(f"{name}.concat", [b1, b3, bd, bp])


def inception3(batch: int = 128, classes: int = 1000) -> Graph:
    """InceptionV3 (Szegedy et al. 2016) as torchvision's ``inception_v3`` without the auxiliary head.

    299 x 299 x 3 input; a stem of five convolutions and two max pools;
    modules Mixed_5b-5d (InceptionA), 6a (InceptionB), 6b-6e (InceptionC,
    with 1x7 / 7x1 factorised convolutions), 7a (InceptionD), 7b-7c
    (InceptionE, with nested concatenations); global average pool over 8 x 8,
    fully connected layer, softmax cross-entropy. Every convolution is
    bias-free with a BatchNorm vertex and a fused ReLU: 94 convolutions, 94
    BatchNorms, 13 pools, 15 concats, 219 layers in all (the paper's graph has
    about 220).

    Parameters: 23,834,568 with 1000 classes. Forward multiply-adds: about
    5.7 G per image.

    Examples
    --------
    >>> g = inception3(batch=32)
    >>> len(g), g.parameter_count
    (219, 23834568)
    """
    check_positive("inception3", batch=batch, classes=classes)
    net = ConvNetBuilder("inception3", batch)
    x = Image(None, 3, 299, 299)
    x = net.conv("Conv2d_1a_3x3", x, 32, 3, stride=2)
    x = net.conv("Conv2d_2a_3x3", x, 32, 3)
    x = net.conv("Conv2d_2b_3x3", x, 64, 3, pad=1)
    x = net.pool("maxpool1", x, 3, 2)
    x = net.conv("Conv2d_3b_1x1", x, 80, 1)
    x = net.conv("Conv2d_4a_3x3", x, 192, 3)
    x = net.pool("maxpool2", x, 3, 2)
    x = _inception_a(net, "Mixed_5b", x, 32)
    x = _inception_a(net, "Mixed_5c", x, 64)
    x = _inception_a(net, "Mixed_5d", x, 64)
    x = _inception_b(net, "Mixed_6a", x)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = _inception_c(net, name, x, c7)
    x = _inception_d(net, "Mixed_7a", x)
    x = _inception_e(net, "Mixed_7b", x)
    x = _inception_e(net, "Mixed_7c", x)
    return net.classifier(x, classes)


# -- DenseNet -------------------------------------------------------------------------------


def densenet121(batch: int = 128, classes: int = 1000) -> Graph:
    """DenseNet-121 (Huang et al. 2017) as torchvision's ``densenet121``: growth 32, blocks 6, 12, 24, 16.

    224 x 224 x 3 input; 7x7 stride-2 convolution (64) with BatchNorm, 3x3
    stride-2 max pool; four dense blocks whose every layer reads the
    concatenation of the block input and *all* earlier layers' outputs (a
    ``Concat`` vertex per layer, fed directly by each of them: the dense
    connectivity that makes this the paper's hard case), each layer BatchNorm,
    1x1 convolution (128), BatchNorm, 3x3 convolution (32); transitions
    BatchNorm, 1x1 convolution halving the channels, 2x2 average pool; final
    BatchNorm, global average pool, fully connected layer, softmax
    cross-entropy. 306 layers.

    The ReLU after a BatchNorm that normalises a concatenation has no vertex
    (BatchNorm has no fused-op count); it is about 0.2% of the FLOPs. The ReLU
    after the bottleneck's BatchNorm is fused into its 1x1 convolution.

    Parameters: 7,978,856 with 1000 classes. Forward multiply-adds: about
    2.9 G per image.

    Examples
    --------
    >>> g = densenet121(batch=32)
    >>> len(g), g.parameter_count
    (306, 7978856)
    """
    check_positive("densenet121", batch=batch, classes=classes)
    growth, bottleneck = 32, 4 * 32
    net = ConvNetBuilder("densenet121", batch)
    x = net.conv("conv0", Image(None, 3, 224, 224), 64, 7, stride=2, pad=3, bn_name="norm0")
    x = net.pool("pool0", x, 3, 2, pad=1)
    for block, count in enumerate((6, 12, 24, 16), start=1):
        features = [x]
        for i in range(1, count + 1):
            name = f"denseblock{block}.denselayer{i}"
            inp = features[0] if len(features) == 1 else net.concat(f"{name}.concat", features)
            y = net.batch_norm(f"{name}.norm1", inp)
            y = net.conv(f"{name}.conv1", y, bottleneck, 1, bn_name=f"{name}.norm2")
            y = net.conv(f"{name}.conv2", y, growth, 3, pad=1, bn=False, relu=False, bias=False)
            features.append(y)
        x = net.concat(f"denseblock{block}.concat", features)
        if block < 4:
            name = f"transition{block}"
            x = net.batch_norm(f"{name}.norm", x)
            x = net.conv(f"{name}.conv", x, x.c // 2, 1, bn=False, relu=False, bias=False)
            x = net.pool(f"{name}.pool", x, 2, 2, mode="avg")
    x = net.batch_norm("norm5", x)
    return net.classifier(x, classes, fc="classifier")
