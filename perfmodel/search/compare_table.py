"""The plan search's table (``perfmodel compare``): the best plans with their stages' times,
breakdowns and memory, why the best beats the next, and which plans tie within the model's
error. The search itself is :mod:`perfmodel.search.compare`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfmodel.intervals.wording import basis_clause, no_tie_verdict
from perfmodel.search.compare import Candidate, Objective, PlanTies, SearchResult, plan_ties


def _why_best_line(result: SearchResult, ties: PlanTies | None = None) -> list[str]:
    """:func:`perfmodel.search.why.why_best` of the best two plans the deepest stage ranked;
    with ``ties``, whether that ranking is within the model's error (:func:`~perfmodel.search.compare.plan_ties`)."""
    from perfmodel.intervals.wording import error_verdict
    from perfmodel.search.why import why_best

    if len(result.ranked) < 2:
        return []
    best, other = result.ranked[0], result.ranked[1]
    # the deepest stage that evaluated both (the simulation may have confirmed only the best)
    names = [st.name for st in reversed(result.stages)]
    stage = next((n for n in names if n in best.reports and n in other.reports), None)
    if stage is None:
        return []
    line = why_best([best.label, other.label], [best.reports[stage], other.reports[stage]])
    if not line:
        return []
    line = f"{line} ({stage})"
    if ties is not None and len(ties.ties) > 1:
        t = ties.ties[1]
        line += "; " + error_verdict(ties.level, bounded=t.bounded, overlap=t.tied)
    return [line]


def tight(report: Mapping[str, Any]) -> bool:
    """A row's plan fits but is within the memory model's measured error of the capacity
    (``memory_tight`` of its report, :func:`perfmodel.intervals.memory.stage_tight`; from its
    stages' bytes where the report predates the field)."""
    if "memory_tight" in report:
        return bool(report["memory_tight"])
    stages, cap = (
        report.get("memory_per_stage_bytes"),
        (report.get("memory") or {}).get("capacity_bytes"),
    )
    if not stages or cap is None:
        return False
    from perfmodel.intervals.memory import stage_tight

    return stage_tight([{"total_bytes": b, "capacity_bytes": cap} for b in stages])


def mem_cell(report: Mapping[str, Any], cell: str) -> str:
    """The ``mem GiB`` cell, ``!`` after the number where the fit is tight (:func:`tight`): the
    plan search's, the what-if's and the systems search's (one cell, one mark)."""
    return f"{cell.strip()}!".rjust(len(cell)) if tight(report) else cell


def tight_line() -> str:
    """The legend under a table with a ``!`` memory cell (:func:`mem_cell`)."""
    from perfmodel.intervals.memory import tight_text

    return f"! mem GiB: fits, but tight: {tight_text()}"


