"""FSDP over the context-parallel ranks, as torchtitan runs it: the FSDP mesh is the flattened
``dp_shard_cp`` (``dp_shard x cp`` ranks; ``(dp_replicate, dp_shard_cp)`` under HSDP) and FSDP
runs whenever ``dp_shard > 1 or cp > 1`` (``torchtitan/parallelisms/parallelize_llama.py`` and
``parallel_dims.py`` at 3f20451; ``torchtitan/distributed/parallel_dims.py`` at b5bcd76).
Megatron-Core's distributed optimizer shards over the data-parallel group with context
parallelism (``dp_cp_group``, ``megatron/core/optimizer/__init__.py`` at d98e8a6)."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, resolve
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import Sharding
from perfmodel.parallel.taskgraph import CommKind
from perfmodel.pipeline.lower import build_step
from perfmodel.search.plans import ModelFamily, ModelShape, SearchSpace, enumerate_plans

H, L, V, S = 256, 2, 1000, 1024
GPT = {"hidden": H, "layers": L, "heads": 4, "seq_len": S, "vocab": V}
#: GPT-2-style parameters by hand: 12 L H^2 (QKV, projection, 4H MLP) + 13 L H (their biases
#: and two layer norms) + V H (tied word embedding) + S H (learned positions) + 2 H (final norm)
PARAMS = 12 * L * H * H + 13 * L * H + V * H + S * H + 2 * H  # 2,098,176
#: torchtitan's BF16 Adam under FSDP2: FP32 sharded weights, FP32 gradients, two FP32 moments
STATE_BYTES_PER_PARAM = 4 + 4 + 8


def _sc(gpus: int, **kw: object) -> Scenario:
    return Scenario(
        system="dgx-a100",
        model="gpt",
        model_args=GPT,
        batch_per_gpu=1,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
        software="torchtitan",
        gpus=gpus,
        **kw,  # type: ignore[arg-type]
    )


def _state(sc: Scenario) -> tuple[object, object, float]:
    r = resolve(sc)
    step, _ = build_step(sc, r)
    m = step.memory[0]
    return r, step, m.weights_bytes + m.grads_bytes + m.optimizer_bytes


def test_hand_computed_params() -> None:
    assert PARAMS == 2_098_176


@pytest.mark.parametrize(
    ("gpus", "kw", "shards", "sharding"),
    [
        (4, {"cp": 2}, 4, Sharding.FSDP),  # dp 2 x cp 2
        (4, {"cp": 2, "hsdp": 1}, 2, Sharding.HSDP),  # dp_shard 1 x cp 2, 2 replicas
        (8, {"cp": 2, "hsdp": 2}, 4, Sharding.HSDP),  # dp_shard 2 x cp 2, 2 replicas
        (8, {"cp": 8}, 8, Sharding.FSDP),  # dp 1 x cp 8
    ],
)
def test_model_state_is_sharded_over_dp_shard_x_cp(
    gpus: int, kw: dict[str, int], shards: int, sharding: Sharding
) -> None:
    """16 B x 2,098,176 parameters / (dp_shard x cp) per GPU: 8,392,704 B at dp=2, cp=2
    (hsdp=1 shards over the 2 cp ranks, hsdp=2 at dp=4 over 2 x 2; both were over hsdp only)."""
    r, _, state = _state(_sc(gpus, **kw))
    assert r.recipe.sharding is sharding  # type: ignore[attr-defined]
    assert state == pytest.approx(STATE_BYTES_PER_PARAM * PARAMS / shards)
    if kw.get("cp") == 2 and gpus == 4 and "hsdp" not in kw:
        assert state == 8_392_704


def test_gather_and_reduce_groups_are_dp_shard_x_cp() -> None:
    """HSDP dp=4 (dp_shard 2, 2 replicas) x cp=2 on one DGX: parameter all-gathers and gradient
    reduce-scatters over torchtitan's ``dp_shard_cp`` group, the 4 ranks ``replicate x 4 +
    (0..3)`` (cp fastest: mesh ``[dp_replicate, dp_shard, cp]``), the shard's all-reduce over
    the 2 replicas (ranks ``i`` and ``i + 4``)."""
    r, step, _ = _state(_sc(8, cp=2, hsdp=2))
    gpus = r.topology.gpus  # type: ignore[attr-defined]
    tasks = step.graph.tasks  # type: ignore[attr-defined]
    gathers = [t for t in tasks if t.comm is not None and t.comm.kind is CommKind.ZERO]
    rs = [t for t in tasks if t.label.startswith("grad") and "replicas" not in t.label]
    ar = [t for t in tasks if t.label.endswith("replicas")]
    assert gathers and rs and len(rs) == len(ar)
    assert {t.comm.group for t in gathers} == {tuple(gpus[:4])}
    assert {t.comm.group for t in rs} == {tuple(gpus[:4])}
    assert {t.comm.group for t in ar} == {(gpus[0], gpus[4])}
    for a, b in zip(rs, ar, strict=True):
        assert b.comm.message_bytes == pytest.approx(a.comm.message_bytes / 4)


def test_fsdp_degree_and_shards() -> None:
    assert ParallelismPlan(dp=1, cp=8, fsdp=True).fsdp_degree == 8
    assert ParallelismPlan(dp=4, cp=2, fsdp=True, hsdp=2).fsdp_degree == 4
    assert ParallelismPlan(dp=2, cp=2, fsdp=True, hsdp=1).fsdp_shards
    assert not ParallelismPlan(dp=2, fsdp=True, hsdp=1).fsdp_shards
    assert ParallelismPlan(dp=1, cp=2, zero=1).fsdp_degree == 1  # not FSDP


SHAPE = ModelShape(num_blocks=4, num_heads=4, family=ModelFamily.TRANSFORMER, seq_len=1024)


def _space(zero_stages: tuple[int, ...] | None) -> SearchSpace:
    return SearchSpace(
        tp_degrees=(1,),
        pp_degrees=(1,),
        microbatch_sizes=(1,),
        recompute=("none",),
        ep_degrees=(1,),
        cp_degrees=(8,),
        zero_stages=zero_stages,
    )


def test_enumeration_offers_fsdp_at_dp1_with_cp() -> None:
    """8 GPUs, cp 8: torchtitan's "FSDP 1, CP 8" plan is enumerated sharded (ZeRO-3 under an FSDP
    preset), and the distributed optimizer's ZeRO-1 too; one GPU still searches ZeRO 0 only."""
    plans = enumerate_plans(8, 1, SHAPE, _space((3,))).plans
    assert [(p["dp"], p["cp"], p["zero"]) for p in plans] == [(1, 8, 3)]
    plans = enumerate_plans(8, 1, SHAPE, _space(None)).plans
    assert sorted(p["zero"] for p in plans) == [0, 1]
    one = SearchSpace(
        tp_degrees=(1,),
        pp_degrees=(1,),
        microbatch_sizes=(1,),
        zero_stages=(3,),
        recompute=("none",),
    )
    assert [p["zero"] for p in enumerate_plans(1, 1, SHAPE, one).plans] == [0]


def test_dp1_cp8_fsdp_plan_resolves_sharded() -> None:
    """The enumerated dp=1, cp=8 plan under torchtitan is FSDP over the 8 cp ranks."""
    (plan,) = enumerate_plans(8, 1, SHAPE, _space((3,))).plans
    r, _, state = _state(_sc(8, cp=plan["cp"], zero=plan["zero"]))
    assert r.plan.fsdp and r.plan.fsdp_shards  # type: ignore[attr-defined]
    assert state == pytest.approx(STATE_BYTES_PER_PARAM * PARAMS / 8)
