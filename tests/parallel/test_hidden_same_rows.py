"""A chunk read off an earlier one takes that chunk's hidden-reduction summary (issue 27,
wave 13: ``lower_hidden.HiddenCollectives._hidden_op``, ``_same_rows``) where its stage prices
every distinct row alike: the report, the graph's tasks and every summary equal those of the
walk over each chunk's segments (the shortcut off), and a stage that prices a row otherwise
is walked in full."""

from __future__ import annotations

from typing import Any

import pytest
from fresh_chunks import BASE, GPT3, run_recording

from perfmodel.api import Scenario
from perfmodel.parallel.lower_pipeline import PipelineLowering

#: name -> (scenario overrides, whether a chunk takes an earlier chunk's summary)
CASES: dict[str, tuple[dict, bool]] = {
    "ddp-tp2-pp4": (dict(software="pytorch-ddp", dp=2, tp=2, pp=4, nodes=2, gpus=16), True),
    "ddp-pp8": (dict(software="pytorch-ddp", dp=2, tp=1, pp=8, nodes=2, gpus=16), True),
    "mcore-tp2-pp4": (dict(software="megatron-core", dp=2, tp=2, pp=4, nodes=2, gpus=16), True),
    "mcore-full-pp4": (
        dict(software="megatron-core", dp=2, tp=2, pp=4, nodes=2, gpus=16, recompute="full"),
        True,
    ),
    "mcore-interleaved": (
        dict(software="megatron-core", dp=2, tp=2, pp=2, schedule="interleaved", interleave=2),
        True,
    ),
    # ZeRO-2: gradients reduced every micro-batch (not only the last: no reduction before)
    "zero2-pp4": (
        dict(software="megatron-core", zero=2, dp=2, tp=2, pp=4, nodes=2, gpus=16, microbatch=2),
        True,
    ),
    # two stages: no chunk is read off another (the first holds the embedding, the last the head)
    "ddp-tp2-pp2": (dict(software="pytorch-ddp", dp=2, tp=2, pp=2), False),
    # GPT-3 175B on 1024 A100 (issue 27's plans): eight stages, PyTorch DDP's 25 MiB buckets
    "gpt3-ddp-pp8": (dict(GPT3, software="pytorch-ddp", dp=32, tp=4, pp=8, microbatch=8), True),
    "gpt3-mcore-pp8": (
        dict(GPT3, software="megatron-core", dp=16, tp=8, pp=8, microbatch=4),
        True,
    ),
}


def _run(sc: Scenario, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[Any, list, list]:
    """The report, the summaries :meth:`_hidden_op` gave (per call: stage, last micro-batch,
    summary) and what :meth:`_same_rows` answered, chunks built afresh."""
    return run_recording(sc, monkeypatch, ("SAME_ROWS", on), "_hidden_op", "_same_rows")


@pytest.mark.parametrize("name", sorted(CASES))
def test_summary_read_off_an_earlier_chunk_equals_the_walk(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kw, takes = CASES[name]
    sc = Scenario.from_dict({**BASE, **kw})
    on, ops_on, same_on = _run(sc, monkeypatch, True)
    off, ops_off, same_off = _run(sc, monkeypatch, False)
    assert not same_off
    assert ops_on and ops_on == ops_off  # every summary, stage by stage, identical
    assert any(same_on) is takes, same_on
    assert on.to_dict() == off.to_dict()
    assert on.timeline.graph.tasks == off.timeline.graph.tasks


def test_a_stage_pricing_a_row_otherwise_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage 2's data-parallel reductions priced 1.5x: its rows differ from the first middle
    stage's, so its summary is walked (and differs), as with the shortcut off."""
    sc = Scenario.from_dict({**BASE, **CASES["ddp-pp8"][0]})
    dp_time = PipelineLowering.dp_time

    def slower(self, s, *a, **k):  # type: ignore[no-untyped-def]
        t = dp_time(self, s, *a, **k)
        return 1.5 * t if s == 2 else t

    monkeypatch.setattr(PipelineLowering, "dp_time", slower)
    _stage_2_walked(sc, monkeypatch)


def _stage_2_walked(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """``sc``'s reports with and without ``SAME_ROWS`` once stage 2 prices otherwise (the
    caller patched ``dp_time``): some chunk read off an earlier one is not summarised alike
    and stage 2 keeps its own summary, the summaries and reports equal either way."""
    on, ops_on, same_on = _run(sc, monkeypatch, True)
    off, ops_off, _ = _run(sc, monkeypatch, False)
    assert False in same_on and True in same_on, same_on
    assert ops_on == ops_off
    by_stage = {s: out for s, final, out in ops_on if final}
    assert by_stage[2] != by_stage[3]  # the slower stage's own summary, not the earlier one's
    assert on.to_dict() == off.to_dict()
    return on, off


def test_a_stage_pricing_one_bucket_size_otherwise_is_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stage 2 prices its data-parallel reductions as the other middle stages do but for one
    message size, the largest of its rows' buckets (not the first row's): its first row
    equals the first middle stage's, a later one differs, so every row input is compared
    (``_same_rows``) and the stage is walked, as with the shortcut off."""
    sc = Scenario.from_dict({**BASE, **CASES["ddp-pp8"][0]})
    row, dp_time = PipelineLowering._hidden_row, PipelineLowering.dp_time
    sizes: list[float] = []  # stage 2's rows' reduced bytes, in the order the walk met them

    def record(self, s, *a):  # type: ignore[no-untyped-def]
        out = row(self, s, *a)
        if s == 2 and out:
            sizes.append(out[3])
        return out

    with monkeypatch.context() as m:
        m.setattr(PipelineLowering, "_hidden_row", record)
        _run(sc, monkeypatch, False)
    big = max(sizes)
    assert sizes[0] != big and sizes.count(big) < len(sizes)

    def slower(self, s, op, nbytes, *a, **k):  # type: ignore[no-untyped-def]
        t = dp_time(self, s, op, nbytes, *a, **k)
        return 1.5 * t if s == 2 and nbytes == big else t

    monkeypatch.setattr(PipelineLowering, "dp_time", slower)
    on, off = _stage_2_walked(sc, monkeypatch)
    assert on.timeline.graph.tasks == off.timeline.graph.tasks
