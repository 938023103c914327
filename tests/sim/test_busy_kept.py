"""Busy compute seconds kept by the analytic list schedule (``sim.engine._list_schedule``,
``Timeline.busy_s``) equal ``report.step_breakdown._compute_busy``'s own sum (``busy_s``
cleared) bit for bit: on the timelines of GPT-3 175B plans (Megatron-Core with OverTasks, 1F1B
and interleaved; Megatron; FSDP's gather chains) and on a drawn chain of OverTasks."""

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
from perfmodel.parallel.taskgraph import _S_THEN, GraphBuilder, TaskKind
from perfmodel.report.step_breakdown import _compute_busy

sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _direct(tl: engine.Timeline) -> dict[str, float]:
    return _compute_busy(dataclasses.replace(tl, busy_s=None))


@pytest.mark.parametrize(
    ("preset", "idx"), [("megatron-core", 6), ("megatron-core", 9), ("megatron", 3), ("fsdp", 2)]
)
def test_busy_kept_equals_the_sum(monkeypatch: pytest.MonkeyPatch, preset: str, idx: int) -> None:
    from bench_scale import _plans
    from bench_search import BASE175

    seen: list[engine.Timeline] = []
    orig = engine._list_schedule

    def spy(g):  # type: ignore[no-untyped-def]
        tl = orig(g)
        seen.append(tl)
        return tl

    keys = ("dp", "tp", "pp", "microbatch", "schedule", "interleave", "gpus", "global_batch")
    p = _plans()[idx]
    sc = Scenario.from_dict(
        {**BASE175, **{k: p[k] for k in keys}, "software": preset, "fidelity": "analytic"}
    )
    monkeypatch.setattr(engine, "_list_schedule", spy)
    monkeypatch.setattr(api, "_REPORTS", {})
    predict(sc, baseline=False)
    assert seen
    for tl in seen:
        assert tl.busy_s is not None and tl.busy_s
        assert tl.busy_s == _direct(tl)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(DURATION_S, DURATION_S, DURATION_S, DURATION_S), min_size=1, max_size=6))
def test_busy_kept_over_tasks(durs: list) -> None:
    """OverTasks (compute, TP collective beside it, tail, a later segment) between plain
    tasks on two devices, a collective on another stream: the kept sum is the reader's."""
    b = GraphBuilder()
    prev: list[int] = []
    for i, (c, t, tail, c2) in enumerate(durs):
        dev = f"g{i % 2}"
        op = b.add_over(dev, c, prev, f"F{i}", i, 0, (tail,), ("tp", t))
        _S_THEN(b.tasks[op], (tail, c2, 0.0))
        x = b.add(TaskKind.COLLECTIVE, dev, "dp", c2, [op], f"R{i}", i, 0)
        prev = [b.add(TaskKind.COMPUTE, dev, "compute", c2, [x], f"B{i}", i, 0)]
    tl = engine._list_schedule(b.build())
    assert tl.busy_s == _direct(tl)
