"""``_class_events`` passes over another device's tasks that add no event (issue 27: ~82,000
of the 94,106 tasks of a gather-bound FSDP step of GPT-3 175B on 1024 A100) before reading their
times and class: the same events in the same order, and the same class for every key they use,
as the version that classified every task, on every device of lowered steps with folded
operation tasks, off-device host and optimizer tasks and data-parallel groups."""

from __future__ import annotations

import pytest

import perfmodel.api as api
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.report import step_breakdown as sb
from perfmodel.report.step_breakdown import _EVENT_ORDER, _folded, task_class
from perfmodel.sim.engine import CoarseTimeline, PeriodicTimeline

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def _reference(timeline, dev):  # type: ignore[no-untyped-def]
    """The previous ``_class_events``: every task of another device classified first."""
    events: list = []
    append = events.append
    keys: dict = {}
    start_s, end_s = timeline.start_s, timeline.end_s
    for t in timeline.graph.tasks:
        comm = t.comm
        if t.device != dev:
            if t.stream == "compute":
                if t.send_s > 0 and dev in t.send.group:
                    _folded(append, keys, t, end_s[t.tid])
                continue
            mine = comm is not None and dev in comm.group
        else:
            mine = True
        tid = t.tid
        s, e = start_s[tid], end_s[tid]
        if t.then_s or t.send_s:
            _folded(append, keys, t, e, s)
            e = s + t.duration_s
        if e <= s:
            continue
        ck = (t.stream, t.kind, None if comm is None else comm.kind)
        key = keys.get(ck)
        if key is None:
            prio, cls = task_class(t)
            key = keys[ck] = f"{prio}|{cls}"
        if not mine and key != "2|host":
            continue
        append((s, 1, key))
        append((e, -1, key))
    events.sort(key=_EVENT_ORDER)
    return events, {k: k.split("|", 1)[1] for k in keys.values()}


@pytest.mark.parametrize(
    "software, plan",
    [
        ("fsdp", {"dp": 2, "tp": 2, "pp": 2}),
        ("fsdp", {"dp": 4, "tp": 1, "pp": 4, "schedule": "interleaved", "interleave": 2}),
        ("pytorch-ddp", {"dp": 2, "tp": 2, "pp": 2}),  # eager host: host tasks on every stage
        ("megatron-core", {"dp": 4, "tp": 2, "pp": 2, "schedule": "interleaved", "interleave": 2}),
        ("deepspeed-zero3", {"dp": 8, "tp": 1, "pp": 2}),
        ("megatron", {"dp": 1, "tp": 4, "pp": 4}),
    ],
)
def test_same_events_as_classifying_every_task(
    monkeypatch: pytest.MonkeyPatch, software: str, plan: dict
) -> None:
    seen: list = []
    real = sb._class_events

    def spy(timeline, dev):  # type: ignore[no-untyped-def]
        seen.append(timeline)
        return real(timeline, dev)

    monkeypatch.setattr(sb, "_class_events", spy)
    monkeypatch.setattr(api, "_REPORTS", {})
    # the reference knows no gather chains (their events: tests/sim/test_gather_chains.py)
    monkeypatch.setattr(HiddenCollectives, "CHAINS", False)
    sc = Scenario.from_dict(
        {"system": "dgx-a100", "model": "gpt", "model_args": GPT, "microbatch": 1,
         "schedule": "1f1b", "precision": "bf16", "optimizer": "adam",
         "fidelity": "analytic", "global_batch": 64, "software": software,
         "nodes": max(1, plan["dp"] * plan["tp"] * plan["pp"] // 8), **plan}
    )  # fmt: skip
    predict(sc, baseline=False)
    assert seen
    for tl in seen:
        if isinstance(tl, PeriodicTimeline):
            tl = tl.short
        if isinstance(tl, CoarseTimeline):
            tl = tl.coarse
        for dev in tl.graph.devices:
            got, got_cls = real(tl, dev)
            want, want_cls = _reference(tl, dev)
            assert got == want
            assert {k: got_cls[k] for _, _, k in got} == {k: want_cls[k] for _, _, k in want}
