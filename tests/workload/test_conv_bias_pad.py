"""Convolution bias as its own kernels and Keras ResNetV2's explicit ``ZeroPadding2D`` layers."""

from __future__ import annotations

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload import LayerKind, build_model
from perfmodel.workload._net import Net, numel


def _net(batch: int = 2, precision: str = "fp32") -> Net:
    return Net(batch, Precision.parse(precision))


def test_conv_bias_is_a_layer_of_its_own_golden() -> None:
    """3 -> 4 channels, 3x3, pad 1 on 2x3x8x8, FP32: the output has 2*4*8*8 = 512 elements.
    Bias add reads and writes them (4096 B) and reads 4 biases (16 B); its gradient reads the
    output gradient (2048 B) and writes 4 bias gradients (16 B)."""
    net = _net()
    net.conv("c", (2, 3, 8, 8), 4, 3, 1, 1, bias=True)
    conv, bias = net.layers
    assert (conv.name, bias.name) == ("c", "c.bias")
    assert conv.params == 4 * 3 * 9 + 4  # the bias parameters stay on the convolution
    assert conv.fwd_flop == conv.gemm.flop and conv.bwd_weight_flop == conv.gemm.flop
    assert (conv.kernels, conv.bwd_kernels) == (2, 2)  # first layer: no dgrad
    assert bias.kind is LayerKind.ELEMENTWISE and bias.gemm is None
    assert bias.params == 0 and bias.activation_bytes == 0.0
    assert bias.fwd_bytes == 2 * 512 * 4 + 4 * 4 == 4112
    assert bias.bwd_bytes == 512 * 4 + 4 * 4 == 2064
    assert (bias.fwd_flop, bias.bwd_input_flop, bias.bwd_weight_flop) == (512.0, 0.0, 512.0)
    assert (bias.kernels, bias.bwd_kernels) == (1, 1)
    assert bias.output_shape == conv.output_shape == (2, 4, 8, 8)


def test_conv_bias_adds_only_the_bias_work() -> None:
    """Against the same convolution without bias: C_out more parameters, 2 y_el more FLOP, one
    kernel more each way, the convolution itself otherwise identical."""
    plain, biased = _net(4, "fp16"), _net(4, "fp16")
    plain._first_weight_layer = biased._first_weight_layer = False
    plain.conv("c", (4, 16, 14, 14), 32, 3, 2, 1)
    biased.conv("c", (4, 16, 14, 14), 32, 3, 2, 1, bias=True)
    (p,) = plain.layers
    c, b = biased.layers
    y_el = 4 * 32 * 7 * 7
    assert c.params == p.params + 32
    assert (c.gemm, c.conv_window, c.kernels, c.bwd_kernels) == (
        p.gemm,
        p.conv_window,
        p.kernels,
        p.bwd_kernels,
    )
    assert c.total_flop + b.total_flop == p.total_flop + 2 * y_el
    assert c.activation_bytes == p.activation_bytes and b.activation_bytes == 0


def test_linear_bias_stays_fused() -> None:
    """cuBLAS linear layers fuse the bias (addmm): no extra layer."""
    net = _net()
    net.linear("fc", (2, 16), 8, bias=True)
    assert [la.name for la in net.layers] == ["fc"]


@pytest.mark.parametrize(("name", "units"), [("resnet50v2", 16), ("resnet152v2", 50)])
def test_resnet_v2_explicit_pads(name: str, units: int) -> None:
    """conv1_pad, pool1_pad and one {unit}_2_pad per block2 unit; parameter counts unchanged."""
    w = build_model(name, batch_size=2, image_size=128)
    pads = [la for la in w.layers if la.name.endswith("_pad")]
    assert len(pads) == 2 + units
    assert pads[0].name == "conv1_pad" and pads[1].name == "pool1_pad"
    assert all(la.kind is LayerKind.ELEMENTWISE and la.total_flop == 0 for la in pads)
    assert all(la.params == 0 and la.activation_bytes == 0 and la.kernels == 1 for la in pads)
    # the input images need no gradient: conv1_pad has no backward, every other pad a Slice
    assert pads[0].bwd_bytes == 0 and pads[0].bwd_kernels == 0
    assert all(la.bwd_kernels == 1 and la.bwd_bytes == la.fwd_bytes for la in pads[1:])


def test_resnet50v2_parameter_count_unchanged() -> None:
    w = build_model("resnet50v2", batch_size=2)
    assert w.total_params + w.buffers == 25_613_800


def test_resnet_v2_valid_layer_after_pad_matches_padded_layer() -> None:
    """The layer after each pad (padding "valid") has the output shape, GEMM and window of the
    padded layer it replaces; it reads the padded tensor."""
    w = build_model("resnet50v2", batch_size=2, image_size=128)
    layers = list(w.layers)
    for i, pad in enumerate(layers):
        if not pad.name.endswith("_pad"):
            continue
        nxt = layers[i + 1]
        unpadded = (2, 3, 128, 128) if i == 0 else layers[i - 1].output_shape
        p = (pad.output_shape[2] - unpadded[2]) // 2
        ref = _net()
        ref._first_weight_layer = i == 0
        if nxt.kind is LayerKind.CONV:
            k = nxt.conv_window[0]
            s = nxt.conv_window[2]
            ref.conv("ref", unpadded, nxt.output_shape[1], k, s, p)
            assert ref.layers[0].gemm == nxt.gemm
            assert ref.layers[0].conv_window == nxt.conv_window
            assert nxt.activation_bytes == numel(pad.output_shape) * 4  # saves the padded input
        else:
            assert nxt.kind is LayerKind.POOL and nxt.name == "pool1"
            ref.pool("ref", unpadded, 3, 2, p)
        assert ref.layers[0].output_shape == nxt.output_shape
        assert ref.layers[0].fwd_flop == nxt.fwd_flop


def test_resnet_v2_flop_unchanged_by_pads_and_bias_layers() -> None:
    """Pads add no FLOP and the bias layers carry the FLOP the convolutions carried before:
    the totals are those of the model with implicit padding and bias inside the convolution
    (regression values of that model at batch 1, 224 px)."""
    w = build_model("resnet50v2", batch_size=1, image_size=224)
    assert w.fwd_flop == 7_042_477_680
    assert w.total_flop == 20_856_410_920


def test_pad_golden() -> None:
    """2x4x6x6 padded by 1 to 2x4x8x8 (288 -> 512 elements, FP32): Pad reads 288 and writes 512
    elements (3200 B); the Slice of its gradient the same. Before any weight layer (the input
    images) there is no backward."""
    net = _net()
    net.pad("p0", (2, 4, 6, 6), 1)
    net.conv("c", (2, 4, 8, 8), 4, 3)
    net.pad("p1", (2, 4, 6, 6), 1)
    p0, _, p1 = net.layers
    assert p1.output_shape == (2, 4, 8, 8)
    assert p1.fwd_bytes == p1.bwd_bytes == (288 + 512) * 4 == 3200
    assert (p1.kernels, p1.bwd_kernels, p1.total_flop, p1.activation_bytes) == (1, 1, 0, 0)
    assert p0.fwd_bytes == 3200 and (p0.bwd_bytes, p0.bwd_kernels) == (0, 0)
