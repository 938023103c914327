"""Auto-size: the micro-batch a scenario runs when it does not give one (the largest that fits,
:func:`perfmodel.pipeline.autobatch.choose_microbatch`), lowering each size at most once.
"""

from __future__ import annotations

from dataclasses import replace

from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.lowering import LoweredStep
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.plan import DPMode, PipelineSchedule
from perfmodel.pipeline import autobatch
from perfmodel.pipeline.inputs import WorkloadFn
from perfmodel.pipeline.lower import build_step, step_memory
from perfmodel.pipeline.resolve import Resolved, resolve
from perfmodel.scenario import Scenario


def auto_microbatch(
    sc: Scenario,
    r: Resolved,
    workload_fn: WorkloadFn | None,
    defaults: list[str],
) -> tuple[Scenario, Resolved, LoweredStep, SystemCosts]:
    """The scenario's step, lowered; without a micro-batch, with pipelining or when the whole
    per-replica batch does not fit: the largest micro-batch that fits
    (:func:`perfmodel.pipeline.autobatch.choose_microbatch`), its reason appended to
    ``defaults``. Crossbow learners keep their batch.

    Each micro-batch size is lowered at most once: with pipelining the resolved default (1)
    is not lowered before the search (the search picks the step it returns), and a size the
    search probes twice, or the default it probes, reuses its probe (issue 14: the speedup
    baseline's one-replica prediction is such a search). A probe reads the size's per-stage
    memory only (:func:`~perfmodel.pipeline.lower.step_memory`, the same values as the lowered
    step's, without its task graph: issue 27), and the chosen size is lowered once, whole."""
    auto = sc.microbatch is None and r.plan.dp_mode is not DPMode.CROSSBOW
    if auto and not r.preset.gradient_accumulation:  # the stack runs the whole batch at once
        step, costs = build_step(sc, r, workload_fn)
        if not all(m.fits for m in step.memory):
            defaults.append(
                f"{r.preset.name} does not accumulate gradients (SoftwarePreset."
                f"gradient_accumulation): the whole per-replica batch of {r.batch_per_replica} "
                "runs at once; give a smaller batch, or a micro-batch to model accumulation"
            )
        return sc, r, step, costs
    if not auto:
        return sc, r, *build_step(sc, r, workload_fn)
    built: dict[int, tuple[Scenario, Resolved, LoweredStep, SystemCosts]] = {}
    probed: dict[int, tuple[PlanMemory, ...] | None] = {}  # None: an infeasible size
    if r.plan.pp == 1:  # the whole batch as one micro-batch stays when it fits
        step, costs = build_step(sc, r, workload_fn)
        if all(m.fits for m in step.memory):
            return sc, r, step, costs
        built[r.microbatch] = (sc, r, step, costs)
        probed[r.microbatch] = step.memory

    def fits(mb: int) -> bool:
        """Whether every stage fits in GPU memory with micro-batch ``mb`` (its memory, the
        graph not lowered: :func:`~perfmodel.pipeline.lower.step_memory`; an infeasible plan
        does not fit)."""
        if mb not in probed:
            mb_sc = replace(sc, microbatch=mb)
            try:
                probed[mb] = step_memory(mb_sc, resolve(mb_sc), workload_fn)
            except InfeasiblePlanError:
                probed[mb] = None
        got = probed[mb]
        return got is not None and all(m.fits for m in got)

    def limit(mb: int) -> float | None:
        """The largest micro-batch estimated to fit from the probe of ``mb`` (guides the next
        probe only; ``None`` for an infeasible size)."""
        got = probed.get(mb)
        return None if got is None else autobatch.affine_limit(mb, got)

    # the interleaved schedule refuses micro-batch counts pp does not divide: such a size is
    # infeasible between feasible ones, fits is not monotone there, and only the bisection's
    # probes give the bisection's answer
    interleaved = r.plan.schedule is PipelineSchedule.INTERLEAVED and r.plan.pp > 1
    choice = autobatch.choose_microbatch(
        r.batch_per_replica, r.plan.pp, fits, None if interleaved else limit
    )
    if choice is not None:
        defaults.append(choice.note())
    if choice is None or choice.microbatch == r.microbatch:
        # the scenario as given (micro-batch unset); a probe of the same size lowered the same
        # step (build_step reads the resolved micro-batch, not the scenario's field)
        hit = built.get(r.microbatch)
        return (sc, r, hit[2], hit[3]) if hit else (sc, r, *build_step(sc, r, workload_fn))
    if choice.microbatch in built:
        return built[choice.microbatch]
    sc = replace(sc, microbatch=choice.microbatch)
    r = resolve(sc)
    step, costs = build_step(sc, r, workload_fn)
    return sc, r, step, costs
