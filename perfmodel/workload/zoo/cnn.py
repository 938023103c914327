"""Convolutional networks of the zoo, layer by layer as in their reference implementations.

Reference implementations (parameter counts are tested exactly against them):

* ``lenet5``: LeCun et al. 1998 (C1-S2-C3-S4-F5-F6-output on 32x32 inputs, full C3 connectivity,
  the common 61,706-parameter form).
* ``alexnet``, ``vgg*``, ``resnet18..152``, ``mobilenet_v2``: torchvision.models (v0.15+ layout).
* ``resnet50v2``, ``resnet152v2``: ``tf.keras.applications`` (pre-activation ResNet, He et al.
  2016b), batch-norm moving statistics counted as non-trainable ``buffers`` as Keras does.
* ``resnet20..110``: He et al. 2016, section 4.2 (CIFAR-10, option-A identity shortcuts).

Tensor parallelism on a CNN follows Krizhevsky 2014 ("One weird trick"): convolutions stay data
parallel on the rank's own micro-batch; the fully connected layers are split by output features
and run on the ``tp x batch`` samples gathered from the group (an all-gather of the layer input in
forward, a reduce-scatter of its gradient in backward).
"""

from __future__ import annotations

from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.workload._net import Net, Shape, numel
from perfmodel.workload.layers import LayerKind
from perfmodel.workload.zoo._args import bound, variant_signature

# -- shared pieces ------------------------------------------------------------------------------


def _image_input(net: Net, image_size: int, channels: int = 3) -> Shape:
    if int(image_size) < 1:
        raise ConfigError(
            f"image_size must be positive, got {image_size}", value=image_size, where="image_size"
        )
    return (net.batch_size, channels, int(image_size), int(image_size))


def _adaptive_pool(net: Net, name: str, x: Shape, out: int) -> Shape:
    """torchvision ``AdaptiveAvgPool2d(out)``: identity-sized when the input already is ``out``."""
    n, c, h, w = x
    if h == out and w == out:
        return x
    el, y = numel(x), (n, c, out, out)
    net._kernel(
        name,
        LayerKind.POOL,
        fwd_flop=float(el),
        bwd_flop=float(el),
        fwd_bytes=(el + numel(y)) * net.act_bytes,
        bwd_bytes=(el + numel(y)) * net.act_bytes,
        output_shape=y,
    )
    return y


def classifier(
    net: Net,
    x: Shape,
    widths: list[int],
    *,
    prefix: str = "fc",
    dropout: bool = False,
    act: str = "relu",
) -> Shape:
    """Fully connected head ``x -> widths[0] -> ... -> widths[-1]`` with ``act`` between layers.

    With ``tp > 1`` the layers are split by output features over the ``tp x batch`` gathered
    samples (Krizhevsky 2014); each layer all-gathers its input in forward and reduce-scatters the
    input gradient in backward.
    """
    tp = net.tp
    n, feat = x[0], numel(x[1:])
    rows = n * tp
    h: Shape = (rows, feat)
    for i, width in enumerate(widths):
        last = i == len(widths) - 1
        if tp > 1:
            el = h[0] * h[1]
            fwd = (net.comm(CollectiveOp.ALLGATHER, el),)
            bwd = (net.comm(CollectiveOp.REDUCESCATTER, el),)
            local = net.linear(
                f"{prefix}{i + 1}",
                h,
                width,
                parallel="column",
                fwd_comm=fwd,
                bwd_comm=bwd,
            )
        else:
            local = net.linear(f"{prefix}{i + 1}", h, width)
        if not last:  # element-wise layers act on this rank's slice of the features
            local = net.act(f"{prefix}{i + 1}.{act}", local, act, saves=dropout)
            if dropout:
                local = net.dropout(f"{prefix}{i + 1}.dropout", local)
        h = (local[0], width)  # whole width: all-gathered by the next layer / the loss
    return h


def loss(net: Net, logits: Shape) -> None:
    """Softmax cross-entropy over the classes (after the head; no block)."""
    net.end_blocks()
    comm = ()
    if net.tp > 1:
        comm = (net.comm(CollectiveOp.ALLGATHER, logits[0] * logits[1]),)
    net.loss("loss", logits[0], logits[1], fwd_comm=comm)


def _conv_bn_relu(
    net: Net,
    name: str,
    x: Shape,
    out: int,
    k: int | tuple[int, int],
    s: int = 1,
    p: int | tuple[int, int] = 0,
    *,
    act: str = "relu",
    groups: int = 1,
    bn_buffers: int = 2,
) -> Shape:
    x = net.conv(f"{name}.conv", x, out, k, s, p, groups=groups)
    x = net.batchnorm(f"{name}.bn", x, buffers_per_channel=bn_buffers)
    if act:
        x = net.act(f"{name}.{act}", x, act)
    return x


