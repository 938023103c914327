"""Prediction intervals from the residual record: locally standardised split conformal
prediction, calibrated one publication at a time.

The method
----------
A prediction ``y_hat`` of a speed (throughput; a time is its inverse) has the speed residual
``r = log(y_hat / y)`` on a validation row (:attr:`ResidualRow.speed_residual`). For a new
question with features ``x``:

1. **The rows like it (the pool).** :data:`LEVELS` lists, per quantity, feature sets from the
   most specific to none (GPU architecture, software preset, precision, model kind and size
   class, interconnect, then fewer). The pool is the rows matching ``x`` on the first level that has
   rows from at least :data:`MIN_SOURCES` publications and an effective size of at least
   :data:`MIN_EFFECTIVE_ROWS` (:meth:`RecordIndex.pool`); past every level, the quantity's
   rows, and past those, every row of the record. A
   nearest-neighbour localisation by exact feature matches (Lei, G'Sell, Rinaldo, Tibshirani
   and Wasserman 2018, "Distribution-free predictive inference for regression", JASA 113(523),
   section 5.2, locally weighted conformal bands; Guan 2023, "Localized conformal prediction: a
   generalized inference framework for conformal prediction", Biometrika 110(1)).
2. **Every publication alike.** Rows of one publication share their setup and their errors, so
   every source of a pool weighs the same, its weight split evenly among its rows
   (:func:`source_weights`: the pooled CDF of Dunn, Wasserman and Ramdas 2023,
   "Distribution-free prediction sets for two-layer hierarchical models", JASA 118(544), for a
   question from a new group).
3. **The pool's band.** Its weighted 10 % and 90 % quantiles ``b_lo(x)``, ``b_hi(x)`` of the
   residual (:data:`BAND`), a local quantile regression by nearest neighbours, and its weighted
   median (the model's bias for runs like this one; :func:`pool_stats`).
4. **Calibration, one publication held out at a time.** Every row ``i`` of the record gets the
   two scores ``e_lo = b_lo - r_i`` and ``e_hi = r_i - b_hi`` of the band of its pool *without
   the rows of its own publication* (:meth:`RecordIndex.scored`): how far a new publication's
   row lands beyond what the others say about runs like it (negative inside the band). These
   are the asymmetric scores of conformalized quantile regression (Romano, Patterson and
   Candes 2019, "Conformalized quantile regression", NeurIPS, section 3 and Theorem 2) in the
   leave-one-group-out form of cross-conformal prediction (Vovk 2015, "Cross-conformal
   predictors", Ann. Math. Artif. Intell. 74; Barber, Candes, Ramdas and Tibshirani 2021,
   "Predictive inference with the jackknife+", Ann. Stat. 49(1)).
5. **The interval.** With every row's scores weighted by publication and ``K`` publications,
   the margins at level ``1 - alpha`` are ``q_lo = Q_lo((1 - alpha/2)(1 + 1/K))`` and
   ``q_hi = Q_hi((1 - alpha/2)(1 + 1/K))`` (:func:`calibration_bounds`; split conformal's
   finite-sample rank ``ceil((K + 1)(1 - alpha/2))`` of Vovk, Gammerman and Shafer 2005,
   "Algorithmic Learning in a Random World", ch. 2, and Lei et al. 2018, section 2.2, counted
   in publications since a new question is a new publication; one tail at ``alpha/2`` each
   side). The residual lies in ``[b_lo - q_lo, b_hi + q_hi]``: a speed ``y_hat`` in
   ``[y_hat exp(-r_hi), y_hat exp(-r_lo)]``, a time ``t_hat`` in
   ``[t_hat exp(r_lo), t_hat exp(r_hi)]``. Where ``K`` is too small for the level (a 90 % range
   needs ``K >= 19``), the largest score stands in and the interval says so.

How well it covers is measured, not assumed: :mod:`perfmodel.intervals.coverage` holds every
publication out in turn (its rows' intervals, and every other row's score, computed without it)
and counts how often its rows fall inside; the README's coverage table shows it.

Nothing here is fitted to a row: :data:`LEVELS`, :data:`MIN_SOURCES`,
:data:`MIN_EFFECTIVE_ROWS`, :data:`BAND` and the weights are the method's design, stated once;
the residuals and scores are generated from the validation tier. The designs compared before this one (and
their leave-one-source-out coverage) are listed in ``docs/intervals.md``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.intervals import DEFAULT_LEVEL
from perfmodel.intervals.features import Features, Quantity
from perfmodel.intervals.record import ResidualRow

#: A pool needs rows from at least this many publications: one publication's rows share one
#: setup, so alone they say how that setup errs, not how a new one does.
MIN_SOURCES = 2

#: ... and at least this effective size (Kish, of the publication weights): the pool's 10 % and
#: 90 % quantiles (its band) need ten rows' worth of weight.
MIN_EFFECTIVE_ROWS = 10.0

#: The quantiles of a pool's band (step 3): 10 % and 90 %, the default interval's own tails, so
#: the calibrated margins of the default level are small corrections; the same band serves
#: every level (the scores do not depend on the level asked).
BAND = (0.1, 0.9)

_STEP_LEVELS = (
    ("architecture", "software", "precision", "model_kind", "size_class", "interconnect"),
    ("architecture", "family", "model_kind", "size_class", "interconnect"),
    ("architecture", "family", "model_kind", "size_class"),
    ("architecture", "model_kind", "size_class"),
    ("model_kind", "size_class"),
    ("architecture",),
    ("model_kind",),
)

#: Per quantity, the feature sets a pool's rows share with the question, most specific first.
#: Step: the kind of model and its size class (:func:`~perfmodel.intervals.features.size_class`:
#: under 1B parameters a step is small kernels and host loop, from 1B on large GEMMs and the
#: plan's collectives) are kept throughout the levels that match the GPU architecture (achieved
#: GEMM and attention rates per GPU), the stack (its kernels and host loop), the precision and
#: the interconnect (communication); where no other publication ran this kind and size on this
#: architecture, the same kind and size on any GPU comes before the architecture's rows of
#: every size (a 7B model on A100 errs like an 8B one on H100, not like BERT-base on A100). A
#: speedup is a ratio of two steps: the same features. Collectives: interconnect, operation
#: and message size (latency- or bandwidth-bound) first. Kernels: the kind of kernel.
LEVELS: Mapping[Quantity, tuple[tuple[str, ...], ...]] = {
    Quantity.STEP: _STEP_LEVELS,
    Quantity.SPEEDUP: _STEP_LEVELS,
    Quantity.COLLECTIVE: (
        ("architecture", "interconnect", "op", "message_band"),
        ("interconnect", "op", "message_band"),
        ("interconnect", "message_band"),
        ("interconnect",),
    ),
    Quantity.KERNEL: (
        ("architecture", "kernel", "precision"),
        ("architecture", "kernel"),
        ("kernel",),
    ),
}

#: From this level on (an index of :data:`LEVELS`) a pool no longer shares what matters most
#: with the question: the interval says "few validation runs like this one".
FEW_FROM: Mapping[Quantity, int] = {
    Quantity.STEP: 4,  # not the architecture's rows of this kind and size
    Quantity.SPEEDUP: 4,
    Quantity.COLLECTIVE: 3,  # the interconnect alone, or not even that
    Quantity.KERNEL: 2,  # the kind of kernel alone
}

#: The quantities whose rows' scores calibrate every interval's margins (step 5): the validation
#: rows themselves. A speedup row is a pair of step rows, so its publication already speaks
#: through them; speedup intervals take the same margins (measured conservative: the
#: coverage table's speedup line).
CALIBRATED = (Quantity.STEP, Quantity.COLLECTIVE, Quantity.KERNEL)

_KIND_NAMES = {"cnn": "CNNs", "transformer": "dense transformers", "moe": "MoE", "mlp": "MLPs"}

#: How a basis names each feature of a level.
_LABELS: Mapping[str, Callable[[Any], str]] = {
    "architecture": lambda f: f.architecture,
    "software": lambda f: f.software,
    "family": lambda f: f"{f.family} stacks",
    "precision": lambda f: f.precision,
    "model_kind": lambda f: _KIND_NAMES.get(f.model_kind, f.model_kind),
    "size_class": lambda f: f"{f.size_class} parameters",
    "interconnect": lambda f: f.interconnect.value,
    "op": lambda f: f.op,
    "message_band": lambda f: f"{f.message_band} messages",
    "kernel": lambda f: f.kernel,
}


# --------------------------------------------------------------------------- quantiles


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The ``q``-quantile of a weighted empirical distribution: the smallest value ``v`` with
    ``sum(w_i for v_i <= v) >= q sum(w)`` (the inverse of the weighted CDF; with equal weights
    the ``ceil(q n)``-th smallest value, the order statistic of Lei et al. 2018). ``q <= 0``
    gives ``-inf`` and ``q > 1`` gives ``inf`` (a bound the values cannot give).

    >>> weighted_quantile([3.0, 1.0, 2.0, 4.0], [1, 1, 1, 1], 0.5)
    2.0
    >>> weighted_quantile([1.0, 2.0], [3.0, 1.0], 0.75)
    1.0
    >>> weighted_quantile([1.0, 2.0], [1, 1], 1.01)
    inf
    """
    if q <= 0:
        return -math.inf
    if q > 1:
        return math.inf
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        raise ConfigError("weighted_quantile: no values or weights summing to zero", value=q)
    target = q * total * (1 - 1e-12)  # a cumulative sum equal to the target counts as reached
    cum = 0.0
    for v, w in pairs:
        cum += w
        if cum >= target:
            return float(v)
    return float(pairs[-1][0])


