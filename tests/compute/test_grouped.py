"""Grouped GEMMs of routed experts (:mod:`perfmodel.compute.grouped`) and the router's dtype."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.compute.gemm import gemm_roofline_time
from perfmodel.compute.grouped import (
    GROUPED_M_ALIGNMENT,
    TE_COMPUTE_STREAMS,
    GroupedImpl,
    grouped_gemm_efficiency,
)
from perfmodel.compute.model import layer_matmul_dtype
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.layers import ExpertRole, GemmShape

H100 = ComputeModel(get_gpu("H100-SXM5-80GB"))


def _dense(s: GemmShape) -> float:
    return H100.gemm(s, DType.BF16).efficiency


def test_te_streams_and_alignment_constants() -> None:
    assert TE_COMPUTE_STREAMS == 4 and GROUPED_M_ALIGNMENT == 128
    assert GroupedImpl.parse("grouped_kernel") is GroupedImpl.GROUPED_KERNEL
    with pytest.raises(ConfigError):
        GroupedImpl.parse("loop")


def test_multi_stream_golden_rounds() -> None:
    # a model where one GEMM alone reaches half of what two or more reach together
    half = lambda s: 0.8 if s.batch >= 2 else 0.4  # noqa: E731
    r = grouped_gemm_efficiency(GemmShape(256, 256, 256, 9), half)
    # two rounds of four at 0.8, one single GEMM at 0.4: 9 / (8 / 0.8 + 1 / 0.4)
    assert r.efficiency == pytest.approx(9 / (8 / 0.8 + 1 / 0.4))
    assert (r.launches, r.concurrent) == (3, 4)
    one = grouped_gemm_efficiency(GemmShape(256, 256, 256, 1), half)
    assert (one.efficiency, one.launches, one.concurrent) == (0.4, 1, 1)


def test_grouped_kernel_pads_each_expert_to_the_m_block() -> None:
    full = lambda s: 1.0  # noqa: E731
    r = grouped_gemm_efficiency(GemmShape(129, 64, 64, 32), full, GroupedImpl.GROUPED_KERNEL)
    assert r.efficiency == pytest.approx(129 / 256) and r.launches == 1


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(16, 8192),
    n=st.sampled_from([768, 1536, 2048, 4096]),
    k=st.sampled_from([768, 2048, 7168]),
    groups=st.integers(1, 64),
)
def test_multi_stream_is_a_mix_of_its_rounds(m: int, n: int, k: int, groups: int) -> None:
    """The pass runs rounds of at most four concurrent GEMMs: its efficiency lies between the
    worst and the best round's, and each stream launches ``ceil(groups / 4)`` GEMMs."""
    g = GemmShape(m, n, k, groups)
    r = grouped_gemm_efficiency(g, _dense)
    rounds = [_dense(GemmShape(m, n, k, c)) for c in range(1, min(groups, 4) + 1)]
    assert min(rounds) - 1e-12 <= r.efficiency <= max(rounds) + 1e-12
    assert r.launches == math.ceil(groups / min(groups, TE_COMPUTE_STREAMS))


def test_expert_layers_use_the_grouped_model() -> None:
    """An expert GEMM pass: FLOP at the grouped efficiency, with its memory time, plus the
    busiest stream's launches."""
    cm = ComputeModel(
        get_gpu("H100-SXM5-80GB"),
        ComputeParams.for_gpu(get_gpu("H100-SXM5-80GB"), cast_weights_each_step=False),
    )
    w = build_model("qwen3_30b_a3b", batch_size=1, seq_len=4096, ep=16, layers=1, precision="bf16")
    fc2 = next(la for la in w.layers if la.name.endswith("experts_fc2"))
    assert fc2.expert_role is ExpertRole.EXPERT and fc2.gemm.batch == 8
    eff, launches = cm.grouped_gemm(fc2.gemm, DType.BF16)
    assert launches == 2  # 8 experts over 4 streams
    p = cm.params
    # the smooth roofline of the pass (perfmodel.compute.gemm.gemm_roofline_time)
    t_c = fc2.fwd_flop / (p.peak(DType.BF16) * eff.efficiency)
    t_m = fc2.fwd_bytes / (p.memory_bandwidth_Bps * p.memory_efficiency)
    expected = gemm_roofline_time(t_c, t_m) + launches * p.kernel_launch_s
    assert cm.layer_time(fc2, "bf16").fwd_s == pytest.approx(expected)


def test_router_stays_bf16_under_fp8() -> None:
    w = build_model("qwen3_30b_a3b", batch_size=1, seq_len=512, layers=1, precision="fp8")
    router = next(la for la in w.layers if la.name.endswith(".router"))
    fc1 = next(la for la in w.layers if la.name.endswith("experts_fc1"))
    assert router.expert_role is ExpertRole.ROUTER
    assert layer_matmul_dtype(router, Precision.FP8) is DType.BF16
    assert layer_matmul_dtype(fc1, Precision.FP8) is DType.FP8
