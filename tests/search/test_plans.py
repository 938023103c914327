"""Plan enumeration: every plan valid, none duplicated, rejections counted, Megatron's plan present."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.errors import ConfigError
from perfmodel.search.plans import (
    PLAN_KEYS,
    ModelFamily,
    ModelShape,
    SearchSpace,
    describe_plan,
    divisors,
    enumerate_plans,
    parse_int_list,
)

GPT175 = ModelShape(num_blocks=96, num_heads=96, num_kv_heads=96, family=ModelFamily.TRANSFORMER)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.sampled_from([1, 2, 4, 6, 8, 12, 16, 32, 64]),
    batch=st.sampled_from([1, 8, 12, 32, 48, 64, 96, 128]),
    blocks=st.integers(1, 48),
    heads=st.sampled_from([1, 2, 4, 8, 12, 16, 32]),
)
def test_every_plan_is_valid_and_unique(gpus: int, batch: int, blocks: int, heads: int) -> None:
    shape = ModelShape(num_blocks=blocks, num_heads=heads, family=ModelFamily.TRANSFORMER)
    space = SearchSpace(
        schedules=("gpipe", "1f1b", "interleaved"), interleave=(2, 3), zero_stages=(0, 1, 2)
    )
    en = enumerate_plans(gpus, batch, shape, space)
    seen = set()
    for p in en.plans:
        assert set(p) == set(PLAN_KEYS)
        assert p["dp"] * p["tp"] * p["pp"] == gpus
        assert heads % p["tp"] == 0 and blocks % p["pp"] == 0
        per_replica = batch // p["dp"]
        assert batch % p["dp"] == 0 and per_replica % p["microbatch"] == 0
        n_micro = per_replica // p["microbatch"]
        if p["schedule"] == "interleaved":
            assert p["pp"] > 1 and p["interleave"] > 1
            assert blocks % (p["pp"] * p["interleave"]) == 0 and n_micro % p["pp"] == 0
        else:
            assert p["interleave"] == 1
        if p["pp"] == 1:
            assert p["schedule"] == "1f1b"
        if p["dp"] == 1:
            assert p["zero"] == 0
        key = tuple(sorted(p.items()))
        assert key not in seen
        seen.add(key)


def test_rejections_are_counted_by_reason() -> None:
    shape = ModelShape(num_blocks=6, num_heads=6, family=ModelFamily.TRANSFORMER)
    en = enumerate_plans(
        8, 16, shape, SearchSpace(microbatch_sizes=(1,), recompute=("none",), zero_stages=(0,))
    )
    # tp in {1,2,4,8}: 4 and 8 do not divide 6 heads
    assert en.rejected["tp does not divide the attention heads"] == 2
    # tp=1: pp in {1,2,4,8}: 4 and 8 do not divide 6 blocks; tp=2: pp in {1,2,4}: 4 does not
    assert en.rejected["pp does not divide the model's blocks"] == 3
    assert {(p["tp"], p["pp"]) for p in en.plans} == {(1, 1), (1, 2), (2, 1), (2, 2)}


def test_megatron_gpt3_plan_is_enumerated() -> None:
    """Narayanan et al. SC21: GPT-3 175B on 1024 A100s, batch 1536: TP 8 in a node, PP 16 (or 12), DP rest."""
    en = enumerate_plans(1024, 1536, GPT175)
    plans = {(p["tp"], p["pp"], p["dp"], p["microbatch"], p["schedule"]) for p in en.plans}
    assert (8, 16, 8, 1, "1f1b") in plans
    assert (8, 8, 16, 1, "1f1b") in plans
    # tp 64 does not divide 96 heads; tp 128+ neither
    assert not any(p["tp"] >= 64 for p in en.plans)
    assert 1000 < len(en) < 20000


def test_cnn_plans_vary_learners_not_tp() -> None:
    shape = ModelShape(num_blocks=15, family=ModelFamily.CNN)
    en = enumerate_plans(4, 256, shape, SearchSpace(learners_per_gpu=(1, 2, 4), pp_degrees=(1,)))
    assert {p["tp"] for p in en.plans} == {1}
    assert {p["learners_per_gpu"] for p in en.plans} == {1, 2, 4}
    for p in en.plans:
        if p["learners_per_gpu"] > 1:
            assert p["microbatch"] * p["learners_per_gpu"] * p["dp"] == 256
    assert en.rejected["tp > 1 on a CNN (enable cnn_tensor_parallel)"] == 2
    # Crossbow model averaging is not ZeRO-sharded; one learner plans vary ZeRO
    assert {p["zero"] for p in en.plans if p["learners_per_gpu"] > 1} == {0}
    assert {p["zero"] for p in en.plans if p["learners_per_gpu"] == 1} == {0, 1}
    # without micro-batching (the whole per-replica batch) is always a candidate
    assert any(p["microbatch"] == 64 and p["learners_per_gpu"] == 1 for p in en.plans)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="gpus"):
        enumerate_plans(0, 8, GPT175)
    with pytest.raises(ConfigError, match="global batch"):
        enumerate_plans(8, 0, GPT175)
    with pytest.raises(ConfigError, match="unknown schedule"):
        SearchSpace(schedules=("zigzag",))
    with pytest.raises(ConfigError, match="ZeRO stages"):
        SearchSpace(zero_stages=(4,))
    with pytest.raises(ConfigError, match="--gpus: 'x' is not an integer"):
        parse_int_list("1,x", where="--gpus")
    assert parse_int_list("1, 2,4", where="--gpus") == (1, 2, 4)
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]


def test_describe_plan() -> None:
    assert (
        describe_plan({"dp": 8, "tp": 8, "pp": 16, "microbatch": 1, "schedule": "1f1b"})
        == "dp8 tp8 pp16 mb1 1f1b"
    )
    assert describe_plan({"dp": 4, "tp": 1, "pp": 1, "microbatch": 32, "learners_per_gpu": 2}) == (
        "dp4 tp1 pp1 mb32 learners=2"
    )


@pytest.mark.parametrize(
    ("name", "args", "blocks", "heads", "kv", "family"),
    [
        ("gpt2", {}, 12, 12, 12, ModelFamily.TRANSFORMER),  # heads from the builder default
        ("llama3_8b", {}, 32, 32, 8, ModelFamily.TRANSFORMER),  # GQA: 8 KV heads limit tp
        (
            "gpt",
            {"hidden": 512, "layers": 6, "heads": 8, "seq_len": 128},
            6,
            8,
            8,
            ModelFamily.TRANSFORMER,
        ),
        ("resnet50", {}, 16, None, None, ModelFamily.CNN),
    ],
)
def test_model_shape_from_the_zoo(name, args, blocks, heads, kv, family) -> None:
    s = ModelShape.from_model(name, args)
    assert (s.num_blocks, s.num_heads, s.num_kv_heads, s.family) == (blocks, heads, kv, family)
    if kv:
        en = enumerate_plans(16, 64, s, SearchSpace(microbatch_sizes=(1,), recompute=("none",)))
        assert max(p["tp"] for p in en.plans) <= kv