def source_weights(rows: Sequence[ResidualRow]) -> list[float]:
    """Each row's weight, ``1 / (K n_s)`` for a row of a source with ``n_s`` of the rows among
    ``K`` sources: every publication weighs alike, the weights sum to 1.

    >>> from perfmodel.intervals.features import KernelFeatures
    >>> f = KernelFeatures("V100", "Volta", "gemm", "fp16")
    >>> rows = [ResidualRow(i, "f", s, Quantity.KERNEL, "g", "time", -1, 1.0, 1.0, f)
    ...         for i, s in (("a", "A"), ("b", "A"), ("c", "B"))]
    >>> source_weights(rows)
    [0.25, 0.25, 0.5]
    """
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        count[r.source] += 1
    k = len(count)
    return [1.0 / (k * count[r.source]) for r in rows]


def effective_size(weights: Sequence[float]) -> float:
    """Kish's effective sample size ``(sum w)^2 / sum w^2``."""
    return sum(weights) ** 2 / sum(w * w for w in weights)


# --------------------------------------------------------------------------- pools


@dataclass(frozen=True)
class Pool:
    """The rows an interval rests on.

    Attributes
    ----------
    rows
        The pool's residual rows.
    matched
        The features they share with the question (empty: every row of the quantity).
    level_index
        Which level of :data:`LEVELS` (0 the most specific); ``len(LEVELS[q])`` for every row
        of the quantity, one more for every row of the record (too few of the quantity's).
    labels
        Human names of the matched values (``("Hopper", "torchtitan")``).
    center, band_lo, band_hi
        :func:`pool_stats` of the rows (log units).
    """

    rows: tuple[ResidualRow, ...]
    matched: tuple[str, ...]
    level_index: int
    labels: tuple[str, ...]
    center: float
    band_lo: float
    band_hi: float

    @property
    def sources(self) -> int:
        return len({r.source for r in self.rows})


