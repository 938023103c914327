"""Executing a :class:`~perfmodel.parallel.taskgraph.TaskGraph`: SimPy and the analytic fast path.

Both executors apply the same rule: a task starts when its stream (a capacity-one FIFO resource
in program order, as a CUDA stream) is free and all its dependencies have finished.

* :func:`simulate` builds a **fresh** ``simpy.Environment`` per call, one process per stream.
  Communication tasks are either timed by their closed-form duration or, with a ``network``
  (``perfmodel.comm.FlowNetwork`` adapter, see :class:`FlowComm`), replayed as flows over the
  topology's directed links with max-min fair sharing, so concurrent collectives and transfers
  (including symmetric sibling groups) contend for links.
* :func:`evaluate` is the analytic fast path: one pass over the tasks in id order (ids are a
  topological order that respects program order), no events. With closed-form communication
  it returns exactly what :func:`simulate` returns; it is what plan search uses.

Results are deterministic: no randomness, ties broken by task id.

Kept whole (issue 29): :func:`periodic_timeline` (~175 lines, 50 of them docstring) checks
and extends one short schedule's window in one pass over it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from perfmodel._memo import made_once
from perfmodel.errors import ConfigError
from perfmodel.parallel.periodic import (
    WINDOW_BACK,
    LazyGraph,
    PeriodicGraph,
    short_limit,
    window_gap,
)
from perfmodel.parallel.taskgraph import (
    CHAIN,
    CHAIN_MARK,
    HEAD,
    SENT,
    CommSpec,
    OverTask,
    Task,
    TaskGraph,
)
from perfmodel.sim.chains import (
    LOW,
    SHIFT,
    ChainEntry,
    Free,
    _chain,
    _dep_end,
    _early_mark,
    _encoded_end,
    chain_marks,
    chain_rows,
    mark_count,
)

if TYPE_CHECKING:  # simpy is imported by simulate: the analytic fast path does not load it
    import simpy


@dataclass(frozen=True)
class Timeline:
    """Start and end time (seconds) of every task of a graph."""

    graph: TaskGraph
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    fidelity: str = "analytic"
    #: Per :class:`~perfmodel.parallel.taskgraph.ChainTask` id, what the analytic list schedule
    #: kept of it (``chains.ChainEntry``: its marks, its rows or what makes them; ``None``: the
    #: graph has none)
    chains: dict[int, ChainEntry] | None = field(default=None, compare=False, repr=False)
    #: Seconds each device's compute stream is busy, summed as
    #: ``perfmodel.report.step_breakdown._compute_busy`` sums them (kept by the analytic list
    #: schedule, :func:`_list_schedule` and :func:`_chain_mode`; ``None``: that function sums
    #: them)
    busy_s: dict[str, float] | None = field(default=None, compare=False, repr=False)
    #: Per :class:`~perfmodel.parallel.taskgraph.OverTask` id, the start of its TP collective
    #: on its own stream (the analytic list schedule's, :func:`_over`; ``None``: the graph has
    #: none)
    overs: dict[int, float] | None = field(default=None, compare=False, repr=False)

    @property
    def makespan_s(self) -> float:
        return max(self.end_s, default=0.0)

    def records(self) -> list[tuple[Task, float, float]]:
        return [(t, self.start_s[t.tid], self.end_s[t.tid]) for t in self.graph.tasks]

    def chain_marks(self, tid: int) -> list[float]:
        """The marks of chain task ``tid`` (``chains.chain_marks``; errors as
        :meth:`chain_rows`)."""
        entry = self._chain_entry(tid, "chain_marks")
        return chain_marks(self.graph.tasks[tid].chain[0], entry)  # type: ignore[attr-defined]

    def chain_rows(self, tid: int) -> list[tuple[float, ...]]:
        """The rows of chain task ``tid`` (``chains.chain_rows``).

        Raises
        ------
        ConfigError
            ``tid`` is no :class:`~perfmodel.parallel.taskgraph.ChainTask` this timeline
            scheduled: on a :class:`CoarseTimeline` (what ``predict`` returns for a plan with a
            coarse analytic graph) the chains are those of the analytic graph, on ``.coarse``
            (task ids of ``.coarse.graph``); the whole graph it reads times from has none.
        """
        entry = self._chain_entry(tid, "chain_rows")
        return chain_rows(self.graph.tasks[tid].chain[0], entry)  # type: ignore[attr-defined]

    def _chain_entry(self, tid: int, method: str) -> ChainEntry:
        """What the list schedule kept of chain task ``tid`` (:meth:`chain_rows`' errors)."""
        chains = self.chains
        entry = None if chains is None else chains.get(tid)
        if entry is None:
            if isinstance(self, CoarseTimeline):
                where = (
                    "the gather chains of this CoarseTimeline are those of its analytic graph: "
                    f"timeline.coarse.{method}(tid), with task ids of timeline.coarse.graph"
                )
            elif not chains:
                where = f"this {type(self).__name__}'s graph holds no gather chains"
            else:
                ids = sorted(chains)
                where = f"its chain task ids: {ids[:8]}{' ...' if len(ids) > 8 else ''}"
            raise ConfigError(
                f"task {tid} is not a gather chain (ChainTask) of this timeline; {where}",
                value=tid,
                where=f"Timeline.{method}",
            )
        return entry


class _WholeOnRead(Timeline):
    """A timeline whose per-task times (``start_s``, ``end_s``, :meth:`records`) are those of
    the whole graph's timeline, executed when first read (:meth:`whole`): traces, Gantt charts
    and Chakra export read them, the report reads a cheaper schedule."""

    def _run_whole_graph(self) -> Timeline:
        """Execute the whole graph (called once)."""
        raise NotImplementedError

    def whole(self) -> Timeline:
        """The whole graph's timeline (executed on the first call)."""
        return made_once(self, "_whole", self._run_whole_graph)

    @property
    def start_s(self) -> tuple[float, ...]:  # type: ignore[override]
        return self.whole().start_s

    @property
    def end_s(self) -> tuple[float, ...]:  # type: ignore[override]
        return self.whole().end_s


class CoarseTimeline(_WholeOnRead):
    """The timeline of a :class:`~perfmodel.parallel.periodic.LazyGraph` whose coarse graph was
    executed: ``makespan_s`` and the report's fields (:func:`perfmodel.report.step_breakdown.breakdown`,
    :func:`~perfmodel.report.step_breakdown.critical_device`) come from :attr:`coarse`; ``start_s``,
    ``end_s`` and :meth:`records` are the whole (fine) graph's, executed when first read
    (traces, Gantt charts, Chakra export), so they match :attr:`graph`'s tasks.

    Attributes
    ----------
    coarse
        Timeline of ``graph.coarse()`` (the SimPy replay) or ``graph.analytic()`` (the analytic
        list schedule).
    """

    def __init__(self, graph: LazyGraph, coarse: Timeline, whole: Callable[[], Timeline]) -> None:
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "fidelity", coarse.fidelity)
        object.__setattr__(self, "coarse", coarse)
        object.__setattr__(self, "_run_whole", whole)
        object.__setattr__(self, "_whole", None)

    def _run_whole_graph(self) -> Timeline:
        return self._run_whole()  # the same executor as the coarse graph's

    @property
    def makespan_s(self) -> float:
        return self.coarse.makespan_s

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the whole graph's timeline (the executor closure does not pickle)."""
        tl = self.whole()
        return (Timeline, (self.graph, tl.start_s, tl.end_s, tl.fidelity))


