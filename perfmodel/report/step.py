"""StepReport: what one prediction says, and where the time goes.

The breakdown is read off the timeline of the *critical* simulated GPU (the one whose compute
stream is busiest, i.e. the slowest pipeline stage). Every instant of the iteration
``[0, T]`` is put in exactly one class, by priority:

1. the GPU's compute stream runs a compute / recompute task -> ``compute``; an optimizer task ->
   ``optimizer``; a collective issued on the compute stream (Megatron TP, Krizhevsky's feature
   exchange) -> exposed ``tp`` communication;
2. otherwise a communication task of that GPU is running -> exposed communication of its kind
   (``dp``, ``pp``, ``zero``, ``ps``, ``host``);
3. otherwise a host task is running -> ``host``;
4. otherwise the GPU waits -> ``bubble``.

So ``compute + optimizer + exposed comm + host + bubble == iteration time`` (tested).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.taskgraph import Task, TaskKind
from perfmodel.sim.engine import CoarseTimeline, PeriodicTimeline, Timeline
from perfmodel.units import hour

if TYPE_CHECKING:
    from perfmodel.report.explain import StepExplanation
    from perfmodel.search.cost import Pricing


@dataclass(frozen=True)
class Breakdown:
    """Seconds of one iteration on the critical GPU, by class (they sum to the iteration)."""

    compute_s: float
    optimizer_s: float
    exposed_comm_s: dict[str, float]
    host_s: float
    bubble_s: float
    sync_wait_s: float = 0.0
    """Waiting for the slowest GPU of a synchronous step
    (:func:`perfmodel.parallel.straggler.straggler_wait_s`), after the simulated timeline."""

    @property
    def exposed_comm_total_s(self) -> float:
        return sum(self.exposed_comm_s.values())

    @property
    def total_s(self) -> float:
        return (
            self.compute_s
            + self.optimizer_s
            + self.exposed_comm_total_s
            + self.host_s
            + self.bubble_s
            + self.sync_wait_s
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_s": self.compute_s,
            "optimizer_s": self.optimizer_s,
            "exposed_comm_s": dict(self.exposed_comm_s),
            "host_s": self.host_s,
            "bubble_s": self.bubble_s,
            "sync_wait_s": self.sync_wait_s,
        }


def task_class(task: Task) -> tuple[int, str]:
    """(priority, class) of a task for the breakdown (lower priority number wins)."""
    if task.stream == "compute":
        if task.kind in (TaskKind.COMPUTE, TaskKind.RECOMPUTE):
            return 0, "compute"
        if task.kind is TaskKind.OPTIMIZER:
            return 0, "optimizer"
        if task.comm is not None and task.comm.kind.value in ("ep", "cp"):
            return 0, f"comm:{task.comm.kind.value}"  # expert / context parallel, blocking
        return 0, "comm:tp"
    if task.kind is TaskKind.HOST and task.stream in ("host", "server", "host-sync"):
        return 2, "host"  # framework host work, CPU merge / parameter-server update, the GPU's
        # wait for the host after a MoE dispatcher's synchronisation ("host-sync")
    if task.stream == "tp":
        return 1, "comm:tp"  # TP collectives overlapped with GEMMs (recipe tp_comm)
    if task.comm is not None:
        return 1, f"comm:{task.comm.kind.value}"
    if task.kind is TaskKind.SENDRECV:
        return 1, "comm:ps"
    if task.kind is TaskKind.HOST:
        return 1, "comm:host"
    if task.kind is TaskKind.OPTIMIZER:
        return 2, "host"  # a parameter-server update running off the worker GPU
    return 1, "comm:dp"


def _compute_busy(timeline: Timeline) -> dict[str, float]:
    """Seconds each simulated device's compute stream is busy (summed in task order)."""
    busy: dict[str, float] = {}
    get = busy.get
    start_s, end_s = timeline.start_s, timeline.end_s
    for t in timeline.graph.tasks:
        if t.stream == "compute":
            dev, tid = t.device, t.tid
            busy[dev] = get(dev, 0.0) + end_s[tid] - start_s[tid]
    return busy


#: Busy seconds within this fraction of the busiest device's count as a tie (a float's rounding
#: differs between fidelities and lowerings: summation order, periodic extension).
BUSY_TIE_REL = 1e-9


