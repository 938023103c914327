"""FSDP2 under pipeline parallelism gathers each unit once a step and reduces once at its end.

torchtitan sets ``reshard_after_forward = not pp_enabled`` and ``torch.distributed.pipelining``
turns ``reshard_after_backward`` and ``requires_gradient_sync`` off for every backward, then
runs FSDP's post-backward (reshard, reduce-scatter) after a stage's last
(:attr:`~perfmodel.parallel.recipe.Recipe.gather_per_step`): the step's graph has one
all-gather per FSDP unit of each chunk and one gradient reduce-scatter per stage, whatever the
number of micro-batches; ZeRO-3 without pipelining (and the ``deepspeed-zero3`` preset, whose
stack gathers per micro-batch) keeps one gather per unit in every forward and backward.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections import Counter
from pathlib import Path

import pytest

import perfmodel.api as api
import perfmodel.pipeline.lower as lower_stage
from perfmodel.api import predict
from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel import lower_step
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import build_recipe
from perfmodel.parallel.software import get_preset
from perfmodel.search.screen_overlap import dp_exposed
from perfmodel.workload.memory import Optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from report_compare import gpt_scenario, pipelined_zero

GPT = {"layers": 8, "hidden": 4096, "heads": 32, "seq_len": 1024, "vocab": 8000}


def _recipe(software: str, **plan: int):
    """The recipe of ``software``'s preset under a plan that shards as the preset does."""
    preset = get_preset(software)
    shard = {"fsdp": True} if preset.fsdp else {"zero": preset.zero}
    return build_recipe(preset, Precision.BF16, Optimizer.ADAM, ParallelismPlan(**shard, **plan))


@pytest.mark.parametrize(
    ("software", "pp", "once"),
    [
        ("fsdp", 2, True),
        ("torchtitan", 4, True),
        ("fsdp", 1, False),
        ("torchtitan", 1, False),
        ("deepspeed-zero3", 2, False),
        ("megatron-core", 2, False),
    ],
)
def test_recipe_gathers_once_only_for_pipelined_fsdp2(software: str, pp: int, once: bool) -> None:
    """The one fact: set for the FSDP2 stacks with ``pp > 1``; their gradient reduction is
    then not overlapped (it follows the stage's last backward) and their copy kernels run
    once a step."""
    rc = _recipe(software, dp=4, pp=pp)
    assert rc.gather_per_step is once
    # FSDP2's copies follow: once a step, 1/m of them per micro-batch
    assert rc.kernels(8).fsdp_step_share == (0.125 if once else 0.0)
    # and the report says so (its recipe's dict, --explain's lines)
    assert rc.to_dict()["gather_per_step"] is once
    assert any("gathered once a step" in line for line in rc.describe(pp=pp)) is once
    if software in ("fsdp", "torchtitan"):
        assert rc.grad_comm.overlap is not once
        assert rc.param_gather.overlap


def _fine_graph(monkeypatch: pytest.MonkeyPatch, **kw: object):
    """The fine (uncoarsened) step graph of a GPT of 8 blocks on one DGX A100 (micro-batch 1,
    global batch 32)."""
    sc = gpt_scenario(model_args=GPT, global_batch=32, tp=1, microbatch=1, **kw)
    with monkeypatch.context() as mp:
        mp.setattr(lower_stage, "lower", functools.partial(lower_step.lower, coarse=False))
        mp.setattr(api, "_REPORTS", {})
        return predict(sc, baseline=False).timeline.graph


