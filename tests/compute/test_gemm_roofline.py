"""How a GEMM pass combines its compute and memory times (issue 24: few rows per weight).

``gemm_roofline_time`` is the smooth maximum of the two (exponent fitted over kernel tables,
``perfmodel.compute.gemm.GEMM_OVERLAP_EXPONENT``); an FP8 GEMM's output is BF16 in its memory
time.
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from perfmodel.compute import ComputeModel
from perfmodel.compute.gemm import GEMM_OVERLAP_EXPONENT, gemm_roofline_time
from perfmodel.dtypes import DType
from perfmodel.hardware import get_gpu
from perfmodel.workload.layers import GemmShape

H100 = ComputeModel(get_gpu("H100-SXM5-80GB"))
times = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def _mem_s(nbytes: float) -> float:
    p = H100.params
    return nbytes / (p.memory_bandwidth_Bps * p.memory_efficiency)


def test_golden_values() -> None:
    # (3^3 + 4^3)^(1/3) = 91^(1/3) = 4.498
    assert math.isclose(gemm_roofline_time(3.0, 4.0), 91.0 ** (1.0 / 3.0), rel_tol=1e-12)
    assert gemm_roofline_time(0.0, 0.0) == 0.0
    assert gemm_roofline_time(2.0, 0.0) == 2.0


@given(times, times)
def test_between_the_sharp_roofline_and_its_ridge_bound(c: float, m: float) -> None:
    t = gemm_roofline_time(c, m)
    hi = max(c, m)
    assert hi - 1e-15 <= t <= 2.0 ** (1.0 / GEMM_OVERLAP_EXPONENT) * hi + 1e-15
    assert t == gemm_roofline_time(m, c)
    assert gemm_roofline_time(c, m, exponent=float("inf")) == hi


@given(times, times, st.floats(min_value=0.0, max_value=1.0))
def test_never_faster_with_more_work(c: float, m: float, extra: float) -> None:
    t = gemm_roofline_time(c, m)
    assert gemm_roofline_time(c + extra, m) >= t - 1e-15
    assert gemm_roofline_time(c, m + extra) >= t - 1e-15


def test_fp8_gemm_writes_bf16() -> None:
    """A memory-dominated FP8 GEMM (k = 16) moves its output in BF16: 2 B per element. Before
    the fix the output was counted at the operands' 1 B, half the bytes of this shape."""
    g = GemmShape(8192, 8192, 16)
    out_bf16 = _mem_s(g.m * g.k + g.k * g.n + 2 * g.m * g.n)
    assert H100.gemm_time(g, DType.FP8) >= out_bf16
    # an explicit itemsize still applies to every operand and the output
    assert H100.gemm_time(g, DType.FP8, itemsize=1) < out_bf16


def test_cuda_core_gemm_keeps_the_sharp_roofline() -> None:
    """The exponent was fitted on tensor-core GEMMs; FP32 GEMMs on CUDA cores keep max()."""
    g = GemmShape(256, 4096, 4096)
    eff = H100.gemm(g, DType.FP32).efficiency
    t_c = g.flop / (H100.params.peak(DType.FP32) * eff)
    t_m = _mem_s(4 * (g.m * g.k + g.k * g.n + g.m * g.n))
    assert H100.gemm_time(g, DType.FP32) == max(t_c, t_m)


def test_few_rows_per_weight_slower_than_the_sharp_roofline() -> None:
    """A 256-row BF16 GEMM of a 4096 x 4096 weight sits near the H100's ridge point: it is
    priced above max(compute, memory), by at most the ridge bound 2^(1/p)."""
    g = GemmShape(256, 4096, 4096)
    eff = H100.gemm(g, DType.BF16).efficiency
    t_c = g.flop / (H100.params.peak(DType.BF16) * eff)
    t_m = _mem_s(2 * (g.m * g.k + g.k * g.n + g.m * g.n))
    t = H100.gemm_time(g, DType.BF16)
    assert 1.05 * max(t_c, t_m) < t <= 2.0 ** (1.0 / GEMM_OVERLAP_EXPONENT) * max(t_c, t_m)
