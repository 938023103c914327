"""Where one step's time goes and what bounded each part: ``perfmodel predict --explain``.

A :class:`StepExplanation` splits the iteration time of the critical GPU (the one the
:class:`~perfmodel.report.step_breakdown.Breakdown` reads) into rows that add up to it exactly:

* **kernels** by class (``StepReport.kernel_classes``: GEMMs by dtype, fused attention by
  backend, memory-bound kernels by kind, casts, the loss), each with the ceiling the compute
  model priced it at and where that ceiling comes from;
* **overlap slowdown**: compute-stream time beyond the kernels' own, i.e. the compute slowed
  by communication kernels running beside it (Transformer Engine userbuffers' SMs,
  :class:`~perfmodel.parallel.software.TPOverlap`; NCCL channels of overlapped collectives,
  :data:`~perfmodel.parallel.software.COMM_OVERLAP_COMPUTE_SLOWDOWN`);
* the **optimizer** step;
* **exposed communication** per kind (``dp``, ``tp``, ``pp``, ``zero``, ``ep``, ``cp``...);
* **host** time the GPU waits for;
* **idle** (pipeline bubble, dependencies, the input pipeline);
* the **slowest-GPU wait** of a synchronous step (:mod:`perfmodel.parallel.straggler`).

``kernels + overlap slowdown`` is the breakdown's ``compute`` (the kernel classes are read on
the critical GPU's pipeline stage, with its recomputation), so the rows sum to
``compute + optimizer + exposed comm + host + bubble + slowest-GPU wait``, which is the
iteration time (``tests/report/test_explain.py`` checks both).

The ceilings are facts of the prediction's inputs, not new numbers: the GPU's GEMM ceilings
(``ComputeParams.gemm_ceilings`` and ``gemm_ceiling_basis``), the attention backend's efficiency
(:func:`perfmodel.compute.attention.attention_efficiency`), the memory efficiency, the host's
issue cost per kernel, the NCCL tuner release, the straggler model.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfmodel.compute.attention import AttentionEfficiency
    from perfmodel.compute.params import ComputeParams
    from perfmodel.hardware.gpus import GPUSpec
    from perfmodel.parallel.software import SoftwarePreset
    from perfmodel.report.step_breakdown import Breakdown
    from perfmodel.workload.kernels import Fp8Recipe

#: Relative tolerance of the explanation's own consistency: the kernel classes may exceed the
#: breakdown's compute by float rounding only (summation order), never by a modelled amount.
SUM_REL_TOL = 1e-9


class RowGroup(str, enum.Enum):
    """What kind of time an :class:`ExplainRow` is."""

    KERNELS = "kernels"
    OVERLAP = "overlap"
    OPTIMIZER = "optimizer"
    COMM = "comm"
    HOST = "host"
    IDLE = "idle"
    WAIT = "wait"


@dataclass(frozen=True)
class Ceiling:
    """What bounded a class of time (``text``) and where that bound comes from (``source``)."""

    text: str
    source: str


@dataclass(frozen=True)
class ExplainRow:
    """One row of an explanation: ``seconds`` of the step in ``key`` (a kernel class such as
    ``"gemm:bf16"``, ``"overlap slowdown"``, ``"comm:dp"``, ``"host"``, ``"idle"``...), the
    ceiling it ran at and its source."""

    key: str
    group: RowGroup
    seconds: float
    ceiling: str
    source: str

    def to_dict(self, iteration_time_s: float) -> dict[str, Any]:
        return {
            "key": self.key,
            "group": self.group.value,
            "seconds": self.seconds,
            "share": self.seconds / iteration_time_s if iteration_time_s > 0 else 0.0,
            "ceiling": self.ceiling,
            "source": self.source,
        }


@dataclass(frozen=True)
class StepExplanation:
    """The rows of one step on the critical GPU; they sum to ``iteration_time_s``."""

    rows: tuple[ExplainRow, ...]
    iteration_time_s: float
    device: str = "GPU"

    @property
    def total_s(self) -> float:
        """Sum of the rows (the iteration time, up to float rounding)."""
        return sum(r.seconds for r in self.rows)

    def seconds(self, group: RowGroup) -> float:
        """Seconds of the rows of one group."""
        return sum(r.seconds for r in self.rows if r.group is group)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``predict --json --explain``): the rows with their share of the step."""
        T = self.iteration_time_s
        return {
            "device": self.device,
            "iteration_time_s": T,
            "total_s": self.total_s,
            "rows": [r.to_dict(T) for r in self.rows],
        }

    def format_lines(self) -> list[str]:
        """Text of ``predict --explain``: one line per row (seconds, share, ceiling, a source
        number) in the order compute, overlap, optimizer, communication, host, idle, wait, the
        kernel classes largest first; then the numbered sources."""
        return format_rows(
            self.rows,
            self.iteration_time_s,
            f"where the step goes (critical {self.device}; the rows add up to the iteration time):",
        )


