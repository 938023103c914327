"""An operation whose gather chain is refused for its first segments only lowers those
segments as the fine loop does and the others as a chain (issue 27, session 22:
``lower_chains.GatherChains._chain_after``, ``CHAINS_AFTER``): Megatron-Core's first
forward on a GPT-3 175B pipeline's first stage, whose embedding segment's TP collective
beside its compute outlasts it. The report equals the one with the whole operation lowered
segment by segment (the switch off), with one chain task more per such operation and fewer
tasks in the analytic graph, and every task of both graphs but the chain and the fine tasks
it stands for starts and ends at the same times in the two list schedules (stage 0's first
forward is off the step's critical path: the report alone would not see a chain anchored
wrong)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fresh_chunks import BASE, GPT3, predict_afresh

import perfmodel.sim.engine as engine
from perfmodel.api import Scenario
from perfmodel.parallel import lower_chains
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.taskgraph import ChainTask

#: name -> scenario overrides: GPT-3 175B plans of ``bench_speed.py`` whose first forward
#: on stage 0 takes a chain after its embedding segment (one micro-batch a step; 96)
CASES: dict[str, dict] = {
    "gpt3-dp64-tp8-pp2-mb24": dict(dp=64, tp=8, pp=2, microbatch=24),
    "gpt3-dp16-tp8-pp8-mb96": dict(dp=16, tp=8, pp=8, microbatch=96),
    # ZeRO-3 gathers every micro-batch (gather_every_mb): a chain after the embedding segment
    # in every forward of the step, each reducing in backward
    "gpt3-zero3-dp2-tp8": dict(
        dp=2, tp=8, pp=1, zero=3, sequence_parallel=True, nodes=2, gpus=16, global_batch=32
    ),
}


def _run(name: str, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[dict, Any, list]:
    """Case ``name``'s report with ``CHAINS_AFTER`` at ``on``, chunks built afresh: its
    dictionary, the analytic graph's list schedule and ``_chain_after``'s answers."""
    sc = Scenario.from_dict({**BASE, **GPT3, "software": "megatron-core", **CASES[name]})
    timelines: list[Any] = []
    answers: list[Any] = []
    schedule, after = engine._list_schedule, HiddenCollectives._chain_after

    def spy(g):  # type: ignore[no-untyped-def]
        timelines.append(schedule(g))
        return timelines[-1]

    with monkeypatch.context() as m:
        m.setattr(HiddenCollectives, "CHAINS_AFTER", on)
        m.setattr(
            HiddenCollectives,
            "_chain_after",
            lambda self, *a: answers.append(after(self, *a)) or answers[-1],
        )
        m.setattr(engine, "_list_schedule", spy)
        report = predict_afresh(sc, m).to_dict()
    return report, timelines[0], answers


def _times(timeline: Any) -> tuple[int, dict[tuple, tuple[float, float]]]:
    """The chain tasks of ``timeline``'s graph, and every other task's ``(start, end)`` by its
    device, stream, label, micro-batch, chunk and its count among those before it (the
    gathers of the fine loop are labelled by segment; a chain task is labelled as its
    operation's computes)."""
    seen: dict[tuple, int] = {}
    out: dict[tuple, tuple[float, float]] = {}
    for t in timeline.graph.tasks:
        key = (t.device, t.stream, t.label, t.microbatch, t.chunk)
        n = seen[key] = seen.get(key, -1) + 1
        if type(t) is not ChainTask:
            out[(*key, n)] = (timeline.start_s[t.tid], timeline.end_s[t.tid])
    return sum(1 for t in timeline.graph.tasks if type(t) is ChainTask), out


@pytest.mark.parametrize("name", sorted(CASES))
def test_chain_after_refused_segments_equals_the_fine_loop(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (on, timeline_on, answers), (off, timeline_off, none) = (
        _run(name, monkeypatch, flag) for flag in (True, False)
    )
    assert not none  # the reference never asks
    # stage 0: the embedding segment, then the chain (once a step, or every micro-batch)
    hits = [a[0] for a in answers if a is not None]
    assert hits and set(hits) == {1}
    chains_on, times_on = _times(timeline_on)
    chains_off, times_off = _times(timeline_off)
    assert chains_on == chains_off + len(hits)
    assert len(times_on) < len(times_off)
    shared = times_on.keys() & times_off.keys()
    # every task but the chain, which stands for the fine tasks of the segments after the
    # first (their gathers, computes and TP collectives)
    assert len(shared) == len(times_on)
    assert {k: times_on[k] for k in shared} == {k: times_off[k] for k in shared}
    assert on == off


def _refusal_plan(refused_at: tuple[int, ...], n: int = 8) -> tuple[tuple, tuple]:
    """``n`` segments of three classes (a gather plan's rows and spec triples, a row and its
    triple made once per class as ``_gather_row`` makes them): segments ``refused_at`` of a
    class whose TP collective outlasts its compute beside it (``segment_then`` refuses it),
    the others of two classes whose TP fits."""
    bad_row, bad_t = (1.0, 1.0, 2.0, 0.5, 0.0, False), (None, None, 1.0)
    ok_rows = [((1.0, c, 1.0, 0.5, 0.0, True), (None, None, 0.0)) for c in (3.0, 4.0)]
    pairs = [(bad_row, bad_t) if i in refused_at else ok_rows[i % 2] for i in range(n)]
    return tuple(r for r, _ in pairs), tuple(t for _, t in pairs)


@pytest.mark.parametrize("refused_at", [(), (0,), (0, 3), (2, 5, 6), (7,)])
def test_last_refused_asks_once_per_class(
    refused_at: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_chain_after``'s refusal (issue 27, session 26): the last segment whose TP is not in
    its task is the one the per-segment test finds, with ``segment_then`` asked once per class
    of ``_chain_classes`` (a class's segments share their row and triple), not per segment."""
    rows, specs = _refusal_plan(refused_at)
    low = SimpleNamespace(_chain_classes_memo={}, SHARED_CLASSES=True, op_tasks=True,
                          tp_overlap=True)  # fmt: skip
    low._chain_classes = lambda r, t: HiddenCollectives._chain_classes(low, r, t)
    asked: list[float] = []
    then = lower_chains.segment_then

    def counted(ot: bool, ov: bool, c_s: float, tp_s: float, tail: float) -> Any:
        asked.append(c_s)
        return then(ot, ov, c_s, tp_s, tail)

    reference = [i for i, (r, t) in enumerate(zip(rows, specs, strict=True))
                 if then(True, True, r[1], r[2], t[2]) is None]  # fmt: skip
    monkeypatch.setattr(lower_chains, "segment_then", counted)
    got = HiddenCollectives._last_refused(low, rows, specs)  # type: ignore[arg-type]
    assert got == (reference[-1] if reference else -1)
    classes = len({id(r) for r in rows})
    assert len(asked) == len(HiddenCollectives._chain_classes(low, rows, specs)[0]) == classes
