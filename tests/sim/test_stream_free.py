"""The list schedule's stream state and operation tasks read as plainly as possible (issue 27,
session 26): ``sim.engine._list_schedule`` keeps when each stream is next free per device and
then per stream name (``sim.chains.Free``: no ``(device, stream)`` tuple a task), tests
``type(t) is OverTask`` where it read ``t.over`` (a class attribute on every other task), and
adds a one-piece ``then_s`` without an iterator. Drawn graphs over several devices and streams
(plain tasks, operation tasks of one to three pieces, OverTasks, folded sends) are scheduled
against the reference loop written here with a ``(device, stream)`` dictionary, ``t.over``
and a loop over every ``then_s``: the same starts, ends, collective starts and busy seconds,
bit for bit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import (
    _S_SEND,
    _S_SEND_S,
    SENT,
    CommKind,
    CommSpec,
    GraphBuilder,
    TaskGraph,
    TaskKind,
)
from perfmodel.sim.engine import _list_schedule, over_busy

_DEVICES = ("g0", "g1", "g2")
_STREAMS = ("compute", "tp", "send_fwd", "dp")
_SECONDS = st.floats(0.0, 4.0, allow_nan=False, allow_infinity=False)


def _reference(
    graph: TaskGraph,
) -> tuple[list[float], list[float], dict[int, float], dict[str, float]]:
    """The list schedule as it read before: one dictionary keyed by ``(device, stream)``,
    ``t.over`` and every ``then_s`` piece in a loop (plain and ``SENT`` dependencies only)."""
    tasks = graph.tasks
    start, end = [0.0] * len(tasks), [0.0] * len(tasks)
    free: dict[tuple[str, str], float] = {}
    overs: dict[int, float] = {}
    busy: dict[str, float] = {}
    for t in tasks:
        ends = [end[d] if d < SENT else end[d - SENT] + tasks[d - SENT].send_s for d in t.deps]
        s = free.get((t.device, t.stream), 0.0)
        for x in ends:
            if x > s:
                s = x
        e = s + t.duration_s
        if t.then_s and t.over is not None:
            stream, tp_s = t.over
            cs = free.get((t.device, stream), 0.0)
            for x in ends:
                if x > cs:
                    cs = x
            overs[t.tid] = cs
            free[(t.device, stream)] = f = cs + tp_s
            e = f if f > e else e
        for x in t.then_s:
            e += x
        start[t.tid], end[t.tid] = s, e
        free[(t.device, t.stream)] = e
        if t.stream == "compute":
            b = busy.get(t.device, 0.0)
            busy[t.device] = (
                over_busy(b, t, s, e, overs[t.tid]) if t.over is not None else b + e - s
            )
    return start, end, overs, busy


_TASK = st.tuples(
    st.sampled_from(["task", "op", "over"]),
    st.integers(0, len(_DEVICES) - 1),
    st.integers(0, len(_STREAMS) - 1),
    _SECONDS,
    st.lists(_SECONDS, min_size=1, max_size=3),  # then_s (operation tasks)
    st.lists(st.integers(0, 10**6), max_size=3),  # dependencies, as fractions of the ids so far
    st.booleans(),  # a folded send after an operation task
)


@settings(max_examples=150, deadline=None)
@given(drawn=st.lists(_TASK, min_size=1, max_size=40), tp_s=_SECONDS)
def test_drawn_graphs_schedule_as_the_tuple_keyed_loop(drawn: list[tuple], tp_s: float) -> None:  # type: ignore[type-arg]
    b = GraphBuilder()
    spec = CommSpec(CollectiveOp.SENDRECV, 1e6, ("g0", "g1"), "auto", CommKind.PP)
    for kind, dev, stream, dur, then, picks, send in drawn:
        n = len(b.tasks)
        deps = sorted({p % n for p in picks}) if n else []
        # a dependency on a folded send where that task has one
        deps = [d + SENT if b.tasks[d].send is not None else d for d in deps]
        device = _DEVICES[dev]
        if kind == "task":
            tid = b.add(TaskKind.COLLECTIVE, device, _STREAMS[stream], dur, deps)
        elif kind == "op":
            tid = b.add(
                TaskKind.COMPUTE, device, "compute", dur, deps, "op", 0, 0, None, tuple(then)
            )
        else:
            tid = b.add_over(device, dur, deps, "over", 0, 0, tuple(then), ("tp", tp_s))
        if send and kind != "task":
            _S_SEND_S(b.tasks[tid], dur / 2)
            _S_SEND(b.tasks[tid], spec)
    graph = b.build()
    tl = _list_schedule(graph)
    start, end, overs, busy = _reference(graph)
    assert list(tl.start_s) == start and list(tl.end_s) == end
    assert (tl.overs or {}) == overs
    assert tl.busy_s == busy
