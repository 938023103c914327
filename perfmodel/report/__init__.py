"""Step reports (breakdown, memory, MFU), Chrome traces and plots (matplotlib imported lazily)."""

from perfmodel.report.step import Breakdown, StepReport, breakdown, critical_device
from perfmodel.report.trace import chrome_trace, plot_gantt, plot_speedup, write_chrome_trace

__all__ = [
    "Breakdown",
    "StepReport",
    "breakdown",
    "chrome_trace",
    "critical_device",
    "plot_gantt",
    "plot_speedup",
    "write_chrome_trace",
]
