"""The analytic executor's periodic extension (issue 14: cost independent of the micro-batches).

A 1F1B step of identical micro-batches is evaluated from a short schedule of ``2 pp + 7``
micro-batches extended by its period (``perfmodel.sim.engine.periodic_timeline``). Every report
field must equal the whole schedule's (to 1e-9 relative), and the extension must refuse where
the short schedule does not show the periodic regime.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from report_compare import ZERO3_LIFTED, assert_close, gpt_scenario

import perfmodel.api as api
import perfmodel.sim.engine as engine
from perfmodel.api import Scenario, predict, resolve
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.periodic import PeriodicGraph
from perfmodel.parallel.taskgraph import SENT, GraphBuilder, Task, TaskKind
from perfmodel.pipeline.lower import build_step
from perfmodel.report.step_breakdown import breakdown, critical_device
from perfmodel.report.trace import chrome_trace
from perfmodel.sim.engine import PeriodicTimeline, _list_schedule, evaluate

GPT = {"layers": 8, "hidden": 4096, "heads": 32, "seq_len": 2048, "vocab": 32000}


def _scenario(**kw: object) -> Scenario:
    return gpt_scenario(**{"model_args": GPT, "global_batch": 96, "software": "megatron", **kw})


def _full_report(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The report with the whole schedule (no short schedules offered)."""
    with monkeypatch.context() as m:
        m.setattr(PipelineLowering, "periodic_count", lambda self: 0)
        m.setattr(api, "_REPORTS", {})
        return predict(sc, baseline=False).to_dict()


