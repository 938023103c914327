"""Ranking quality against measurements: vTrain's single-node Megatron-DeepSpeed runs.

Source: VIA-Research/vTrain @f8dda8473a48, ``data/ground_truth_single.csv`` (measured iteration
times of GPT configurations under many (dp, tp, pp, micro-batch) plans on one 8-GPU A100 node),
sampled every 20th row into ``validation/published.jsonl`` (72 training rows).

Mapping (:func:`perfmodel.accuracy.vtrain_ranking_scenarios`; stated, not fitted): system ``dgx-a100`` (8 A100 with NVSwitch; vTrain's own simulator
assumes 150 GB/s intra-node), model ``gpt`` with the row's hidden/heads/layers/seq, precision
``fp16`` mixed with Adam (the repository does not state it; Megatron-DeepSpeed's usual recipe),
software preset ``megatron``, the row's dp/tp/pp, micro-batch (``batch.per_gpu``) and global batch.

A plan search compares plans of one job, so rows are grouped by (model, global batch, GPUs);
groups with at least 3 plans are scored:

- Kendall's tau-b between predicted and measured iteration time, averaged over groups weighted
  by their pairs ``n (n - 1) / 2``;
- whether the measured best plan is the predicted best (top 1), and, for groups with more than 3
  plans, whether it is in the predicted top 3 (in a group of 3, "top 3" is always true and is not
  counted);
- regret: measured time of the predicted-best plan over the measured best, minus 1.

Both the analytic predictor and the closed-form screen are scored. The thresholds are
"better than chance" (tau > 0 and top-1 hits above the 1/n of random picks), not tuned numbers.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from perfmodel.accuracy import vtrain_ranking_scenarios
from perfmodel.search.ranking import group_ranking, kendall_tau

pytestmark = pytest.mark.validation


@pytest.fixture(scope="module")
def predictions(published_rows: list[dict]) -> dict:
    pytest.importorskip(
        "perfmodel.api", reason="perfmodel.api (the prediction API) is not available"
    )
    from perfmodel.errors import PerfModelError
    from perfmodel.search._eval import analytic_evaluator
    from perfmodel.search.screen import PlanScreen

    pairs, skipped = vtrain_ranking_scenarios(published_rows)
    screens: dict[str, PlanScreen] = {}
    rows = []
    failed: dict[str, int] = defaultdict(int)
    for r, sc in pairs:
        key = repr(sorted(sc["model_args"].items()))
        if key not in screens:
            screens[key] = PlanScreen(
                {
                    k: sc[k]
                    for k in ("system", "model", "model_args", "precision", "optimizer", "software")
                }
            )
        try:
            analytic = analytic_evaluator(sc)["iteration_time_s"]
            screen = screens[key](sc)["iteration_time_s"]
        except PerfModelError as exc:
            failed[type(exc).__name__] += 1
            continue
        rows.append(
            {
                "id": r["id"],
                "group": (r["model"], sc["global_batch"], sc["gpus"]),
                "job": (r["model"], sc["global_batch"]),
                "plan": f"dp{sc['dp']} tp{sc['tp']} pp{sc['pp']} mb{sc['microbatch']}",
                "measured": float(r["value"]) / 1e3,
                "analytic": float(analytic),
                "screen": float(screen),
            }
        )
    return {"rows": rows, "skipped": skipped, "failed": dict(failed), "mapped": len(pairs)}


def _top1_rate(summary) -> tuple[float, float]:
    """(fraction of groups whose predicted best is the measured best, chance rate mean(1/n))."""
    hits = [g.predicted_best_measured_ratio == 1.0 for g in summary.groups]
    chance = float(np.mean([1.0 / g.n for g in summary.groups]))
    return float(np.mean(hits)), chance


def test_vtrain_ranking_quality(predictions: dict, capsys) -> None:
    rows = predictions["rows"]
    assert len(rows) >= 60, f"only {len(rows)} vTrain rows mapped ({predictions})"
    report = []
    results = {}
    for name in ("analytic", "screen"):
        s = group_ranking(
            rows, group_key="group", predicted_key=name, measured_key="measured", k=3, min_plans=3
        )
        big = [g for g in s.groups if g.n > 3]
        top1, chance = _top1_rate(s)
        pooled = kendall_tau([r[name] for r in rows], [r["measured"] for r in rows])
        errs = [100.0 * (r[name] / r["measured"] - 1) for r in rows]
        jobs = group_ranking(
            rows, group_key="job", predicted_key=name, measured_key="measured", k=3, min_plans=4
        )
        results[name] = (s, top1, chance, pooled)
        report.append(
            f"{name:>8}: {len(s.groups)} groups / {sum(g.n for g in s.groups)} plans: weighted tau "
            f"{s.weighted_tau:+.2f}; measured best = predicted best in {top1:.0%} of groups "
            f"(chance {chance:.0%}); measured best in predicted top 3: "
            f"{sum(g.best_in_top_k for g in big)}/{len(big)} groups with > 3 plans; median regret "
            f"{100 * s.median_regret:.1f}%"
        )
        report.append(
            f"{'':>10}grouped by job only (GPU count free, >= 4 plans): {len(jobs.groups)} groups, tau "
            f"{jobs.weighted_tau:+.2f}, best in top 3 {jobs.top_k_fraction:.0%}; "
            f"all {len(rows)} rows pooled: tau {pooled:+.2f}; signed error median {np.median(errs):+.0f}%, "
            f"worst {max(errs, key=abs):+.0f}%"
        )
    with capsys.disabled():
        print(
            "\nvTrain single-node ranking quality (Kendall tau predicted vs measured iteration time):"
        )
        print(
            f"  {predictions['mapped']} rows mapped, skipped {predictions['skipped'] or 'none'}, failed {predictions['failed'] or 'none'}"
        )
        for line in report:
            print("  " + line)
    for name, (s, top1, chance, pooled) in results.items():
        assert s.groups, "no group with 3 or more plans"
        assert s.weighted_tau > 0.0, (
            f"{name}: plan ranking no better than chance (tau {s.weighted_tau:.2f})"
        )
        assert top1 > chance, (
            f"{name}: predicted best is the measured best in {top1:.0%} of groups, chance {chance:.0%}"
        )
        assert pooled > 0.5, f"{name}: pooled tau {pooled:.2f}"
        assert math.isfinite(s.median_regret)
