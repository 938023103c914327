"""The lowering's round robin over the stages' operation orders (``schedule.round_robin``)."""

from __future__ import annotations

import pytest

from perfmodel.parallel.schedule import Op, one_f_one_b, round_robin


def _emit(ops: list[list[Op]]) -> list[tuple[int, str, int]]:
    """``(stage, phase, micro-batch)`` in the order a lowering of one chunk per stage emits
    them: a forward once the previous stage's has been emitted, a backward once the next
    stage's has (``PipelineLowering.run_schedule``'s rule)."""
    P, done, order = len(ops), set(), []
    pos = [0] * P
    for s, o, i, n in round_robin(ops, pos):
        while i < n:
            phase, mb, _ = o[i]
            if phase == "F" and s > 0 and ("F", mb, s - 1) not in done:
                break
            if phase == "B" and s < P - 1 and ("B", mb, s + 1) not in done:
                break
            done.add((phase, mb, s))
            order.append((s, phase, mb))
            i += 1
        pos[s] = i
    return order


def test_round_robin_visits_stages_in_turn_until_all_are_emitted() -> None:
    # 1F1B, 3 stages, 3 micro-batches, round by round: stage 0's forwards (its B0 waits for
    # stage 1's), stage 1's two warm-up forwards, stage 2's F0 B0 F1 B1 (its F2 waits); then
    # stage 1's B0 F2 B1 and stage 2's F2 B2; then stage 0's B0 B1 and stage 1's B2; stage 0's B2
    ops = [one_f_one_b(3, 3, s) for s in range(3)]
    assert _emit(ops) == [
        (0, "F", 0), (0, "F", 1), (0, "F", 2), (1, "F", 0), (1, "F", 1),
        (2, "F", 0), (2, "B", 0), (2, "F", 1), (2, "B", 1),
        (1, "B", 0), (1, "F", 2), (1, "B", 1), (2, "F", 2), (2, "B", 2),
        (0, "B", 0), (0, "B", 1), (1, "B", 2),
        (0, "B", 2),
    ]  # fmt: skip
    order = _emit([one_f_one_b(4, 8, s) for s in range(4)])
    assert len(order) == len(set(order)) == 4 * 2 * 8


def test_round_robin_refuses_a_round_that_emits_nothing() -> None:
    pos = [0, 0]
    with pytest.raises(RuntimeError, match="deadlocked"):
        for _ in round_robin([[("F", 0, 0)], [("F", 0, 0)]], pos):
            pass  # never ready: no stage advances


def test_round_robin_of_no_operations_yields_nothing() -> None:
    assert list(round_robin([[], []], [0, 0])) == []
