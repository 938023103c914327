"""Step reports (breakdown, memory, MFU), Chrome traces and plots (matplotlib imported lazily)."""

from typing import TYPE_CHECKING

from perfmodel._lazy import lazy_exports

if TYPE_CHECKING:
    from perfmodel.report.step import StepReport
    from perfmodel.report.step_breakdown import Breakdown, breakdown, critical_device
    from perfmodel.report.trace import chrome_trace, plot_gantt, plot_speedup, write_chrome_trace

# name -> submodule, imported on first use (issue 14, cold start: predict needs no trace writer)
_EXPORTS = {
    "Breakdown": "step_breakdown",
    "StepReport": "step",
    "breakdown": "step_breakdown",
    "critical_device": "step_breakdown",
    "chrome_trace": "trace",
    "plot_gantt": "trace",
    "plot_speedup": "trace",
    "write_chrome_trace": "trace",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

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
