"""Lower: a resolved scenario's workload, placement and step inputs become a
:class:`~perfmodel.parallel.lowering.LoweredStep` (the task graph and the memory of each stage).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.lower_step import lower, lower_memory
from perfmodel.parallel.lowering import LoweredStep, StepInputs
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.placement import place
from perfmodel.parallel.plan import DPMode
from perfmodel.pipeline.inputs import (
    WorkloadFn,
    frozen_args,
    host_only_profile,
    system_costs,
    zoo_workload,
)
from perfmodel.pipeline.resolve import Resolved
from perfmodel.scenario import Scenario
from perfmodel.scenario_parse import Fidelity
from perfmodel.workload.kernels import DEFAULT_KERNELS


def step_workload(sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None) -> tuple[Any, int]:
    """The workload of one micro-batch on one tensor-parallel rank, and that micro-batch."""
    plan = r.plan
    args = frozen_args(sc.model_args)
    wl_tp = plan.tp  # one-weird-trick: tp = dp splits the FC layers over all GPUs
    batch = r.microbatch
    if plan.dp_mode is DPMode.CROSSBOW and plan.learners_per_gpu > 1:
        batch = r.microbatch * plan.learners_per_gpu
    if workload_fn is not None:
        wl = workload_fn(
            batch_size=batch,
            precision=r.precision,
            tp=wl_tp,
            sequence_parallel=plan.sequence_parallel,
        )
    else:
        try:
            wl = zoo_workload(
                sc.model,
                batch,
                r.precision,
                wl_tp,
                plan.sequence_parallel,
                args,
                (plan.ep, plan.cp, plan.etp),
                DEFAULT_KERNELS
                if r.recipe is None
                else r.recipe.kernels(r.batch_per_replica // batch),
            )
        except TypeError as exc:  # unhashable model argument value
            raise ConfigError(
                f"model_args: {exc}", value=dict(sc.model_args), where="model_args"
            ) from exc
    return wl, batch


def build_step(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None = None
) -> tuple[LoweredStep, SystemCosts]:
    """The resolved scenario's step, lowered (its task graph and per-stage memory), and the
    system's costs."""
    inp, costs, wl = _step_inputs(sc, r, workload_fn)
    # the analytic graph's summarised collectives only where the list schedule runs the step
    # (a simulated step would lower its coarse graph a second time for the replay)
    step = lower(inp, costs, hidden=r.fidelity is Fidelity.ANALYTIC)
    return replace(step, tokens_per_sample=wl.tokens_per_sample), costs


def step_memory(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None = None
) -> tuple[PlanMemory, ...]:
    """``build_step(sc, r, workload_fn)[0].memory`` without lowering the task graph where the
    plan allows (:func:`perfmodel.parallel.lower_step.lower_memory`: the same values, and the
    same refusals): what an auto-size probe reads."""
    inp, costs, _ = _step_inputs(sc, r, workload_fn)
    return lower_memory(inp, costs, hidden=r.fidelity is Fidelity.ANALYTIC)


def _step_inputs(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None
) -> tuple[StepInputs, SystemCosts, Any]:
    """The lowering's inputs of a resolved scenario (workload, placement, batch, recipe), the
    system's costs and the workload."""
    calib = None if host_only_profile(sc.calibration) else sc.calibration
    costs = system_costs(r.topology, r.precision, calib, r.preset, r.memory_format, r.recipe)
    plan = r.plan
    wl, batch = step_workload(sc, r, workload_fn)
    # the scenario's order: by default the frameworks' (tp, dp, pp: pipeline stages outermost,
    # perfmodel.parallel.placement), so a stage's data- and expert-parallel groups fill servers
    # before they span NICs; an explicit placement is kept
    order = r.parsed.placement
    # the topology's first GPUs: place's default when the plan uses them all (no check of an
    # explicit list, 1,024 names against the topology's for GPT-3 on 1024 A100)
    gpus = None if plan.num_gpus == r.num_gpus else r.topology.gpus[: r.num_gpus]
    placement = place(plan, r.topology, gpus=gpus, order=order)
    inp = StepInputs(
        plan=plan,
        preset=r.preset,
        placement=placement,
        workload=wl,
        batch_per_replica=r.batch_per_replica
        * (plan.learners_per_gpu if plan.dp_mode is DPMode.CROSSBOW else 1),
        optimizer=r.optimizer,
        capacity_bytes=float(r.topology.gpu_spec().memory_bytes),
        recipe=r.recipe,
    )
    if plan.dp_mode is DPMode.CROSSBOW:
        inp = replace(inp, plan=replace(plan, microbatch_size=batch))
    return inp, costs, wl