def format_table(result: SearchResult, top: int = 10, *, interval: float | None = None) -> str:
    """Plain-text table of the best plans with their breakdowns (times in s, memory in GiB).

    One iteration-time column per stage (``-`` where the stage did not evaluate the plan); the
    throughput in tokens/s for a sequence model (samples/s otherwise), the breakdown, memory and
    MFU (in %, as ``predict`` prints it) come from the deepest stage that evaluated the plan. A
    label is the plan as ``predict --plan`` reads it. Below the table: plans folded into a row
    (same time and memory), the notes of the shown plans, and what would help when no plan fits.
    With ``interval`` (a level such as 0.8), a plan whose range overlaps the best plan's is
    marked ``~`` after its rank (a statistical tie, :func:`~perfmodel.search.compare.plan_ties`) and a line says so.
    """
    from perfmodel.units import GiB

    names = [s.name for s in result.stages]
    tokens = result.tokens_per_sample
    unit = {
        "throughput": "tokens/s" if tokens else "samples/s",
        "tta": "TTA s",
        "cost": "cost/1k smp",
    }[result.objective.value]
    stage_cols = " ".join(f"{n[:9] + ' s':>11}" for n in names)
    shown = result.ranked[:top]
    unconfirmed = result.unconfirmed  # the first stage's estimates only: no ranks, no ties
    ties = None if unconfirmed else plan_ties(result, top, interval)
    tied = {t.rank for t in ties.ties if t.tied} if ties is not None else set()
    width = max([40, *(len(c.label) for c in shown)])
    epoch = any(c.report.get("epoch_time_s") is not None for c in shown)
    head = (
        f"{'#':>3} {'plan':<{width}} {'gpus':>5} {'batch':>6} {stage_cols} {unit:>11} "
        f"{'compute s':>9} {'comm s':>8} {'bubble s':>8} {'mem GiB':>8} {'MFU %':>6}"
        + (f" {'epoch s':>9}" if epoch else "")
    )
    lines = [head, "-" * len(head)]

    def num(v: Any, fmt: str, width: int) -> str:
        return (
            format(float(v), fmt)
            if isinstance(v, int | float) and v is not None
            else f"{'-':>{width}}"
        )

    for i, c in enumerate(shown, 1):
        r = c.report
        cols = " ".join(
            num(c.reports[n]["iteration_time_s"], "11.4g", 11) if n in c.reports else f"{'-':>11}"
            for n in names
        )
        samples = float(r.get("samples_per_step") or c.global_batch)
        if result.objective is Objective.THROUGHPUT:
            rate = samples / float(r["iteration_time_s"]) * (tokens or 1)
            val = f"{rate:11,.0f}" if tokens else f"{rate:11.1f}"
        elif result.objective is Objective.TTA:
            val = f"{c.score:11.1f}"
        else:
            val = f"{c.score * 1000:11.4g}"
        mem = r.get("memory_per_gpu_bytes")
        mfu = r.get("mfu")
        rank = "  -" if unconfirmed else f"{i:>2}~" if i in tied else f"{i:>3}"
        lines.append(
            f"{rank} {c.label:<{width}} {c.gpus:>5} {c.global_batch:>6} {cols} {val} "
            f"{num(r.get('compute_time_s'), '9.3g', 9)} {num(r.get('exposed_comm_time_s'), '8.3g', 8)} "
            f"{num(r.get('bubble_time_s'), '8.3g', 8)} "
            f"{mem_cell(r, num(None if mem is None else float(mem) / GiB, '8.1f', 8))} "
            f"{num(None if mfu is None else 100 * float(mfu), '6.1f', 6)}"
            + (f" {num(r.get('epoch_time_s'), '9.1f', 9)}" if epoch else "")
        )
    lines.append("")
    rank = {c.label: i for i, c in enumerate(shown, 1)}
    for label, others in result.equivalents.items():
        if label in rank:
            lines.append(f"same time and memory as #{rank[label]}: {', '.join(others)}")
    if any(tight(c.report) for c in shown):
        lines.append(tight_line())
    lines.extend(_notes_of(shown))
    if unconfirmed:  # no winner: the later stages rejected every plan they tried
        lines.append(f"NO WINNER: {unconfirmed}")
    else:
        lines.extend(_tie_lines(ties))
        lines.extend(_why_best_line(result, ties))
    lines.append(
        f"{result.enumerated} plans enumerated"
        + (
            f" (+{result.auto_plans} without mbN, for predict's choice; {result.auto_dropped} "
            "dropped: a size already searched, or refused)"
            if result.auto_plans
            else ""
        )
        + f", {len(result.ranked)} feasible; "
        + ", ".join(f"{s.name}: {s.evaluated} plans in {s.elapsed_s:.1f} s" for s in result.stages)
    )
    if result.pruned:
        lines.append(
            wrap(
                "pruned: "
                + "; ".join(
                    f"{v} {k}" for k, v in sorted(result.pruned.items(), key=lambda kv: -kv[1])
                )
            )
        )
    if result.rejected:
        lines.append(
            "not enumerated: "
            + "; ".join(
                f"{v} {k}" for k, v in sorted(result.rejected.items(), key=lambda kv: -kv[1])
            )
        )
    for prev, st in zip(result.stages, result.stages[1:]):
        if st.evaluated >= 2:
            agree = "same" if st.top1_agrees else "different"
            lines.append(
                f"rank agreement {prev.name} vs {st.name} over the top {st.evaluated}: Kendall tau = "
                f"{st.kendall_tau:.2f} (p = {st.tau_pvalue:.2g}); best plan {agree}"
            )
        if st.stopped:
            lines.append(st.stopped)
    lines.extend(result.notes)
    if result.hints:
        lines.append("no plan fits in GPU memory; what would help:")
        lines.extend(f"  - {h}" for h in result.hints)
    return "\n".join(lines)


#: Width the table's long reason lines wrap at (characters; the table's own columns run wider).
WRAP_COLUMNS = 100


def wrap(line: str) -> str:
    """``line`` wrapped at word boundaries into :data:`WRAP_COLUMNS`-character lines, the
    continuations indented two spaces; a word is never cut (a reason cut mid-word read ``moe
    familie``; audit 15, item 16).

    >>> print(wrap("pruned: " + "word " * 25))
    pruned: word word word word word word word word word word word word word word word word word word
      word word word word word word word
    """
    import textwrap

    return textwrap.fill(
        line,
        WRAP_COLUMNS,
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _notes_of(shown: Sequence[Candidate]) -> list[str]:
    """The printed notes of the shown plans' reports (``printed_notes``): a note every shown
    plan has, once; the best plan's other notes prefixed ``#1:``."""
    if not shown:
        return []
    common = set(shown[0].report.get("printed_notes") or ())
    for c in shown[1:]:
        common &= set(c.report.get("printed_notes") or ())
    best = list(shown[0].report.get("printed_notes") or ())
    return [n if n in common else f"#1: {n}" for n in best]


def _tie_lines(ties: PlanTies | None) -> list[str]:
    """``~`` explained: which plans tie with the best (:func:`~perfmodel.intervals.wording.
    no_tie_verdict` for those whose ranges the record cannot bound), and what their ranges rest
    on, with the bias of runs like the best plan and its notes, as ``predict`` says it
    (:func:`~perfmodel.intervals.wording.basis_clause`)."""
    if ties is None:
        return []
    pct = f"{100 * ties.level:g}%"
    tied = [t.rank for t in ties.ties if t.tied]
    unbounded = [t.rank for t in ties.ties[1:] if not t.bounded]
    out = []
    if tied:
        out.append(
            f"~ statistically tied with #1: {pct} ranges overlap (#{', #'.join(map(str, tied))}); "
            "the ranking among them is within the model's error"
        )
    if unbounded:
        out.append(no_tie_verdict(ties.level, unbounded))
    if not out:
        out.append(
            f"no plan's {pct} range overlaps #1's: the ranking of #1 is beyond the model's error"
        )
    out.append(f"  {pct} ranges {basis_clause(ties.residual, these=True)}")
    return out


__all__ = ["format_table", "mem_cell", "tight", "tight_line"]
