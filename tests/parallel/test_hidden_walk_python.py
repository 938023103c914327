"""The hidden walks' plain-Python forms (issue 27, session 25): ``_lead`` keeps its maximum with
a comparison instead of the ``max`` builtin, and the walks' refusal
(:func:`~perfmodel.parallel.lower_hidden._ep_cp_or_sync`) is found once per chunk
(``HiddenCollectives._refused``). Both must give what the direct forms give, bit for bit."""

from __future__ import annotations

import random
from itertools import accumulate
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.parallel import lower_hidden
from perfmodel.parallel.lower_hidden import HiddenCollectives, _lead
from perfmodel.parallel.lowering import Chunk, Segment


def _lead_with_max(on_stream: list[float], red: list[float]) -> tuple[float, float]:
    """``_lead`` as it was written before (session 24): ``best = max(best, f + tails[j])``, the
    suffix sums ``0.0 + R_n + ... + R_j`` in that order."""
    tails = list(accumulate(reversed(red), initial=0.0))[:0:-1]
    suffix = tails[0] if tails else 0.0
    f = best = 0.0
    for j, d in enumerate(on_stream):
        f += d
        best = max(best, f + tails[j])
    return min(max(0.0, best - suffix), f), suffix


_seconds = st.one_of(
    st.floats(0.0, 10.0, allow_nan=False), st.sampled_from([0.0, -0.0, 1e-300, 0.1, 0.2, 0.3])
)


@settings(max_examples=400, deadline=None)
@given(pairs=st.lists(st.tuples(_seconds, _seconds), min_size=1, max_size=40))
def test_lead_is_the_max_form(pairs: list[tuple[float, float]]) -> None:
    """Property: the same ``(kappa, sum R)`` floats as the ``max`` form, ties and signed
    zeros included (the builtin keeps the first of equal values, as ``x > best`` does)."""
    on_stream, red = [p[0] for p in pairs], [p[1] for p in pairs]
    got, want = _lead(on_stream, red), _lead_with_max(on_stream, red)
    assert got == want
    assert [repr(x) for x in got] == [repr(x) for x in want]


def test_lead_is_the_max_form_on_repeated_buckets() -> None:
    """A stack's bucket pattern (a few values repeated, many equal candidates for the
    maximum), as a GPT-3 175B stage's hidden walk sums it."""
    rng = random.Random(7)
    pattern = [(rng.uniform(1e-4, 3e-3), rng.uniform(1e-4, 4e-3)) for _ in range(4)]
    pairs = [pattern[i % 4] for i in range(145)]
    on_stream, red = [p[0] for p in pairs], [p[1] for p in pairs]
    assert _lead(on_stream, red) == _lead_with_max(on_stream, red)


def _seg(ep: bool, sync: float) -> Segment:
    comm = (object(),) if ep else ()
    return Segment((0,), 1.0, 1.0, 0.0, 0.0, 0.0, 1, 1.0, 1.0, ep_cp=comm, host_sync_s=sync)  # type: ignore[arg-type]


def _chunk(*flags: tuple[bool, float]) -> Chunk:
    return Chunk(tuple(_seg(ep, sync) for ep, sync in flags), 1.0, 1.0, 1)


@pytest.mark.parametrize(
    "flags",
    [
        ((False, 0.0), (False, 0.0), (False, 0.0)),
        ((False, 0.0), (True, 0.0), (False, 0.0)),
        ((False, 0.0), (False, 0.0), (False, 2e-6)),
    ],
)
def test_refused_is_the_pass_once_per_chunk(
    flags: tuple[tuple[bool, float], ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_refused`` answers ``_ep_cp_or_sync`` of the chunk's segments, passes over them once
    per lowering (the memo), and keeps one answer per chunk, not one for all."""
    low = SimpleNamespace(_rows={})
    clean = _chunk(*((False, 0.0) for _ in flags))
    ch = _chunk(*flags)
    passes: list[int] = []
    direct = lower_hidden._ep_cp_or_sync

    def counted(segs: tuple[Segment, ...]) -> bool:
        passes.append(len(segs))
        return direct(segs)

    monkeypatch.setattr(lower_hidden, "_ep_cp_or_sync", counted)
    assert HiddenCollectives._refused(low, clean) is False  # type: ignore[arg-type]
    for _ in range(3):  # the forward gather walk, the hidden walk, again
        assert HiddenCollectives._refused(low, ch) is direct(ch.segments)  # type: ignore[arg-type]
    assert HiddenCollectives._refused(low, clean) is False  # type: ignore[arg-type]
    assert passes == [len(flags), len(flags)]  # one pass per chunk
