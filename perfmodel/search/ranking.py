"""Ranking quality: does the model order plans the way measurements do?

For a plan search the absolute error matters less than the order. Given predicted and measured
iteration times of several plans of the same job (same model, global batch and GPU count):

- Kendall's tau-b between the two (``scipy.stats.kendalltau``): +1 same order, 0 unrelated;
- whether the measured best plan is among the predicted top ``k``.

:func:`group_ranking` computes both per group and pools them (tau averaged over groups weighted by
their number of pairs; top-k as a fraction of groups).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def kendall_tau(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Kendall's tau-b (``nan`` for fewer than two points or a constant series).

    >>> kendall_tau([1, 2, 3], [10, 20, 30])
    1.0
    >>> kendall_tau([1, 2, 3], [30, 20, 10])
    -1.0
    """
    if len(predicted) != len(measured):
        raise ValueError(f"lengths differ: {len(predicted)} vs {len(measured)}")
    if len(predicted) < 2:
        return math.nan
    from scipy.stats import kendalltau

    return float(kendalltau(predicted, measured).statistic)


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
