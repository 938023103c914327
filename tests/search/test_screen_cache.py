"""The screen costs identical blocks once and answers a repeated plan from its cache."""

from __future__ import annotations

import pytest

from perfmodel.errors import PerfModelError
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


def _memory_plans() -> list[dict[str, object]]:
    """Plans of 16 GPUs over two global batches, with and without a micro-batch (the screen
    then probes micro-batches as predict chooses one): zero 0/1, 1F1B, interleaved, GPipe."""
    plans: list[dict[str, object]] = []
    for gb in (64, 16):  # the larger batch first: its memo must not answer the smaller
        for tp, pp in ((1, 1), (2, 2), (2, 4), (4, 2)):
            for mb in (None, 1, 2, 4):
                for zero in (0, 1):
                    sc = {"gpus": 16, "tp": tp, "pp": pp, "global_batch": gb, "zero": zero}
                    if mb is not None:
                        sc["microbatch"] = mb
                    plans.append(sc)
                    if pp > 1 and mb is not None:  # GPipe holds all m on the last stage too
                        plans.append({**sc, "schedule": "interleaved", "interleave": 2})
                        plans.append({**sc, "schedule": "gpipe"})
    return plans


def test_stage_memory_memo_equals_the_direct_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PlanScreen.MEMO_MEMORY``: every report (memory, fit, errors) of the plans above with the
    memo of :meth:`PlanScreen._fuller_stage` equals the one computed at every call, and the
    memo is asked again (the auto-sized plans' probes are explicit plans)."""
    base = {"system": "dgx-a100", "nodes": 2, "model": "gpt", "model_args": ARGS}

    def reports(memo: bool) -> tuple[list[object], PlanScreen, int]:
        monkeypatch.setattr(PlanScreen, "MEMO_MEMORY", memo)
        screen = PlanScreen(base)
        calls = 0
        fuller = screen._fuller_stage

        def counted(*a: object) -> object:
            nonlocal calls
            calls += 1
            return fuller(*a)

        monkeypatch.setattr(screen, "_fuller_stage", counted)
        out: list[object] = []
        for sc in _memory_plans():
            try:
                out.append(screen(sc))
            except PerfModelError as exc:  # the refusal is part of the answer
                out.append(f"{type(exc).__name__}: {exc}")
        return out, screen, calls

    memo, screen, memo_calls = reports(True)
    direct, _, direct_calls = reports(False)
    assert memo == direct
    assert any(isinstance(r, dict) for r in memo) and any(isinstance(r, str) for r in memo)
    assert len({r["memory_per_gpu_bytes"] for r in memo if isinstance(r, dict)}) > 10
    assert memo_calls == len(screen._stage_mems) < direct_calls
