"""A gather's end and the next gather's start at one time, where a compute transition is at
that time too, left out of an own flat chain's events (``step_breakdown._flat_split``, switch
``step_breakdown.HELD_ENDS``). Each test compares ``_class_seconds`` with the switch on and off
(every gather as its two events, the direct path): the same seconds bit for bit, the classes
in the same order, over the whole step and windows that begin or end at a left-out time; and
that the shortcut left events out."""

from __future__ import annotations

from collections import Counter

import pytest
from test_chain_transitions import GPT, _lone_chain, _timeline

from perfmodel.report import step_breakdown as sb
from perfmodel.sim.engine import Timeline


def _events(tl: Timeline, dev: str, held: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    """``dev``'s events with the own flat chains' compute streams as transitions."""
    with monkeypatch.context() as m:
        m.setattr(sb, "HELD_ENDS", held)
        return sb._class_events(tl, dev, [], [])[0]


def _seconds(
    tl: Timeline, dev: str, t0: float, t1: float, held: bool, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, float]]:
    with monkeypatch.context() as m:
        m.setattr(sb, "HELD_ENDS", held)
        return list(sb._class_seconds(tl, dev, t0, t1).items())


def _left_out(tl: Timeline, dev: str, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The times of the event pairs the shortcut left out on ``dev``: each a gather's end and
    a start of the same key at that time, at a compute transition."""
    ct: list[float] = []
    sb._class_events(tl, dev, ct, [])
    gone = Counter(_events(tl, dev, False, monkeypatch))
    gone.subtract(Counter(_events(tl, dev, True, monkeypatch)))
    assert all(n >= 0 for n in gone.values())  # only left out, nothing added
    ends = sorted(e for e, n in gone.items() for _ in range(n) if e[1] < 0)
    starts = sorted(e for e, n in gone.items() for _ in range(n) if e[1] > 0)
    assert [(t, k) for t, _, k in ends] == [(t, k) for t, _, k in starts]
    times = {t for t, _, _ in ends}
    assert times <= set(ct)  # each at a compute transition
    return sorted(times)


@pytest.mark.parametrize(
    "software, plan",
    [
        ("deepspeed-zero3", {"dp": 8, "tp": 2, "pp": 2, "nodes": 4}),
        (
            "deepspeed-zero3",
            {"dp": 4, "tp": 2, "pp": 2, "nodes": 2, "schedule": "interleaved", "interleave": 2},
        ),
        ("deepspeed-zero3", {"dp": 4, "tp": 2, "pp": 2, "nodes": 2, "placement": "tp,pp,dp"}),
        ("torchtitan", {"dp": 8, "tp": 2, "pp": 1, "nodes": 2}),
    ],
)
def test_held_ends_give_the_same_seconds(
    monkeypatch: pytest.MonkeyPatch, software: str, plan: dict
) -> None:
    """Gather-bound ZeRO-3 / FSDP steps: on every device, the whole step, a window past it,
    one inside and windows that begin or end at a time whose pair was left out."""
    tl = _timeline(software, monkeypatch, **{"model_args": GPT, "global_batch": 64, **plan})
    T = tl.makespan_s
    left = 0
    for dev in tl.graph.devices:
        times = _left_out(tl, dev, monkeypatch)
        left += len(times)
        windows = [(0.0, T), (0.0, T * 1.25), (T * 0.3, T * 0.6)]
        for t in times[:: max(len(times) // 4, 1)]:
            windows += [(0.0, t), (t, T), (t, t + T * 1e-3)]
        for t0, t1 in windows:
            on = _seconds(tl, dev, t0, t1, True, monkeypatch)
            assert on == _seconds(tl, dev, t0, t1, False, monkeypatch), (dev, t0, t1)
    assert left > 0


def test_hand_computed_held_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three gather-bound segments (gather 1 s, compute 0.5 s, TP 0.25 s; a lone chain, no
    anchors): gathers [0, 1], [1, 2] (the first compute's end at 1.5 is its anchor for the
    third), [2, 3]; each compute starts at its gather's end (1, 2, 3), so the ends at 1 and
    2 and the next starts are left out: the gather stream's events are its start at 0 and its
    end at 3, and the seconds are the every-event ones."""
    tl, _ = _lone_chain(((1.0, 0.5, 0.25), (1.0, 0.5, 0.25), (1.0, 0.5, 0.25)))
    zero = sb._key({}, tl.graph.tasks[0].chain[0].gather_proto)  # type: ignore[attr-defined]
    gathers = [e for e in _events(tl, "g0", True, monkeypatch) if e[2] == zero]
    assert gathers == [(0.0, 1, zero), (3.0, -1, zero)]
    every = [e for e in _events(tl, "g0", False, monkeypatch) if e[2] == zero]
    assert len(every) == 6
    assert _left_out(tl, "g0", monkeypatch) == [1.0, 2.0]
    T = tl.makespan_s
    for t0, t1 in [(0.0, T), (1.0, T), (0.0, 2.0), (1.0, 2.0), (0.5, 1.0)]:
        on = _seconds(tl, "g0", t0, t1, True, monkeypatch)
        assert on == _seconds(tl, "g0", t0, t1, False, monkeypatch)
    # the hand count: computes 3 x 0.5 s, TP 3 x 0.25 s, the first gather exposed [0, 1];
    # the later gathers' exposed quarters [1.75, 2] and [2.75, 3] go to the reductions (0.5 s
    # each from the TP piece's end, "1|comm:dp" before "1|comm:zero")
    got = dict(_seconds(tl, "g0", 0.0, 3.75, True, monkeypatch))
    assert got == {"comm:zero": 1.0, "compute": 1.5, "comm:tp": 0.75, "comm:dp": 0.5}


def test_no_compute_transition_keeps_the_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment of no compute and no TP piece (no compute transition at its start) between
    two gather-bound ones: gathers [0, 1], [1, 2], [2, 3]; the second segment's compute
    stream runs nothing at 2, so the pair at 2 stays (the sweep must still add an interval
    there) and only the pair at 1 is left out."""
    tl, _ = _lone_chain(((1.0, 0.5, 0.25), (1.0, 0.0, 0.0), (1.0, 0.5, 0.25)))
    assert _left_out(tl, "g0", monkeypatch) == [1.0]
    T = tl.makespan_s
    for t0, t1 in [(0.0, T), (2.0, T), (0.0, 2.0)]:
        on = _seconds(tl, "g0", t0, t1, True, monkeypatch)
        assert on == _seconds(tl, "g0", t0, t1, False, monkeypatch)


def test_hand_computed_held_reduction_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three segments of gather 0.5 s, compute 0.25 s, TP 0.25 s, each reducing 0.5 s (a lone
    chain): gathers [0, 0.5], [0.5, 1], [1, 1.5], computes from 0.5, 1, 1.5, each segment
    ending at 1, 1.5, 2; reductions [1, 1.5], [1.5, 2], [2, 2.5], the later two each
    starting at its segment's end, as the one before ends: the gather pairs at 0.5 and 1 and
    the reduction pairs at 1.5 and 2 are left out, the seconds as with every event."""
    tl, _ = _lone_chain(((0.5, 0.25, 0.25), (0.5, 0.25, 0.25), (0.5, 0.25, 0.25)))
    assert _left_out(tl, "g0", monkeypatch) == [0.5, 1.0, 1.5, 2.0]
    dp = sb._key({}, tl.graph.tasks[0].chain[0].reduce_proto)  # type: ignore[attr-defined]
    reductions = [e for e in _events(tl, "g0", True, monkeypatch) if e[2] == dp]
    assert reductions == [(1.0, 1, dp), (2.5, -1, dp)]
    T = tl.makespan_s
    for t0, t1 in [(0.0, T), (1.5, T), (0.0, 1.5), (1.5, 2.0), (0.0, 2.0)]:
        on = _seconds(tl, "g0", t0, t1, True, monkeypatch)
        assert on == _seconds(tl, "g0", t0, t1, False, monkeypatch)
