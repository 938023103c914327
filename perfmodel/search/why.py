"""Why the best plan of a search wins: its step time against the runner-up's, part by part.

The parts are the step-time breakdown every evaluator reports (compute, exposed
communication by class where the predictor gives it, pipeline bubble, optimizer) and the
memory per GPU; the line names the parts that differ most, so "EP 8 inside the server beats
EP 4" reads as "0.09 s less exposed communication (ep)".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfmodel.units import GiB

_PARTS = (
    ("compute_time_s", "compute"),
    ("exposed_comm_time_s", "exposed communication"),
    ("bubble_time_s", "pipeline bubble"),
    ("optimizer_time_s", "optimizer"),
)


def _comm_classes(report: Mapping[str, Any]) -> dict[str, float]:
    """Exposed communication by class (``predict``'s breakdown); empty for the screen."""
    bd = report.get("breakdown") or {}
    per = bd.get("exposed_comm_s") if isinstance(bd, Mapping) else None
    return {str(k): float(v) for k, v in (per or {}).items()}


def why_best(labels: Sequence[str], reports: Sequence[Mapping[str, Any]]) -> str | None:
    """One line: how plan ``labels[0]`` (report ``reports[0]``) beats ``labels[1]``.

    >>> a = {"iteration_time_s": 2.0, "compute_time_s": 1.8, "exposed_comm_time_s": 0.1,
    ...      "bubble_time_s": 0.0, "optimizer_time_s": 0.1,
    ...      "breakdown": {"exposed_comm_s": {"ep": 0.08, "dp": 0.02}}}
    >>> b = {"iteration_time_s": 2.3, "compute_time_s": 1.8, "exposed_comm_time_s": 0.4,
    ...      "bubble_time_s": 0.0, "optimizer_time_s": 0.1,
    ...      "breakdown": {"exposed_comm_s": {"ep": 0.36, "dp": 0.04}}}
    >>> why_best(["ep8", "ep4"], [a, b])
    'why ep8 wins: 0.3 s faster per step than ep4: 0.3 s less exposed communication (ep -0.28 s)'
    """
    if len(reports) < 2:
        return None
    best, other = reports[0], reports[1]
    gain = float(other["iteration_time_s"]) - float(best["iteration_time_s"])
    diffs = []
    for key, name in _PARTS:
        if best.get(key) is None or other.get(key) is None:
            continue
        d = float(other[key]) - float(best[key])
        if abs(d) >= 0.05 * max(abs(gain), 1e-12) and abs(d) > 0:
            diffs.append((abs(d), d, name, key))
    diffs.sort(reverse=True)
    parts = []
    for _, d, name, key in diffs[:3]:
        text = f"{abs(d):.3g} s {'less' if d > 0 else 'more'} {name}"
        if key == "exposed_comm_time_s":
            a, b = _comm_classes(best), _comm_classes(other)
            # ties broken by name: set order follows string hashes, which change per process
            cls = sorted(set(a) | set(b), key=lambda c: (-abs(b.get(c, 0.0) - a.get(c, 0.0)), c))
            if cls:
                c = cls[0]
                text += f" ({c} {a.get(c, 0.0) - b.get(c, 0.0):+.3g} s)"
        parts.append(text)
    line = f"why {labels[0]} wins: {gain:.3g} s faster per step than {labels[1]}"
    if parts:
        line += ": " + ", ".join(parts)
    mb, mo = best.get("memory_per_gpu_bytes"), other.get("memory_per_gpu_bytes")
    if mb is not None and mo is not None and abs(float(mb) - float(mo)) > 0.1 * float(mo):
        line += f"; memory {float(mb) / GiB:.1f} vs {float(mo) / GiB:.1f} GiB per GPU"
    return line


__all__ = ["why_best"]
