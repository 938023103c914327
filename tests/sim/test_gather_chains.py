"""Gather chains (issue 27, ``perfmodel.parallel.lower_hidden`` ``_chain_static``): a ZeRO-3 /
FSDP operation whose every segment waits for its parameter gather (segments whose gathers
outlast the computes, and hidden gather runs) is one
:class:`~perfmodel.parallel.taskgraph.ChainTask` in the analytic graph, whose list schedule (``perfmodel.sim.chains._chain``) is the fine tasks' recurrence with
the same additions in the same order, and whose breakdown events are the fine tasks'. Every
report is bit for bit (``==``) the one without chains."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from report_compare import PIPELINED_ZERO, drawn_plan, gpt_scenario, pipelined_zero, plan_draws

import perfmodel.api as api
import perfmodel.sim.engine as engine
from perfmodel.api import Scenario, predict
from perfmodel.errors import PerfModelError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.periodic import PeriodicGraph
from perfmodel.parallel.taskgraph import (
    CHAIN_MARK,
    HEAD,
    ChainRow,
    ChainRun,
    ChainRunRow,
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
    piece_end,
)
from perfmodel.report.step_breakdown import breakdown, critical_device
from perfmodel.sim.engine import _list_schedule, periodic_timeline

GPT = {"layers": 24, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}

#: How many chains of the last :func:`_both` with chains held hidden gather runs.
RUN_CHAINS = [0]


def _both(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict, int]:
    """The report with gather chains and without, each computed afresh, and how many chain
    tasks the analytic graphs with them had (none without: the switch is not vacuous); how
    many of them hold hidden gather runs is left in ``RUN_CHAINS[0]``."""
    seen: list[int] = []
    runs: list[int] = []
    orig = engine._list_schedule

    def spy(g):  # type: ignore[no-untyped-def]
        seen.append(sum(1 for t in g.tasks if type(t) is ChainTask))
        runs.append(
            sum(1 for t in g.tasks if type(t) is ChainTask and t.chain[0].lead_proto is not None)
        )
        return orig(g)

    out = []
    chains = 0
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(HiddenCollectives, "CHAINS", on)
            m.setattr(api, "_REPORTS", {})
            m.setattr(engine, "_list_schedule", spy)
            out.append(predict(sc, baseline=False).to_dict())
            if on:
                chains = sum(seen)
                RUN_CHAINS[0] = sum(runs)
                seen.clear()
    assert sum(seen) == 0, f"{sum(seen)} chains with CHAINS off"
    return out[0], out[1], chains


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plan_draws(["fsdp", "deepspeed-zero3", "torchtitan"], mb=(1, 2)))
def test_reports_identical_without_chains(monkeypatch: pytest.MonkeyPatch, plan: dict) -> None:
    """Small GPTs over the ZeRO-3/FSDP presets, pipelines, schedules, recomputation, TP,
    micro-batches and one or two servers (hypothesis): every report field identical."""
    sc = drawn_plan(model_args=GPT, **plan)
    _identical_without_chains(sc, monkeypatch)


def _identical_without_chains(sc: Scenario | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The property of the drawn-plan tests: ``sc``'s report with chains equals the one
    without (a plan not drawn, or one the model refuses, is passed over)."""
    assume(sc is not None)
    try:
        with_chains, without, chains = _both(sc, monkeypatch)  # type: ignore[arg-type]
    except PerfModelError:  # a plan the model refuses (the batch does not divide)
        assume(False)
        return
    event(_chain_event(chains))
    assert with_chains == without


