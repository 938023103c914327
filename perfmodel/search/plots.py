"""Plots of comparisons: TP x PP heatmap, Pareto of throughput vs memory, speedup curves, TTA.

Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas (no pyplot global state,
safe in worker processes) and written atomically (:func:`perfmodel._io.atomic_write`).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perfmodel._io import atomic_write
from perfmodel.units import GiB

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from perfmodel.search.compare import SearchResult
    from perfmodel.search.tta import TTAFit, TTAPoint
    from perfmodel.search.whatif import WhatIfResult


def _save(fig: Figure, path: str | os.PathLike[str]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(
        buf, format=os.path.splitext(str(path))[1][1:] or "png", dpi=110, bbox_inches="tight"
    )
    with atomic_write(path, "wb") as fh:
        fh.write(buf.getvalue())


def plot_search(
    result: SearchResult,
    path: str | os.PathLike[str],
    *,
    title: str = "",
    interval: float | None = None,
) -> None:
    """Two panels: best throughput per (TP, PP) cell, and throughput vs memory with the Pareto
    front. With ``interval`` (a level), the best plan's prediction interval is drawn as an error
    bar and a band: plans inside the band are statistically tied with it (issue 26)."""
    import numpy as np
    from matplotlib.figure import Figure

    cands = list(result.ranked)
    fig = Figure(figsize=(12, 4.8))
    ax1, ax2 = fig.subplots(1, 2)
    if not cands:
        ax1.text(0.5, 0.5, "no feasible plan", ha="center")
        _save(fig, path)
        return
    first = result.stages[0].name  # every feasible plan has a report of the first stage

    def tput_of(c: Any) -> float:
        r = c.reports[first]
        return float(r.get("samples_per_step") or c.global_batch) / float(r["iteration_time_s"])

    tps = sorted({int(c.plan["tp"]) for c in cands})
    pps = sorted({int(c.plan["pp"]) for c in cands})
    grid = np.full((len(pps), len(tps)), np.nan)
    for c in cands:
        tput = tput_of(c)
        i, j = pps.index(int(c.plan["pp"])), tps.index(int(c.plan["tp"]))
        if math.isnan(grid[i, j]) or tput > grid[i, j]:
            grid[i, j] = tput
    im = ax1.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    ax1.set_xticks(range(len(tps)), [str(t) for t in tps])
    ax1.set_yticks(range(len(pps)), [str(p) for p in pps])
    ax1.set_xlabel("tensor-parallel degree (TP)")
    ax1.set_ylabel("pipeline-parallel degree (PP)")
    ax1.set_title(
        f"best {first} throughput per TP x PP, samples/s (blank: nothing fits)", fontsize=9
    )
    vmax = np.nanmax(grid)
    for i in range(len(pps)):
        for j in range(len(tps)):
            if not math.isnan(grid[i, j]):
                ax1.text(
                    j,
                    i,
                    f"{grid[i, j]:.3g}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if grid[i, j] < 0.6 * vmax else "black",
                )
    fig.colorbar(im, ax=ax1)
    mem = np.array(
        [float(c.reports[first].get("memory_per_gpu_bytes", math.nan)) / GiB for c in cands]
    )
    tput = np.array([tput_of(c) for c in cands])
    ax2.scatter(mem, tput, s=8, alpha=0.4, label=f"feasible plans ({first})")
    order = np.argsort(mem)
    front_x, front_y, best = [], [], -math.inf
    for k in order:
        if tput[k] > best:
            best = tput[k]
            front_x.append(mem[k])
            front_y.append(tput[k])
    ax2.step(front_x, front_y, where="post", color="C3", label="Pareto front")
    top = cands[0]
    ax2.scatter(
        [float(top.reports[first].get("memory_per_gpu_bytes", math.nan)) / GiB],
        [tput_of(top)],
        marker="*",
        s=160,
        color="C1",
        zorder=5,
        label=f"ranked first ({top.stage}): {top.label}",
    )
    band = _best_range(result, interval)
    if band is not None:
        lo, hi = band
        y = tput_of(top)
        ax2.axhspan(lo, hi, color="C1", alpha=0.12, label=f"#1's {100 * interval:g}% range")
        ax2.errorbar(
            [float(top.reports[first].get("memory_per_gpu_bytes", math.nan)) / GiB],
            [y],
            yerr=[[y - lo], [hi - y]],
            fmt="none",
            ecolor="C1",
            capsize=4,
        )
    ax2.set_xlabel("memory per GPU (GiB)")
    ax2.set_ylabel("throughput (samples/s)")
    ax2.set_title("throughput vs memory")
    ax2.legend(fontsize=7)
    if title:
        fig.suptitle(title, parse_math=False)
    _save(fig, path)


def _best_range(result: SearchResult, level: float | None) -> tuple[float, float] | None:
    """The best plan's first-stage throughput range at ``level`` (its step interval), or
    ``None`` (no level, or no record to read)."""
    if level is None or not result.ranked:
        return None
    from perfmodel.errors import PerfModelError
    from perfmodel.intervals.answers import step_interval

    top = result.ranked[0]
    first = result.stages[0].name
    rep = dict(top.reports[first])
    try:
        si = step_interval(rep, level, scenario=top.scenario)
    except PerfModelError:
        return None
    samples = float(rep.get("samples_per_step") or top.global_batch)
    t_lo, t_hi = si.low["iteration_time_s"], si.high["iteration_time_s"]
    if t_lo is None or t_hi is None:
        return None
    return samples / t_hi, samples / t_lo


def plot_whatif(
    result: WhatIfResult, path: str | os.PathLike[str], *, title: str = ""
) -> dict[str, Any]:
    """Speedup vs GPUs per system (with the ideal line) and cost per run (or epoch time, or
    throughput). The figure's title names what the right panel shows; GPU counts and speedups
    are labelled in plain numbers. Returns the titles and tick labels (for tests)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig = Figure(figsize=(12, 4.8))
    ax1, ax2 = fig.subplots(1, 2)
    gmax = 1
    for name, pts in result.series().items():
        pts = sorted(pts, key=lambda p: p.gpus)
        speedups = [math.nan if p.speedup is None else p.speedup for p in pts]  # no fit: a gap
        ax1.plot([p.gpus for p in pts], speedups, marker="o", label=name)
        gmax = max(gmax, *(p.gpus for p in pts))
        if any(p.cost_per_run is not None for p in pts):
            ax2.plot([p.gpus for p in pts], [p.cost_per_run for p in pts], marker="o", label=name)
        elif any(p.epoch_time_s is not None for p in pts):
            ax2.plot(
                [p.gpus for p in pts], [p.epoch_time_s / 3600 for p in pts], marker="o", label=name
            )
        else:
            ax2.plot(
                [p.gpus for p in pts],
                [p.throughput_samples_per_s for p in pts],
                marker="o",
                label=name,
            )
    ax1.plot([1, gmax], [1, gmax], "k--", lw=0.8, label="ideal")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log", base=2)
    counts = sorted({p.gpus for p in result.points} | {1})
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax1.xaxis.set_major_locator(FixedLocator(counts))
    ax1.xaxis.set_minor_locator(NullLocator())
    ax1.xaxis.set_major_formatter(plain)
    ax1.yaxis.set_major_formatter(plain)
    ax1.yaxis.set_minor_formatter(plain)
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("speedup vs 1 GPU of the same system")
    ax1.legend(fontsize=7)
    ax2.set_xscale("log", base=2)
    ax2.xaxis.set_major_locator(FixedLocator(counts))
    ax2.xaxis.set_minor_locator(NullLocator())
    ax2.xaxis.set_major_formatter(plain)
    ax2.set_xlabel("GPUs")
    has_cost = any(p.cost_per_run is not None for p in result.points)
    has_epoch = any(p.epoch_time_s is not None for p in result.points)
    ax2.set_ylabel("cost per run" if has_cost else "epoch time (h)" if has_epoch else "samples/s")
    if result.cheapest is not None and has_cost:
        c = result.cheapest
        ax2.scatter(
            [c.gpus], [c.cost_per_run], marker="*", s=200, color="C3", zorder=5, label="cheapest"
        )
    ax2.legend(fontsize=7)
    # the verdict names the cheapest option; without prices it is a hint for the command line,
    # which belongs on the terminal, not in the image
    panel = result.verdict if result.cheapest is not None else ""
    ax2.set_title(panel, fontsize=8)
    second = "cost per run" if has_cost else "epoch time" if has_epoch else "throughput"
    suptitle = f"{title + ': ' if title else ''}speedup and {second} per system"
    fig.suptitle(suptitle, parse_math=False)
    fig.canvas.draw()
    xt = [t.get_text() for t in ax1.get_xticklabels()]
    _save(fig, path)
    return {"title": suptitle, "panel_title": panel, "xticklabels": xt}


