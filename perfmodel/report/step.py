"""StepReport: what one prediction says (its time, throughput, memory, speedup, notes and the
breakdown of :mod:`perfmodel.report.step_breakdown`), and a token budget's steps, hours and cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from perfmodel.intervals import DEFAULT_LEVEL
from perfmodel.parallel.memory import PlanMemory
from perfmodel.report.step_breakdown import Breakdown
from perfmodel.sim.engine import Timeline
from perfmodel.units import hour

if TYPE_CHECKING:
    from perfmodel.intervals.answers import StepInterval
    from perfmodel.report.explain import StepExplanation
    from perfmodel.search.cost import Pricing


def _flops_text(flops_per_s: float) -> str:
    """``"403.0 TFLOP/s"``, or GFLOP/s below 0.1 TFLOP/s (a CPU)."""
    if flops_per_s >= 1e11:
        return f"{flops_per_s / 1e12:.1f} TFLOP/s"
    return f"{flops_per_s / 1e9:.2f} GFLOP/s"


class RunSpan(Protocol):
    """What a run time's or cost's range needs of an interval
    (:class:`perfmodel.intervals.answers.StepInterval`): its level in words (``"80%"``) and the
    range of a value proportional to the step time."""

    @property
    def level_text(self) -> str: ...

    def run_range(self, value: float) -> tuple[float, float]: ...


@dataclass(frozen=True)
class TokenBudget:
    """Training on a token budget: whole steps, wall-clock seconds, GPU-hours and (with a price) cost.

    ``cost`` is in the currency of the price given (``None`` without a price).
    """

    tokens: float
    steps: int
    time_s: float
    cost: float | None
    gpu_hours: float
    price_source: str = "the price per GPU-hour given"
    """Where the price came from: the flag, or a cloud system's dated list price."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "time_to_train_s": self.time_s,
            "gpu_hours": self.gpu_hours,
            "cost": self.cost,
            "price_source": self.price_source if self.cost is not None else None,
        }

    def format_lines(self, span: RunSpan | None = None) -> list[str]:
        """The ``--tokens`` lines; with ``span`` (the step time's interval) each time and cost
        is followed by its range (:meth:`perfmodel.intervals.answers.StepInterval.run_range`)."""
        from perfmodel.units import format_duration

        lines = [
            f"time to train   {self.time_s:,.0f} s ({format_duration(self.time_s)}) for "
            f"{self.tokens:.4g} tokens ({self.steps:,} steps, {self.gpu_hours:,.0f} GPU-hours)"
        ]
        if span is not None:
            (t_lo, t_hi), (h_lo, h_hi) = span.run_range(self.time_s), span.run_range(self.gpu_hours)
            lines.append(
                f"  {span.level_text + ' range':<14}{format_duration(t_lo)} - "
                f"{format_duration(t_hi)} ({h_lo:,.0f} - {h_hi:,.0f} GPU-hours)"
            )
        if self.cost is not None:
            lines.append(f"cost            {self.cost:,.2f} (at {self.price_source})")
            if span is not None:
                lo, hi = span.run_range(self.cost)
                lines.append(f"  {span.level_text + ' range':<14}{lo:,.2f} - {hi:,.2f}")
        return lines


