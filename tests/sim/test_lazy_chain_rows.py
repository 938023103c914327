"""A gather chain of one-piece segments keeps no rows in the list schedule
(``perfmodel.sim.chains._chain``: its marks and the five values it started from);
:func:`perfmodel.sim.chains.chain_rows` makes them on demand and the
breakdown replays them inline (``step_breakdown._compute_busy``, ``_flat_split``). Each test
compares that lazy path with the eager one: the same graphs scheduled with every chain through
``_chain_runs`` (the general recurrence, a row tuple per item), whose rows the breakdown reads
through its general loop. Marks, rows, busy seconds (kept by the list schedule of a graph with
chains, ``_chain_mode``, against ``_compute_busy``'s reading of the rows), every device's
events and the breakdown must be equal (``==``, bit for bit)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_compare import PIPELINED_ZERO, gpt_scenario, pipelined_zero

import perfmodel.api as api
import perfmodel.sim.chains as sim_chains
import perfmodel.sim.engine as engine
from perfmodel.api import Scenario, predict
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import (
    CHAIN,
    SENT,
    ChainSegment,
    ChainStatic,
    ChainTask,
    CommKind,
    CommSpec,
    GraphBuilder,
    Task,
    TaskGraph,
    TaskKind,
    chain_mark,
)
from perfmodel.report import step_breakdown as sb
from perfmodel.sim.engine import Timeline, _list_schedule

GPT = {"layers": 24, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def _eager(graph: TaskGraph, monkeypatch: pytest.MonkeyPatch) -> Timeline:
    """``graph``'s list schedule with every chain through ``_chain_runs`` (rows and every mark
    kept: ``sim.chains.FLAT_CHAINS`` off), its busy seconds left to ``_compute_busy``'s
    reading of the rows (as before wave 13)."""
    with monkeypatch.context() as m:
        m.setattr(sim_chains, "FLAT_CHAINS", False)
        return dataclasses.replace(_list_schedule(graph), busy_s=None)


def _assert_marks_kept(graph: TaskGraph, lazy: Timeline, eager: Timeline) -> None:
    """A flat chain's entry keeps its last two marks and mark ``n`` (``_chain``), the eager
    ones bit for bit; its earlier marks are ``None`` until a dependency reads one, and then
    all of them are the eager ones (``_early_mark``)."""
    for tid, entry in lazy.chains.items():  # type: ignore[union-attr]
        if type(entry[-1]) is list:
            continue
        marks = eager.chain_marks(tid)
        n = len(marks) - 1  # segments
        assert entry[max(n - 2, 0) : n + 1] == marks[max(n - 2, 0) :]
        early = entry[: max(n - 2, 0)]
        assert early == [None] * len(early) or early == marks[: len(early)]


def _assert_lazy_is_eager(graph: TaskGraph, monkeypatch: pytest.MonkeyPatch) -> int:
    """Compare the lazy and eager schedules of ``graph``; the number of lazy chains."""
    lazy, eager = _list_schedule(graph), _eager(graph, monkeypatch)
    assert (lazy.start_s, lazy.end_s) == (eager.start_s, eager.end_s)
    assert lazy.chains is not None and eager.chains is not None
    assert lazy.chains.keys() == eager.chains.keys()
    _assert_marks_kept(graph, lazy, eager)
    n = 0
    for tid, entry in lazy.chains.items():
        assert type(eager.chains[tid][-1]) is list  # the reference keeps its rows
        n += type(entry[-1]) is not list
        assert lazy.chain_marks(tid) == eager.chain_marks(tid)
        assert lazy.chain_rows(tid) == eager.chain_rows(tid)
        items = graph.tasks[tid].chain[0].items  # type: ignore[attr-defined]
        assert [type(r) for r in lazy.chain_rows(tid)] == [tuple] * len(items)
    # the busy seconds the list schedule kept, the reader's over the lazy rows, and over the
    # eager rows (the reader's loop as it was)
    assert lazy.busy_s is not None
    assert lazy.busy_s == sb._compute_busy(dataclasses.replace(lazy, busy_s=None))
    assert sb._compute_busy(lazy) == sb._compute_busy(eager)
    for dev in graph.devices:
        assert sb._class_events(lazy, dev) == sb._class_events(eager, dev)
    assert sb.critical_device(lazy) == sb.critical_device(eager)
    assert sb.breakdown(lazy) == sb.breakdown(eager)
    return n


_SECONDS = st.floats(0.0, 4.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    segs=st.lists(st.tuples(_SECONDS, _SECONDS, _SECONDS, _SECONDS), min_size=1, max_size=8),
    reducing=st.booleans(),
    busy=st.tuples(_SECONDS, _SECONDS, _SECONDS),
    chains=st.integers(1, 3),
    own=st.booleans(),
)
def test_drawn_flat_chains_lazy_equal_eager(
    segs: list[tuple[float, float, float, float]],
    reducing: bool,
    busy: tuple[float, float, float],
    chains: int,
    own: bool,
) -> None:
    """Drawn one-piece segments, reducing or not, after busy gather and reduction streams,
    one to three chains in a row (each anchored on the previous one's marks), on the device
    whose events are read or on another that shares its groups: lazy == eager."""
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0", "g1"), "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, ("g0", "g1"), "auto", CommKind.DP)
    items = tuple(
        ChainSegment(g, c, (x,), r if reducing else 0.0, g_spec.group, r_spec.group)
        for g, c, x, r in segs
    )
    dev = "g0" if own else "g1"
    g_proto = Task(-1, TaskKind.COLLECTIVE, dev, "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, dev, "dp", 0.0, comm=r_spec)
    members = frozenset(("g0", "g1"))
    static = ChainStatic(items, "zero", "dp", reducing, g_proto, r_proto, members, None)
    assert static.flat is not None
    x_s, zero_s, dp_s = busy
    n = len(items)
    b = GraphBuilder()
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)  # g0 has a compute stream either way
    x = b.add(TaskKind.COMPUTE, dev, "compute", x_s)
    b.add(TaskKind.COLLECTIVE, dev, "zero", zero_s)
    b.add(TaskKind.COLLECTIVE, dev, "dp", dp_s)
    prev, a0, a1 = [x], -1, x
    for j in range(chains):
        c = b.add_chain(dev, prev, f"F{j}", j, 0, (static, a0, a1))
        prev = [c, chain_mark(c, n)] if reducing else [c]
        a0, a1 = (chain_mark(c, n - 2), chain_mark(c, n - 1)) if n > 1 else (a1, chain_mark(c, 0))
    b.add(TaskKind.OPTIMIZER, dev, "compute", 1.0, prev)
    assert _assert_lazy_is_eager(b.build(), monkeypatch=pytest.MonkeyPatch()) == chains


@settings(max_examples=80, deadline=None)
@given(
    segs=st.lists(st.tuples(_SECONDS, _SECONDS, _SECONDS, _SECONDS), min_size=3, max_size=8),
    reducing=st.booleans(),
    j=st.integers(0, 5),
    anchored=st.booleans(),
)
def test_early_marks_read_as_eager(
    segs: list[tuple[float, float, float, float]], reducing: bool, j: int, anchored: bool
) -> None:
    """A flat chain keeps only its last two marks and mark ``n`` (``sim.chains.FLAT_CHAINS``);
    a dependency on an earlier one (a task after it, or the next chain's anchor, which the
    lowering never makes) reads it through ``_early_mark``: the eager mark bit for bit, every
    early mark written into the entry, the whole schedule and breakdown the eager ones."""
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0", "g1"), "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, ("g0", "g1"), "auto", CommKind.DP)
    items = tuple(
        ChainSegment(g, c, (x,), r if reducing else 0.0, g_spec.group, r_spec.group)
        for g, c, x, r in segs
    )
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    static = ChainStatic(items, "zero", "dp", reducing, g_proto, r_proto,
                         frozenset(("g0", "g1")), None)  # fmt: skip
    n = len(items)
    j %= n - 2  # an early mark: below n - 2
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    c = b.add_chain("g0", [x], "F0", 0, 0, (static, -1, x))
    if anchored:
        after = b.add_chain("g0", [c], "F1", 1, 0, (static, chain_mark(c, j), chain_mark(c, n - 1)))
    else:
        after = b.add(TaskKind.COLLECTIVE, "g0", "other", 0.5, [chain_mark(c, j)])
    b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, after])
    graph = b.build()
    mp = pytest.MonkeyPatch()
    lazy, eager = _list_schedule(graph), _eager(graph, mp)
    assert (lazy.start_s, lazy.end_s) == (eager.start_s, eager.end_s)
    assert lazy.chains[c][: n + 1] == eager.chain_marks(c)  # type: ignore[index]
    _assert_lazy_is_eager(graph, mp)


def _anchor(c: int, a: int | None, x: int) -> int:
    """Anchor ``a`` of a chain after chain ``c``: its mark ``a``, or (``None``) task ``x``."""
    return x if a is None else chain_mark(c, a)


@pytest.mark.parametrize("then_s", [(0.5,), (0.5, 0.7)], ids=["flat", "runs"])
@pytest.mark.parametrize(
    "anchors",
    [(1, 2), (1, 3), (3, 1), (1, None), (None, 1)],
    ids=["early-early", "early-kept", "kept-early", "early-task", "task-early"],
)
def test_early_marks_read_by_the_next_chain(
    then_s: tuple[float, ...], anchors: tuple[int | None, int | None]
) -> None:
    """A chain anchored on a flat chain's early marks (a hand-made graph: the lowering anchors
    on the last two) reads them through ``_early_mark`` wherever it reads an anchor: both
    marks inline in ``_chain``, whether it runs the flat recurrence (``then_s`` of one piece)
    or hands them to ``_chain_runs`` (of two, not flat), either anchor the first early one
    read (the other kept, mark 3 of the five segments' 0-5); one mark and one task through
    ``_anchors`` and ``_encoded_end``. The
    schedule, entries and breakdown are bit for bit those with ``FLAT_CHAINS`` off."""
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0", "g1"), "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, ("g0", "g1"), "auto", CommKind.DP)
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    members = frozenset(("g0", "g1"))

    def static(pieces: tuple[float, ...]) -> ChainStatic:
        items = tuple(
            ChainSegment(1.0 + i * 0.3, 2.0, pieces, 0.25, g_spec.group, r_spec.group)
            for i in range(5)
        )
        return ChainStatic(items, "zero", "dp", True, g_proto, r_proto, members, None)

    first, then = static((0.5,)), static(then_s)
    assert first.flat is not None and (then.flat is not None) == (len(then_s) == 1)
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    c = b.add_chain("g0", [x], "F0", 0, 0, (first, -1, x))
    a0, a1 = (_anchor(c, a, x) for a in anchors)
    after = b.add_chain("g0", [c], "F1", 1, 0, (then, a0, a1))
    b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, after])
    graph = b.build()
    mp = pytest.MonkeyPatch()
    lazy, eager = _list_schedule(graph), _eager(graph, mp)
    assert (lazy.start_s, lazy.end_s) == (eager.start_s, eager.end_s)
    # every early mark read and written into the entry: the eager marks
    assert lazy.chains[c][:6] == eager.chain_marks(c)  # type: ignore[index]
    _assert_lazy_is_eager(graph, mp)


def test_flat_chain_entry_keeps_the_read_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry of a flat chain of five segments: marks 0-2 ``None``, marks 3 and 4 (the
    next chain's anchors) and 5 (the last reduction's end) kept, then the five start values,
    as long as the eager entry's marks and start values; with ``FLAT_CHAINS`` off every mark."""
    spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0",), "auto", CommKind.ZERO)
    items = tuple(ChainSegment(1.0, 2.0, (0.5,), 0.25, ("g0",), ("g0",)) for _ in range(5))
    proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=spec)
    static = ChainStatic(items, "zero", "dp", True, proto, proto, frozenset(("g0",)), None)
    b = GraphBuilder()
    c = b.add_chain("g0", [], "F0", 0, 0, (static, -1, -1))
    b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, chain_mark(c, 5)])
    tl = _list_schedule(b.build())
    # the first compute waits on its gather (0-1: h = 1 + 2), each later one on the one
    # before (h = e + 2, e = h + 0.5); reductions r = max(r free, e) + 0.25
    assert tl.chains[c][:6] == [None, None, None, 10.5, 13.0, 13.75]  # type: ignore[index]
    assert len(tl.chains[c]) == 11  # type: ignore[index]
    assert tl.chain_marks(c) == [3.0, 5.5, 8.0, 10.5, 13.0, 13.75]
    monkeypatch.setattr(sim_chains, "FLAT_CHAINS", False)
    assert _list_schedule(b.build()).chains[c][:6] == tl.chain_marks(c)  # type: ignore[index]


