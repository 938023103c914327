"""``chunk_moments`` by jumps (``schedule._moments_jumping``, speed31a) against the walk it
replaces (``schedule._moments_walk``, the reference): the same moments, in the same order,
for every schedule, pipeline size, micro-batch count (fewer than, as many as and more than
the stages), chunk count and stage, with and without the chunks' windows; the same refusals
(interleaved with ``m % p != 0``); and the same stage memory through the ``JUMPS`` switch."""

from __future__ import annotations

import random

import pytest
from pipelined_lowerings import lowering, torchtitan

from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel import schedule
from perfmodel.parallel.plan import PipelineSchedule


def _both(sched: PipelineSchedule, p: int, m: int, stage: int, v: int, windows: bool) -> None:
    try:
        want = schedule._moments_walk(sched, p, m, stage, v, windows)
    except InfeasiblePlanError:
        with pytest.raises(InfeasiblePlanError):
            schedule._moments_jumping(sched, p, m, stage, v, windows)
        return
    assert schedule._moments_jumping(sched, p, m, stage, v, windows) == want, (
        sched, p, m, stage, v, windows)  # fmt: skip


@pytest.mark.parametrize("sched", list(PipelineSchedule))
def test_jumps_equal_the_walk_on_a_grid(sched: PipelineSchedule) -> None:
    """Every stage of p 1-8, m 1-24 (m < p, m == p, m % p != 0 refused when interleaved),
    v 1-4 (the cool-down's run ends and window edges at every offset)."""
    for p in range(1, 9):
        for v in range(1, 5):
            for m in range(1, 25):
                for stage in range(p):
                    for windows in (True, False):
                        _both(sched, p, m, stage, v, windows)


def test_jumps_equal_the_walk_at_random() -> None:
    """Longer steps (whole periods skipped, long runs of one chunk's pairs): 300 draws of
    p up to 16, m up to 400, v up to 4."""
    rng = random.Random(31)
    for _ in range(300):
        sched = rng.choice(list(PipelineSchedule))
        p, v = rng.randint(1, 16), rng.randint(1, 4)
        m = p * rng.randint(1, 25) if rng.random() < 0.8 else rng.randint(1, 400)
        _both(sched, p, m, rng.randrange(p), v, rng.random() < 0.5)


@pytest.mark.parametrize("kind", ["megatron-core", "torchtitan", "torchtitan-1f1b"])
def test_switch_gives_the_same_stage_memory(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``schedule.JUMPS`` off and on: every stage's memory, field for field."""

    def memory() -> tuple:
        schedule.chunk_moments.cache_clear()
        if kind == "megatron-core":
            low = lowering(global_batch=64)
        elif kind == "torchtitan":
            low = torchtitan(global_batch=64)
        else:
            low = torchtitan(interleave=1, schedule="1f1b", global_batch=64)
        return low.memory()

    monkeypatch.setattr(schedule, "JUMPS", False)
    walked = memory()
    monkeypatch.setattr(schedule, "JUMPS", True)
    assert memory() == walked
