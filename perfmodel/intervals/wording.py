"""The sentences every answer with a range says the same way: whether two ranges separate two
options (the plan search, the systems search and the what-if), the note on a range the record
cannot bound (and the plan search's list of plans it gives no tie verdict for), and what a
range rests on with the bias of runs like it (``predict``, the plan search, the systems search
and the what-if). One home, so the commands word them alike; the numbers come
from :mod:`perfmodel.intervals.conformal` (a
:class:`~perfmodel.intervals.conformal.ResidualInterval`, read duck-typed: ``level``, ``basis``,
``warning``, ``bias``, ``bounded``, ``sources``).
"""

from __future__ import annotations

import math
from typing import Any


def too(bias: float) -> str:
    """``"12% too fast"`` for a bias of ``+0.12``, ``"3% too slow"`` for ``-0.03`` (a relative
    speed residual: positive where runs like this one were predicted faster than they ran).

    >>> too(0.12), too(-0.03)
    ('12% too fast', '3% too slow')
    """
    return f"{100 * abs(bias):.0f}% too {'fast' if bias >= 0 else 'slow'}"


def overlaps(best: tuple[float, float], other: tuple[float, float]) -> bool:
    """Whether ``other``'s range (lower is better: a time or a cost) reaches down into
    ``best``'s: ``other_low <= best_high``, a statistical tie where both are bounded
    (:func:`perfmodel.intervals.answers.ties`' rule, the ``~`` every table marks).

    >>> overlaps((1.0, 2.0), (2.0, 3.0)), overlaps((1.0, 2.0), (2.5, 3.0))
    (True, False)
    """
    return other[0] <= best[1]


def tie_legend(level: float, best: str, figure: str = "") -> str:
    """The line under a table that explains its ``~``: ``"  ~: its 80% cost range overlaps the
    cheapest's (a statistical tie)"`` (``figure`` ``"cost "``, ``best`` ``"cheapest"``)."""
    return f"  ~: its {100 * level:g}% {figure}range overlaps the {best}'s (a statistical tie)"


def error_verdict(level: float, *, bounded: bool, overlap: bool, spans: str = "") -> str:
    """Whether two options' ranges at ``level`` separate them: ranges that ``overlap`` are a
    statistical tie (:func:`perfmodel.intervals.answers.ties`' rule); without ``bounded``
    (either range is the widest the record gives standing in for one it cannot bound) no
    verdict. ``spans`` (``"1-2 vs 1.5-3"``) shows the two ranges.

    >>> error_verdict(0.8, bounded=True, overlap=True)
    "within the model's error: the two 80% ranges overlap (a statistical tie)"
    >>> error_verdict(0.8, bounded=True, overlap=False, spans="1-2 vs 2.5-3")
    "beyond the model's error: the two 80% ranges do not overlap (1-2 vs 2.5-3)"
    """
    pct = f"{100 * level:g}%"
    if not bounded:
        return f"no verdict on the model's error: the record cannot bound a {pct} range" + (
            f" ({spans} are the widest it gives)" if spans else ""
        )
    if overlap:
        return f"within the model's error: the two {pct} ranges overlap (" + (
            f"{spans}; a statistical tie)" if spans else "a statistical tie)"
        )
    return f"beyond the model's error: the two {pct} ranges do not overlap" + (
        f" ({spans})" if spans else ""
    )


def error_clause(
    best: tuple[float, float] | None,
    other: tuple[float, float] | None,
    level: float | None,
    *,
    bounded: bool = True,
) -> str:
    """:func:`error_verdict` of two options' ranges of a figure (lower is better: a time or a
    cost; ``best`` the lower), with the ranges shown; ``""`` without both ranges.

    >>> error_clause((1.0, 2.0), (1.5, 3.0), 0.8)
    "within the model's error: the two 80% ranges overlap (1-2 vs 1.5-3; a statistical tie)"
    >>> error_clause((1.0, 2.0), (1.5, 3.0), 0.9, bounded=False)
    "no verdict on the model's error: the record cannot bound a 90% range (1-2 vs 1.5-3 are the widest it gives)"
    """
    if best is None or other is None or level is None:
        return ""
    spans = f"{best[0]:.4g}-{best[1]:.4g} vs {other[0]:.4g}-{other[1]:.4g}"
    return error_verdict(level, bounded=bounded, overlap=overlaps(best, other), spans=spans)


def bounded(*intervals: Any) -> bool:
    """Whether every given residual interval is bounded by its publications (``None`` entries
    are skipped): a tie verdict needs both ranges."""
    return all(iv.bounded for iv in intervals if iv is not None)


def bounded_note(iv: Any) -> str:
    """The note on a range the record cannot bound: ``"N publications cannot bound a 90% range;
    the widest they give stands in"``; ``""`` for a bounded one (or none)."""
    if iv is None or iv.bounded:
        return ""
    return (
        f"{iv.sources} publications cannot bound a {100 * iv.level:g}% range; the widest they "
        "give stands in"
    )


def no_tie_verdict(level: float, ranks: list[int]) -> str:
    """The plan search's line for the ranked plans (``ranks``) whose tie with the best plan it
    cannot judge: their range or the best's is the widest the record gives standing in for one
    it cannot bound at ``level`` (:func:`bounded`).

    >>> no_tie_verdict(0.99, [2, 4])
    'no verdict on ties with #1 for #2, #4: the record cannot bound a 99% range (the widest it gives stands in)'
    """
    return (
        f"no verdict on ties with #1 for #{', #'.join(map(str, ranks))}: the record cannot "
        f"bound a {100 * level:g}% range (the widest it gives stands in)"
    )


def basis_clause(iv: Any, *, these: bool = False) -> str:
    """What a range rests on, the median bias of runs like it (``"runs like these"`` where the
    line speaks for several rows), and its notes (the interval's warning, :func:`bounded_note`):
    ``"from N rows; runs like this one were predicted 11% too fast (median); note: ..."``."""
    like = "these" if these else "this one"
    return (
        f"from {iv.basis}; runs like {like} were predicted {too(math.expm1(iv.bias))} (median)"
        + (f"; note: {iv.warning}" if iv.warning else "")
        + (f"; note: {note}" if (note := bounded_note(iv)) else "")
    )


__all__ = [
    "basis_clause",
    "bounded",
    "bounded_note",
    "error_clause",
    "error_verdict",
    "no_tie_verdict",
    "overlaps",
    "tie_legend",
    "too",
]
