"""The table of ``perfmodel compare --systems A,B --search`` (:mod:`perfmodel.cli.compare`):
each system's best plan, ranked by the search's objective (speed, or with ``--objective cost``
the cost per sample at each system's price), the groups' NVLink domains, and the verdict."""

from __future__ import annotations

import math
from typing import Any

#: One system's row: label, best candidate, search result, GPUs per server, NVLink domain.
SystemRow = tuple[str, Any, Any, int, int]


def cost_per_sample(best: Any, price_per_gpu_hour: float) -> float:
    """Dollars (the price's currency) per training sample of a best plan: the search's own
    cost score (:func:`perfmodel.search.compare.objective_score` with ``Objective.COST``),
    ``gpus x iteration_time_s x price_per_gpu_hour / 3600 / samples_per_step`` (the GPU-hours
    one step takes, at the price, over the samples it trains)."""
    from perfmodel.search.compare import Objective, objective_score
    from perfmodel.search.cost import Pricing

    pricing = Pricing(price_per_gpu_hour)
    return objective_score(
        best.report, Objective.COST, gpus=best.gpus, global_batch=best.global_batch, pricing=pricing
    )


def _groups_line(label: str, plan: dict[str, Any], gpn: int, domain: int) -> str:
    """``gb200-nvl72: ep 64 in 1 NVLink domain(s) of 72, tp 1 in 1`` for a best plan."""
    parts = []
    for dim in ("tp", "ep", "cp"):
        k = int(plan.get(dim, 1) or 1)
        if k > 1:
            spans = math.ceil(k / domain)
            parts.append(f"{dim} {k} in {spans} NVLink domain{'s' if spans > 1 else ''}")
    inside = ", ".join(parts) if parts else "no tensor/expert/context group"
    return f"  {label}: NVLink domain of {domain} GPUs ({gpn} per server); {inside}"


def format_systems_search(
    results: list[SystemRow],
    failures: dict[str, str],
    residuals: dict[str, Any] | None = None,
    prices: dict[str, float] | None = None,
) -> str:
    """The table of :func:`_run_systems_search`: each system's best plan, the groups' NVLink
    domains, and the verdict with :func:`perfmodel.search.why.why_best`'s reason. With
    ``residuals`` (each system's :class:`~perfmodel.intervals.conformal.ResidualInterval`,
    :func:`perfmodel.search.whatif.step_residual`): each row's iteration-time range, what the
    ranges rest on (``predict``'s basis, bias and warning), and whether the verdict is within
    the model's error (:func:`perfmodel.intervals.wording.error_clause`). With ``prices``
    (each system's price per GPU-hour: ``--objective cost``) the rows and the verdict rank by
    :func:`cost_per_sample` (rev27b item 2: they ranked by speed while the cost lines below
    named another system cheapest); the ``~`` marks still compare ranges with the fastest's."""
    from perfmodel.intervals.wording import basis_clause, bounded, overlaps, tie_legend
    from perfmodel.search.compare_table import mem_cell, tight, tight_line, wrap

    ivs = {k: v for k, v in (residuals or {}).items() if v is not None}
    level = next(iter(ivs.values())).level if ivs else None
    pct = "" if level is None else f"{100 * level:g}%"

    def span(label: str, t: float) -> tuple[float, float] | None:
        return ivs[label].time(t) if label in ivs else None

    by_time = sorted(results, key=lambda r: float(r[1].report["iteration_time_s"]))
    costs = {r[0]: cost_per_sample(r[1], prices[r[0]]) for r in results} if prices else None
    ranked = by_time if costs is None else sorted(results, key=lambda r: costs[r[0]])
    cells, tied = {}, set()
    fastest = (
        span(by_time[0][0], float(by_time[0][1].report["iteration_time_s"])) if ranked else None
    )
    for i, (label, best, _, _, _) in enumerate(by_time):
        r = span(label, float(best.report["iteration_time_s"]))
        if (
            i > 0
            and r is not None
            and fastest is not None
            and overlaps(fastest, r)
            and bounded(ivs.get(label), ivs.get(by_time[0][0]))
        ):
            tied.add(label)  # the plan search's mark: a range overlapping the fastest's
        cells[label] = "-" if r is None else f"{r[0]:.3f}-{r[1]:.3f}"
    for label in cells:
        cells[label] += "~" if label in tied else " " if tied else ""
    rw = max([len(f"{pct} iter s"), *(len(c) for c in cells.values())]) if ivs else 0
    sw = max([24, *(len(r[0]) for r in ranked)])  # wide enough for every label and plan
    pw = max([44, *(len(r[1].label) for r in ranked)])
    head = (
        f"{'system':<{sw}} {'best plan':<{pw}} {'iter s':>8} "
        + (f"{pct + ' iter s':>{rw}} " if ivs else "")
        + f"{'samples/s':>10} {'per GPU':>9} {'comm s':>7} {'mem GiB':>8}"
    )
    lines = [head, "-" * len(head)]
    for label, best, _, _, _ in ranked:
        r = best.report
        t = float(r["iteration_time_s"])
        samples = float(r.get("samples_per_step") or best.global_batch)
        mem = r.get("memory_per_gpu_bytes")
        lines.append(
            f"{label:<{sw}} {best.label:<{pw}} {t:8.3f} "
            + (f"{cells[label]:>{rw}} " if ivs else "")
            + f"{samples / t:10.2f} "
            f"{samples / t / best.gpus:9.4f} {float(r.get('exposed_comm_time_s') or 0.0):7.3f} "
            + mem_cell(r, f"{'-' if mem is None else f'{float(mem) / 2**30:.1f}':>8}")
        )
    if costs is not None:
        lines.append(
            wrap(
                "rows ranked by cost per sample (--objective cost; each system's price per "
                "GPU-hour): " + ", ".join(f"{r[0]} {costs[r[0]]:.4g}" for r in ranked)
            )
        )
    for label, why in failures.items():
        lines.append(wrap(f"failed {label}: {why}"))
    if any(tight(best.report) for _, best, _, _, _ in ranked):
        lines.append(tight_line())
    if tied:
        lines.append(tie_legend(level, "fastest system"))
    for label, *_ in ranked:
        iv = ivs.get(label)
        if iv is not None:
            lines.append(f"  {label}: {pct} range {basis_clause(iv)}")
    lines.append("")
    lines.append("parallel groups of each best plan:")
    for label, best, _, gpn, dom in ranked:
        lines.append(_groups_line(label, dict(best.plan), gpn, dom))
    if len(ranked) >= 2:
        lines.extend(_verdict(ranked, span, level, ivs, prices))
    return "\n".join(lines)


