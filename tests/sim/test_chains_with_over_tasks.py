"""A graph with both gather chains and OverTasks (wave 13: speed13c meets speed13f).

A Megatron-Core 1F1B plan's first forward lowers its parameter gathers as a gather chain
(``lower_hidden.lower_gather_runs``) and its later segments whose TP collective outlasts the
compute as :class:`~perfmodel.parallel.taskgraph.OverTask` (``lower_replay.over_op``). From
the first chain on, the list schedule runs in ``sim.engine._chain_mode``, which must run an
OverTask's recurrence (``_over``) and add its compute-stream pieces to the busy seconds it
keeps (``Timeline.busy_s``) exactly as ``report.step_breakdown._compute_busy`` adds them; each
test compares ``busy_s`` with that reader's sum (``busy_s`` cleared) and the schedule,
busy seconds and breakdown with those of the same graph lowered without OverTasks."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_synthetic import DURATION_S

import perfmodel.api as api
import perfmodel.sim.engine as engine
from perfmodel.api import Scenario, predict
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lower_replay import OperationReplay
from perfmodel.parallel.taskgraph import (
    _S_THEN,
    CHAIN_MARK,
    ChainSegment,
    ChainStatic,
    CommKind,
    CommSpec,
    GraphBuilder,
    OverTask,
    Task,
    TaskGraph,
    TaskKind,
)
from perfmodel.report import step_breakdown as sb
from perfmodel.sim.engine import Timeline, _list_schedule


def _operation(b: GraphBuilder, d: dict[str, float], deps: list[int], j: int, merged: bool) -> int:
    """Operation ``j`` on ``g0``: compute ``c``, its TP collective ``t`` beside it, the exposed
    tail and one later segment (``c2`` + ``tail2``); ``merged``: as one OverTask. Its last
    task."""
    c, t, tail, c2, tail2 = (d[f"{k}{j}"] for k in ("c", "t", "tail", "c2", "tail2"))
    if merged:
        op = b.add_over("g0", c, deps, f"F{j}", j, 0, (tail,), ("tp", t))
        _S_THEN(b.tasks[op], (tail, c2, tail2))
        return op
    ci = b.add(TaskKind.COMPUTE, "g0", "compute", c, deps, f"F{j}", j, 0)
    ti = b.add(TaskKind.COLLECTIVE, "g0", "tp", t, deps, f"TP F{j}", j, 0)
    tl = b.add(TaskKind.COLLECTIVE, "g0", "compute", tail, [ci, ti], f"TP tail F{j}", j, 0)
    return b.add(TaskKind.COMPUTE, "g0", "compute", c2, [tl], f"F{j}", j, 0, None, (tail2,))


def _graph(d: dict[str, float], segs: list[tuple[float, ...]], merged: bool) -> TaskGraph:
    """Busy compute, TP and gather streams; an operation (OverTask or its four tasks) before
    the first chain; a gather chain of ``segs`` on ``g0``; another operation after it on its
    marks; tasks after it on both devices."""
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0", "g1"), "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, ("g0", "g1"), "auto", CommKind.DP)
    items = tuple(ChainSegment(g, c, (x,), 0.0, g_spec.group, r_spec.group) for g, c, x in segs)
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    static = ChainStatic(
        items, "zero", "dp", False, g_proto, r_proto, frozenset(("g0", "g1")), None
    )
    b = GraphBuilder()
    pre = b.add(TaskKind.COMPUTE, "g0", "compute", d["pre_c"], label="pre")
    b.add(TaskKind.COLLECTIVE, "g0", "tp", d["pre_t"], label="TP pre")
    b.add(TaskKind.COLLECTIVE, "g0", "zero", d["pre_g"], label="gather pre")
    dep = b.add(TaskKind.COMPUTE, "g1", "compute", d["dep"], label="input")
    first = _operation(b, d, [pre, dep], 1, merged)
    chain = b.add_chain("g0", [first], "F2", 2, 0, (static, -1, first))
    second = _operation(b, d, [chain], 3, merged)
    b.add(TaskKind.COMPUTE, "g0", "compute", d["post"], [second], "F4", 4, 0)
    b.add(TaskKind.COLLECTIVE, "g0", "tp", d["post_t"], [], "TP F4", 4, 0)
    b.add(TaskKind.COMPUTE, "g1", "compute", d["post"], [second], "B1", 1, 0)
    return b.build()


_OPS = tuple(f"{k}{j}" for j in (1, 3) for k in ("c", "t", "tail", "c2", "tail2"))
_KEYS = ("pre_c", "pre_t", "pre_g", "dep", "post", "post_t", *_OPS)


def _assert_busy_kept(tl: Timeline) -> None:
    """``tl`` kept busy seconds (a graph with chains) equal, bit for bit, to the reader's."""
    assert tl.busy_s is not None
    assert tl.busy_s == sb._compute_busy(dataclasses.replace(tl, busy_s=None))


