"""Layers that hold parameters no kernel of the step touches: Transformer-XL's relative-position
biases and the PyTorch importer's parameters no recorded layer owns."""

from __future__ import annotations

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net
from perfmodel.workload.layers import LayerKind
from perfmodel.workload.torch_import import _add_unassigned
from perfmodel.workload.zoo import build_model


def test_unassigned_parameters_make_up_the_module_count() -> None:
    net = Net(1, Precision.parse("fp32"))
    net.linear("fc", (4, 8), 16)  # 8 x 16 weights + 16 biases = 144
    _add_unassigned(net, 144 + 64)
    rest = net.layers[-1]
    assert (rest.name, rest.kind, rest.params, rest.output_shape) == (
        "unassigned_parameters", LayerKind.OTHER, 64, (),
    )  # fmt: skip
    assert rest.total_flop == rest.fwd_bytes == rest.bwd_bytes == rest.activation_bytes == 0
    _add_unassigned(net, 144 + 64)  # nothing left over: no second layer
    assert sum(la.name == "unassigned_parameters" for la in net.layers) == 1


def test_transformer_xl_position_biases_cost_nothing() -> None:
    w = build_model("transformer_xl", batch_size=1, hidden=64, heads=4, layers=1, seq_len=8)
    bias = next(la for la in w.layers if la.name == "r_w_bias+r_r_bias")
    assert (bias.params, bias.output_shape) == (2 * 64, (4, 16))  # u and v: heads x d each
    assert bias.total_flop == bias.fwd_bytes + bias.bwd_bytes + bias.activation_bytes == 0
