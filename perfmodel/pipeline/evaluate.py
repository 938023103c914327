"""Evaluate: a lowered step is executed (the analytic list schedule or the SimPy replay,
:mod:`perfmodel.sim.engine`) and becomes a step time: the simulated period, the wait for the
slowest GPU (:mod:`perfmodel.parallel.straggler`) and the host's input pipeline
(:mod:`perfmodel.host.input_pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfmodel._io import file_stamp
from perfmodel.errors import PerfModelError
from perfmodel.host.input_pipeline import InputPipeline, input_pipeline
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.lowering import LoweredStep
from perfmodel.parallel.straggler import straggler_wait_s
from perfmodel.pipeline.inputs import host_profile
from perfmodel.pipeline.resolve import Resolved
from perfmodel.report.step_breakdown import Breakdown, breakdown, critical_device
from perfmodel.scenario import Scenario
from perfmodel.scenario_parse import Fidelity
from perfmodel.sim.engine import FlowComm, Timeline, evaluate, simulate
from perfmodel.topology import Topology


@dataclass(frozen=True)
class Evaluated:
    """A lowered step executed and timed.

    ``iteration_time_s`` is the step: the task graph's period (at least the lowering's
    ``min_period_s``) plus the wait for the slowest GPU (``sync_time_s``), lengthened by the
    input pipeline when the host cannot feed it; ``breakdown`` is the critical device's
    (``device``), its bubble grown by what the step adds beyond the simulated period and its
    ``sync_wait_s`` the straggler wait. Throughput is ``samples_per_step / iteration_time_s``;
    the model FLOP rate per GPU ``model_flop_per_step / iteration_time_s / num_gpus``.
    """

    timeline: Timeline
    fidelity: str  # "analytic" or "simulated": the executor that ran
    device: str
    breakdown: Breakdown
    sync_time_s: float
    iteration_time_s: float
    throughput_samples_per_s: float
    model_flops_per_gpu_per_s: float
    feed: InputPipeline | None  # the host's input pipeline; None: synthetic data


def evaluate_step(sc: Scenario, r: Resolved, step: LoweredStep, costs: SystemCosts) -> Evaluated:
    """Execute ``step`` at the scenario's fidelity and time it (:class:`Evaluated`).

    Raises
    ------
    PerfModelError
        If the executor gives a non-positive period.
    """
    timeline, fidelity = execute(step, r.fidelity, r.topology, costs)
    T_gpu = max(timeline.makespan_s, step.min_period_s)
    if T_gpu <= 0:
        raise PerfModelError(f"predicted a non-positive iteration time {T_gpu!r} for {sc.model}")
    dev = critical_device(timeline)  # the GPU the breakdown and the kernel classes read
    bd = breakdown(timeline, dev, period_s=T_gpu)
    # a synchronous step waits for its slowest GPU (perfmodel.parallel.straggler)
    wait = straggler_wait_s(bd.compute_s, step.num_gpus)
    T = T_sync = T_gpu + wait
    feed = _input_pipeline(sc, r, step, costs)
    if feed is not None:  # the host's input pipeline bounds (prefetch) or lengthens the step
        T = feed.step_time(T)
    if T != T_sync or wait:  # beyond the simulated period: idle (breakdown's rule), the wait
        bd = replace(bd, bubble_s=bd.bubble_s + (T - T_sync), sync_wait_s=wait)
    return Evaluated(
        timeline=timeline,
        fidelity=fidelity,
        device=dev,
        breakdown=bd,
        sync_time_s=T_sync,
        iteration_time_s=T,
        throughput_samples_per_s=step.samples_per_step / T,
        model_flops_per_gpu_per_s=step.model_flop_per_step / T / step.num_gpus,
        feed=feed,
    )


def execute(
    step: LoweredStep, fidelity: Fidelity, topo: Topology, costs: SystemCosts
) -> tuple[Timeline, str]:
    """The step's :class:`~perfmodel.sim.engine.Timeline` and the executor's name: the
    analytic list schedule (closed-form communication) or the SimPy replay with communication
    as flows on the topology's links (:class:`~perfmodel.sim.engine.FlowComm`)."""
    if fidelity is Fidelity.ANALYTIC:
        return evaluate(step.graph), "analytic"
    lp = costs.link_params
    return simulate(
        step.graph, network_factory=lambda env: FlowComm(env, topo, lp, model=costs.comm)
    ), "simulated"


def _input_pipeline(
    sc: Scenario, r: Resolved, step: LoweredStep, costs: SystemCosts
) -> InputPipeline | None:
    """The scenario's input pipeline (:mod:`perfmodel.host.input_pipeline`); ``None`` when the
    data are synthetic (``dataset`` unset or ``synthetic``)."""
    if r.parsed.dataset is None:
        return None
    measured = None
    if sc.calibration:  # per-sample costs measured on the user's CPU (calibrate --only input)
        measured = host_profile(str(sc.calibration), file_stamp(str(sc.calibration)))[1]
    return input_pipeline(
        dataset=r.parsed.dataset,
        preset=r.preset.name,
        topology=r.topology,
        gpus=r.topology.gpus[: r.num_gpus],
        replicas=r.plan.dp,
        samples_per_step=step.samples_per_step,
        costs=costs,
        loader=r.parsed.data_loader,
        workers=sc.data_loader_workers,
        cpu_s_per_sample=measured,
    )
