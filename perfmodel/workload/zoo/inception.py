"""Inception-v3 (Szegedy et al. 2016) as ``torchvision.models.inception_v3``.

27,161,264 parameters with the auxiliary classifier (torchvision's default when built without
weights), 23,834,568 without. Every ``BasicConv2d`` is convolution (no bias) + batch norm + ReLU.
Each Inception module is one block. Branches that read the same input count that input once.
"""

from __future__ import annotations

from perfmodel.workload._net import Net, Shape
from perfmodel.workload.zoo.cnn import _conv_bn_relu, _image_input, classifier, loss

K = int | tuple[int, int]


class _Branches:
    """Runs branches from one input; the 2nd and later branches do not re-count that input."""

    def __init__(self, net: Net, x: Shape) -> None:
        self.net, self.x, self.count, self.outputs = net, x, 0, []

    def conv(self, name: str, x: Shape | None, out: int, k: K, s: int = 1, p: K = 0) -> Shape:
        shared = x is None
        start = len(self.net.layers)
        y = _conv_bn_relu(self.net, name, self.x if shared else x, out, k, s, p)
        if shared:
            if self.count:
                self.net.unsave(start)
            self.count += 1
        return y

    def pool(self, name: str, k: int, s: int, p: int, mode: str) -> Shape:
        start = len(self.net.layers)
        y = self.net.pool(name, self.x, k, s, p, mode=mode)
        if self.count and mode == "max":
            self.net.unsave(start)
        self.count += 1
        return y


def _inception_a(net: Net, n: str, x: Shape, pool_features: int) -> Shape:
    b = _Branches(net, x)
    y1 = b.conv(f"{n}.branch1x1", None, 64, 1)
    y5 = b.conv(f"{n}.branch5x5_1", None, 48, 1)
    y5 = b.conv(f"{n}.branch5x5_2", y5, 64, 5, 1, 2)
    yd = b.conv(f"{n}.branch3x3dbl_1", None, 64, 1)
    yd = b.conv(f"{n}.branch3x3dbl_2", yd, 96, 3, 1, 1)
    yd = b.conv(f"{n}.branch3x3dbl_3", yd, 96, 3, 1, 1)
    yp = b.pool(f"{n}.branch_pool.avg", 3, 1, 1, "avg")
    yp = b.conv(f"{n}.branch_pool", yp, pool_features, 1)
    return net.concat(f"{n}.concat", [y1, y5, yd, yp])


def _inception_b(net: Net, n: str, x: Shape) -> Shape:
    b = _Branches(net, x)
    y3 = b.conv(f"{n}.branch3x3", None, 384, 3, 2)
    yd = b.conv(f"{n}.branch3x3dbl_1", None, 64, 1)
    yd = b.conv(f"{n}.branch3x3dbl_2", yd, 96, 3, 1, 1)
    yd = b.conv(f"{n}.branch3x3dbl_3", yd, 96, 3, 2)
    yp = b.pool(f"{n}.branch_pool", 3, 2, 0, "max")
    return net.concat(f"{n}.concat", [y3, yd, yp])


def _inception_c(net: Net, n: str, x: Shape, c7: int) -> Shape:
    b = _Branches(net, x)
    y1 = b.conv(f"{n}.branch1x1", None, 192, 1)
    y7 = b.conv(f"{n}.branch7x7_1", None, c7, 1)
    y7 = b.conv(f"{n}.branch7x7_2", y7, c7, (1, 7), 1, (0, 3))
    y7 = b.conv(f"{n}.branch7x7_3", y7, 192, (7, 1), 1, (3, 0))
    yd = b.conv(f"{n}.branch7x7dbl_1", None, c7, 1)
    yd = b.conv(f"{n}.branch7x7dbl_2", yd, c7, (7, 1), 1, (3, 0))
    yd = b.conv(f"{n}.branch7x7dbl_3", yd, c7, (1, 7), 1, (0, 3))
    yd = b.conv(f"{n}.branch7x7dbl_4", yd, c7, (7, 1), 1, (3, 0))
    yd = b.conv(f"{n}.branch7x7dbl_5", yd, 192, (1, 7), 1, (0, 3))
    yp = b.pool(f"{n}.branch_pool.avg", 3, 1, 1, "avg")
    yp = b.conv(f"{n}.branch_pool", yp, 192, 1)
    return net.concat(f"{n}.concat", [y1, y7, yd, yp])


