"""Validation tier: predicted vs published multi-GPU training measurements.

Rows come from ``validation/published.jsonl`` (``published_rows`` fixture), kind
``training_scaling``; the mapping lives in :mod:`perfmodel.accuracy`. A row is mapped to a :class:`perfmodel.api.Scenario` only where it states
enough (model in the zoo, a catalogue or custom system matching its hardware, batch, precision);
every other row is skipped with its reason, and the counts are printed. Predictions use the
analytic executor (the same task graph as the SimPy one, without link contention).

Printed: per-row signed error (predicted / measured - 1), the median and worst |error| by
interconnect class, the scaling-efficiency error in points for rows whose table has a 1-GPU row,
and the skip reasons. Rows used to fit a constant (``TF_MIRRORED_SPLIT_PER_SAMPLE_S``) are
reported separately and excluded from the judged statistics.

Assertions are the project's first targets (``issues show 5``): median |error| < 15 % over judged
rows, median scaling-efficiency error < 10 points. They are reported, and asserted, honestly: a
failing target is a finding to explain, not a threshold to move.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfmodel.accuracy import (
    FIT_ROWS,
    Mapped,
    TrainingResults,
    accuracy_table,
    assumed_precision,
    load_modern,
    load_scale,
    load_systems2026,
    map_row,
    scaling_efficiency_points,
    table_in_readme,
    to_markdown,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(training: TrainingResults) -> dict[str, Any]:
    return {"mapped": list(training.mapped), "skipped": training.skipped, "failed": training.failed}


def _stats(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"n={len(a):3d}  median |err| {100 * statistics.median(a):5.1f}%  worst {100 * max(a):6.1f}%"


def test_training_rows_report(results: dict[str, Any]) -> None:
    mapped, skipped, failed = results["mapped"], results["skipped"], results["failed"]
    print("\n=== training validation (analytic executor) ===")
    print(f"{'row':<46}{'class':<15}{'measured':>12}{'predicted':>12}{'error':>8}")
    by_class: dict[str, list[float]] = {}
    judged: list[float] = []
    fit: list[float] = []
    assumed: list[float] = []
    for m, pred, meas, _ in mapped:
        # signed error of the predicted quantity (time rows: + means predicted slower)
        err = pred / meas - 1
        tag = " (fit row)" if m.row["id"] in FIT_ROWS else ""
        print(
            f"{m.row['id'][:45]:<46}{m.interconnect:<15}{meas:12.4g}{pred:12.4g}{100 * err:+7.1f}%{tag}"
        )
        if m.row["id"] in FIT_ROWS:
            fit.append(err)
            continue
        if assumed_precision(m.row):
            assumed.append(err)
            continue
        judged.append(err)
        by_class.setdefault(m.interconnect, []).append(err)
    print("--- by interconnect (judged rows) ---")
    for k in sorted(by_class):
        print(f"{k:<16}{_stats(by_class[k])}")
    print(f"{'ALL judged':<16}{_stats(judged)}")
    if fit:
        print(f"{'fit rows':<16}{_stats(fit)}")
    if assumed:
        print(
            f"{'vTrain (fp16 assumed, not judged)':<16} {_stats(assumed)}; median signed {100 * statistics.median(assumed):+.1f}%"
        )
    print(f"--- skipped {len(skipped)} rows ---")
    reasons: dict[str, int] = {}
    for why in skipped.values():
        key = re.sub(r"'.*'", "'...'", why)
        reasons[key] = reasons.get(key, 0) + 1
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d}  {why}")
    if failed:
        print(f"--- {len(failed)} rows raised ---")
        for rid, why in failed.items():
            print(f"  {rid}: {why}")
    assert len(judged) >= 150, "fewer rows mapped than expected: the mapping regressed"
    assert len(assumed) >= 60, "vTrain rows no longer mapped"
    multi = [
        p / q - 1
        for m, p, q, _ in mapped
        if int(m.row["hardware"]["gpus"]) > 1
        and m.row["id"] not in FIT_ROWS
        and not assumed_precision(m.row)
    ]
    print(f"{'multi-GPU rows':<16}{_stats(multi)}")


def test_median_error_target(results: dict[str, Any]) -> None:
    judged = [
        p / q - 1
        for m, p, q, _ in results["mapped"]
        if m.row["id"] not in FIT_ROWS and not assumed_precision(m.row)
    ]
    med = statistics.median(abs(e) for e in judged)
    # 13.8% on 23 Nov 2026 (18.0% before the convolution memory format was modelled: Lambda's
    # and DeepLearningExamples' TF32 ResNet-50 runs are NCHW, see docs/predict.md)
    assert med < 0.15, f"median |error| {100 * med:.1f}% misses the 15% target"


def test_scaling_efficiency_error(training: TrainingResults) -> None:
    """Scaling efficiency = throughput(n) / (n throughput(1)) within one published table."""
    print("\n=== scaling efficiency: predicted vs measured (points) ===")
    pts = scaling_efficiency_points(training)
    for p in pts:
        key = p.group
        print(
            f"{key[1][:28]:<29}{key[3][:18]:<19}{key[2][:10]:<11}{p.gpus:>5} GPUs  measured {100 * p.measured:5.1f}%  predicted {100 * p.predicted:5.1f}%  {p.error_points:+6.1f} pts"
        )
    errs = [p.error_points for p in pts]
    assert errs, "no table with a 1-GPU row was mapped"
    med = statistics.median(abs(e) for e in errs)
    print(
        f"median |scaling-efficiency error| {med:.1f} points over {len(errs)} points; worst {max(abs(e) for e in errs):.1f}"
    )
    assert med < 10.0, (
        f"median scaling-efficiency error {med:.1f} points misses the 10-point target"
    )


def test_every_mapped_row_predicts(results: dict[str, Any]) -> None:
    assert not results["failed"], f"rows raised: {list(results['failed'].items())[:5]}"
    for _m, pred, _meas, rep in results["mapped"]:
        assert pred > 0 and math.isfinite(pred)
        assert rep.breakdown.total_s == pytest.approx(rep.iteration_time_s, rel=1e-6)


def test_mapping_keeps_what_the_row_says(published_rows: list[dict]) -> None:
    row = next(r for r in published_rows if r["id"] == "ptdp-tab1-145.6B")
    m = map_row(row)
    assert isinstance(m, Mapped)
    assert (m.scenario.tp, m.scenario.pp, m.scenario.global_batch, m.scenario.gpus) == (
        8,
        8,
        2304,
        1536,
    )
    assert m.scenario.fidelity == "analytic"  # the module docstring's executor
    assert replace(m.scenario, fidelity="simulated").fidelity == "simulated"


def test_readme_accuracy_table_is_generated(
    published_rows: list[dict], training, shared_data: Path
) -> None:
    """The README's table is what ``perfmodel validate --published`` computes from the shipped
    rows (``published.jsonl``, ``modern.jsonl``, ``scale.jsonl`` and ``systems2026.jsonl``): after a model change,
    regenerate it with ``python3 -m perfmodel validate --published --update-readme README.md``."""
    table = to_markdown(
        accuracy_table(
            published_rows,
            training=training,
            modern=load_modern(shared_data),
            scale=load_scale(shared_data),
            systems2026=load_systems2026(shared_data),
        )
    )
    readme = (REPO / "README.md").read_text()
    assert table_in_readme(readme) == table, (
        "README accuracy table is stale: run "
        "`python3 -m perfmodel validate --published --update-readme README.md`"
    )
