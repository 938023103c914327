"""Report: a step's time, memory and kernels become a :class:`~perfmodel.report.step.StepReport`
with its notes (hardware, host memory, TF32, MFU above 100%), its kernel classes and its
explanation (``predict --explain``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import Any

from perfmodel.dtypes import DType
from perfmodel.errors import PerfModelError
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.lowering import LoweredStep
from perfmodel.parallel.plan import Recompute
from perfmodel.parallel.recipe import Recipe
from perfmodel.pipeline.baseline import Speedup
from perfmodel.pipeline.evaluate import Evaluated
from perfmodel.pipeline.inputs import WorkloadFn
from perfmodel.pipeline.lower import step_workload
from perfmodel.pipeline.resolve import Resolved, mxfp8_note
from perfmodel.report.step import Deferred, StepReport
from perfmodel.scenario import Scenario
from perfmodel.topology import Topology
from perfmodel.workload.layers import distinct_layers

#: :func:`build_report` leaves the report's kernel classes and explanation to their first read
#: (:class:`~perfmodel.report.step.Deferred`; ~1 M instructions of every new plan, which no
#: caller of ``predict`` reads but a report's comparison, ``to_dict`` and ``--explain``;
#: issue 27): the same calls of :func:`_kernel_classes` and :func:`_explanation` on the same
#: values then, so the same floats bit for bit. They read the step, the breakdown, the
#: resolved scenario, the recomputed shares (:func:`_recompute_share`, read when the report is
#: made: they come from the caller's scenario, whose ``model_args`` dict the caller may change)
#: and the costs' memoised layer details, compute model and tuner, none changed once the
#: report is made; the explanation reads the classes' own dict, the report a copy of it.
#: ``False``: worked out at once, the direct path ``tests/report/test_deferred_explanation.py``
#: compares with.
DEFER_ON_READ = True


def hardware_notes(topology: Topology) -> tuple[str, ...]:
    """What a report says about the hardware itself: a GPU whose figures are datasheet only
    (:func:`perfmodel.hardware.gpus.datasheet_note`), the cloud instance a system names
    (its transport and dated list price, :class:`perfmodel.topology.model.CloudSpec`), and the
    assumptions an imported machine's system file states (``[system] assumptions``)."""
    from perfmodel.hardware.gpus import datasheet_note

    out = []
    note = datasheet_note(topology.gpu_spec())
    if note is not None:
        out.append(note)
    if topology.cloud is not None:
        out.append(topology.cloud.describe())
    stated = topology.meta.get("assumptions")
    if stated:  # an imported machine (topo import -o): what the import could not know
        n = len(stated)
        out.append(
            f"hardware: {topology.source} is an imported machine (perfmodel topo import); it "
            f"rests on {n} stated assumption{'s' if n != 1 else ''}, e.g. {stated[0]!r} "
            f"(perfmodel topo show {topology.source} lists them)"
        )
    return tuple(out)


@lru_cache(maxsize=64)
def _host_memory_notes(topo: Topology, num_gpus: int) -> tuple[str, ...]:
    """:func:`perfmodel.report.notes.host_memory_notes` of the run's GPUs (the topology's
    first ``num_gpus``), cached per topology (hashed by identity) and count: notes are data on
    the report, so every view prints them (issue 28, item 4)."""
    from perfmodel.report.notes import host_memory_notes

    return host_memory_notes(topo, topo.gpus[:num_gpus])


#: Printed with an FP32 CNN prediction under a PyTorch preset on a GPU with TF32 (issue 28).
TF32_CONV_NOTE = (
    "note: fp32 as PyTorch runs it: convolutions on TF32 tensor cores "
    "(torch.backends.cudnn.allow_tf32 defaults to True), matmuls in FP32 "
    "(torch.backends.cuda.matmul.allow_tf32 defaults to False); MFU against the TF32 peak"
)


