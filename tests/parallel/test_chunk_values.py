"""A chunk read off an earlier one (``Chunk.values_of``) takes that chunk's per-chunk decisions
(issue 27, speed19c: ``LoweringShortcuts._values_key``): whether it lowers coarse, its plain
operation's seconds, and (``PipelineLowering.issue_lead``) the eager host's issue lead of a
later stage whose first operation runs it. The report and the graph's tasks equal those of
deciding every chunk from its own segments (``BY_VALUES`` off), and the decisions are made
fewer times where chunks are read off others."""

from __future__ import annotations

from typing import Any

import pytest
from fresh_chunks import BASE, GPT3, afresh  # the small GPT, GPT-3 175B

import perfmodel.parallel.lower_pipeline as lower_pipeline
import perfmodel.parallel.lower_shortcuts as shortcuts
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_pipeline import PipelineLowering

TWO = dict(nodes=2, gpus=16)

#: name -> (scenario overrides, whether some chunk is read off another)
CASES: dict[str, tuple[dict, bool]] = {
    "mcore-tp2-pp4": (dict(software="megatron-core", dp=2, tp=2, pp=4, **TWO), True),
    "mcore-full-pp4": (
        dict(software="megatron-core", dp=2, tp=2, pp=4, recompute="full", **TWO),
        True,
    ),
    "mcore-selective-pp4": (
        dict(software="megatron-core", dp=2, tp=2, pp=4, recompute="selective", **TWO),
        True,
    ),
    "mcore-interleaved-pp4": (
        dict(software="megatron-core", dp=2, tp=2, pp=4, schedule="interleaved", **TWO)
        | {"interleave": 2},
        True,
    ),
    "megatron-pp8": (dict(software="megatron", dp=2, tp=1, pp=8, **TWO), True),
    "ddp-pp8": (dict(software="pytorch-ddp", dp=2, tp=1, pp=8, **TWO), True),
    "zero2-pp4": (
        dict(software="megatron-core", zero=2, dp=2, tp=2, pp=4, microbatch=2, **TWO),
        True,
    ),
    # two stages: the first holds the embedding, the last the head (none read off another)
    "mcore-pp2": (dict(software="megatron-core", dp=2, tp=2, pp=2), False),
    # GPT-3 175B on 1024 A100 (bench_speed's median Megatron-Core plan)
    "gpt3-mcore-pp8": (
        dict(GPT3, software="megatron-core", dp=32, tp=4, pp=8, microbatch=8),
        True,
    ),
}


def _run(sc: Scenario, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[Any, dict[str, int]]:
    """The report with ``BY_VALUES`` ``on``, chunks and reports built afresh, and how many
    times the per-chunk decisions were computed."""
    calls = {"coarsenable": 0, "op_times": 0, "lead": 0}
    coarse, times = PipelineLowering._chunk_coarsenable, PipelineLowering._plain_op_times
    lead = lower_pipeline.issue_lead

    def count(name: str, f: Any) -> Any:
        def counted(*a: Any, **k: Any) -> Any:
            calls[name] += 1
            return f(*a, **k)

        return counted

    with monkeypatch.context() as m:
        m.setattr(shortcuts.LoweringShortcuts, "BY_VALUES", on)
        m.setattr(PipelineLowering, "_chunk_coarsenable", count("coarsenable", coarse))
        m.setattr(PipelineLowering, "_plain_op_times", count("op_times", times))
        m.setattr(lower_pipeline, "issue_lead", count("lead", lead))
        afresh(m)
        report = predict(sc, baseline=False)
    return report, calls


def _analytic(graph: Any) -> list[tuple[Any, ...]]:
    """The tasks of the graphs the analytic list schedule ran: the whole step's analytic
    graph and every short schedule lowered (a periodic step's); the graph's own without
    them."""
    if not hasattr(graph, "analytic"):
        return [graph.tasks]
    shorts = getattr(graph, "_shorts", {})
    return [graph.analytic().tasks, *(shorts[n].tasks for n in sorted(shorts))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_decisions_read_off_an_earlier_chunk_equal_each_chunks_own(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = Scenario.from_dict({**BASE, **CASES[name][0]})
    on, calls_on = _run(sc, monkeypatch, True)
    off, calls_off = _run(sc, monkeypatch, False)
    assert on.to_dict() == off.to_dict()
    assert on.timeline.graph.tasks == off.timeline.graph.tasks
    assert _analytic(on.timeline.graph) == _analytic(off.timeline.graph)
    fewer = any(calls_on[k] < calls_off[k] for k in calls_on)
    assert fewer is CASES[name][1], (calls_on, calls_off)  # whether some chunk is read off
    assert all(calls_on[k] <= calls_off[k] for k in calls_on)


def _lowerings(sc: Scenario) -> list[PipelineLowering]:
    """Every :class:`PipelineLowering` ``predict(sc)`` made (chunks and reports afresh)."""
    seen: list[PipelineLowering] = []
    init = PipelineLowering.__init__

    def keep(self: PipelineLowering, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        seen.append(self)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(PipelineLowering, "__init__", keep)
        afresh(m)
        predict(sc, baseline=False)
    return seen


@pytest.mark.parametrize("name", ["gpt3-mcore-pp8", "mcore-interleaved-pp4", "megatron-pp8"])
def test_every_shared_decision_is_the_chunks_own(name: str) -> None:
    """Each memo entry a chunk read (by :meth:`_values_key`) equals the decision computed
    from that chunk itself: coarse or not, its plain operation's seconds, its stage's lead."""
    from perfmodel.parallel.host_lead import issue_lead

    sc = Scenario.from_dict({**BASE, **CASES[name][0]})
    for low in _lowerings(sc):
        assert low.m > 1 and not any(low.gathers_left)  # coarsenable's own refusals pass
        for k, ch in enumerate(low.chunks):
            for phase in ("F", "B"):
                own = low._chunk_coarsenable(ch, phase)
                assert low.coarsenable(k % low.P, phase, 0, ch) == own, (k, phase)
                key = (low._values_key(ch), phase)
                if key in low._op_times:
                    assert low._op_times[key] == low._plain_op_times(k, phase)
        share = low.rc.selective_recompute.share_for(low.wl)
        for s in range(1, low.P):
            own = issue_lead(low.costs, low.chunks, low.ops[s], low.P, s, low.plan.recompute, share)
            assert low.issue_lead(s) == own, s


def test_the_bench_plan_shares_every_middle_stage() -> None:
    """GPT-3 175B dp32 tp4 pp8 (Megatron-Core): stages 1-6 hold chunks read off one chunk, so
    the issue lead is computed for stages 0, 1 and 7 only, and each one is positive (an eager
    host: the lead is a task the test above compares)."""
    low = _lowerings(Scenario.from_dict({**BASE, **CASES["gpt3-mcore-pp8"][0]}))[0]
    keys = [low._values_key(ch) for ch in low.chunks]
    assert len(set(keys[1:7])) == 1 and len(set(keys)) == 3
    assert len(low._leads) == 2  # stage 1's (shared by 2-6) and stage 7's
    assert all(x > 0 for x in low.lead_s)