@settings(max_examples=150, deadline=None)
@given(
    d=st.fixed_dictionaries({k: DURATION_S for k in _KEYS}),
    segs=st.lists(st.tuples(DURATION_S, DURATION_S, DURATION_S), min_size=1, max_size=5),
)
def test_drawn_chain_between_over_tasks(
    d: dict[str, float], segs: list[tuple[float, float, float]]
) -> None:
    """Drawn durations, an OverTask before the first chain (summed by ``_chain_mode``'s
    prologue) and one after it (its loop): the busy seconds it kept are the reader's, and the
    schedule's makespan, busy seconds and breakdown classes equal the graph's with each
    OverTask as its four tasks."""
    coarse, fine = _graph(d, segs, merged=True), _graph(d, segs, merged=False)
    assert sum(type(t) is OverTask for t in coarse.tasks) == 2
    assert sum(t.then_s is CHAIN_MARK for t in coarse.tasks) == 1
    tc, tf = _list_schedule(coarse), _list_schedule(fine)
    _assert_busy_kept(tc)
    _assert_busy_kept(tf)
    assert tc.overs is not None and len(tc.overs) == 2 and tf.overs is None
    assert tc.busy_s == tf.busy_s
    span = tc.makespan_s
    assert span == tf.makespan_s
    assert tc.end_s[-3:] == tf.end_s[-3:]  # the tasks after the second operation
    for dev in ("g0", "g1"):
        assert sb._class_seconds(tc, dev, 0.0, span) == sb._class_seconds(tf, dev, 0.0, span)
    assert sb.breakdown(tc) == sb.breakdown(tf)


#: A GPT-3 175B plan of ``reports12`` (1024 A100) whose Megatron-Core graph holds both
MIXED = {"dp": 64, "tp": 8, "pp": 2, "microbatch": 2, "schedule": "1f1b", "interleave": 1}


@pytest.mark.parametrize("preset", ["megatron-core", "nemo"])
def test_gpt3_plan_with_chains_and_over_tasks(monkeypatch: pytest.MonkeyPatch, preset: str) -> None:
    """dp64 tp8 pp2 micro-batch 2, 1F1B: the analytic graph holds a gather chain (its first
    forward) and OverTasks after it; the busy seconds kept are the reader's, and the report
    (timeline included) is the one lowered without OverTasks."""
    sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_scale import _plans
    from bench_search import BASE175

    keys = ("dp", "tp", "pp", "microbatch", "schedule", "interleave", "gpus", "global_batch")
    plan = next(p for p in _plans() if all(p[k] == v for k, v in MIXED.items()))  # one of the ten
    sc = Scenario.from_dict(
        {**BASE175, **{k: plan[k] for k in keys}, "software": preset, "fidelity": "analytic"}
    )
    orig = engine._list_schedule
    out, kept = [], []
    for on in (True, False):
        seen: list[Timeline] = []

        def spy(g: TaskGraph, seen: list[Timeline] = seen) -> Timeline:
            tl = orig(g)
            seen.append(tl)
            return tl

        with monkeypatch.context() as m:
            m.setattr(OperationReplay, "OVER_TASKS", on)
            m.setattr(api, "_REPORTS", {})
            m.setattr(engine, "_list_schedule", spy)
            r = predict(sc, baseline=False)
        out.append((repr(r.to_dict()), r.iteration_time_s, r.timeline.end_s))
        kept.append(seen)
    both = [
        tl
        for tl in kept[0]
        if tl.chains is not None and any(type(t) is OverTask for t in tl.graph.tasks)
    ]
    assert both  # the comparison is not vacuous
    assert not any(type(t) is OverTask for tl in kept[1] for t in tl.graph.tasks)
    for tl in kept[0] + kept[1]:
        if tl.chains is not None:
            _assert_busy_kept(tl)
    assert out[0] == out[1]