def _tf32_convolutions(sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None) -> bool:
    """Whether an FP32 run of a zoo CNN does its convolutions in TF32: the recipe says so
    (:attr:`~perfmodel.parallel.recipe.Recipe.fp32_conv_tf32`, the PyTorch presets) and the
    GPU has TF32 tensor cores (Ampere and newer)."""
    if workload_fn is not None or r.recipe is None or not r.recipe.fp32_conv_tf32:
        return False
    if DType.TF32 not in r.topology.gpu_spec().peak_flops:
        return False
    from perfmodel.workload.zoo import get_model_info

    try:
        return get_model_info(sc.model).family == "cnn"
    except PerfModelError:
        return False


def _recompute_share(
    step: LoweredStep, r: Resolved, sc: Scenario, workload_fn: WorkloadFn | None
) -> Callable[[Any], float] | None:
    """The share of each layer's forward that the step recomputes, as the lowering charged it
    (full: every block's forward again; selective: the recipe's per-layer shares, which
    torchtitan's op-level checkpoint reads off each block's matrix products,
    ``SelectiveRecompute.share_for``, not the layer-alone mean), or ``None`` (none, or no
    stage layers). Read when the report is made, also where the kernel classes are left to
    their first read: the workload comes from the caller's scenario."""
    if not step.stage_layers:
        return None
    if r.plan.recompute is Recompute.FULL:
        return lambda la: 1.0 if la.block is not None else 0.0
    rc = r.recipe
    if r.plan.recompute is Recompute.SELECTIVE and rc is not None:
        return rc.selective_recompute.share_for(step_workload(sc, r, workload_fn)[0])
    return None


def _kernel_classes(
    step: LoweredStep,
    r: Resolved,
    costs: SystemCosts,
    optimizer_s: float,
    share: Callable[[Any], float] | None,
    device: str,
) -> tuple[dict[str, float], int]:
    """Kernel seconds of one step by class on the pipeline stage of ``device`` (the critical
    GPU the breakdown reads; where the lowering does not say which stage a GPU runs, the stage
    with the most kernel time) and that stage's index
    (:func:`perfmodel.compute.model.kernel_class_seconds`), with its recomputation
    (``share``: :func:`_recompute_share`) and the breakdown's ``optimizer`` seconds; empty
    (stage -1) when the lowering recorded no stage layers."""
    from perfmodel.compute.model import kernel_class_seconds

    if not step.stage_layers:
        return {}, -1

    def of(chunks: Sequence[Any]) -> dict[str, float]:
        return kernel_class_seconds(
            chunks,
            costs.layer_detail,
            r.precision,
            microbatches=step.microbatches,
            recompute_share=share,
        )

    if device in step.stage_devices:
        stage = step.stage_devices.index(device)
        best = of(step.stage_layers[stage])
    else:
        stage, best = -1, {}
        for i, chunks in enumerate(step.stage_layers):
            got = of(chunks)
            if stage < 0 or sum(got.values()) > sum(best.values()):
                stage, best = i, got
    if optimizer_s > 0:
        best["optimizer"] = best.get("optimizer", 0.0) + optimizer_s
    return best, stage


def _optimizer_text(rc: Recipe | None) -> str:
    """How the recipe's optimizer step runs, for the explanation's optimizer row."""
    if rc is None:
        return "fused optimizer step"
    from perfmodel.workload.kernels import GradClip

    clip = "" if rc.grad_clip is GradClip.NONE else f" after {rc.grad_clip.value} clipping"
    return f"{rc.optimizer_impl.value} {rc.optimizer.value} step{clip}"


