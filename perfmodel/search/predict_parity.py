"""What keeps a ``perfmodel compare`` row what ``perfmodel predict --plan LABEL`` prints.

**Automatic micro-batch.**

``perfmodel predict --plan "dp4 tp2 pp1 zero1"`` (no ``mb``) sizes the micro-batch itself: the
largest divisor of the per-replica batch that fits in GPU memory, keeping at least ``pp``
micro-batches with pipelining (:func:`perfmodel.pipeline.autobatch.choose_microbatch`, after
Megatron-LM's ``--micro-batch-size`` with ``--global-batch-size``). The search's micro-batch set
(1, 2, 4, 8 and the whole replica batch by default) can miss that size (GPT 1.3B, 8 A100s,
global batch 256, Megatron preset, fp16, dp4 tp2: predict runs micro-batch 16 at 3.551 s per step; the search's best
was micro-batch 8 at 3.619 s), so ``perfmodel compare`` and ``perfmodel predict`` contradicted
each other on the same plan. :func:`auto_plans` adds, per group of plans that differ only in
their micro-batch, the plan without a micro-batch: every stage then evaluates it as ``predict``
does (the same code path, so the same numbers), and its row's label, pasted into
``predict --plan``, is that plan. :func:`auto_kept` drops it when its choice is one of the
group's sizes (that row is already there). The first stage makes that choice: with the
screen first, on ``predict``'s memory (:mod:`perfmodel.search.screen_memory`: the same function
of the same layers, ``predict``'s own near the capacity and for pipelines of unequal blocks).
Before session 17 the screen's estimate could differ near capacity (mixtral_8x7b dp8 tp2 pp2
ep4 interleaved rc=full with sequence parallelism on 4 DGX H100, Megatron-Core, global batch
512: the screen's mb8, one of the group's sizes, so the plan was dropped, where predict runs
mb16).

**Screen estimates.** A row only the first stage evaluated shows the closed-form screen's
numbers (:class:`perfmodel.search.screen.PlanScreen`), an estimate of what ``predict`` prints;
:func:`screen_line` says which rows those are and how far the screen was from the analytic
stage over the plans both evaluated in the same search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "analytic_line",
    "auto_kept",
    "auto_line",
    "auto_microbatch",
    "auto_plans",
    "chosen_microbatch",
    "drop_auto",
    "screen_line",
    "with_auto",
]


def auto_plans(
    plans: Sequence[Mapping[str, Any]],
) -> list[tuple[int, dict[str, Any], frozenset[int]]]:
    """One plan without ``microbatch`` per group of ``plans`` equal but for it (one learner
    per GPU: Crossbow learners run no micro-batches), in first-seen order: the index of the
    group's first plan, the plan without its micro-batch, and the group's micro-batch sizes.

    >>> auto_plans([{"dp": 2, "microbatch": 1}, {"dp": 1, "microbatch": 8}, {"dp": 2, "microbatch": 4}])
    [(0, {'dp': 2}, frozenset({1, 4})), (1, {'dp': 1}, frozenset({8}))]
    """
    groups: dict[tuple[tuple[str, Any], ...], tuple[int, dict[str, Any], set[int]]] = {}
    for i, plan in enumerate(plans):
        if int(plan.get("learners_per_gpu", 1)) != 1 or plan.get("microbatch") is None:
            continue
        rest = {k: v for k, v in plan.items() if k != "microbatch"}
        key = tuple(sorted(rest.items(), key=lambda kv: kv[0]))
        groups.setdefault(key, (i, rest, set()))[2].add(int(plan["microbatch"]))
    return [(i, rest, frozenset(mbs)) for i, rest, mbs in groups.values()]


def chosen_microbatch(report: Mapping[str, Any]) -> int | None:
    """The micro-batch a report ran: the screen's ``microbatch`` (set when it chose one), else
    the predicted plan's ``microbatch_size``; ``None`` when the report names none.

    >>> chosen_microbatch({"microbatch": 16}), chosen_microbatch({"plan": {"microbatch_size": 8}})
    (16, 8)
    """
    mb = report.get("microbatch")
    if mb is None:
        mb = (report.get("plan") or {}).get("microbatch_size")
    return None if mb is None else int(mb)


def auto_microbatch(candidate: Any) -> int | None:
    """The micro-batch a plan naming none ran at its deepest stage (``predict``'s choice, or
    the screen's where only the screen evaluated it); ``None`` for a plan naming its own.
    ``candidate`` is a :class:`~perfmodel.search.compare.Candidate`."""
    if candidate.plan.get("microbatch") is not None:
        return None
    return chosen_microbatch(candidate.report)


def auto_kept(report: Mapping[str, Any] | None, explicit: frozenset[int]) -> bool:
    """Whether an automatic-micro-batch plan stays in the search: it was evaluated (a plan its
    evaluator refuses is the group's business, not a new row) and chose a size the group's
    plans do not already have.

    >>> auto_kept({"microbatch": 16}, frozenset({1, 8})), auto_kept({"microbatch": 8}, frozenset({8}))
    (True, False)
    """
    if report is None:
        return False
    mb = chosen_microbatch(report)
    return mb is not None and mb not in explicit


#: a search's plan as ``(plan, gpus, global batch)``
Meta = tuple[Mapping[str, Any], int, int]


def with_auto(
    scenarios: Sequence[dict[str, Any]], meta: Sequence[Meta]
) -> tuple[list[dict[str, Any]], list[Meta], list[frozenset[int] | None]]:
    """``scenarios`` and their ``meta`` followed by the automatic-micro-batch plans of each
    GPU count and global batch (:func:`auto_plans`: the group's first scenario without its
    ``microbatch``), and per scenario the group's sizes (``None``: a plan naming its own).

    >>> sc, meta, explicit = with_auto([{"dp": 2, "microbatch": 1}], [({"dp": 2, "microbatch": 1}, 2, 8)])
    >>> sc[1], meta[1], explicit
    ({'dp': 2}, ({'dp': 2}, 2, 8), [None, frozenset({1})])
    """
    out_sc, out_meta = list(scenarios), list(meta)
    explicit: list[frozenset[int] | None] = [None] * len(out_sc)
    runs: dict[tuple[int, int], list[int]] = {}
    for i, (_, g, gb) in enumerate(meta):
        runs.setdefault((g, gb), []).append(i)
    for (g, gb), idx in runs.items():
        for j, rest, mbs in auto_plans([meta[i][0] for i in idx]):
            out_sc.append({k: v for k, v in scenarios[idx[j]].items() if k != "microbatch"})
            out_meta.append((rest, g, gb))
            explicit.append(mbs)
    return out_sc, out_meta, explicit


def drop_auto(
    scenarios: Sequence[dict[str, Any]],
    meta: Sequence[Meta],
    results: Sequence[tuple[Mapping[str, Any] | None, str | None]],
    explicit: Sequence[frozenset[int] | None],
) -> tuple[list[dict[str, Any]], list[Meta], list[tuple[Mapping[str, Any] | None, str | None]]]:
    """The first stage's plans without the automatic-micro-batch ones :func:`auto_kept` drops
    (refused, or a size their group has), so they count nowhere (not pruned, not folded)."""
    keep = [i for i, ex in enumerate(explicit) if ex is None or auto_kept(results[i][0], ex)]
    return [scenarios[i] for i in keep], [meta[i] for i in keep], [results[i] for i in keep]


def auto_line(rows: Sequence[Any]) -> str:
    """The line under ``perfmodel compare``'s table naming the micro-batch each shown plan
    without ``mbN`` ran (its deepest stage's choice, as ``predict --plan LABEL`` makes it);
    ``""`` when every shown plan names its micro-batch. ``rows`` are
    :class:`~perfmodel.search.compare.Candidate` values. A row only the screen evaluated
    chose its size on ``predict``'s memory (:mod:`perfmodel.search.screen_memory`), so it is
    ``predict``'s choice too; before session 17 the screen's own estimate could differ (GPT-3
    175B dp4 tp8 pp16 interleaved rc=full on 512 A100: the screen's mb6 against predict's mb8)
    and such a size was marked "(the screen's estimate)"."""
    auto = [(c, mb) for c in rows if (mb := auto_microbatch(c))]
    if not auto:
        return ""
    named = ", ".join(f"{c.label} -> mb{mb}" for c, mb in auto)
    return (
        "micro-batch auto-sized (a plan without mbN; searched: the default sizes 1,2,4,8, the "
        "whole replica batch and predict's choice): the largest that fits in GPU memory (with "
        "pipelining, at least pp micro-batches a replica; the smallest where none fits), as "
        f"`perfmodel predict --plan LABEL` chooses it: {named}"
    )


def _ranks(ranked: Sequence[Any], top: int, stage: str) -> str:
    """``"#5-#8"`` or ``"#2, #4"``: the shown rows whose deepest stage is ``stage``."""
    only = [i + 1 for i, c in enumerate(ranked[:top]) if c.stage == stage]
    if len(only) > 2 and only == list(range(only[0], only[-1] + 1)):
        return f"#{only[0]}-#{only[-1]}"
    return ", ".join(f"#{r}" for r in only)


def _gap(ranked: Sequence[Any], stage: str, deeper: str) -> str:
    """``"; on the 8 plans both evaluated ..."``: the largest ``|t_stage / t_deeper - 1|`` of
    the step time over the ranked plans both stages evaluated (``""``: none did)."""
    gaps = [
        abs(c.reports[stage]["iteration_time_s"] / c.reports[deeper]["iteration_time_s"] - 1)
        for c in ranked
        if stage in c.reports and deeper in c.reports
    ]
    if not gaps:
        return ""
    gap = f"within {max(gaps):.2%} of" if max(gaps) >= 5e-5 else "the same as"
    plans = "plan" if len(gaps) == 1 else "plans"
    return (
        f"; on the {len(gaps)} {plans} both evaluated its step time was {gap} the {deeper} stage's"
    )


def screen_line(ranked: Sequence[Any], top: int) -> str:
    """The line under ``perfmodel compare``'s table naming the shown rows only the screen
    evaluated, whose columns are its estimates, and the largest relative step-time gap
    ``|t_screen / t_analytic - 1|`` over the ranked plans both stages evaluated; ``""`` when
    every shown row went through ``predict``. ``ranked`` are
    :class:`~perfmodel.search.compare.Candidate` values, best first."""
    ranks = _ranks(ranked, top, "screen")
    if not ranks:
        return ""
    return (
        f"rows {ranks} (screened only) are the closed-form screen's estimates, not "
        f"`perfmodel predict`'s numbers{_gap(ranked, 'screen', 'analytic')}"
    )


def analytic_line(ranked: Sequence[Any], top: int) -> str:
    """The line naming the shown rows the analytic stage evaluated last when the simulated
    stage ran: ``perfmodel predict --plan LABEL`` runs the simulation by default, so those rows
    are what it prints with ``--fidelity analytic``; with the largest
    ``|t_analytic / t_simulated - 1|`` over the plans both evaluated. ``""`` otherwise."""
    ranks = _ranks(ranked, top, "analytic")
    if not ranks or not any("simulated" in c.reports for c in ranked):
        return ""
    return (
        f"rows {ranks} (not simulated) are `perfmodel predict --plan LABEL --fidelity analytic`'s "
        f"numbers (predict's default is simulated){_gap(ranked, 'analytic', 'simulated')}"
    )
