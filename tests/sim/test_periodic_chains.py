"""Gather chains in a periodic extension's short schedule (issue 27,
``perfmodel.parallel.periodic.PERIODIC_CHAINS``): Megatron-Core's and pipelined FSDP2's
first-forward gathers lower as chains in ``PeriodicGraph.short`` and
``perfmodel.sim.engine.periodic_timeline`` accepts them where the fine short schedule gives the
same decision and numbers (``_chains_outside``), else checks that one (``fine_short``). Every
report equals the direct path's (the switch off: short schedules lowered fine), on the GPT-3
175B plans of the speed benchmark and small pipelines; the fallback, forced, too."""

from __future__ import annotations

import math
from typing import Any

import pytest
from report_compare import gpt_scenario

import perfmodel.api as api
import perfmodel.parallel.periodic as periodic
import perfmodel.sim.engine as engine
from perfmodel.api import Scenario, predict
from perfmodel.parallel.periodic import PeriodicGraph, short_limit
from perfmodel.parallel.taskgraph import ChainTask
from perfmodel.report.step_breakdown import breakdown, critical_device
from perfmodel.sim.engine import PeriodicTimeline, _list_schedule

BUCKETED = {"layers": 16, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000}

#: name -> scenario keywords (``{"gpt3": i}``: GPT-3 175B plan ``i`` of the speed benchmark,
#: ``tests/sim/test_over_tasks._plans()``, Megatron-Core, analytic), each a periodic timeline
#: whose short schedule holds chains with the switch on
CASES: dict[str, dict[str, Any]] = {
    "gpt3-dp32-tp8-pp4-mb1": {"gpt3": 5},
    "gpt3-dp2-tp32-pp16-mb8": {"gpt3": 6},
    "mcore-tp2-pp2": dict(nodes=1, tp=2, pp=2, microbatch=1),
    "mcore-tp2-pp2-mb2": dict(nodes=1, tp=2, pp=2, microbatch=2),
    "mcore-tp2-pp4-2srv": dict(nodes=2, tp=2, pp=4, microbatch=1),
    "titan-tp1-pp4": dict(nodes=1, tp=1, pp=4, microbatch=2, software="torchtitan"),
    "titan-pp2-interleaved": dict(
        nodes=2,
        tp=1,
        pp=2,
        microbatch=2,
        software="torchtitan",
        schedule="interleaved",
        interleave=2,
        global_batch=1024,
    ),
}


def _scenario(name: str) -> Scenario:
    kw = CASES[name]
    if "gpt3" in kw:
        from test_over_tasks import _plans

        plan = _plans()[kw["gpt3"]]
        return Scenario.from_dict({**plan, "software": "megatron-core", "fidelity": "analytic"})
    gpus = 8 * kw["nodes"]
    return gpt_scenario(
        **{
            "model_args": BUCKETED,
            "global_batch": 128,
            "software": "megatron-core",
            "dp": gpus // (kw["tp"] * kw["pp"]),
            **kw,
        }
    )


