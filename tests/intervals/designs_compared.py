"""The interval designs compared in docs/intervals.md, measured on the shipped record.

Not a test (pytest does not collect it): ``PYTHONPATH=. python tests/intervals/designs_compared.py``
prints one line per design: leave-one-source-out coverage of the 80 % range over every
validation row, the groups of at least ten rows inside 60-95 %, the median range (high / low)
over every validation row and over the step rows, and the coverage of the groups outside
60-95 %. Every design reuses the pools of
:class:`perfmodel.intervals.conformal.RecordIndex` and holds each publication out exactly as
:func:`perfmodel.intervals.coverage.leave_one_source_out` does (the held-out publication's rows
never calibrate their own interval, and every other row's score is taken without it and without
its own publication); only the step pools' levels, the band and the margins differ.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence

from perfmodel.intervals import conformal as cf
from perfmodel.intervals.coverage import BASE, GROUP_MIN_ROWS, GROUP_TARGET
from perfmodel.intervals.features import Quantity
from perfmodel.intervals.record import ResidualRow, read_record

#: The step levels before the size class (main at 96b324a).
LEVELS_BEFORE = (
    ("architecture", "software", "precision", "model_kind", "interconnect"),
    ("architecture", "family", "model_kind", "interconnect"),
    ("architecture", "family", "model_kind"),
    ("architecture", "model_kind"),
    ("architecture",),
    ("model_kind",),
)

Scores = list[tuple[ResidualRow, tuple[float, ...]]]


def _width(p: cf.Pool, floor: float) -> float:
    return max(p.band_hi - p.band_lo, floor)


def additive(r: ResidualRow, p: cf.Pool) -> tuple[float, ...]:
    """CQR scores ``(b_lo - r, r - b_hi)``."""
    e = r.speed_residual
    return (p.band_lo - e, e - p.band_hi)


def margins_global(sc: Scores, level: float) -> Callable[[ResidualRow, cf.Pool], tuple]:
    """Today's: one pair of margins from every row's scores, weighted by publication."""
    lo, hi, _, _ = cf.calibration_bounds([s[:2] for _, s in sc], [r for r, _ in sc], level)
    return lambda r, p: (p.band_lo - lo, p.band_hi + hi)


def margins_none(sc: Scores, level: float) -> Callable[[ResidualRow, cf.Pool], tuple]:
    """The pool's band alone."""
    return lambda r, p: (p.band_lo, p.band_hi)


def margins_by_quantity(sc: Scores, level: float) -> Callable[[ResidualRow, cf.Pool], tuple]:
    """Mondrian by answer kind: a quantity with the publications to bound the level (9 at
    80 %) calibrates its own margins; the others take the pooled ones."""
    pooled = cf.calibration_bounds([s[:2] for _, s in sc], [r for r, _ in sc], level)
    own = {}
    for q in cf.CALIBRATED:
        sub = [(r, s) for r, s in sc if r.quantity is q]
        b = cf.calibration_bounds([s[:2] for _, s in sub], [r for r, _ in sub], level)
        own[q] = b if b[3] else pooled
    own[Quantity.SPEEDUP] = own[Quantity.STEP]
    return lambda r, p: (p.band_lo - own[r.quantity][0], p.band_hi + own[r.quantity][1])


def normalised(floor: float) -> Callable:
    """Scores in units of the pool band's width (at least ``floor``), margins pooled."""

    def make(sc: Scores, level: float) -> Callable[[ResidualRow, cf.Pool], tuple]:
        scaled = [(s[0] / s[2], s[1] / s[2]) for _, s in sc]
        lo, hi, _, _ = cf.calibration_bounds(scaled, [r for r, _ in sc], level)

        def iv(r: ResidualRow, p: cf.Pool) -> tuple[float, float]:
            w = _width(p, floor)
            return p.band_lo - lo * w, p.band_hi + hi * w

        return iv

    make.floor = floor  # type: ignore[attr-defined]
    return make