def pool_stats(rows: Sequence[ResidualRow]) -> tuple[float, float, float]:
    """``(median, b_lo, b_hi)``: the weighted median speed residual of ``rows`` and their
    weighted :data:`BAND` quantiles (step 3; every publication weighs alike).

    >>> from perfmodel.intervals.features import KernelFeatures
    >>> f = KernelFeatures("V100", "Volta", "gemm", "fp16")
    >>> def row(i, s, r):
    ...     return ResidualRow(i, "f", s, Quantity.KERNEL, "g", "rate", 1, math.exp(r), 1.0, f)
    >>> rows = [row("a", "A", 0.1), row("b", "A", 0.3), row("c", "B", -0.2)]
    >>> [round(x, 3) for x in pool_stats(rows)]  # weights 1/4, 1/4, 1/2
    [-0.2, -0.2, 0.3]
    """
    res = [r.speed_residual for r in rows]
    w = source_weights(rows)
    return (
        weighted_quantile(res, w, 0.5),
        weighted_quantile(res, w, BAND[0]),
        weighted_quantile(res, w, BAND[1]),
    )


def _enough(rows: Sequence[ResidualRow]) -> bool:
    return (
        len({r.source for r in rows}) >= MIN_SOURCES
        and effective_size(source_weights(rows)) >= MIN_EFFECTIVE_ROWS
    )


