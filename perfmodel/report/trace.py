"""Chrome trace export (``chrome://tracing`` / Perfetto JSON) and plots.

Trace format: the Trace Event Format's JSON object form, ``{"traceEvents": [...],
"displayTimeUnit": "ms"}``, complete events (``"ph": "X"``) with microsecond ``ts``/``dur``; one
process per simulated GPU (``pid``) and one thread per stream (``tid``), named by metadata events
(``"ph": "M"``, ``process_name`` / ``thread_name``).
"""

from __future__ import annotations

import os
from typing import Any

from perfmodel._io import atomic_write, write_json_atomic
from perfmodel.sim.engine import Timeline

_STREAM_ORDER = ("host", "compute", "dp", "comm", "send_fwd", "send_bwd", "h2d", "d2h", "server")


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    """Trace events of a timeline (one process per device, one thread per stream)."""
    g = timeline.graph
    pids = {d: i for i, d in enumerate(g.devices)}
    tids: dict[tuple[str, str], int] = {}
    events: list[dict[str, Any]] = []
    for d, pid in pids.items():
        name = d if g.multiplicity == 1 else f"{d} (x{g.multiplicity} symmetric)"
        events.append(
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
        )
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
    for t in g.tasks:
        key = (t.device, t.stream)
        if key not in tids:
            order = (
                _STREAM_ORDER.index(t.stream) if t.stream in _STREAM_ORDER else len(_STREAM_ORDER)
            )
            tids[key] = order + 1
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": pids[t.device],
                    "tid": tids[key],
                    "args": {"name": t.stream},
                }
            )
        s, e = timeline.start_s[t.tid], timeline.end_s[t.tid]
        args: dict[str, Any] = {"kind": t.kind.value}
        if t.microbatch >= 0:
            args["microbatch"] = t.microbatch
            args["chunk"] = t.chunk
        if t.comm is not None:
            args["op"] = t.comm.op.value
            args["bytes"] = t.comm.message_bytes
            args["group_size"] = len(t.comm.group)
        events.append(
            {
                "name": t.label or t.kind.value,
                "cat": t.kind.value,
                "ph": "X",
                "ts": s * 1e6,
                "dur": (e - s) * 1e6,
                "pid": pids[t.device],
                "tid": tids[key],
                "args": args,
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"fidelity": timeline.fidelity},
    }


def write_chrome_trace(timeline: Timeline, path: str | os.PathLike[str]) -> None:
    """Write the trace JSON atomically."""
    write_json_atomic(path, chrome_trace(timeline))


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, bbox_inches="tight")


#: Gantt colours and their legend labels
GANTT_LEGEND = (
    ("#4c72b0", "forward"),
    ("#dd8452", "backward"),
    ("#8c8c8c", "other compute-stream work (recompute, optimizer, TP collectives)"),
    ("#55a868", "communication / host (thin bar)"),
)


def plot_gantt(
    timeline: Timeline, path: str | os.PathLike[str], title: str = ""
) -> tuple[str, ...]:
    """Gantt chart of the compute streams (pipeline schedule): forward blue, backward orange,
    recompute/optimizer grey, communication thin bars under each GPU row, with a legend.

    Returns the legend's labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = timeline.graph
    devs = list(g.devices)
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(devs) + 1.5))
    for row, d in enumerate(devs):
        y = len(devs) - 1 - row
        for t in g.tasks:
            if t.device != d:
                continue
            s, e = timeline.start_s[t.tid], timeline.end_s[t.tid]
            if e <= s:
                continue
            if t.stream == "compute":
                color = (
                    "#4c72b0"
                    if t.label.startswith("F")
                    else "#dd8452"
                    if t.label.startswith("B")
                    else "#8c8c8c"
                )
                ax.broken_barh(
                    [(s * 1e3, (e - s) * 1e3)],
                    (y + 0.3, 0.6),
                    facecolors=color,
                    edgecolor="white",
                    linewidth=0.3,
                )
                if t.microbatch >= 0 and (e - s) / max(timeline.makespan_s, 1e-12) > 0.02:
                    ax.text(
                        (s + e) / 2 * 1e3,
                        y + 0.6,
                        str(t.microbatch),
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white",
                    )
            else:
                ax.broken_barh([(s * 1e3, (e - s) * 1e3)], (y + 0.05, 0.2), facecolors="#55a868")
    ax.set_yticks([len(devs) - 1 - i + 0.5 for i in range(len(devs))])
    ax.set_yticklabels(devs)
    ax.set_xlabel("time (ms)")
    ax.set_title(title or "pipeline schedule", parse_math=False)
    from matplotlib.patches import Patch

    legend = ax.legend(
        handles=[Patch(facecolor=c, label=lab) for c, lab in GANTT_LEGEND],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    labels = tuple(t.get_text() for t in legend.get_texts())
    _save(fig, path)
    plt.close(fig)
    return labels


def plot_speedup(
    reports: list[Any],
    path: str | os.PathLike[str],
    title: str = "",
    *,
    intervals: list[tuple[float, float] | None] | None = None,
    level: float | None = None,
) -> None:
    """Speedup vs GPUs with the linear ideal; points that do not fit in memory are hollow.
    ``intervals`` (one ``(low, high)`` or ``None`` per report) draw each point's prediction
    interval at ``level`` as an error bar (:func:`perfmodel.intervals.answers.speedup_interval`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r.num_gpus for r in reports]
    ys = [r.speedup or 0.0 for r in reports]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(xs, xs, "--", color="grey", label="linear")
    ax.plot(xs, ys, "-o", color="#4c72b0", label="predicted")
    bars = [(x, y, iv) for x, y, iv in zip(xs, ys, intervals or [], strict=False) if iv]
    if bars:
        ax.errorbar(
            [b[0] for b in bars],
            [b[1] for b in bars],
            yerr=[[b[1] - b[2][0] for b in bars], [b[2][1] - b[1] for b in bars]],
            fmt="none",
            ecolor="#4c72b0",
            alpha=0.6,
            capsize=3,
            label=f"{100 * level:g}% range" if level else "range",
        )
    for x, y, r in zip(xs, ys, reports, strict=True):
        if not r.fits_in_memory:
            ax.plot([x], [y], "o", mfc="white", mec="red")
        ax.annotate(f"{y:.2f}x", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("speedup vs 1 GPU")
    ax.set_title(title or "predicted speedup", parse_math=False)
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, path)
    plt.close(fig)
