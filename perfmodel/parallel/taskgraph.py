"""The task graph a plan lowers to: tasks with durations, dependencies and streams.

A *stream* is ``(device, name)``: one GPU compute stream, one communication channel per kind,
one host thread. Tasks on a stream run one at a time in **program order** (as kernels issued to
a CUDA stream do); a task starts when its stream is free and all its dependencies are done.
Communication tasks carry a :class:`CommSpec` so the SimPy executor can replay them as flows on
the real links (contention); their ``duration_s`` is the closed-form time used by the analytic
executor.
"""

from __future__ import annotations

import enum
from dataclasses import InitVar, dataclass, field, fields
from typing import ClassVar, NamedTuple

from perfmodel._frozen import from_fields
from perfmodel.ops import CollectiveOp


class TaskKind(str, enum.Enum):
    COMPUTE = "compute"
    RECOMPUTE = "recompute"
    COLLECTIVE = "collective"
    SENDRECV = "sendrecv"
    OPTIMIZER = "optimizer"
    HOST = "host"


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
TASK_COLLECTIVE = TaskKind.COLLECTIVE
TASK_COMPUTE = TaskKind.COMPUTE
TASK_HOST = TaskKind.HOST
TASK_SENDRECV = TaskKind.SENDRECV


class CommKind(str, enum.Enum):
    """Breakdown label of a communication task."""

    DP = "dp"  # data-parallel gradient reduction / model averaging
    TP = "tp"  # tensor-parallel activations
    PP = "pp"  # pipeline send/recv
    ZERO = "zero"  # ZeRO / FSDP parameter gathers
    PS = "ps"  # parameter server push/pull
    HOST = "host"  # host <-> device transfers (CPU merge)
    EP = "ep"  # expert-parallel token dispatch / combine all-to-alls
    CP = "cp"  # context-parallel key/value exchange (ring attention), exposed part


# (bound once, as above)
COMM_CP = CommKind.CP
COMM_EP = CommKind.EP
COMM_PP = CommKind.PP
COMM_ZERO = CommKind.ZERO


@dataclass(frozen=True)
class CommSpec:
    """What a communication task moves: a collective over ``group`` or a transfer."""

    op: CollectiveOp
    message_bytes: float
    group: tuple[str, ...]
    algorithm: str = "auto"
    kind: CommKind = CommKind.DP
    #: Extra groups running the same collective at the same time (symmetric siblings that are
    #: not simulated as compute, but whose flows share the links).
    siblings: tuple[tuple[str, ...], ...] = ()
    #: Software wait before the transfer starts (Horovod: half a fusion cycle on average).
    wait_s: float = 0.0

    @classmethod
    def built(
        cls,
        op: CollectiveOp,
        message_bytes: float,
        group: tuple[str, ...],
        algorithm: str,
        kind: CommKind,
        siblings: tuple[tuple[str, ...], ...],
        wait_s: float,
    ) -> CommSpec:
        """``CommSpec(op, message_bytes, group, algorithm, kind, siblings, wait_s)`` at half its
        cost, for the lowering's data-parallel specs (``dp_spec``: ~15-50 new ones a plan) and
        the tied embedding's gradient all-reduce.

        The frozen dataclass's ``__init__`` sets each of the seven fields with
        ``object.__setattr__`` (~13 k instructions a spec, callgrind); this makes the
        instance's ``__dict__`` at once (~6 k), with the keys in declaration order and the
        given value objects: the dictionary ``__init__`` leaves (there is no
        ``__post_init__``), so equality, hashing, ``repr``, pickling and every reader see the
        same spec. :data:`FAST_SPECS` off: ``__init__`` (the reference
        ``tests/parallel/test_comm_spec_built.py`` compares against); a subclass (its own fields
        unknown here): ``__init__`` always."""
        if cls is not CommSpec or not FAST_SPECS:
            return cls(op, message_bytes, group, algorithm, kind, siblings, wait_s)
        return from_fields(cls, {
            "op": op, "message_bytes": message_bytes, "group": group, "algorithm": algorithm,
            "kind": kind, "siblings": siblings, "wait_s": wait_s,
        })  # fmt: skip


