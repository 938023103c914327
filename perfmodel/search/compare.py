"""Plan search: enumerate, predict with the fast path, prune, rank, confirm the top with the simulation.

Two stages (the architecture's "closed-form fast path for search, checked against the simulation"):

1. every structurally valid plan (:func:`perfmodel.search.plans.enumerate_plans`) is predicted
   with ``fidelity="analytic"``; plans the predictor reports as not fitting in memory, or rejects,
   are pruned and counted by reason;
2. the best ``confirm_k`` survivors are predicted again with ``fidelity="simulated"`` (the SimPy
   event simulation), re-ranked by the simulated score, and the rank agreement of the two
   fidelities over them is reported as Kendall's tau (``scipy.stats.kendalltau``, tau-b).

Objectives (lower score is better):

``throughput``
    seconds per sample, ``iteration_time_s / global_batch``.
``tta``
    time to accuracy ``S(B) * iteration_time_s`` with a :class:`StatisticalEfficiency`
    (matters when several global batches are searched).
``cost``
    money per sample, ``gpus * price_per_gpu_s * iteration_time_s / global_batch``
    (matters when several GPU counts are searched).
"""

from __future__ import annotations

import enum
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfmodel.errors import ConfigError, PerfModelError
from perfmodel.search._eval import Evaluator, analytic_evaluator, simulated_evaluator
from perfmodel.search.cost import Pricing
from perfmodel.search.plans import (
    Enumeration,
    ModelShape,
    SearchSpace,
    describe_plan,
    enumerate_plans,
)
from perfmodel.search.tta import StatisticalEfficiency


class Objective(str, enum.Enum):
    THROUGHPUT = "throughput"
    TTA = "tta"
    COST = "cost"

    @classmethod
    def parse(cls, text: str, *, where: str = "--objective") -> Objective:
        if isinstance(text, cls):
            return text
        try:
            return cls(str(text).lower())
        except ValueError as exc:
            raise ConfigError(
                f"unknown {where} {text!r}; expected one of {', '.join(o.value for o in cls)}",
                value=text,
                where=where,
            ) from exc


@dataclass(frozen=True)
class Candidate:
    """One evaluated plan.

    ``scenario`` is the full scenario dict; ``plan`` its plan keys; ``report`` the fast-path
    report; ``confirmed`` the simulated report (only for the confirmed top); scores are the
    objective (lower is better) under each fidelity.
    """

    scenario: Mapping[str, Any]
    plan: Mapping[str, Any]
    gpus: int
    global_batch: int
    report: Mapping[str, Any]
    score: float
    confirmed: Mapping[str, Any] | None = None
    confirmed_score: float | None = None

    @property
    def label(self) -> str:
        return describe_plan(self.plan)

    @property
    def best_score(self) -> float:
        return self.confirmed_score if self.confirmed_score is not None else self.score


def _rank_key(c: Candidate) -> tuple[float, str]:
    return (c.score, c.label)


def objective_score(
    report: Mapping[str, Any],
    objective: Objective,
    *,
    gpus: int,
    global_batch: int,
    stat: StatisticalEfficiency | None = None,
    pricing: Pricing | None = None,
) -> float:
    """Score of a report under an objective (lower is better); see the module docstring."""
    t = float(report["iteration_time_s"])
    if not (t > 0 and math.isfinite(t)):
        raise ConfigError(
            f"report has a non-positive iteration time {t!r}", value=t, where="iteration_time_s"
        )
    if objective is Objective.THROUGHPUT:
        return t / global_batch
    if objective is Objective.TTA:
        if stat is None:
            raise ConfigError(
                "objective tta needs a statistical-efficiency model (--b-noise/--min-steps)"
            )
        return stat.time_to_accuracy_s(global_batch, t)
    if pricing is None:
        raise ConfigError("objective cost needs a price (--price-per-gpu-hour or --purchase-price)")
    return pricing.cost(gpus, t) / global_batch