def format_rows(rows: Iterable[ExplainRow], total_s: float, title: str) -> list[str]:
    """Rows as text with numbered sources (each distinct source printed once, at the end);
    shares are of ``total_s``."""
    from perfmodel.units import format_time

    T = total_s if total_s > 0 else 1.0
    sources: dict[str, int] = {}
    lines = [title]
    for r in rows:
        if r.seconds <= 0:
            continue
        n = sources.setdefault(r.source, len(sources) + 1)
        lines.append(
            f"  {r.key:<18}{format_time(r.seconds):>12}  {100 * r.seconds / T:5.1f}%  "
            f"{r.ceiling} [{n}]"
        )
    lines.append(f"  {'total':<18}{format_time(sum(r.seconds for r in rows)):>12}")
    lines.append("sources:")
    lines += [f"  [{n}] {src}" for src, n in sources.items()]
    return lines


# --------------------------------------------------------------------------- kernel ceilings

_MEMORY_CLASSES = frozenset(
    {
        "norm",
        "rope",
        "activation",
        "residual",
        "dropout",
        "softmax",
        "elementwise",
        "cast",
        "fp8_cast",
        "copy",
        "embedding",
        "pool",
        "loss",
        "fsdp_copy",
        "other",
    }
)

_TC_DEFAULT_SOURCE = (
    "ComputeParams.tensor_core_efficiency 0.76: median of 11 published best-shape matmul "
    "ceilings (stas00/ml-engineering MAMF, mli/transformers-benchmarks); this GPU's catalogue "
    "entry states no achieved rate"
)
_MEM_DEFAULT_SOURCE = (
    "ComputeParams.memory_efficiency default 0.80 (estimate: low end of the 80-92% STREAM-like "
    "benchmarks report on HBM GPUs); this GPU's catalogue entry states no achieved bandwidth"
)


#: Labels of the parts of a catalogue entry's ``sources["achieved"]`` (``perfmodel/hardware/
#: gpus.toml``), each ``"label: text"``, joined by ``"; "``.
_ACHIEVED_LABELS = ("sustained", "burst", "idle_W", "memory_bandwidth_achieved_GBps")


def achieved_part(gpu: GPUSpec | None, label: str) -> str:
    """The ``label`` part of ``gpu``'s ``sources["achieved"]`` (the whole text when it has no
    such part; empty without one).

    >>> from perfmodel.hardware import get_gpu
    >>> achieved_part(get_gpu("H100-SXM5-80GB"), "burst")[:35]
    'burst: MEASURED on H100 SXM, same r'
    """
    import re

    text = "" if gpu is None else str(gpu.sources.get("achieved", ""))
    labels = "|".join(_ACHIEVED_LABELS)
    parts = re.split(rf"; (?=(?:{labels}):)", text)
    for p in parts:
        if p.startswith(f"{label}:"):
            return p
    return text


def _tflops(x: float) -> str:
    return f"{x / 1e12:,.0f} TFLOP/s"


def _gemm_ceiling(
    dtype_name: str, params: ComputeParams, gpu: GPUSpec | None, fp8_passes: str | None
) -> Ceiling:
    """The ceiling of ``gemm:<dtype>``: the GPU's best-shape fraction of the dtype's peak
    (each GEMM then loses its tile and wave quantisation), for FP8 the split-accumulation
    passes' factor."""
    from perfmodel.dtypes import DType

    dtype = DType.parse(dtype_name)
    from perfmodel.errors import ConfigError

    try:
        peak = params.peak(dtype)
    except ConfigError:  # a format the GPU lacks (predict refuses it before this)
        return Ceiling(f"no {dtype.value} peak on {params.gpu}", "hardware catalogue")
    tc = params.uses_tensor_cores(dtype)
    frac = params.gemm_ceiling(dtype) if tc else params.cuda_core_efficiency
    text = f"{frac:.3f} x {_tflops(peak)} {dtype.value} peak = {_tflops(frac * peak)}"
    if dtype is DType.FP8 and params.fp8_split_accumulation != 1.0 and fp8_passes:
        text += (
            f"; {fp8_passes} passes at x{params.fp8_split_accumulation:.3f} (split accumulation)"
        )
    text += ", less each shape's tile/wave quantisation"
    basis = params.gemm_ceiling_basis.get(dtype)
    if not tc:
        source = (
            "ComputeParams.cuda_core_efficiency 0.90 (mli V100 fp32 ceiling; large cuBLAS "
            "SGEMMs reach ~90% on Pascal/Volta)"
        )
    elif basis is not None:
        part = achieved_part(gpu, "burst" if basis.startswith("burst") else "sustained")
        source = f"{params.gpu} {dtype.value} ceiling ({basis}), hardware/gpus.toml" + (
            f" {part}" if part else ""
        )
    elif dtype in params.gemm_ceilings:
        source = f"calibration profile ({params.source})"
    else:
        source = _TC_DEFAULT_SOURCE
    return Ceiling(text, source)