#: Tolerance of the periodicity check, relative to the short schedule's makespan: times are
#: sums of durations, so a shifted copy agrees to a few ulps (1e-16 relative each), not exactly.
PERIOD_RTOL = 1e-12

_DEVICE, _STREAM = attrgetter("device"), attrgetter("stream")
"""Sort keys of an interleaved unit's tasks in :func:`periodic_timeline`: a micro-batch's tasks
by (device, stream), stably (program order within a stream)."""


class PeriodicTimeline(_WholeOnRead):
    """The timeline of a :class:`~perfmodel.parallel.periodic.PeriodicGraph`, extended from a
    short schedule (see :func:`periodic_timeline`).

    ``makespan_s`` and the report's fields (:func:`perfmodel.report.step_breakdown.breakdown`,
    :func:`~perfmodel.report.step_breakdown.critical_device`) come from the short schedule; ``start_s``,
    ``end_s`` and :meth:`records` schedule the whole graph when first read (traces, Gantt charts).

    Attributes
    ----------
    short
        Timeline of the short schedule (``graph.short(k)``, ``k`` micro-batches).
    extra
        Periods the step has beyond the short schedule, ``(m - k) / unit`` (a unit is one
        micro-batch for 1F1B, ``pp`` for interleaved 1F1B: :attr:`PeriodicGraph.unit`).
    period_s
        ``lambda``: how much later each unit of the periodic regime runs than the previous
        one, seconds.
    window_s
        ``tau``: a time of the short schedule from which ``[tau, tau + lambda)`` is one
        period (only checked micro-batches run in ``[tau - lambda, tau + 2 lambda]``).
    period_tids
        Task ids of one unit of the periodic regime (one period's work).
    """

    def __init__(
        self,
        graph: PeriodicGraph,
        short: Timeline,
        extra: int,
        period_s: float,
        window_s: float,
        period_tids: tuple[int, ...],
    ) -> None:
        object.__setattr__(self, "graph", graph)
        object.__setattr__(self, "fidelity", "analytic")
        object.__setattr__(self, "short", short)
        object.__setattr__(self, "extra", extra)
        object.__setattr__(self, "period_s", period_s)
        object.__setattr__(self, "window_s", window_s)
        object.__setattr__(self, "period_tids", period_tids)
        object.__setattr__(self, "_whole", None)

    def _run_whole_graph(self) -> Timeline:
        return _list_schedule(self.graph.full())

    @property
    def makespan_s(self) -> float:
        """The short schedule's makespan plus ``extra`` periods."""
        return self.short.makespan_s + self.extra * self.period_s


