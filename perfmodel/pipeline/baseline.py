"""The speedup baseline of a prediction: one GPU of the same system, model and software
(:func:`baseline_scenario`), or the smallest GPU count that fits when one GPU does not
(:func:`perfmodel.pipeline.autobatch.fitting_baseline`).

A baseline is itself a prediction: the caller passes :func:`perfmodel.api.predict` in as
``predict`` (this module sits below the API and never imports it). Baseline throughputs of zoo
models are kept in :data:`BASELINES` by the baseline scenario's content hash.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from perfmodel._io import file_stamp, system_file_stamp
from perfmodel._memo import BoundedMemo
from perfmodel.parallel.plan import Hybrid
from perfmodel.parallel.recipe import Sharding
from perfmodel.pipeline import autobatch
from perfmodel.pipeline.inputs import WorkloadFn
from perfmodel.pipeline.lower import step_workload
from perfmodel.pipeline.resolve import Resolved, resolve
from perfmodel.report.step import StepReport
from perfmodel.scenario import Scenario

#: :func:`perfmodel.api.predict` (its keywords ``workload_fn``, ``baseline``, ``_baseline``).
PredictFn = Callable[..., StepReport]

#: Speedup baselines of zoo-model scenarios (:func:`_baseline_value`): ``(throughput, fits,
#: defaults)`` by (baseline scenario content hash, profile stamp, system file stamp, kind);
#: small values, so many (a sweep's rows have as many distinct baselines as model, batch,
#: precision and software combinations).
BASELINES: BoundedMemo[tuple[Any, ...], tuple[float, bool, tuple[str, ...]]] = BoundedMemo(65_536)


#: The :class:`~perfmodel.scenario.Scenario` fields :func:`baseline_scenario` puts back to their
#: defaults (:data:`_SCENARIO_DEFAULTS`): one server, no parallelism of any kind, no micro-batch
#: and no global batch of the run's own.
_RESET_TO_DEFAULT = (
    "nodes", "dp", "tp", "pp", "microbatch", "schedule", "interleave", "hybrid", "dp_mode",
    "hsdp", "ep", "cp", "etp", "cp_comm", "ep_overlap", "moe_dispatcher", "global_batch",
    "pipeline_layout",
)  # fmt: skip
_SCENARIO_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Scenario)}


def baseline_scenario(sc: Scenario, r: Resolved | None = None) -> Scenario:
    """One GPU of the same system, model and software: the reference of ``speedup``.

    What stays fixed follows the batch key the scenario uses. ``global_batch`` with pure data
    parallelism is *strong scaling*: the baseline runs the whole global batch on one GPU.
    ``batch_per_gpu`` (and Krizhevsky's hybrid, and Crossbow learners) is *weak scaling*: the
    baseline runs one replica's batch. Model-parallel plans: the global batch divided by the GPUs
    (at least 1), the samples one GPU handles. The baseline is unsharded (``zero=0``) and uses
    the analytic executor (one GPU has no contention).

    The baseline is then the 1-GPU row of a data-parallel curve (``--gpus 1,N``, strong or
    weak scaling) and the speedup the ratio of the rows: on one GPU an FSDP stack does not shard
    (:func:`perfmodel.parallel.recipe.build_recipe`), ZeRO on one rank shards nothing, and the
    simulator finds no contention, so the 1-GPU row predicts what the baseline predicts. It is
    another scenario where the 1-GPU row runs another batch (model-parallel plans) or does not
    fit (the smallest count that fits is the baseline,
    :func:`perfmodel.pipeline.autobatch.fitting_baseline`); ``StepReport.speedup_basis`` says
    which, and the curve says whether the baseline is one of its rows.
    """
    r = r or resolve(sc)
    n = r.num_gpus
    plan = r.plan
    strong = (
        sc.global_batch is not None
        and plan.tp == 1
        and plan.pp == 1
        and plan.cp == 1
        and plan.hybrid is not Hybrid.ONE_WEIRD_TRICK
        and plan.learners_per_gpu == 1
    )
    if strong:
        per_gpu = r.batch_per_replica * plan.dp
    elif (plan.tp == 1 and plan.pp == 1) or plan.hybrid is Hybrid.ONE_WEIRD_TRICK:
        per_gpu = r.batch_per_replica
    else:
        per_gpu = max(1, r.batch_per_replica * plan.dp // n)
    # software stays; zero=0: one GPU has no peers to shard over (an FSDP preset at shard
    # degree 1 is unsharded without it, build_recipe)
    return replace(
        sc,
        **{k: _SCENARIO_DEFAULTS[k] for k in _RESET_TO_DEFAULT},
        gpus=1,
        sequence_parallel=False,
        zero=0,
        batch_per_gpu=per_gpu,
        fidelity="analytic",
    )


def _baseline_throughput(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None, predict: PredictFn
) -> tuple[float, bool, tuple[str, ...]]:
    """1-GPU baseline throughput (samples/s), whether it fits in GPU memory, and the defaults
    chosen for it (its automatic micro-batch). Kept per baseline scenario in
    :data:`BASELINES` (zoo models; :func:`_baseline_value`)."""
    b_sc = baseline_scenario(sc, r)
    return _baseline_value(
        b_sc,
        workload_fn,
        lambda: _baseline_fields(predict(b_sc, workload_fn=workload_fn, _baseline=True)),
        "1",
    )


def _baseline_fields(rep: StepReport) -> tuple[float, bool, tuple[str, ...]]:
    return rep.throughput_samples_per_s, rep.fits_in_memory, rep.defaults


def _baseline_value(
    b_sc: Scenario,
    workload_fn: WorkloadFn | None,
    make: Callable[[], tuple[float, bool, tuple[str, ...]]],
    kind: str,
) -> tuple[float, bool, tuple[str, ...]]:
    """``make()`` (a speedup baseline's throughput, fit and chosen defaults) of baseline
    scenario ``b_sc``, kept in :data:`BASELINES` by its content hash, the profile's file stamp
    and ``kind`` (``"1"``: the 1-GPU baseline, ``"k"``: a k-GPU candidate): every plan, cluster
    size or sweep row with the same baseline reads it (issue 27; the report cache holds 256
    whole reports, which a sweep's rows push out). Computed every time for a model of the
    caller's (``workload_fn``)."""
    if workload_fn is not None:
        return make()
    stamp = file_stamp(str(b_sc.calibration)) if b_sc.calibration else None
    return BASELINES.get((b_sc.content_hash(), stamp, system_file_stamp(b_sc.system), kind), make)


def _one_gpu_state_exceeds_memory(sc: Scenario, r: Resolved) -> bool:
    """Whether the model state of the 1-GPU baseline (:func:`baseline_scenario`) alone exceeds
    its GPU's memory, so that it fits at no micro-batch: ``recipe.model_state_bytes(P, 1)``
    (weights, gradients, optimizer state of all ``P`` parameters of the zoo model; none of them
    a routed expert) ``> capacity``. The lowering's one stage holds these bytes plus tied
    copies, non-trainable buffers, activations, workspace and communication buffers, none negative
    (:func:`perfmodel.parallel.stage_memory.stage_memory`), so its ``fits`` is then false too;
    decided without lowering the step (issue 14: GPT-3 175B needs 2.8 TB of Adam state; the
    1-GPU prediction was ~10 ms of a fresh ``predict``). ``False`` when it cannot say."""
    b_sc = baseline_scenario(sc, r)
    b_r = resolve(b_sc)
    rc = b_r.recipe
    if rc is None or b_r.plan.pp != 1 or b_r.num_gpus != 1:
        return False
    wl, _ = step_workload(b_sc, b_r, None)
    if wl.is_moe:  # a zoo MoE has routed experts (and its routing layers) or no expert role
        return False
    state = sum(rc.model_state_bytes(wl.params, b_r.plan.grad_replicas))  # a stack read once
    return state > float(b_r.topology.gpu_spec().memory_bytes)


def speedup_baseline(
    sc: Scenario,
    r: Resolved,
    workload_fn: WorkloadFn | None,
    this_run: tuple[int, float, bool],
    predict: PredictFn,
) -> autobatch.Baseline:
    """One GPU, or the smallest GPU count that fits when one GPU does not
    (:func:`perfmodel.pipeline.autobatch.fitting_baseline`)."""
    replica = r.plan.tp * r.plan.pp * r.plan.cp

    def run(k: int) -> tuple[float, bool]:
        k_sc = autobatch.scaled_baseline(
            sc,
            k,
            batch_per_replica=r.batch_per_replica,
            replica_gpus=replica,
            gpus_per_node=r.topology.gpus_per_node,
        )
        thr, fits, _ = _baseline_value(
            k_sc,
            workload_fn,
            lambda: _baseline_fields(predict(k_sc, workload_fn=workload_fn, baseline=False)),
            "k",
        )
        return thr, fits

    if this_run[2] and workload_fn is None and _one_gpu_state_exceeds_memory(sc, r):
        # the 1-GPU throughput is then unused (fitting_baseline): its prediction is skipped
        thr1, fits1, chosen = math.nan, False, ()
    else:
        thr1, fits1, chosen = _baseline_throughput(sc, r, workload_fn, predict)
    counts = autobatch.baseline_gpu_counts(r.num_gpus, replica)
    base = autobatch.fitting_baseline((thr1, fits1), counts, run, this_run=this_run)
    # how the 1-GPU baseline runs, chosen for it (its micro-batch; not its other defaults,
    # which the run's own say)
    chosen = tuple(c for c in chosen if c.startswith("micro-batch"))
    if base.gpus == 1 and fits1 and chosen:
        base = dataclasses.replace(base, note="the 1-GPU baseline runs " + "; ".join(chosen))
    return base


@dataclass(frozen=True)
class Speedup:
    """A run's speedup against its baseline (:func:`speedup`): ``None`` when not computed or
    when the run does not fit; ``default`` is the line the report's defaults state about the
    baseline (which one was chosen and how it runs, or why there is none)."""

    speedup: float | None = None
    scaling_efficiency: float | None = None
    baseline_gpus: int = 1
    default: str | None = None
    basis: str = ""
    """What the speedup is against, in words (:func:`baseline_basis`); empty: no speedup."""


def speedup(
    sc: Scenario,
    r: Resolved,
    workload_fn: WorkloadFn | None,
    this_run: tuple[int, float, bool],
    predict: PredictFn,
) -> Speedup:
    """Speedup and scaling efficiency of a run of ``this_run = (GPUs, samples/s, fits)``:
    ``throughput / baseline throughput`` and ``speedup * baseline GPUs / GPUs`` against
    :func:`speedup_baseline`. A run that does not fit in GPU memory cannot start and has no
    speedup (issue 28, item 3)."""
    gpus, thr, fits = this_run
    if not fits:
        return Speedup(default="no speedup: this run does not fit in GPU memory")
    if gpus == 1:  # a 1-GPU run is its own baseline: exactly 1.00x (audit15 item 4)
        return Speedup(1.0, 1.0, 1, None, SELF_BASIS)
    base = speedup_baseline(sc, r, workload_fn, this_run, predict)
    # a run at the baseline's GPU count is the baseline: exactly 1.00x, not the ratio to
    # another plan's analytic prediction at that count
    value = 1.0 if base.gpus == gpus else thr / base.throughput_samples_per_s
    default = None
    if base.note:
        against = "" if base.gpus == 1 else f"speedup against {base.gpus} GPUs: "
        default = against + base.note
    return Speedup(
        value, value * base.gpus / gpus, base.gpus, default, baseline_basis(sc, r, base.gpus, gpus)
    )


#: :attr:`Speedup.basis` of a run that is its own baseline.
SELF_BASIS = "this run itself (a run at the baseline's GPU count reads 1.00x)"


def baseline_basis(sc: Scenario, r: Resolved, base_gpus: int, gpus: int) -> str:
    """:attr:`Speedup.basis`: which scenario the speedup of a run on ``gpus`` GPUs divides by,
    on ``base_gpus`` GPUs, and why it differs from the run's own recipe where it does: the
    1-GPU baseline (:func:`baseline_scenario`) runs the whole global batch (strong scaling),
    one replica's batch (weak scaling) or the samples one GPU handles (model-parallel plans),
    unsharded (``zero=0``: one GPU has no peers to shard over) and analytic (one GPU has no
    contention for the simulator to find); a k-GPU baseline
    (:func:`perfmodel.pipeline.autobatch.scaled_baseline`) keeps the plan's shape and sharding,
    analytic."""
    if base_gpus == gpus:
        return SELF_BASIS
    if base_gpus > 1:
        return (
            f"{base_gpus} GPUs of {sc.system}, the smallest count that fits: the same software, "
            "plan shape and sharding on that many GPUs, micro-batch chosen again, analytic "
            "executor"
        )
    b_sc = baseline_scenario(sc, r)
    if sc.global_batch is not None and b_sc.batch_per_gpu == r.batch_per_replica * r.plan.dp:
        what = f"the whole global batch, {b_sc.batch_per_gpu} samples (strong scaling)"
    elif b_sc.batch_per_gpu == r.batch_per_replica:
        what = f"one replica's batch, {b_sc.batch_per_gpu} samples (weak scaling)"
    else:
        what = f"the samples one GPU handles, {b_sc.batch_per_gpu}"
    differs = []
    if r.recipe is not None and r.recipe.sharding is not Sharding.NONE:
        differs.append("unsharded (zero=0: one GPU has nothing to shard over)")
    if sc.fidelity != "analytic":
        differs.append("analytic (one GPU has no contention to simulate)")
    return f"1 GPU of {sc.system} running {what}: the same model and software" + (
        f", {' and '.join(differs)}" if differs else ""
    )
