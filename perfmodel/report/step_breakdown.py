"""Where one step's time goes on its critical GPU: :class:`Breakdown`, :func:`breakdown`.

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

import math
from bisect import bisect_left
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from perfmodel.parallel.taskgraph import (
    CHAIN_MARK,
    ROW_COMPUTE_START,
    ROW_END,
    ChainRow,
    ChainRun,
    ChainTask,
    Task,
    TaskKind,
)
from perfmodel.sim.chains import ChainEntry, chain_rows
from perfmodel.sim.engine import CoarseTimeline, PeriodicTimeline, Timeline, over_busy, over_pieces

_ROW = len(ChainRow._fields)  # a chain row's own fields; a ChainRunRow's run fields follow


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
    if timeline.busy_s is not None:  # kept by the analytic list schedule (sim.engine)
        return dict(timeline.busy_s)
    busy: dict[str, float] = {}
    get = busy.get
    start_s, end_s = timeline.start_s, timeline.end_s
    chains = timeline.chains
    for t in timeline.graph.tasks:
        if t.stream == "compute":
            dev, tid = t.device, t.tid
            if t.over is not None:  # an OverTask: its compute-stream pieces, in order
                s_tp = timeline.overs[tid]  # type: ignore[index]
                busy[dev] = over_busy(get(dev, 0.0), t, start_s[tid], end_s[tid], s_tp)
                continue
            if t.then_s is CHAIN_MARK:  # each compute of a gather chain, as its own task
                b = get(dev, 0.0)
                for row in chain_rows(t.chain[0], chains[tid]):  # type: ignore[attr-defined, index]
                    b = b + row[ROW_END] - row[ROW_COMPUTE_START]
                busy[dev] = b
                continue
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
    """Seconds of ``[t0, t1]`` on ``dev`` in each breakdown class (see module docstring).

    The compute streams of ``dev``'s own flat gather chains (``ChainStatic.flat``, rows on
    demand) give no events: :func:`_flat_split` lists their transitions instead and
    :func:`_sweep_split` merges them with the other events (:func:`_sweep`'s seconds bit for
    bit); where those transitions are not in time order (:class:`_Unordered`) the plain
    events and :func:`_sweep`."""
    ct: list[float] = []
    tk: list[str] = []
    try:
        events, cls_of = _class_events(timeline, dev, ct, tk)
    except _Unordered:
        return _sweep(*_class_events(timeline, dev), t0, t1)
    if not ct:
        return _sweep(events, cls_of, t0, t1)
    return _sweep_split(events, cls_of, ct, tk, t0, t1)


_Events = list[tuple[float, int, str]]

_HOST_KINDS = frozenset((TaskKind.HOST, TaskKind.OPTIMIZER))
"""The kinds of the only tasks :func:`task_class` may put in ``"host"`` (priority 2), the class
:func:`_class_events` counts for a device whatever device runs the task: every other task of
another device that is not in its communication group adds no event (an FSDP step of GPT-3
175B on 1024 A100, dp8 tp16 pp8 interleaved: 94,106 tasks, ~12,000 of them the critical
stage's), so it is passed over before its times and class are read."""


_FOLDED_KEYS: dict[tuple[object, ...], str] = {
    ("compute", TaskKind.COLLECTIVE, None): "0|comm:tp",
    ("compute", TaskKind.COMPUTE, None): "0|compute",
    ("folded send",): "1|comm:pp",
}
"""The keys :func:`_class_events` starts from: the ``"prio|class"`` keys (as :func:`task_class`
gives them) of the events that operation tasks' and gather chains' folded pieces and sends add
by name (:func:`_pieces`, :func:`_folded`, :func:`_chain_events`), so that its classes hold
them (a class no event names is never read); before, each such task added them again."""


def _class_events(
    timeline: Timeline, dev: str, ct: list[float] | None = None, tk: list[str] | None = None
) -> tuple[_Events, dict[str, str]]:
    """The start and end events of the tasks that count for ``dev`` (its own tasks,
    communication whose group holds it, host tasks anywhere) as ``(time, +1 | -1, key)`` in
    time order (ties: in task order, :data:`_EVENT_ORDER`), and each ``"prio|class"`` key's class
    (keys compare by priority first). With ``ct`` and ``tk`` (:func:`_class_seconds`), the
    compute streams of ``dev``'s own flat chains go there as transitions instead
    (:func:`_flat_split`)."""
    events: _Events = []
    append = events.append
    # task_class depends on these three only; the folded pieces' keys there from the start
    keys: dict[tuple[object, ...], str] = dict(_FOLDED_KEYS)
    start_s, end_s = timeline.start_s, timeline.end_s
    chains = timeline.chains
    for t in timeline.graph.tasks:
        then = t.then_s
        if then is CHAIN_MARK:  # a gather chain: its fine tasks' events
            own = t.device == dev
            # another device's chain whose groups do not hold dev adds no event
            # (_chain_events' first test, made here without a call)
            if own or dev in t.chain[0].members:  # type: ignore[attr-defined]
                _chain_events(append, keys, t, chains[t.tid], dev, ct, tk)  # type: ignore[arg-type, index]
            if t.send_s > 0 and (own or dev in t.send.group):
                _folded(append, t, end_s[t.tid])
            continue
        if t.device != dev:  # most tasks: another device's compute, passed over first
            if t.stream == "compute":
                if t.send_s > 0 and dev in t.send.group:  # a send into dev, folded
                    _folded(append, t, end_s[t.tid])
                continue
            comm = t.comm
            mine = comm is not None and dev in comm.group
            if not mine and t.kind not in _HOST_KINDS:
                continue  # not dev's, and never "2|host" (task_class): no event
        else:
            comm = t.comm
            mine = True
        tid = t.tid
        s, e = start_s[tid], end_s[tid]
        if then or t.send_s:  # an operation task of the analytic graph
            if t.over is not None:  # an OverTask: the tasks it stands for
                _over_events(append, keys, t, s, e, timeline.overs[tid])  # type: ignore[index]
                continue
            _folded(append, t, e, s)
            e = s + t.duration_s  # its own task: until its tail
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


def _folded(append: Any, t: Task, e: float, s: float | None = None) -> None:
    """The events of the tasks folded into an operation task ``t`` ending at ``e``
    (:attr:`Task.then_s`, :attr:`Task.send_s`; ``perfmodel.parallel.lower_shortcuts``,
    "Operation tasks"), as those tasks give them: on its own device (``s``: its start) each
    exposed TP collective and compute of ``then_s`` after its first compute, at the times
    the list schedule added them; its pipeline send from ``e`` to ``e + send_s`` on both ends
    of the send."""
    if s is not None:
        _pieces(append, s + t.duration_s, t.then_s)
    if t.send_s > 0:
        f = e + t.send_s
        if f > e:
            append((e, 1, "1|comm:pp"))
            append((f, -1, "1|comm:pp"))


def _over_events(
    append: Any, keys: dict[tuple[object, ...], str], t: Task, s: float, e: float, s_tp: float
) -> None:
    """The events of the tasks an :class:`~perfmodel.parallel.taskgraph.OverTask` ``t``
    (``[s, e]``, its TP collective from ``s_tp``) stands for on its own device, in their order
    and as :func:`_class_events` gives them (:func:`~perfmodel.sim.engine.over_pieces`): the
    first compute, the collective on its stream, the exposed tail, then the operation task
    that followed (its pieces, its send, its first compute)."""
    pieces = over_pieces(t, s, e, s_tp)
    tp = Task(-1, TaskKind.COLLECTIVE, t.device, t.over[0], 0.0)  # type: ignore[index]
    tail = Task(-1, TaskKind.COLLECTIVE, t.device, "compute", 0.0)
    for (ps, pe), x in zip(pieces, (t, tp, tail), strict=False):
        if pe > ps:
            key = _key(keys, x)
            append((ps, 1, key))
            append((pe, -1, key))
    if len(pieces) > 3:  # the operation task: duration then_s[1], then_s[2:] and the send
        b = pieces[3][0]
        c = b + t.then_s[1]
        _pieces(append, c, t.then_s[2:])
    if t.send_s > 0:
        _folded(append, t, e)
    if len(pieces) > 3 and c > b:
        key = _key(keys, t)
        append((b, 1, key))
        append((c, -1, key))


def _chain_events(
    append: Any,
    keys: dict[tuple[object, ...], str],
    t: ChainTask,
    entry: ChainEntry,
    dev: str,
    ct: list[float] | None = None,
    tk: list[str] | None = None,
) -> None:
    """The events of the fine tasks gather chain ``t`` stands for
    (:class:`~perfmodel.parallel.taskgraph.ChainTask`; ``entry``: what the list schedule kept
    of it, :func:`perfmodel.sim.chains.chain_rows`' times of each segment's gather, compute
    and reduction), as :func:`_class_events` gives them: on
    ``t``'s device every gather, compute (its first compute, then its ``then_s`` pieces as
    :func:`_folded` reads them) and reduction; on another device the gathers and reductions
    whose group holds it. With ``ct`` and ``tk``, an own flat chain's compute stream goes
    there as transitions (:func:`_flat_split`)."""
    static = t.chain[0]
    reducing, lead = static.reducing, static.lead_proto
    own = t.device == dev
    if not own and dev not in static.members:
        return
    g_key = _key(keys, static.gather_proto)
    r_key = _key(keys, static.reduce_proto) if reducing else ""
    if own and ct is not None and tk is not None and type(entry[-1]) is not list:
        # flat (rows on demand) on t's device: its compute stream as transitions (_class_seconds)
        _flat_split(append, ct, tk, static.flat, entry, g_key, r_key)
        return
    l_key = _key(keys, lead) if own and reducing and lead is not None else ""
    for seg, row in zip(static.items, chain_rows(static, entry), strict=True):
        then, g_grp, r_grp = seg[2], seg[4], seg[5]  # ChainSegment's and ChainRun's
        gs, ge, cs, h, _, rs, re = row[:_ROW]  # ChainRow's (a ChainRunRow's first fields)
        if ge > gs and (own or dev in g_grp):
            append((gs, 1, g_key))
            append((ge, -1, g_key))
        if type(seg) is ChainRun:  # its second gather, run task, lead, reduction
            g1s, g1e, ls, le = row[_ROW:]
            if g1e > g1s and (own or dev in seg.gather1_group):
                append((g1s, 1, g_key))
                append((g1e, -1, g_key))
            if own:
                _pieces(append, h, then)
                if reducing and le > ls:
                    append((ls, 1, l_key))
                    append((le, -1, l_key))
            if reducing and re > rs and (own or dev in r_grp):
                append((rs, 1, r_key))
                append((re, -1, r_key))
            continue
        if own:
            _pieces(append, h, then)
            if h > cs:
                append((cs, 1, "0|compute"))
                append((h, -1, "0|compute"))
        if reducing and re > rs and (own or dev in r_grp):
            append((rs, 1, r_key))
            append((re, -1, r_key))


_IDLE = "~"
"""The chains' compute-stream key while none of their computes runs (:func:`_flat_split`):
above every ``"prio|class"`` key (they begin with a digit), so the minimum of it and the
events' running key is that key."""

_SEG_KEYS = ("0|compute", "0|comm:tp", _IDLE)  # a segment's compute, TP piece, then idle
_COMPUTE_IDLE = ("0|compute", _IDLE)
_TP_IDLE = ("0|comm:tp", _IDLE)


#: In :func:`_flat_split`, a gather's (a reduction's) end and the next one's start at the
#: same time, where a compute transition is at that time too, left out (:func:`_flat_split`
#: says why that is exact); ``False``: every gather as its two events, the direct path
#: ``tests/report/test_held_ends.py`` compares with. Issue 27.
HELD_ENDS = True

#: No gather or reduction end held (:func:`_flat_split`'s ``held``, ``r_held``): below every
#: time, so no gather's or reduction's start (at or after 0) is taken as back to back with it.
_NO_END = -math.inf


class _Unordered(Exception):
    """A flat chain's compute-stream transitions out of time order (:func:`_flat_split`):
    :func:`_class_seconds` falls back to every event and :func:`_sweep`."""


def _flat_split(
    append: Any,
    ct: list[float],
    tk: list[str],
    flat: tuple[tuple[float, float, float, float], ...],
    entry: ChainEntry,
    g_key: str,
    r_key: str,
) -> None:
    """:func:`_chain_events` of a chain on its own device where every segment's ``then_s`` is
    one piece (``ChainStatic.flat``; ``r_key`` empty: no reduction), with the compute stream as
    transitions, at the times :func:`perfmodel.sim.chains.chain_rows` makes (the same
    recurrence inline, without a row tuple per segment): each gather and reduction event as
    there (``append``), each segment's first compute ``[cs, h]`` and TP piece ``[h,
    e]`` (where longer than zero, as there) as the times in ``ct`` at which the chains'
    compute-stream key becomes ``tk``'s (``"0|compute"``, ``"0|comm:tp"``, :data:`_IDLE`
    after the last).

    Those two intervals are the only ``"0|..."`` events of the segment and follow each other
    on one stream, so while every transition is at or after the previous one (checked: else
    :class:`_Unordered`), the chains' running ``"0|..."`` key after every event at a time is
    the key of the last transition at or before it, which :func:`_sweep_split` keeps instead
    of counting events: the same live keys at every time, so the same seconds.

    With :data:`HELD_ENDS` (the default), a gather's end and the next segment's gather start at
    the same time ``t`` (back to back on the gather stream) are both left out where this
    segment's compute transition is at ``t`` too (its compute waited for that gather, ``cs =
    ge``, and runs, or its TP piece does): the gather key's count goes ``1 -> 0 -> 1`` at ``t``
    with them and stays 1 without, so the live keys after every event at ``t`` are the same,
    and ``t`` stays a time at which :func:`_sweep_split` adds an interval (the transition is
    there). The sweep adds an interval only on reaching a later time, from the keys live after
    every event at the earlier one (:data:`_EVENT_ORDER`), so the same intervals go to the same
    classes in the same order, bit for bit; ~3 of every 10 events fewer on the critical device
    of the gather-bound GPT-3 175B FSDP plans (dp32 tp8 pp4 mb1: 2,210 pairs of 2,400
    segments). Likewise a reduction's end and the next segment's reduction start at the last compute
    transition so far (``last``; the segment's end ``e`` where it runs anything): the
    reductions back to back, the next one waiting for nothing (1,067 of the 1,200 reducing
    segments there)."""
    ce, fg, fr, two, one = entry[-5:]
    put_t, put_k = ct.extend, tk.extend
    last = ct[-1] if ct else -math.inf
    held = r_held = _NO_END  # a gather's, a reduction's end left for the next to cancel
    hold = HELD_ENDS
    for g, c, x, r in flat:
        gs = fg if fg >= two else two
        fg = ge = gs + g
        cs = ce if ce >= ge else ge
        h = cs + c
        ce = e = h + x
        two = one
        one = h
        if ge > gs:
            if gs != held:  # else: back to back with the held end, both left out
                if held != _NO_END:
                    append((held, -1, g_key))
                append((gs, 1, g_key))
            if hold and cs == ge and (h > cs or h == cs < e):
                held = ge  # a compute transition at ge (below): held for the next start
            else:
                append((ge, -1, g_key))
                held = _NO_END
        if h > cs:
            if cs < last:
                raise _Unordered
            if e > h:
                put_t((cs, h, e))
                put_k(_SEG_KEYS)
                last = e
            else:
                put_t((cs, h))
                put_k(_COMPUTE_IDLE)
                last = h
        elif e > h:
            if h < last:
                raise _Unordered
            put_t((h, e))
            put_k(_TP_IDLE)
            last = e
        if r_key:
            rs = fr if fr >= e else e
            fr = re = rs + r
            if re > rs:
                # back to back with the held end at the last transition (``last``): both out
                if rs != r_held or rs != last:
                    if r_held != _NO_END:
                        append((r_held, -1, r_key))
                    append((rs, 1, r_key))
                if hold:
                    r_held = re
                else:
                    append((re, -1, r_key))
    if held != _NO_END:
        append((held, -1, g_key))
    if r_held != _NO_END:
        append((r_held, -1, r_key))


def _sweep_split(
    events: _Events,
    cls_of: dict[str, str],
    ct: list[float],
    tk: list[str],
    t0: float,
    t1: float,
) -> dict[str, float]:
    """:func:`_sweep` of ``events`` and the chains' compute-stream transitions (``ct``, ``tk``:
    :func:`_flat_split`, in time order; ``ct`` gets a sentinel), merged in time order: before
    each event, the transitions at or before its time; an interval is added on reaching a
    later time, to the class of the smaller of the events' running min key and the chains'
    key (:data:`_IDLE`: none), the min of every live key as :func:`_sweep` takes it. So the
    same intervals are added to each class in the same order (the same floats, bit for bit),
    and the classes enter ``acc`` in the same order.

    ``events`` (the caller's, read once) is cut before ``t1`` (finite: a makespan) and closed
    by an event of the idle key at ``t1``, which makes the last pass: the transitions at or
    before ``t1``, then the interval up to it. A transition at ``t1`` itself adds what
    :func:`_sweep` adds at ``t1`` (``t1 - prev``, to the same class, once); the idle key
    entering changes no class (it is above every key) and nothing follows it."""
    name = dict(cls_of)
    name[_IDLE] = "bubble"
    active: dict[str, int] = {}
    acc: dict[str, float] = {}
    got, acc_get = active.get, acc.get
    mkey = ckey = _IDLE  # the events' running min key; the chains' compute-stream key
    cls = "bubble"
    prev = t0
    ct.append(math.inf)
    i = 0
    cn = ct[0]
    del events[bisect_left(events, t1, key=_EVENT_ORDER) :]  # the events before t1 ...
    events.append((t1, 1, _IDLE))  # ... then the last pass, at t1
    for now, d, key in events:
        while cn <= now:  # the chains' transitions up to this event
            if cn > prev:
                acc[cls] = acc_get(cls, 0.0) + (cn - prev)
                prev = cn
            ckey = tk[i]
            i += 1
            cn = ct[i]
            cls = name[ckey if ckey < mkey else mkey]
        if now > prev:
            acc[cls] = acc_get(cls, 0.0) + (now - prev)
            prev = now
        c = got(key, 0) + d
        if c:
            active[key] = c
            if c == 1 and d > 0 and key < mkey:  # enters below the running min
                mkey = key
                if key < ckey:
                    cls = name[key]
        else:
            del active[key]
            if key == mkey:
                mkey = min(active) if active else _IDLE
                cls = name[ckey if ckey < mkey else mkey]
    return acc


def _pieces(append: Any, a: float, then: tuple[float, ...]) -> None:
    """The events of an operation task's ``then_s`` pieces from ``a`` (TP first, then compute,
    alternating), for :func:`_folded` and a gather chain's segments."""
    tp = True
    for x in then:
        b = a + x
        if b > a:
            key = "0|comm:tp" if tp else "0|compute"
            append((a, 1, key))
            append((b, -1, key))
        a = b
        tp = not tp


def _key(keys: dict[tuple[object, ...], str], t: Task) -> str:
    """``"prio|class"`` of ``t`` (:func:`task_class`), kept in ``keys`` by what it depends on."""
    ck = (t.stream, t.kind, None if t.comm is None else t.comm.kind)
    key = keys.get(ck)
    if key is None:
        prio, cls = task_class(t)
        key = keys[ck] = f"{prio}|{cls}"
    return key


def _sweep(events: _Events, cls_of: dict[str, str], t0: float, t1: float) -> dict[str, float]:
    """Seconds of ``[t0, t1]`` per class: each interval between consecutive events goes to
    the highest-priority class running, ``bubble`` when none. Stops at the first event at or
    after ``t1`` (what follows would add nothing). :func:`_sweeps` without a window."""
    return _sweeps(events, cls_of, t0, t1, -math.inf, -math.inf)[0]


def _leave(active: dict[str, int], cls_of: dict[str, str]) -> tuple[str, str]:
    """The running min key and its class after the min key left (:func:`_sweeps`)."""
    if active:
        cur = min(active)
        return cur, cls_of[cur]
    return "", "bubble"


def _sweeps(
    events: _Events, cls_of: dict[str, str], t0: float, t1: float, w0: float, w1: float
) -> tuple[dict[str, float], dict[str, float]]:
    """``(_sweep(events, cls_of, t0, t1), _sweep(events, cls_of, w0, w1))`` in one pass over
    ``events``, for ``w1 < t1`` (``w0 = w1 = -inf``: no window, the second empty): both
    sweeps read the same events in the same order and the same live keys before each event,
    so each adds the same intervals in the same order as alone (the window's from ``w0``,
    its last one up to ``w1`` from the live keys after every event before ``w1``).

    ``active`` holds the keys with tasks running only (a key whose count drops to 0 leaves
    it), so the live keys are its keys: no count is ever negative, as every task's end event
    (``e > s``) sorts after its start. The class running is kept as keys enter (below the
    running min) and leave (the min left: :func:`_leave`): ``cls_of[min(active)]``,
    ``bubble`` when none, at every interval, without a ``min`` over the live keys at each."""
    active: dict[str, int] = {}
    acc: dict[str, float] = {}
    one: dict[str, float] = {}
    got = active.get
    cur, cls = "", "bubble"  # min(active) ("": none) and its class
    prev = t0
    wprev = w0
    inside = True  # the window's sweep has not reached w1
    # the events before the first at or after t1 (events are in time order)
    for now, d, key in events[: bisect_left(events, t1, key=_EVENT_ORDER)]:
        if now > prev:
            acc[cls] = acc.get(cls, 0.0) + (now - prev)
            prev = now
        if inside:
            if now >= w1:
                inside = False
                if w1 > wprev:
                    one[cls] = one.get(cls, 0.0) + (w1 - wprev)
            elif now > wprev:
                one[cls] = one.get(cls, 0.0) + (now - wprev)
                wprev = now
        c = got(key, 0) + d
        if c:
            active[key] = c
            if c == 1 and d > 0 and (not cur or key < cur):  # enters below the running min
                cur, cls = key, cls_of[key]
        else:
            del active[key]
            if key == cur:
                cur, cls = _leave(active, cls_of)
    if inside and w1 > wprev:  # every event before w1 (none at or after it below t1)
        one[cls] = one.get(cls, 0.0) + (w1 - wprev)
    if t1 > prev:
        acc[cls] = acc.get(cls, 0.0) + (t1 - prev)
    return acc, one


_EVENT_ORDER = itemgetter(0)
"""Sort key of :func:`_class_events`: time only. :func:`_sweep` gives the same seconds
whatever the order of events at one time: it adds an interval only on reaching a later time,
from the keys running after every event at the earlier one, and no count goes below zero on
the way (a task's end follows its start, ``e > s``, so its key counts it at any event of time
``e``). A float key sorts about four times faster than ``(time, +1 | -1)`` pairs (~74,000
events on the critical device of an FSDP step of GPT-3 175B on 1024 A100, dp8 tp16 pp8
interleaved; ``tests/report/test_sweep_live_keys.py`` shuffles ties)."""


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
    events, cls_of = _class_events(short, dev)
    T, w1 = short.makespan_s, tau + lam
    if w1 < T:  # both sweeps in one pass (the check puts the window inside the schedule)
        acc, one = _sweeps(events, cls_of, 0.0, T, tau, w1)
    else:
        acc = _sweep(events, cls_of, 0.0, T)
        one = _sweep(events, cls_of, tau, w1)
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
            if t.over is not None:  # an OverTask: its compute-stream pieces, in order
                pcs = over_pieces(t, short.start_s[tid], short.end_s[tid], short.overs[tid])  # type: ignore[index]
                for ps, pe in (pcs[0], *pcs[2:]):
                    busy[t.device] += tl.extra * (pe - ps)
                continue
            busy[t.device] += tl.extra * (short.end_s[tid] - short.start_s[tid])
    return _busiest(busy, short.graph.devices)


__all__ = ["BUSY_TIE_REL", "Breakdown", "breakdown", "critical_device", "task_class"]