def _chain_event(chains: int) -> str:
    """The hypothesis event of a draw that formed ``chains`` chain tasks (``RUN_CHAINS[0]``
    of them with hidden gather runs): how often the properties exercise chains at all."""
    if not chains:
        return "no chain"
    return "chains, some with runs" if RUN_CHAINS[0] else "chains, no runs"


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plan_draws(["fsdp", "deepspeed-zero3", "torchtitan"], mb=(1,), nodes=(2,)))
def test_gather_bound_draws_identical_without_chains(
    monkeypatch: pytest.MonkeyPatch, plan: dict
) -> None:
    """:func:`test_reports_identical_without_chains` biased to gather-bound draws (two
    servers: the gathers cross them; micro-batch 1: short computes) and kept only where
    chains formed (the first property forms any in few of its draws)."""
    sc = drawn_plan(model_args=GPT, **plan)
    assume(sc is not None)
    try:
        with_chains, without, chains = _both(sc, monkeypatch)  # type: ignore[arg-type]
    except PerfModelError:  # a plan the model refuses (the batch does not divide)
        assume(False)
        return
    assume(chains > 0)
    event(_chain_event(chains))
    assert with_chains == without


@pytest.mark.parametrize(
    ("software", "tp", "pp", "extra"),
    [
        ("deepspeed-zero3", 2, 2, {}),
        ("deepspeed-zero3", 1, 4, {"schedule": "interleaved", "interleave": 2}),
        ("deepspeed-zero3", 2, 1, {}),
        ("deepspeed-zero3", 1, 4, {"recompute": "full"}),
    ],
)
def test_gather_bound_shapes_take_chains_and_equal_the_fine_tasks(
    monkeypatch: pytest.MonkeyPatch, software: str, tp: int, pp: int, extra: dict
) -> None:
    """Two DGX A100 servers, micro-batch 1: the gathers cross servers and outlast the
    segments' compute, so operations become chains (counted), with the same report."""
    sc = gpt_scenario(model_args=GPT, global_batch=64, software=software, nodes=2,
                      dp=16 // (tp * pp), tp=tp, pp=pp, microbatch=1,
                      **pipelined_zero(software, pp), **extra)  # fmt: skip
    with_chains, without, chains = _both(sc, monkeypatch)
    assert chains > 0
    assert with_chains == without


def test_gpt3_zero3_plans_of_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: the nine GPT-3 175B plans of ``bench_speed.py`` on 1024 A100 with
    ZeRO-3 gathers in every micro-batch (the interleaved dp8 tp16 pp8 micro-batch 1 plan:
    94,106 tasks before, 6,170 with chains), now DeepSpeed's ZeRO-3 (pipelined FSDP2 gathers
    once a step: ``Recipe.gather_per_step``): identical reports."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_scale import _plans
    from bench_search import BASE175
    from bench_speed import PLAN_KEYS

    total = runs = 0
    for p in _plans()[1:10]:
        keys = {k: p[k] for k in PLAN_KEYS}
        sc = Scenario.from_dict(
            {**BASE175, **keys, "software": "deepspeed-zero3", "fidelity": "analytic",
             "software_options": PIPELINED_ZERO}  # DeepSpeed refuses it with pp > 1: lifted
        )  # fmt: skip
        with_chains, without, chains = _both(sc, monkeypatch)
        assert with_chains == without
        total += chains
        runs += RUN_CHAINS[0]
    assert total > 12000  # 6,144 of the gather-bound plan, 3,072 of each pp 16 plan...
    assert runs > 6000  # ... those of the pp 16 plans all with hidden gather runs


@pytest.mark.parametrize(
    ("software", "tp", "pp", "microbatch", "extra"),
    [
        ("deepspeed-zero3", 1, 2, 4, {}),
        ("deepspeed-zero3", 2, 2, 4, {}),
        ("torchtitan", 1, 4, 8, {"schedule": "interleaved", "interleave": 2}),
        ("deepspeed-zero3", 1, 2, 8, {"recompute": "full"}),
    ],
)
def test_hidden_gather_runs_take_chains_and_equal_the_fine_tasks(
    monkeypatch: pytest.MonkeyPatch, software: str, tp: int, pp: int, microbatch: int, extra: dict
) -> None:
    """One DGX A100, larger micro-batches: the gathers hide under the computes, so operations
    lower hidden gather runs, and those become chains too (counted), with the same report."""
    sc = gpt_scenario(model_args=GPT, global_batch=128, software=software, nodes=1,
                      dp=8 // (tp * pp), tp=tp, pp=pp, microbatch=microbatch,
                      **pipelined_zero(software, pp), **extra)  # fmt: skip
    with_chains, without, chains = _both(sc, monkeypatch)
    assert chains > 0 and RUN_CHAINS[0] == chains
    assert with_chains == without