def _verdict(
    ranked: list[SystemRow],
    span: Any,
    level: float | None,
    ivs: dict[str, Any],
    prices: dict[str, float] | None,
) -> list[str]:
    """The "why ... wins" and verdict lines of the first two ``ranked`` systems: by speed, or
    with ``prices`` by :func:`cost_per_sample` (the why line then only where the cheaper
    system is also the faster: else its price decides, as the verdict says); ``span(label,
    t)`` is a system's iteration-time range (a cost's is it scaled by cost / time)."""
    from perfmodel.intervals.wording import bounded, error_clause
    from perfmodel.search.why import why_best

    (la, a, _, _, _), (lb, b, _, _, _) = ranked[0], ranked[1]
    ta, tb = float(a.report["iteration_time_s"]), float(b.report["iteration_time_s"])
    tied = bounded(ivs.get(la), ivs.get(lb))
    why = None
    if ta <= tb:
        why = why_best([f"{la} ({a.label})", f"{lb} ({b.label})"], [a.report, b.report])
    lines = ["", why] if why else [""]
    if prices is None:
        tie = error_clause(span(la, ta), span(lb, tb), level, bounded=tied)
        lines.append(
            f"verdict: {la} trains this job {tb / ta:.2f}x as fast as {lb} on the same "
            f"{a.gpus} GPUs, each with its best plan" + (f"; {tie}" if tie else "")
        )
        return lines
    ca, cb = cost_per_sample(a, prices[la]), cost_per_sample(b, prices[lb])
    sa, sb = span(la, ta), span(lb, tb)
    tie = error_clause(
        None if sa is None else (sa[0] * ca / ta, sa[1] * ca / ta),
        None if sb is None else (sb[0] * cb / tb, sb[1] * cb / tb),
        level,
        bounded=tied,
    )
    pace = f"{tb / ta:.2f}x as fast" if ta <= tb else f"{ta / tb:.2f}x the step time"
    lines.append(
        f"verdict (--objective cost): {la} trains this job at {ca / cb:.2f}x the cost per "
        f"sample of {lb} ({ca:.4g} vs {cb:.4g}; {pace}, at {prices[la]:g} vs {prices[lb]:g} "
        f"per GPU-hour) on the same {a.gpus} GPUs, each with its best plan"
        + (f"; {tie}" if tie else "")
    )
    return lines
