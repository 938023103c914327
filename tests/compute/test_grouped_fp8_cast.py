"""Per-expert FP8 quantisation of a routed experts' grouped linear (Transformer Engine
``GroupedLinear``: ``tex.split_quantize`` quantises each expert's rows with its own quantizer,
TE v2.14 ``multi_tensor_quantize_impl``): its launches on the GPU and on the host."""

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
from perfmodel.workload.layers import ExpertRole, KernelClass

GPU = get_gpu("H100-SXM5-80GB")
EAGER = HOST_DISPATCH_S["pytorch-eager"]


def _casts(recipe: Fp8Recipe, local: int, name: str = "qwen3_30b_a3b"):
    w = build_model(
        name, batch_size=1, seq_len=4096, ep=128 // local, layers=1, precision="fp8",
        kernels=KernelRecipe(fp8=recipe),
    )  # fmt: skip
    by = {la.name.split(".", 1)[1]: la for la in w.layers if la.name.startswith("layer0.")}
    return by


def _model(recipe: Fp8Recipe, host_s: float = EAGER) -> ComputeModel:
    p = ComputeParams.for_gpu(GPU, cast_weights_each_step=False, host_dispatch_s=host_s)
    return ComputeModel(GPU, p, fp8_recipe=recipe)


@pytest.mark.parametrize(
    ("recipe", "per_expert", "fixed"),
    [(Fp8Recipe.TE_CURRENT, 4, 0), (Fp8Recipe.MXFP8, 1, 0), (Fp8Recipe.TE_DELAYED, 0, 1)],
)
def test_split_quantize_launches(recipe: Fp8Recipe, per_expert: int, fixed: int) -> None:
    """current scaling: zero-amax, amax, scale and cast-transpose per expert; MXFP8: one
    quantize per expert; delayed scaling: one fused multi-tensor cast-transpose."""
    for g in (1, 2, 8, 16):
        assert recipe.split_quantize_launches(g) == per_expert * g + fixed


def test_grouped_cast_layer_golden() -> None:
    """Qwen3-30B-A3B on 16 ranks (8 local experts), FP8 current scaling: the experts' fc1 cast
    layer launches 4 x 8 (input, per expert) + 4 (weight) kernels forward and 4 x 8 backward,
    against the dense count (4 + 4, 4) of the attention output projection's cast (a plain
    ``Linear``: no norm quantises its input); the 28 more each way pay
    a bare launch on the host (9.68 us) and the model's kernel launch on the GPU (4 us)."""
    by = _casts(Fp8Recipe.TE_CURRENT, 8)
    cast, qkv = by["experts_fc1.fp8_cast"], by["attn_out.fp8_cast"]
    assert (qkv.kernels, qkv.bwd_kernels, qkv.expert_role) == (8, 4, None)
    assert (cast.kernels, cast.bwd_kernels) == (36, 32)
    assert cast.expert_role is ExpertRole.EXPERT and cast.kernel_class is KernelClass.FP8_CAST
    cm = _model(Fp8Recipe.TE_CURRENT)
    dense = replace(cast, kernels=8, bwd_kernels=4, expert_role=None)
    t, d = cm.layer_time(cast, "fp8"), cm.layer_time(dense, "fp8")
    assert t.host_fwd_s - d.host_fwd_s == pytest.approx(28 * 9.68e-6)
    assert t.host_s - d.host_s == pytest.approx(56 * 9.68e-6)
    launch = cm.params.kernel_launch_s
    assert t.fwd_s - d.fwd_s == pytest.approx(28 * launch)
    assert (t.bwd_input_s + t.bwd_weight_s) - (d.bwd_input_s + d.bwd_weight_s) == pytest.approx(
        28 * launch
    )


def test_bytes_do_not_depend_on_the_split() -> None:
    """Splitting the rows over experts adds launches, not traffic."""
    a = _casts(Fp8Recipe.TE_CURRENT, 8)["experts_fc1.fp8_cast"]
    b = _casts(Fp8Recipe.TE_DELAYED, 8)["experts_fc1.fp8_cast"]
    assert (a.kernels, b.kernels) == (36, 2)
    assert a.fwd_bytes > 0 and b.fwd_bytes > 0
    one = _casts(Fp8Recipe.TE_CURRENT, 1)["experts_fc1.fp8_cast"]
    assert (one.kernels, one.bwd_kernels, one.expert_role) == (8, 4, None)


def test_graph_mode_has_no_host_cost_for_the_split() -> None:
    cast = _casts(Fp8Recipe.MXFP8, 16)["experts_fc2.fp8_cast"]
    assert (cast.kernels, cast.bwd_kernels) == (16 + 1 + 1, 16 + 1)  # + weight, + swizzles
    t = _model(Fp8Recipe.MXFP8, 0.0).layer_time(cast, "fp8")
    assert t.host_s == 0.0


def test_share_is_the_bare_launch() -> None:
    assert HOST_LAUNCH_SHARE * EAGER == pytest.approx(9.68e-6)


@settings(max_examples=10, deadline=None)
@given(
    st.sampled_from(list(Fp8Recipe)),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.sampled_from([2, 4, 8]),
)
def test_more_local_experts_never_cost_less(recipe: Fp8Recipe, local: int, factor: int) -> None:
    """Per-expert launches only grow with the experts a rank holds, on the GPU (launch counts)
    and the host (whose time follows the launches, not the bytes)."""
    cm = _model(recipe)
    few_la = _casts(recipe, local)["experts_fc1.fp8_cast"]
    many_la = _casts(recipe, min(128, local * factor))["experts_fc1.fp8_cast"]
    assert many_la.kernels >= few_la.kernels and many_la.bwd_kernels >= few_la.bwd_kernels
    assert cm.layer_time(many_la, "fp8").host_s >= cm.layer_time(few_la, "fp8").host_s - 1e-12