def _explanation(
    bd: Any,
    classes: dict[str, float],
    T: float,
    r: Resolved,
    costs: SystemCosts,
    step: LoweredStep,
    stage: int,
    device: str,
) -> Any:
    """The step's :class:`~perfmodel.report.explain.StepExplanation` (``predict --explain``),
    ``None`` without kernel classes. The attention ceiling is the one of the stage's first
    fused attention layer (the blocks of a stack share its shape)."""
    from perfmodel.report.explain import StepContext, explain_step, kernel_ceilings
    from perfmodel.workload.layers import LayerKind, layer_runs

    if not classes:
        return None
    attention = None
    if "attention" in classes and stage >= 0:
        for chunk in step.stage_layers[stage]:
            la = next(
                (
                    la
                    for block, _ in layer_runs(chunk)
                    for la in block
                    if la.kind is LayerKind.ATTENTION and la.gemm is not None
                ),
                None,
            )
            if la is not None:
                attention = costs.compute.attention(la)
                break
    params = costs.compute.params
    rc = r.recipe
    ceilings = kernel_ceilings(
        classes,
        params,
        costs.gpu_spec,
        attention=attention,
        fusion="eager" if rc is None else rc.fusion.value,
        fp8=None if rc is None else rc.fp8,
        optimizer=_optimizer_text(rc),
    )
    plan = r.plan
    from perfmodel.comm.tuner import pricing_tuner

    tuner = costs.comm.tuner
    priced = pricing_tuner(tuner)
    ctx = StepContext(
        preset=r.preset,
        num_gpus=step.num_gpus,
        pp=plan.pp,
        interleave=plan.interleave,
        microbatches=step.microbatches,
        schedule=plan.schedule.value,
        nccl_release=str(tuner.release),
        nccl_source=str(tuner.source) + ("" if priced is tuner else f"; priced by {priced.source}"),
        nccl_priced_by="" if priced is tuner else str(priced.release),
        host_dispatch_s=params.host_dispatch_s,
        sm_count=params.sm_count,
    )
    return explain_step(bd, classes, T, ceilings, ctx, device=device)


def step_notes(
    sc: Scenario, r: Resolved, step: LoweredStep, ev: Evaluated, workload_fn: WorkloadFn | None
) -> tuple[tuple[str, ...], float]:
    """The report's notes, in the order they print, and the peak FLOP/s its MFU is against.

    The lowering's notes, :func:`hardware_notes`, the host-memory notes of the run's GPUs, the
    input pipeline's line, :data:`TF32_CONV_NOTE` when an FP32 CNN's convolutions run in TF32
    (the peak is then the TF32 one), and why MFU exceeds 100% when it does (issue 28)."""
    notes = step.graph.notes
    notes = (*notes, *hardware_notes(r.topology), *_host_memory_notes(r.topology, r.num_gpus))
    if (mx := mxfp8_note(r.recipe, r.topology.gpu_spec())) is not None:
        notes = (*notes, mx)  # AMD: ROCm TransformerEngine's switch for the recipe
    if ev.feed is not None:
        notes = (*notes, ev.feed.describe(ev.sync_time_s))
    peak_dtype = r.precision.matmul_dtype
    if _tf32_convolutions(sc, r, workload_fn):
        peak_dtype = DType.TF32  # the convolutions' math, which the step's FLOP are
        notes = (*notes, TF32_CONV_NOTE)
    peak = float(r.topology.gpu_spec().peak(peak_dtype))
    if peak > 0 and ev.model_flops_per_gpu_per_s > peak:  # say why, instead of a bare 156%
        notes = (
            *notes,
            "note: MFU above 100%: it counts the model's FLOP as direct convolutions; the "
            "device runs them as fewer operations (Winograd/FFT, ComputeParams."
            f"winograd_speedup), so they beat its {peak_dtype.value} GEMM peak of "
            f"{peak / 1e12:.3g} TFLOP/s",
        )
    return notes, peak


def selective_recompute_default(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None
) -> str | None:
    """The line saying ``recompute=selective`` re-runs nothing for this model (a silent no-op
    before, issue 28, item 6), or ``None``."""
    if r.plan.recompute is not Recompute.SELECTIVE or r.recipe is None:
        return None
    wl, _ = step_workload(sc, r, workload_fn)
    rule = r.recipe.selective_recompute
    if any(rule.share(la) > 0 for la in distinct_layers(wl.layers)):
        return None
    return (
        f"recompute=selective re-runs nothing for {sc.model}: {r.preset.name}'s selective "
        f"recomputation ({rule.value}) re-runs no layer of it (fused or no attention); "
        "--recompute full re-runs whole blocks"
    )


