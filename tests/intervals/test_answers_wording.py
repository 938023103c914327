"""The range sentences' one home (:mod:`perfmodel.intervals.wording`): the plan search, the
systems search, the what-if and ``predict`` word a tie verdict, an unbounded range and a
range's basis alike (session 14's reviews: the same sentence assembled in four places)."""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.intervals.wording import (
    basis_clause,
    bounded,
    bounded_note,
    error_clause,
    error_verdict,
    overlaps,
    tie_legend,
    too,
)


@dataclass(frozen=True)
class _Iv:
    level: float = 0.8
    basis: str = "12 rows of 5 publications"
    warning: str = ""
    bias: float = 0.0
    bounded: bool = True
    sources: int = 5


def test_the_verdict_with_and_without_spans_says_the_same() -> None:
    # the plan search shows no spans, the what-if and systems search do: one sentence
    for ok, overlap in ((True, True), (True, False), (False, True)):
        bare = error_verdict(0.8, bounded=ok, overlap=overlap)
        shown = error_verdict(0.8, bounded=ok, overlap=overlap, spans="1-2 vs 3-4")
        assert (
            shown.replace(" (1-2 vs 3-4 are the widest it gives)", "")
            .replace("1-2 vs 3-4; ", "")
            .replace(" (1-2 vs 3-4)", "")
            == bare
        )
    assert error_verdict(0.9, bounded=False, overlap=False) == (
        "no verdict on the model's error: the record cannot bound a 90% range"
    )


def test_error_clause_reads_the_overlap_from_the_ranges() -> None:
    assert error_clause((1.0, 2.0), (2.0, 3.0), 0.8).startswith("within")  # touching: a tie
    assert error_clause((1.0, 2.0), (2.01, 3.0), 0.8).startswith("beyond")
    assert error_clause(None, (1.0, 2.0), 0.8) == "" == error_clause((1.0, 2.0), None, 0.8)
    assert error_clause((1.0, 2.0), (1.5, 3.0), None) == ""


def test_bounded_and_its_note() -> None:
    assert bounded(_Iv(), None, _Iv()) and not bounded(_Iv(), _Iv(bounded=False))
    assert bounded_note(None) == "" == bounded_note(_Iv())
    assert bounded_note(_Iv(level=0.9, bounded=False, sources=3)) == (
        "3 publications cannot bound a 90% range; the widest they give stands in"
    )


def test_basis_clause() -> None:
    iv = _Iv(bias=-0.1053605156578263, warning="few rows", bounded=False)  # e^b - 1 = -0.1
    assert too(0.1) == "10% too fast" and too(-0.1) == "10% too slow" and too(0.0).endswith("fast")
    assert basis_clause(iv) == (
        "from 12 rows of 5 publications; runs like this one were predicted 10% too slow "
        "(median); note: few rows; note: 5 publications cannot bound a 80% range; the widest "
        "they give stands in"
    )
    assert basis_clause(_Iv(), these=True) == (
        "from 12 rows of 5 publications; runs like these were predicted 0% too fast (median)"
    )


def test_one_tie_rule_and_one_legend() -> None:
    # touching ranges tie (the plan search's lo <= best_hi), as error_clause says
    assert overlaps((1.0, 2.0), (2.0, 3.0)) and not overlaps((1.0, 2.0), (2.0001, 3.0))
    assert error_clause((1.0, 2.0), (2.0, 3.0), 0.8).startswith("within")
    assert tie_legend(0.8, "cheapest", "cost ") == (
        "  ~: its 80% cost range overlaps the cheapest's (a statistical tie)"
    )
    assert tie_legend(0.9, "fastest system") == (
        "  ~: its 90% range overlaps the fastest system's (a statistical tie)"
    )