def _fine_counts(
    software: str, pp: int, monkeypatch: pytest.MonkeyPatch, **plan: object
) -> tuple[Counter, int]:
    """:func:`_fine_graph`'s collectives by label head (``AG``, ``grad``), and the step's
    micro-batches."""
    keys = {**pipelined_zero(software, pp), **plan}  # deepspeed-zero3 pp > 1: limit lifted
    g = _fine_graph(monkeypatch, software=software, pp=pp, dp=8 // pp, **keys)
    heads = Counter(t.label.split(" ")[0] for t in g.tasks if t.kind.name == "COLLECTIVE")
    return heads, 32 // (8 // pp)


@pytest.mark.parametrize(
    ("software", "extra"),
    [
        ("fsdp", {}),
        ("torchtitan", {"schedule": "interleaved", "interleave": 2}),
        ("fsdp", {"recompute": "full"}),
    ],
)
def test_pipelined_fsdp2_gathers_each_unit_once_a_step(
    software: str, extra: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pipeline stages, 8 micro-batches of one sample (interleaved: 2 chunks per rank):
    one all-gather per unit of every chunk and one reduce-scatter per stage
    ("grad all" after its last backward), none per micro-batch."""
    heads, m = _fine_counts(software, 2, monkeypatch, **extra)
    assert m == 8
    rc = _recipe(software, dp=4, pp=2)
    assert rc.gather_per_step
    # GPT of 8 blocks on 2 stages: 4 blocks a stage plus the embedding's and the head's units
    assert heads["AG"] == 10
    assert heads["grad"] == 2


def test_unpipelined_fsdp_and_deepspeed_zero3_gather_every_micro_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without pipelining FSDP gathers each unit in every forward and backward; the
    ``deepspeed-zero3`` preset does with pipelining too (the per-micro-batch path the pipelined
    FSDP2 left; a combination DeepSpeed's ``PipelineEngine`` refuses, so ``predict`` refuses
    it unless the scenario states a stack that runs it, as here: ``pipelined_zero``)."""
    flat, m = _fine_counts("fsdp", 1, monkeypatch)
    assert m == 4 and flat["AG"] == 2 * m * 10 and flat["grad"] == m * 10
    ds, m = _fine_counts("deepspeed-zero3", 2, monkeypatch)
    assert m == 8 and ds["AG"] == 2 * m * 10


def test_screen_charges_pipelined_fsdp2_once_a_step() -> None:
    """The screen's data-parallel estimate reads the same fact: one reduction in full and the
    gathers beyond one forward per filling stage, not ``m`` times."""
    rc = _recipe("fsdp", dp=4, pp=2)

    def coll(op: CollectiveOp, nbytes: float) -> float:
        return nbytes * 1e-9 * (2.0 if op is CollectiveOp.ALLGATHER else 3.0)

    params = 1e9
    red = coll(rc.grad_reduce_op, params * rc.grad_reduce_bytes)
    gather = coll(CollectiveOp.ALLGATHER, params * rc.gather_bytes)
    for m in (1, 8, 64):
        assert dp_exposed(rc, params, m, 0.5, 1.0, coll, 2) == pytest.approx(
            (red, 2 * max(0.0, gather - 0.5))
        )
    zero3 = _recipe("fsdp", dp=4, pp=1)
    assert dp_exposed(zero3, params, 8, 0.5, 1.0, coll, 1)[1] == pytest.approx(
        8 * max(0.0, gather - 0.5)
    )


def test_pipelined_fsdp2_step_is_shorter_than_per_micro_batch_gathers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same pipelined FSDP2 plan with the per-micro-batch path forced back
    (``gather_per_step`` off in its recipe) moves more bytes over the same links: the step
    is longer."""
    import perfmodel.parallel.lowering as lowering

    sc = gpt_scenario(model_args=GPT, global_batch=32, software="fsdp", tp=1, pp=2, dp=4,
                      microbatch=1)  # fmt: skip
    monkeypatch.setattr(api, "_REPORTS", {})
    once = predict(sc, baseline=False).iteration_time_s
    orig = lowering.StepInputs.recipe_for

    def per_mb(self, costs):  # type: ignore[no-untyped-def]
        rc = orig(self, costs)
        return dataclasses.replace(rc, gather_per_step=False)

    monkeypatch.setattr(lowering.StepInputs, "recipe_for", per_mb)
    monkeypatch.setattr(api, "_REPORTS", {})
    every = predict(sc, baseline=False).iteration_time_s
    assert every > once


def test_interleaved_fsdp2_gathers_as_each_chunk_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP2's pre-forward hook gathers a chunk's units as its forward starts, prefetching one
    unit ahead: every gather waits for nothing or for a compute of its own device (the one two
    units back), never for a whole chunk launched ahead as Megatron-Core's interleaved
    ``param_sync_func`` launches them (``aligned_gather``)."""
    g = _fine_graph(monkeypatch, software="torchtitan", pp=2, dp=4, schedule="interleaved",
                    interleave=2)  # fmt: skip
    by_id = {t.tid: t for t in g.tasks}
    gathers = [t for t in g.tasks if t.label.startswith("AG ")]
    assert len(gathers) == 10
    for t in gathers:
        assert all(
            by_id[d].kind.name == "COMPUTE" and by_id[d].device == t.device for d in t.deps
        ), (t.label, [by_id[d].label for d in t.deps])
    # chunk 1's first gathers (chunks k = 2, 3 of pp 2) wait for chunk 0's computes
    late = [t for t in gathers if int(t.label.split(".")[1]) >= 2]
    assert late and all(t.deps for t in late)


def test_pipelined_fsdp2_reduces_after_the_stage_last_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One reduce-scatter per stage ("grad all"), after the stage's last compute, which is a
    backward of the step's last micro-batch (not overlapped with it)."""
    g = _fine_graph(monkeypatch, software="fsdp", pp=2, dp=4)
    by_id = {t.tid: t for t in g.tasks}
    reds = [t for t in g.tasks if t.label == "grad all"]
    assert len(reds) == 2 and len({t.device for t in reds}) == 2
    for t in reds:
        computes = [x for x in g.tasks if x.device == t.device and x.kind.name == "COMPUTE"]
        last = max(computes, key=lambda x: x.tid)
        assert last.label.startswith("B") and last.microbatch == 7
        assert last.tid in t.deps
        assert all(by_id[d].tid <= last.tid for d in t.deps)


def test_screen_fills_every_stage_with_interleaved_pipelined_fsdp2() -> None:
    """The screen's pipeline fill: Megatron-Core's interleaved gathers launch at the step's
    start (one delay), pipelined FSDP2's as each stage starts, interleaved or not (``pp``)."""
    from types import SimpleNamespace

    from perfmodel.search.screen import PlanScreen

    fake = SimpleNamespace(_dp_collective_s=lambda op, nbytes, n, stride: nbytes * 1e-9)
    st = SimpleNamespace(stage_params=1e9)
    rc = _recipe("fsdp", dp=4, pp=4)

    def dp_s(recipe, schedule: str) -> float:
        args = (recipe, st, 4, 1, 4, 8, (0.1, 0.2), schedule)
        return PlanScreen._dp_s(fake, *args)  # type: ignore[arg-type]

    gather = 1e9 * rc.gather_bytes * 1e-9
    red = 1e9 * rc.grad_reduce_bytes * 1e-9
    for schedule in ("1f1b", "interleaved"):
        assert dp_s(rc, schedule) == pytest.approx(red + 4 * (gather - 0.1))
    mcore = _recipe("megatron-core", dp=4, pp=4)
    assert dp_s(mcore, "interleaved") < dp_s(mcore, "1f1b")
