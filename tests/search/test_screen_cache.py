"""The screen costs identical blocks once and answers a repeated plan from its cache."""

from __future__ import annotations

import pytest

from perfmodel.parallel.placement import DEFAULT_ORDER
from perfmodel.search.screen import PlanScreen
from perfmodel.search.screen_ranks import Ranks

ARGS = {"layers": 6, "hidden": 512, "heads": 8, "seq_len": 256}


def test_block_sum_equals_layer_by_layer_sum() -> None:
    screen = PlanScreen({"system": "dgx-a100", "model": "gpt", "model_args": ARGS})
    parts = screen._parts(2, 2, "full", False, strides=Ranks.of(DEFAULT_ORDER, 1, 1, 2))
    costs = screen._system_costs(1)
    wl = screen._workload(2, 2, False)
    blocks = [la for la in wl.layers if la.block is not None]
    fwd = sum(costs.layer_time(la)[0] for la in blocks)
    bwd = sum(sum(costs.layer_time(la)[1:]) for la in blocks) + fwd  # full recompute
    assert parts.block[0] == pytest.approx(fwd, rel=1e-12)
    assert parts.block[1] == pytest.approx(bwd, rel=1e-12)
    assert parts.blocks == tuple(range(6))


def test_repeat_is_cached_and_a_fresh_copy() -> None:
    screen = PlanScreen({"system": "dgx-a100", "model": "gpt", "model_args": ARGS})
    plan = {"gpus": 8, "tp": 2, "pp": 2, "global_batch": 16, "microbatch": 1}
    first = screen(plan)
    first["iteration_time_s"] = -1.0
    first["breakdown"]["compute_s"] = -1.0
    again = screen(dict(plan))
    assert again["iteration_time_s"] > 0 and again["breakdown"]["compute_s"] > 0
    assert len(screen._results) == 1


def test_layer_times_shared_by_plans_whose_groups_sit_alike() -> None:
    """dgx-a100 x4, tp2 with (dp, pp) of (16, 1), (8, 2), (4, 4) (the default order): every
    stage's tensor-parallel group sits on its server alike (local GPUs 0-1), so the three
    plans share one stage shape's layer times (the cache key reads the groups' probes and
    etp, not the placement's strides, which differ with dp). Placed ``dp,tp,pp`` the tp group
    spans the data axis and is another shape."""
    screen = PlanScreen({"system": "dgx-a100", "nodes": 4, "model": "gpt", "model_args": ARGS})
    for pp in (1, 2, 4):
        screen({"gpus": 32, "tp": 2, "pp": pp, "global_batch": 64, "microbatch": 1})
    assert len(screen._parts_cache) == 1
    screen({"gpus": 32, "tp": 2, "pp": 2, "global_batch": 64, "microbatch": 1,
            "placement": "dp,tp,pp"})  # fmt: skip
    assert len(screen._parts_cache) == 2
