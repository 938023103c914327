"""Plan search over expert and context parallelism: enumeration (ep folds over dp x cp, cp
splits the sequence in 2 x cp chunks), the screen's expert all-to-all, and the line that says
why the best plan wins."""

from __future__ import annotations

from perfmodel.search.plans import (
    ModelFamily,
    ModelShape,
    SearchSpace,
    describe_plan,
    enumerate_plans,
)
from perfmodel.search.screen import PlanScreen

MOE = ModelShape(
    num_blocks=4,
    num_heads=4,
    num_kv_heads=2,
    family=ModelFamily.TRANSFORMER,
    num_experts=8,
    seq_len=512,
)
ONE = SearchSpace(pp_degrees=(1,), microbatch_sizes=(1,), zero_stages=(0,), recompute=("none",))


def test_enumeration_folds_ep_over_data_and_context_ranks() -> None:
    plans = enumerate_plans(8, 8, MOE, ONE).plans
    assert sorted({(p["tp"], p["ep"]) for p in plans}) == [
        (1, 1),
        (1, 2),
        (1, 4),
        (1, 8),
        (2, 1),
        (2, 2),
        (2, 4),
    ]  # fmt: skip  (tp 4 does not divide the 2 KV heads; ep 8 x tp 2 > 8 ranks)
    assert all(p["cp"] == 1 for p in plans)
    dense = ModelShape(num_blocks=4, num_heads=4, family=ModelFamily.TRANSFORMER, seq_len=512)
    assert {p["ep"] for p in enumerate_plans(8, 8, dense, ONE).plans} == {1}


def test_enumeration_over_cp_and_its_rejections() -> None:
    space = SearchSpace(
        tp_degrees=(1,),
        pp_degrees=(1,),
        microbatch_sizes=(1,),
        zero_stages=(0,),
        recompute=("none",),
        ep_degrees=(1,),
        cp_degrees=(1, 2, 3),
    )
    en = enumerate_plans(8, 8, MOE, space)
    assert sorted({(p["dp"], p["cp"]) for p in en.plans}) == [(4, 2), (8, 1)]
    assert en.rejected["cp must divide the sequence in 2 x cp chunks"] == 1  # 512 / 6
    assert describe_plan({"dp": 4, "tp": 1, "pp": 1, "cp": 2, "ep": 4}) == "dp4 tp1 pp1 cp2 ep4"


def test_model_shape_reads_experts_and_sequence() -> None:
    shape = ModelShape.from_model(
        "moe", {"hidden": 128, "layers": 2, "heads": 2, "kv_heads": 2, "experts": 4, "seq_len": 256}
    )
    assert (shape.num_experts, shape.seq_len) == (4, 256)


def test_screen_charges_the_expert_alltoall() -> None:
    base = {
        "system": "dgx-h100",
        "model": "moe",
        "model_args": {
            "hidden": 256,
            "layers": 2,
            "heads": 4,
            "kv_heads": 4,
            "experts": 8,
            "seq_len": 512,
        },
        "precision": "bf16",
        "optimizer": "adam",
        "software": "megatron-core",
    }
    screen = PlanScreen(base)
    plain = screen({"gpus": 8, "global_batch": 8, "dp": 8})
    ep8 = screen({"gpus": 8, "global_batch": 8, "dp": 8, "ep": 8})
    assert plain["breakdown"]["tp_comm_s"] == 0.0
    assert ep8["breakdown"]["tp_comm_s"] > 0.0
    assert ep8["memory_per_gpu_bytes"] < plain["memory_per_gpu_bytes"]  # 1 expert per rank
