"""Plots of bus bandwidth against message size (matplotlib, Agg backend, atomic writes)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from perfmodel._io import atomic_write
from perfmodel.units import GB


def plot_busbw(
    path: str | Path,
    sizes_bytes: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    title: str = "",
    measured: tuple[Sequence[float], Sequence[float]] | None = None,
) -> Path:
    """Write a log-x plot of bus bandwidth (GB/s) against message size.

    Parameters
    ----------
    path
        Output PNG file (written atomically).
    sizes_bytes
        Message sizes of the predicted series, bytes.
    series
        Label -> bus bandwidths in bytes/s (one per size).
    measured
        Optional (sizes, busbw) of a measurement, drawn as markers.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for label, bw in series.items():
        ax.plot(list(sizes_bytes), [b / GB for b in bw], "-", lw=1.8, label=label)
    if measured is not None:
        ax.plot(list(measured[0]), [b / GB for b in measured[1]], "o", ms=4, label="measured")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10, parse_math=False)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    p = Path(path)
    with atomic_write(p, "wb") as fh:
        fh.write(buf.getvalue())
    return p