def _run(sc: Scenario, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[Any, list[int]]:
    """The report computed afresh with ``PERIODIC_CHAINS`` at ``on``, and the counts the
    fine short schedules were asked for (the fallback)."""
    asked: list[int] = []
    fine = PeriodicGraph.fine_short

    def spy(self: PeriodicGraph, k: int) -> Any:
        asked.append(k)
        return fine(self, k)

    with monkeypatch.context() as m:
        m.setattr(periodic, "PERIODIC_CHAINS", on)
        m.setattr(PeriodicGraph, "fine_short", spy)
        m.setattr(api, "_REPORTS", {})
        return predict(sc, baseline=False), asked


def _chains(tl: PeriodicTimeline) -> int:
    return sum(type(t) is ChainTask for t in tl.short.graph.tasks)


@pytest.mark.parametrize("name", sorted(CASES))
def test_chained_short_schedule_gives_the_fine_reports(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(name)
    on, asked = _run(sc, monkeypatch, True)
    off, _ = _run(sc, monkeypatch, False)
    assert isinstance(on.timeline, PeriodicTimeline) and isinstance(off.timeline, PeriodicTimeline)
    assert _chains(on.timeline) > 0 and _chains(off.timeline) == 0
    assert not asked  # accepted as chained: no fallback on these plans
    assert on.iteration_time_s == off.iteration_time_s
    assert on.to_dict() == off.to_dict()
    a, b = on.timeline, off.timeline
    assert (a.extra, a.period_s, a.window_s, a.makespan_s) == (
        b.extra,
        b.period_s,
        b.window_s,
        b.makespan_s,
    )


@pytest.mark.parametrize("at", ["units", "window"])
@pytest.mark.parametrize("name", ["gpt3-dp32-tp8-pp4-mb1", "mcore-tp2-pp4-2srv"])
def test_fallback_checks_the_fine_short_schedule(
    name: str, at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``_chains_outside`` refuses (forced here at the unit or at the window test), the
    check runs on the fine short schedule: the reports the switch off gives."""
    sc = _scenario(name)
    off, _ = _run(sc, monkeypatch, False)
    outside = engine._chains_outside

    def refuse(tl: Any, unit: Any, j0: int, j1: int, lo_tol: float) -> bool:
        if (at == "units") == math.isinf(lo_tol):
            return False
        return outside(tl, unit, j0, j1, lo_tol)

    monkeypatch.setattr(engine, "_chains_outside", refuse)
    on, asked = _run(sc, monkeypatch, True)
    assert asked
    assert isinstance(on.timeline, PeriodicTimeline) and _chains(on.timeline) == 0
    assert on.iteration_time_s == off.iteration_time_s
    assert on.to_dict() == off.to_dict()


def test_chains_outside_refuses_chains_in_the_run_or_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_chains_outside`` on a chained short schedule: accepted with the run after the
    chains' unit and the window after their ends; refused with the run from their unit on, a
    run no longer than that unit's index, or the window's start before a chain's end."""
    sc = _scenario("mcore-tp2-pp4-2srv")
    on, _ = _run(sc, monkeypatch, True)
    short = on.timeline.short
    tl = _list_schedule(short.graph)
    assert tl.chains
    unit = [t.microbatch for t in tl.graph.tasks]  # 1F1B: a unit is one micro-batch
    last = max(unit[tid] for tid in tl.chains)
    ends = max(tl.end_s[tid] for tid in tl.chains)
    j0, j1 = last + 1, last + 6
    assert engine._chains_outside(tl, unit, j0, j1, math.inf)
    assert engine._chains_outside(tl, unit, j0, j1, ends)
    assert not engine._chains_outside(tl, unit, last, j1, math.inf)
    # the chains' unit moved to 2 (here they all sit in unit 0): a run must start after it and
    # be longer than 2 units
    moved = [u + 2 if u >= 0 else u for u in unit]
    assert engine._chains_outside(tl, moved, last + 3, last + 6, math.inf)
    assert not engine._chains_outside(tl, moved, last + 3, last + 5, math.inf)
    assert not engine._chains_outside(tl, moved, last + 2, last + 6, math.inf)
    assert not engine._chains_outside(tl, unit, j0, j1, math.nextafter(ends, 0.0))


def test_every_short_decision_equals_the_fine_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the nine GPT-3 175B plans of the speed benchmark (Megatron-Core), every short
        schedule the analytic executor tries (``evaluate``'s loop) and every shorter one (most of
    them refused) decides with
        its chains as lowered fine: the same count to try next, or the same extension, breakdown
        and critical device."""
    from test_over_tasks import _plans

    chained = refused = 0
    for plan in _plans()[1:]:
        sc = Scenario.from_dict({**plan, "software": "megatron-core", "fidelity": "analytic"})
        g = _run(sc, monkeypatch, True)[0].timeline.graph
        if not isinstance(g, PeriodicGraph):
            continue
        u = g.unit
        for k in range(2 * u, g.short_microbatches, u):  # shorter ones too: refused mostly
            a, b = engine.periodic_timeline(g, k), engine.periodic_timeline(g, k, True)
            if isinstance(a, PeriodicTimeline):
                assert isinstance(b, PeriodicTimeline)
                assert (a.extra, a.period_s, a.window_s, a.makespan_s) == (
                    b.extra, b.period_s, b.window_s, b.makespan_s,
                )  # fmt: skip
                assert breakdown(a) == breakdown(b)
            else:
                assert a == b
                refused += 1
        k, spent = g.short_microbatches, 0
        while spent + k <= g.microbatches and k <= short_limit(g.microbatches):
            a = engine.periodic_timeline(g, k)
            b = engine.periodic_timeline(g, k, True)
            chained += any(type(t) is ChainTask for t in g.short(k).tasks)
            if not isinstance(a, PeriodicTimeline):
                assert a == b
                if a <= k:
                    break
                k, spent = a, spent + k
                continue
            assert isinstance(b, PeriodicTimeline)
            assert (a.extra, a.period_s, a.window_s, a.makespan_s) == (
                b.extra,
                b.period_s,
                b.window_s,
                b.makespan_s,
            )
            assert critical_device(a) == critical_device(b)
            assert breakdown(a) == breakdown(b)
            break
    assert chained >= 2 and refused >= 10  # plans 5 and 6 (plan 9's chains are refused)


@pytest.mark.parametrize("name", ["mcore-tp2-pp2", "titan-tp1-pp4"])
def test_fine_short_schedule_has_no_chain_at_any_count(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fine_short(k)`` lowers without chains for every ``k`` the check may ask, the step's
    own count included (where the whole step, ``m == m_step``, chains otherwise)."""
    on, _ = _run(_scenario(name), monkeypatch, True)
    graph = on.timeline.short.graph
    assert any(type(t) is ChainTask for t in graph.tasks)
    pg = on.timeline.graph
    assert isinstance(pg, PeriodicGraph)
    for k in sorted({pg.short_microbatches, pg.microbatches}):
        assert not any(type(t) is ChainTask for t in pg.fine_short(k).tasks), k
        assert any(type(t) is ChainTask for t in pg.short(k).tasks), k
