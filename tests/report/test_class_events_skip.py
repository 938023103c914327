"""``_class_events`` passes over another device's tasks that add no event (issue 27: ~82,000
of the 94,106 tasks of a gather-bound FSDP step of GPT-3 175B on 1024 A100) before reading their
times and class: the same events in the same order, and the same class for every key they use,
as the version that classified every task, on every device of lowered steps with folded
operation tasks, off-device host and optimizer tasks and data-parallel groups."""

from __future__ import annotations

import pytest
from report_compare import pipelined_zero

import perfmodel.api as api
from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.taskgraph import TaskKind
from perfmodel.report import step_breakdown as sb
from perfmodel.report.step_breakdown import _EVENT_ORDER, _folded, task_class
from perfmodel.sim.engine import CoarseTimeline, PeriodicTimeline

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def _reference(timeline, dev):  # type: ignore[no-untyped-def]
    """The previous ``_class_events``: every task of another device classified first."""
    events: list = []
    append = events.append
    keys: dict = {  # the folded pieces' and sends' keys (_folded adds none), spelled out
        ("compute", TaskKind.COLLECTIVE, None): "0|comm:tp",
        ("compute", TaskKind.COMPUTE, None): "0|compute",
        ("folded send",): "1|comm:pp",
    }
    start_s, end_s = timeline.start_s, timeline.end_s
    for t in timeline.graph.tasks:
        comm = t.comm
        if t.device != dev:
            if t.stream == "compute":
                if t.send_s > 0 and dev in t.send.group:
                    _folded(append, t, end_s[t.tid])
                continue
            mine = comm is not None and dev in comm.group
        else:
            mine = True
        tid = t.tid
        s, e = start_s[tid], end_s[tid]
        if t.then_s or t.send_s:
            _folded(append, t, e, s)
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

    def spy(timeline, dev, *split):  # type: ignore[no-untyped-def]
        seen.append(timeline)
        return real(timeline, dev, *split)

    monkeypatch.setattr(sb, "_class_events", spy)
    monkeypatch.setattr(api, "_REPORTS", {})
    # the reference knows no gather chains (their events: tests/sim/test_gather_chains.py)
    monkeypatch.setattr(HiddenCollectives, "CHAINS", False)
    sc = Scenario.from_dict(
        {"system": "dgx-a100", "model": "gpt", "model_args": GPT, "microbatch": 1,
         "schedule": "1f1b", "precision": "bf16", "optimizer": "adam",
         "fidelity": "analytic", "global_batch": 64, "software": software,
         "nodes": max(1, plan["dp"] * plan["tp"] * plan["pp"] // 8),
         **pipelined_zero(software, plan["pp"]), **plan}
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


@pytest.mark.parametrize("then", [(0.25,), (0.25, 0.5)])  # flat chain, general recurrence
def test_chain_events_on_another_device_of_its_groups(then: tuple[float, ...]) -> None:
    """A gather chain on ``g0`` whose gather and reduction groups hold a second simulated
    device ``g1`` (``g1`` runs a compute of its own, 10 s after the chain's last reduction: the
    critical device, idle while the chain runs): ``g1``'s events
    and breakdown hold the chain's gathers and reductions, as those of the graph of the fine
    tasks the chain stands for (gather, compute, reduction per segment). Skipping the chain on
    every device but its own (``_class_events``' ``own or dev in members`` cut to ``own``)
    loses them: g1's exposed "zero" and "dp" seconds."""
    from perfmodel.ops import CollectiveOp
    from perfmodel.parallel.taskgraph import (
        HEAD,
        ChainSegment,
        ChainStatic,
        CommKind,
        CommSpec,
        GraphBuilder,
        Task,
        TaskKind,
        chain_mark,
    )
    from perfmodel.sim.engine import _list_schedule

    grp = ("g0", "g1")
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, grp, "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, grp, "auto", CommKind.DP)
    segs = tuple(ChainSegment(g, 1.0, then, 0.5, grp, grp) for g in (2.0, 0.5, 3.0))
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    static = ChainStatic(segs, "zero", "dp", True, g_proto, r_proto, frozenset(grp), None)
    assert (static.flat is not None) == (len(then) == 1)
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    c = b.add_chain("g0", [x], "F0", 0, 0, (static, -1, x))
    b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c, chain_mark(c, 3)])
    b.add(TaskKind.COMPUTE, "g1", "compute", 10.0, [chain_mark(c, 3)])
    tl = _list_schedule(b.build())
    f = GraphBuilder()
    x = f.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    hist, prev, reds = [x], [x], []
    for g_s, c_s, th, red, _, _ in segs:
        ag = f.add(TaskKind.COLLECTIVE, "g0", "zero", g_s, hist[-2:-1], "AG", -1, -1, g_spec)
        tid = f.add(TaskKind.COMPUTE, "g0", "compute", c_s, [*prev, ag], "F0", 0, 0, None, th)
        hist.append(tid + HEAD)
        prev = [tid]
        reds.append(f.add(TaskKind.COLLECTIVE, "g0", "dp", red, prev, "grad", -1, -1, r_spec))
    f.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [prev[0], *reds])
    f.add(TaskKind.COMPUTE, "g1", "compute", 10.0, [reds[-1]])
    fine = _list_schedule(f.build())
    assert tl.makespan_s == fine.makespan_s
    for dev in grp:
        got, got_cls = sb._class_events(tl, dev)
        want, want_cls = sb._class_events(fine, dev)
        assert sorted(got) == sorted(want)  # ties at one time: any order (_EVENT_ORDER)
        assert {k: got_cls[k] for _, _, k in got} == {k: want_cls[k] for _, _, k in want}
    assert sb.critical_device(tl) == sb.critical_device(fine) == "g1"
    bd = sb.breakdown(tl)
    assert bd == sb.breakdown(fine)
    assert bd.exposed_comm_s.keys() >= {"zero", "dp"}  # the chain's, seen from g1