# -- LeNet-5, AlexNet, VGG --------------------------------------------------------------------


def lenet5(net: Net, *, image_size: int = 32, num_classes: int = 10) -> None:
    """LeNet-5 (LeCun et al. 1998) on 1-channel ``image_size`` inputs (32 in the paper):
    conv5x5(6), avgpool2, conv5x5(16), avgpool2, fc120, fc84, fc``num_classes``, tanh."""
    x = _image_input(net, image_size, channels=1)
    x = net.conv("c1", x, 6, 5, bias=True)
    x = net.act("c1.tanh", x, "tanh", saves=True)
    x = net.pool("s2", x, 2, 2, mode="avg")
    x = net.conv("c3", x, 16, 5, bias=True)
    x = net.act("c3.tanh", x, "tanh", saves=True)
    x = net.pool("s4", x, 2, 2, mode="avg")
    logits = classifier(net, x, [120, 84, num_classes], prefix="f", act="tanh")
    loss(net, logits)


def alexnet(net: Net, *, image_size: int = 224, num_classes: int = 1000) -> None:
    """AlexNet as in ``torchvision.models.alexnet`` (61,100,840 parameters at 1000 classes)."""
    x = _image_input(net, image_size)
    cfg = [(64, 11, 4, 2, True), (192, 5, 1, 2, True), (384, 3, 1, 1, False)]
    cfg += [(256, 3, 1, 1, False), (256, 3, 1, 1, True)]
    for i, (out, k, s, p, pool) in enumerate(cfg):
        net.new_block()
        x = net.conv(f"conv{i + 1}", x, out, k, s, p, bias=True)
        x = net.act(f"conv{i + 1}.relu", x, "relu", saves=pool)
        if pool:
            x = net.pool(f"pool{i + 1}", x, 3, 2)
    net.end_blocks()
    x = _adaptive_pool(net, "avgpool", x, 6)
    logits = classifier(net, x, [4096, 4096, num_classes], dropout=True)
    loss(net, logits)


_VGG_CFG = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", *[256] * 4, "M", *[512] * 4, "M", *[512] * 4, "M"],
}


def _vgg_features(net: Net, x: Shape, depth: int, batch_norm: bool) -> Shape:
    """VGG's feature layers (torchvision ``cfgs``): 3x3 convolutions with bias, optional batch
    norm, ReLU, and 2x2 max-pools at the ``"M"`` entries."""
    i = 0
    for v in _VGG_CFG[depth]:
        if v == "M":
            x = net.pool(f"pool{i}", x, 2, 2)
            continue
        i += 1
        net.new_block()
        x = net.conv(f"conv{i}", x, int(v), 3, 1, 1, bias=True)
        if batch_norm:
            x = net.batchnorm(f"conv{i}.bn", x)
        x = net.act(f"conv{i}.relu", x, "relu")
    net.end_blocks()
    return x


def vgg(
    net: Net,
    *,
    depth: int = 16,
    batch_norm: bool = False,
    image_size: int = 224,
    num_classes: int = 1000,
) -> None:
    """VGG-``depth`` (Simonyan & Zisserman 2015) as ``torchvision.models.vgg{depth}[_bn]``."""
    x = _vgg_features(net, _image_input(net, image_size), depth, batch_norm)
    x = _adaptive_pool(net, "avgpool", x, 7)
    logits = classifier(net, x, [4096, 4096, num_classes], dropout=True)
    loss(net, logits)


def cifar_vgg(net: Net, **kwargs: Any) -> None:
    """CIFAR VGG-``depth`` as ``bearpaw/pytorch-classification`` ``models/cifar/vgg.py`` (and
    ``kuangliu/pytorch-cifar``): torchvision's feature layers (3x3 convolutions with bias,
    optional batch norm, five 2x2 max-pools) on 32x32 inputs, then a single
    ``Linear(512, num_classes)`` (no 4096-wide head, no adaptive pool). Takes :func:`vgg`'s
    arguments; defaults VGG-19-BN with 10 classes (:data:`_CIFAR_VGG_DEFAULTS`: 20,040,522
    parameters).
    """
    a = bound(cifar_vgg, net, kwargs)
    x = _vgg_features(net, _image_input(net, a["image_size"]), a["depth"], a["batch_norm"])
    logits = classifier(net, x, [a["num_classes"]])
    loss(net, logits)


_CIFAR_VGG_DEFAULTS = {"depth": 19, "batch_norm": True, "image_size": 32, "num_classes": 10}
variant_signature(cifar_vgg, vgg, tuple(_CIFAR_VGG_DEFAULTS), _CIFAR_VGG_DEFAULTS)


