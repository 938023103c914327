"""Reproduce the fit of :data:`perfmodel.compute.gemm.GEMM_OVERLAP_EXPONENT`.

The smooth GEMM roofline ``(t_c**p + t_m**p) ** (1/p)`` has one exponent ``p``. It was chosen
over 50 kernel benchmarks on Hopper, none of them a training row:

- the 28 FP8 GEMMs of DeepGEMM's README tables (``calibration/kernels/
  deepgemm-327ec92-h800-fp8.json``: dense GEMMs at 64, 128 and 4,096 rows, grouped contiguous
  and grouped masked layouts);
- the 22 ``m x 4096 x 4096`` cuBLAS GEMMs of this repository's H100 calibration run
  (``calibration/h100-sxm5-80gb/log.txt``), ``m`` = 1-1,024 in BF16 and 16-1,024 in FP8.

Each is predicted with the H100 SXM5 catalogue entry at the burst rates of a short
benchmark (``ComputeParams.for_gpu(burst=True)``), its compute time from the model's tile,
wave and split-K efficiency (grouped GEMMs: the model's grouped efficiency) and its memory
time from the operand and output bytes (an FP8 GEMM writes BF16), combined by
:func:`perfmodel.compute.gemm.gemm_roofline_time` at each ``p`` of the scan. The score is the
mean ``|log(predicted / measured TFLOP/s)|``; the sharp roofline is ``p`` = infinity.

Usage::

    python tools/fit_gemm_overlap.py             # the scan at burst rates (the fit)
    python tools/fit_gemm_overlap.py --sustained # the same at the sustained rates

``tests/compute/test_gemm_overlap_fit.py`` checks that the shipped exponent is the scan's
choice.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from perfmodel.compute import ComputeModel
from perfmodel.compute.gemm import GEMM_OVERLAP_EXPONENT, gemm_roofline_time
from perfmodel.compute.params import FP8_GEMM_OUTPUT_BYTES, ComputeParams
from perfmodel.dtypes import DType
from perfmodel.hardware import get_gpu
from perfmodel.workload.layers import GemmShape

ROOT = Path(__file__).resolve().parents[1]
DEEPGEMM = ROOT / "calibration" / "kernels" / "deepgemm-327ec92-h800-fp8.json"
H100_LOG = ROOT / "calibration" / "h100-sxm5-80gb" / "log.txt"
#: The scan: ``p`` = 2.0-6.0 in steps of 0.25, and the sharp roofline.
EXPONENTS = (*(2.0 + 0.25 * i for i in range(17)), math.inf)
#: The cuBLAS sweep's rows taken (``m x 4096 x 4096``, ``m`` up to 1,024: the rows near and
#: below the ridge; larger ``m`` are compute-bound at any ``p``).
_LOG_ROW = re.compile(r"gemm (bf16|fp8) (\d+)x4096x4096 +[0-9.]+ (?:us|ms), ([0-9.]+) TFLOP/s")
_MAX_LOG_ROWS = 1024


@dataclass(frozen=True)
class KernelPoint:
    """One measured GEMM: its shape (``batch`` = groups), format, whether it is a grouped
    kernel, the measured rate in TFLOP/s and where it comes from."""

    gemm: GemmShape
    dtype: DType
    grouped: bool
    measured_tflops: float
    source: str


def deepgemm_points(path: Path = DEEPGEMM) -> tuple[KernelPoint, ...]:
    """The 28 FP8 rows of DeepGEMM's README tables."""
    doc = json.loads(path.read_text())
    rows = [(1, r, False, "DeepGEMM dense") for r in doc["dense"]]
    rows += [(r["groups"], r, True, "DeepGEMM contiguous") for r in doc["grouped_contiguous"]]
    rows += [(r["groups"], r, True, "DeepGEMM masked") for r in doc["grouped_masked"]]
    return tuple(
        KernelPoint(GemmShape(r["m"], r["n"], r["k"], g), DType.FP8, grouped, r["tflops"], src)
        for g, r, grouped, src in rows
    )


def calibration_log_points(path: Path = H100_LOG) -> tuple[KernelPoint, ...]:
    """The BF16 and FP8 ``m x 4096 x 4096`` GEMMs (``m`` <= 1,024) of the H100 calibration log."""
    points = {}
    for line in path.read_text().splitlines():
        hit = _LOG_ROW.search(line)
        if hit and int(hit[2]) <= _MAX_LOG_ROWS:
            dtype = DType.BF16 if hit[1] == "bf16" else DType.FP8
            points[(dtype, int(hit[2]))] = float(hit[3])
    return tuple(
        KernelPoint(GemmShape(m, 4096, 4096, 1), dtype, False, rate, "H100 cuBLAS log")
        for (dtype, m), rate in points.items()
    )


def predicted_tflops(model: ComputeModel, point: KernelPoint, exponent: float) -> float:
    """The model's rate for ``point`` with the roofline exponent ``exponent``: the compute time
    of :meth:`ComputeModel.gemm_time` (dense, with the alignment factor) or of the grouped
    efficiency, the memory time of its operand and output bytes, combined at ``exponent``."""
    g, d, p = point.gemm, point.dtype, model.params
    if point.grouped:
        eff = model.grouped_gemm(g, d)[0].efficiency
    else:
        eff = model.gemm(g, d).efficiency * p.alignment_factor(d, g.n, g.k)
    t_c = g.flop / (p.peak(d) * eff)
    out_bytes = FP8_GEMM_OUTPUT_BYTES if d is DType.FP8 else d.itemsize
    nbytes = g.batch * ((g.m * g.k + g.k * g.n) * d.itemsize + g.m * g.n * out_bytes)
    t_m = nbytes / (p.memory_bandwidth_Bps * p.memory_efficiency)
    return g.flop / gemm_roofline_time(t_c, t_m, exponent) / 1e12


def h100_model(*, burst: bool = True) -> ComputeModel:
    """The H100 SXM5 entry at burst (a short benchmark's) or sustained rates."""
    gpu = get_gpu("H100-SXM5-80GB")
    return ComputeModel(gpu, ComputeParams.for_gpu(gpu, burst=burst))


def mean_abs_log_error(
    model: ComputeModel, points: tuple[KernelPoint, ...], exponent: float
) -> float:
    """Mean ``|log(predicted / measured)|`` over ``points`` at ``exponent``."""
    return statistics.fmean(
        abs(math.log(predicted_tflops(model, pt, exponent) / pt.measured_tflops)) for pt in points
    )


def scan(*, burst: bool = True) -> Iterator[tuple[float, float]]:
    """``(p, mean |log error|)`` over :data:`EXPONENTS` and all 50 points."""
    model = h100_model(burst=burst)
    points = deepgemm_points() + calibration_log_points()
    for p in EXPONENTS:
        yield p, mean_abs_log_error(model, points, p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sustained", action="store_true", help="sustained instead of burst rates")
    args = ap.parse_args(argv)
    rows = list(scan(burst=not args.sustained))
    best = min(rows, key=lambda r: r[1])
    print(f"{'p':>6}  mean |log(model / measured)|  (50 Hopper GEMMs)")
    for p, err in rows:
        mark = "  <- minimum" if (p, err) == best else ""
        mark += "  <- shipped" if p == GEMM_OVERLAP_EXPONENT else ""
        print(f"{p:>6}  {err:.4f}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