@dataclass(frozen=True)
class SearchResult:
    """Everything a plan search found.

    Attributes
    ----------
    ranked
        Feasible candidates, best first. The confirmed ones come first in simulated order, then
        the rest in fast-path order.
    enumerated
        Plans enumerated (structurally valid).
    rejected
        Raw combinations rejected by the enumerator, by reason.
    pruned
        Enumerated plans pruned after prediction, by reason (``"does not fit in memory"``, or the
        predictor's error type and message).
    kendall_tau, tau_pvalue
        Rank agreement between the fast path and the simulation over the confirmed plans
        (``nan`` with fewer than 2 confirmed).
    confirm_skipped
        Why the confirmation stopped early (time budget), if it did.
    """

    objective: Objective
    ranked: tuple[Candidate, ...]
    enumerated: int
    rejected: Mapping[str, int]
    pruned: Mapping[str, int]
    confirmed: int
    kendall_tau: float
    tau_pvalue: float
    fast_elapsed_s: float
    confirm_elapsed_s: float
    confirm_skipped: str | None = None
    top1_agrees: bool | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> Candidate:
        if not self.ranked:
            raise ConfigError(
                "no plan is feasible: " + ", ".join(f"{k}: {v}" for k, v in self.pruned.items()),
                value=dict(self.pruned),
            )
        return self.ranked[0]

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        rows = self.ranked if top is None else self.ranked[:top]
        return {
            "objective": self.objective.value,
            "enumerated": self.enumerated,
            "feasible": len(self.ranked),
            "rejected": dict(self.rejected),
            "pruned": dict(self.pruned),
            "confirmed": self.confirmed,
            "kendall_tau": self.kendall_tau,
            "tau_pvalue": self.tau_pvalue,
            "top1_agrees": self.top1_agrees,
            "fast_elapsed_s": self.fast_elapsed_s,
            "confirm_elapsed_s": self.confirm_elapsed_s,
            "confirm_skipped": self.confirm_skipped,
            "notes": list(self.notes),
            "plans": [
                {
                    "rank": i + 1,
                    "label": c.label,
                    "plan": dict(c.plan),
                    "gpus": c.gpus,
                    "global_batch": c.global_batch,
                    "score": c.score,
                    "confirmed_score": c.confirmed_score,
                    "analytic": dict(c.report),
                    "simulated": dict(c.confirmed) if c.confirmed is not None else None,
                }
                for i, c in enumerate(rows)
            ],
        }


def _prune_reason(exc: Exception) -> str:
    msg = str(exc).split(";")[0].split(": ")[-1]
    return f"{type(exc).__name__}: {msg[:90]}"