class RecordIndex:
    """The record's rows indexed by quantity and by every level's feature values, so a pool
    is a dictionary look-up (and a filter of the sources held out), not a scan."""

    def __init__(self, rows: Iterable[ResidualRow]) -> None:
        self.rows: tuple[ResidualRow, ...] = tuple(rows)
        self._own: dict[Quantity, list[ResidualRow]] = defaultdict(list)
        for r in self.rows:
            self._own[r.quantity].append(r)
        # (quantity, level) -> feature values -> rows; built on first use of that level (a
        # question looks at one quantity's first few levels)
        self._by: dict[tuple[Quantity, int], dict[tuple[Any, ...], list[ResidualRow]]] = {}
        self._pools: dict[tuple[Quantity, Features, frozenset[str]], Pool] = {}
        self._bounds: dict[tuple[float, frozenset[str]], tuple[float, float, int, bool]] = {}

    def _level(self, quantity: Quantity, i: int) -> dict[tuple[Any, ...], list[ResidualRow]]:
        table = self._by.get((quantity, i))
        if table is None:
            names = LEVELS[quantity][i]
            table = self._by[(quantity, i)] = {}
            for r in self.of(quantity):
                table.setdefault(_key(r.features, names), []).append(r)
        return table

    def of(self, quantity: Quantity) -> list[ResidualRow]:
        """Every row of ``quantity``."""
        return self._own.get(quantity, [])

    def pool(
        self, features: Features, quantity: Quantity, exclude: frozenset[str] = frozenset()
    ) -> Pool:
        """The pool of a question (step 1), without the rows of the sources in ``exclude``;
        cached."""
        key = (quantity, features, exclude)
        hit = self._pools.get(key)
        if hit is not None:
            return hit
        pool = None
        for i, names in enumerate(LEVELS[quantity]):
            found = self._level(quantity, i).get(_key(features, names), [])
            rows = [r for r in found if r.source not in exclude] if exclude else found
            if rows and _enough(rows):
                labels = tuple(_LABELS[n](features) for n in names)
                pool = Pool(tuple(rows), names, i, labels, *pool_stats(rows))
                break
        if pool is None:  # the quantity's rows; too few of them: every row of the record
            n = len(LEVELS[quantity])
            rows = [r for r in self.of(quantity) if r.source not in exclude]
            if not (rows and _enough(rows)):
                rows, n = [r for r in self.rows if r.source not in exclude], n + 1
            if not rows:
                raise ConfigError(
                    "the residual record holds no row to bound this answer",
                    value=quantity.value,
                    where="residual record",
                )
            pool = Pool(tuple(rows), (), n, (), *pool_stats(rows))
        self._pools[key] = pool
        return pool

    def scored(
        self, exclude: frozenset[str] = frozenset(), *, stored: bool = True
    ) -> list[tuple[ResidualRow, float, float]]:
        """Every row outside ``exclude`` with its scores ``(e_lo, e_hi)`` (step 4): the stored
        scores where nothing is held out (and ``stored``), else computed, the pools also
        leaving ``exclude`` out."""
        if stored and not exclude and all(r.score is not None for r in self.rows):
            return [(r, *r.score) for r in self.rows]  # type: ignore[misc]
        out = []
        for r in self.rows:
            if r.source in exclude:
                continue
            p = self.pool(r.features, r.quantity, exclude | {r.source})
            e = r.speed_residual
            out.append((r, p.band_lo - e, e - p.band_hi))
        return out

    def bounds(
        self, level: float, exclude: frozenset[str] = frozenset()
    ) -> tuple[float, float, int, bool]:
        """:func:`calibration_bounds` of the validation rows' scores at ``level`` (the
        :data:`CALIBRATED` quantities: speedup rows are pairs of step rows, not rows of their
        own); cached."""
        key = (level, exclude)
        hit = self._bounds.get(key)
        if hit is None:
            scored = [x for x in self.scored(exclude) if x[0].quantity in CALIBRATED]
            hit = self._bounds[key] = calibration_bounds(
                [(lo, hi) for _, lo, hi in scored], [r for r, _, _ in scored], level
            )
        return hit


