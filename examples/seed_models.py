"""Models of the founding studies that are not in the zoo, built from ``perfmodel.workload`` layers.

* :func:`navid_mnist_cnn`: the Keras MNIST network of F. Navid's ``mnist_multi_gpu_keras.py``
  (github.com/Farhad-n/MultiGPU_Study): conv 32 3x3 'valid' + ReLU, conv 256 3x3 + ReLU,
  BatchNorm, conv 128 3x3 + ReLU, 2x2 max-pool, dropout, dense 128 + ReLU, dropout, dense 10,
  softmax cross-entropy; 28x28x1 inputs.
* :func:`vgg19_bn_cifar`: the same repository's ``vgg_fn.py``: VGG-19 configuration "E" with
  batch norm, 32x32 inputs, and a single ``Linear(512, 10)`` classifier ("FC layers are
  removed"), not torchvision's 4096-wide head.

Both functions have the ``workload_fn`` signature of :func:`perfmodel.api.predict`.
"""

from __future__ import annotations

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net
from perfmodel.workload.layers import Workload
from perfmodel.workload.zoo.cnn import classifier, loss

_VGG19 = [
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    512,
    "M",
]


def _workload(name: str, net: Net, batch_size: int, precision: Precision, tp: int) -> Workload:
    return Workload(
        name=name,
        layers=tuple(net.layers),
        batch_size=batch_size,
        precision=precision,
        total_params=sum(la.params for la in net.layers),
        sample_unit="images",
        tp=tp,
        buffers=net.buffers,
    )


def navid_mnist_cnn(
    *,
    batch_size: int,
    precision: Precision | str = "fp32",
    tp: int = 1,
    sequence_parallel: bool = False,
) -> Workload:
    """Navid's Keras MNIST CNN (about 2.4 M parameters)."""
    prec = Precision.parse(precision)  # a Precision is returned as is
    net = Net(batch_size, prec, tp=tp)
    x = (batch_size, 1, 28, 28)
    net.new_block()
    x = net.conv("conv1", x, 32, 3, 1, 0, bias=True)
    x = net.act("conv1.relu", x, "relu")
    net.new_block()
    x = net.conv("conv2", x, 256, 3, 1, 0, bias=True)
    x = net.act("conv2.relu", x, "relu")
    x = net.batchnorm("conv2.bn", x)
    net.new_block()
    x = net.conv("conv3", x, 128, 3, 1, 0, bias=True)
    x = net.act("conv3.relu", x, "relu")
    x = net.pool("pool", x, 2, 2)
    x = net.dropout("drop1", x)
    net.end_blocks()
    logits = classifier(net, x, [128, 10], dropout=True)
    loss(net, logits)
    return _workload("navid_mnist_cnn", net, batch_size, prec, tp)


def vgg19_bn_cifar(
    *,
    batch_size: int,
    precision: Precision | str = "fp32",
    tp: int = 1,
    sequence_parallel: bool = False,
) -> Workload:
    """VGG-19-BN for CIFAR-10 with a 512->10 classifier (about 20.0 M parameters)."""
    prec = Precision.parse(precision)  # a Precision is returned as is
    net = Net(batch_size, prec, tp=tp)
    x = (batch_size, 3, 32, 32)
    i = 0
    for v in _VGG19:
        if v == "M":
            x = net.pool(f"pool{i}", x, 2, 2)
            continue
        i += 1
        net.new_block()
        x = net.conv(f"conv{i}", x, int(v), 3, 1, 1, bias=True)
        x = net.batchnorm(f"conv{i}.bn", x)
        x = net.act(f"conv{i}.relu", x, "relu")
    net.end_blocks()
    logits = classifier(net, x, [10])
    loss(net, logits)
    return _workload("vgg19_bn_cifar", net, batch_size, prec, tp)
