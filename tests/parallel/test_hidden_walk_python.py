"""The hidden walks' plain-Python ``_lead`` (issue 27, session 25): it keeps its maximum with a
comparison instead of the ``max`` builtin and must give what the ``max`` form gives, bit for bit.
(The walks' expert/context refusal is ``LoweringShortcuts._exchanges``:
``tests/parallel/test_chunk_exchanges.py``.)"""

from __future__ import annotations

import random
from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.parallel.lower_hidden import _lead


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
    got, want = _lead(on_stream, red), _lead_with_max(on_stream, red)
    assert [repr(x) for x in got] == [repr(x) for x in want]