def _classes_and_explanation(
    sc: Scenario,
    r: Resolved,
    step: LoweredStep,
    costs: SystemCosts,
    ev: Evaluated,
    workload_fn: WorkloadFn | None,
    device: str,
) -> tuple[Any, Any]:
    """The report's kernel classes (:func:`_kernel_classes`) and explanation
    (:func:`_explanation`), each a :class:`~perfmodel.report.step.Deferred` worked out when
    first read where :data:`DEFER_ON_READ` allows; the classes then once for both, the
    report's a copy of them. What they read of the caller's scenario and ``workload_fn``
    (:func:`_recompute_share`) is read now: no caller's value is read or called later."""
    bd, T = ev.breakdown, ev.iteration_time_s
    share = _recompute_share(step, r, sc, workload_fn)
    if DEFER_ON_READ:
        kc = cache(lambda: _kernel_classes(step, r, costs, bd.optimizer_s, share, ev.device))
        return Deferred(lambda: dict(kc()[0])), Deferred(
            lambda: _explanation(bd, kc()[0], T, r, costs, step, kc()[1], device)
        )
    classes, stage = _kernel_classes(step, r, costs, bd.optimizer_s, share, ev.device)
    return classes, _explanation(bd, classes, T, r, costs, step, stage, device)


def build_report(
    sc: Scenario,
    r: Resolved,
    step: LoweredStep,
    costs: SystemCosts,
    ev: Evaluated,
    *,
    notes: tuple[str, ...],
    peak_flops: float,
    speed: Speedup,
    defaults: Sequence[str],
    workload_fn: WorkloadFn | None,
) -> StepReport:
    """The :class:`~perfmodel.report.step.StepReport` of an evaluated step: its worst stage's
    memory, MFU against ``peak_flops``, the epoch time (``dataset_size``), the speedup, the
    kernel classes of the critical device's stage and the explanation, the plan with its
    software, memory format and recipe, and the scenario as given."""
    T = ev.iteration_time_s
    samples = step.samples_per_step
    per_gpu_flops = ev.model_flops_per_gpu_per_s
    epoch = None
    if r.parsed.dataset_size is not None:
        epoch = math.ceil(r.parsed.dataset_size / samples) * T
    bd = ev.breakdown
    device = "CPU" if r.topology.gpu_spec().architecture == "CPU" else "GPU"
    classes, explanation = _classes_and_explanation(sc, r, step, costs, ev, workload_fn, device)
    plan_d = r.plan.to_dict()
    plan_d["describe"] = r.plan.describe()
    plan_d["software"] = r.preset.name
    plan_d["memory_format"] = r.memory_format
    if r.recipe is not None:
        plan_d["recipe"] = r.recipe.to_dict()
    return StepReport(
        iteration_time_s=T,
        throughput_samples_per_s=ev.throughput_samples_per_s,
        samples_per_step=samples,
        num_gpus=step.num_gpus,
        breakdown=bd,
        memory=max(step.memory, key=lambda m: m.total_bytes),
        memory_per_stage=step.memory,
        model_flops_per_gpu_per_s=per_gpu_flops,
        mfu=per_gpu_flops / peak_flops if peak_flops > 0 else 0.0,
        mfu_peak_flops=peak_flops,
        mfu_peak_dtype=(DType.TF32 if TF32_CONV_NOTE in notes else r.precision.matmul_dtype).value,
        epoch_time_s=epoch,
        speedup=speed.speedup,
        scaling_efficiency=speed.scaling_efficiency,
        fidelity=ev.fidelity,
        plan=plan_d,
        scenario=sc.to_dict(),
        staleness=dict(step.staleness),
        notes=notes,
        timeline=ev.timeline,
        baseline_gpus=speed.baseline_gpus,
        speedup_basis=speed.basis,
        defaults=tuple(defaults),
        tokens_per_sample=step.tokens_per_sample,
        device=device,
        kernel_classes=classes,
        explanation=explanation,
    )
