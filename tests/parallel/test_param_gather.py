"""Megatron-Core's overlapped parameter all-gather (distributed optimizer, ``overlap_param_gather``)
under the interleaved schedule: each model chunk's gathers are launched a chunk ahead
(``param_sync_func``), so only the step's first chunk waits for its parameters (issue 24, cause 10)."""

from __future__ import annotations

import pytest
from sim_synthetic import FakeCosts, block_workload, lower_synthetic

from perfmodel.parallel.plan import ParallelismPlan, PipelineSchedule
from perfmodel.parallel.taskgraph import TaskKind
from perfmodel.sim.engine import _list_schedule

# 16 blocks of 10 M parameters: 2 stages x 4 chunks of 2 blocks, one 20 M-parameter bucket per
# chunk (Megatron-Core's bucket is max(40e6, 1e6 dp) parameters); 1 ms of forward per block
PLAN = ParallelismPlan(
    dp=2, pp=2, interleave=4, schedule=PipelineSchedule.INTERLEAVED, zero=1, microbatch_size=1
)


def _timeline(bandwidth_Bps: float):
    step = lower_synthetic(
        PLAN,
        block_workload(16, params=10_000_000),
        FakeCosts(bandwidth_Bps=bandwidth_Bps),
        batch_per_replica=4,
        software="megatron-core",
    )
    graph = step.graph.full() if hasattr(step.graph, "full") else step.graph
    return graph, _list_schedule(graph)


def _first_forward_waits(graph, tl, device: str = "g0") -> dict[int, float]:
    """Seconds each chunk's first forward on ``device`` starts after everything but its
    parameter gathers is ready (the tasks it waits on and the compute stream before it)."""
    tasks = {t.tid: t for t in graph.tasks}
    compute = sorted(
        (t for t in graph.tasks if t.device == device and t.stream == "compute"),
        key=lambda t: tl.start_s[t.tid],
    )
    out: dict[int, float] = {}
    stream_free = 0.0
    for t in compute:
        if t.kind is TaskKind.COMPUTE and t.label.startswith("F0.c"):
            c = int(t.label.split(".c")[1])
            ready = max(
                [stream_free]
                + [tl.end_s[d] for d in t.deps if not tasks[d].label.startswith("AG ")]
            )
            out.setdefault(c, tl.start_s[t.tid] - ready)
        stream_free = max(stream_free, tl.end_s[t.tid])
    return out


def test_later_chunks_do_not_wait_for_their_gather() -> None:
    """A chunk's gather (80 MB at 80/3 GB/s: 3 ms) takes longer than one forward of a chunk
    (2 ms) and less than the two forwards of the chunk before it that run after its launch
    (4 ms): chunks 1-3 start their first forward as soon as the stage is free (a gather
    launched only one segment ahead would idle them 1 ms each); chunk 0 waits for its own gather
    (launched at the step's start, nothing to hide it under)."""
    graph, tl = _timeline(80e9 / 3)
    waits = _first_forward_waits(graph, tl)
    assert sorted(waits) == [0, 1, 2, 3]
    assert waits[0] == pytest.approx(3e-3, rel=1e-6)  # 80e6 B x 2 (2 - 1) / 2 / (80e9 / 3) B/s
    for c in (1, 2, 3):
        assert waits[c] == pytest.approx(0.0, abs=1e-12), (c, waits)


def test_gather_launched_a_chunk_ahead() -> None:
    """Each chunk's gathers wait on the task before the previous chunk's first forward
    (chunks 0 and 1: on nothing, the start of the step)."""
    graph, _ = _timeline(80e9)
    by_tid = {t.tid: t for t in graph.tasks}
    for t in graph.tasks:
        if not t.label.startswith("AG F0.") or t.device != "g0":
            continue
        k = int(t.label.split(".")[1])  # virtual chunk k = c x pp + stage
        c = k // PLAN.pp
        if c < 2:
            assert list(t.deps) == [], t
        else:
            (dep,) = t.deps
            nxt = [
                u
                for u in graph.tasks
                if u.device == "g0" and u.label == f"F0.c{c - 1}" and dep in u.deps
            ]
            assert nxt, (t.label, by_tid[dep].label)