def _busiest(busy: dict[str, float], devices: tuple[str, ...]) -> str:
    """The device of ``devices`` with the most busy seconds; devices within
    :data:`BUSY_TIE_REL` of the most tie, and the first of them in ``devices`` is taken, so the
    choice does not depend on summation order (coarse or fine lowering, periodic extension,
    analytic or simulated)."""
    if not busy:
        return devices[0]
    floor = max(busy.values()) * (1.0 - BUSY_TIE_REL)
    return next(d for d in devices if busy.get(d, -1.0) >= floor)


def critical_device(timeline: Timeline) -> str:
    """The simulated GPU whose compute stream is busiest."""
    if isinstance(timeline, PeriodicTimeline):
        return _periodic_critical(timeline)
    if isinstance(timeline, CoarseTimeline):  # the same busy seconds (coarsenable's proof)
        timeline = timeline.coarse
    return _busiest(_compute_busy(timeline), timeline.graph.devices)


def _class_seconds(timeline: Timeline, dev: str, t0: float, t1: float) -> dict[str, float]:
    """Seconds of ``[t0, t1]`` on ``dev`` in each breakdown class (see module docstring)."""
    return _sweep(*_class_events(timeline, dev), t0, t1)


_Events = list[tuple[float, int, str]]


def _class_events(timeline: Timeline, dev: str) -> tuple[_Events, dict[str, str]]:
    """The start and end events of the tasks that count for ``dev`` (its own tasks,
    communication whose group holds it, host tasks anywhere) as ``(time, +1 | -1, key)`` in
    time order (ties: ends first, then task order), and each ``"prio|class"`` key's class
    (keys compare by priority first)."""
    events: _Events = []
    append = events.append
    keys: dict[tuple[object, ...], str] = {}  # task_class depends on these three only
    start_s, end_s = timeline.start_s, timeline.end_s
    for t in timeline.graph.tasks:
        comm = t.comm
        if t.device != dev:
            if t.stream == "compute":
                continue
            mine = comm is not None and dev in comm.group
        else:
            mine = True
        tid = t.tid
        s, e = start_s[tid], end_s[tid]
        if e <= s:
            continue
        ck = (t.stream, t.kind, None if comm is None else comm.kind)
        key = keys.get(ck)
        if key is None:
            prio, cls = task_class(t)
            key = keys[ck] = f"{prio}|{cls}"
        if not mine and key != "2|host":
            continue
        append((s, 1, key))
        append((e, -1, key))
    events.sort(key=_EVENT_ORDER)
    return events, {k: k.split("|", 1)[1] for k in keys.values()}


def _sweep(events: _Events, cls_of: dict[str, str], t0: float, t1: float) -> dict[str, float]:
    """Seconds of ``[t0, t1]`` per class: each interval between consecutive events goes to
    the highest-priority class running, ``bubble`` when none. Stops at the first event at or
    after ``t1`` (what follows would add nothing).

    ``active`` holds the keys with tasks running only (a key whose count drops to 0 leaves
    it), so the live keys are its keys: no count is ever negative, as every task's end event
    (``e > s``) sorts after its start."""
    active: dict[str, int] = {}
    acc: dict[str, float] = {}
    prev = t0
    for now, d, key in events:
        if now >= t1:
            break
        if now > prev:
            cls = cls_of[min(active)] if active else "bubble"
            acc[cls] = acc.get(cls, 0.0) + (now - prev)
            prev = now
        c = active.get(key, 0) + d
        if c:
            active[key] = c
        else:
            del active[key]
    if t1 > prev:
        cls = cls_of[min(active)] if active else "bubble"
        acc[cls] = acc.get(cls, 0.0) + (t1 - prev)
    return acc


_EVENT_ORDER = itemgetter(0, 1)
"""Sort key of :func:`_class_events`: time, then ends (-1) before starts (+1)."""


def breakdown(
    timeline: Timeline, device: str | None = None, period_s: float | None = None
) -> Breakdown:
    """Classify every instant of ``[0, period]`` on ``device`` (see module docstring)."""
    if isinstance(timeline, PeriodicTimeline):
        acc = _periodic_seconds(timeline, device or _periodic_critical(timeline))
        T = timeline.makespan_s
        if period_s is not None and period_s > T:  # the sweep's bubble up to the period
            acc["bubble"] = acc.get("bubble", 0.0) + (period_s - T)
        return _breakdown_of(acc)
    if isinstance(timeline, CoarseTimeline):  # the same class seconds (coarsenable's proof)
        timeline = timeline.coarse
    dev = device or critical_device(timeline)
    T = max(timeline.makespan_s, period_s or 0.0)
    return _breakdown_of(_class_seconds(timeline, dev, 0.0, T))


