"""Step reports (breakdown, memory, MFU), Chrome traces and plots (matplotlib imported lazily)."""

from typing import TYPE_CHECKING

from perfmodel._lazy import lazy_exports

if TYPE_CHECKING:
    from perfmodel.report.step import StepReport
    from perfmodel.report.step_breakdown import Breakdown, breakdown, critical_device
    from perfmodel.report.trace import chrome_trace, plot_gantt, plot_speedup, write_chrome_trace

# submodule -> the names it exports, imported on first use (the package's one list of them at
# run time; issue 14, cold start: predict needs no trace writer)
__getattr__, __dir__, __all__ = lazy_exports(
    globals(),
    {
        "step": ("StepReport",),
        "step_breakdown": ("Breakdown", "breakdown", "critical_device"),
        "trace": ("chrome_trace", "plot_gantt", "plot_speedup", "write_chrome_trace"),
    },
)
