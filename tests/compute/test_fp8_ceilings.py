"""FP8 GEMM ceilings: measured sustained rates and split accumulation in the backward."""

from __future__ import annotations

import pytest

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.dtypes import DType, Precision
from perfmodel.hardware import get_gpu
from perfmodel.workload.layers import GemmShape, LayerCost, LayerKind


def _linear(m: int = 16384, k: int = 8192, n: int = 8192) -> LayerCost:
    flop = 2.0 * m * n * k
    return LayerCost(
        name="fc",
        kind=LayerKind.LINEAR,
        fwd_flop=flop,
        bwd_input_flop=flop,
        bwd_weight_flop=flop,
        params=k * n,
        fwd_bytes=1.0,
        bwd_bytes=1.0,
        activation_bytes=1.0,
        output_shape=(m, n),
        gemm=GemmShape(m, n, k),
        kernels=1,
        bwd_kernels=2,
    )


def test_h100_fp8_best_shape_stays_below_the_best_measured_burst() -> None:
    """Before the per-dtype ceilings an 8192^3 FP8 GEMM was modelled at 0.76 x 1978.9 x the
    tile factors (~1470 TFLOP/s), above the best FP8 burst measured on any H100 (1402.6)."""
    cm = ComputeModel(get_gpu("H100-SXM5-80GB"))
    g = GemmShape(8192, 8192, 8192)
    rate = g.flop / cm.gemm_time(g, DType.FP8)
    assert 1200e12 < rate < 1402.6e12


def test_fp8_backward_runs_split_accumulation_on_hopper() -> None:
    gpu = get_gpu("H100-SXM5-80GB")
    split = ComputeModel(gpu, ComputeParams.for_gpu(gpu, cast_weights_each_step=False))
    fast = ComputeModel(
        gpu,
        ComputeParams.for_gpu(
            gpu, cast_weights_each_step=False, fp8_backward_split_accumulation=False
        ),
    )
    la = _linear()
    ts, tf = split.layer_time(la, Precision.FP8), fast.layer_time(la, Precision.FP8)
    assert ts.fwd_s == pytest.approx(tf.fwd_s)  # forward: fast accumulation in both
    launch = split.params.kernel_launch_s
    assert (ts.bwd_input_s - launch) == pytest.approx((tf.bwd_input_s - launch) * 1.15, rel=1e-6)
    # bf16 is untouched by the FP8 switch
    assert split.layer_time(la, Precision.BF16).bwd_s == fast.layer_time(la, Precision.BF16).bwd_s


def test_blackwell_split_accumulation_is_free() -> None:
    gpu = get_gpu("B200-SXM-180GB")
    p = ComputeParams.for_gpu(gpu, cast_weights_each_step=False)
    assert p.fp8_split_accumulation == 1.0
    q = ComputeParams.for_gpu(
        gpu, cast_weights_each_step=False, fp8_backward_split_accumulation=False
    )
    la = _linear()
    assert (
        ComputeModel(gpu, p).layer_time(la, Precision.FP8).bwd_s
        == ComputeModel(gpu, q).layer_time(la, Precision.FP8).bwd_s
    )


def test_ceilings_round_trip_and_burst_regime() -> None:
    gpu = get_gpu("B200-SXM-180GB")
    p = ComputeParams.for_gpu(gpu)
    assert ComputeParams.from_dict(p.to_dict()) == p
    burst = ComputeParams.for_gpu(gpu, burst=True)
    assert burst.gemm_ceiling(DType.BF16) == pytest.approx(1737 / 2250)
    assert p.gemm_ceiling(DType.BF16) == pytest.approx(1439 / 2250)
    # a datasheet-only GPU keeps the documented default fraction
    v = ComputeParams.for_gpu(get_gpu("V100-SXM2-16GB"))
    assert v.gemm_ceiling(DType.FP16) == v.tensor_core_efficiency == 0.76