def _evaluate_all(
    evaluator: Evaluator, scenarios: Sequence[Mapping[str, Any]], jobs: int
) -> list[tuple[Mapping[str, Any] | None, str | None]]:
    def one(sc: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str | None]:
        try:
            return dict(evaluator(sc)), None
        except PerfModelError as exc:
            return None, _prune_reason(exc)

    if jobs == 1 or len(scenarios) < 64:
        return [one(sc) for sc in scenarios]
    from joblib import Parallel, delayed

    chunk = max(1, len(scenarios) // (4 * jobs))
    parts = [scenarios[i : i + chunk] for i in range(0, len(scenarios), chunk)]
    out = Parallel(n_jobs=jobs)(delayed(_evaluate_chunk)(evaluator, p) for p in parts)
    return [r for part in out for r in part]


def _evaluate_chunk(
    evaluator: Evaluator, scenarios: Sequence[Mapping[str, Any]]
) -> list[tuple[Mapping[str, Any] | None, str | None]]:
    res: list[tuple[Mapping[str, Any] | None, str | None]] = []
    for sc in scenarios:
        try:
            res.append((dict(evaluator(sc)), None))
        except PerfModelError as exc:
            res.append((None, _prune_reason(exc)))
    return res


def search_plans(
    base: Mapping[str, Any],
    *,
    gpus: Sequence[int],
    global_batches: Sequence[int],
    shape: ModelShape | None = None,
    space: SearchSpace | None = None,
    objective: Objective | str = Objective.THROUGHPUT,
    stat: StatisticalEfficiency | None = None,
    pricing: Pricing | None = None,
    confirm_k: int = 8,
    confirm_budget_s: float | None = 30.0,
    fast_evaluator: Evaluator | None = None,
    confirm_evaluator: Evaluator | None = None,
    jobs: int = 1,
    nodes_for: Any = None,
) -> SearchResult:
    """Search the plans of ``base`` (a scenario dict) over GPU counts and global batches.

    Parameters
    ----------
    base
        Scenario keys fixed for all plans (system, model, model_args, precision, ...); its plan
        keys are overwritten.
    gpus, global_batches
        GPU counts and global batches to search (each plan is tried with each).
    shape
        :class:`ModelShape` (default: built from ``base["model"]`` and ``base["model_args"]``).
    space
        :class:`SearchSpace` (default: the default space).
    objective, stat, pricing
        Ranking objective and what it needs (see :func:`objective_score`).
    confirm_k
        How many of the best fast-path plans to confirm with the simulation (0: none).
    confirm_budget_s
        Stop confirming once this much wall time has been spent on it (``None``: no limit);
        at least two plans are always confirmed when ``confirm_k >= 2``.
    fast_evaluator, confirm_evaluator
        Scenario dict -> report dict (defaults: ``predict`` with ``fidelity`` analytic/simulated).
    jobs
        Processes for the fast stage (joblib).
    nodes_for
        Callable ``gpus -> nodes`` setting ``nodes`` per GPU count (default: leave ``base``'s).
    """
    obj = Objective.parse(objective) if isinstance(objective, str) else objective
    fast = fast_evaluator or analytic_evaluator
    slow = confirm_evaluator or simulated_evaluator
    if shape is None:
        if "model" not in base:
            raise ConfigError("base scenario needs a 'model' to search plans", where="model")
        shape = ModelShape.from_model(str(base["model"]), base.get("model_args") or {})
    t0 = time.perf_counter()
    scenarios: list[dict[str, Any]] = []
    meta: list[tuple[Mapping[str, Any], int, int]] = []
    rejected: Counter[str] = Counter()
    enumerated = 0
    for g in gpus:
        for gb in global_batches:
            en: Enumeration = enumerate_plans(int(g), int(gb), shape, space)
            rejected.update(en.rejected)
            enumerated += len(en)
            for plan in en.plans:
                sc = {k: v for k, v in base.items() if k not in ("batch_per_gpu",)}
                sc.update(plan)
                sc.update(gpus=int(g), global_batch=int(gb))
                if nodes_for is not None:
                    sc["nodes"] = int(nodes_for(int(g)))
                scenarios.append(sc)
                meta.append((plan, int(g), int(gb)))
    results = _evaluate_all(fast, scenarios, jobs)
    pruned: Counter[str] = Counter()
    feasible: list[Candidate] = []
    for sc, (plan, g, gb), (rep, err) in zip(scenarios, meta, results):
        if rep is None:
            pruned[err or "rejected"] += 1
            continue
        if not rep.get("fits_in_memory", True):
            pruned["does not fit in memory"] += 1
            continue
        score = objective_score(rep, obj, gpus=g, global_batch=gb, stat=stat, pricing=pricing)
        feasible.append(Candidate(sc, plan, g, gb, rep, score))
    feasible.sort(key=_rank_key)
    fast_elapsed = time.perf_counter() - t0

    t1 = time.perf_counter()
    confirmed: list[Candidate] = []
    skipped: str | None = None
    notes: list[str] = []
    for c in feasible[: max(confirm_k, 0)]:
        spent = time.perf_counter() - t1
        if confirm_budget_s is not None and len(confirmed) >= 2 and spent > confirm_budget_s:
            skipped = (
                f"confirmation stopped after {len(confirmed)} plans: {spent:.1f} s budget spent"
            )
            break
        try:
            rep = dict(slow(c.scenario))
        except PerfModelError as exc:
            notes.append(f"simulation rejected {c.label}: {exc}")
            continue
        s = objective_score(
            rep, obj, gpus=c.gpus, global_batch=c.global_batch, stat=stat, pricing=pricing
        )
        if not rep.get("fits_in_memory", True):
            notes.append(f"simulation reports {c.label} out of memory")
            s = math.inf
        confirmed.append(
            Candidate(c.scenario, c.plan, c.gpus, c.global_batch, c.report, c.score, rep, s)
        )
    confirm_elapsed = time.perf_counter() - t1
    tau = pval = math.nan
    top1 = None
    if len(confirmed) >= 2:
        from scipy.stats import kendalltau

        finite = [c for c in confirmed if math.isfinite(c.confirmed_score or math.inf)]
        if len(finite) >= 2:
            res = kendalltau([c.score for c in finite], [c.confirmed_score for c in finite])
            tau, pval = float(res.statistic), float(res.pvalue)
        best_fast = confirmed[0]
        best_sim = min(confirmed, key=lambda c: (c.confirmed_score, c.label))
        top1 = best_fast is best_sim
    confirmed_sorted = sorted(confirmed, key=lambda c: (c.confirmed_score, c.label))
    done_ids = {id(c.scenario) for c in confirmed}
    ranked = tuple(confirmed_sorted + [c for c in feasible if id(c.scenario) not in done_ids])
    return SearchResult(
        objective=obj,
        ranked=ranked,
        enumerated=enumerated,
        rejected=dict(rejected),
        pruned=dict(pruned),
        confirmed=len(confirmed),
        kendall_tau=tau,
        tau_pvalue=pval,
        fast_elapsed_s=fast_elapsed,
        confirm_elapsed_s=confirm_elapsed,
        confirm_skipped=skipped,
        top1_agrees=top1,
        notes=tuple(notes),
    )


def format_table(result: SearchResult, top: int = 10) -> str:
    """Plain-text table of the best plans with their breakdowns (times in ms, memory in GiB)."""
    from perfmodel.units import GiB

    unit = {"throughput": "samples/s", "tta": "TTA s", "cost": "cost/1k samples"}[
        result.objective.value
    ]
    head = (
        f"{'#':>3} {'plan':<42} {'gpus':>5} {'batch':>6} {'iter ms':>9} {'sim ms':>9} "
        f"{unit:>15} {'compute':>8} {'comm':>8} {'bubble':>8} {'mem GiB':>8} {'MFU':>5}"
    )
    lines = [head, "-" * len(head)]
    for i, c in enumerate(result.ranked[:top], 1):
        r = c.confirmed or c.report
        t_ms = float(c.report["iteration_time_s"]) * 1e3
        sim_ms = (
            f"{float(c.confirmed['iteration_time_s']) * 1e3:9.1f}" if c.confirmed else f"{'-':>9}"
        )
        if result.objective is Objective.THROUGHPUT:
            val = f"{c.global_batch / float(r['iteration_time_s']):15.1f}"
        elif result.objective is Objective.TTA:
            val = f"{c.best_score:15.1f}"
        else:
            val = f"{c.best_score * 1000:15.4f}"

        def ms(key: str, rep: Mapping[str, Any] = r) -> str:
            v = rep.get(key)
            return f"{float(v) * 1e3:8.1f}" if isinstance(v, int | float) else f"{'-':>8}"

        mem = r.get("memory_per_gpu_bytes")
        mem_s = f"{float(mem) / GiB:8.1f}" if isinstance(mem, int | float) else f"{'-':>8}"
        mfu = r.get("mfu")
        mfu_s = f"{float(mfu):5.2f}" if isinstance(mfu, int | float) else f"{'-':>5}"
        lines.append(
            f"{i:>3} {c.label:<42} {c.gpus:>5} {c.global_batch:>6} {t_ms:9.1f} {sim_ms} {val} "
            f"{ms('compute_time_s')} {ms('exposed_comm_time_s')} {ms('bubble_time_s')} {mem_s} {mfu_s}"
        )
    lines.append("")
    lines.append(
        f"{result.enumerated} plans enumerated, {len(result.ranked)} feasible; "
        f"fast path {result.fast_elapsed_s:.1f} s, simulation of the top {result.confirmed} "
        f"{result.confirm_elapsed_s:.1f} s"
    )
    if result.pruned:
        lines.append(
            "pruned: "
            + "; ".join(f"{v} {k}" for k, v in sorted(result.pruned.items(), key=lambda kv: -kv[1]))
        )
    if result.rejected:
        lines.append(
            "not enumerated: "
            + "; ".join(
                f"{v} {k}" for k, v in sorted(result.rejected.items(), key=lambda kv: -kv[1])
            )
        )
    if result.confirmed >= 2:
        agree = "same" if result.top1_agrees else "different"
        lines.append(
            f"rank agreement analytic vs simulated over the top {result.confirmed}: Kendall tau = "
            f"{result.kendall_tau:.2f} (p = {result.tau_pvalue:.2g}); best plan {agree}"
        )
    if result.confirm_skipped:
        lines.append(result.confirm_skipped)
    lines.extend(result.notes)
    return "\n".join(lines)
