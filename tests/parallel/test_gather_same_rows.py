"""A chunk read off an earlier one takes that chunk's hidden-gather plan rows (issue 27,
session 21: ``lower_hidden.HiddenCollectives._gather_plan``, ``_gathers_like``) where its
stage prices every data-parallel collective of the plan alike: every plan, the report and
the graph's tasks equal those of the walk over each chunk's segments (the shortcut off),
and a stage that prices one collective otherwise is walked in full."""

from __future__ import annotations

from typing import Any

import pytest
from fresh_chunks import BASE, GPT, GPT3, run_recording
from report_compare import ZERO3_LIFTED

from perfmodel.api import Scenario
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lower_pipeline import PipelineLowering

TWO_SERVERS = dict(nodes=2, gpus=16)

#: name -> scenario overrides; every case has a chunk that takes an earlier chunk's rows
CASES: dict[str, dict] = {
    # Megatron-Core's first forward with overlapped ZeRO-1 gathers (1F1B)
    "mcore-tp1-pp4": dict(software="megatron-core", dp=4, tp=1, pp=4, **TWO_SERVERS),
    "mcore-tp2-pp4": dict(software="megatron-core", dp=2, tp=2, pp=4, **TWO_SERVERS),
    # FSDP2 under pipelining: gathered in each chunk's first forward
    "fsdp-pp4": dict(software="fsdp", dp=4, tp=1, pp=4, microbatch=2, **TWO_SERVERS),
    # ZeRO-3 with pipelining (limit lifted): gathers every micro-batch, forward and backward,
    # the last backward reducing
    "zero3-pp4": dict(ZERO3_LIFTED, dp=4, tp=1, pp=4, microbatch=2, **TWO_SERVERS),
    # GPT-3 175B on 1024 A100 (issue 27's median Megatron-Core plan)
    "gpt3-mcore-pp8": dict(GPT3, software="megatron-core", dp=32, tp=4, pp=8, microbatch=8),
}


def _run(sc: Scenario, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[Any, list, list]:
    """The report, the plans :meth:`_gather_plan` gave (per call: stage, phase, reducing,
    first segment done, plan) and what :meth:`_gathers_like` answered, chunks built afresh."""
    return run_recording(sc, monkeypatch, ("SAME_GATHERS", on), "_gather_plan", "_gathers_like")


def _stages(plans: list[Any]) -> set[int]:
    return {p[0] for p in plans if p[-1] is not None}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_read_off_an_earlier_chunk_equals_the_walk(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    on, plans_on, like_on = _run(sc, monkeypatch, True)
    off, plans_off, like_off = _run(sc, monkeypatch, False)
    assert not like_off
    assert True in like_on, like_on
    assert len(_stages(plans_on)) >= 3
    assert plans_on and plans_on == plans_off  # every plan, stage by stage, identical
    assert on.to_dict() == off.to_dict()
    assert on.timeline.graph.tasks == off.timeline.graph.tasks


#: eight stages: six middle ones, so stage 2 walked and the others reading stage 1's rows
EIGHT: dict[str, dict] = {
    "mcore-tp1-pp8": dict(software="megatron-core", dp=2, tp=1, pp=8, **TWO_SERVERS),
    "zero3-pp8": dict(
        ZERO3_LIFTED, dp=2, tp=1, pp=8, model_args={**GPT, "layers": 32}, **TWO_SERVERS
    ),
}


@pytest.mark.parametrize(
    ("name", "which"),
    [("mcore-tp1-pp8", "gather"), ("zero3-pp8", "gather"), ("zero3-pp8", "reduction")],
)
def test_a_stage_pricing_one_collective_otherwise_is_walked(
    name: str, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage 2 prices one collective of its plans 1.5x (the largest gather, or the last
    backward's gradient reductions): that plan is walked and its rows differ from stage 1's,
    the other stages take stage 1's, the plans and reports equal either way."""
    sc = Scenario.from_dict({**BASE, **EIGHT[name]})
    _, plans, _ = _run(sc, monkeypatch, False)
    stage1 = next(p[-1] for p in plans if p[0] == 1 and p[-1] is not None)
    big = max(spec[0].message_bytes for spec in stage1[3])
    dp_time = PipelineLowering.dp_time

    def slower(self, s, op, nbytes, *a, **k):  # type: ignore[no-untyped-def]
        t = dp_time(self, s, op, nbytes, *a, **k)
        hit = nbytes == big if which == "gather" else op is not CollectiveOp.ALLGATHER
        return 1.5 * t if s == 2 and hit else t

    monkeypatch.setattr(PipelineLowering, "dp_time", slower)
    on, plans_on, like_on = _run(sc, monkeypatch, True)
    off, plans_off, _ = _run(sc, monkeypatch, False)
    assert False in like_on and True in like_on, like_on
    assert plans_on == plans_off
    rows = {(p[0], p[1], p[2]): p[-1][0] for p in plans_on if p[-1] is not None}
    key = ("F", False) if which == "gather" else ("B", True)
    assert rows[(2, *key)] != rows[(1, *key)] == rows[(3, *key)]
    assert on.to_dict() == off.to_dict()
    assert on.timeline.graph.tasks == off.timeline.graph.tasks