def _specs() -> tuple[CommSpec, CommSpec]:
    g = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0", "g1"), "auto", CommKind.ZERO)
    r = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, ("g0", "g1"), "auto", CommKind.DP)
    return g, r


def test_hand_computed_chain_and_its_fine_tasks() -> None:
    """One anchor compute X (1 s), then a chain of three segments: gathers 2, 0.5, 0.5 s
    (the first without an anchor, the second after X, the third after segment 0's compute),
    computes 1 s each (segment 0 with 0.25 s of TP after it), reductions 0.5 s each:
    gathers [0, 2], [2, 2.5], [3, 3.5]; computes [2, 3.25], [3.25, 4.25], [4.25, 5.25];
    reductions [3.25, 3.75], [4.25, 4.75], [5.25, 5.75]; a task on mark 1 (segment 1's
    compute) starts at 4.25, the optimizer on mark 3 (the last reduction) at 5.75. The graph
    of the fine tasks schedules the same times and gives the same breakdown."""
    g_spec, r_spec = _specs()
    segs = tuple(
        ChainSegment(g, 1.0, then, 0.5, g_spec.group, r_spec.group)
        for g, then in ((2.0, (0.25,)), (0.5, (0.0,)), (0.5, (0.0,)))
    )
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    static = ChainStatic(segs, "zero", "dp", True, g_proto, r_proto, frozenset(("g0", "g1")), None)
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    c = b.add_chain("g0", [x], "F0", 0, 0, (static, -1, x))
    w = b.add(TaskKind.COLLECTIVE, "g0", "other", 0.1, [chain_mark(c, 1)])
    o = b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, chain_mark(c, 3)])
    tl = _list_schedule(b.build())
    assert (tl.start_s[c], tl.end_s[c]) == (2.0, 5.25)
    assert tl.start_s[w] == 4.25 and tl.start_s[o] == 5.75
    marks, rows = tl.chain_marks(c), tl.chain_rows(c)  # type: ignore[index]
    assert marks == [3.0, 4.25, 5.25, 5.75]
    named = [ChainRow._make(r) for r in rows]
    assert [(r.gather_start_s, r.gather_end_s) for r in named] == [
        (0.0, 2.0),
        (2.0, 2.5),
        (3.0, 3.5),
    ]
    assert [(r.reduce_start_s, r.reduce_end_s) for r in named] == [
        (3.25, 3.75),
        (4.25, 4.75),
        (5.25, 5.75),
    ]
    # the fine tasks: gather, compute (an operation task), reduction per segment
    f = GraphBuilder()
    x = f.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    hist, prev = [x], [x]
    reds = []
    for g_s, _, then, red, _, _ in segs:
        ag = f.add(TaskKind.COLLECTIVE, "g0", "zero", g_s, hist[-2:-1], "AG", -1, -1, g_spec)
        tid = f.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [*prev, ag], "F0", 0, 0, None, then)
        hist.append(tid + HEAD)
        prev = [tid]
        reds.append(f.add(TaskKind.COLLECTIVE, "g0", "dp", red, prev, "grad", -1, -1, r_spec))
    f.add(TaskKind.COLLECTIVE, "g0", "other", 0.1, [hist[2]])
    f.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [prev[0], *reds])
    fine = _list_schedule(f.build())
    assert fine.makespan_s == tl.makespan_s == 6.75
    assert critical_device(fine) == critical_device(tl) == "g0"
    assert breakdown(fine) == breakdown(tl)
    bd = breakdown(tl)
    assert (bd.compute_s, bd.exposed_comm_s, bd.optimizer_s) == (
        4.0,
        {"zero": 1.0, "tp": 0.25, "dp": 0.5},
        1.0,
    )