def _memory_ceiling(params: ComputeParams, gpu: GPUSpec | None, what: str) -> Ceiling:
    """The ceiling of memory-bound kernels: the achieved fraction of the datasheet bandwidth,
    plus the launch cost of each kernel."""
    bw = params.memory_bandwidth_Bps
    eff = params.memory_efficiency
    text = (
        f"{eff:.3f} x {bw / 1e12:.2f} TB/s = {eff * bw / 1e12:.2f} TB/s "
        f"+ {params.kernel_launch_s * 1e6:.0f} us per kernel ({what})"
    )
    measured = gpu is not None and gpu.achieved_memory_bandwidth_Bps is not None
    if measured and abs(gpu.achieved_memory_bandwidth_Bps / bw - eff) < 1e-6:  # type: ignore[union-attr]
        part = achieved_part(gpu, "memory_bandwidth_achieved_GBps")
        source = f"{params.gpu} achieved memory bandwidth, hardware/gpus.toml {part}"
    elif eff != 0.80:
        source = f"calibration profile ({params.source})"
    else:
        source = _MEM_DEFAULT_SOURCE
    return Ceiling(text, source)


def kernel_ceilings(
    classes: Iterable[str],
    params: ComputeParams,
    gpu: GPUSpec | None = None,
    *,
    attention: AttentionEfficiency | None = None,
    fusion: str = "eager",
    fp8: Fp8Recipe | None = None,
    optimizer: str = "fused optimizer step",
) -> dict[str, Ceiling]:
    """The :class:`Ceiling` of each kernel class key (``"gemm:fp8"``, ``"attention"``,
    ``"norm"``, ``"optimizer"``...) of a step on ``params``' GPU.

    ``attention``: the efficiency of the step's fused attention (its first attention layer's
    shape; :meth:`perfmodel.compute.ComputeModel.attention`); ``fusion``: the kernel
    decomposition of the memory-bound classes (:class:`~perfmodel.workload.kernels.Fusion`
    value); ``fp8``: the FP8 recipe (its split-accumulation passes); ``optimizer``: how the
    optimizer step runs (:meth:`perfmodel.parallel.recipe.Recipe.optimizer_text`).

    >>> from perfmodel.compute import ComputeParams
    >>> from perfmodel.hardware import get_gpu
    >>> p = ComputeParams.for_gpu(get_gpu("A100-SXM4-80GB"))
    >>> kernel_ceilings(["gemm:bf16"], p)["gemm:bf16"].text.split(",")[0]
    '0.787 x 312 TFLOP/s bf16 peak = 246 TFLOP/s'
    """
    fp8_passes = None
    if fp8 is not None:
        names = ("forward", "input-gradient", "weight-gradient")
        split = [n for n, on in zip(names, fp8.split_accumulation, strict=True) if on]
        fp8_passes = f"{fp8.value}: " + (" and ".join(split) if split else "no")
    out: dict[str, Ceiling] = {}
    for key in classes:
        if key.startswith("gemm:"):
            out[key] = _gemm_ceiling(key.split(":", 1)[1], params, gpu, fp8_passes)
        elif key == "attention":
            if attention is None:
                out[key] = Ceiling(
                    f"fused attention at {params.fused_attention_efficiency:.2f} forward, "
                    f"{params.fused_attention_bwd_efficiency:.2f} backward of the peak",
                    "ComputeParams.fused_attention_efficiency / _bwd_efficiency",
                )
            else:
                out[key] = Ceiling(
                    f"{attention.backend.value}: {attention.fwd:.3f} forward, "
                    f"{attention.bwd:.3f} backward of the dense peak",
                    f"perfmodel.compute.attention: {attention.source}",
                )
        elif key == "optimizer":
            what = f"{optimizer}: bytes per parameter of "
            what += "perfmodel.workload.kernels.optimizer_bytes_per_param"
            out[key] = _memory_ceiling(params, gpu, what)
        else:
            what = (
                f"{fusion} kernels of perfmodel.workload.kernels"
                if key in _MEMORY_CLASSES
                else "memory-bound"
            )
            out[key] = _memory_ceiling(params, gpu, what)
    return out


