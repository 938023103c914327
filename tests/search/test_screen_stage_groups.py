"""The screen's groups of every pipeline stage, where they sit differently (fix25, item 2).

The lowering prices each stage on its own groups (``PipelineLowering``: ``dp_groups[s]``,
``tp_group(0, s)``, ``expert_context_groups(s)``). Where stages straddle servers (two 72-GPU
NVL72 racks, stages of 16 GPUs: stage 4 on GPUs 64-79) stage 4's data-axis groups (GPUs 64,
68, 72, 76) cross racks while stage 0's do not. Per-micro-batch collectives (expert
all-to-alls, context-parallel and tensor-parallel ones) then make stage 4 the slowest stage,
which paces the pipeline, so the screen charges the slowest stage's group; the data-parallel
reduction of stage 4 runs while the pipeline drains through stages 3-0 and predict hides it,
so the screen keeps stage 0's (the slowest group there would put the screen 6-52% above
predict's step).
"""

from __future__ import annotations

from typing import Any

import pytest
from report_compare import PIPELINED_ZERO
from screen_spies import record_groups

from perfmodel.api import Scenario, predict
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.pipeline.lower import _step_inputs
from perfmodel.pipeline.resolve import resolve
from perfmodel.search.screen import PlanScreen

PLAN = {"gpus": 144, "tp": 4, "pp": 9, "global_batch": 72, "microbatch": 1}


def _base(model: str, args: dict[str, Any], software: str) -> dict[str, Any]:
    return {"system": "gb200-nvl72", "nodes": 2, "model": model, "model_args": args,
            "precision": "bf16", "optimizer": "adam", "software": software}  # fmt: skip


def _predicted(base: dict[str, Any], plan: dict[str, Any]) -> tuple[Any, Any]:
    sc = Scenario.from_dict({**base, **plan, "fidelity": "analytic"})
    r = resolve(sc)
    inp, costs, _ = _step_inputs(sc, r, None)
    return PipelineLowering(inp, costs), predict(sc, baseline=False)


def test_expert_groups_of_the_slowest_stage_pace() -> None:
    """MoE, Megatron-Core, tp4 pp9 ep4 on gb200-nvl72 x2: the screen prices stage 0's expert
    group (GPUs 0, 4, 8, 12, one rack) and stage 4's (64, 68, 72, 76, two racks), charges the
    slower, and its step is predict's within 2% (0.82 of it before fix25, stage 0's only)."""
    moe = {"hidden": 4096, "layers": 18, "heads": 32, "kv_heads": 8, "experts": 8,
           "seq_len": 4096}  # fmt: skip
    base = _base("moe", moe, "megatron-core")
    plan = {**PLAN, "ep": 4}
    screen = PlanScreen(base)
    asked = record_groups(screen)
    got = screen(plan)
    ranks = [r for r, _ in asked]
    assert (0, 4, 8, 12) in ranks and (64, 68, 72, 76) in ranks
    _, rep = _predicted(base, plan)
    (g0, c0), (g4, c4) = (screen._group(r) for r in ((0, 4, 8, 12), (64, 68, 72, 76)))
    a2a = CollectiveOp.ALLTOALL
    assert c4.collective_time(a2a, 2.0**24, g4) > 1.5 * c0.collective_time(a2a, 2.0**24, g0)
    assert got["iteration_time_s"] == pytest.approx(rep.iteration_time_s, rel=0.02)


def test_data_parallel_reduction_of_stage_zero() -> None:
    """GPT, DeepSpeed ZeRO-2 (its pipelining limit lifted), tp4 pp9 dp4 on gb200-nvl72 x2:
    stage 4's data-parallel group crosses racks (its all-reduce over 5x stage 0's on predict's
    topology), yet predict's step
    is the screen's within 2% with stage 0's group, and 1.15x or more below the screen's
    with stage 4's: the drain hides it. The screen keeps stage 0's."""
    gpt = {"layers": 18, "hidden": 2048, "heads": 16, "seq_len": 1024}
    # DeepSpeed's pipeline engine refuses ZeRO-2 with pp > 1: a stack stating it runs it
    base = {**_base("gpt", gpt, "deepspeed-zero2"), "software_options": PIPELINED_ZERO}
    plan = {**PLAN, "global_batch": 36}  # 9 micro-batches per replica
    low, rep = _predicted(base, plan)
    ar = CollectiveOp.ALLREDUCE
    t0, t4 = (low.costs.collective_time(ar, 2.0**28, low.dp_groups[s]) for s in (0, 4))
    assert t4 > 5 * t0
    screened = PlanScreen(base)(plan)["iteration_time_s"]
    assert screened == pytest.approx(rep.iteration_time_s, rel=0.02)
    slowest = PlanScreen(base)

    def stage4(op: Any, nbytes: float, n: int, stride: int) -> float:
        return low.costs.collective_time(op, nbytes, low.dp_groups[4]) if nbytes > 0 else 0.0

    slowest._dp_collective_s = stage4  # type: ignore[method-assign]
    assert slowest(plan)["iteration_time_s"] > 1.15 * rep.iteration_time_s
