"""``_sweep`` keeps only the running keys (issue 14: the breakdown of short graphs): the same
seconds per class, bit for bit, as the count-scanning version it replaced."""

from __future__ import annotations

import random

from perfmodel.report.step_breakdown import _EVENT_ORDER, _sweep, _sweeps

_CLS = {"0|compute": "compute", "1|comm:dp": "comm:dp", "2|host": "host"}


def _reference(events, cls_of, t0, t1):  # type: ignore[no-untyped-def]
    """The previous ``_sweep``: live keys rebuilt from every count at each interval."""
    active: dict[str, int] = {}
    acc: dict[str, float] = {}
    prev = t0
    for now, d, key in events:
        if now >= t1:
            break
        if now > prev:
            live = [k for k, c in active.items() if c > 0]
            cls = cls_of[min(live)] if live else "bubble"
            acc[cls] = acc.get(cls, 0.0) + (now - prev)
            prev = now
        active[key] = active.get(key, 0) + d
    if t1 > prev:
        live = [k for k, c in active.items() if c > 0]
        cls = cls_of[min(live)] if live else "bubble"
        acc[cls] = acc.get(cls, 0.0) + (t1 - prev)
    return acc


def _events(spans):  # type: ignore[no-untyped-def]
    ev = []
    for s, e, key in spans:
        ev += [(s, 1, key), (e, -1, key)]
    ev.sort(key=_EVENT_ORDER)
    return ev


def test_hand_computed_classes() -> None:
    # compute [0, 2], dp [1, 4] (exposed 2 .. 4), nothing [4, 5], host [5, 6]
    ev = _events([(0.0, 2.0, "0|compute"), (1.0, 4.0, "1|comm:dp"), (5.0, 6.0, "2|host")])
    assert _sweep(ev, _CLS, 0.0, 6.0) == {
        "compute": 2.0,
        "comm:dp": 2.0,
        "bubble": 1.0,
        "host": 1.0,
    }
    # a window starting inside a task: the counts before t0 still count
    assert _sweep(ev, _CLS, 1.5, 3.0) == {"compute": 0.5, "comm:dp": 1.0}


def test_equal_to_the_count_scanning_version_bit_for_bit() -> None:
    rng = random.Random(14)
    for _ in range(200):
        spans = []
        for _ in range(rng.randint(0, 12)):
            s = rng.choice([0.0, 0.5, 1.0, rng.random() * 3])  # ties included
            spans.append((s, s + rng.choice([0.5, rng.random() + 1e-3]), rng.choice(list(_CLS))))
        ev = _events(spans)
        t0, t1 = sorted((rng.random() * 4, rng.random() * 4))
        assert _sweep(ev, _CLS, t0, t1) == _reference(ev, _CLS, t0, t1)
        assert _sweep(ev, _CLS, 0.0, 4.0) == _reference(ev, _CLS, 0.0, 4.0)


def test_the_order_of_events_at_one_time_changes_nothing() -> None:
    """``_EVENT_ORDER`` sorts by time only: the seconds per class are bit for bit those of
    events sorted with ends before starts at each time, whatever the order within a time
    (ties shuffled, many tasks starting and ending at the same instants)."""
    rng = random.Random(27)
    for _ in range(300):
        spans = []
        for _ in range(rng.randint(1, 14)):
            s = rng.choice([0.0, 0.5, 1.0, 1.5, rng.random() * 3])
            spans.append(
                (s, s + rng.choice([0.5, 1.0, rng.random() + 1e-3]), rng.choice(list(_CLS)))
            )
        ev = [x for s, e, key in spans for x in ((s, 1, key), (e, -1, key))]
        paired = sorted(ev, key=lambda x: (x[0], x[1]))
        rng.shuffle(ev)
        ev.sort(key=_EVENT_ORDER)
        t0, t1 = sorted((rng.random() * 4, rng.random() * 4))
        for a, b in ((t0, t1), (0.0, 4.0), (-1.0, 5.0)):
            assert _sweep(ev, _CLS, a, b) == _sweep(paired, _CLS, a, b)
            assert _sweep(ev, _CLS, a, b) == _reference(paired, _CLS, a, b)


def test_one_pass_window_equals_both_sweeps_bit_for_bit() -> None:
    """``_sweeps`` (the periodic breakdown's two sweeps in one pass) returns what the
    count-scanning :func:`_reference` returns for the whole sweep and for the window alone:
    the same seconds, the same classes in the same order (the report's dictionaries keep it),
    windows starting and ending on events, between them and before the first. (Not
    ``_sweep``: that is ``_sweeps(..., -inf, -inf)[0]``, the function under test.)"""
    rng = random.Random(12)
    for _ in range(400):
        spans = []
        for _ in range(rng.randint(0, 14)):
            s = rng.choice([0.0, 0.5, 1.0, 1.5, rng.random() * 3])
            spans.append(
                (s, s + rng.choice([0.5, 1.0, rng.random() + 1e-3]), rng.choice(list(_CLS)))
            )
        ev = _events(spans)
        times = [0.0, 0.5, 1.0, 1.5, 2.0] + [x[0] for x in ev]
        t1 = max(times, default=0.0) + rng.choice([0.0, 0.5])
        w0 = rng.choice([*times, rng.random() * 3])
        w1 = rng.choice([w0, w0 + 0.5, w0 + rng.random(), *(t for t in times if t > w0)])
        if not w1 < t1:
            continue
        got = _sweeps(ev, _CLS, 0.0, t1, w0, w1)
        want = (_reference(ev, _CLS, 0.0, t1), _reference(ev, _CLS, w0, w1))
        assert got == want
        assert [list(x) for x in got] == [list(x) for x in want]  # the classes' order too