#: Whether :meth:`CommSpec.built` makes the instance's dictionary at once (else ``__init__``;
#: tests compare both ways).
FAST_SPECS = True


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work (slotted: a step has up to ~10^5 of them, and a ``__dict__`` each
    doubles the objects the garbage collector walks while reports keep their timelines).

    Attributes
    ----------
    tid
        Index in :attr:`TaskGraph.tasks`.
    kind
        What it is.
    device, stream
        The stream it occupies (``device`` is a GPU or CPU node id of the topology).
    duration_s
        Closed-form duration, seconds (comm tasks: the collective model's time).
    deps
        Task ids that must finish first.
    label
        Human label (trace, Gantt).
    microbatch, chunk
        Pipeline coordinates (``-1`` when not applicable).
    comm
        For communication tasks: what moves.
    then_s, send_s, send
        Empty / zero / ``None`` (class attributes, no slots: see :class:`OpTask`, which has
        them).
    over
        ``None`` (a class attribute, no slot: see :class:`OverTask`, which has it).
    """

    tid: int
    kind: TaskKind
    device: str
    stream: str
    duration_s: float
    deps: tuple[int, ...] = ()
    label: str = ""
    microbatch: int = -1
    chunk: int = -1
    comm: CommSpec | None = None
    then_s: ClassVar[tuple[float, ...]] = ()
    send_s: ClassVar[float] = 0.0
    send: ClassVar[CommSpec | None] = None
    over: ClassVar[tuple[str, float] | None] = None


class OpTask(Task):
    """An *operation task* of the analytic graph (:mod:`perfmodel.parallel.lower_shortcuts`,
    "Operation tasks"; made by :meth:`GraphBuilder.add` given ``then``): after its
    ``duration_s`` of compute the compute stream runs ``then_s``, alternately seconds of
    exposed tensor-parallel communication and of compute (the segments it stands for, in
    order: the task ends at ``start + duration_s + then_s[0] + then_s[1] + ...``, added in that
    order), and a pipeline send ``send`` of ``send_s`` seconds starts when the task ends (set
    by the lowering once the send is known); a task that waits on the send lists ``tid + SENT``
    (:data:`SENT`), one that waits on its first compute ``tid + HEAD`` (:data:`HEAD`). Only the
    analytic list schedule's graphs have them (never the graphs that show tasks, nor the
    SimPy replay's); a plain :class:`Task` reads ``()``, ``0.0`` and ``None`` (its class
    attributes), so the executors read every task the same way."""

    __slots__ = ("send", "send_s", "then_s")

    def __getstate__(self) -> tuple[object, ...]:
        """The fields and the three slots of its own (the dataclass's state has the fields)."""
        return (*(getattr(self, f.name) for f in fields(self)), self.then_s, self.send_s, self.send)

    def __setstate__(self, state: tuple[object, ...]) -> None:
        *values, then_s, send_s, send = state
        for f, v in zip(fields(self), values, strict=True):
            object.__setattr__(self, f.name, v)
        object.__setattr__(self, "then_s", then_s)
        object.__setattr__(self, "send_s", send_s)
        object.__setattr__(self, "send", send)


class _OpTaskPlusOne(OpTask):
    """An :class:`OpTask` with one slot of its own more (its subclass's only ``__slots__``
    entry: :class:`ChainTask`'s ``chain``, :class:`OverTask`'s ``over``): equal where
    :class:`Task`'s equality holds (over its fields) and that slot is equal, hashed as a
    :class:`Task`, pickled as an :class:`OpTask` and that slot. A base of the subclass's
    mutable twin too (``__class__`` assignment wants the same base)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        name = self.__slots__[0]
        return Task.__eq__(self, other) is True and getattr(self, name) == getattr(other, name)

    #: :class:`Task`'s (over its fields): equal tasks hash alike (a class that defines
    #: ``__eq__`` would otherwise get ``None``).
    __hash__ = Task.__hash__

    def __getstate__(self) -> tuple[object, ...]:
        return (*super().__getstate__(), getattr(self, self.__slots__[0]))

    def __setstate__(self, state: tuple[object, ...]) -> None:
        *rest, extra = state
        super().__setstate__(tuple(rest))
        object.__setattr__(self, self.__slots__[0], extra)


class ChainTask(_OpTaskPlusOne):
    """A *gather chain* of the analytic graph (ZeRO-3/FSDP, :meth:`perfmodel.parallel.
    lower_hidden.HiddenCollectives.lower_gather_runs`; made by :meth:`GraphBuilder.add_chain`):
    one operation whose segments each wait for their parameter all-gather, lowered as the one
    task standing for every gather, compute (with its TP piece) and gradient reduction of the
    operation. :attr:`chain` is ``(static, a0, a1)``: ``static`` the operation's per-segment
    durations, streams and specs (the same for every micro-batch, :data:`ChainStatic`), ``a0``
    and ``a1`` the dependencies (or ``-1``) its first two gathers are prefetched after. The
    list schedule runs the fine tasks' recurrence inside it (``perfmodel.sim.engine``
    ``_chain``); its :attr:`then_s` is :data:`CHAIN_MARK` (identity-checked), its
    ``duration_s`` 0. A task that waits on mark ``j`` lists :func:`chain_mark` ``(tid, j)``."""

    #: Compared with the task (:class:`_OpTaskPlusOne`): two chains of the same fields (every
    #: chain task's ``then_s`` is :data:`CHAIN_MARK`, its ``duration_s`` 0) may stand for
    #: different fine tasks.
    __slots__ = ("chain",)

    chain: tuple[ChainStatic, int, int]

    def __setstate__(self, state: tuple[object, ...]) -> None:
        """:class:`_OpTaskPlusOne`'s, and :attr:`then_s` the module's :data:`CHAIN_MARK`
        again (pickling copies it to an equal tuple, which the executors' ``then_s is
        CHAIN_MARK`` would take for an operation task's one piece)."""
        super().__setstate__(state)
        object.__setattr__(self, "then_s", CHAIN_MARK)


class OverTask(_OpTaskPlusOne):
    """An operation task whose first segment's tensor-parallel collective runs beside its
    compute on its own stream and outlasts it (Megatron-Core's TE userbuffers overlap where the
    collective is the longer; made by :meth:`GraphBuilder.add_over`): :attr:`over` is
    ``(stream, seconds)`` of that collective, which starts when its stream is free and the
    task's dependencies have ended; ``then_s[0]`` is the exposed tail, which starts on the
    compute stream when both the first compute and the collective have ended, and the rest of
    ``then_s`` the later segments as in :class:`OpTask`. The list schedule runs that
    recurrence (``perfmodel.sim.engine`` ``_over``; ``lower_replay.OperationReplay.over_op``
    says why it is the four tasks' schedule bit for bit)."""

    #: Compared, hashed and pickled with the task (:class:`_OpTaskPlusOne`).
    __slots__ = ("over",)


#: :attr:`Task.then_s` of every :class:`ChainTask` (the executors test ``then_s is CHAIN_MARK``).
CHAIN_MARK: tuple[float, ...] = (0.0,)


class ChainSegment(NamedTuple):
    """A segment of a gather chain outside its hidden gather runs (:data:`ChainStatic`
    ``items``): its gather, its operation task's first compute and ``then_s``, and its
    gradient reduction, as :meth:`perfmodel.parallel.lower_hidden.HiddenCollectives.
    lower_gather_runs` would emit them as fine tasks. Seconds, groups of device ids. A tuple:
    the list schedule unpacks it in its loop (``perfmodel.sim.engine`` ``_chain``)."""

    gather_s: float
    compute_s: float
    then_s: tuple[float, ...]
    reduce_s: float
    gather_group: tuple[str, ...]
    #: ``()`` where the operation does not reduce.
    reduce_group: tuple[str, ...]


class ChainRun(NamedTuple):
    """A hidden gather run of a gather chain (:data:`ChainStatic` ``items``; ``perfmodel.
    parallel.lower_hidden`` ``_lower_run``): its first gather, no first compute
    (``compute_s`` 0.0), its run task's ``then_s``, its summary reduction, then its second
    gather and its reductions' lead on the ``grad-lead`` stream. Seconds, groups of device
    ids; the first six fields are :class:`ChainSegment`'s."""

    gather_s: float
    compute_s: float
    then_s: tuple[float, ...]
    reduce_s: float
    gather_group: tuple[str, ...]
    reduce_group: tuple[str, ...]
    gather1_s: float
    gather1_group: tuple[str, ...]
    lead_s: float


@dataclass(frozen=True, slots=True)
class ChainStatic:
    """What a :class:`ChainTask` stands for, the same for every micro-batch (built once per
    lowering: ``perfmodel.parallel.lower_hidden`` ``_chain_static``), with :attr:`flat`, the
    list schedule's arrays of it (made once per static part, here or by its caller, and read
    by every chain of it)."""

    #: Per item in operation order, a :class:`ChainSegment` or a :class:`ChainRun`.
    items: tuple[ChainSegment | ChainRun, ...]
    #: The device's gather stream and gradient-reduction stream (never the same: the list
    #: schedule tracks their free times apart).
    gather_stream: str
    reduce_stream: str
    #: Whether the operation reduces its gradients (backward of the last micro-batch).
    reducing: bool
    #: A gather and a reduction :class:`Task` standing for the fine ones in the breakdown's
    #: classes.
    gather_proto: Task
    reduce_proto: Task
    #: Every device in any of the items' groups.
    members: frozenset[str]
    #: A :class:`Task` standing for the runs' leads (``None``: no runs).
    lead_proto: Task | None
    #: Without runs and with every segment's ``then_s`` one piece, ``(G_i, C_i, T_i, R_i)``
    #: per segment in seconds (``then_s == (T_i,)``: the segment ends at ``h_i + T_i``, the
    #: one addition of ``then_s``'s loop), which ``perfmodel.sim.engine`` ``_chain`` runs its recurrence
    #: over without a loop over ``then_s`` per segment; else ``None`` (the general loop).
    flat: tuple[tuple[float, float, float, float], ...] | None = field(
        init=False, compare=False, repr=False
    )
    #: :attr:`flat` where the caller has it already (``perfmodel.parallel.lower_chains``
    #: ``_chain_items``: its items repeat a few objects, so their rows are :func:`flat_rows`
    #: of those few, indexed); ``None``: worked out here from :attr:`items`.
    flat_given: InitVar[tuple[tuple[float, float, float, float], ...] | None] = None

    def __post_init__(
        self, flat_given: tuple[tuple[float, float, float, float], ...] | None
    ) -> None:
        flat = flat_given
        if self.lead_proto is not None:
            if flat is not None:
                raise ValueError("ChainStatic: flat rows given for a chain with runs")
        elif flat is None:
            flat = flat_rows(self.items)
        object.__setattr__(self, "flat", flat)


def flat_rows(
    items: tuple[ChainSegment | ChainRun, ...] | list[ChainSegment | ChainRun],
) -> tuple[tuple[float, float, float, float], ...] | None:
    """:attr:`ChainStatic.flat` of ``items`` (without runs): ``(G_i, C_i, T_i, R_i)`` seconds
    per item where every item is a :class:`ChainSegment` with ``then_s`` one piece, else ``None``."""
    if all(type(it) is ChainSegment and len(it.then_s) == 1 for it in items):
        return tuple((it.gather_s, it.compute_s, it.then_s[0], it.reduce_s) for it in items)
    return None


class ChainRow(NamedTuple):
    """The layout of the list schedule's times of one :class:`ChainSegment` (seconds;
    ``perfmodel.sim.engine`` ``_chain``): its gather, its compute (``head_end_s`` the end of
    its first compute, ``end_s`` of its ``then_s``), its reduction (0.0, 0.0 where none).

    The schedule stores *plain tuples* in this layout (``ChainRow._make(row)`` names them;
    readers index by :data:`ROW_COMPUTE_START` ... or unpack): a tuple subclass is never
    untracked by CPython's garbage collector as a tuple of floats is, and the ~37,000 rows of
    a list schedule of the benchmark's gather-bound FSDP plan (GPT-3 175B, 1024 A100, dp8 tp16
    pp8 interleaved, micro-batch 1) as named tuples took its list schedule from ~23 to ~30 ms
    and its breakdown from ~15 to ~70 ms (``time.perf_counter``, 2-core development machine).
    """

    gather_start_s: float
    gather_end_s: float
    compute_start_s: float
    head_end_s: float
    end_s: float
    reduce_start_s: float
    reduce_end_s: float


class ChainRunRow(NamedTuple):
    """The layout of a :class:`ChainRun`'s times: :class:`ChainRow`'s (``head_end_s`` =
    ``compute_start_s``: no first compute) followed by its second gather's and its lead's
    (0.0, 0.0: no lead); stored as a plain tuple (:class:`ChainRow`)."""

    gather_start_s: float
    gather_end_s: float
    compute_start_s: float
    head_end_s: float
    end_s: float
    reduce_start_s: float
    reduce_end_s: float
    gather1_start_s: float
    gather1_end_s: float
    lead_start_s: float
    lead_end_s: float


#: Indices into a chain row (:class:`ChainRow`, :class:`ChainRunRow`).
ROW_COMPUTE_START = ChainRow._fields.index("compute_start_s")
ROW_END = ChainRow._fields.index("end_s")
assert ChainRunRow._fields[: len(ChainRow._fields)] == ChainRow._fields

#: A dependency ``tid + SENT`` is on the pipeline send folded into task ``tid`` (its end plus
#: :attr:`Task.send_s`); plain dependencies are below it (analytic graphs only:
#: :mod:`perfmodel.parallel.lower_shortcuts`, "Operation tasks").
SENT = 1 << 40
#: A dependency ``tid + HEAD`` is on the end of task ``tid``'s first compute (its start plus
#: :attr:`Task.duration_s`), where a parameter gather is prefetched (analytic graphs only);
#: ``tid + HEAD + j * SENT`` (:func:`piece_end`) on the end of its ``j``-th piece of
#: :attr:`Task.then_s` after it.
HEAD = 2 << 40


#: A dependency ``tid + CHAIN + j * SENT`` (:func:`chain_mark`) is on mark ``j`` of
#: :class:`ChainTask` ``tid``: in item order, the end of each segment's first compute and two
#: per hidden gather run (the ends of its pieces 2 and 4), where the next gathers are
#: prefetched; the last mark, after them, is the end of its last gradient reduction
#: (``perfmodel.sim.chains.mark_count``). Far above every ``HEAD + j * SENT`` (analytic
#: graphs only).
CHAIN = 1 << 52


def chain_mark(tid: int, j: int) -> int:
    """The dependency on mark ``j`` of chain task ``tid`` (:data:`CHAIN`)."""
    return tid + CHAIN + j * SENT


def piece_end(tid: int, j: int) -> int:
    """The dependency on the end of operation task ``tid``'s first compute and the first ``j``
    pieces of its :attr:`~Task.then_s` (``j = 0``: ``tid + HEAD``): the list schedule reads
    ``start + duration_s + then_s[0] + ... + then_s[j - 1]``, added in that order, bit for bit
    the end of the task that piece stood for in the graph without operation tasks (analytic
    graphs only; :meth:`perfmodel.parallel.lower_hidden.HiddenCollectives.lower_gather_runs`).
    """
    return tid + HEAD + j * SENT


@dataclass(frozen=True)
class TaskGraph:
    """Tasks plus the metadata reports need.

    Attributes
    ----------
    tasks
        All tasks; ``tasks[i].tid == i``; dependencies point to lower ids.
    devices
        Simulated devices (representatives), in display order.
    multiplicity
        How many real GPUs each simulated GPU stands for (symmetric replicas).
    notes
        What was coarsened or assumed.
    """

    tasks: tuple[Task, ...]
    devices: tuple[str, ...]
    multiplicity: int = 1
    notes: tuple[str, ...] = ()

    def streams(self) -> dict[tuple[str, str], list[int]]:
        """Task ids per stream in program order."""
        out: dict[tuple[str, str], list[int]] = {}
        for t in self.tasks:
            out.setdefault((t.device, t.stream), []).append(t.tid)
        return out


_new_task = object.__new__


class _TaskTwin:
    """A mutable twin of :class:`Task`: the same slots in the same order on the same base, so
    :meth:`GraphBuilder.add` fills one with plain attribute stores and then makes it a
    :class:`Task` by ``__class__`` assignment (CPython allows it between heap types whose
    slot layouts are the same; the object *is* a :class:`Task` from then on, frozen, with the
    same fields and values). Ten stores to a slot of a mutable object and one class
    assignment take ~0.24 us where the ten slot setters of the frozen class took ~0.6 us per
    task (``time.process_time`` of 200,000 tasks on the 2-core development machine), ~1e5
    tasks in a gather-bound FSDP step of GPT-3 175B on 1024 A100."""

    __slots__ = Task.__slots__  # type: ignore[attr-defined]


assert _TaskTwin.__slots__ == tuple(f.name for f in fields(Task)), "Task's slots changed"


class _OpTaskTwin(Task):
    """A mutable twin of :class:`OpTask`, as :class:`_TaskTwin` is of :class:`Task`: the same
    base (:class:`Task`) and the same three slots of its own, so an :class:`OpTask` is filled
    with plain attribute stores and then made one by ``__class__`` assignment (CPython's
    ``compatible_for_assignment``: same base, same slots added). Its ``__setattr__`` and
    ``__delattr__`` are ``object``'s, both (they share one type slot; with the frozen
    dataclass's ``__delattr__`` inherited the stores take the slow generic path). Thirteen
    stores and the class assignment take ~0.14-0.26 us where the thirteen slot setters took
    ~0.5-1.0 us (``timeit`` of 200,000 tasks on the 2-core development machine); an
    interleaved pp 16 GPT-3 175B plan lowers ~3,100 operation tasks."""

    __slots__ = ("send", "send_s", "then_s")
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


assert sorted(_OpTaskTwin.__slots__) == sorted(OpTask.__slots__), "OpTask's slots changed"


class _ChainTaskTwin(_OpTaskPlusOne):
    """A mutable twin of :class:`ChainTask`, as :class:`_OpTaskTwin` is of :class:`OpTask`:
    the same base (:class:`_OpTaskPlusOne`) and the same one slot of its own (``chain``),
    filled with plain stores and made a :class:`ChainTask` by ``__class__`` assignment. Both
    ``__setattr__`` and ``__delattr__`` are ``object``'s: with the frozen ``__delattr__``
    inherited (wave 11's attempt) the stores took the generic path, 1.6 us against the slot
    setters' 1.1 us; with both, fourteen stores and the class assignment take ~0.35-0.42 us
    against the setters' ~1.2 us (``time.perf_counter`` of 20,000 tasks, one process, garbage
    collection off, the 2-core development machine). A gather-bound FSDP step of GPT-3 175B on
    1024 A100 (dp8 tp16 pp8 mb1 interleaved) lowers 6,144 chains."""

    __slots__ = ("chain",)
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


assert _ChainTaskTwin.__slots__ == ChainTask.__slots__, "ChainTask's slots changed"


class _OverTaskTwin(_OpTaskPlusOne):
    """A mutable twin of :class:`OverTask`, as :class:`_ChainTaskTwin` is of
    :class:`ChainTask` (same base, the same one slot of its own, ``object``'s ``__setattr__``
    and ``__delattr__``)."""

    __slots__ = ("over",)
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


assert _OverTaskTwin.__slots__ == OverTask.__slots__, "OverTask's slots changed"

#: :class:`OpTask`'s own slot setters.
_S_THEN, _S_SEND_S, _S_SEND = (OpTask.__dict__[n].__set__ for n in ("then_s", "send_s", "send"))


def clean_two(a: int, d: int) -> tuple[int, ...]:
    """The cleaning :meth:`GraphBuilder.add` does (inline there, for speed) of two
    dependency ids ``[a, d]`` (negative: none): the non-negative ones, once, sorted. The
    lowering's chain loop (:func:`perfmodel.parallel.lower_replay.run_chain_schedule`) calls it
    where it builds a task's dependencies itself; the plain loop
    (:func:`perfmodel.parallel.lower_shortcuts.run_plain_schedule`) spells the rule inline.

    >>> clean_two(3, 1), clean_two(-1, 2), clean_two(2, 2), clean_two(-1, -1)
    ((1, 3), (2,), (2,), ())
    """
    if a < 0:
        return (d,) if d >= 0 else ()
    if d < 0 or d == a:
        return (a,)
    return (a, d) if a < d else (d, a)


@dataclass
class GraphBuilder:
    """Mutable helper used only during lowering; :meth:`build` returns the frozen graph."""

    tasks: list[Task] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: ``set(devices)``: membership per task without scanning the list (pp x cp devices)
    _device_set: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._device_set.update(self.devices)

    def add(
        self,
        kind: TaskKind,
        device: str,
        stream: str,
        duration_s: float,
        deps: tuple[int, ...] | list[int] = (),
        label: str = "",
        microbatch: int = -1,
        chunk: int = -1,
        comm: CommSpec | None = None,
        then: tuple[float, ...] | None = None,
        over: tuple[str, float] | None = None,
        chain: tuple[ChainStatic, int, int] | None = None,
    ) -> int:
        """Append a task; returns its id. ``deps`` may hold ``None`` and negative ids (no
        dependency) and duplicates; they are dropped and the rest sorted. The arguments after
        ``deps`` may be given by position (the lowering's hot loops do: a keyword call costs
        more per task). ``then``: an :class:`OpTask` whose ``then_s`` it is (no send yet);
        with ``over`` too, an :class:`OverTask` (:meth:`add_over`); with ``chain``, a
        :class:`ChainTask` (:meth:`add_chain`).
        The stores are mirrored inline in ``LoweringShortcuts.run_plain_schedule`` (and, for
        :meth:`add_chain`'s, in ``OperationReplay.run_chain_schedule``), which clean two ids
        by :func:`clean_two`'s rule (the same rule as the two-id case below, kept inline here
        and in the plain loop: a call per task costs ~0.5 ms a lowering) and three by hand;
        ``tests/parallel/test_plain_loop.py`` compares."""
        if duration_s < 0 or duration_s != duration_s:
            raise ValueError(f"task {label!r}: invalid duration {duration_s!r}")
        tasks = self.tasks
        tid = len(tasks)
        if not deps:
            clean: tuple[int, ...] = ()
        elif len(deps) == 1:  # the common case: no set, no sort (same result)
            d = deps[0]
            clean = (d,) if d is not None and d >= 0 else ()
        elif len(deps) == 2:  # a stream's previous task and one input: the same, unrolled
            a, d = deps
            if a is None or a < 0:
                clean = (d,) if d is not None and d >= 0 else ()
            elif d is None or d < 0 or d == a:
                clean = (a,)
            else:
                clean = (a, d) if a < d else (d, a)
        else:
            clean = tuple(sorted({d for d in deps if d is not None and d >= 0}))
        # every dependency, decoded (a SENT/HEAD-encoded one sorts last whatever its task);
        # the ends first, without a generator, for the hot one- and two-dependency cases
        assert not clean or (
            clean[0] % SENT < tid
            and clean[-1] % SENT < tid
            and (len(clean) < 3 or max([d % SENT for d in clean]) < tid)
        ), "dependencies must precede the task"
        # Task(...) without the frozen dataclass's __init__ (its field-by-field
        # object.__setattr__ is a third of the cost of a lowering's ~10^4 tasks): a mutable
        # twin's stores (_TaskTwin, _OpTaskTwin), the same fields, the same values, then the
        # frozen class
        if then is None:
            twin: _TaskTwin | _OpTaskTwin | _OverTaskTwin | _ChainTaskTwin = _new_task(_TaskTwin)
            cls: type[Task] = Task
        else:  # an OpTask: its own three slots first
            if over is None:
                if chain is None:
                    twin = _new_task(_OpTaskTwin)
                    cls = OpTask
                else:
                    twin = _new_task(_ChainTaskTwin)
                    twin.chain = chain
                    cls = ChainTask
            else:
                twin = _new_task(_OverTaskTwin)
                twin.over = over
                cls = OverTask
            twin.then_s = then
            twin.send_s = 0.0
            twin.send = None
        twin.tid = tid
        twin.kind = kind
        twin.device = device
        twin.stream = stream
        twin.duration_s = duration_s if type(duration_s) is float else float(duration_s)
        twin.deps = clean
        twin.label = label
        twin.microbatch = microbatch
        twin.chunk = chunk
        twin.comm = comm
        twin.__class__ = cls  # type: ignore[assignment]
        tasks.append(twin)  # type: ignore[arg-type]
        if device not in self._device_set:
            self._device_set.add(device)
            self.devices.append(device)
        return tid

    def add_over(
        self,
        device: str,
        duration_s: float,
        deps: tuple[int, ...] | list[int],
        label: str,
        microbatch: int,
        chunk: int,
        then: tuple[float, ...],
        over: tuple[str, float],
    ) -> int:
        """Append an :class:`OverTask` on ``device``'s compute stream (the fields and the
        dependency cleaning of :meth:`add` given ``then``, and :attr:`OverTask.over`); returns
        its id."""
        return self.add(
            TaskKind.COMPUTE,
            device,
            "compute",
            duration_s,
            deps,
            label,
            microbatch,
            chunk,
            None,
            then,
            over,
        )

    def add_chain(
        self,
        device: str,
        deps: list[int],
        label: str,
        microbatch: int,
        chunk: int,
        chain: tuple[ChainStatic, int, int],
    ) -> int:
        """Append a :class:`ChainTask` on ``device``'s compute stream waiting on ``deps`` (the
        operation's; negative ids, no dependency, are dropped: the stage's first operation
        without a host task waits on ``-1``): :meth:`add`'s task of 0 seconds with ``then_s``
        :data:`CHAIN_MARK`; returns its id. The stores and the dependency cleaning are
        mirrored inline in ``OperationReplay.run_chain_schedule``;
        ``tests/parallel/test_plain_loop.py`` compares."""
        return self.add(
            TaskKind.COMPUTE,
            device,
            "compute",
            0.0,
            deps,
            label,
            microbatch,
            chunk,
            None,
            CHAIN_MARK,
            None,
            chain,
        )

    def build(self, multiplicity: int = 1) -> TaskGraph:
        return TaskGraph(tuple(self.tasks), tuple(self.devices), multiplicity, tuple(self.notes))