# --------------------------------------------------------------------------- the step


@dataclass(frozen=True)
class StepContext:
    """What the non-kernel rows cite: the software preset, the plan's pipeline, GPUs, the
    NCCL tuner release, the host's issue cost per kernel."""

    preset: SoftwarePreset
    num_gpus: int
    pp: int = 1
    interleave: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    nccl_release: str = ""
    nccl_source: str = ""
    nccl_priced_by: str = ""
    """The release whose table prices what ``nccl_release``'s chooses, where another
    (:func:`perfmodel.comm.tuner.pricing_tuner`); empty: its own."""
    host_dispatch_s: float = 0.0
    sm_count: int = 0


def _overlap_ceiling(ctx: StepContext) -> Ceiling:
    from perfmodel.parallel.software import COMM_OVERLAP_COMPUTE_SLOWDOWN

    p = ctx.preset
    parts = []
    srcs = []
    if p.tp_overlap is not None and ctx.sm_count:
        o = p.tp_overlap
        margin = (
            f"reduce-scattered GEMMs on {ctx.sm_count} - {o.fwd_margin_sms:g} SMs throughout; "
            if o.fwd_margin_sms
            else ""
        )
        parts.append(
            f"TP userbuffers: {margin}{o.fwd_comm_sms:.1f} SMs forward, "
            f"{o.bwd_comm_sms:.1f} backward of {ctx.sm_count} while the other collectives run"
        )
        srcs.append(o.source)
    parts.append(
        f"overlapped collectives slow compute {100 * p.overlap_compute_slowdown:.0f}% "
        "while they run"
    )
    srcs.append(
        "NCCL runs collectives as kernels on one SM per channel (NCCL_MIN/MAX_NCHANNELS); "
        "Rashidi et al. ISCA 2021"
        + (
            ""
            if p.overlap_compute_slowdown == COMM_OVERLAP_COMPUTE_SLOWDOWN
            else f" ({p.name} preset)"
        )
    )
    return Ceiling("; ".join(parts), "; ".join(srcs))


def _comm_ceiling(kind: str, ctx: StepContext) -> Ceiling:
    what = {
        "dp": "gradient reduction",
        "tp": "tensor-parallel collectives (and the overlap's exposed tails)",
        "pp": "pipeline sends",
        "zero": "parameter gathers",
        "ps": "parameter-server push/pull",
        "host": "host-device copies",
        "ep": "expert-parallel all-to-alls",
        "cp": "context-parallel exchange",
    }.get(kind, kind)
    text = f"exposed {what}: collective model on the topology's links"
    if ctx.nccl_release and ctx.nccl_priced_by and ctx.nccl_priced_by != ctx.nccl_release:
        text += (
            f", chosen by NCCL {ctx.nccl_release}'s table, priced by {ctx.nccl_priced_by}'s "
            "(an assumption: perfmodel.comm.tuner.pricing_tuner)"
        )
    elif ctx.nccl_release:
        text += f", NCCL {ctx.nccl_release} tuner"
    src = "perfmodel.comm (alpha-beta closed forms / flow simulation)"
    if ctx.nccl_source:
        src += f"; {ctx.nccl_source}"
    return Ceiling(text, src)


def _host_ceiling(ctx: StepContext) -> Ceiling:
    mode = ctx.preset.dispatch_mode
    if ctx.host_dispatch_s > 0:
        text = f"{ctx.host_dispatch_s * 1e6:.2f} us of host time per kernel issued ({mode})"
        source = (
            "perfmodel.compute.params.HOST_DISPATCH_S: median over 10 host-bound H100 training "
            "steps (calibration/h100-sxm5-80gb/hostbound), or the calibration profile's own"
        )
    else:
        text = "framework host work the GPU waits for"
        source = f"{ctx.preset.name} preset (perfmodel.parallel.software)"
    return Ceiling(text, source)


