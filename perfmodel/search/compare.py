"""Plan search: enumerate, screen, predict, confirm with the simulation, rank.

Three stages (the architecture's "closed-form fast path for search, checked against the
simulation"), each re-ranking the head of the previous one:

1. **screen**: every structurally valid plan (:func:`perfmodel.search.plans.enumerate_plans`)
   through the closed-form :class:`perfmodel.search.screen.PlanScreen` (milliseconds per plan);
   plans that do not fit in memory, or that the model rejects, are pruned and counted by reason;
2. **analytic**: the best ``analytic_k`` through ``predict(fidelity="analytic")`` (the task graph
   evaluated without events);
3. **simulated**: the best ``confirm_k`` of those through ``predict(fidelity="simulated")`` (the
   SimPy event simulation).

Each later stage reports Kendall's tau-b and its two-sided p-value (:func:`kendall_tau_b`, the
numbers of ``scipy.stats.kendalltau``'s default) between its scores and the previous stage's
over the plans it evaluated, and whether the two agree on the best plan.

Objectives (lower score is better):

``throughput``
    seconds per sample, ``iteration_time_s / samples_per_step``.
``tta``
    time to accuracy ``S(B) * iteration_time_s`` with a :class:`StatisticalEfficiency`
    (matters when several global batches are searched).
``cost``
    money per sample, ``gpus * price_per_gpu_s * iteration_time_s / samples_per_step``
    (matters when several GPU counts are searched).

Kept whole (issue 29): :func:`search_plans` (~125 lines, 60 of them the docstring of its 19
parameters) is the stage sequence itself; each stage is a function of its own.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfmodel._enum import ParsedEnum
from perfmodel._gc import raise_young
from perfmodel._record import FlatRecord
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
from perfmodel.search.predict_parity import auto_microbatch, drop_auto, with_auto
from perfmodel.search.ranking import kendall_tau_b
from perfmodel.search.tta import StatisticalEfficiency


class Objective(str, ParsedEnum, where="--objective"):
    THROUGHPUT = "throughput"
    TTA = "tta"
    COST = "cost"


@dataclass(frozen=True)
class Candidate:
    """One evaluated plan.

    ``scenario`` is the full scenario dict, ``plan`` its plan keys. ``reports`` and ``scores``
    hold the report and the objective score (lower is better) of every stage that evaluated the
    plan, by stage name (``"screen"``, ``"analytic"``, ``"simulated"``); ``stage`` is the deepest.
    """

    scenario: Mapping[str, Any]
    plan: Mapping[str, Any]
    gpus: int
    global_batch: int
    reports: Mapping[str, Mapping[str, Any]]
    scores: Mapping[str, float]
    stage: str

    @property
    def label(self) -> str:
        """The plan as ``predict --plan`` reads it, complete under the scenario's software
        preset (:func:`~perfmodel.search.plans.describe_plan`)."""
        from perfmodel.parallel.software import get_preset

        return describe_plan(
            self.plan, get_preset(str(self.scenario.get("software") or "pytorch-ddp"))
        )

    @property
    def report(self) -> Mapping[str, Any]:
        """Report of the deepest stage that evaluated this plan."""
        return self.reports[self.stage]

    @property
    def score(self) -> float:
        """Score of the deepest stage."""
        return self.scores[self.stage]

    def with_stage(self, name: str, report: Mapping[str, Any], score: float) -> Candidate:
        return Candidate(
            self.scenario,
            self.plan,
            self.gpus,
            self.global_batch,
            {**self.reports, name: dict(report)},
            {**self.scores, name: score},
            name,
        )


@dataclass(frozen=True)
class StageSummary(FlatRecord):
    """One stage of the search (its JSON form: :class:`~perfmodel._record.FlatRecord`).

    Attributes
    ----------
    name
        ``screen``, ``analytic`` or ``simulated``.
    evaluated
        Plans this stage evaluated.
    elapsed_s
        Wall time of the stage.
    kendall_tau, tau_pvalue
        Rank agreement (``scipy.stats.kendalltau``, tau-b) between this stage's scores and the
        previous stage's over the plans this stage evaluated (``nan``: first stage, or < 2).
    top1_agrees
        Whether this stage's best is the previous stage's best among the plans it evaluated.
    stopped
        Why the stage stopped before its ``k`` plans (time budget), if it did.
    """

    name: str
    evaluated: int
    elapsed_s: float
    kendall_tau: float = math.nan
    tau_pvalue: float = math.nan
    top1_agrees: bool | None = None
    stopped: str | None = None


def _complexity(plan: Mapping[str, Any]) -> int:
    """Knobs away from their plain default (ties go to the simpler plan)."""
    return (
        int(plan.get("schedule", "1f1b") != "1f1b")
        + int(plan.get("zero", 0) != 0)
        + int(plan.get("recompute", "none") != "none")
        + int(bool(plan.get("sequence_parallel")))
        + int(plan.get("learners_per_gpu", 1) != 1)
    )


def _rank_key(c: Candidate) -> tuple[float, int, str]:
    return (c.score, _complexity(c.plan), c.label)


def objective_score(
    report: Mapping[str, Any],
    objective: Objective,
    *,
    gpus: int,
    global_batch: int,
    stat: StatisticalEfficiency | None = None,
    pricing: Pricing | None = None,
) -> float:
    """Score of a report under an objective (lower is better); see the module docstring.

    The samples per step are the report's ``samples_per_step`` when present (Crossbow learners
    multiply the batch), else ``global_batch``.
    """
    t = float(report["iteration_time_s"])
    if not (t > 0 and math.isfinite(t)):
        raise ConfigError(
            f"report has a non-positive iteration time {t!r}", value=t, where="iteration_time_s"
        )
    samples = float(report.get("samples_per_step") or global_batch)
    if objective is Objective.THROUGHPUT:
        return t / samples
    if objective is Objective.TTA:
        if stat is None:
            raise ConfigError(
                "objective tta needs a statistical-efficiency model (--b-noise/--min-steps)"
            )
        return stat.time_to_accuracy_s(samples, t)
    if pricing is None:
        raise ConfigError("objective cost needs a price (--price-per-gpu-hour or --purchase-price)")
    return pricing.cost(gpus, t) / samples


@dataclass(frozen=True)
class SearchResult:
    """Everything a plan search found.

    Attributes
    ----------
    ranked
        Feasible candidates, best first: those evaluated by the deepest stage first (in that
        stage's order), then the next deepest, and so on.
    enumerated
        Plans enumerated (structurally valid).
    rejected
        Raw combinations rejected by the enumerator, by reason.
    pruned
        Plans pruned after a prediction, by reason (``"does not fit in memory"``, or the
        predictor's error type and message).
    stages
        :class:`StageSummary` per stage, first (all plans) to last (the confirmed top).
    """

    objective: Objective
    ranked: tuple[Candidate, ...]
    enumerated: int
    rejected: Mapping[str, int]
    pruned: Mapping[str, int]
    stages: tuple[StageSummary, ...]
    notes: tuple[str, ...] = field(default=())
    tokens_per_sample: int | None = None
    """Tokens per sample of a sequence model (the table then shows tokens/s), else ``None``."""
    equivalents: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Plans folded into a better-ranked one with the same step time and memory, by its label."""
    hints: tuple[str, ...] = ()
    """What would help when no plan fits (:func:`oom_hints`)."""
    auto_plans: int = 0
    """Plans without a micro-batch added for the size ``predict`` would choose
    (``auto_microbatch``): counted in the first stage's ``evaluated``, not in ``enumerated``."""
    auto_dropped: int = 0
    """Of :attr:`auto_plans`, those dropped after the first stage (refused, or choosing a size
    their group already has: :func:`~perfmodel.search.predict_parity.auto_kept`)."""

    @property
    def best(self) -> Candidate:
        if not self.ranked:
            raise ConfigError(
                "no plan is feasible: " + ", ".join(f"{k}: {v}" for k, v in self.pruned.items()),
                value=dict(self.pruned),
            )
        return self.ranked[0]

    @property
    def unconfirmed(self) -> str | None:
        """``None``, or why no plan survived past the first stage: the later stages ran to the
        end (no budget stop) and rejected, or found out of memory, every plan they tried, so
        :attr:`ranked` holds the first stage's estimates only and names no winner (a screen
        does not price what a later stage rejects, e.g. an ``NCCL_ALGO`` that leaves a
        collective no algorithm)."""
        if len(self.stages) < 2 or not self.ranked:
            return None
        first = self.stages[0].name
        if any(c.stage != first for c in self.ranked):
            return None
        if any(s.stopped for s in self.stages[1:]):
            return None
        later = ", ".join(s.name for s in self.stages[1:])
        why = "; ".join(
            f"{v} {k}"
            for k, v in sorted(self.pruned.items(), key=lambda kv: -kv[1])
            if "stage" in k
        )
        return (
            f"no plan survived past the {first} stage: the {later} stage(s) rejected every plan "
            f"they tried ({why or 'none fit'}); the rows are the {first} stage's estimates "
            "only, not a ranking"
        )

    @property
    def kendall_tau(self) -> float:
        """Tau of the last stage against the one before (``nan`` with a single stage)."""
        return self.stages[-1].kendall_tau if len(self.stages) > 1 else math.nan

    @property
    def top1_agrees(self) -> bool | None:
        return self.stages[-1].top1_agrees if len(self.stages) > 1 else None

    @property
    def elapsed_s(self) -> float:
        return sum(s.elapsed_s for s in self.stages)

    def to_dict(self, top: int | None = None, *, interval: float | None = None) -> dict[str, Any]:
        """JSON-ready dict of the ``top`` plans; with ``interval`` (a level), each plan's
        ``interval`` (its score's range and whether it ties with the best plan,
        :func:`plan_ties`) and the ``interval_level`` / ``interval_basis`` of the ranking."""
        rows = self.ranked if top is None else self.ranked[:top]
        ties = plan_ties(self, len(rows), interval)
        out = self._to_dict(rows)
        out["interval_level"] = None if ties is None else interval
        if ties is not None:
            out["interval_basis"] = ties.basis
            for d, t in zip(out["plans"], ties.ties, strict=False):
                d["interval"] = {
                    "score_low": t.low,
                    "score_high": t.high,
                    "tied_with_best": t.tied,
                    "bounded": t.bounded,
                }
        return out

    def _to_dict(self, rows: Sequence[Candidate]) -> dict[str, Any]:
        return {
            "objective": self.objective.value,
            "enumerated": self.enumerated,
            "auto_microbatch_plans": self.auto_plans,
            "auto_microbatch_dropped": self.auto_dropped,
            "feasible": len(self.ranked),
            "rejected": dict(self.rejected),
            "pruned": dict(self.pruned),
            "stages": [s.to_dict() for s in self.stages],
            "elapsed_s": self.elapsed_s,
            "notes": list(self.notes),
            "tokens_per_sample": self.tokens_per_sample,
            "equivalents": {k: list(v) for k, v in self.equivalents.items()},
            "hints": list(self.hints),
            "unconfirmed": self.unconfirmed,
            "plans": [
                {
                    "rank": i + 1,
                    "label": c.label,
                    "plan": dict(c.plan),
                    "microbatch_auto": auto_microbatch(c),
                    "gpus": c.gpus,
                    "global_batch": c.global_batch,
                    "stage": c.stage,
                    "scores": dict(c.scores),
                    "reports": {k: _scalars(v) for k, v in c.reports.items()},
                }
                for i, c in enumerate(rows)
            ],
        }


def _scalars(report: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("breakdown", "plan", "printed_notes")
    return {
        k: v
        for k, v in report.items()
        if k in keep or isinstance(v, int | float | str | bool | None)
    }


def _prune_reason(exc: Exception) -> str:
    """The ``pruned`` key of a plan its predictor refused: the error's class and the last
    clause of its first sentence (the part naming no value, so plans refused for one reason
    count together), whole: the table wraps it (a cut left ``moe familie``; audit 15, item 16)."""
    msg = str(exc).split(";")[0].split(": ")[-1]
    return f"{type(exc).__name__}: {msg}"


#: ``progress(text)``: a one-line status of the running search (stage, plans done, time left).
Progress = Callable[[str], None]


def _time_left(elapsed_s: float, done: int, total: int) -> str:
    """``"~12 s left"`` from the mean time per plan so far (``""`` before the first plan).

    >>> _time_left(2.0, 4, 10)
    '~3 s left'
    """
    if done <= 0 or total <= done:
        return ""
    return f"~{elapsed_s / done * (total - done):.0f} s left"


def _evaluate_chunk(
    evaluator: Evaluator,
    scenarios: Sequence[Mapping[str, Any]],
    progress: Progress | None = None,
    stage: str = "screen",
) -> list[tuple[Mapping[str, Any] | None, str | None]]:
    res: list[tuple[Mapping[str, Any] | None, str | None]] = []
    t0 = last = time.perf_counter()
    n = len(scenarios)
    for i, sc in enumerate(scenarios):
        if progress is not None and time.perf_counter() - last > 0.25:
            last = time.perf_counter()
            progress(f"{stage} {i}/{n} plans, {_time_left(last - t0, i, n)}".rstrip(", "))
        try:
            res.append((dict(evaluator(sc)), None))
        except PerfModelError as exc:
            res.append((None, _prune_reason(exc)))
    return res


def _evaluate_all(
    evaluator: Evaluator,
    scenarios: Sequence[Mapping[str, Any]],
    jobs: int,
    progress: Progress | None = None,
    stage: str = "screen",
) -> list[tuple[Mapping[str, Any] | None, str | None]]:
    if jobs == 1 or len(scenarios) < 64:
        return _evaluate_chunk(evaluator, scenarios, progress, stage)
    from joblib import Parallel, delayed

    chunk = max(1, len(scenarios) // (4 * jobs))
    parts = [scenarios[i : i + chunk] for i in range(0, len(scenarios), chunk)]
    out = Parallel(n_jobs=jobs)(delayed(_evaluate_chunk)(evaluator, p) for p in parts)
    return [r for part in out for r in part]


class _BudgetExceeded(Exception):
    """A later-stage evaluation was still running when the budget ran out."""


def _isolated_call(evaluator: Evaluator, scenario: Mapping[str, Any]) -> tuple[str, Any, str]:
    try:
        return "ok", dict(evaluator(scenario)), ""
    except PerfModelError as exc:
        return "error", type(exc).__name__, str(exc)
    except Exception as exc:  # a predictor bug: reported as a note by the search, not hidden
        return "bug", type(exc).__name__, str(exc)


#: Young-generation threshold of the isolated runner's worker (net container allocations
#: between young collections; the command's own is :data:`perfmodel._gc.CLI_YOUNG_THRESHOLD`).
#: One simulated GPT-3 175B plan on 1024 A100 (issue 27's ``compare``: pytorch-ddp, pp 16-32,
#: 96 micro-batches) holds up to ~0.4-0.8 million net allocations (its task graph, flows and
#: events) and frees them when it returns: at 200,000 its three plans ran 5 young collections of
#: ~200,000 objects each (0.19 s CPU, ``gc.callbacks`` timing on the 2-core development machine)
#: that found 2,458 objects of cyclic garbage in all; at 1,000,000 none ran. A plan that holds
#: more still meets a collection every million allocations (memory stays bounded; the worker's
#: peak resident set, ``ru_maxrss``, was ~146 MiB either way), and the collector frees only
#: unreachable cycles, so every result is the same.
WORKER_YOUNG_THRESHOLD = 1_000_000


class _IsolatedRunner:
    """One worker process (``fork`` where available) whose calls can be abandoned on a deadline.

    ``WORKER_YOUNG``: the worker's young-generation threshold
    (:data:`WORKER_YOUNG_THRESHOLD`, set by the pool's initializer,
    :func:`perfmodel._gc.raise_young`; ``None``: the worker keeps the one it inherits, the
    direct path the tests compare it with). The worker is the runner's own process and ends
    with it, so the caller's setting is untouched."""

    WORKER_YOUNG: int | None = WORKER_YOUNG_THRESHOLD

    def __init__(self) -> None:
        self._pool: Any = None

    def run(
        self, evaluator: Evaluator, scenario: Mapping[str, Any], *, timeout_s: float
    ) -> dict[str, Any]:
        import multiprocessing as mp

        if self._pool is None:
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            young = self.WORKER_YOUNG
            init = None if young is None else functools.partial(raise_young, young)
            self._pool = mp.get_context(method).Pool(1, initializer=init)
        res = self._pool.apply_async(_isolated_call, (evaluator, dict(scenario)))
        try:
            status, value, message = res.get(timeout=max(timeout_s, 0.0))
        except mp.TimeoutError as exc:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
            raise _BudgetExceeded from exc
        if status == "error":
            raise PerfModelError(f"{value}: {message}", where="scenario")
        if status == "bug":
            raise RuntimeError(f"{value}: {message}")
        return dict(value)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None


def search_preset(base: Mapping[str, Any]) -> Any:
    """The software preset a search of ``base`` runs with: ``base``'s ``software`` (PyTorch DDP
    without one) with its ``software_options`` applied (:func:`search_plans` and ``compare``'s
    note on refused plans read the same one)."""
    from perfmodel.parallel.software import get_preset, with_software_options

    return with_software_options(
        get_preset(str(base.get("software") or "pytorch-ddp"), where="software"),
        dict(base.get("software_options") or {}),
        where="software_options",
    )


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
    screen: Evaluator | bool = True,
    analytic_k: int = 12,
    confirm_k: int = 4,
    budget_s: float | None = 45.0,
    fast_evaluator: Evaluator | None = None,
    confirm_evaluator: Evaluator | None = None,
    jobs: int = 1,
    nodes_for: Callable[[int], int] | None = None,
    hard_budget: bool = False,
    progress: Progress | None = None,
    auto_microbatch: bool = False,
) -> SearchResult:
    """Search the plans of ``base`` (a scenario dict) over GPU counts and global batches.

    Stages: (1) every enumerated plan through the first evaluator (the closed-form
    :class:`~perfmodel.search.screen.PlanScreen` when ``screen`` is true, else the analytic
    predictor); (2) with a screen, the best ``analytic_k`` through ``predict(fidelity="analytic")``;
    (3) the best ``confirm_k`` of those through ``predict(fidelity="simulated")``. Each later
    stage re-ranks the head it evaluated and reports Kendall's tau against the stage before.

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
    screen
        ``True``: a :class:`PlanScreen` of ``base``; ``False``: no screen (the analytic
        predictor evaluates every plan); or any evaluator to use as the first stage.
    analytic_k, confirm_k
        Plans the analytic and the simulated stages evaluate (0 skips the stage).
    budget_s
        Wall-time budget of the later stages together (``None``: no limit). No new plan is
        started once it is spent (a plan already running finishes), so a stage may evaluate
        fewer than two plans and report no tau; the reason is in its ``stopped``.
    fast_evaluator, confirm_evaluator
        Scenario dict -> report dict for the analytic and simulated stages (defaults:
        :func:`perfmodel.api.predict` with ``fidelity`` analytic / simulated).
    jobs
        Processes for the first stage when it is not the in-process screen (joblib).
    nodes_for
        Callable ``gpus -> nodes`` setting ``nodes`` per GPU count (default: keep ``base``'s).
    hard_budget
        Run the later stages in one worker process and stop it when ``budget_s`` runs out, so
        the budget is a wall-time limit even for a plan that takes minutes (the evaluators
        must be picklable; the worker keeps its caches across plans and stages).
    progress
        Called with a one-line status (stage, plans done of the stage's, time left) while the
        search runs (``perfmodel compare``'s progress line).
    auto_microbatch
        Also search, per plan, the micro-batch ``perfmodel predict`` chooses when the plan names
        none (:mod:`perfmodel.search.predict_parity`: the plan without ``microbatch``, so
        every stage evaluates it as ``predict`` does); ``perfmodel compare`` without
        ``--microbatch``.

    Notes
    -----
    The search space's ``None`` knobs take the software preset's defaults
    (:meth:`SearchSpace.for_preset`). A later stage keeps going down the ranking until
    ``analytic_k``/``confirm_k`` plans that fit have been evaluated (at most three times as
    many tries, within the budget); a plan it finds out of memory leaves the ranking (counted
    under ``pruned``), so only plans that fit are ranked (issue 28, item 3). Plans with the
    same step time and memory as a better-ranked one are collapsed into it
    (:attr:`SearchResult.equivalents`).
    """
    obj = Objective.parse(objective) if isinstance(objective, str) else objective
    preset = search_preset(base)
    space = (space or SearchSpace()).for_preset(preset)
    fast = fast_evaluator or analytic_evaluator
    slow = confirm_evaluator or simulated_evaluator
    if shape is None:
        if "model" not in base:
            raise ConfigError("base scenario needs a 'model' to search plans", where="model")
        shape = ModelShape.from_model(str(base["model"]), base.get("model_args") or {})
    first, first_name = _first_stage(base, screen, fast)
    t0 = time.perf_counter()
    scenarios, meta, rejected, enumerated = _plan_scenarios(
        base, gpus, global_batches, shape, space, nodes_for
    )
    explicit: list[frozenset[int] | None] = [None] * len(scenarios)
    n_enumerated = len(scenarios)
    if auto_microbatch:
        scenarios, meta, explicit = with_auto(scenarios, meta)
    auto_plans = len(scenarios) - n_enumerated
    in_process = first_name == "screen"
    results = _evaluate_all(first, scenarios, 1 if in_process else jobs, progress, first_name)
    stages = [StageSummary(first_name, len(scenarios), time.perf_counter() - t0)]
    if auto_microbatch:
        scenarios, meta, results = drop_auto(scenarios, meta, results, explicit)
    auto_dropped = auto_plans - (len(scenarios) - n_enumerated)
    pruned: Counter[str] = Counter()
    score = functools.partial(objective_score, objective=obj, stat=stat, pricing=pricing)
    feasible = _first_ranking(scenarios, meta, results, score, first_name, pruned)
    notes: list[str] = []
    later: list[tuple[str, Evaluator, int]] = []
    if first_name == "screen" and analytic_k > 0:
        later.append(("analytic", fast, analytic_k))
    if confirm_k > 0:
        later.append(("simulated", slow, confirm_k))
    budget = _Budget(time.perf_counter(), budget_s, progress)
    runner = _IsolatedRunner() if (hard_budget and budget_s is not None) else None
    shared = _StageShared(first_name, score, budget, runner, notes, pruned)
    ranked = _later_stages(later, feasible, shared, stages)
    ranked, equivalents = _collapse_equal(ranked)
    if equivalents:
        pruned["same time and memory as a better-ranked plan"] += sum(
            map(len, equivalents.values())
        )
    return SearchResult(
        objective=obj,
        ranked=tuple(ranked),
        enumerated=enumerated,
        rejected=dict(rejected),
        pruned=dict(pruned),
        stages=tuple(stages),
        notes=tuple(notes),
        tokens_per_sample=shape.seq_len,
        equivalents=equivalents,
        auto_plans=auto_plans,
        auto_dropped=auto_dropped,
        hints=() if ranked else oom_hints(shape, space, pruned, base, gpus),
    )


def _later_stages(
    later: Sequence[tuple[str, Evaluator, int]],
    ranked: list[Candidate],
    shared: _StageShared,
    stages: list[StageSummary],
) -> list[Candidate]:
    """Run the later stages (``(name, evaluator, k)`` each, in order) over the ranking, each
    re-ranking the head of the one before; their summaries go to ``stages``. The isolated
    runner (``hard_budget``), when there is one, is closed when they end."""
    try:
        for name, ev, k in later:
            ranked, stage = _later_stage(name, ev, k, ranked, shared)
            stages.append(stage)
    finally:
        if shared.runner is not None:
            shared.runner.close()
    return ranked


def _first_stage(
    base: Mapping[str, Any], screen: Evaluator | bool, fast: Evaluator
) -> tuple[Evaluator, str]:
    """The first stage's evaluator and name: a :class:`PlanScreen` of ``base``
    (``screen=True``), the analytic predictor (``False``), or the evaluator given."""
    if screen is True:
        from perfmodel.search.screen import PlanScreen

        return PlanScreen(base), "screen"
    if screen is False:
        return fast, "analytic"
    return screen, "screen"


def _plan_scenarios(
    base: Mapping[str, Any],
    gpus: Sequence[int],
    global_batches: Sequence[int],
    shape: ModelShape,
    space: SearchSpace,
    nodes_for: Callable[[int], int] | None,
) -> tuple[list[dict[str, Any]], list[tuple[Mapping[str, Any], int, int]], Counter[str], int]:
    """Every enumerated plan of every GPU count and global batch as a scenario dict, with its
    ``(plan, gpus, global batch)``; the enumeration's rejections and how many it enumerated."""
    scenarios: list[dict[str, Any]] = []
    meta: list[tuple[Mapping[str, Any], int, int]] = []
    rejected: Counter[str] = Counter()
    enumerated = 0
    from perfmodel.workload.zoo import check_expert_degree

    for ep in space.ep_degrees or ():  # refused as predict --plan ep=N refuses it
        check_expert_degree(str(base.get("model")), int(ep), bool(shape.num_experts), where="--ep")
    for g in gpus:
        for gb in global_batches:
            en: Enumeration = enumerate_plans(int(g), int(gb), shape, space)
            rejected.update(en.rejected)
            enumerated += len(en)
            for plan in en.plans:
                sc = {k: v for k, v in base.items() if k != "batch_per_gpu"}
                sc.update(plan)
                sc.update(gpus=int(g), global_batch=int(gb))
                k = int(plan.get("learners_per_gpu", 1))
                if k > 1:
                    # Scenario convention: batch_per_gpu is one learner's batch (no micro-batching)
                    sc["dp_mode"] = "crossbow"
                    del sc["global_batch"]
                    sc.pop("microbatch", None)
                    sc["batch_per_gpu"] = int(gb) // (int(plan["dp"]) * k)
                if nodes_for is not None:
                    sc["nodes"] = int(nodes_for(int(g)))
                scenarios.append(sc)
                meta.append((plan, int(g), int(gb)))
    return scenarios, meta, rejected, enumerated


def _first_ranking(
    scenarios: Sequence[dict[str, Any]],
    meta: Sequence[tuple[Mapping[str, Any], int, int]],
    results: Sequence[tuple[Any, Any]],
    score: Callable[..., float],
    first_name: str,
    pruned: Counter[str],
) -> list[Candidate]:
    """The first stage's plans that fit, best first (ties: the simpler plan, then the label);
    a plan tying exactly with a simpler one of the same degrees is counted in ``pruned``."""
    feasible: list[Candidate] = []
    for sc, (plan, g, gb), (rep, err) in zip(scenarios, meta, results):
        if rep is None:
            pruned[err or "rejected"] += 1
            continue
        if not rep.get("fits_in_memory", True):
            pruned["does not fit in memory"] += 1
            continue
        s = score(rep, gpus=g, global_batch=gb)
        feasible.append(Candidate(sc, plan, g, gb, {first_name: rep}, {first_name: s}, first_name))
    feasible.sort(key=lambda c: (c.score, _complexity(c.plan), c.label))
    # plans whose knobs change nothing (e.g. selective recomputation with fused attention) tie
    # exactly with a simpler plan: keep the simplest, count the rest
    unique: list[Candidate] = []
    seen: set[tuple[Any, ...]] = set()
    for c in feasible:
        sig = (
            c.gpus,
            c.global_batch,
            c.plan.get("dp"),
            c.plan.get("tp"),
            c.plan.get("pp"),
            c.score,
            c.report.get("memory_per_gpu_bytes"),
        )
        if sig in seen:
            pruned["equivalent to a simpler plan (same time and memory)"] += 1
            continue
        seen.add(sig)
        unique.append(c)
    return unique


@dataclass(frozen=True)
class _Budget:
    """The later stages' shared wall-time budget: started at ``t0``, ``budget_s`` long
    (``None``: no limit), with the progress line it reports to."""

    t0: float
    budget_s: float | None
    progress: Progress | None


@dataclass(frozen=True)
class _StageShared:
    """What the later stages share: the first stage's name, the objective's ``score``, the
    budget, the isolated runner (``hard_budget``; ``None``: in process), and the search's notes
    and pruned counts, which each stage appends to."""

    first_name: str
    score: Callable[..., float]
    budget: _Budget
    runner: _IsolatedRunner | None
    notes: list[str]
    pruned: Counter[str]


def _later_stage(
    name: str, ev: Evaluator, k: int, ranked: list[Candidate], shared: _StageShared
) -> tuple[list[Candidate], StageSummary]:
    """One later stage: down ``ranked`` until ``k`` plans that fit are evaluated (at most
    ``3 k`` tries, within the budget), those re-ranked first; its summary with Kendall's tau
    against the stage before."""
    budget = shared.budget
    budget_s, progress = budget.budget_s, budget.progress
    first_name, score, runner = shared.first_name, shared.score, shared.runner
    notes, pruned = shared.notes, shared.pruned
    t1 = time.perf_counter()
    head: list[Candidate] = []
    dropped: set[int] = set()  # out of memory or rejected at this stage
    stopped = None
    prev_name = ranked[0].stage if ranked else first_name
    want = min(k, len(ranked))
    tries = 0
    for c in ranked:
        if len(head) >= k or tries >= 3 * k:
            break
        tries += 1
        spent = time.perf_counter() - budget.t0
        if progress is not None:
            left = "" if budget_s is None else f", at most {max(budget_s - spent, 0):.0f} s left"
            progress(f"{name} {len(head)}/{want} plans{left}")
        if budget_s is not None and spent >= budget_s:
            stopped = (
                f"{name} stage stopped after {len(head)} of {want} plans: "
                f"the {budget_s:g} s budget of the later stages is spent ({spent:.0f} s)"
            )
            break
        try:
            if runner is not None and budget_s is not None:
                rep = runner.run(ev, c.scenario, timeout_s=budget_s - spent)
            else:
                rep = dict(ev(c.scenario))
        except _BudgetExceeded:
            stopped = (
                f"{name} stage stopped after {len(head)} of {want} plans: "
                f"{c.label} was still running when the {budget_s:g} s budget ran out"
            )
            break
        except PerfModelError as exc:
            notes.append(f"{name} rejected {c.label}: {exc}")
            pruned[f"rejected by the {name} stage"] += 1
            dropped.add(id(c.scenario))
            continue
        except Exception as exc:  # a predictor bug must not lose the earlier stages
            notes.append(
                f"{name} FAILED on {c.label} (internal error, please report): "
                f"{type(exc).__name__}: {exc}"
            )
            continue
        if not rep.get("fits_in_memory", True):  # never ranked (issue 28, item 3)
            pruned[f"does not fit in memory ({name} stage)"] += 1
            dropped.add(id(c.scenario))
            continue
        head.append(c.with_stage(name, rep, score(rep, gpus=c.gpus, global_batch=c.global_batch)))
    if stopped is not None:
        stopped += _left_at(ranked, head, dropped, want, prev_name)
    tau = pval = math.nan
    top1 = None
    # plans the stage before ranked too (a stage that went past the previous stage's survivors
    # reaches plans only the first stage scored)
    finite = [c for c in head if math.isfinite(c.score) and prev_name in c.scores]
    if len(finite) >= 2:
        tau, pval = kendall_tau_b([c.scores[prev_name] for c in finite], [c.score for c in finite])
    if head:
        top1 = min(head, key=_rank_key) is head[0]
    done_ids = {id(c.scenario) for c in head} | dropped
    ranked = sorted(head, key=_rank_key) + [c for c in ranked if id(c.scenario) not in done_ids]
    stage = StageSummary(name, len(head), time.perf_counter() - t1, tau, pval, top1, stopped)
    return ranked, stage


def _left_at(
    ranked: Sequence[Candidate],
    head: Sequence[Candidate],
    dropped: set[int],
    want: int,
    prev_name: str,
) -> str:
    """``"; ranked by the analytic stage only: A, B"``: the plans a stage stopped by its budget
    meant to evaluate and did not (the next ``want - len(head)`` of the ranking not yet done
    or dropped; issue 27: the output names them, as the table's empty column shows them)."""
    done = {id(c.scenario) for c in head} | dropped
    left = [c.label for c in ranked if id(c.scenario) not in done][: max(want - len(head), 0)]
    if not left:
        return ""
    return f"; ranked by the {prev_name} stage only: " + ", ".join(left)


def _collapse_equal(
    ranked: Sequence[Candidate],
) -> tuple[list[Candidate], dict[str, tuple[str, ...]]]:
    """Ranked candidates without repeats: a candidate whose label equals a better-ranked one's,
    or whose GPUs and batch do and whose step time and memory at its deepest stage equal that
    one's at the same stage, is folded into it (``{kept label: folded labels}``), so a user
    sees each distinct result once (issue 28, item 7)."""
    kept: list[Candidate] = []
    labels: set[str] = set()
    by_stage: dict[tuple[Any, ...], Candidate] = {}
    folded: dict[str, list[str]] = {}

    def sig(c: Candidate, stage: str) -> tuple[Any, ...]:
        rep = c.reports[stage]
        return (
            c.gpus,
            c.global_batch,
            stage,
            rep.get("iteration_time_s"),
            rep.get("memory_per_gpu_bytes"),
        )

    for c in ranked:
        label = c.label
        if label in labels:
            continue
        first = by_stage.get(sig(c, c.stage))
        if first is not None:
            folded.setdefault(first.label, []).append(label)
            continue
        for stage in c.reports:
            by_stage.setdefault(sig(c, stage), c)
        labels.add(label)
        kept.append(c)
    return kept, {k: tuple(v) for k, v in folded.items()}


def oom_hints(
    shape: ModelShape,
    space: SearchSpace,
    pruned: Mapping[str, int],
    base: Mapping[str, Any],
    gpus: Sequence[int],
) -> tuple[str, ...]:
    """What would help when no plan is feasible, from what the search did not try: context
    parallelism for a long sequence (Megatron-Core ``--context-parallel-size``; each rank then
    holds ``1/cp`` of the sequence's activations), a sharded model state (ZeRO-3/FSDP),
    recomputation, and more GPUs (issue 28, item 7)."""
    # plans out of memory only ("same time and memory" folds and rejections are not)
    if not any("does not fit in memory" in k for k in pruned):
        return ()
    out = []
    if shape.seq_len and shape.seq_len >= 16384 and max(space.cp_degrees) == 1:
        cps = [c for c in (2, 4, 8, 16) if shape.seq_len % (2 * c) == 0]
        out.append(
            f"sequence of {shape.seq_len:,} tokens: try context parallelism "
            f"(--cp {','.join(map(str, cps))}), each rank then holds 1/cp of its activations"
        )
    if 3 not in (space.zero_stages or ()):
        out.append(
            "shard the model state over the data-parallel ranks: --zero 3 (or --software fsdp)"
        )
    if "full" not in space.recompute:
        out.append("recompute activations in backward: --recompute full")
    if space.max_tp is not None or (space.pp_degrees is not None and len(space.pp_degrees) < 2):
        out.append("allow more model parallelism (--max-tp, --pp)")
    need = _state_gpus(base)
    out.append(
        f"more GPUs: --nodes above {base.get('nodes', 1)} (searched {', '.join(map(str, gpus))} "
        "GPUs)" + (f"; {need}" if need else "")
    )
    return tuple(out)


def _state_gpus(base: Mapping[str, Any]) -> str:
    """``"the model state alone (70.6e9 parameters x 18 B) needs at least 15 of these
    80.0 GiB GPUs, fully sharded"``: weights, gradients and optimizer state of the training
    recipe (:meth:`~perfmodel.parallel.recipe.Recipe.model_state_bytes`) over one GPU's
    memory; ``""`` when it cannot be said."""
    try:
        from perfmodel.api import Scenario, resolve
        from perfmodel.workload import build_model

        sc = Scenario.from_dict(
            {**{k: v for k, v in base.items() if k != "nodes"}, "gpus": 1, "batch_per_gpu": 1}
        )
        r = resolve(sc)
        params = float(build_model(sc.model, batch_size=1, **dict(sc.model_args)).params)
    except PerfModelError:
        return ""
    if r.recipe is None:
        return ""
    per_param = sum(r.recipe.model_state_bytes(1.0, 1))
    cap = float(r.topology.gpu_spec().memory_bytes)
    n = math.ceil(params * per_param / cap)
    return (
        f"the model state alone ({params:.3g} parameters x {per_param:g} B) needs at least {n} "
        f"of these {cap / 2**30:.1f} GiB GPUs, fully sharded"
    )


# --------------------------------------------------------------------------- ties (issue 26)


@dataclass(frozen=True)
class PlanTies:
    """The shown plans' intervals at ``level``: each plan's score range and whether it overlaps
    the best plan's (:class:`perfmodel.intervals.answers.Tie`), what the ranges rest on
    (``basis``, ``warning``) and the best plan's
    :class:`~perfmodel.intervals.conformal.ResidualInterval` (``residual``: its bias and notes,
    :func:`perfmodel.intervals.wording.basis_clause`)."""

    level: float
    ties: tuple[Any, ...]
    basis: str
    warning: str
    residual: Any


def plan_ties(result: SearchResult, top: int, level: float | None) -> PlanTies | None:
    """The intervals of the ``top`` ranked plans' scores (lower is better; every objective is
    proportional to the step time of a plan) and which of them overlap the best plan's: the
    plans the model cannot tell apart at ``level`` (issue 26). ``None`` without a level, a
    ranking, or a residual record to read."""
    if level is None or not result.ranked:
        return None
    from perfmodel.intervals.answers import ties

    shown = [c for c in result.ranked[:top] if math.isfinite(c.score)]
    if not shown:
        return None
    try:
        found, best = ties([c.score for c in shown], [c.scenario for c in shown], level)
    except PerfModelError:
        return None
    return PlanTies(level, tuple(found), best.basis, best.warning, best)