def test_pickled_chains_schedule_as_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph with gather chains keeps them through pickling (a report's periodic timeline
    holds its graph; sweeps pickle reports across processes): every chain task's ``then_s`` is
    ``CHAIN_MARK`` again (the executors test its identity; an equal copy made a chain an
    operation task of one 0 s piece), and the analytic timeline of the copy is the
    original's: a hand-computed one-segment chain after a 1 s compute (gather [0, 2], compute
    [2, 3], reduction [3, 3.5]: the optimizer on its last mark at 3.5), and every graph of a
    one-server FSDP plan with hidden gather runs."""
    import pickle

    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    c = b.add_chain("g0", [x], "F0", 0, 0, (_chain_static(2.0), -1, x))
    b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, chain_mark(c, 1)])
    graphs = [b.build()]
    orig = engine._list_schedule

    def spy(g):  # type: ignore[no-untyped-def]
        graphs.append(g)
        return orig(g)

    monkeypatch.setattr(api, "_REPORTS", {})
    monkeypatch.setattr(engine, "_list_schedule", spy)
    sc = gpt_scenario(model_args=GPT, global_batch=128, software="deepspeed-zero3", nodes=1,
                      dp=4, tp=1, pp=2, microbatch=4,
                      software_options=PIPELINED_ZERO)  # fmt: skip
    predict(sc, baseline=False)
    monkeypatch.undo()
    for g in graphs:
        back = pickle.loads(pickle.dumps(g))
        chains = [t for t in back.tasks if type(t) is ChainTask]
        assert all(t.then_s is CHAIN_MARK for t in chains)
        a, z = _list_schedule(g), _list_schedule(back)
        assert (z.start_s, z.end_s, z.chains) == (a.start_s, a.end_s, a.chains)
    hand = _list_schedule(pickle.loads(pickle.dumps(graphs[0])))
    assert (hand.start_s[c], hand.end_s[c], hand.start_s[c + 1]) == (2.0, 3.0, 3.5)
    assert sum(type(t) is ChainTask for g in graphs[1:] for t in g.tasks) > 0


def test_hand_computed_run_chain_and_its_fine_tasks() -> None:
    """One anchor compute X (1 s) and an earlier lead (2 s), then a chain of a hidden gather
    run and a segment. The run: gathers 0.5 s each (the first without an anchor: [0, 0.5];
    the second after X: [1, 1.5]), its task from 1 s with pieces TP 0.25, compute 2 (mark
    3.25), TP 0, compute 1 (mark 4.25), TP 0.25 (ends 4.5), its lead of 1.5 s from its start
    once the lead stream is free ([2, 3.5]) and its summary reduction of 1 s ([3.5, 4.5]). The segment: gather 0.5 s after the run's first
    compute ([3.25, 3.75]), compute 1 s ([4.5, 5.5]), reduction 0.5 s ([5.5, 6]). A task on
    mark 2 starts at 5.5, the optimizer on mark 3 (the last reduction) at 6. The graph of the
    fine tasks schedules the same times and gives the same breakdown."""
    g_spec, r_spec = _specs()
    then_r = (0.25, 2.0, 0.0, 1.0, 0.25)
    run = ChainRun(0.5, 0.0, then_r, 1.0, g_spec.group, r_spec.group, 0.5, g_spec.group, 1.5)
    seg = ChainSegment(0.5, 1.0, (0.0,), 0.5, g_spec.group, r_spec.group)
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    lead = Task(-1, TaskKind.COMPUTE, "g0", "grad-lead", 0.0)
    members = frozenset(("g0", "g1"))
    static = ChainStatic((run, seg), "zero", "dp", True, g_proto, r_proto, members, lead)
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    b.add(TaskKind.COMPUTE, "g0", "grad-lead", 2.0)
    c = b.add_chain("g0", [x], "B0", 0, 0, (static, -1, x))
    w = b.add(TaskKind.COLLECTIVE, "g0", "other", 0.1, [chain_mark(c, 2)])
    o = b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, chain_mark(c, 3)])
    tl = _list_schedule(b.build())
    assert (tl.start_s[c], tl.end_s[c]) == (1.0, 5.5)
    assert tl.start_s[w] == 5.5 and tl.start_s[o] == 6.0
    marks, rows = tl.chain_marks(c), tl.chain_rows(c)  # type: ignore[index]
    assert marks == [3.25, 4.25, 5.5, 6.0]
    assert rows == [
        ChainRunRow(0.0, 0.5, 1.0, 1.0, 4.5, 3.5, 4.5, 1.0, 1.5, 2.0, 3.5),
        ChainRow(3.25, 3.75, 4.5, 5.5, 5.5, 5.5, 6.0),
    ]
    assert [type(r) for r in rows] == [tuple, tuple]  # plain (ChainRow's docstring)
    assert ChainRunRow._make(rows[0]).lead_end_s == 3.5
    assert ChainRow._make(rows[1]).compute_start_s == 4.5
    # the fine tasks (lower_hidden._lower_run, then the fine loop)
    f = GraphBuilder()
    x = f.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    f.add(TaskKind.COMPUTE, "g0", "grad-lead", 2.0)
    hist = [x]
    ag = f.add(TaskKind.COLLECTIVE, "g0", "zero", 0.5, hist[-2:-1], "AG", -1, -1, g_spec)
    f.add(TaskKind.COLLECTIVE, "g0", "zero", 0.5, hist[-1:], "AG", -1, -1, g_spec)
    t = f.add(TaskKind.COMPUTE, "g0", "compute", 0.0, [x, ag], "B0", 0, 0, None, then_r)
    hist += [piece_end(t, 2), piece_end(t, 4)]
    ld = f.add(TaskKind.COMPUTE, "g0", "grad-lead", 1.5, [t + HEAD], "lead", 0, 0)
    red0 = f.add(TaskKind.COLLECTIVE, "g0", "dp", 1.0, [ld], "grad", -1, -1, r_spec)
    ag = f.add(TaskKind.COLLECTIVE, "g0", "zero", 0.5, hist[-2:-1], "AG", -1, -1, g_spec)
    s = f.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [t, ag], "B0", 0, 0, None, (0.0,))
    red1 = f.add(TaskKind.COLLECTIVE, "g0", "dp", 0.5, [s], "grad", -1, -1, r_spec)
    f.add(TaskKind.COLLECTIVE, "g0", "other", 0.1, [s + HEAD])
    f.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [s, red0, red1])
    fine = _list_schedule(f.build())
    assert fine.makespan_s == tl.makespan_s == 7.0
    assert critical_device(fine) == critical_device(tl) == "g0"
    assert breakdown(fine) == breakdown(tl)
    bd = breakdown(tl)
    assert (bd.compute_s, bd.exposed_comm_s, bd.optimizer_s) == (
        5.0,
        {"tp": 0.5, "dp": 0.5},
        1.0,
    )


def test_a_chain_drops_negative_dependencies() -> None:
    """A stage's first operation without a host task waits on ``-1`` (no task): the chain drops
    it as ``GraphBuilder.add`` does (``lower_synthetic`` steps with runs failed on it)."""
    g_spec, r_spec = _specs()
    seg = ChainSegment(0.5, 1.0, (0.0,), 0.5, g_spec.group, r_spec.group)
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    static = ChainStatic(
        (seg,), "zero", "dp", False, g_proto, r_proto, frozenset(("g0", "g1")), None
    )
    b = GraphBuilder()
    c = b.add_chain("g0", [-1], "F0", 0, 0, (static, -1, -1))
    assert b.tasks[c].deps == ()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    d = b.add_chain("g0", [x, -1, x], "F1", 1, 0, (static, -1, -1))
    assert b.tasks[d].deps == (x,)
    tl = _list_schedule(b.build())
    assert (tl.start_s[c], tl.end_s[c]) == (0.5, 1.5)


def _chain_static(gather_s: float) -> ChainStatic:
    """A one-segment chain: gather ``gather_s``, compute 1 s, reduction 0.5 s."""
    g_spec, r_spec = _specs()
    seg = ChainSegment(gather_s, 1.0, (0.0,), 0.5, g_spec.group, r_spec.group)
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    return ChainStatic((seg,), "zero", "dp", True, g_proto, r_proto, frozenset(("g0",)), None)


def test_chain_tasks_equal_only_with_the_same_chain() -> None:
    """Two chain tasks of the same fields (every one's ``then_s`` is ``CHAIN_MARK``, its
    duration 0) that stand for different gathers are not equal; the same chain is, with the
    same hash; a plain task of the same fields is not."""

    def chain_task(gather_s: float) -> ChainTask:
        b = GraphBuilder()
        return b.tasks[b.add_chain("g0", [], "F0", 0, 0, (_chain_static(gather_s), -1, -1))]

    x, y, z = chain_task(2.0), chain_task(3.0), chain_task(2.0)
    assert type(x) is ChainTask and x.chain is not z.chain
    assert x != y and y != x
    assert x == z and hash(x) == hash(z)
    plain = Task(x.tid, x.kind, x.device, x.stream, 0.0, x.deps, x.label, 0, 0)
    assert x != plain and plain != x


def test_periodic_check_refuses_gather_chains() -> None:
    """A short schedule whose micro-batches are each one gather chain (one device, 1F1B units
    of one micro-batch, every unit a shifted copy of the previous) is refused by the periodic
    check (``0``: the whole step is scheduled), so ``evaluate`` gives the whole graph's list
    schedule with every chain's rows."""

    def graph(m: int) -> TaskGraph:
        b = GraphBuilder()
        prev: list[int] = []
        for j in range(m):
            prev = [b.add_chain("g0", prev, f"F{j}", j, 0, (_chain_static(2.0), -1, -1))]
        b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, prev)
        return b.build()

    pg = PeriodicGraph(lambda: graph(64), graph, 16, 64)
    assert periodic_timeline(pg, 16) == 0
    tl = engine.evaluate(pg)
    whole = _list_schedule(graph(64))
    assert tl.end_s == whole.end_s and tl.chains == whole.chains
    assert len(tl.chains) == 64  # type: ignore[arg-type]


