"""The prediction API: :class:`Scenario`, :func:`predict`, :func:`predict_curve`.

Used by the CLI (``perfmodel predict``), the examples, plan search and sweeps. Contract in
``docs/design.md`` ("The prediction API"); options documented in ``docs/predict.md``.

A prediction is a short pipeline (:mod:`perfmodel.pipeline`, one module per stage)::

    parse_scenario -> resolve -> auto_microbatch (lowers) -> evaluate_step -> speedup -> report

This module is its public face: :func:`predict` keeps the last reports and calls the stages in
order (:func:`_predict`); the names a caller needs from the stages are re-exported here.

>>> sc = Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=64, fidelity="analytic")
>>> r = predict(sc)
>>> r.num_gpus, r.fits_in_memory, 0.5 < r.scaling_efficiency <= 1.0
(8, True, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from perfmodel._gc import fewer_collections
from perfmodel._io import file_stamp, system_file_stamp
from perfmodel.parallel.plan import Hybrid
from perfmodel.pipeline.assemble import (
    TF32_CONV_NOTE,
    build_report,
    hardware_notes,
    selective_recompute_default,
    step_notes,
)
from perfmodel.pipeline.autosize import auto_microbatch
from perfmodel.pipeline.baseline import Speedup, baseline_scenario, speedup
from perfmodel.pipeline.evaluate import evaluate_step
from perfmodel.pipeline.inputs import WorkloadFn, system_costs, topology_of
from perfmodel.pipeline.resolve import Resolved, check_precision_runs, fp8_default, resolve
from perfmodel.pipeline.training_run import (
    chakra_metadata,
    checkpoint_bytes,
    gpus_per_host,
    run_estimate,
)
from perfmodel.report.step import StepReport
from perfmodel.scenario import Scenario, unstated_defaults
from perfmodel.scenario_parse import Fidelity, parse_scenario, pos_int

FIDELITIES = tuple(f.value for f in Fidelity)


def predict(
    sc: Scenario,
    *,
    workload_fn: WorkloadFn | None = None,
    baseline: bool = True,
    _baseline: bool = False,
) -> StepReport:
    """Predict one training step of ``sc``.

    ``workload_fn(batch_size=, precision=, tp=, sequence_parallel=) -> Workload`` replaces the
    zoo lookup of ``sc.model`` (a model of your own built from ``perfmodel.workload`` layers);
    ``sc.model`` is then only its name in reports.

    ``baseline=False`` skips the 1-GPU baseline prediction (:func:`baseline_scenario`): the
    report's ``speedup`` and ``scaling_efficiency`` are then ``None``, everything else is the
    same. Plan search and sweeps that only rank step times save one prediction per call.
    Baseline throughputs of zoo models are cached per baseline scenario
    (:meth:`Scenario.content_hash`), so scenarios sharing a baseline compute it once; so are
    whole reports (the last 256; :class:`StepReport` is immutable), so a repeated question of a
    sweep or search costs a hash and a lookup.

    Returns a :class:`~perfmodel.report.step.StepReport`; a plan that does not fit in GPU
    memory is reported with ``fits_in_memory=False`` (not raised). Its ``defaults`` names every
    choice made for the caller, first the ``system`` and ``model`` a scenario built in code
    left out (``"system dgx1-v100 (default)"``; the CLI refuses to run without them), then the
    software preset, precision and optimizer it left out, in the CLI header's words with the
    Scenario field for the flag (``"precision fp32 (default)"``, ``"software pytorch-ddp
    (default preset; Scenario(software=...) to choose)"``;
    :func:`perfmodel.scenario.unstated_defaults`). Its 80%
    range (``predict``'s ``80% range`` lines) is ``report.interval()`` (:meth:`StepReport.interval
    <perfmodel.report.step.StepReport.interval>`), computed only when asked for.

    Raises
    ------
    ConfigError, InfeasiblePlanError
        Bad input, or a plan that does not divide the GPUs, layers, heads or batch.
    """
    key = None
    if workload_fn is None:  # zoo model: the scenario and the profile's stamp decide the report
        stamp = file_stamp(str(sc.calibration)) if sc.calibration else None
        key = f"{sc.content_hash()}:{stamp}:{system_file_stamp(sc.system)}:{baseline}:{_baseline}"
        if not _baseline and (unstated := unstated_defaults(sc)):  # the report says them
            key += f":{unstated}"
        hit = _REPORTS.get(key)
        if hit is not None:
            return hit
    with fewer_collections():  # perfmodel._gc: ~15% of a cold prediction's CPU was collector
        report = _predict(
            sc,
            r=resolve(sc),
            workload_fn=workload_fn,
            baseline=baseline and not _baseline,
            is_baseline=_baseline,
        )
    if key is not None:
        if len(_REPORTS) >= _MAX_REPORTS:
            _REPORTS.pop(next(iter(_REPORTS)), None)  # oldest first
        _REPORTS[key] = report
    return report


#: Reports of zoo-model scenarios by content hash, profile stamp and baseline flags (StepReport is
#: immutable, so a repeated question is answered by the same value); at most ``_MAX_REPORTS``.
_REPORTS: dict[str, StepReport] = {}
_MAX_REPORTS = 256


def _predict(
    sc: Scenario,
    *,
    r: Resolved,
    workload_fn: WorkloadFn | None,
    baseline: bool,
    is_baseline: bool = False,
) -> StepReport:
    """:func:`predict` without its report cache: the pipeline's stages in order
    (``is_baseline``: the prediction is another one's speedup baseline, whose choices that run
    states itself). ``defaults`` collects the choices made for the user, each printed with its
    reason, in the order the stages make them."""
    defaults: list[str] = [] if is_baseline else list(unstated_defaults(sc))
    fp8 = None if is_baseline else fp8_default(r)
    if fp8 is not None:
        defaults.append(fp8)
    sc, r, step, costs = auto_microbatch(sc, r, workload_fn, defaults)  # auto-size and lower
    ev = evaluate_step(sc, r, step, costs)
    notes, peak = step_notes(sc, r, step, ev, workload_fn)
    selective = selective_recompute_default(sc, r, workload_fn)
    if selective is not None:
        defaults.append(selective)
    speed = Speedup()
    if baseline:
        fits = all(m.fits for m in step.memory)
        this_run = (step.num_gpus, ev.throughput_samples_per_s, fits)
        speed = speedup(sc, r, workload_fn, this_run, predict)
        if speed.default is not None:
            defaults.append(speed.default)
    return build_report(
        sc,
        r,
        step,
        costs,
        ev,
        notes=notes,
        peak_flops=peak,
        speed=speed,
        defaults=defaults,
        workload_fn=workload_fn,
    )


def predict_curve(
    sc: Scenario, gpus: Sequence[int], *, workload_fn: WorkloadFn | None = None
) -> list[StepReport]:
    """Predictions for each GPU count (speedup vs 1 GPU of the same system).

    Keeps ``tp``/``pp`` and lets ``dp`` follow the GPU count; adds servers when a count exceeds
    one server's GPUs. Points that do not fit in memory come back with ``fits_in_memory=False``.
    """
    topo1 = topology_of(replace(sc, nodes=1))
    p = parse_scenario(sc)
    owt = p.hybrid is Hybrid.ONE_WEIRD_TRICK
    min_nodes = p.nodes
    out: list[StepReport] = []
    for g in gpus:
        gi = pos_int(g, "gpus")
        nodes = max(min_nodes, math.ceil(gi / topo1.gpus_per_node))
        tp = gi if owt else sc.tp
        out.append(
            predict(replace(sc, gpus=gi, nodes=nodes, dp=None, tp=tp), workload_fn=workload_fn)
        )
    return out


__all__ = [
    "FIDELITIES",
    "TF32_CONV_NOTE",
    "Fidelity",
    "Resolved",
    "Scenario",
    "StepReport",
    "baseline_scenario",
    "chakra_metadata",
    "check_precision_runs",
    "checkpoint_bytes",
    "gpus_per_host",
    "hardware_notes",
    "predict",
    "predict_curve",
    "resolve",
    "run_estimate",
    "system_costs",
    "topology_of",
]
