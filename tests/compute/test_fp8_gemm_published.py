"""The FP8 GEMM model on Hopper held against a published kernel benchmark (issue 24, item 8).

Source: the DeepGEMM README's "Performance" tables at deepseek-ai/DeepGEMM 327ec92
(2025-04-09): FP8 (E4M3, 1x128 activation / 128x128 weight scaling) GEMMs on H800 SXM5 with
NVCC 12.8, TFLOP/s per shape, and each shape's speed-up over DeepSeek's "internally and
carefully optimized implementation based on CUTLASS 3.6". The H800 SXM5 is the H100 SXM5's
GH100 die with NVLink and FP64 cut (NVIDIA H800 product brief); its FP8 tensor rate is the
H100 SXM5's, so the tables read directly against ``H100-SXM5-80GB``.

These are kernel benchmarks, not training rows. Two reference rates per shape bracket what a
training stack's FP8 GEMM reaches: DeepGEMM's (the fastest published kernel at the shape) and
the CUTLASS 3.6 implementation's (``DeepGEMM / speed-up``). Megatron-Core's grouped GEMMs
(Transformer Engine's per-expert cuBLAS calls) and torchao's per-tensor FP8 are neither, so
the model is held inside the bracket, not to either end.

What this checks for the fine-grained MoE rows (Qwen3-30B-A3B / 235B-A22B on H100: 2,048-8,192
rows per expert, ``k`` 768-4,096, ``n`` 1,536-4,096): at training sizes (``m`` >= 4,096 rows
per GEMM or per expert) the model is inside the bracket, so their grouped GEMMs are not where
those rows' optimism comes from. Below it (DeepGEMM's masked layout at 256-512 rows per expert,
and 128-row dense GEMMs) the sharp roofline kept the large-GEMM rate: a GEMM pass now takes
the smooth maximum of its compute and memory times
(:func:`perfmodel.compute.gemm.gemm_roofline_time`), whose one exponent was fitted over these
28 rows and 22 H100 cuBLAS GEMMs of the calibration log (so the tables below are in-sample for
that exponent; the training rows judge it; ``tools/fit_gemm_overlap.py`` re-runs the fit and
``test_gemm_overlap_fit.py`` checks it). Every row of the tables is tested; the misses left are
strict ``xfail`` tests: 2 x 512 rows of 4096 x 7168 (the model takes a third of the measured
drop from 1,024 rows), the 64- and 128-row GEMMs of 2112 x 7168, whose 17-33 column tiles the
model spreads over the SMs by split-K, which DeepGEMM and its CUTLASS 3.6 baseline do not do,
and four 64- and 128-row weight streams that DeepGEMM runs at 60-68% of the HBM bandwidth where
the model streams at its element-wise kernels' 75%.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from perfmodel.compute import ComputeModel
from perfmodel.compute.gemm import gemm_roofline_time
from perfmodel.compute.params import FP8_GEMM_OUTPUT_BYTES
from perfmodel.dtypes import DType
from perfmodel.hardware import get_gpu
from perfmodel.workload.layers import GemmShape

H100 = ComputeModel(get_gpu("H100-SXM5-80GB"))
TFLOPS = 1e12

#: The README's tables, transcribed once (``calibration/kernels/deepgemm-327ec92-h800-fp8.json``;
#: ``tools/fit_gemm_overlap.py`` reads the same file).
_TABLES = json.loads(
    (
        Path(__file__).resolve().parents[2]
        / "calibration"
        / "kernels"
        / "deepgemm-327ec92-h800-fp8.json"
    ).read_text()
)
#: "Normal GEMMs for dense models", rows with M = 4096: (m, n, k, DeepGEMM TFLOP/s, speed-up).
DENSE_TRAINING = tuple(
    (r["m"], r["n"], r["k"], r["tflops"], r["speedup"]) for r in _TABLES["dense"] if r["m"] == 4096
)
#: "Grouped GEMMs for MoE models (contiguous layout)": (groups, m per group, n, k, TFLOP/s,
#: speed-up).
GROUPED_CONTIGUOUS = tuple(
    (r["groups"], r["m"], r["n"], r["k"], r["tflops"], r["speedup"])
    for r in _TABLES["grouped_contiguous"]
)
#: "Grouped GEMMs for MoE models (masked layout)": (groups, m per group, n, k, TFLOP/s); the
#: 1,024-row group at 4096 x 7168 is :func:`test_grouped_fp8_1024_rows_at_deepgemm`'s.
GROUPED_MASKED = tuple(
    (r["groups"], r["m"], r["n"], r["k"], r["tflops"])
    for r in _TABLES["grouped_masked"]
    if (r["m"], r["n"]) != (1024, 4096)
)
#: "Normal GEMMs for dense models", rows with M = 64 and 128: (m, n, k, TFLOP/s).
DENSE_SMALL_M = tuple(
    (r["m"], r["n"], r["k"], r["tflops"]) for r in _TABLES["dense"] if r["m"] < 4096
)


def _dense_tflops(m: int, n: int, k: int) -> float:
    g = GemmShape(m, n, k, 1)
    return g.flop / H100.gemm_time(g, DType.FP8) / TFLOPS


def _grouped_tflops(groups: int, m: int, n: int, k: int) -> float:
    eff, _ = H100.grouped_gemm(GemmShape(m, n, k, groups), DType.FP8)
    return eff.efficiency * H100.params.peak(DType.FP8) / TFLOPS


@pytest.mark.parametrize(("m", "n", "k", "deepgemm", "speedup"), DENSE_TRAINING)
def test_dense_fp8_inside_the_published_bracket(
    m: int, n: int, k: int, deepgemm: float, speedup: float
) -> None:
    got = _dense_tflops(m, n, k)
    assert deepgemm / speedup <= got <= deepgemm, (m, n, k, round(got))


@pytest.mark.parametrize(("groups", "m", "n", "k", "deepgemm", "speedup"), GROUPED_CONTIGUOUS)
def test_grouped_fp8_inside_the_published_bracket(
    groups: int, m: int, n: int, k: int, deepgemm: float, speedup: float
) -> None:
    got = _grouped_tflops(groups, m, n, k)
    assert deepgemm / speedup <= got <= deepgemm, (groups, m, n, k, round(got))


def test_grouped_rate_falls_with_the_rows_per_expert() -> None:
    """The same grouped GEMM with fewer rows per expert is never faster (more weight bytes
    and fewer tiles per FLOP): the model's rate is non-increasing as ``m`` falls at the
    Qwen3-30B-A3B expert shapes (8 local experts, ``2 x 768`` and ``768 -> 2048``)."""
    for n, k in ((1536, 2048), (2048, 768)):
        rates = [_grouped_tflops(8, m, n, k) for m in (8192, 4096, 2048, 1024, 512, 256, 128)]
        assert all(a >= b - 1e-9 for a, b in itertools.pairwise(rates)), (n, k, rates)


def _grouped_layer_tflops(groups: int, m: int, n: int, k: int) -> float:
    """The rate a grouped layer's pass is priced at: the smooth maximum of its grouped compute
    time and its memory time (FP8 operands, BF16 output), as ``ComputeModel._pass_time``."""
    g = GemmShape(m, n, k, groups)
    t_c = g.flop / (_grouped_tflops(groups, m, n, k) * TFLOPS)
    nbytes = groups * (m * k + k * n + FP8_GEMM_OUTPUT_BYTES * m * n)
    t_m = nbytes / (H100.params.memory_bandwidth_Bps * H100.params.memory_efficiency)
    return g.flop / gemm_roofline_time(t_c, t_m) / TFLOPS


def test_grouped_fp8_1024_rows_at_deepgemm() -> None:
    # masked layout, one group of 1,024 rows, 4096 x 7168: 1,233 TFLOP/s
    assert _grouped_layer_tflops(1, 1024, 4096, 7168) == pytest.approx(1233, rel=0.05)


def test_masked_rate_falls_with_the_rows_per_weight_matrix() -> None:
    """DeepGEMM's masked layout runs 128 tiles of 256 x 128 at 1,024, 512 and 256 rows per
    group (``get_best_configs`` at 327ec92): equal tiles and waves, and yet 1,233 -> 1,040 ->
    932 TFLOP/s as each weight matrix serves fewer rows. The model's rate falls too, by at
    least half the measured drop (the sharp roofline kept 1,243 at all three)."""
    rates = [_grouped_layer_tflops(g, m, 4096, 7168) for g, m in ((1, 1024), (2, 512), (4, 256))]
    assert rates[0] > rates[1] > rates[2], rates
    assert rates[0] - rates[2] >= 0.5 * (1233 - 932), rates


_MISS_512 = pytest.mark.xfail(
    strict=True,
    reason="known miss: 2 x 512 rows of 4096 x 7168 at ~1,160 TFLOP/s, DeepGEMM 1,040 (the "
    "smooth roofline's one exponent, fitted over 50 kernel rows, takes a third of the drop)",
)


@pytest.mark.parametrize(
    ("groups", "m", "n", "k", "deepgemm"),
    [
        pytest.param(*row, marks=_MISS_512) if row[:2] == (2, 512) and row[3] == 7168 else row
        for row in GROUPED_MASKED
    ],
)
def test_grouped_fp8_small_experts_not_faster_than_deepgemm(
    groups: int, m: int, n: int, k: int, deepgemm: float
) -> None:
    assert _grouped_layer_tflops(groups, m, n, k) <= 1.02 * deepgemm


_MISS_NARROW_N = pytest.mark.xfail(
    strict=True,
    reason="known miss: 64-128 x 2112 x 7168 has 17-33 column tiles for 132 SMs; the model "
    "assumes cuBLAS's split-K (~280 / ~510 TFLOP/s), which DeepGEMM (206 / 352) and its "
    "CUTLASS 3.6 baseline do not use",
)
_MISS_WEIGHT_STREAM = pytest.mark.xfail(
    strict=True,
    reason="known miss: at 64-128 rows these GEMMs stream their FP8 weights, and DeepGEMM's "
    "stream reaches 2.0-2.3 TB/s (60-68% of the H100's 3.35 TB/s) where the model streams at "
    "the 2.52 TB/s its calibration measured for element-wise kernels: 4-15% faster than "
    "DeepGEMM (the smooth roofline's exponent was fitted with these rows in; the model's GEMM "
    "memory time has no weight-stream efficiency of its own)",
)
#: The 64- and 128-row shapes the model prices faster than DeepGEMM, by cause.
_SMALL_M_MISSES = {
    (2112, 7168): _MISS_NARROW_N,
    (32768, 512): _MISS_WEIGHT_STREAM,
    (4096, 7168): _MISS_WEIGHT_STREAM,
}


def _small_m_param(m: int, n: int, k: int, deepgemm: float) -> object:
    mark = _SMALL_M_MISSES.get((n, k))
    row = (m, n, k, deepgemm)
    return row if mark is None else pytest.param(*row, marks=mark)


@pytest.mark.parametrize(
    ("m", "n", "k", "deepgemm"), [_small_m_param(*row) for row in DENSE_SMALL_M]
)
def test_dense_fp8_64_and_128_rows_not_faster_than_deepgemm(
    m: int, n: int, k: int, deepgemm: float
) -> None:
    assert _dense_tflops(m, n, k) <= 1.02 * deepgemm
