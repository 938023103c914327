"""Ranking quality: does the model order plans the way measurements do?

For a plan search the absolute error matters less than the order. Given predicted and measured
iteration times of several plans of the same job (same model, global batch and GPU count):

- Kendall's tau-b between the two (:func:`kendall_tau_b`, equal to ``scipy.stats.kendalltau``): +1
  same order, 0 unrelated;
- whether the measured best plan is among the predicted top ``k``.

:func:`group_ranking` computes both per group and pools them (tau averaged over groups weighted by
their number of pairs; top-k as a fraction of groups).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfmodel.errors import ConfigError


def _tie_sums(values: Sequence[float]) -> tuple[int, int, int]:
    """Over the groups of ``t`` equal values: ``sum t(t-1)/2``, ``sum t(t-1)(t-2)`` and
    ``sum t(t-1)(2t+5)`` (the tie terms of Kendall's variance)."""
    counts = [t for t in Counter(values).values() if t > 1]
    return (
        sum(t * (t - 1) // 2 for t in counts),
        sum(t * (t - 1) * (t - 2) for t in counts),
        sum(t * (t - 1) * (2 * t + 5) for t in counts),
    )


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Kendall's tau-b of two rankings and its two-sided p-value (no correlation as the null).

    ``tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2))`` with ``C``/``D`` the concordant/discordant
    pairs, ``n0 = n(n-1)/2`` and ``n1``, ``n2`` the pairs tied in ``x``, ``y``. The p-value is
    exact without ties when ``n <= 33`` or ``min(D, n0 - D) <= 1``: ``2 P(D' <= min(D, n0 - D))``
    (capped at 1) where ``D'``, the inversions of a uniformly random permutation, has the
    Mahonian distribution ``M(n, k) = sum_{i=0}^{min(k, n-1)} M(n-1, k-i)`` over ``n!``; else
    normal with Kendall's tie-corrected variance of ``S = C - D``, ``m = n(n-1)``:
    ``(m(2n+5) - sum_x t(t-1)(2t+5) - sum_y u(u-1)(2u+5)) / 18 + 2 n1 n2 / m
    + sum_x t(t-1)(t-2) sum_y u(u-1)(u-2) / (9 m (n-2))``. Source: M. G. Kendall, *Rank
    Correlation Methods* (4th ed., 1970), ch. 3-4; the same choices and numbers as
    ``scipy.stats.kendalltau`` (SciPy 1.17, ``method="auto"``), whose 0.6 s import the plan
    search no longer pays (issue 14). ``(nan, nan)`` when fewer than two values or either
    ranking is constant.

    >>> [round(v, 4) for v in kendall_tau_b([1, 2, 3, 4], [1, 2, 4, 3])]  # D = 1: p = 2 (1+3)/4!
    [0.6667, 0.3333]
    """
    n = len(x)
    if n != len(y):
        raise ConfigError(f"rankings of different lengths {n} and {len(y)}", value=(n, len(y)))
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (x[i] - x[j]) * (y[i] - y[j])
            conc += s > 0
            disc += s < 0
    tot = n * (n - 1) // 2
    n1, x0, x1 = _tie_sums(x)
    n2, y0, y1 = _tie_sums(y)
    if n < 2 or n1 == tot or n2 == tot:
        return math.nan, math.nan
    tau = (conc - disc) / math.sqrt(tot - n1) / math.sqrt(tot - n2)
    tau = min(1.0, max(-1.0, tau))  # rounding can step past +-1 (scipy clips the same way)
    if n1 == 0 and n2 == 0 and (n <= 33 or min(disc, tot - disc) <= 1):
        c = min(disc, tot - disc)
        mahonian = [1]  # M(1, k)
        for size in range(2, n + 1):
            width = min(c, size * (size - 1) // 2) + 1
            prefix = [0]
            for v in mahonian:
                prefix.append(prefix[-1] + v)
            mahonian = [
                prefix[min(k, len(mahonian) - 1) + 1] - prefix[max(0, k - size + 1)]
                for k in range(width)
            ]
        return tau, min(1.0, 2.0 * sum(mahonian[: c + 1]) / math.factorial(n))
    m = n * (n - 1)
    var = (m * (2 * n + 5) - x1 - y1) / 18.0 + 2.0 * n1 * n2 / m
    if n > 2:
        var += x0 * y0 / (9.0 * m * (n - 2))
    z = (conc - disc) / math.sqrt(var)
    return tau, math.erfc(abs(z) / math.sqrt(2.0))


def kendall_tau(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Kendall's tau-b (``nan`` for fewer than two points or a constant series):
    :func:`kendall_tau_b` without its p-value.

    >>> kendall_tau([1, 2, 3], [10, 20, 30])
    1.0
    >>> kendall_tau([1, 2, 3], [30, 20, 10])
    -1.0
    """
    if len(predicted) != len(measured):
        raise ValueError(f"lengths differ: {len(predicted)} vs {len(measured)}")
    return kendall_tau_b(predicted, measured)[0]


def best_in_top_k(predicted: Sequence[float], measured: Sequence[float], k: int = 3) -> bool:
    """Is the plan with the lowest measured time among the ``k`` lowest predicted times?

    >>> best_in_top_k([3.0, 1.0, 2.0, 4.0], [1.0, 2.0, 3.0, 4.0], k=2)
    False
    >>> best_in_top_k([3.0, 1.0, 2.0, 4.0], [1.0, 2.0, 3.0, 4.0], k=3)
    True
    """
    if not measured:
        raise ValueError("no points")
    best = min(range(len(measured)), key=lambda i: measured[i])
    order = sorted(range(len(predicted)), key=lambda i: predicted[i])
    return best in order[:k]


@dataclass(frozen=True)
class GroupRanking:
    """Ranking quality of one group of plans."""

    group: Hashable
    n: int
    tau: float
    best_in_top_k: bool
    predicted_best_measured_ratio: float  # measured time of the predicted best / measured best


@dataclass(frozen=True)
class RankingSummary:
    """Pooled ranking quality over groups with at least ``min_plans`` plans."""

    groups: tuple[GroupRanking, ...]
    k: int
    weighted_tau: float
    top_k_fraction: float
    median_regret: (
        float  # median over groups of (measured time of predicted best / measured best - 1)
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": len(self.groups),
            "plans": sum(g.n for g in self.groups),
            "k": self.k,
            "weighted_tau": self.weighted_tau,
            "top_k_fraction": self.top_k_fraction,
            "median_regret": self.median_regret,
        }


def group_ranking(
    rows: Sequence[Mapping[str, Any]],
    *,
    group_key: str = "group",
    predicted_key: str = "predicted",
    measured_key: str = "measured",
    k: int = 3,
    min_plans: int = 3,
) -> RankingSummary:
    """Per-group tau and top-k, pooled (tau weighted by the group's pair count ``n(n-1)/2``)."""
    import numpy as np

    groups: dict[Hashable, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[group_key], []).append(r)
    out: list[GroupRanking] = []
    for g, rs in groups.items():
        if len(rs) < min_plans:
            continue
        p = [float(r[predicted_key]) for r in rs]
        m = [float(r[measured_key]) for r in rs]
        best_pred = min(range(len(p)), key=lambda i: p[i])
        out.append(
            GroupRanking(
                g, len(rs), kendall_tau(p, m), best_in_top_k(p, m, k), m[best_pred] / min(m)
            )
        )
    weights = [g.n * (g.n - 1) / 2 for g in out if not math.isnan(g.tau)]
    taus = [g.tau for g in out if not math.isnan(g.tau)]
    wtau = float(np.average(taus, weights=weights)) if taus else math.nan
    frac = sum(g.best_in_top_k for g in out) / len(out) if out else math.nan
    regret = (
        float(np.median([g.predicted_best_measured_ratio - 1 for g in out])) if out else math.nan
    )
    return RankingSummary(tuple(out), k, wtau, frac, regret)
