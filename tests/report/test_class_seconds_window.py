"""``_class_seconds`` over a window inside the step (the periodic extension's one period):
intervals cut at both ends, the highest-priority class wins, what starts after the window adds
nothing (issue 14: the sweep stops there)."""

from __future__ import annotations

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskKind
from perfmodel.report.step_breakdown import _class_seconds
from perfmodel.sim.engine import evaluate


def test_window_cuts_intervals_and_ignores_later_tasks() -> None:
    # g0: compute [0, 2]; its DP all-reduce [2, 5] (after the compute); compute [2, 3]
    # (same stream, after the first); a host task [0, 6] on another device; compute [6, 7]
    b = GraphBuilder()
    a = b.add(TaskKind.COMPUTE, "g0", "compute", 2.0)
    spec = CommSpec(CollectiveOp.ALLREDUCE, 1e6, ("g0", "g1"), kind=CommKind.DP)
    b.add(TaskKind.COLLECTIVE, "g0", "dp", 3.0, [a], comm=spec)
    c = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [a])
    h = b.add(TaskKind.HOST, "cpu", "host", 6.0)
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [c, h])
    tl = evaluate(b.build())
    assert tl.end_s == (2.0, 5.0, 3.0, 6.0, 7.0)
    # [1.5, 2] compute, [2, 3] compute, [3, 4.5] dp (beats host)
    assert _class_seconds(tl, "g0", 1.5, 4.5) == {"compute": 1.5, "comm:dp": 1.5}
    # [4.5, 5] dp, [5, 6] host, [6, 6.5] compute
    assert _class_seconds(tl, "g0", 4.5, 6.5) == {"comm:dp": 0.5, "host": 1.0, "compute": 0.5}
    # the whole step, and a window past its end (bubble)
    assert _class_seconds(tl, "g0", 0.0, 7.0) == {"compute": 4.0, "comm:dp": 2.0, "host": 1.0}
    assert _class_seconds(tl, "g0", 7.0, 8.0) == {"bubble": 1.0}