def _graphs(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> list[TaskGraph]:
    """The graphs the analytic list schedule ran for ``sc``'s prediction."""
    graphs: list[TaskGraph] = []
    orig = engine._list_schedule

    def spy(g: TaskGraph) -> Timeline:
        graphs.append(g)
        return orig(g)

    with monkeypatch.context() as m:
        m.setattr(api, "_REPORTS", {})
        m.setattr(engine, "_list_schedule", spy)
        predict(sc, baseline=False)
    return [g for g in graphs if any(type(t) is ChainTask for t in g.tasks)]


@pytest.mark.parametrize(
    ("software", "tp", "pp", "nodes", "microbatch", "extra", "flat"),
    [
        # gather-bound: the ZeRO-3 groups span the two servers (the order tp,pp,dp; the default
        # tp,dp,pp keeps a stage's group in one server, where the gathers hide)
        ("deepspeed-zero3", 2, 2, 2, 1, {"placement": "tp,pp,dp"}, True),
        # the same plan in the default order: gathers hide
        ("deepspeed-zero3", 2, 2, 2, 1, {}, False),
        (
            "deepspeed-zero3",
            1,
            4,
            2,
            1,
            {"schedule": "interleaved", "interleave": 2, "placement": "tp,pp,dp"},
            True,
        ),
        ("deepspeed-zero3", 2, 1, 2, 1, {}, True),
        ("deepspeed-zero3", 1, 4, 2, 1, {"recompute": "full", "placement": "tp,pp,dp"}, True),
        ("deepspeed-zero3", 1, 2, 1, 4, {}, False),  # hidden gather runs: rows kept
    ],
)
def test_small_plans_lazy_equal_eager(
    monkeypatch: pytest.MonkeyPatch,
    software: str,
    tp: int,
    pp: int,
    nodes: int,
    microbatch: int,
    extra: dict,
    flat: bool,
) -> None:
    """``test_gather_chains``' gather-bound shapes (two servers, micro-batch 1: flat chains)
    and one with hidden gather runs (one server: chains that keep their rows) over the ZeRO-3
    presets: every chain graph's lazy schedule and breakdown equal the eager ones."""
    sc = gpt_scenario(model_args=GPT, global_batch=64 * nodes, software=software, nodes=nodes,
                      dp=8 * nodes // (tp * pp), tp=tp, pp=pp, microbatch=microbatch,
                      **pipelined_zero(software, pp), **extra)  # fmt: skip
    graphs = _graphs(sc, monkeypatch)
    assert graphs
    assert (sum(_assert_lazy_is_eager(g, monkeypatch) for g in graphs) > 0) == flat


@pytest.mark.parametrize(
    ("tp", "pp", "nodes", "microbatch", "runs"),
    [(2, 2, 2, 1, False), (1, 2, 1, 4, True)],  # gather-bound; hidden gather runs
)
def test_every_encoded_mark_is_a_mark(
    monkeypatch: pytest.MonkeyPatch, tp: int, pp: int, nodes: int, microbatch: int, runs: bool
) -> None:
    """Every mark index a dependency or a chain's anchor encodes (``chain_mark``) is below the
    chain's mark count (``sim.chains.chain_marks``, ``mark_count``: one per segment, two per
    hidden gather run, the last reduction's end): the list schedule reads it unchecked, and an
    index past the marks would read a start value. In the plan of hidden gather runs some
    index is past one mark per item and the last reduction's (a run's second mark)."""
    sc = gpt_scenario(model_args=GPT, global_batch=64 * nodes, software="deepspeed-zero3",
                      nodes=nodes, dp=8 * nodes // (tp * pp), tp=tp, pp=pp,
                      microbatch=microbatch, software_options=PIPELINED_ZERO)  # fmt: skip
    read = past_items = 0
    for g in _graphs(sc, monkeypatch):
        tl = _list_schedule(g)
        for t in g.tasks:
            encoded = [*t.deps, *(t.chain[1:] if type(t) is ChainTask else ())]
            for d in encoded:
                if d < CHAIN:
                    continue
                j, tid = divmod(d - CHAIN, SENT)
                static = g.tasks[tid].chain[0]  # type: ignore[attr-defined]
                assert j < len(tl.chain_marks(tid)) == sim_chains.mark_count(static)
                read += 1
                past_items += j > len(static.items)  # past a mark per item and the last
    assert read > 0
    assert past_items > 0 or not runs


def test_gpt3_zero3_plans_lazy_equal_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nine GPT-3 175B plans of the benchmark on 1024 A100 with DeepSpeed's ZeRO-3 (a
    gather per unit and micro-batch; flat chains in the gather-bound plans, chains of hidden
    gather runs in the pp 16 ones): lazy == eager."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_scale import _plans
    from bench_search import BASE175
    from bench_speed import PLAN_KEYS

    lazy = 0
    for p in _plans()[1:10]:
        keys = {k: p[k] for k in PLAN_KEYS}
        sc = Scenario.from_dict(
            {**BASE175, **keys, "software": "deepspeed-zero3", "fidelity": "analytic",
             "software_options": PIPELINED_ZERO}  # DeepSpeed refuses it with pp > 1: lifted
        )  # fmt: skip
        for g in _graphs(sc, monkeypatch):
            lazy += _assert_lazy_is_eager(g, monkeypatch)
    assert lazy >= 6144  # the gather-bound dp8 tp16 pp8 interleaved plan's chains at least