@dataclass(frozen=True)
class StepReport:
    """The answer to "how fast, and why" for one scenario.

    Times in seconds, memory in bytes, rates per second. ``speedup`` and
    ``scaling_efficiency`` compare throughput with one GPU of the same system running the same
    model (:func:`perfmodel.api.baseline_scenario`: the whole global batch when the scenario
    fixes ``global_batch`` under data parallelism, one replica's batch when it fixes
    ``batch_per_gpu``; ``None`` when not computed).
    """

    iteration_time_s: float
    throughput_samples_per_s: float
    samples_per_step: int
    num_gpus: int
    breakdown: Breakdown
    memory: PlanMemory
    memory_per_stage: tuple[PlanMemory, ...]
    model_flops_per_gpu_per_s: float
    mfu: float
    epoch_time_s: float | None = None
    speedup: float | None = None
    scaling_efficiency: float | None = None
    fidelity: str = "analytic"
    plan: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    staleness: dict[int, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    baseline_gpus: int = 1
    """GPUs of the speedup baseline: 1, or the smallest count that fits in memory when one GPU
    does not (:func:`perfmodel.pipeline.autobatch.fitting_baseline`)."""
    speedup_basis: str = ""
    """What :attr:`speedup` divides by, in words (which scenario, on how many GPUs, and how it
    differs from this run's recipe; :func:`perfmodel.pipeline.baseline.baseline_basis`);
    empty where there is no speedup."""
    defaults: tuple[str, ...] = ()
    """Choices made for the user, each with its reason (automatic micro-batch, speedup
    baseline); printed by :meth:`format_table`."""
    tokens_per_sample: int = 1
    device: str = "GPU"  # what one device is, for wording: "GPU", or "CPU" (a calibrated CPU)
    kernel_classes: dict[str, float] = field(default_factory=dict)
    """Kernel seconds of one step on the critical pipeline stage's GPU by kernel class
    (:func:`perfmodel.compute.model.kernel_class_seconds`: ``"gemm:bf16"``, ``"gemm:fp8"``,
    ``"attention"``, ``"norm"``, ``"rope"``, ``"activation"``, ``"residual"``, ``"copy"``,
    ``"cast"``, ``"fp8_cast"``, ``"loss"``, ``"fsdp_copy"``...) plus ``"optimizer"``: what a
    Kineto trace's kernel totals are held against. Communication, host waits and idle time are
    :attr:`breakdown`'s; empty where not computed."""
    mfu_peak_flops: float = 0.0
    """The peak FLOP/s per device :attr:`mfu` divides by (0.0: not stated)."""
    mfu_peak_dtype: str = ""
    """The math that peak is of: the precision's matmul dtype (``bf16``, ``fp8``, ``fp32``...),
    or ``tf32`` for an FP32 CNN whose convolutions run in TF32 (audit15 item 6)."""
    explanation: StepExplanation | None = field(default=None, compare=False)
    """Where the step goes and what bounded each part (``predict --explain``): the kernel
    classes with their ceilings and sources, the overlap slowdown, exposed communication, host,
    idle and the slowest-GPU wait, adding up to :attr:`iteration_time_s`
    (:mod:`perfmodel.report.explain`); ``None`` where no kernel classes were computed."""

    def __getstate__(self) -> dict[str, Any]:
        """The fields as pickled (and deep-copied): the :class:`Deferred` ones worked out first
        (:class:`_OnRead`), so a copy holds their values, not the work that makes them."""
        _ = self.kernel_classes, self.explanation
        return self.__dict__

    @property
    def is_sequence_model(self) -> bool:
        """A sample is a sequence of ``tokens_per_sample > 1`` tokens (the zoo's transformers)."""
        return self.tokens_per_sample > 1

    @property
    def tokens_per_s(self) -> float | None:
        """``throughput_samples_per_s * tokens_per_sample`` (tokens/s); ``None`` for non-sequence models."""
        if not self.is_sequence_model:
            return None
        return self.throughput_samples_per_s * self.tokens_per_sample

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """``tokens_per_s / num_gpus``, the unit of torchtitan's and NeMo's tables; ``None`` if no tokens."""
        t = self.tokens_per_s
        return None if t is None else t / self.num_gpus

    def token_budget(self, tokens: float, pricing: Pricing | None = None) -> TokenBudget:
        """Time (and cost) to train on ``tokens`` tokens at this step time.

        ``steps = ceil(tokens / (samples_per_step * tokens_per_sample))`` whole steps, ``time_s =
        steps * iteration_time_s``, ``cost = pricing.cost(num_gpus, time_s)`` (the same rule as
        ``epoch_time_s``: a partial last step costs a whole step).

        Raises
        ------
        ConfigError
            A non-sequence model (no tokens), or a budget that is not a positive finite number.
        """
        from perfmodel.errors import ConfigError

        if not self.is_sequence_model:
            raise ConfigError(
                "a token budget needs a sequence model (its samples are not token sequences); "
                "give --dataset-size for an epoch instead",
                value=tokens,
                where="--tokens",
            )
        if not (isinstance(tokens, int | float) and math.isfinite(tokens) and tokens > 0):
            raise ConfigError(
                f"token budget must be a positive number, got {tokens!r}",
                value=tokens,
                where="--tokens",
            )
        steps = math.ceil(tokens / (self.samples_per_step * self.tokens_per_sample))
        time_s = steps * self.iteration_time_s
        cost = None if pricing is None else pricing.cost(self.num_gpus, time_s)
        budget = TokenBudget(float(tokens), steps, time_s, cost, self.num_gpus * time_s / hour)
        if pricing is not None and pricing.source != "price per GPU-hour":
            budget = dataclasses.replace(budget, price_source=pricing.source)
        return budget

    @property
    def printed_notes(self) -> tuple[str, ...]:
        """The notes every view prints (:func:`perfmodel.report.notes.is_printed_note`); all of
        :attr:`notes` are in :meth:`to_dict`."""
        from perfmodel.report.notes import is_printed_note

        return tuple(n for n in self.notes if is_printed_note(n))

    @property
    def compute_time_s(self) -> float:
        return self.breakdown.compute_s

    @property
    def exposed_comm_time_s(self) -> float:
        return self.breakdown.exposed_comm_total_s

    @property
    def bubble_time_s(self) -> float:
        return self.breakdown.bubble_s

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def fits_in_memory(self) -> bool:
        return all(m.fits for m in self.memory_per_stage)

    @property
    def memory_tight(self) -> bool:
        """The plan fits, but its fullest stage is within the memory model's measured error of
        the capacity (:func:`perfmodel.intervals.memory.stage_tight`: published peaks ran up to
        ``MEMORY_UNDER`` above the predictions); what counts as fitting is unchanged."""
        from perfmodel.intervals.memory import stage_tight

        return stage_tight(self.memory_per_stage)

    def interval(self, level: float = DEFAULT_LEVEL) -> StepInterval:
        """The prediction's range at ``level`` (default 0.8, ``predict``'s ``80% range``):
        the published runs like this one, held out one publication at a time
        (:func:`perfmodel.intervals.answers.step_interval`, ``docs/intervals.md``).

        Computed on demand, so :func:`perfmodel.api.predict` costs nothing more when it is not
        asked for. ``.to_dict()`` of the answer gives ``predict --json``'s interval fields
        (``iteration_time_s_low`` / ``_high``, ``throughput_samples_per_s_low`` / ``_high``, ...)

        Raises
        ------
        PerfModelError
            When the residual record cannot give a range (no published run like this one).
        """
        from perfmodel.intervals.answers import step_interval

        return step_interval(self, level)

    def accumulation_text(self) -> str:
        """``" as 53 micro-batches of 1"`` when a replica's batch per step runs as several
        micro-batches without a pipeline (gradient accumulation: the memory is one
        micro-batch's, so ``model maxbatch``'s largest batch in one micro-batch can be
        exceeded), else ``""``. A replica's batch is ``samples_per_step / (dp x learners)``."""
        plan = self.plan
        mb = int(plan.get("microbatch_size") or 0)
        replicas = int(plan.get("dp", 1) or 1) * int(plan.get("learners_per_gpu", 1) or 1)
        if mb < 1 or int(plan.get("pp", 1) or 1) > 1:
            return ""
        count = self.samples_per_step // replicas // mb
        return f" as {count} micro-batches of {mb}" if count > 1 else ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``--json`` output)."""
        return {
            "iteration_time_s": self.iteration_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "epoch_time_s": self.epoch_time_s,
            "device": self.device,
            "tokens_per_sample": self.tokens_per_sample if self.is_sequence_model else None,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "speedup": self.speedup,
            "scaling_efficiency": self.scaling_efficiency,
            "compute_time_s": self.compute_time_s,
            "exposed_comm_time_s": self.exposed_comm_time_s,
            "bubble_time_s": self.bubble_time_s,
            "optimizer_time_s": self.breakdown.optimizer_s,
            "host_time_s": self.breakdown.host_s,
            "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "fits_in_memory": self.fits_in_memory,
            "memory_tight": self.memory_tight,
            "model_flops_per_gpu_per_s": self.model_flops_per_gpu_per_s,
            "mfu": self.mfu,
            "mfu_peak_flops": self.mfu_peak_flops,
            "mfu_peak_dtype": self.mfu_peak_dtype,
            "num_gpus": self.num_gpus,
            "samples_per_step": self.samples_per_step,
            "fidelity": self.fidelity,
            "breakdown": self.breakdown.to_dict(),
            "memory": self.memory.to_dict(),
            "memory_per_stage_bytes": [m.total_bytes for m in self.memory_per_stage],
            "staleness": {str(k): v for k, v in self.staleness.items()},
            "plan": dict(self.plan),
            "scenario": dict(self.scenario),
            "notes": list(self.notes),
            "printed_notes": list(self.printed_notes),
            "baseline_gpus": self.baseline_gpus,
            "speedup_basis": self.speedup_basis,
            "defaults": list(self.defaults),
            "kernel_classes": dict(self.kernel_classes),
        }

    def _mfu_denominator(self) -> str:
        """``" of the bf16 peak, 989 TFLOP/s"``: what :attr:`mfu` divides by, for every
        precision (an FP8 MFU is against the FP8 peak, an FP32 CNN's against TF32's)."""
        if self.mfu_peak_flops <= 0:
            return ""
        what = f"{self.mfu_peak_dtype} " if self.mfu_peak_dtype else ""
        return f" of the {what}peak, {_flops_text(self.mfu_peak_flops)}"

    def format_kernel_classes(self) -> list[str]:
        """The kernel classes of :attr:`kernel_classes`, largest first, with seconds and their
        share of the iteration (``predict --explain``)."""
        from perfmodel.units import format_time

        T = self.iteration_time_s or 1.0
        rows = sorted(self.kernel_classes.items(), key=lambda kv: -kv[1])
        lines = [f"kernels by class (critical {self.device}, one step):"]
        lines += [f"  {k:<18}{format_time(v):>12}  {100 * v / T:5.1f}%" for k, v in rows if v > 0]
        return lines

    def format_table(self) -> str:
        """Human-readable summary."""
        from perfmodel.units import format_bytes, format_duration, format_time

        b = self.breakdown
        T = self.iteration_time_s or 1.0
        dev = self.device
        lines = [
            f"plan            {self.plan.get('describe', '')}  on {self.num_gpus} {dev}(s)  [{self.fidelity}]",
            f"iteration time  {format_time(self.iteration_time_s)}",
            f"throughput      {self.throughput_samples_per_s:,.1f} samples/s",
        ]
        if self.tokens_per_s is not None:
            lines.append(
                f"tokens/s        {self.tokens_per_s:,.0f} tokens/s  ({self.tokens_per_s_per_gpu:,.0f} per GPU;"
                f" {self.tokens_per_sample} tokens per sample)"
            )
        if self.epoch_time_s is not None:
            e = self.epoch_time_s
            human = f" ({format_duration(e)})" if e >= 60 else ""
            lines.append(f"epoch time      {format_time(e)}{human}")
        if self.speedup is not None:
            lines.append(
                f"speedup         {self.speedup:.2f}x vs {self.baseline_gpus} {dev}{'s' if self.baseline_gpus > 1 else ''}  (scaling efficiency {100 * (self.scaling_efficiency or 0):.0f}%)"
            )
            if self.speedup_basis:
                lines.append(f"  against: {self.speedup_basis}")
        lines += [f"default         {d}" for d in self.defaults]
        lines.append(f"breakdown (critical {dev}):")
        rows = [("compute", b.compute_s), ("optimizer", b.optimizer_s)]
        rows += [(f"exposed comm {k}", v) for k, v in sorted(b.exposed_comm_s.items())]
        rows += [("host", b.host_s), ("bubble/idle", b.bubble_s)]
        rows += [("slowest-GPU wait", b.sync_wait_s)]
        for name, v in rows:
            if v > 0 or name in ("compute",):
                lines.append(f"  {name:<18}{format_time(v):>12}  {100 * v / T:5.1f}%")
        mem = self.memory
        lines.append(
            f"memory per {dev}  {format_bytes(mem.total_bytes)} of {format_bytes(mem.capacity_bytes)}"
            f"  -> {'fits' + self.accumulation_text() if self.fits_in_memory else 'DOES NOT FIT'}"
        )
        if self.memory_tight:
            from perfmodel.intervals.memory import tight_text

            lines[-1] += f" (tight: {tight_text()})"
        lines.append(
            "  "
            + ", ".join(
                f"{k.replace('_bytes', '')} {format_bytes(v)}" for k, v in mem.parts().items()
            )
        )
        lines.append(
            f"model FLOP/s/{dev} {_flops_text(self.model_flops_per_gpu_per_s)}  "
            f"(MFU {100 * self.mfu:.1f}%{self._mfu_denominator()})"
        )
        if dev == "CPU":
            lines.append(
                "  (the memory model counts a GPU's CUDA context and library workspace, which a "
                "CPU run does not have)"
            )
        if self.staleness:
            lines.append(
                "staleness       "
                + ", ".join(f"{k}: {v:.2f}" for k, v in sorted(self.staleness.items()))
            )
        lines.extend(self.printed_notes)
        return "\n".join(lines)


class Deferred:
    """A field value worked out when first read: ``make()`` (:attr:`StepReport.kernel_classes`
    and :attr:`StepReport.explanation`, which :func:`perfmodel.pipeline.assemble.build_report`
    leaves to their first read: most callers of ``predict`` never read them; issue 27). Called
    once, or by each of two threads that read the field at once: equal values, the report
    keeping the one stored last. Until then the instance's ``__dict__`` holds this object."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