def localized(lam: float) -> Callable:
    """Localized margins (Guan 2023, a box kernel): a calibration row in the question's pool
    weighs its publication's share, any other row ``lam`` times it."""

    def make(sc: Scores, level: float) -> Callable[[ResidualRow, cf.Pool], tuple]:
        rows = [r for r, _ in sc]
        w0 = cf.source_weights(rows)
        k = len({r.source for r in rows})
        q = (1 - (1 - level) / 2) * (1 + 1 / k)

        def iv(r: ResidualRow, p: cf.Pool) -> tuple[float, float]:
            members = {x.row_id for x in p.rows}
            w = [wi * (1.0 if x.row_id in members else lam) for wi, x in zip(w0, rows)]
            lo = cf.weighted_quantile([s[0] for _, s in sc], w, q)
            hi = cf.weighted_quantile([s[1] for _, s in sc], w, q)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                lo, hi = max(s[0] for _, s in sc), max(s[1] for _, s in sc)
            return p.band_lo - lo, p.band_hi + hi

        return iv

    return make


def loso(rows: Sequence[ResidualRow], margins: Callable, floor: float, level: float = 0.8):
    """``(row, r_lo, r_hi)`` of every row, its publication held out."""
    index = cf.RecordIndex(rows)
    out = []
    for held in sorted({r.source for r in rows}):
        ex = frozenset({held})
        sc: Scores = []
        for r in rows:
            if r.source == held or r.quantity not in cf.CALIBRATED:
                continue
            p = index.pool(r.features, r.quantity, ex | {r.source})
            sc.append((r, (*additive(r, p), _width(p, floor))))
        iv = margins(sc, level)
        for r in rows:
            if r.source == held:
                lo, hi = iv(r, index.pool(r.features, r.quantity, ex))
                out.append((r, lo, hi))
    return out


def summary(cov) -> str:
    groups: dict[str, list] = defaultdict(list)
    for c in cov:
        groups[c[0].group].append(c)

    def inside(m) -> float:
        return sum(lo <= r.speed_residual <= hi for r, lo, hi in m) / len(m)

    base = [c for c in cov if c[0].quantity in BASE]
    width = math.exp(statistics.median(hi - lo for _, lo, hi in base))
    step = math.exp(statistics.median(hi - lo for r, lo, hi in base if r.quantity is Quantity.STEP))
    big = {g: m for g, m in groups.items() if len(m) >= GROUP_MIN_ROWS and m[0][0].quantity in BASE}
    ok = [g for g, m in big.items() if GROUP_TARGET[0] <= inside(m) <= GROUP_TARGET[1]]
    missed = ", ".join(
        f"{g.split(' (')[0]} {100 * inside(m):.0f}%" for g, m in sorted(big.items()) if g not in ok
    )
    return (
        f"{100 * inside(base):.0f}% | {len(ok)} of {len(big)} | x{width:.2f} | x{step:.2f} | "
        f"{missed or '-'}"
    )


def main() -> None:
    rows = read_record()
    after = cf.LEVELS[Quantity.STEP]
    designs = [
        ("CQR, global margins", margins_global),
        ("pool band alone", margins_none),
        ("Mondrian margins per answer kind", margins_by_quantity),
        ("normalised by band width (floor 0.1)", normalised(0.1)),
        ("normalised by band width (floor 0.3)", normalised(0.3)),
        ("localized margins, lam 0.3", localized(0.3)),
        ("localized margins, lam 0.1", localized(0.1)),
    ]
    saved = (cf.LEVELS, cf.BAND)
    try:
        for name, levels in (("before", LEVELS_BEFORE), ("size class", after)):
            cf.LEVELS = {**saved[0], Quantity.STEP: levels, Quantity.SPEEDUP: levels}
            for band in ((0.1, 0.9), (0.2, 0.8), (0.25, 0.75)):
                cf.BAND = band
                for dname, m in designs:
                    if band != (0.1, 0.9) and m is not margins_global:
                        continue
                    floor = getattr(m, "floor", 0.1)
                    line = summary(loso(rows, m, floor))
                    print(f"| {name} | {band[0]:g}-{band[1]:g} | {dname} | {line} |")
    finally:
        cf.LEVELS, cf.BAND = saved


if __name__ == "__main__":
    main()