# -- ResNets ----------------------------------------------------------------------------------

_RESNET_BLOCKS = {
    18: ("basic", [2, 2, 2, 2]),
    34: ("basic", [3, 4, 6, 3]),
    50: ("bottleneck", [3, 4, 6, 3]),
    101: ("bottleneck", [3, 4, 23, 3]),
    152: ("bottleneck", [3, 8, 36, 3]),
}
#: Depths of ``tf.keras.applications.ResNet{50,101,152}V2``; their stacks have the unit counts
#: of the bottleneck ResNets above.
_RESNET_V2_DEPTHS = (50, 101, 152)


def resnet(net: Net, *, depth: int = 50, image_size: int = 224, num_classes: int = 1000) -> None:
    """ResNet-``depth`` (He et al. 2016) as ``torchvision.models.resnet{depth}``: v1.5, the
    stride-2 sits on the 3x3 convolution of the bottleneck. Each residual unit is one block."""
    kind, counts = _RESNET_BLOCKS[depth]
    expansion = 4 if kind == "bottleneck" else 1
    x = _image_input(net, image_size)
    x = _conv_bn_relu(net, "conv1", x, 64, 7, 2, 3)
    x = net.pool("maxpool", x, 3, 2, 1)
    in_ch = 64
    for stage, (n_blocks, width) in enumerate(zip(counts, (64, 128, 256, 512)), start=1):
        for j in range(n_blocks):
            stride = 2 if (j == 0 and stage > 1) else 1
            name = f"layer{stage}.{j}"
            net.new_block()
            out_ch = width * expansion
            if kind == "bottleneck":
                h = _conv_bn_relu(net, f"{name}.1", x, width, 1)
                h = _conv_bn_relu(net, f"{name}.2", h, width, 3, stride, 1)
                h = _conv_bn_relu(net, f"{name}.3", h, out_ch, 1, act="")
            else:
                h = _conv_bn_relu(net, f"{name}.1", x, width, 3, stride, 1)
                h = _conv_bn_relu(net, f"{name}.2", h, width, 3, 1, 1, act="")
            if stride != 1 or in_ch != out_ch:
                d = net.conv(f"{name}.downsample", x, out_ch, 1, stride, 0)
                # the block input is already kept by the block's first convolution
                net.unsave()
                net.batchnorm(f"{name}.downsample.bn", d)
            x = net.add(f"{name}.add", h)
            x = net.act(f"{name}.relu", x, "relu")
            in_ch = out_ch
    net.end_blocks()
    x = net.global_pool("avgpool", x)
    logits = classifier(net, x, [num_classes])
    loss(net, logits)


def resnet_v2(net: Net, *, depth: int = 50, image_size: int = 224, num_classes: int = 1000) -> None:
    """Pre-activation ResNet as ``tf.keras.applications.ResNet{50,101,152}V2``.

    Layout: 7x7/2 conv with bias, 3x3/2 max pool, stacks of ``block2`` units (BN-ReLU first; the
    stride sits on the *last* unit of each stack; 1x1 convolution shortcut with bias on the first
    unit, 1x1/stride max-pool shortcut where the stride is 2), final BN-ReLU, global pool, dense.
    Keras BN keeps 4 numbers per channel (2 trainable, 2 moving statistics).

    Padding is explicit, as Keras builds it (``keras/applications/resnet.py``: ``ResNet`` and
    ``block2``): ``ZeroPadding2D`` layers ``conv1_pad`` (3) before the 7x7 convolution,
    ``pool1_pad`` (1) before the 3x3 max pool and ``{unit}_2_pad`` (1) before every unit's 3x3
    convolution, each followed by a ``padding="valid"`` layer. Each is a TensorFlow ``Pad`` op
    with a ``Slice`` as gradient (:meth:`Net.pad`): ``2 + sum(units)`` pads, 18 in ResNet50V2.
    The layer after a pad has the output shape and FLOP of the padded layer it replaces; it
    reads, and saves for its weight gradient (``Conv2DBackpropFilter``) or ``MaxPoolGrad``, the
    padded tensor. The ReLU before ``{unit}_2_pad`` then keeps its own output for ``ReluGrad``
    (TensorFlow's ``_ReluGrad`` uses the op's output), no longer shared with the convolution.
    """
    counts = _RESNET_BLOCKS[depth][1]  # build_model checks depth against _RESNET_V2_DEPTHS
    x = _image_input(net, image_size)
    x = net.pad("conv1_pad", x, 3)
    x = net.conv("conv1", x, 64, 7, 2, 0, bias=True)
    x = net.pad("pool1_pad", x, 1)
    x = net.pool("pool1", x, 3, 2, 0)
    for stage, (n_blocks, width) in enumerate(zip(counts, (64, 128, 256, 512)), start=2):
        for j in range(n_blocks):
            stride = 2 if (j == n_blocks - 1 and stage < 5) else 1
            name = f"conv{stage}_block{j + 1}"
            net.new_block()
            pre = net.batchnorm(f"{name}.preact_bn", x)
            pre = net.act(f"{name}.preact_relu", pre, "relu")
            if j == 0:
                net.conv(f"{name}.0_conv", pre, 4 * width, 1, stride, 0, bias=True)
                net.unsave()  # pre-activation kept by the 1_conv below
            elif stride > 1:
                net.pool(f"{name}.shortcut_pool", x, 1, stride)
            h = net.conv(f"{name}.1_conv", pre, width, 1)
            h = net.batchnorm(f"{name}.1_bn", h)
            h = net.act(f"{name}.1_relu", h, "relu", saves=True)
            h = net.pad(f"{name}.2_pad", h, 1)
            h = net.conv(f"{name}.2_conv", h, width, 3, stride, 0)
            h = net.batchnorm(f"{name}.2_bn", h)
            h = net.act(f"{name}.2_relu", h, "relu")
            h = net.conv(f"{name}.3_conv", h, 4 * width, 1, bias=True)
            x = net.add(f"{name}.out", h)
    net.end_blocks()
    x = net.batchnorm("post_bn", x)
    x = net.act("post_relu", x, "relu", saves=True)
    x = net.global_pool("avg_pool", x)
    logits = classifier(net, x, [num_classes])
    loss(net, logits)