CASES = {
    # pp 2: 48 micro-batches from a 16-micro-batch schedule; megatron's eager host issues kernels
    "pp2": {},
    # pp 4 across two servers (pipeline sends over the NICs), 48 micro-batches from 18
    "pp4-2nodes": dict(nodes=2, dp=2, pp=4, global_batch=96),
    # tied embedding all-reduce, gradient overlap of the last micro-batch (pytorch-style DDP)
    "mcore-overlap": dict(software="megatron-core", global_batch=128),
    # one stage: a long 1F1B of one device with ZeRO-1
    "pp1": dict(pp=1, tp=2, dp=4, zero=1, global_batch=256),
    # full recomputation, sequence parallelism, micro-batch 2
    "recompute-sp": dict(recompute="full", sequence_parallel=True, microbatch=2, global_batch=192),
    # interleaved 1F1B: rounds of pp micro-batches are the unit; 48 micro-batches from 26 (the
    # eager host's kernel issue must be over first)
    "interleaved": dict(schedule="interleaved", interleave=2),
    # interleaved, 4 stages x 3 chunks across two servers, ZeRO-1 with Megatron-Core's
    # overlapped gradient reduction and parameter gather: 96 micro-batches from 56
    "interleaved-pp4-mcore": dict(
        model_args={**GPT, "layers": 12},
        software="megatron-core",
        schedule="interleaved",
        interleave=3,
        pp=4,
        nodes=2,
        dp=2,
        zero=1,
        global_batch=192,
    ),
    # the interleaved schedule with one chunk per stage (warm-up 2 (pp - 1) forwards, unlike
    # 1F1B's pp - 1): 96 micro-batches from 48
    "interleaved-one-chunk": dict(schedule="interleaved", interleave=1, pp=4, dp=1),
    # pipelined FSDP2 (Recipe.gather_per_step): each unit gathered in the first micro-batch's
    # forward, the gradients reduce-scattered after the last backward; two servers
    "fsdp-pipelined": dict(software="fsdp", nodes=2, dp=4, pp=2, global_batch=192),
    # the same with torchtitan's fp32 reduction, interleaved (no aligned gather launch)
    "torchtitan-interleaved": dict(
        software="torchtitan", schedule="interleaved", interleave=2, tp=1, dp=4, global_batch=192
    ),
    # interleaved with full recomputation, no tensor parallelism (pipeline sends unsplit):
    # 64 micro-batches from 24
    "interleaved-recompute": dict(
        schedule="interleaved", interleave=4, tp=1, dp=4, recompute="full", global_batch=256
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_periodic_report_equals_full_schedule(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sc = _scenario(**CASES[name])
    step, _ = build_step(sc, resolve(sc))
    assert isinstance(step.graph, PeriodicGraph)
    tl = evaluate(step.graph)
    assert isinstance(tl, PeriodicTimeline), "the shortcut should apply here"
    whole = _list_schedule(step.graph.full())
    assert math.isclose(tl.makespan_s, whole.makespan_s, rel_tol=1e-12)
    assert critical_device(tl) == critical_device(whole)
    for dev in whole.graph.devices:  # every device's breakdown, not only the critical one's
        assert_close(breakdown(tl, dev).to_dict(), breakdown(whole, dev).to_dict(), path=dev)
    # end to end: every field of the report, against the report of the whole schedule
    monkeypatch.setattr(api, "_REPORTS", {})
    fast = predict(sc, baseline=False)
    assert isinstance(fast.timeline, PeriodicTimeline)
    assert_close(fast.to_dict(), _full_report(sc, monkeypatch))
    # the per-task times (traces, Gantt) are the whole schedule's
    assert fast.timeline.end_s == whole.end_s and fast.timeline.graph.tasks == whole.graph.tasks
    assert chrome_trace(fast.timeline) == chrome_trace(whole)


@pytest.mark.parametrize(
    "kw",
    [
        dict(schedule="gpipe"),
        dict(zero=2, software="megatron-core"),
        dict(**ZERO3_LIFTED, tp=1, dp=4, pp=2, global_batch=192),  # gathers every one
        dict(global_batch=16),  # 8 micro-batches: no shorter schedule to take
    ],
)
def test_not_offered_where_micro_batches_differ(kw: dict) -> None:
    sc = _scenario(**kw)
    step, _ = build_step(sc, resolve(sc))
    assert not isinstance(step.graph, PeriodicGraph)


def _chain(
    m: int, fwd: list[float], bwd: list[float], host_s: float = 0.0, *, k: int = 7, unit: int = 1
) -> PeriodicGraph:
    """One device, 1F1B of ``m`` micro-batches (forward ``fwd[j]``, backward ``bwd[j]`` s),
    then an optimizer of 0.5 s; with ``host_s``, a host task from 0 that the optimizer waits
    for (an eager host's kernel issue): a hand-made :class:`PeriodicGraph`."""

    def build(k: int):
        b = GraphBuilder()
        host = b.add(TaskKind.HOST, "g0", "host", host_s, (), "issue") if host_s else -1
        prev = -1
        for j in range(k):
            f = b.add(TaskKind.COMPUTE, "g0", "compute", fwd[j], [prev], "F", j)
            prev = b.add(TaskKind.COMPUTE, "g0", "compute", bwd[j], [f], "B", j)
        b.add(TaskKind.OPTIMIZER, "g0", "compute", 0.5, [prev, host], "optimizer")
        return b.build()

    return PeriodicGraph(lambda: build(m), build, k, m, unit=unit)


def test_hand_computed_extension() -> None:
    """100 micro-batches of 1 s forward + 2 s backward from a 7-micro-batch schedule:
    3 x 100 + 0.5 = 300.5 s, 300 s compute, 0.5 s optimizer."""
    g = _chain(100, [1.0] * 100, [2.0] * 100)
    tl = evaluate(g)
    assert isinstance(tl, PeriodicTimeline)
    assert tl.makespan_s == pytest.approx(300.5, rel=1e-12)
    bd = breakdown(tl, period_s=301.0)
    assert (bd.compute_s, bd.optimizer_s, bd.bubble_s) == pytest.approx((300.0, 0.5, 0.5))


def test_refuses_when_micro_batches_differ() -> None:
    """Micro-batches alternating 1 s and 2 s forwards: no micro-batch is a shifted copy of the
    previous one, so the whole graph is scheduled: 100 x 2 + 50 x 1 + 50 x 2 + 0.5 s."""
    fwd = [1.0 + j % 2 for j in range(100)]
    g = _chain(100, fwd, [2.0] * 100)
    tl = evaluate(g)
    assert not isinstance(tl, PeriodicTimeline)
    assert tl.makespan_s == pytest.approx(350.5)


def test_unit_of_two_micro_batches() -> None:
    """The same alternating micro-batches with a period of two micro-batches (the unit of an
    interleaved schedule over two stages): every pair is a shifted copy of the previous one,
    so a 20-micro-batch schedule is extended, to the same 350.5 s: 50 x 3 s forward,
    100 x 2 s backward, 0.5 s optimizer."""
    fwd = [1.0 + j % 2 for j in range(100)]
    tl = evaluate(_chain(100, fwd, [2.0] * 100, k=20, unit=2))
    assert isinstance(tl, PeriodicTimeline)
    assert (tl.extra, tl.period_s) == (40, pytest.approx(7.0))  # 80 micro-batches more
    assert tl.makespan_s == pytest.approx(350.5, rel=1e-12)
    bd = breakdown(tl)
    assert (bd.compute_s, bd.optimizer_s, bd.bubble_s) == pytest.approx((350.0, 0.5, 0.0))


@pytest.mark.parametrize(("host_s", "periodic"), [(100.0, True), (280.0, False)])
def test_host_task_over_the_period(host_s: float, periodic: bool) -> None:
    """A host task from 0 to ``host_s`` covers the 7-micro-batch schedule's period: a longer
    short schedule takes the period after it (100 s: 3 s per micro-batch, so from about the
    35th), unless that one would cost about as much as the whole (280 s): then the whole
    graph is scheduled. Either way 300.5 s with no host time exposed (compute covers it)."""
    g = _chain(100, [1.0] * 100, [2.0] * 100, host_s)
    tl = evaluate(g)
    assert isinstance(tl, PeriodicTimeline) is periodic
    assert tl.makespan_s == pytest.approx(300.5, rel=1e-12)
    bd = breakdown(tl)
    assert (bd.compute_s, bd.optimizer_s, bd.host_s, bd.bubble_s) == pytest.approx(
        (300.0, 0.5, 0.0, 0.0)
    )


def test_not_offered_when_host_issue_outlasts_the_step() -> None:
    """An eager host issuing many tiny kernels (a small model with 512 micro-batches): the
    kernel issue lasts most of the step, so no short schedule is offered."""
    sc = _scenario(
        model_args={"layers": 4, "hidden": 64, "heads": 2, "seq_len": 16, "vocab": 256},
        global_batch=1024,
        dp=4,
        tp=1,
    )
    step, _ = build_step(sc, resolve(sc))
    assert not isinstance(step.graph, PeriodicGraph)


def test_simulation_runs_the_whole_graph() -> None:
    """The SimPy fidelity is not shortened: it replays every task of the lowered step."""
    sc = _scenario(fidelity="simulated")
    step, _ = build_step(sc, resolve(sc))
    assert isinstance(step.graph, PeriodicGraph)
    rep = predict(sc, baseline=False)
    assert not isinstance(rep.timeline, PeriodicTimeline)
    assert rep.timeline.fidelity == "simulated"
    assert len(rep.timeline.end_s) == len(step.graph.full().tasks)


def _lowering_of(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> tuple[PipelineLowering, Any]:
    """The step of ``sc`` and the :class:`PipelineLowering` that lowered it."""
    seen: list[PipelineLowering] = []
    count = PipelineLowering.periodic_count
    with monkeypatch.context() as m:
        m.setattr(PipelineLowering, "periodic_count", lambda self: seen.append(self) or count(self))
        step, _ = build_step(sc, resolve(sc))
    return seen[0], step


@pytest.mark.parametrize("name", sorted(CASES))
def test_short_schedule_passes_first_and_its_bound_holds(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first short schedule offered passes the check (no longer one is lowered), and
    every unit's first forward on stage 0 starts no earlier than the host step plus
    ``_stage0_busy_before`` (the lower bound the eager host's count rests on)."""
    low, step = _lowering_of(_scenario(**CASES[name]), monkeypatch)
    g = step.graph
    assert isinstance(g, PeriodicGraph)
    tl = evaluate(g)
    assert isinstance(tl, PeriodicTimeline)
    assert list(g._shorts) == [g.short_microbatches]
    u, V, P = g.unit, low.V, low.P
    assert g.short_microbatches >= u * (2 * P + 7 if u == 1 else 11 if P == 2 else 12)
    short, h = tl.short, low.host_step_s()
    firsts: dict[int, Task] = {}  # unit -> its first micro-batch's first forward task
    for t in short.graph.tasks:
        if t.device == low.gpu[0] and t.stream == "compute" and t.chunk == 0:
            if t.kind is TaskKind.COMPUTE and t.label.startswith("F") and t.microbatch % u == 0:
                firsts.setdefault(t.microbatch // u, t)
    assert len(firsts) == g.short_microbatches // u
    for t in firsts.values():
        bound = h + low._stage0_busy_before(t.microbatch * V)
        assert short.start_s[t.tid] >= bound * (1 - 1e-12), (t.label, short.start_s[t.tid], bound)


def test_interleaved_without_host_issue_takes_twelve_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stack without an eager host's kernel issue (graph mode): interleaved 1F1B on 4
    stages x 3 chunks is extended from 12 rounds of pp micro-batches on the first try (10
    rounds, the count before, leave the check too few periodic rounds after the cool-down: it
    asked for 20, more than 3/4 of the step's 24, and the whole step was scheduled), to the
    whole schedule's report."""
    monkeypatch.setattr(PipelineLowering, "issue_times", lambda self: [0.0] * self.P)
    sc = _scenario(**CASES["interleaved-pp4-mcore"])
    step, _ = build_step(sc, resolve(sc))
    g = step.graph
    assert isinstance(g, PeriodicGraph) and (g.short_microbatches, g.microbatches) == (48, 96)
    tl = evaluate(g)
    assert isinstance(tl, PeriodicTimeline) and list(g._shorts) == [48]
    whole = _list_schedule(g.full())
    assert math.isclose(tl.makespan_s, whole.makespan_s, rel_tol=1e-12)
    for dev in whole.graph.devices:
        assert_close(breakdown(tl, dev).to_dict(), breakdown(whole, dev).to_dict(), path=dev)


def test_interleaved_unit_in_micro_batch_device_stream_order() -> None:
    """An interleaved short schedule's unit holds its tasks by micro-batch, device and stream,
    each stream in program order (``periodic_timeline`` pairs unit ``j``'s task ``i`` with unit
    ``j - 1``'s and reads a unit's start off its first task): the accepted period's tasks are
    in that order and the window starts with the first of them (4 stages x 3 chunks over two
    servers; a task of no micro-batch whose dependencies all have one counts as that one's)."""
    sc = _scenario(**CASES["interleaved-pp4-mcore"])
    step, _ = build_step(sc, resolve(sc))
    tl = evaluate(step.graph)
    assert isinstance(tl, PeriodicTimeline) and step.graph.unit == 4  # type: ignore[attr-defined]
    tasks = tl.short.graph.tasks
    mb = [t.microbatch for t in tasks]
    for t in tasks:
        owners = {mb[d % SENT] for d in t.deps}
        if mb[t.tid] < 0 and len(owners) == 1:
            mb[t.tid] = owners.pop()
    unit = mb[tl.period_tids[0]] // 4
    mine = [t for t in tasks if mb[t.tid] >= 0 and mb[t.tid] // 4 == unit]
    want = sorted(mine, key=lambda t: (mb[t.tid], t.device, t.stream))  # stable: program order
    assert len({t.device for t in want}) == 4  # (the steady units' tasks: compute streams)
    assert list(tl.period_tids) == [t.tid for t in want]
    assert tl.window_s == tl.short.start_s[want[0].tid]


def _reference_units(tasks: tuple[Task, ...], u: int) -> tuple[dict, list[int], list[int]]:
    """The grouping into units (``engine._units``) written with sets: a task without a
    micro-batch takes its dependencies' one micro-batch where the set of them has one element;
    a unit's tasks in program order (1F1B) or its micro-batches' in order, each sorted by
    (device, stream) keeping program order (interleaved). Task ids: units, loose, micro-batches.
    """
    mb = [t.microbatch for t in tasks]
    by_mb: dict[int, list[Task]] = {}
    loose = []
    for t in tasks:
        j = mb[t.tid]
        owners = {mb[d % SENT] for d in t.deps}
        if j < 0 and len(owners) == 1:
            j = mb[t.tid] = owners.pop()
        if j < 0:
            loose.append(t.tid)
        else:
            by_mb.setdefault(j, []).append(t)
    units: dict[int, list[int]] = {}
    for j in sorted(by_mb):
        run = by_mb[j] if u == 1 else sorted(by_mb[j], key=lambda t: (t.device, t.stream))
        units.setdefault(j // u, []).extend(t.tid for t in run)
    return units, loose, mb


#: llama3 8B (8 layers), DGX H100, megatron, pp4 tp2 dp1, 1F1B, ZeRO-1, 116 micro-batches (rev23
#: item 1): the optimizer tasks depend on micro-batches -1 and 17, so they belong to no unit;
#: owning them by their first dependency alone moves the period and the iteration time's last bit
ZERO1_PP4 = dict(
    model="llama3_8b", model_args={"layers": 8}, system="dgx-h100", software="megatron",
    pp=4, tp=2, dp=1, zero=1, global_batch=116,
)  # fmt: skip


@pytest.mark.parametrize("name", [*sorted(CASES), "zero1-pp4"])
def test_units_equal_the_reference_grouping(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every short schedule's units, loose tasks and micro-batches equal the reference's
    exactly (the report tests compare to 1e-9, which a last-bit shift passes), and the accepted
    period is a reference unit starting at the window ``window_s``."""
    sc = gpt_scenario(**ZERO1_PP4) if name == "zero1-pp4" else _scenario(**CASES[name])
    seen: list[tuple[tuple[Task, ...], int, tuple]] = []
    units = engine._units

    def spy(tasks: tuple[Task, ...], u: int) -> tuple:
        got = units(tasks, u)
        seen.append((tasks, u, got))
        return got

    monkeypatch.setattr(engine, "_units", spy)
    monkeypatch.setattr(api, "_REPORTS", {})
    report = predict(sc, baseline=False)
    tl = report.timeline
    assert isinstance(tl, PeriodicTimeline) and seen
    for tasks, u, (by_unit, loose, mb) in seen:
        ref_units, ref_loose, ref_mb = _reference_units(tasks, u)
        assert {j: [t.tid for t in r] for j, r in by_unit.items()} == ref_units
        assert [t.tid for t in loose] == ref_loose and mb == ref_mb
    assert list(tl.period_tids) in ref_units.values()  # the last short schedule's: accepted
    assert tl.window_s == tl.short.start_s[tl.period_tids[0]]
    if name == "zero1-pp4":  # bit for bit (6.185018096153742 with the first-dependency owner)
        assert report.iteration_time_s == 6.185018096153741


def test_over_task_outside_the_units_by_its_pieces() -> None:
    """An OverTask of no micro-batch (device ``g1``, no dependencies) computes over 0-0.5 s
    and its TP collective waits for ``g1``'s ``tp`` stream, which every micro-batch's 0.5 s
    collective (1 s forward on ``g0``, then it, then a 2 s backward) holds until the last: the
    gap between its pieces straddles the whole window of the 9-micro-batch schedule (from
    14 s, 3.5 s periods; the collective over 29.5-30.5 s), so the check reads its pieces, not
    its start and end (rev23 item 4: read whole, it blocks the window, and a longer short
    schedule, 16 micro-batches, is asked for). 100 x 3.5 + 0.5 s either way."""
    from perfmodel.sim.engine import over_pieces, periodic_timeline

    def build(k: int):  # type: ignore[no-untyped-def]
        b = GraphBuilder()
        prev = -1
        for j in range(k):
            f = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [prev], "F", j)
            t = b.add(TaskKind.COLLECTIVE, "g1", "tp", 0.5, [f], "T", j)
            prev = b.add(TaskKind.COMPUTE, "g0", "compute", 2.0, [t], "B", j)
        b.add_over("g1", 0.5, [], "late TP", -1, 0, (0.1,), ("tp", 1.0))
        b.add(TaskKind.OPTIMIZER, "g0", "compute", 0.5, [prev], "optimizer")
        return b.build()

    g = PeriodicGraph(lambda: build(100), build, 9, 100)
    tl = periodic_timeline(g, 9)
    assert isinstance(tl, PeriodicTimeline)
    short = tl.short
    (o,) = (t for t in short.graph.tasks if t.over is not None)
    pieces = over_pieces(o, short.start_s[o.tid], short.end_s[o.tid], short.overs[o.tid])  # type: ignore[index]
    assert pieces == [(0.0, 0.5), (29.5, 30.5), (30.5, 30.6)]
    assert (tl.window_s, tl.period_s) == (14.0, 3.5)
    assert pieces[0][1] < tl.window_s - tl.period_s and pieces[1][0] > tl.window_s + 2 * 3.5
    assert tl.makespan_s == pytest.approx(350.5, rel=1e-12)
    assert tl.makespan_s == pytest.approx(_list_schedule(g.full()).makespan_s, rel=1e-12)