def plot_tta(
    fits: TTAFit | Sequence[TTAFit] | None,
    path: str | os.PathLike[str],
    *,
    grid: Sequence[TTAPoint] = (),
    title: str = "",
) -> None:
    """Measured points with the fitted curves (left) and predicted TTA vs batch per GPU count (right)."""
    import numpy as np
    from matplotlib.figure import Figure

    fit_list = [] if fits is None else [fits] if not isinstance(fits, list | tuple) else list(fits)
    fig = Figure(figsize=(12, 4.8) if grid else (6.5, 4.8))
    axes = fig.subplots(1, 2 if grid else 1)
    ax1 = axes[0] if grid else axes
    if fit_list:
        b = np.array(fit_list[0].batch_sizes)
        ax1.scatter(b, fit_list[0].measured_s, color="k", zorder=5, label="measured")
        for n, fit in enumerate(fit_list):
            bn = fit.params["noise_scale_samples"]
            lo, hi = fit.param_range.get("noise_scale_samples", (math.nan, math.nan))
            if fit.step_time_model.value == "affine":
                xs = np.geomspace(b.min() / 2, b.max() * 2, 200)
                lab = "fit, step time t0 + B t1"
                ax1.plot(xs, [fit.predict_s(x) for x in xs], color=f"C{n}", label=lab)
            else:
                lab = "fit, perfmodel step times"
                ax1.plot(fit.batch_sizes, fit.fitted_s, marker="x", color=f"C{n}", label=lab)
            ax1.axvline(fit.optimal_batch, color=f"C{n}", ls="--", lw=0.8)
            ax1.plot(
                [],
                [],
                " ",
                label=f"  B_noise={bn:.3g} (16-84%: {lo:.3g}-{hi:.3g}), B*={fit.optimal_batch:.0f}, "
                f"rms log err {fit.rms_log_error:.2f}",
            )
        ys = [*fit_list[0].measured_s, *(y for f in fit_list for y in f.fitted_s)]
        ax1.set_ylim(min(ys) * 0.8, max(ys) * 4.0)  # room for the legend above the data
        ax1.set_title("McCandlish et al. 2018: T(B) = S_min (1 + B_noise/B) t_step(B)", fontsize=9)
        ax1.set_xscale("log", base=2)
        ax1.set_yscale("log")
        ax1.set_xlabel("global batch (samples)")
        ax1.set_ylabel("time to accuracy (s)")
        ax1.legend(fontsize=7)
    if grid:
        ax2 = axes[1]
        series: dict[tuple[int, int], list[TTAPoint]] = {}
        for p in grid:
            series.setdefault((p.gpus, p.learners_per_gpu), []).append(p)
        for (g, k), pts in sorted(series.items()):
            pts = sorted(pts, key=lambda p: p.global_batch)
            lab = f"{g} GPU" + ("s" if g > 1 else "") + (f", {k} learners/GPU" if k > 1 else "")
            ax2.plot(
                [p.global_batch for p in pts],
                [p.time_to_accuracy_s for p in pts],
                marker="o",
                label=lab,
            )
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log")
        ax2.set_xlabel("global batch (samples)")
        ax2.set_ylabel("predicted time to accuracy (s)")
        ax2.set_title("S(B) x predicted step time", fontsize=9)
        ax2.legend(fontsize=7)
    if title:
        fig.suptitle(title, parse_math=False)
    _save(fig, path)
