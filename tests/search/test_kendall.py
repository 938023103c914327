"""The plan search's Kendall tau-b and p-value equal scipy.stats.kendalltau's (its default
method), without importing scipy (issue 14: 0.6 s of the compare command)."""

from __future__ import annotations

import math
import random

import pytest

from perfmodel.search.compare import kendall_tau_b


def test_hand_computed_values() -> None:
    # n = 8, two discordant pairs: p = 2 (M(8,0) + M(8,1) + M(8,2)) / 8! = 2 (1 + 7 + 27) / 40320
    tau, p = kendall_tau_b(range(8), [1, 0, 3, 2, 4, 5, 6, 7])
    assert tau == pytest.approx(24 / 28) and p == pytest.approx(70 / 40320)
    assert kendall_tau_b([1, 2, 3], [3, 2, 1]) == pytest.approx((-1.0, 2 / 6))
    assert all(math.isnan(v) for v in kendall_tau_b([1, 1, 1], [1, 2, 3]))
    assert all(math.isnan(v) for v in kendall_tau_b([1], [2]))


def test_equals_scipy() -> None:
    kendalltau = pytest.importorskip("scipy.stats").kendalltau
    rnd = random.Random(0)
    for _ in range(300):
        n = rnd.choice([2, 3, 5, 8, 20, 33, 34, 50])
        hi = rnd.choice([3, 10**6])  # ties (asymptotic p) or none (exact up to 33)
        x = [rnd.randint(0, hi) for _ in range(n)]
        y = [rnd.randint(0, hi) for _ in range(n)]
        ref = kendalltau(x, y)
        got = kendall_tau_b(x, y)
        for a, b in zip(got, (float(ref.statistic), float(ref.pvalue))):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)