def test_chain_rows_of_no_chain_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Timeline.chain_rows`` of a task id that is no chain raises ``ConfigError`` naming the
    id (was a bare ``assert``): on the ``CoarseTimeline`` ``predict`` returns for a plan with a
    coarse analytic graph (its chains are on ``.coarse``, whose rows are read there), on a
    timeline with chains at another id, and on one without chains."""
    from perfmodel.errors import ConfigError
    from perfmodel.sim.engine import CoarseTimeline

    sc = gpt_scenario(model_args=GPT, global_batch=128, software="fsdp", nodes=2, dp=8, tp=2,
                      pp=1, microbatch=1)  # fmt: skip
    monkeypatch.setattr(api, "_REPORTS", {})
    tl = predict(sc, baseline=False).timeline
    assert isinstance(tl, CoarseTimeline) and tl.coarse.chains
    tid = min(tl.coarse.chains)
    assert tl.coarse.chain_rows(tid)  # where the chains are
    with pytest.raises(ConfigError, match=rf"task {tid} .*timeline\.coarse\.chain_rows") as err:
        tl.chain_rows(tid)
    assert err.value.value == tid
    not_chain = next(t.tid for t in tl.coarse.graph.tasks if type(t) is not ChainTask)
    with pytest.raises(ConfigError, match=rf"task {not_chain} .*chain task ids: \[{tid}, "):
        tl.coarse.chain_rows(not_chain)
    b = GraphBuilder()
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    with pytest.raises(ConfigError, match=r"task 0 .*holds no gather chains"):
        _list_schedule(b.build()).chain_rows(0)