def _key(features: Any, names: Sequence[str]) -> tuple[Any, ...]:
    return tuple(getattr(features, n) for n in names)


def calibration_bounds(
    scores: Sequence[tuple[float, float]], rows: Sequence[ResidualRow], level: float
) -> tuple[float, float, int, bool]:
    """``(q_lo, q_hi, K, bounded)``: the conformal margins of the scores ``(e_lo, e_hi)`` at
    ``level`` (step 5), weighted by publication, ``K`` the publications among ``rows``.
    ``bounded`` is ``False`` where ``K`` is too small for the level (``(1 - alpha/2)(1 + 1/K)
    > 1``): the largest scores stand in (the widest the record can give).

    >>> from perfmodel.intervals.features import KernelFeatures
    >>> f = KernelFeatures("V100", "Volta", "gemm", "fp16")
    >>> rows = [ResidualRow(str(i), "f", str(i), Quantity.KERNEL, "g", "rate", 1, 1.0, 1.0, f)
    ...         for i in range(19)]
    >>> calibration_bounds([(float(i), -float(i)) for i in range(19)], rows, 0.8)
    (17.0, -1.0, 19, True)
    """
    check_level(level)
    w = source_weights(rows)
    k = len({r.source for r in rows})
    q = (1.0 - (1.0 - level) / 2.0) * (1 + 1 / k)
    lo = weighted_quantile([s[0] for s in scores], w, q)
    hi = weighted_quantile([s[1] for s in scores], w, q)
    bounded = math.isfinite(lo) and math.isfinite(hi)
    if not bounded:
        lo, hi = max(s[0] for s in scores), max(s[1] for s in scores)
    return lo, hi, k, bounded


def check_level(level: float) -> float:
    """``level`` if it is an interval level (strictly between 0 and 1), else a ConfigError
    naming the argument ``level`` (a Python caller's: the command line's ``--interval`` is
    checked when parsed, :func:`perfmodel.cli._types.interval_level`)."""
    if not (isinstance(level, int | float) and not isinstance(level, bool) and 0 < level < 1):
        raise ConfigError(
            f"level={level!r}: an interval level is between 0 and 1 (e.g. 0.8 for an 80% range)",
            value=level,
            where="level",
        )
    return float(level)


def with_scores(rows: Sequence[ResidualRow]) -> tuple[ResidualRow, ...]:
    """``rows`` with every row's calibration score set (step 4)."""
    index = RecordIndex(rows)
    return tuple(replace(r, score=(lo, hi)) for r, lo, hi in index.scored(stored=False))


# --------------------------------------------------------------------------- the interval


@dataclass(frozen=True)
class ResidualInterval:
    """The interval of a speed residual ``log(predicted speed / true speed)``.

    Attributes
    ----------
    level
        The interval's level (``0.8``).
    r_lo, r_hi
        Its bounds.
    pool
        The rows like the question (their centre is the model's bias for them).
    basis
        What the interval rests on, in words (:func:`describe_basis`).
    warning
        ``"few validation runs like this one"`` or ``"outside the validated range: ..."``, or
        ``""``.
    quantity
        The kind of answer.
    sources
        Publications whose scores calibrated the bounds.
    bounded
        ``False`` where the record has too few publications for the level (the widest
        interval it gives stands in).
    kind
        Where the pool is of other kinds of model than the question's (:func:`own_kind`): the
        record's rows of the question's kind, which widened the interval; ``None`` otherwise.
    capped
        Where a physical bound cut one end (:func:`perfmodel.intervals.answers.step_interval`:
        no step runs faster than 100 % MFU), what it was, in words; ``""`` for none.
    """

    level: float
    r_lo: float
    r_hi: float
    pool: Pool
    basis: str
    warning: str
    quantity: Quantity
    sources: int
    bounded: bool = True
    capped: str = ""
    kind: KindRows | None = None

    def speed(self, value: float) -> tuple[float, float]:
        """``(low, high)`` of a predicted speed (throughput, tokens/s, bandwidth, FLOP/s)."""
        return value * math.exp(-self.r_hi), value * math.exp(-self.r_lo)

    def time(self, value: float) -> tuple[float, float]:
        """``(low, high)`` of a predicted time."""
        return value * math.exp(self.r_lo), value * math.exp(self.r_hi)

    @property
    def bias(self) -> float:
        """The pool's median speed residual (positive: runs like this are predicted too fast)."""
        return self.pool.center

    @property
    def outside(self) -> bool:
        """No validation row on this GPU architecture (or of this kind of answer)."""
        return self.warning.startswith("outside")