def cifar_resnet(net: Net, *, depth: int = 32, image_size: int = 32, num_classes: int = 10) -> None:
    """CIFAR ResNet-``depth`` (He et al. 2016, section 4.2): ``depth = 6n + 2``, three stages of
    ``n`` basic blocks with 16/32/64 channels, option-A shortcuts (strided identity with zero
    padding: no parameters). ResNet-20/32/44/56/110 have 269,722 / 464,154 / 658,586 / 853,018 /
    1,727,962 parameters."""
    if (depth - 2) % 6:
        raise ConfigError(
            f"CIFAR ResNet depth must be 6n+2, got {depth}", value=depth, where="layers"
        )
    n = (depth - 2) // 6
    x = _image_input(net, image_size)
    x = _conv_bn_relu(net, "conv1", x, 16, 3, 1, 1)
    for stage, width in enumerate((16, 32, 64), start=1):
        for j in range(n):
            stride = 2 if (j == 0 and stage > 1) else 1
            name = f"layer{stage}.{j}"
            net.new_block()
            h = _conv_bn_relu(net, f"{name}.1", x, width, 3, stride, 1)
            h = _conv_bn_relu(net, f"{name}.2", h, width, 3, 1, 1, act="")
            x = net.add(f"{name}.add", h)
            x = net.act(f"{name}.relu", x, "relu")
    net.end_blocks()
    x = net.global_pool("avgpool", x)
    logits = classifier(net, x, [num_classes])
    loss(net, logits)


# -- MobileNetV2 ------------------------------------------------------------------------------


def mobilenet_v2(net: Net, *, image_size: int = 224, num_classes: int = 1000) -> None:
    """MobileNetV2 (Sandler et al. 2018) as ``torchvision.models.mobilenet_v2`` (3,504,872
    parameters at 1000 classes, width multiplier 1.0)."""
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2)]
    settings += [(6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    x = _image_input(net, image_size)
    x = _conv_bn_relu(net, "features.0", x, 32, 3, 2, 1, act="relu6")
    in_ch = 32
    idx = 1
    for t, c, n_rep, s in settings:
        for j in range(n_rep):
            stride = s if j == 0 else 1
            hidden = in_ch * t
            name = f"features.{idx}"
            net.new_block()
            h = x
            if t != 1:
                h = _conv_bn_relu(net, f"{name}.expand", h, hidden, 1, act="relu6")
            h = _conv_bn_relu(
                net, f"{name}.dw", h, hidden, 3, stride, 1, groups=hidden, act="relu6"
            )
            h = _conv_bn_relu(net, f"{name}.project", h, c, 1, act="")
            if stride == 1 and in_ch == c:
                h = net.add(f"{name}.add", h)
            x = h
            in_ch = c
            idx += 1
    net.end_blocks()
    x = _conv_bn_relu(net, "features.18", x, 1280, 1, act="relu6")
    x = net.global_pool("avgpool", x)
    x = net.dropout("classifier.dropout", x)
    logits = classifier(net, x, [num_classes], prefix="classifier")
    loss(net, logits)