def _inception_d(net: Net, n: str, x: Shape) -> Shape:
    b = _Branches(net, x)
    y3 = b.conv(f"{n}.branch3x3_1", None, 192, 1)
    y3 = b.conv(f"{n}.branch3x3_2", y3, 320, 3, 2)
    y7 = b.conv(f"{n}.branch7x7x3_1", None, 192, 1)
    y7 = b.conv(f"{n}.branch7x7x3_2", y7, 192, (1, 7), 1, (0, 3))
    y7 = b.conv(f"{n}.branch7x7x3_3", y7, 192, (7, 1), 1, (3, 0))
    y7 = b.conv(f"{n}.branch7x7x3_4", y7, 192, 3, 2)
    yp = b.pool(f"{n}.branch_pool", 3, 2, 0, "max")
    return net.concat(f"{n}.concat", [y3, y7, yp])


def _inception_e(net: Net, n: str, x: Shape) -> Shape:
    b = _Branches(net, x)
    y1 = b.conv(f"{n}.branch1x1", None, 320, 1)
    y3 = b.conv(f"{n}.branch3x3_1", None, 384, 1)
    y3a = b.conv(f"{n}.branch3x3_2a", y3, 384, (1, 3), 1, (0, 1))
    y3b = b.conv(f"{n}.branch3x3_2b", y3, 384, (3, 1), 1, (1, 0))
    net.unsave(-3)  # shares y3 with 2a
    yd = b.conv(f"{n}.branch3x3dbl_1", None, 448, 1)
    yd = b.conv(f"{n}.branch3x3dbl_2", yd, 384, 3, 1, 1)
    yda = b.conv(f"{n}.branch3x3dbl_3a", yd, 384, (1, 3), 1, (0, 1))
    ydb = b.conv(f"{n}.branch3x3dbl_3b", yd, 384, (3, 1), 1, (1, 0))
    net.unsave(-3)
    yp = b.pool(f"{n}.branch_pool.avg", 3, 1, 1, "avg")
    yp = b.conv(f"{n}.branch_pool", yp, 192, 1)
    return net.concat(f"{n}.concat", [y1, y3a, y3b, yda, ydb, yp])


def inception_v3(
    net: Net, *, image_size: int = 299, num_classes: int = 1000, aux_logits: bool = True
) -> None:
    """Inception-v3 on ``image_size`` inputs (299 in the paper; at least 75)."""
    x = _image_input(net, image_size)
    x = _conv_bn_relu(net, "Conv2d_1a_3x3", x, 32, 3, 2)
    x = _conv_bn_relu(net, "Conv2d_2a_3x3", x, 32, 3)
    x = _conv_bn_relu(net, "Conv2d_2b_3x3", x, 64, 3, 1, 1)
    x = net.pool("maxpool1", x, 3, 2)
    x = _conv_bn_relu(net, "Conv2d_3b_1x1", x, 80, 1)
    x = _conv_bn_relu(net, "Conv2d_4a_3x3", x, 192, 3)
    x = net.pool("maxpool2", x, 3, 2)
    for name, pf in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        net.new_block()
        x = _inception_a(net, name, x, pf)
    net.new_block()
    x = _inception_b(net, "Mixed_6a", x)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        net.new_block()
        x = _inception_c(net, name, x, c7)
    if aux_logits:
        start = len(net.layers)
        a = net.pool("AuxLogits.avgpool", x, 5, 3, mode="avg")
        a = _conv_bn_relu(net, "AuxLogits.conv0", a, 128, 1)
        a = _conv_bn_relu(net, "AuxLogits.conv1", a, 768, 5)
        a = net.global_pool("AuxLogits.adaptive_pool", a)
        a = net.linear("AuxLogits.fc", a, num_classes)
        net.loss("AuxLogits.loss", a[0], num_classes)
        for i in range(start, len(net.layers)):
            net.layers[i] = net.layers[i].changed(block=net.block)
    net.new_block()
    x = _inception_d(net, "Mixed_7a", x)
    for name in ("Mixed_7b", "Mixed_7c"):
        net.new_block()
        x = _inception_e(net, name, x)
    net.end_blocks()
    x = net.global_pool("avgpool", x)
    x = net.dropout("dropout", x)
    logits = classifier(net, x, [num_classes])
    loss(net, logits)