@dataclass(frozen=True)
class KindRows:
    """The record's step rows of a question's model kind when its pool is of other kinds
    (:func:`own_kind`).

    Attributes
    ----------
    name
        The kind in words (``"MoE"``).
    rows, sources
        How many rows, from how many publications (0 rows: the record has none of this kind).
    center, band_lo, band_hi
        :func:`pool_stats` of the rows (``nan`` without rows).
    in_pool
        How many of them are in the pool (it is *mostly* of other kinds where some are).
    """

    name: str
    rows: int
    sources: int
    center: float
    band_lo: float
    band_hi: float
    in_pool: int = 0

    @property
    def others(self) -> str:
        """``"other kinds of model"``, or ``"mostly other kinds of model"``."""
        return ("mostly " if self.in_pool else "") + "other kinds of model"

    def describe(self) -> str:
        """``"the record's 18 MoE runs (1 source)"`` or ``"no published run of MoE"``."""
        if not self.rows:
            return f"no published run of {self.name}"
        src = f"{self.sources} source{'s' if self.sources != 1 else ''}"
        return f"the record's {self.rows} {self.name} runs ({src})"


def own_kind(
    features: Features,
    quantity: Quantity,
    pool: Pool,
    index: RecordIndex,
    exclude: frozenset[str] = frozenset(),
) -> KindRows | None:
    """The question's own kind of model where its pool does not share it (audit15 item 9): a
    pool that fell back to the architecture's rows, or to every row, speaks of dense models
    when the question is a mixture of experts. ``None`` where the pool matched the kind (or
    the question has none: collectives, kernels). Otherwise the record's rows of that
    kind (of the question's quantity: a speedup's are speedup rows) outside ``exclude``,
    however few: too few publications to be a pool of their own
    (:data:`MIN_SOURCES`, :data:`MIN_EFFECTIVE_ROWS`), but what the record knows of the kind.

    :func:`interval` widens a step interval to hold them; a speedup interval only says when
    the record has no speedup of the kind at all (no MoE pair is in the record). Widening the
    speedup intervals too was measured: held out, ten transformer speedup pairs fall back to
    their architecture's pool and the speedup line of the coverage table goes from x1.51 to
    x1.59 at the same 99 % (an already conservative line, now also capped at linear by
    :func:`perfmodel.intervals.answers.speedup_interval`), so it was left out."""
    kind = getattr(features, "model_kind", None)
    if kind is None or "model_kind" in pool.matched:
        return None
    if pool.rows and all(getattr(r.features, "model_kind", None) == kind for r in pool.rows):
        return None  # every row of the pool is of the question's kind anyway
    rows = [
        r
        for r in index.of(quantity)
        if getattr(r.features, "model_kind", None) == kind and r.source not in exclude
    ]
    name = _KIND_NAMES.get(kind, kind)
    if not rows:
        return KindRows(name, 0, 0, math.nan, math.nan, math.nan)
    in_pool = sum(getattr(r.features, "model_kind", None) == kind for r in pool.rows)
    return KindRows(name, len(rows), len({r.source for r in rows}), *pool_stats(rows), in_pool)


