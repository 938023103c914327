"""Two reuses of a lowering's per-chunk work (issue 27, speed37e), each against its direct
path: :func:`~perfmodel.parallel.host_lead.issue_times` giving a chunk read off another
(``Chunk.values_of``) the time of the first chunk read off the same one (``SHIFTED_ISSUE``),
and the later lowerings of a step (its short schedule) taking the first lowering's chunk sums
(``PeriodicSchedules.SHARE_SUMS``). Each switch off computes everything afresh: the stage
times and the reports are equal, and the reuse computes less."""

from __future__ import annotations

from typing import Any

import pytest
from fresh_chunks import BASE, GPT3, afresh, lowerings  # the small GPT, GPT-3 175B

import perfmodel.parallel.host_lead as host_lead
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.lower_pipeline import PipelineLowering

TWO = dict(nodes=2, gpus=16)

CASES: dict[str, dict[str, Any]] = {
    "mcore-tp2-pp4": dict(software="megatron-core", dp=2, tp=2, pp=4, **TWO),
    "mcore-full-pp4": dict(software="megatron-core", dp=2, tp=2, pp=4, recompute="full", **TWO),
    "mcore-selective-pp4": dict(
        software="megatron-core", dp=2, tp=2, pp=4, recompute="selective", **TWO
    ),
    "mcore-interleaved-pp4": dict(
        software="megatron-core", dp=2, tp=2, pp=4, schedule="interleaved", interleave=2, **TWO
    ),
    "ddp-pp8": dict(software="pytorch-ddp", dp=2, tp=1, pp=8, **TWO),
    # GPT-3 175B on 1024 A100: bench_speed's plan 5 (a periodic step: its short schedule)
    "gpt3-mcore-pp4-mb1": dict(GPT3, software="megatron-core", dp=32, tp=8, pp=4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_shifted_chunks_issue_times_equal_their_own(name: str) -> None:
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    with pytest.MonkeyPatch.context() as m:
        low = lowerings(sc, m)[0]
    assert any(ch.values_of is not None for ch in low.chunks)  # some chunk is read off
    args = (low.costs, low.chunks, low.P, low.V, low.m_step, low.plan.recompute,
            low.rc.selective_recompute.share_for(low.wl))  # fmt: skip
    runs: list[int] = []
    with pytest.MonkeyPatch.context() as m:
        block_runs = host_lead.block_runs
        m.setattr(host_lead, "block_runs", lambda *a: runs.append(1) or block_runs(*a))
        on = host_lead.issue_times(*args)
        n_on = len(runs)
        m.setattr(host_lead, "SHIFTED_ISSUE", False)
        off = host_lead.issue_times(*args)
    assert on == off and max(on) > 0
    assert n_on < len(runs) - n_on  # the shifted chunks' runs were not read


def _report(sc: Scenario, on: bool) -> tuple[Any, int, int]:
    """``sc``'s report with both switches ``on``, afresh, and the chunk sums and reduce-scattered
    sums computed."""
    sums: list[int] = []
    rs_sums: list[int] = []
    chunk_sums, chunk_rs_sum = HiddenCollectives.chunk_sums, HiddenCollectives.chunk_rs_sum

    def counted(self: Any, k: int) -> Any:
        if k not in self._sums:
            sums.append(k)
        return chunk_sums(self, k)

    def counted_rs(self: Any, k: int) -> Any:
        if k not in self._rs_sums:
            rs_sums.append(k)
        return chunk_rs_sum(self, k)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(host_lead, "SHIFTED_ISSUE", on)
        m.setattr(PipelineLowering, "SHARE_SUMS", on)
        m.setattr(HiddenCollectives, "chunk_sums", counted)
        m.setattr(HiddenCollectives, "chunk_rs_sum", counted_rs)
        afresh(m)
        report = predict(sc, baseline=False)
    return report, len(sums), len(rs_sums)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reports_equal_with_and_without_the_reuses(name: str) -> None:
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    on, n_on, rs_on = _report(sc, True)
    off, n_off, rs_off = _report(sc, False)
    assert rs_on == rs_off  # chunk_rs_sum's memo is each lowering's own
    assert on.to_dict() == off.to_dict()
    assert on.timeline.graph.tasks == off.timeline.graph.tasks
    shorts_on = getattr(on.timeline.graph, "_shorts", {})
    shorts_off = getattr(off.timeline.graph, "_shorts", {})
    assert sorted(shorts_on) == sorted(shorts_off)
    assert all(shorts_on[n].tasks == shorts_off[n].tasks for n in shorts_on)
    if name == "gpt3-mcore-pp4-mb1":  # periodic: the short schedule sums no chunk again
        assert shorts_on and n_on < n_off
    assert n_on <= n_off
