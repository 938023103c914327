"""A stage's data-parallel collectives of one op, size and group share one ``CommSpec``
(issue 27 item 2: FSDP lowers a gather and a reduce-scatter per block and micro-batch, each
spec a new object for every cached report to hold and the garbage collector to walk)."""

from __future__ import annotations

from report_compare import gpt_scenario

from perfmodel.api import resolve
from perfmodel.parallel.taskgraph import CommSpec, TaskKind
from perfmodel.pipeline.lower import build_step

GPT = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def test_fsdp_gathers_and_reductions_share_their_specs() -> None:
    sc = gpt_scenario(model_args=GPT, global_batch=64, software="fsdp", tp=1, pp=1, dp=8)
    step, _ = build_step(sc, resolve(sc))
    comm = [t for t in step.graph.tasks if t.kind is TaskKind.COLLECTIVE and t.comm is not None]
    assert len(comm) > 50
    by_value: dict[CommSpec, set[int]] = {}
    for t in comm:
        by_value.setdefault(t.comm, set()).add(id(t.comm))  # type: ignore[arg-type]
    assert all(len(ids) == 1 for ids in by_value.values())  # one object per value
    assert len(by_value) < len(comm) // 4
    # each the spec the collective would have been given: its stage's group, op and bytes
    for spec in by_value:
        assert spec.group == comm[0].comm.group and spec.message_bytes > 0  # type: ignore[union-attr]