def interval(
    features: Features,
    quantity: Quantity,
    index: RecordIndex,
    level: float = DEFAULT_LEVEL,
    *,
    exclude: frozenset[str] = frozenset(),
) -> ResidualInterval:
    """The interval of a question's speed residual (the module docstring); ``exclude`` leaves
    those publications out of the pool and the calibration (leave-one-source-out coverage)."""
    level = check_level(level)
    pool = index.pool(features, quantity, exclude)
    q_lo, q_hi, k, bounded = index.bounds(level, exclude)
    # Negative margins (a level far under the band's 80 %) can cross the bounds; each bound
    # stops at the pool's median instead, so the interval always holds the median and a
    # higher level's interval holds a lower level's (the margins grow with the level).
    lo = min(pool.band_lo - q_lo, pool.center)
    hi = max(pool.band_hi + q_hi, pool.center)
    warning = _warning(features, quantity, index, pool, exclude)
    basis = describe_basis(pool, quantity)
    # A pool of other kinds of model (audit15 item 9): the interval also holds what the
    # question's own kind's rows say, with the same margins (their band widened as the pool's
    # is), so a kind the pool does not know is not given the other kinds' narrower range.
    kind = own_kind(features, quantity, pool, index, exclude)
    if kind is not None and kind.rows and quantity is not Quantity.STEP:
        kind = None  # a speedup pool is widened by nothing but its own rows (own_kind)
    if kind is not None:
        if kind.rows:
            lo = min(lo, kind.band_lo - q_lo, kind.center)
            hi = max(hi, kind.band_hi + q_hi, kind.center)
        note = f"the range rests on {kind.others} than {kind.name}" + (
            f", widened to hold {kind.describe()}" if kind.rows else f" ({kind.describe()})"
        )
        warning = f"{warning}; {note}" if warning else note
    return ResidualInterval(level, lo, hi, pool, basis, warning, quantity, k, bounded, kind=kind)


def _warning(
    features: Features,
    quantity: Quantity,
    index: RecordIndex,
    pool: Pool,
    exclude: frozenset[str],
) -> str:
    """ "outside the validated range" when no row of the quantity is on the question's GPU
    architecture; else "no published run on <GPU> itself ..." for a datasheet-only GPU
    (:attr:`~perfmodel.hardware.gpus.GPUSpec.datasheet_only`: H20, RTX 5090) with no row of its
    own, whose range is its architecture's (:func:`_datasheet_only_gpu`), and "few validation
    runs like this one" from :data:`FEW_FROM` on, joined by ``"; "``; else ``""``."""
    arch = getattr(features, "architecture", None)
    own = [r for r in index.of(quantity) if r.source not in exclude]
    if arch is not None and not any(r.features.architecture == arch for r in own):
        gpu = getattr(features, "gpu", "this GPU")
        return f"outside the validated range: no published run on {gpu} ({arch})"
    parts = []
    gpu = getattr(features, "gpu", None)
    if (
        gpu
        and arch is not None
        and _datasheet_only_gpu(gpu)
        and not any(getattr(r.features, "gpu", None) == gpu for r in own)
    ):
        parts.append(
            f"no published run on {gpu} itself (datasheet-only figures): the range rests on "
            f"other {arch} GPUs' runs, which do not know its balance of compute, memory and links"
        )
    if pool.level_index >= FEW_FROM[quantity]:
        parts.append("few validation runs like this one")
    return "; ".join(parts)


def _datasheet_only_gpu(name: str) -> bool:
    """Whether the catalogue's GPU ``name`` is datasheet only (``False`` for a name it does not
    hold: a custom GPU is the user's own figures)."""
    from perfmodel.errors import PerfModelError
    from perfmodel.hardware.gpus import get_gpu

    try:
        return bool(get_gpu(name).datasheet_only)
    except PerfModelError:
        return False


def describe_basis(pool: Pool, quantity: Quantity) -> str:
    """What an interval rests on: ``"37 published runs (3 sources) like this one (Hopper,
    torchtitan, bf16, dense transformers, NVSwitch)"``."""
    what = {
        Quantity.STEP: "published runs",
        Quantity.SPEEDUP: "published speedups",
        Quantity.COLLECTIVE: "published collective measurements",
        Quantity.KERNEL: "published kernel measurements",
    }[quantity]
    n, k = len(pool.rows), pool.sources
    src = f"{k} source{'s' if k != 1 else ''}"
    if pool.level_index > len(LEVELS[quantity]):
        return f"{n} validation rows of every kind ({src})"
    if not pool.matched:
        return f"{n} {what} of every kind ({src})"
    return f"{n} {what} ({src}) like this one ({', '.join(pool.labels)})"


def record_index(path: str | None = None) -> RecordIndex:
    """The index of the record at ``path`` (default: the shipped one), read and indexed once
    per process (again when the file changes)."""
    from perfmodel._io import file_stamp
    from perfmodel.intervals.record import record_path

    p = str(path) if path is not None else str(record_path())
    return _index_cached(p, file_stamp(p))


@lru_cache(maxsize=4)
def _index_cached(path: str, _stamp: tuple[str, int, int] | None) -> RecordIndex:
    from perfmodel.intervals.record import read_record

    return RecordIndex(read_record(path))
