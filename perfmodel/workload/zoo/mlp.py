"""A plain multi-layer perceptron of given widths."""

from __future__ import annotations

from perfmodel.errors import ConfigError
from perfmodel.workload._net import Net
from perfmodel.workload.zoo.cnn import classifier, loss


def mlp(net: Net, *, widths: list[int] | None = None, activation: str = "relu") -> None:
    """MLP ``widths[0] -> widths[1] -> ... -> widths[-1]`` with biases and ``activation`` between
    layers, softmax cross-entropy on the last width. Each hidden layer is one block.

    Default widths ``[784, 1024, 1024, 10]`` (an MNIST-sized network).
    """
    w = list(widths) if widths is not None else [784, 1024, 1024, 10]
    if len(w) < 2 or any(int(v) < 1 for v in w):
        raise ConfigError(
            f"widths must list at least two positive integers (input, ..., output), got {w}",
            value=w,
            where="widths",
        )
    x = (net.batch_size, int(w[0]))
    if net.tp > 1:
        logits = classifier(net, x, [int(v) for v in w[1:]], act=activation)
    else:
        for i, width in enumerate(w[1:]):
            net.new_block()
            x = net.linear(f"fc{i + 1}", x, int(width))
            if i < len(w) - 2:
                x = net.act(f"fc{i + 1}.{activation}", x, activation)
        logits = x
    loss(net, logits)
