"""A convolution's bias is extra kernels: adding it never makes the layer faster."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.dtypes import Precision
from perfmodel.hardware import get_gpu
from perfmodel.workload._net import Net

_GPUS = ("V100-SXM2-16GB", "A100-SXM4-80GB", "H100-SXM5-80GB")


def _times(
    gpu: str,
    host: float,
    prec: str,
    x: tuple[int, int, int, int],
    cout: int,
    k: int,
    s: int,
    first: bool,
    bias: bool,
) -> tuple[float, float]:
    net = Net(x[0], Precision.parse(prec))
    net._first_weight_layer = first
    net.conv("c", x, cout, k, s, k // 2, bias=bias)
    spec = get_gpu(gpu)
    cm = ComputeModel(spec, ComputeParams.for_gpu(spec, host_dispatch_s=host))
    times = [cm.layer_time(la, prec) for la in net.layers]
    return sum(t.fwd_s for t in times), sum(t.bwd_s for t in times)


@settings(max_examples=150, deadline=None)
@given(
    gpu=st.sampled_from(_GPUS),
    host=st.sampled_from([0.0, 5e-6]),
    prec=st.sampled_from(["fp32", "tf32", "fp16", "bf16"]),
    n=st.integers(1, 64),
    cin=st.integers(1, 512),
    hw=st.integers(3, 64),
    cout=st.integers(1, 512),
    k=st.sampled_from([1, 3, 5, 7]),
    s=st.sampled_from([1, 2]),
    first=st.booleans(),
)
def test_bias_never_makes_a_conv_faster(
    gpu: str,
    host: float,
    prec: str,
    n: int,
    cin: int,
    hw: int,
    cout: int,
    k: int,
    s: int,
    first: bool,
) -> None:
    x = (n, cin, hw, hw)
    f0, b0 = _times(gpu, host, prec, x, cout, k, s, first, bias=False)
    f1, b1 = _times(gpu, host, prec, x, cout, k, s, first, bias=True)
    assert f1 > f0
    assert b1 > b0
