"""A gather chain's items read off the gather plan's rows and specs
(``lower_hidden.HiddenCollectives.CHAIN_DIRECT``, issue 27) equal those read through
``_fine_segments`` (the switch off): every chain template ``_chain_items`` returns (or its
refusal), compared field by field, the analytic graph's tasks and the report, over segments
outside runs, hidden gather runs, FSDP / ZeRO-3 (TP after the compute) and Megatron-Core's
first forward (TP beside the compute: within it, and on a GPT-3 175B plan outlasting it, where
the chain is refused)."""

from __future__ import annotations

from typing import Any

import pytest
from report_compare import PIPELINED_ZERO, gpt_scenario

import perfmodel.api as api
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.taskgraph import ChainRun, ChainSegment

GPT = {"layers": 24, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}
BUCKETED = {"layers": 16, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000}

#: name -> (gpt_scenario keywords, or ``{"gpt3": i}``: GPT-3 175B plan ``i`` of
#: ``tests/sim/test_over_tasks._plans()`` with Megatron-Core's preset, analytic; (whether the
#: chains hold hidden gather runs, whether they hold segments outside runs))
CASES: dict[str, tuple[dict[str, Any], tuple[bool, bool]]] = {
    # two servers, micro-batch 1: runs and segments outside them
    "fsdp-pp2-2srv": (
        dict(
            model_args=GPT,
            global_batch=64,
            software="fsdp",
            nodes=2,
            dp=8,
            tp=1,
            pp=2,
            microbatch=1,
        ),
        (True, True),
    ),
    "zero3-tp2-2srv": (
        dict(
            model_args=GPT,
            global_batch=64,
            software="deepspeed-zero3",
            software_options=PIPELINED_ZERO,  # DeepSpeed refuses it with pp > 1: lifted
            nodes=2,
            dp=4,
            tp=2,
            pp=2,
            microbatch=1,
        ),
        (True, True),
    ),
    # one server, larger micro-batches (the interleaved one: runs only)
    "fsdp-runs": (
        dict(
            model_args=GPT,
            global_batch=128,
            software="fsdp",
            nodes=1,
            dp=4,
            tp=1,
            pp=2,
            microbatch=4,
        ),
        (True, True),
    ),
    "titan-interleaved-runs": (
        dict(
            model_args=GPT,
            global_batch=128,
            software="torchtitan",
            nodes=1,
            dp=2,
            tp=1,
            pp=4,
            microbatch=8,
            schedule="interleaved",
            interleave=2,
        ),
        (True, False),
    ),
    # Megatron-Core's first forward (overlapped ZeRO-1 gathers, 1F1B): segments only
    "mcore-tp2-pp2": (
        dict(
            model_args=BUCKETED,
            global_batch=64,
            software="megatron-core",
            nodes=1,
            dp=2,
            tp=2,
            pp=2,
            microbatch=1,
        ),
        (False, True),
    ),
    "mcore-tp2-pp4-2srv": (
        dict(
            model_args=BUCKETED,
            global_batch=64,
            software="megatron-core",
            nodes=2,
            dp=2,
            tp=2,
            pp=4,
            microbatch=1,
        ),
        (False, True),
    ),
    # GPT-3 175B dp64 tp8 pp2, micro-batch 2 (test_gather_chains'
    # test_gpt3_megatron_core_plans_of_the_benchmark): a first forward's segment whose TP
    # collective beside the compute outlasts it (no operation task: the chain refused), and a
    # chain of segments elsewhere
    "mcore-gpt3-dp64-tp8-pp2": ({"gpt3": 8}, (False, True)),
}
#: the cases where some chain is refused for a segment whose TP outlasts its compute
REFUSED = {"mcore-gpt3-dp64-tp8-pp2"}


def _scenario(kw: dict[str, Any]) -> Any:
    """The scenario of a :data:`CASES` entry."""
    if "gpt3" not in kw:
        return gpt_scenario(**kw)
    from test_over_tasks import _plans

    plan = _plans()[kw["gpt3"]]
    return Scenario.from_dict({**plan, "software": "megatron-core", "fidelity": "analytic"})


def _run(sc: Any, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[dict, list, list]:
    """The report, every ``_chain_items`` answer (in call order) and the analytic graph's
    tasks, computed afresh with ``CHAIN_DIRECT`` at ``on``."""
    answers: list[Any] = []
    items = HiddenCollectives._chain_items

    def record(self, *a: Any) -> Any:  # type: ignore[no-untyped-def]
        answers.append(items(self, *a))
        return answers[-1]

    with monkeypatch.context() as m:
        m.setattr(HiddenCollectives, "CHAIN_DIRECT", on)
        m.setattr(HiddenCollectives, "_chain_items", record)
        m.setattr(api, "_REPORTS", {})
        report = predict(sc, baseline=False)
        tasks = list(report.timeline.graph.tasks)
    return report.to_dict(), answers, tasks


@pytest.mark.parametrize("name", sorted(CASES))
def test_chain_items_read_directly_equal_the_fine_segments(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kw, (with_runs, with_segments) = CASES[name]
    sc = _scenario(kw)
    on, answers_on, tasks_on = _run(sc, monkeypatch, True)
    off, answers_off, tasks_off = _run(sc, monkeypatch, False)
    templates = [a for a in answers_on if a is not None]
    assert templates, "no chain: the comparison would be vacuous"
    assert (None in answers_on) == (name in REFUSED)
    kinds = {type(it) for t in templates for it in t[0].items}
    assert (ChainRun in kinds, ChainSegment in kinds) == (with_runs, with_segments)
    # every template field by field (items: gathers, computes, then, reductions, groups)
    assert answers_on == answers_off
    assert tasks_on == tasks_off
    assert on == off


def test_fine_segments_not_read_by_a_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the switch on, a chain is made without the fine loop's entries (the point of the
    shortcut); with it off, through them."""
    sc = gpt_scenario(**CASES["mcore-tp2-pp4-2srv"][0])
    calls: list[int] = []
    fine = HiddenCollectives._fine_segments

    def count(self, *a: Any) -> Any:  # type: ignore[no-untyped-def]
        calls.append(1)
        return fine(self, *a)

    monkeypatch.setattr(HiddenCollectives, "_fine_segments", count)
    _, answers, _ = _run(sc, monkeypatch, True)
    assert any(a is not None for a in answers)
    assert not calls
    _run(sc, monkeypatch, False)
    assert calls