_NO_DEFAULT = object()


class _OnRead:
    """A field of :class:`StepReport` (``name``) as its instance stores it (the ``__dict__``
    entry the frozen dataclass's ``__init__`` sets through ``object.__setattr__``), where that is
    a :class:`Deferred` the value it makes, kept in its place on the first read: so every reader
    (``==``, ``repr``, ``to_dict``, ``dataclasses.replace`` / ``asdict``, pickling through
    :meth:`StepReport.__getstate__`) sees the value itself. On the class: the field's plain
    ``default`` as the dataclass left it (none for ``kernel_classes``, a ``default_factory``
    field: ``AttributeError`` as before)."""

    def __init__(self, name: str, default: Any = _NO_DEFAULT) -> None:
        self.name, self.default = name, default

    def __get__(self, obj: StepReport | None, owner: type | None = None) -> Any:
        if obj is None:
            if self.default is _NO_DEFAULT:
                raise AttributeError(self.name)
            return self.default
        v = obj.__dict__[self.name]
        if type(v) is Deferred:
            v = obj.__dict__[self.name] = v.make()
        return v

    def __set__(self, obj: StepReport, value: Any) -> None:
        obj.__dict__[self.name] = value


# the two fields build_report may leave to their first read (perfmodel.pipeline.assemble)
StepReport.kernel_classes = _OnRead("kernel_classes")  # type: ignore[assignment]
StepReport.explanation = _OnRead("explanation", None)  # type: ignore[assignment]
