"""The kernels Transformer Engine launches to quantise a dense FP8 linear's tensors (TE v2.14):
current scaling's four kernels per tensor (``Float8CurrentScalingQuantizer::quantize_impl``),
the cached weight cast only on the micro-batches that cast it, and MXFP8's scale swizzles
before each GEMM (``swizzle_scales_for_gemm``), on the GPU and on the host."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.compute import HOST_DISPATCH_S, ComputeModel, ComputeParams
from perfmodel.compute.params import HOST_LAUNCH_SHARE
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.kernels import Fp8Recipe, KernelRecipe

GPU = get_gpu("B200-SXM-180GB")
EAGER = HOST_DISPATCH_S["pytorch-eager"]
TE = (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8)


def _casts(recipe: Fp8Recipe, share: float = 1.0, tp: int = 1):
    w = build_model(
        "llama3_8b", batch_size=1, seq_len=4096, layers=1, precision="fp8", tp=tp,
        sequence_parallel=tp > 1, kernels=KernelRecipe(fp8=recipe, weight_cast_share=share),
    )  # fmt: skip
    return {
        la.name.split(".", 1)[1]: la
        for la in w.layers
        if la.name.startswith("layer0.") and la.name.endswith(".fp8_cast")
    }


def _model(recipe: Fp8Recipe, host_s: float = EAGER) -> ComputeModel:
    p = ComputeParams.for_gpu(GPU, cast_weights_each_step=False, host_dispatch_s=host_s)
    return ComputeModel(GPU, p, fp8_recipe=recipe)


def test_current_scaling_dense_golden() -> None:
    """One micro-batch of a plain ``Linear`` (attn_out): input and weight quantised with zero-amax, amax, scale and cast (4 + 4
    launches), the output gradient likewise (4); over 8 micro-batches the cached weight's 4
    launches are expected 0.5 a micro-batch (rounded half up: 1 x 4 x 1/8 + 0.5 -> 1);
    over 16, none."""
    assert _casts(Fp8Recipe.TE_CURRENT)["attn_out.fp8_cast"].kernels == 8
    assert _casts(Fp8Recipe.TE_CURRENT)["attn_out.fp8_cast"].bwd_kernels == 4
    assert _casts(Fp8Recipe.TE_CURRENT, 1 / 8)["fc2.fp8_cast"].kernels == 5
    assert _casts(Fp8Recipe.TE_CURRENT, 1 / 16)["fc2.fp8_cast"].kernels == 4


def test_current_scaling_host_golden() -> None:
    """The host issues the input's quantise call forward and the output gradient's backward at
    ``host_dispatch_s``; the other 7 + 3 launches (zero-amax, amax, scale; the weight's four)
    are bare launches (9.68 us each); the GPU pays ``kernel_launch_s`` for each of the 12."""
    la = _casts(Fp8Recipe.TE_CURRENT)["attn_out.fp8_cast"]
    cm = _model(Fp8Recipe.TE_CURRENT)
    t = cm.layer_time(la, "fp8")
    one = cm.layer_time(replace(la, kernels=1, bwd_kernels=1), "fp8")
    assert t.host_fwd_s - one.host_fwd_s == pytest.approx(7 * HOST_LAUNCH_SHARE * EAGER)
    assert t.host_s - one.host_s == pytest.approx(10 * 9.68e-6)
    launch = cm.params.kernel_launch_s
    assert t.fwd_s - one.fwd_s == pytest.approx(7 * launch)


def test_mxfp8_swizzle_launches_and_bytes() -> None:
    """MXFP8 without sequence parallelism: one weight-scale swizzle before the forward GEMM
    and one before the input-gradient GEMM; each moves 2 B per 32 weight elements."""
    mx = _casts(Fp8Recipe.MXFP8)["fc1.fp8_cast"]
    assert (mx.kernels, mx.bwd_kernels) == (1 + 1 + 1, 1 + 1)
    base = build_model("llama3_8b", batch_size=1, seq_len=4096, layers=1, precision="fp8")
    fc1 = next(la for la in base.layers if la.name == "layer0.fc1")
    w_el = fc1.gemm.k * fc1.gemm.n * fc1.gemm.batch
    cb = Fp8Recipe.MXFP8.cast_bytes
    x_el = fc1.gemm.m * fc1.gemm.k * fc1.gemm.batch
    assert mx.fwd_bytes == pytest.approx(cb.x_fwd * x_el + cb.w_fwd * w_el + w_el / 16)


def test_mxfp8_sequence_parallel_swizzles() -> None:
    """tp = 2 with sequence parallelism: the all-gathered input of a column-parallel linear
    (qkv) is not quantised swizzled, so its scales are swizzled for the forward and the
    weight-gradient GEMMs; the gathered output gradient of a row-parallel one (attn_out) for the
    input- and weight-gradient GEMMs."""
    by = _casts(Fp8Recipe.MXFP8, tp=2)
    assert (by["qkv.fp8_cast"].kernels, by["qkv.fp8_cast"].bwd_kernels) == (4, 3)
    assert (by["attn_out.fp8_cast"].kernels, by["attn_out.fp8_cast"].bwd_kernels) == (3, 4)
    te = _casts(Fp8Recipe.TE_CURRENT, tp=2)["attn_out.fp8_cast"]
    assert (te.kernels, te.bwd_kernels) == (8, 4)  # per-tensor scales: no swizzle


def test_graph_mode_pays_no_host_issue() -> None:
    la = _casts(Fp8Recipe.TE_CURRENT)["fc1.fp8_cast"]
    assert _model(Fp8Recipe.TE_CURRENT, 0.0).layer_time(la, "fp8").host_s == 0.0


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(TE), st.sampled_from([1, 2, 4, 8, 16, 64]), st.booleans(), st.booleans())
def test_launch_invariants(recipe: Fp8Recipe, micro: int, gathered: bool, scattered: bool) -> None:
    """The launches never fall below the host calls (so no negative bare launches), a
    cached weight never launches more over more micro-batches, and swizzles come only with
    MXFP8."""
    kw = {"input_gathered": gathered, "grad_gathered": scattered}
    f, b = recipe.cast_launches(1, 1.0 / micro, **kw)
    f2, _ = recipe.cast_launches(1, 1.0 / (2 * micro), **kw)
    assert (f, b) >= recipe.cast_calls and f2 <= f
    assert (recipe.gemm_swizzle_launches(**kw) != (0, 0)) == (recipe is Fp8Recipe.MXFP8)