def periodic_timeline(graph: PeriodicGraph, k: int, fine: bool = False) -> PeriodicTimeline | int:
    """Extend the ``k``-micro-batch schedule of ``graph`` to its ``m`` micro-batches; where
    the short schedule does not show the periodic regime, the micro-batches of a short schedule
    that might (``0``: none): twice ``k`` when too few micro-batches were periodic, or enough
    to take the period after a task outside them that runs where it would be taken (an eager
    host's kernel issue, as long as the step's).

    The check runs on *units* of ``u = graph.unit`` consecutive micro-batches (1F1B: one;
    interleaved 1F1B: ``pp``, the micro-batches that run each chunk once per round), on the
    short schedule's list schedule: a run of units ``j0 .. j1`` whose tasks (same kinds,
    streams and durations, in program order) each start and end ``lambda`` after unit
    ``j - 1``'s (to :data:`PERIOD_RTOL`), long enough to hold two consecutive steady
    iterations and a time ``tau`` such that only units ``j0 + 1 .. j1 - 1`` run in
    ``[tau - lambda, tau + 2 lambda]`` while every task outside them ends before or starts
    after that window (including the makespan's).

    Why that is exact: the list schedule is max-plus linear (``start = max(stream free, deps
    end)``, ``end = start + duration``), so it commutes with a uniform shift of its inputs. A
    steady 1F1B iteration ``i`` (stage ``s`` runs forward ``i + pp - s - 1`` and backward ``i``)
    depends only on iteration ``i - 1`` and on itself: each stream's previous task, stage
    ``s - 1``'s forward send (one iteration earlier), stage ``s + 1``'s backward send (the same
    iteration); a backward's dependence on its own forward never binds (the forward ran
    earlier on the same stream). Interleaved 1F1B: in the steady part stage ``s``'s ``n``-th
    pair is the forward of virtual micro-batch ``n + w_s`` and the backward of ``n``
    (``w_s = 2 (pp - s - 1) + (v - 1) pp`` warm-up forwards); with iteration ``t`` the pairs
    ``n = t + s`` of every stage, each dependence goes to iteration ``t - 1`` (a forward's
    input from stage ``s - 1``, pair ``n - 2``, or on stage 0 from the last stage's previous
    chunk, pair ``n + pp - 2``; a backward's from stage ``s + 1``, pair ``n``, or on the last
    stage from stage 0's next chunk, pair ``n - pp``; the stream's previous task) or stays in
    its pair, and shifting by one unit (``pp v`` virtual micro-batches: micro-batch ``j`` to
    ``j + pp``, the same chunk) maps the steady part onto itself; a block of ``pp v``
    iterations uses units ``T .. T + 2``. Two consecutive iterations shifted by ``lambda``
    therefore make every further steady iteration another ``lambda`` later, and the cool-down
    and the end of the step (gradient reduction, optimizer) follow the last one. The step with
    ``m`` micro-batches is the short one with ``(m - k) / u`` periods inserted at ``tau``: the
    makespan grows by ``(m - k) / u`` times ``lambda`` and every per-device time (busy
    compute, breakdown classes) by as many times its value over ``[tau, tau + lambda)``.

    Gather chains: every :class:`~perfmodel.parallel.taskgraph.ChainTask` has the same kind,
    ``duration_s`` and ``then_s`` whatever fine tasks it stands for, so the unit check could
    not tell two chains apart, and the extension would not carry the inserted periods' chain
    rows the breakdown reads (``periodic_count`` offers none where gathers are per micro-batch,
    ZeRO-3/FSDP). Megatron-Core's and pipelined FSDP2's first-forward chains (``fine``: the
    short schedule lowered without them, :meth:`~perfmodel.parallel.periodic.PeriodicGraph.
    fine_short`, refuses any) are accepted where the fine schedule gives the same decision and
    numbers (:func:`_chains_outside`): every chain time is its fine tasks' bit for bit
    (``chains._chain``), so the other tasks' times are the fine schedule's; where not, the
    check runs on the fine schedule.
    """
    u = graph.unit
    g = graph.fine_short(k) if fine else graph.short(k)
    tl = _list_schedule(g)
    if tl.chains is not None and fine:
        return 0
    tasks, start, end = g.tasks, tl.start_s, tl.end_s
    overs = tl.overs
    by_unit, loose, mb = _units(tasks, u)
    n = k // u
    span = tl.makespan_s
    tol = PERIOD_RTOL * span
    first = [start[by_unit[j][0].tid] for j in range(n)]
    # the longest run of units each a shifted copy of the previous
    ok = [False] * n
    for j in range(1, n):
        a, b = by_unit[j - 1], by_unit[j]
        if len(a) != len(b):
            continue
        lam = first[j] - first[j - 1]
        for x, y in zip(a, b, strict=True):  # a loop, not all(<generator>): the same test
            xt, yt = x.tid, y.tid
            if not (
                x.kind is y.kind
                and x.device == y.device
                and x.stream == y.stream
                and x.duration_s == y.duration_s
                and x.then_s == y.then_s
                and x.send_s == y.send_s
                and abs(start[yt] - start[xt] - lam) <= tol
                and abs(end[yt] - end[xt] - lam) <= tol
                and (
                    overs is None
                    or (x.over is None and y.over is None)
                    or _over_shifted(x, y, start, overs, lam, tol)
                )
            ):
                break
        else:
            ok[j] = True
    best = (0, 0)  # (j0, j1): units j0 + 1 .. j1 each shifted from the previous
    j = 1
    while j < n:
        if not ok[j]:
            j += 1
            continue
        j0 = j - 1
        while j < n and ok[j]:
            j += 1
        if j - 1 - j0 > best[1] - best[0]:
            best = (j0, j - 1)
    j0, j1 = best
    unit: list[int] = []  # each task's unit (-1: none), for the chains only
    if tl.chains is not None:
        unit = mb if u == 1 else [j // u for j in mb]
        if not _chains_outside(tl, unit, j0, j1, math.inf):
            return periodic_timeline(graph, k, True)
    P = len(g.devices)  # one simulated device per pipeline stage
    # tau: when unit `mid` starts; around it run backwards of older units and forwards of up
    # to one newer, all of which must be periodic
    mid = j1 - WINDOW_BACK
    if u == 1:
        # steady iterations i (stage s: forward i + P - s - 1, backward i; the last
        # micro-batch's backward reduces gradients) whose micro-batches i .. i + P - 1 are all
        # shifted copies
        steady = range(j0 + 1, min(j1 - P + 1, k - P, k - 2) + 1)
        short_of = mid < j0 + window_gap(u, P)
    else:
        # steady blocks T of iterations (units T .. T + 2, none of them the last unit, whose
        # last micro-batch reduces gradients) whose units are all shifted copies
        steady = range(j0 + 1, min(j1 - 2, n - 3) + 1)
        short_of = mid < j0 + window_gap(u, P)
    if len(steady) < 2 or short_of:
        return 2 * k
    lam = (first[j1] - first[j0]) / (j1 - j0)
    if not lam > 0:
        return 0
    tau = first[mid]
    lo, hi = tau - lam, tau + 2 * lam
    blocked = 0.0  # latest end of a task outside the periodic units in the window
    lo_tol, hi_tol = lo + tol, hi - tol
    if tl.chains is not None and not _chains_outside(tl, unit, j0, j1, lo_tol):
        return periodic_timeline(graph, k, True)
    # every task outside units j0 + 1 .. j1 - 1 ends before the window or starts after it
    ov = overs or {}  # an OverTask: its pieces, as the tasks they stand for, below
    for run in (loose, *(r for j, r in by_unit.items() if not j0 < j < j1)):
        for t in run:
            tid = t.tid
            if tid in ov:
                continue
            e = end[tid]
            if e <= lo_tol:
                continue
            s = start[tid]
            if s >= hi_tol:
                continue
            if s > lo:  # starts inside the window: no longer schedule moves it out
                return 0
            if e > blocked:  # max(blocked, e)
                blocked = e
    for tid, s_tp in ov.items():
        if j0 < mb[tid] // u < j1:
            continue
        for s, e in over_pieces(tasks[tid], start[tid], end[tid], s_tp):
            if not (e <= lo_tol or s >= hi_tol):
                if s > lo:
                    return 0
                blocked = max(blocked, e)
    if blocked:
        # a longer schedule whose unit `mid` starts two periods after it (its last unit
        # reduces gradients, so `mid` is at most k' / u - 5)
        return u * (j0 + 2 + math.ceil((blocked - first[j0]) / lam) + 5)
    last = end.index(span)  # the first task that ends last (span: the largest end)
    # (an OverTask's last piece ends where it ends, every other piece earlier: it starts there)
    s_last = (
        start[last]
        if overs is None or last not in overs
        else (over_pieces(tasks[last], start[last], span, overs[last])[-1][0])
    )
    # (`// u`: the last task's unit; no lowered step tells it from `mb[last]`, the last task
    # being the optimizer (-1) or of the last unit, outside j0 + 1 .. j1 - 1 either way)
    if j0 < mb[last] // u < j1 or not s_last >= hi_tol:
        return 0
    period = tuple(t.tid for t in by_unit[mid])
    return PeriodicTimeline(graph, tl, (graph.microbatches - k) // u, lam, tau, period)


def _units(tasks: tuple[Task, ...], u: int) -> tuple[dict[int, list[Task]], list[Task], list[int]]:
    """:func:`periodic_timeline`'s grouping of a short schedule's ``tasks`` into units of
    ``u`` micro-batches: each unit's tasks in order, the tasks of no unit, and each task's
    micro-batch (a task without one whose dependencies all belong to one takes it; ``-1``:
    none). ``tests/sim/test_periodic.py`` compares it with a reference grouping."""
    # a task without a micro-batch whose dependencies all belong to one (a "join" after an
    # overlapped TP collective, the last micro-batch's gradient reduction) belongs to it
    mb = [t.microbatch for t in tasks]
    # a unit's tasks: 1F1B in program order; interleaved in the order of its micro-batches
    # (j mod u), each per stream in program order, so task i of unit j is the image of task i
    # of unit j - 1 under the shift by one unit (the lowering's round robin over stages may
    # emit a unit's micro-batches in another interleaving; a stream's order is the schedule's):
    # a micro-batch's tasks in program order, stably sorted by (device, stream) in C
    by_mb: dict[int, list[Task]] = defaultdict(list)
    loose: list[Task] = []  # the tasks of no micro-batch
    for t, j in zip(tasks, mb):
        if j < 0:
            deps = t.deps  # one owner: every dependency's micro-batch the same
            if deps:
                o = mb[deps[0] % SENT]
                for d in deps:
                    if mb[d % SENT] != o:
                        break
                else:
                    j = mb[t.tid] = o
            if j < 0:
                loose.append(t)
                continue
        by_mb[j].append(t)
    by_unit = by_mb
    if u > 1:
        by_unit = defaultdict(list)
        for j in sorted(by_mb):
            run = sorted(by_mb[j], key=_STREAM)
            run.sort(key=_DEVICE)  # by (device, stream): two stable sorts, no key tuples
            by_unit[j // u].extend(run)
    return by_unit, loose, mb


def _chains_outside(tl: Timeline, unit: list[int], j0: int, j1: int, lo_tol: float) -> bool:
    """Whether :func:`periodic_timeline`'s check of short schedule ``tl`` with gather chains
    decides as on the same schedule lowered fine (their gathers and computes as tasks), given
    its run ``j0 .. j1`` of shifted units: every chain in a unit ``L >= 0`` with ``L < j0`` and
    ``j1 - j0 > L`` (``lo_tol`` inf: that only), and also (``lo_tol``: the window's start plus the
    tolerance) every chain and its last reduction's end at most ``lo_tol``.

    Why: a chain's times are its fine tasks' (``chains._chain``), so every other task's are;
    the fine schedule's extra tasks sit in the chains' units or in none (a gather waits on a
    compute of its own unit, the first two of a stage's empty history on nothing), each ending
    by its chain's end or last reduction. Unit ``L`` of the fine schedule then holds what unit
    ``L + 1`` lacks: a chain of three segments or more has a third gather there; a chain of
    one hidden run has its run task there (duration 0, its pieces in ``then_s``), where unit
    ``L + 1``'s operation is a plain one (these are first-forward gathers, once a step:
    ``periodic_count`` offers no step that gathers every micro-batch). So the fine schedule's
    shifted-copy test fails there; the two schedules' tests agree for units after ``L + 1``,
    so their longest runs from ``L + 1`` on are the same, and a run within units ``0 .. L`` is
    at most ``L`` long: the fine run is ``j0 .. j1`` too. Tasks ending by ``lo_tol`` neither
    block nor refuse the window, fine or chained."""
    tasks, end, chains = tl.graph.tasks, tl.end_s, tl.chains
    last = max(unit[tid] for tid in chains)  # type: ignore[union-attr]
    if min(unit[tid] for tid in chains) < 0 or not (last < j0 and j1 - j0 > last):  # type: ignore[union-attr]
        return False
    for tid, entry in chains.items():  # type: ignore[union-attr]
        static = tasks[tid].chain[0]  # type: ignore[attr-defined]
        if end[tid] > lo_tol or (static.reducing and entry[mark_count(static) - 1] > lo_tol):
            return False
    return True


def over_pieces(t: Task, s: float, e: float, s_tp: float) -> list[tuple[float, float]]:
    """The intervals of the tasks an :class:`~perfmodel.parallel.taskgraph.OverTask` ``t``
    stands for, in their program order, given its start ``s``, end ``e`` and its TP
    collective's start ``s_tp`` (:attr:`Timeline.overs`): the first compute, the collective,
    the exposed tail, and (where later segments extended it) the operation task that followed,
    each bound computed with the floating-point operations of :func:`_list_schedule` for those
    tasks (:func:`_over`)."""
    c = s + t.duration_s
    f = s_tp + t.over[1]  # type: ignore[index]
    a = f if f > c else c
    b = a + t.then_s[0]
    pieces = [(s, c), (s_tp, f), (a, b)]
    if len(t.then_s) > 1:
        pieces.append((b, e))
    return pieces


def over_busy(b: float, t: Task, s: float, e: float, s_tp: float) -> float:
    """``b`` plus the compute-stream seconds of :class:`~perfmodel.parallel.taskgraph.OverTask`
    ``t`` (start ``s``, end ``e``, its TP collective's start ``s_tp``): each piece of
    :func:`over_pieces` but the collective (on its own stream), in their order, as
    ``(b + end) - start``, the operations with which busy seconds are summed per task
    (``perfmodel.report.step_breakdown._compute_busy``, :func:`_chain_mode`)."""
    c = s + t.duration_s  # over_pieces' bounds, the same operations
    f = s_tp + t.over[1]  # type: ignore[index]
    a = f if f > c else c
    x = a + t.then_s[0]
    b = b + c - s
    b = b + x - a
    return b + e - x if len(t.then_s) > 1 else b


def _over_shifted(
    x: Task, y: Task, start: tuple[float, ...], overs: dict[int, float], lam: float, tol: float
) -> bool:
    """:func:`periodic_timeline`'s unit test for the pieces of two tasks at one place of two
    units (their fields already equal, their starts and ends ``lam`` apart to ``tol``): both
    plain, or both :class:`~perfmodel.parallel.taskgraph.OverTask` with the same ``over``
    whose pieces (:func:`over_pieces`: ``(s, c)``, ``(s_tp, f)``, ``(a, b)`` and, with later
    segments, ``(b, e)``) each start and end ``lam`` later (to ``tol``), as the tasks they
    stand for were compared. ``s`` and ``e`` are the task's start and end, which the caller
    compared, so the bounds left are ``c``, ``s_tp``, ``f`` and ``b`` (``a = max(c, f)``:
    rounding is monotonic, so ``a``'s shift lies between ``c``'s and ``f``'s, within ``tol`` of
    ``lam`` where both are, and needs no test of its own), computed here
    with :func:`over_pieces`' operations (the same floats; before: each task's pieces as
    lists, kept by task id: Megatron-Core's dp2 tp32 pp16 GPT-3 175B short schedule, 448
    pairs of its ~640 ``OverTask``s)."""
    xo, yo = x.over, y.over
    if xo != yo:
        return False
    if xo is None:
        return True
    xt, yt = x.tid, y.tid
    sx, sy = start[xt], start[yt]
    cx, cy = sx + x.duration_s, sy + y.duration_s
    px, py = overs[xt], overs[yt]  # the TP collectives' starts
    fx, fy = px + xo[1], py + yo[1]  # type: ignore[index]
    ax = fx if fx > cx else cx
    ay = fy if fy > cy else cy
    return (
        abs(cy - cx - lam) <= tol
        and abs(py - px - lam) <= tol
        and abs(fy - fx - lam) <= tol
        and abs(ay + y.then_s[0] - (ax + x.then_s[0]) - lam) <= tol
    )


class CommRunner(Protocol):
    """Plays one communication task inside a SimPy environment."""

    def run(self, spec: CommSpec, duration_s: float) -> simpy.Event: ...


def evaluate(graph: TaskGraph) -> Timeline:
    """Analytic list schedule of ``graph`` (no SimPy): ``start = max(stream free, deps end)``.

    A :class:`~perfmodel.parallel.periodic.PeriodicGraph` whose short schedule passes
    :func:`periodic_timeline`'s check is not lowered in full: the result is a
    :class:`PeriodicTimeline` (same makespan and report fields, the per-task times computed
    when first read); otherwise the whole graph is lowered and scheduled: a
    :class:`~perfmodel.parallel.periodic.LazyGraph`'s analytic graph (its coarse one with
    summarised gradient reductions, :meth:`~perfmodel.parallel.periodic.LazyGraph.analytic`), as a
    :class:`CoarseTimeline` (the fine graph's per-task times scheduled when first read).

    >>> from perfmodel.parallel.taskgraph import GraphBuilder, TaskKind
    >>> b = GraphBuilder()
    >>> a = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    >>> c = b.add(TaskKind.COLLECTIVE, "g0", "dp", 2.0, [a])
    >>> d = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [a])
    >>> evaluate(b.build()).end_s
    (1.0, 3.0, 2.0)
    """
    if isinstance(graph, PeriodicGraph):
        # short schedules while they cost less than the whole one (at most twice its cost)
        k, spent = graph.short_microbatches, 0
        while spent + k <= graph.microbatches and k <= short_limit(graph.microbatches):
            tl = periodic_timeline(graph, k)
            if isinstance(tl, PeriodicTimeline):
                return tl
            if tl <= k:  # no longer short schedule would pass
                break
            k, spent = tl, spent + k
    if isinstance(graph, LazyGraph):
        lazy = graph
        if not lazy.analytic_merged:
            return _list_schedule(lazy.full())
        return CoarseTimeline(
            lazy, _list_schedule(lazy.analytic()), lambda: _list_schedule(lazy.full())
        )
    return _list_schedule(graph)


def _list_schedule(graph: TaskGraph) -> Timeline:
    """:func:`evaluate` of every task of ``graph``."""
    n = len(graph.tasks)
    start = [0.0] * n
    end = [0.0] * n
    # when each stream is next free, per device then stream (chains.Free): two lookups by
    # string a task where a (device, stream) key tuple was made, hashed and compared with the
    # stored one (another object: ~0.5 us a task, ~10% of the loop)
    free: Free = defaultdict(dict)
    tasks = graph.tasks
    chains: dict[int, ChainEntry] = {}
    overs: dict[int, float] = {}
    # each device's busy compute seconds, summed as step_breakdown._compute_busy sums them (in
    # task order, (busy + end) - start per compute-stream task, over_busy per OverTask), kept
    # here so that reader needs no pass of its own (Timeline.busy_s)
    busy: dict[str, float] = {}
    busy_get = busy.get
    for t in tasks:
        dev, stream = t.device, t.stream
        fd = free[dev]
        s = fd.get(stream, 0.0)
        # every dependency's end: chains._dep_end's cases inline (a call per dependency cost
        # 20% more here: 1.10-1.13 ms against 0.91-0.93 ms, megatron's 3,105-task dp8 tp16 pp8
        # GPT-3 graph, 7,436 dependencies); _chain_mode's loop repeats them. No chain's mark
        # is read here: only a task after a chain depends on its marks, and at the first
        # chain the loop hands over to _chain_mode (a mark would reach _encoded_end, which
        # decodes it). A new encoding goes in all four: chains._dep_end, both loops and _over
        # (tests/sim/test_dependency_kinds.py schedules every kind before and after a chain)
        for d in t.deps:
            if d < SENT:
                e = end[d]
            elif d < HEAD:  # the pipeline send folded into task d - SENT ends send_s after it
                d -= SENT
                e = end[d] + tasks[d].send_s
            else:  # piece_end (a chain's mark only after a chain: _chain_mode)
                e = _encoded_end(d, start, end, tasks, chains)
            if e > s:
                s = e
        tid = t.tid
        then = t.then_s
        if then is CHAIN_MARK:  # a gather chain: this task and the rest in _chain_mode
            _chain_mode(graph, tid, start, end, free, chains, overs, busy)
            return Timeline(
                graph,
                tuple(start),
                tuple(end),
                "analytic",
                chains=chains,
                busy_s=busy,
                overs=overs or None,
            )
        start[tid] = s
        e = s + t.duration_s
        over = False
        if then:  # an operation task: its segments' TP collectives and computes that follow
            # an OverTask (its first TP collective beside it, the longer): the one class whose
            # over is set (GraphBuilder.add makes one only given it); t.over of any other task
            # is a class attribute, read by the generic lookup, so the type is tested
            if type(t) is OverTask:
                over = True
                e = _over(t, e, free, start, end, tasks, chains, overs)
            if len(then) == 1:  # most operation tasks: the same addition, no iterator
                e += then[0]
            else:
                for x in then:
                    e += x
        end[tid] = e
        fd[stream] = e
        if stream == "compute":  # as _compute_busy adds them: an OverTask's compute pieces
            if over:
                busy[dev] = over_busy(busy_get(dev, 0.0), t, s, e, overs[tid])
            else:
                busy[dev] = busy_get(dev, 0.0) + e - s
    return Timeline(graph, tuple(start), tuple(end), "analytic", busy_s=busy, overs=overs or None)


def _chain_mode(
    graph: TaskGraph,
    i0: int,
    start: list[float],
    end: list[float],
    free: Free,
    chains: dict[int, ChainEntry],
    overs: dict[int, float],
    busy: dict[str, float],
) -> None:
    """:func:`_list_schedule` from its first chain task ``i0`` on,
    the same loop, adding to ``busy`` (each device's busy compute seconds of the tasks before
    ``i0``) as ``perfmodel.report.step_breakdown._compute_busy`` adds them, in task order with
    the same operations: ``(busy + end) - start`` per compute-stream task, ``(busy + e_i) -
    cs_i`` per segment of a chain (``chains._chain``), :func:`over_busy` per
    :class:`~perfmodel.parallel.taskgraph.OverTask` (a Megatron-Core graph holds both: its
    first forward's gathers as chains, later segments as OverTasks), so that reader needs not
    read every chain's segments again."""
    tasks = graph.tasks
    get = busy.get
    for t in tasks[i0:]:
        dev, stream = t.device, t.stream
        fd = free[dev]
        s = fd.get(stream, 0.0)
        # _list_schedule's dependency loop, the same cases (chains._dep_end's, inline; a new
        # encoding goes in all four: tests/sim/test_dependency_kinds.py)
        for d in t.deps:
            if d < SENT:
                e = end[d]
            elif d < HEAD:
                d -= SENT
                e = end[d] + tasks[d].send_s
            elif d >= CHAIN:
                d -= CHAIN  # divmod(d, SENT) as two bit operations (chains.SHIFT)
                e = chains[d & LOW][d >> SHIFT]
                if e is None:  # a flat chain's mark not kept (chains.FLAT_CHAINS)
                    e = _early_mark(d, tasks, chains)
            else:
                e = _encoded_end(d, start, end, tasks, chains)
            if e > s:
                s = e
        tid = t.tid
        then = t.then_s
        if then is CHAIN_MARK:  # a gather chain: its fine tasks' recurrence
            mine = busy if stream == "compute" else None
            s, e = _chain(t, s, free, start, end, tasks, chains, mine)  # type: ignore[arg-type]
            start[tid] = s
            end[tid] = e
            fd[stream] = e
            continue
        start[tid] = s
        e = s + t.duration_s
        over = False
        if then:
            if type(t) is OverTask:  # as _list_schedule tests and runs it
                over = True
                e = _over(t, e, free, start, end, tasks, chains, overs)
            if len(then) == 1:
                e += then[0]
            else:
                for x in then:
                    e += x
        end[tid] = e
        fd[stream] = e
        if stream == "compute":
            if over:  # its compute-stream pieces, as _compute_busy adds them
                busy[dev] = over_busy(get(dev, 0.0), t, s, e, overs[tid])
            else:
                busy[dev] = get(dev, 0.0) + e - s


def _over(
    t: Task,
    e: float,
    free: Free,
    start: list[float],
    end: list[float],
    tasks: tuple[Task, ...],
    chains: dict[int, ChainEntry],
    overs: dict[int, float],
) -> float:
    """The end of an :class:`~perfmodel.parallel.taskgraph.OverTask` ``t``'s first compute
    (``e``) and its TP collective, the later: the collective starts when its stream is free
    and ``t``'s dependencies have ended (kept in ``overs``; its stream is then free at its
    end), and the exposed tail (``then_s[0]``) when both have ended, as the three tasks it
    stands for ran (``lower_replay.OperationReplay.over_op`` says why bit for bit)."""
    stream, tp_s = t.over  # type: ignore[misc]
    fd = free[t.device]
    s = fd.get(stream, 0.0)
    for d in t.deps:  # a task's or its folded send's end inline, else the one decoder's call
        if d < SENT:  # (~640 OverTasks in Megatron-Core's dp2 tp32 pp16 GPT-3 short schedule)
            x = end[d]
        elif d < HEAD:
            x = end[d - SENT] + tasks[d - SENT].send_s
        else:
            x = _dep_end(d, start, end, tasks, chains)
        if x > s:
            s = x
    overs[t.tid] = s
    f = s + tp_s
    fd[stream] = f
    return f if f > e else e


def simulate(
    graph: TaskGraph,
    *,
    network_factory: Callable[[simpy.Environment], CommRunner] | None = None,
) -> Timeline:
    """Execute ``graph`` in a fresh SimPy environment.

    Parameters
    ----------
    network_factory
        Builds the communication runner for the new environment (e.g. a
        :class:`FlowComm` over ``perfmodel.comm.FlowNetwork``). ``None``: communication tasks
        take their closed-form ``duration_s``.

    A :class:`~perfmodel.parallel.periodic.LazyGraph` with a coarse graph runs that one, as a
    :class:`CoarseTimeline` (the fine graph simulated, in a fresh environment, when its per-task
    times are first read): the merged tensor-parallel collectives carry no
    :class:`~perfmodel.parallel.taskgraph.CommSpec`, so they load no link and the coarse
    simulation equals the fine one up to summation order (docs/design.md, "Stacks of segments
    as one task").

    The run keeps glibc's freed heap top (:func:`perfmodel._malloc.keep_heap`): the flow
    replay's rate computations allocate and free arrays at every event.
    """
    if isinstance(graph, LazyGraph):
        lazy = graph
        if not lazy.merged:
            return simulate(lazy.full(), network_factory=network_factory)
        return CoarseTimeline(
            lazy,
            simulate(lazy.coarse(), network_factory=network_factory),
            lambda: simulate(lazy.full(), network_factory=network_factory),
        )
    from perfmodel._malloc import keep_heap

    with keep_heap():  # the flow replay's rate arrays: no heap trimming between events
        return _simulate(graph, network_factory)


def _simulate(
    graph: TaskGraph, network_factory: Callable[[simpy.Environment], CommRunner] | None
) -> Timeline:
    """:func:`simulate` of a whole graph."""
    import simpy

    env = simpy.Environment()
    runner = network_factory(env) if network_factory is not None else None
    n = len(graph.tasks)
    done = [env.event() for _ in range(n)]
    start = [0.0] * n
    end = [0.0] * n

    def stream_proc(tids: list[int]) -> Any:
        for tid in tids:
            task = graph.tasks[tid]
            pending = [done[d] for d in task.deps if not done[d].processed]
            if len(pending) == 1:
                yield pending[0]
            elif pending:
                yield env.all_of(pending)
            start[tid] = env.now
            if runner is not None and task.comm is not None:
                yield runner.run(task.comm, task.duration_s)
            elif task.duration_s > 0:
                yield env.timeout(task.duration_s)
            end[tid] = env.now
            done[tid].succeed()

    for _, tids in sorted(graph.streams().items(), key=lambda kv: kv[1][0]):
        env.process(stream_proc(tids))
    env.run()
    missing = [t.tid for t in graph.tasks if not done[t.tid].processed]
    if missing:  # pragma: no cover - a lowering bug (cyclic wait)
        raise RuntimeError(f"simulation deadlocked; {len(missing)} tasks never ran")
    return Timeline(graph, tuple(start), tuple(end), "simulated")


class FlowComm:
    """Adapter: run :class:`CommSpec` tasks on ``perfmodel.comm``'s flow-level network.

    Each collective of the spec's group and of its ``siblings`` is started with
    ``perfmodel.comm.run_collective`` on one shared ``FlowNetwork``; the task finishes when the
    representative group's collective finishes (siblings keep loading the links meanwhile).
    Point-to-point specs (``sendrecv`` with a two-endpoint group) use ``FlowNetwork.send`` (the
    closed form's latency, counted once).

    Parameters
    ----------
    env, topology, link_params
        The environment of this simulation, the system and its link overrides.
    max_group
        Collectives over more ranks than this keep their closed-form duration (the analytic
        sharing factor already covers their siblings). Replaying them is cheap now (one flow
        per ring channel), but each sibling group needs its own ring analysis: for the
        128-rank data-parallel groups of Llama-3 405B on 16,384 H100 that is ~7 s CPU for an
        identical iteration time (9.8968 s either way).
    coarse
        ``True`` (default): each ring channel is one flow over all its links carrying the
        channel's bytes (``run_collective(..., coarse=True)``), so a collective costs a few
        flow events instead of ``2 (n - 1)`` steps x ``n`` hops x sub-chunks. Exact where the
        ring's links carry nothing else (it is the closed form), within 1% of the step-by-step
        replay under contention in the tests (docs/design.md, "Coarsening of the step
        simulation"). ``False``: the chunk-by-chunk replay, kept as the reference.
    chunks
        Sub-chunks per ring step of the chunk-by-chunk replay (``run_collective``'s).
    model
        The ``CommCostModel`` that timed the graph's tasks: its links and cached group
        analyses (ring channels) are reused instead of being rebuilt for this environment.
    replay_small
        ``False`` (default, with ``coarse``): a small collective replayed chunk by chunk (NCCL's
        LL protocol on a tree or a broadcast/reduce chain, :meth:`small_collective`) takes its
        task's closed-form duration and loads no link, as the collectives over more than
        ``max_group`` ranks do; ``True``: it is replayed (the reference). See docs/design.md,
        "Coarsening of the step simulation".
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Any,
        link_params: Any = None,
        *,
        max_group: int = 16,
        coarse: bool = True,
        chunks: int = 4,
        model: Any = None,
        replay_small: bool = False,
    ) -> None:
        from perfmodel import comm

        self.env = env
        self.max_group = max_group
        self.coarse = coarse
        self.chunks = chunks
        self.net = comm.FlowNetwork(env, topology, link_params=link_params, model=model)
        self._run_collective = comm.run_collective
        self._small_closed_form = coarse and not replay_small
        self._small: dict[tuple[Any, ...], bool] = {}

    def run(self, spec: CommSpec, duration_s: float) -> simpy.Event:
        if spec.wait_s > 0:
            return self.env.process(self._after_wait(spec, duration_s))
        return self._start(spec, duration_s)

    def _after_wait(self, spec: CommSpec, duration_s: float) -> Any:
        yield self.env.timeout(spec.wait_s)
        yield self._start(spec, max(duration_s - spec.wait_s, 0.0))

    def _start(self, spec: CommSpec, duration_s: float) -> simpy.Event:
        from perfmodel.ops import CollectiveOp

        if spec.op is CollectiveOp.SENDRECV and len(spec.group) == 2:
            main = self.net.send(spec.group[0], spec.group[1], spec.message_bytes)
            for g in spec.siblings:
                self.net.send(g[0], g[1], spec.message_bytes)
            return main
        if (
            len(spec.group) > self.max_group
            or not spec.message_bytes > 0
            or (self._small_closed_form and self.small_collective(spec))
        ):
            # a zero-byte collective (e.g. expert gradients with nothing to reduce) moves nothing
            return self.env.timeout(duration_s)
        run, kw = self._run_collective, {"coarse": self.coarse, "chunks": self.chunks}
        main = run(self.net, spec.op, spec.message_bytes, spec.group, spec.algorithm, **kw)
        for g in spec.siblings:
            run(self.net, spec.op, spec.message_bytes, g, spec.algorithm, **kw)
        return main

    def small_collective(self, spec: CommSpec) -> bool:
        """Whether collective ``spec`` is a small one whose replay goes chunk by chunk: NCCL's
        tuner (the closed form's choice, as :func:`perfmodel.comm.run_collective` makes it)
        picks the LL protocol for it, and its flow replay is a tree or a broadcast/reduce chain,
        every chunk of every edge a transfer (a 96 KiB all-reduce over 16 DGX A100 is 1,920
        transfers, 15,360 with its seven sibling groups, where a ring channel is one flow).

        NCCL's LL protocol is its small-message protocol: 8 bytes of flag with every 8 bytes of
        data halve its bandwidth, so the tuner picks it only for messages whose time the
        latency decides or nearly (NCCL ``src/graph/tuning.cc``; at most a few hundred KiB per
        rank on the catalogue's systems). Such a collective takes its task's duration (the
        analytic fidelity's: its closed form with its sibling groups' sharing) and loads no
        link, as the collectives over more than ``max_group`` ranks do: the step simulation
        drops only how its few bytes contend with other flows, both ways (docs/design.md,
        "Coarsening of the step simulation", states the bound). Memoised per (op, bytes, group,
        algorithm)."""
        from perfmodel.comm.params import Algorithm, Protocol
        from perfmodel.ops import CollectiveOp

        key = (spec.op, spec.message_bytes, spec.group, spec.algorithm)
        hit = self._small.get(key)
        if hit is None:
            hit = False
            if len(spec.group) > 1 and spec.op is not CollectiveOp.SENDRECV:
                ref = self.net.cost_model()._analytic(
                    spec.op, float(spec.message_bytes), spec.group, Algorithm.parse(spec.algorithm)
                )
                chunked = ref.algorithm is Algorithm.TREE or (
                    ref.algorithm is Algorithm.RING
                    and spec.op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE)
                )
                hit = chunked and ref.protocol is Protocol.LL
            self._small[key] = hit
        return hit
