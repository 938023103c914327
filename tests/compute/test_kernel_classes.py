"""Pricing the kernels of a training recipe (issue 24): casts as kernels of their own, the FP8
split-accumulation passes, optimizer implementations, the per-class breakdown."""

from __future__ import annotations

import pytest

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.compute import model as cmodel
from perfmodel.compute.model import (
    Bound,
    LayerTime,
    class_key,
    kernel_class_seconds,
    layer_matmul_dtype,
)
from perfmodel.dtypes import DType, Precision
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.kernels import Fp8Recipe, GradClip, OptimizerImpl
from perfmodel.workload.layers import GemmShape, KernelClass, LayerCost, LayerKind

H100 = get_gpu("H100-SXM5-80GB")


def _linear(m: int, n: int, k: int, **kw: object) -> LayerCost:
    g = GemmShape(m, n, k)
    base = dict(
        name="fc",
        kind=LayerKind.LINEAR,
        fwd_flop=g.flop,
        bwd_input_flop=g.flop,
        bwd_weight_flop=g.flop,
        params=k * n,
        fwd_bytes=float(2 * (m * k + k * n + m * n)),
        bwd_bytes=float(2 * 2 * (m * k + k * n + m * n)),
        activation_bytes=0.0,
        output_shape=(m, n),
        gemm=g,
    )
    base.update(kw)
    return LayerCost(**base)  # type: ignore[arg-type]


def test_autocast_casts_are_not_hidden_under_a_compute_bound_gemm() -> None:
    """Before: the casts' bytes joined the GEMM's in max(compute, memory) and cost nothing on
    a compute-bound GEMM. They are kernels of their own: forward grows by their memory time."""
    la = _linear(8192, 8192, 8192)
    on = ComputeModel(H100, ComputeParams.for_gpu(H100, cast_weights_each_step=True))
    off = ComputeModel(H100, ComputeParams.for_gpu(H100, cast_weights_each_step=False))
    t_on, t_off = on.layer_time(la, "bf16"), off.layer_time(la, "bf16")
    p = on.params
    cast = 8192 * 8192 * 6 / (p.memory_bandwidth_Bps * p.memory_efficiency) + p.kernel_launch_s
    assert t_on.bound is Bound.COMPUTE
    assert t_on.fwd_s - t_off.fwd_s == pytest.approx(cast, rel=1e-9)
    # backward: the weight gradient's cast back to FP32
    assert t_on.bwd_weight_s - t_off.bwd_weight_s == pytest.approx(cast, rel=1e-9)
    assert t_on.cast_s == pytest.approx(2 * cast) and t_on.cast_fwd_s == pytest.approx(cast)


def test_fp8_split_accumulation_passes_read_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transformer Engine's dgrad and wgrad GEMMs accumulate in split mode, fprop fast: a lower
    split ceiling (read through ``fp8_ceiling`` only) slows the backward GEMMs alone."""
    la = _linear(8192, 8192, 8192)
    p = ComputeParams.for_gpu(H100, cast_weights_each_step=False)  # a 16-bit model (TE)

    def no_split_cost(params: ComputeParams, *, split_accumulation: bool) -> float:
        return params.gemm_ceiling(DType.FP8)

    def slower_split(params: ComputeParams, *, split_accumulation: bool) -> float:
        return params.gemm_ceiling(DType.FP8) * (0.5 if split_accumulation else 1.0)

    monkeypatch.setattr(cmodel, "fp8_ceiling", no_split_cost)
    base = ComputeModel(H100, p, fp8_recipe=Fp8Recipe.TE_DELAYED).layer_time(la, "fp8")
    monkeypatch.setattr(cmodel, "fp8_ceiling", slower_split)
    te = ComputeModel(H100, p, fp8_recipe=Fp8Recipe.TE_DELAYED).layer_time(la, "fp8")
    mx = ComputeModel(H100, p, fp8_recipe=Fp8Recipe.MXFP8).layer_time(la, "fp8")
    assert te.fwd_s == pytest.approx(base.fwd_s)
    launch = ComputeModel(H100).params.kernel_launch_s
    # twice the compute time: twice the pass, less the memory time's share of the smooth
    # roofline (gemm_roofline_time; 8192^3 in FP8 moves ~0.2 GB: under 0.5% at p = 3)
    assert te.bwd_input_s - launch == pytest.approx(2 * (base.bwd_input_s - launch), rel=5e-3)
    assert te.bwd_weight_s - launch == pytest.approx(2 * (base.bwd_weight_s - launch), rel=5e-3)
    assert mx.bwd_s == pytest.approx(base.bwd_s)  # MXFP8: no split accumulation


def test_lm_head_stays_bf16_under_fp8() -> None:
    w = build_model("llama", batch_size=1, precision="fp8", layers=1, seq_len=128, vocab=1000)
    head = next(la for la in w.layers if la.name == "lm_head")
    fc1 = next(la for la in w.layers if la.name == "layer0.fc1")
    assert layer_matmul_dtype(head, Precision.FP8) is DType.BF16
    assert layer_matmul_dtype(fc1, Precision.FP8) is DType.FP8
    assert (
        class_key(head, Precision.FP8) == "gemm:bf16"
        and class_key(fc1, Precision.FP8) == "gemm:fp8"
    )


def test_optimizer_time_per_implementation() -> None:
    """1e9 parameters on a V100 at 0.8 x 900 GB/s: fused AdamW 28 B, foreach 84 B, foreach
    with torch's grad clipping 96 B; LAMB is apex's fused kernel whatever the preset says."""
    cm = ComputeModel(get_gpu("V100-SXM2-16GB"))
    bw = 0.8 * 900e9
    launch = 2 * cm.params.kernel_launch_s
    t = lambda **kw: cm.optimizer_time(1e9, "adamw", "fp32", **kw) - launch  # noqa: E731
    assert t() == pytest.approx(28e9 / bw)
    assert t(impl=OptimizerImpl.FOREACH) == pytest.approx(84e9 / bw)
    assert t(impl=OptimizerImpl.FOREACH, clip=GradClip.FOREACH) == pytest.approx(96e9 / bw)
    lamb = cm.optimizer_time(1e9, "lamb", "fp32", impl=OptimizerImpl.FOREACH) - launch
    assert lamb == pytest.approx((28e9 + 8e9) / bw)


def test_kernel_class_seconds_golden() -> None:
    """Two layers, 3 micro-batches, the norm re-run (share 1): by hand."""
    norm = LayerCost(
        name="n", kind=LayerKind.NORM, fwd_flop=0.0, bwd_input_flop=0.0, bwd_weight_flop=0.0,
        params=0, fwd_bytes=0.0, bwd_bytes=0.0, activation_bytes=0.0, output_shape=(1,), block=0,
    )  # fmt: skip
    fc = _linear(64, 64, 64, block=0)
    times = {
        "n": LayerTime(1.0, 2.0, 0.0, Bound.MEMORY),
        "fc": LayerTime(10.0, 5.0, 5.0, Bound.COMPUTE, cast_s=3.0, cast_fwd_s=1.0),
    }
    got = kernel_class_seconds(
        [(norm, fc)],
        lambda la: times[la.name],
        Precision.BF16,
        microbatches=3,
        recompute_share=lambda la: 1.0 if la.kind is LayerKind.NORM else 0.0,
    )
    assert got == pytest.approx({"norm": 3 * (1 + 1 + 2), "gemm:bf16": 3 * (20 - 3), "cast": 9})
    assert KernelClass.NORM.value in got