def _breakdown_of(acc: dict[str, float]) -> Breakdown:
    comm = {k.split(":", 1)[1]: v for k, v in acc.items() if k.startswith("comm:")}
    return Breakdown(
        compute_s=acc.get("compute", 0.0),
        optimizer_s=acc.get("optimizer", 0.0),
        exposed_comm_s=comm,
        host_s=acc.get("host", 0.0),
        bubble_s=acc.get("bubble", 0.0),
    )


def _periodic_seconds(tl: PeriodicTimeline, dev: str) -> dict[str, float]:
    """Breakdown classes of ``dev`` over ``[0, makespan]`` of the whole step: the short
    schedule's plus ``extra`` times one period's (``[tau, tau + lambda)``,
    :func:`perfmodel.sim.engine.periodic_timeline`)."""
    short, lam, tau = tl.short, tl.period_s, tl.window_s
    events = _class_events(short, dev)  # one sorted list for both sweeps
    acc = _sweep(*events, 0.0, short.makespan_s)
    one = _sweep(*events, tau, tau + lam)
    for cls, v in one.items():
        acc[cls] = acc.get(cls, 0.0) + tl.extra * v
    return acc


def _periodic_critical(tl: PeriodicTimeline) -> str:
    """:func:`critical_device` of a periodic timeline: each device's busy compute time is the
    short schedule's plus ``extra`` times one unit's compute tasks (every unit of the periodic
    regime, one micro-batch or, interleaved, ``pp`` of them, runs the same); ties as
    :func:`_busiest` breaks them."""
    short = tl.short
    busy = _compute_busy(short)
    tasks = short.graph.tasks
    for tid in tl.period_tids:
        t = tasks[tid]
        if t.stream == "compute":
            busy[t.device] += tl.extra * (short.end_s[tid] - short.start_s[tid])
    return _busiest(busy, short.graph.devices)


def _flops_text(flops_per_s: float) -> str:
    """``"403.0 TFLOP/s"``, or GFLOP/s below 0.1 TFLOP/s (a CPU)."""
    if flops_per_s >= 1e11:
        return f"{flops_per_s / 1e12:.1f} TFLOP/s"
    return f"{flops_per_s / 1e9:.2f} GFLOP/s"


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

    def format_lines(self) -> list[str]:
        from perfmodel.units import format_duration

        lines = [
            f"time to train   {self.time_s:,.0f} s ({format_duration(self.time_s)}) for "
            f"{self.tokens:.4g} tokens ({self.steps:,} steps, {self.gpu_hours:,.0f} GPU-hours)"
        ]
        if self.cost is not None:
            lines.append(f"cost            {self.cost:,.2f} (at {self.price_source})")
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
    does not (:func:`perfmodel.search.autobatch.fitting_baseline`)."""
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
    explanation: StepExplanation | None = field(default=None, compare=False)
    """Where the step goes and what bounded each part (``predict --explain``): the kernel
    classes with their ceilings and sources, the overlap slowdown, exposed communication, host,
    idle and the slowest-GPU wait, adding up to :attr:`iteration_time_s`
    (:mod:`perfmodel.report.explain`); ``None`` where no kernel classes were computed."""

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
            "model_flops_per_gpu_per_s": self.model_flops_per_gpu_per_s,
            "mfu": self.mfu,
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
            "defaults": list(self.defaults),
            "kernel_classes": dict(self.kernel_classes),
        }

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
            f"  -> {'fits' if self.fits_in_memory else 'DOES NOT FIT'}"
        )
        lines.append(
            "  "
            + ", ".join(
                f"{k.replace('_bytes', '')} {format_bytes(v)}" for k, v in mem.parts().items()
            )
        )
        lines.append(
            f"model FLOP/s/{dev} {_flops_text(self.model_flops_per_gpu_per_s)}  (MFU {100 * self.mfu:.1f}%)"
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
