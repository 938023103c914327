"""Validation tier: single-GPU compute predictions against published measurements.

No calibration: datasheet peaks and the documented efficiency model of
:class:`perfmodel.compute.ComputeParams`. Rows that fed a default (best-shape matmul ceilings,
DeepBench fp32 3x3 convolutions) are reported as in-sample and kept out of the headline median.

Run with ``pytest tests/validation/test_compute_validation.py -s`` to see the per-row table.
The assertions are tolerances on the *aggregate* error stated in the README; a regression of the
model beyond them fails the test.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import pytest

from perfmodel.compute.validation import RowPrediction, Skipped, deduplicate_runs, predict_row
from perfmodel.hardware import get_gpu

pytestmark = pytest.mark.validation

#: Headline target of issue 4: median absolute error of out-of-sample rows under 20%.
MEDIAN_TARGET = 0.20


def _single_gpu(rows: list[dict]) -> list[dict]:
    return [
        r
        for r in rows
        if r["kind"] == "compute_microbenchmark"
        or (r["kind"] == "training_scaling" and r["hardware"].get("gpus") == 1)
    ]


@pytest.fixture(scope="module")
def results(published_rows: list[dict]) -> list[RowPrediction | Skipped]:
    return deduplicate_runs([predict_row(r) for r in _single_gpu(published_rows)])


def _table(results: list[RowPrediction | Skipped]) -> str:
    lines = [
        f"{'group':24s} {'row id':46s} {'gpu':15s} {'measured':>10s} {'predicted':>10s} "
        f"{'unit':9s} {'error':>8s}  note"
    ]
    for r in results:
        if isinstance(r, RowPrediction):
            flag = "in-sample" if r.in_sample else ""
            lines.append(
                f"{r.group:24s} {r.id:46s} {r.gpu:15s} {r.measured:10.3f} {r.predicted:10.3f} "
                f"{r.unit:9s} {100 * r.signed_error:+7.1f}%  {flag} {r.note}"
            )
    groups: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for r in results:
        if isinstance(r, RowPrediction):
            groups[(r.group, r.in_sample)].append(abs(r.signed_error))
    lines.append("")
    lines.append(f"{'group':24s} {'sample':10s} {'rows':>4s} {'median|err|':>12s} {'worst':>8s}")
    for (g, ins), errs in sorted(groups.items()):
        lines.append(
            f"{g:24s} {'in' if ins else 'out':10s} {len(errs):4d} "
            f"{100 * statistics.median(errs):11.1f}% {100 * max(errs):7.1f}%"
        )
    skipped = Counter(r.reason for r in results if isinstance(r, Skipped))
    lines.append("")
    lines.append(f"skipped {sum(skipped.values())} rows:")
    for reason, n in skipped.most_common():
        lines.append(f"  {n:3d}  {reason}")
    return "\n".join(lines)


def test_compute_validation_table(results: list[RowPrediction | Skipped]) -> None:
    """Print the per-row table; judge the out-of-sample median against the target."""
    print("\n" + _table(results))
    out = [abs(r.signed_error) for r in results if isinstance(r, RowPrediction) and not r.in_sample]
    training = [
        abs(r.signed_error)
        for r in results
        if isinstance(r, RowPrediction) and r.unit not in ("TFLOP/s", "ms")
    ]
    med = statistics.median(out)
    print(
        f"\nout-of-sample rows: {len(out)}, median |error| {100 * med:.1f}%, "
        f"worst {100 * max(out):.1f}%; training rows: {len(training)}, "
        f"median {100 * statistics.median(training):.1f}%"
    )
    assert len(out) >= 60, "fewer rows mapped than when the tolerance was set"
    assert med < MEDIAN_TARGET


def test_every_single_gpu_row_is_mapped_or_explained(
    results: list[RowPrediction | Skipped],
) -> None:
    for r in results:
        if isinstance(r, Skipped):
            assert r.reason, r.id
        else:
            assert r.predicted > 0 and r.measured > 0, r.id


def test_deepbench_gemm_out_of_sample(results: list[RowPrediction | Skipped]) -> None:
    """Tile/wave model on DeepBench V100 GEMMs (no DeepBench GEMM row fed a default)."""
    errs = [
        abs(r.signed_error)
        for r in results
        if isinstance(r, RowPrediction) and r.group == "DeepBench GEMM"
    ]
    assert len(errs) == 20
    assert statistics.median(errs) < 0.15


def test_in_sample_ceilings_reproduced(results: list[RowPrediction | Skipped]) -> None:
    """The matmul ceilings fed ``tensor_core_efficiency`` (their median): they come back with a
    median error under 15% and none beyond 25%, except rows measured above the datasheet peak
    (RTX 4090: fp16 172 TFLOP/s against the 165 TFLOP/s FP32-accumulate peak, tf32 86 against
    82.6; the card boosts beyond its rated clock). No efficiency <= 1 reproduces those, so they are checked apart:
    predicted at or below the datasheet peak, and reported."""
    rows = [r for r in results if isinstance(r, RowPrediction) and r.group.startswith("matmul")]
    # 12 fed the fit; the GB200 MAMF row joined when the GB200 entered the catalogue (issue 25)
    # and is judged out of sample by the same bounds
    assert len(rows) == 13
    assert [r.id for r in rows if not r.in_sample] == ["mamf-gb200-sxm-bf16"]
    above_peak = []
    errs = []
    for r in rows:
        dtype = r.what.split()[-1]  # the row's matmul dtype: fp16, bf16, fp8 or tf32
        peak_tflops = get_gpu(r.gpu).peak(dtype) / 1e12
        if r.measured > peak_tflops:
            above_peak.append(r)
            assert r.predicted <= peak_tflops
        else:
            errs.append(abs(r.signed_error))
    print(f"\nmatmul ceilings above the datasheet peak: {[r.id for r in above_peak]}")
    assert [r.id for r in above_peak] == ["mli-matmul-rtx4090-fp32", "mli-matmul-rtx4090-fp16"]
    assert statistics.median(errs) < 0.15 and max(errs) < 0.25


def test_seed_single_gpu_row(seed_rows: list[dict]) -> None:
    """The founding case on one GPU: Keras ResNet50V2, 128x128, batch 256, V100 (45 s/epoch)."""
    rows = [r for r in seed_rows if r["kind"] == "training_scaling" and r["hardware"]["gpus"] == 1]
    results = [predict_row(r) for r in rows]
    mapped = [r for r in results if isinstance(r, RowPrediction)]
    print("\n" + _table(results))
    assert [r.id for r in mapped] == ["seed-ctepower-rn50v2-1g"]
    assert abs(mapped[0].signed_error) < 0.35