def test_no_chain_where_gathers_and_reductions_share_a_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_chain`` tracks the gather and the reduction stream's free times apart: a recipe
    whose ZeRO-3 gathers ran on the gradient-reduction stream (today they run on ``"ag"``)
    gets the fine tasks, not a chain, and the same report (a gather-bound shape of
    :func:`test_gather_bound_shapes_take_chains_and_equal_the_fine_tasks`)."""
    import perfmodel.parallel.recipe as recipe

    sc = gpt_scenario(model_args=GPT, global_batch=64, software="deepspeed-zero3", nodes=2,
                      dp=4, tp=2, pp=2, microbatch=1,
                      software_options=PIPELINED_ZERO)  # fmt: skip
    assert _both(sc, monkeypatch)[2] > 0  # on "ag": chains
    monkeypatch.setattr(recipe, "STREAM_GATHER", recipe.STREAM_DP)
    with_chains, without, chains = _both(sc, monkeypatch)
    assert chains == 0
    assert with_chains == without


_SECONDS = st.floats(0.0, 4.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    segs=st.lists(
        st.tuples(_SECONDS, _SECONDS, st.lists(_SECONDS, min_size=1, max_size=3), _SECONDS),
        min_size=1,
        max_size=8,
    ),
    reducing=st.booleans(),
    busy=st.tuples(_SECONDS, _SECONDS, _SECONDS),
)
def test_a_chain_is_its_fine_tasks(
    segs: list[tuple[float, float, list[float], float]],
    reducing: bool,
    busy: tuple[float, float, float],
) -> None:
    """A chain of drawn segments (gather, first compute, ``then_s`` of one to three pieces,
    reduction: ``ChainStatic.flat``'s one-piece recurrence where every ``then_s`` is one
    piece, the general one else), after an anchor compute and with its gather and reduction
    streams busy at first, schedules bit for bit as its fine tasks (the graph of
    :func:`test_hand_computed_chain_and_its_fine_tasks`): every gather, compute and
    reduction, the marks, the chain's end, what waits on them and a task on each of its
    reduction and gather streams after it; and its breakdown is theirs
    (``step_breakdown._chain_events`` reading ``chain_rows`` where ``flat`` is made)."""
    g_spec, r_spec = _specs()
    items = tuple(
        ChainSegment(g, c, tuple(then), r if reducing else 0.0, g_spec.group, r_spec.group)
        for g, c, then, r in segs
    )
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    members = frozenset(("g0", "g1"))
    static = ChainStatic(items, "zero", "dp", reducing, g_proto, r_proto, members, None)
    assert (static.flat is not None) == all(len(then) == 1 for _, _, then, _ in segs)
    x_s, zero_s, dp_s = busy
    n = len(items)

    def before(b: GraphBuilder) -> int:
        x = b.add(TaskKind.COMPUTE, "g0", "compute", x_s)
        b.add(TaskKind.COLLECTIVE, "g0", "zero", zero_s)
        b.add(TaskKind.COLLECTIVE, "g0", "dp", dp_s)
        return x

    b = GraphBuilder()
    x = before(b)
    c = b.add_chain("g0", [x], "F0", 0, 0, (static, -1, x))
    w = b.add(TaskKind.COLLECTIVE, "g0", "other", 0.1, [chain_mark(c, n - 1)])
    # the optimizer on the last reduction (mark n) where the operation reduces (the lowering)
    o = b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, chain_mark(c, n)] if reducing else [c])
    # a task on each of the chain's reduction and gather streams after it: they start when the
    # chain leaves those streams free (``_chain``'s write-back of both free times)
    after = [b.add(TaskKind.COLLECTIVE, "g0", stream, 0.1) for stream in ("dp", "zero")]
    tl = _list_schedule(b.build())
    marks, rows = tl.chain_marks(c), tl.chain_rows(c)  # type: ignore[index]
    f = GraphBuilder()
    x = before(f)
    hist, prev = [x], [x]
    fine: list[tuple[float, ...]] = []
    reds = []
    for it in items:
        ag = f.add(TaskKind.COLLECTIVE, "g0", "zero", it.gather_s, hist[-2:-1], "AG", -1, -1,
                   g_spec)  # fmt: skip
        tid = f.add(TaskKind.COMPUTE, "g0", "compute", it.compute_s, [*prev, ag], "F0", 0, 0,
                    None, it.then_s)  # fmt: skip
        hist.append(tid + HEAD)
        prev = [tid]
        if reducing:
            reds.append(f.add(TaskKind.COLLECTIVE, "g0", "dp", it.reduce_s, prev, "grad", -1,
                              -1, r_spec))  # fmt: skip
        fine.append((ag, tid, reds[-1] if reducing else -1))
    fw = f.add(TaskKind.COLLECTIVE, "g0", "other", 0.1, [hist[-1]])
    fo = f.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [prev[0], *reds])
    f_after = [f.add(TaskKind.COLLECTIVE, "g0", stream, 0.1) for stream in ("dp", "zero")]
    ft = _list_schedule(f.build())
    for row, (ag, tid, red), it in zip(rows, fine, items, strict=True):
        r = ChainRow._make(row)
        assert (r.gather_start_s, r.gather_end_s) == (ft.start_s[ag], ft.end_s[ag])
        assert (r.compute_start_s, r.end_s) == (ft.start_s[tid], ft.end_s[tid])
        assert r.head_end_s == ft.start_s[tid] + it.compute_s
        if reducing:
            assert (r.reduce_start_s, r.reduce_end_s) == (ft.start_s[red], ft.end_s[red])
    assert marks[:n] == [ChainRow._make(r).head_end_s for r in rows]
    assert tl.end_s[c] == ft.end_s[fine[-1][1]]
    assert (tl.start_s[w], tl.start_s[o]) == (ft.start_s[fw], ft.start_s[fo])
    assert [tl.start_s[a] for a in after] == [ft.start_s[a] for a in f_after]
    assert tl.makespan_s == ft.makespan_s
    assert critical_device(tl) == critical_device(ft) == "g0"
    assert breakdown(tl) == breakdown(ft)


#: A GPT whose stages hold three or more of Megatron-Core's gradient buckets (each a segment
#: with its own overlapped parameter gather): :data:`GPT`'s stages hold one or two.
BUCKETED_GPT = {"layers": 32, "hidden": 2048, "heads": 16, "seq_len": 1024, "vocab": 8000}


@pytest.mark.parametrize(
    ("software", "tp", "pp", "microbatch", "nodes", "extra", "chained"),
    [
        ("megatron-core", 2, 2, 1, 2, {}, True),
        # stages' data-parallel groups across the two servers (the order tp,pp,dp): the default
        # tp,dp,pp keeps each stage's group in one server, where the gathers hide (runs)
        ("megatron-core", 1, 4, 1, 2, {"placement": "tp,pp,dp"}, True),
        # the same plan in the default order: each stage's group in one server, no chains
        ("megatron-core", 1, 4, 1, 2, {}, False),
        ("megatron-core", 2, 1, 1, 2, {}, True),
        ("megatron-core", 2, 2, 8, 1, {}, True),
        ("megatron-core", 4, 1, 4, 1, {"recompute": "full"}, True),
        ("nemo", 2, 2, 1, 2, {}, True),
        # the gathers hide under the computes (runs): TP on its own stream, so the runs are
        # not one operation task and the operation keeps its fine tasks
        ("megatron-core", 1, 2, 8, 1, {}, False),
        # interleaved: each chunk's gathers launch together after gather_deps (aligned_gather),
        # not one prefetch anchor apart: another recurrence, so no chain
        ("megatron-core", 1, 4, 1, 2, {"schedule": "interleaved", "interleave": 2}, False),
        ("megatron-core", 2, 2, 4, 1, {"schedule": "interleaved", "interleave": 2}, False),
    ],
)
def test_megatron_core_first_forward_gathers_take_chains(
    monkeypatch: pytest.MonkeyPatch,
    software: str,
    tp: int,
    pp: int,
    microbatch: int,
    nodes: int,
    extra: dict,
    chained: bool,
) -> None:
    """Megatron-Core's ``overlap_param_gather`` (distributed optimizer, ``gather_early``):
    the first micro-batch's forward waits for a gather per bucket, prefetched one segment
    ahead after the stage's last computes, as a ZeRO-3 forward does, so under 1F1B it is one
    chain (counted) with the report of the fine tasks; interleaved schedules and hidden runs
    keep their fine tasks (no chain) and the same report."""
    sc = gpt_scenario(model_args=BUCKETED_GPT, global_batch=64, software=software, nodes=nodes,
                      dp=8 * nodes // (tp * pp), tp=tp, pp=pp, microbatch=microbatch,
                      **extra)  # fmt: skip
    with_chains, without, chains = _both(sc, monkeypatch)
    assert (chains > 0) == chained
    assert with_chains == without


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plan_draws(["megatron-core", "nemo"], mb=(1, 2, 8)))
def test_megatron_core_draws_identical_without_chains(
    monkeypatch: pytest.MonkeyPatch, plan: dict
) -> None:
    """:func:`test_reports_identical_without_chains` over the Megatron-Core and NeMo presets
    (overlapped ZeRO-1 gathers in the first forward) on :data:`BUCKETED_GPT`."""
    sc = drawn_plan(model_args=BUCKETED_GPT, **plan)
    _identical_without_chains(sc, monkeypatch)


@pytest.mark.parametrize("software", ["megatron-core", "nemo"])
def test_gpt3_megatron_core_plans_of_the_benchmark(
    monkeypatch: pytest.MonkeyPatch, software: str
) -> None:
    """The first ten GPT-3 175B plans of ``bench_scale.py`` on 1024 A100 with Megatron-Core's
    and NeMo's presets: identical reports with chains. Some of them take the periodic
    extension, whose short schedules keep their fine gathers (its check refuses a schedule
    with chains: the whole step scheduled instead differs from the extension in the last
    bits); the others chain their first forwards."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_scale import _plans
    from bench_search import BASE175
    from bench_speed import PLAN_KEYS

    total = 0
    for p in _plans()[:10]:
        sc = Scenario.from_dict({**BASE175, **{k: p[k] for k in PLAN_KEYS}, "software": software,
                                 "fidelity": "analytic"})  # fmt: skip
        with_chains, without, chains = _both(sc, monkeypatch)
        assert with_chains == without
        total += chains
    assert total > 0
