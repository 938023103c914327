"""A whole training run from one step's report: the checkpoint's bytes, the run's energy, cost
and goodput (:mod:`perfmodel.report.goodput`), and what an exported Chakra trace says of its run.
"""

from __future__ import annotations

import math
from typing import Any

from perfmodel.errors import PerfModelError
from perfmodel.pipeline.inputs import topology_of
from perfmodel.pipeline.lower import step_workload
from perfmodel.pipeline.resolve import resolve
from perfmodel.report.step import StepReport
from perfmodel.scenario import Scenario
from perfmodel.topology import Topology


def gpus_per_host(topology: Topology) -> int:
    """GPUs one host (operating system) drives: a server's GPUs, or one compute tray's in a
    rack-scale server whose nodes name their tray (GB200 NVL72: 4 of 72); what the per-server
    failure rate of :class:`perfmodel.report.goodput.Reliability` is charged per."""
    g = topology.graph
    trays = {g.nodes[n]["tray"] for n in topology.server_nodes(0) if "tray" in g.nodes[n]}
    per = topology.gpus_per_node
    return max(1, per // len(trays)) if len(trays) > 1 else per


def checkpoint_bytes(sc: Scenario, report: StepReport | None = None) -> float:
    """Bytes of one training checkpoint of the scenario's model: its parameters times the
    recipe's weight, master-copy and optimizer-state bytes per parameter (gradients are not
    saved), 14 per parameter for BF16 with Adam (:mod:`perfmodel.report.goodput`)."""
    if report is not None and report.scenario:
        sc = Scenario.from_dict(report.scenario)
    r = resolve(sc)
    wl, _ = step_workload(sc, r, None)
    params = float(wl.total_params or wl.params * r.plan.tp)
    rc = r.recipe
    per_param = (rc.param_bytes + rc.state_bytes) if rc is not None else r.precision.param_bytes
    return params * per_param


def run_estimate(
    sc: Scenario,
    report: StepReport,
    tokens: float,
    *,
    pricing: Any = None,
    reliability: Any = None,
    storage: Any = None,
    interval_s: float | None = None,
) -> Any:
    """Energy, cost and goodput of training ``tokens`` tokens at ``report``'s step time
    (:class:`perfmodel.report.goodput.RunEstimate`): the ideal time of
    :meth:`StepReport.token_budget`, interruptions at the
    :class:`~perfmodel.report.goodput.Reliability` rates over the report's GPUs and hosts
    (:func:`gpus_per_host`), checkpoints of :func:`checkpoint_bytes` on
    :class:`~perfmodel.report.goodput.Storage`, Daly's interval (or ``interval_s``), and the
    step's energy (:func:`perfmodel.report.goodput.step_energy`).

    Raises
    ------
    ConfigError
        A non-sequence model, a bad budget, or a non-positive rate, bandwidth or interval.
    """
    from perfmodel.report.goodput import RunEstimate, goodput, step_energy

    budget = report.token_budget(tokens, pricing)
    topo = topology_of(Scenario.from_dict(report.scenario) if report.scenario else sc)
    hosts = math.ceil(report.num_gpus / gpus_per_host(topo))
    step_s = report.iteration_time_s
    g = goodput(
        ideal_s=budget.time_s,
        step_s=step_s,
        gpus=report.num_gpus,
        nodes=hosts,
        checkpoint_bytes=checkpoint_bytes(sc, report),
        reliability=reliability,
        storage=storage,
        interval_s=interval_s,
    )
    b = report.breakdown
    energy = step_energy(
        topo.gpu_spec(),
        num_gpus=report.num_gpus,
        iteration_time_s=step_s,
        busy_s=b.compute_s + b.optimizer_s,
        tokens_per_step=float(report.samples_per_step * report.tokens_per_sample),
    )
    return RunEstimate(
        tokens=float(tokens),
        goodput=g,
        energy=energy,
        steps=budget.steps,
        price_per_gpu_hour=None if pricing is None else pricing.price_per_gpu_hour,
        price_source="" if pricing is None else budget.price_source,
    )


def chakra_metadata(sc: Scenario, report: StepReport) -> dict[str, object]:
    """What an exported Chakra trace says of its run (``perfmodel_<key>`` metadata,
    :func:`perfmodel.report.chakra.write_chakra`), so ``model import-chakra`` of perfmodel's own
    export needs no ``--gpu``, ``--params``, ``--batch`` or ``--precision`` (issue 28, item 9):
    the GPU, the model's and one tensor-parallel rank's parameters, the precision and the
    gradient bytes on the wire per parameter, the software preset, the plan's degrees, the
    per-replica batch and the micro-batch."""
    sc = Scenario.from_dict(report.scenario) if report.scenario else sc
    r = resolve(sc)
    plan = r.plan
    out: dict[str, object] = {
        "gpu": r.topology.gpu_spec().name,
        "model": sc.model,
        "precision": r.precision.value,
        "software": r.preset.name,
        "dp": plan.dp,
        "tp": plan.tp,
        "pp": plan.pp,
        "cp": plan.cp,
        "ep": plan.ep,
        "batch_per_replica": r.batch_per_replica,
        "microbatch": r.microbatch,
    }
    if r.recipe is not None:
        out["grad_reduce_bytes"] = r.recipe.grad_reduce_bytes
    try:  # the zoo model's parameters: whole model, and one tensor-parallel rank's shard
        wl, _ = step_workload(sc, r, None)
        out["rank_params"] = int(wl.params)
        out["model_params"] = int(wl.total_params or wl.params * plan.tp)
    except PerfModelError:
        pass
    return out