def _idle_ceiling(ctx: StepContext) -> Ceiling:
    if ctx.pp > 1:
        v = f", {ctx.interleave} chunks per stage" if ctx.interleave > 1 else ""
        text = (
            f"pipeline fill and drain: {ctx.schedule} over {ctx.pp} stages{v}, "
            f"{ctx.microbatches} micro-batches"
        )
        source = (
            "the simulated schedule (perfmodel.parallel.lower_pipeline; Narayanan et al. SC21 "
            "for the interleaved schedule)"
        )
    else:
        text = "the GPU waits on a dependency (a gather, the input pipeline)"
        source = "the simulated timeline (perfmodel.sim)"
    return Ceiling(text, source)


def _wait_ceiling(ctx: StepContext) -> Ceiling:
    from perfmodel.parallel.straggler import PER_GPU_SPEED_CV, expected_max_std_normal

    n = ctx.num_gpus
    return Ceiling(
        f"per-GPU speed s.d. {100 * PER_GPU_SPEED_CV:.2f}% x E[max of {n}] "
        f"{expected_max_std_normal(n):.2f} of the compute",
        "perfmodel.parallel.straggler: Sinha et al. SC22 (arXiv:2208.11035) 8% variation "
        "between a cluster's GPUs; Blom 1958 for the expected maximum",
    )


def explain_step(
    breakdown: Breakdown,
    kernel_classes: Mapping[str, float],
    iteration_time_s: float,
    ceilings: Mapping[str, Ceiling],
    ctx: StepContext,
    *,
    device: str = "GPU",
) -> StepExplanation:
    """The rows of one step (module docstring).

    ``kernel_classes``: ``StepReport.kernel_classes`` (seconds by class on the critical GPU's
    stage; its ``"optimizer"`` is the breakdown's and is taken from there). ``ceilings``:
    :func:`kernel_ceilings` of those classes.

    Raises
    ------
    ValueError
        The kernel classes exceed the breakdown's compute by more than rounding: they would not
        be the same GPU's (a modelling inconsistency, not a user error).
    """
    b = breakdown
    kernels = {k: v for k, v in kernel_classes.items() if k != "optimizer" and v > 0}
    kernel_s = sum(kernels.values())
    overlap = b.compute_s - kernel_s
    if overlap < -SUM_REL_TOL * max(iteration_time_s, b.compute_s, 1e-30):
        raise ValueError(
            f"kernel classes sum to {kernel_s!r} s, above the critical GPU's compute "
            f"{b.compute_s!r} s: not the same GPU's"
        )
    overlap = max(overlap, 0.0)
    rows: list[ExplainRow] = []
    for key, s in sorted(kernels.items(), key=lambda kv: -kv[1]):
        c = ceilings.get(key) or Ceiling("memory-bound", "perfmodel.compute")
        rows.append(ExplainRow(key, RowGroup.KERNELS, s, c.text, c.source))
    if overlap > 0:
        c = _overlap_ceiling(ctx)
        rows.append(ExplainRow("overlap slowdown", RowGroup.OVERLAP, overlap, c.text, c.source))
    if b.optimizer_s > 0:
        c = ceilings.get("optimizer") or Ceiling("memory-bound", "perfmodel.compute")
        rows.append(ExplainRow("optimizer", RowGroup.OPTIMIZER, b.optimizer_s, c.text, c.source))
    for kind, s in sorted(b.exposed_comm_s.items()):
        if s > 0:
            c = _comm_ceiling(kind, ctx)
            rows.append(ExplainRow(f"comm:{kind}", RowGroup.COMM, s, c.text, c.source))
    if b.host_s > 0:
        c = _host_ceiling(ctx)
        rows.append(ExplainRow("host", RowGroup.HOST, b.host_s, c.text, c.source))
    if b.bubble_s > 0:
        c = _idle_ceiling(ctx)
        rows.append(ExplainRow("idle", RowGroup.IDLE, b.bubble_s, c.text, c.source))
    if b.sync_wait_s > 0:
        c = _wait_ceiling(ctx)
        rows.append(ExplainRow("slowest-GPU wait", RowGroup.WAIT, b.sync_wait_s, c.text, c.source))
    return StepExplanation(tuple(rows), iteration_time_s, device)


__all__ = [
    "Ceiling",
    "ExplainRow",
    "RowGroup",
    "StepContext",
    "StepExplanation",
    "achieved_part",
    "explain_step",
    "format_rows",
    "kernel_ceilings",
]
