"""Models of the founding studies that are not in the zoo, built from ``perfmodel.workload`` layers.

* :func:`navid_mnist_cnn`: the Keras MNIST network of F. Navid's ``mnist_multi_gpu_keras.py``
  (github.com/Farhad-n/MultiGPU_Study): conv 32 3x3 'valid' + ReLU, conv 256 3x3 + ReLU,
  BatchNorm, conv 128 3x3 + ReLU, 2x2 max-pool, dropout, dense 128 + ReLU, dropout, dense 10,
  softmax cross-entropy; 28x28x1 inputs.
* :func:`vgg19_bn_cifar`: the same repository's ``vgg_fn.py``: VGG-19 configuration "E" with
  batch norm, 32x32 inputs, and a single ``Linear(512, 10)`` classifier ("FC layers are
  removed"), not torchvision's 4096-wide head; the zoo's ``vgg19_bn_cifar``.

Both functions have the ``workload_fn`` signature of :func:`perfmodel.api.predict`.
"""

from __future__ import annotations

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net, RankLayout
from perfmodel.workload.layers import Workload
from perfmodel.workload.zoo import build_model
from perfmodel.workload.zoo.cnn import classifier, loss


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
    net = Net(batch_size, prec, RankLayout(tp=tp))
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
    """VGG-19-BN for CIFAR-10 with a 512->10 classifier (20,040,522 parameters): the zoo's
    ``vgg19_bn_cifar`` (bearpaw/pytorch-classification, which Navid's ``vgg_fn.py`` strips down)."""
    return build_model(
        "vgg19_bn_cifar", batch_size=batch_size, precision=precision, tp=tp, num_classes=10
    )
