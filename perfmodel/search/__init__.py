"""The comparison layer: plan search, hardware what-if, time to accuracy and sweeps.

Everything here evaluates scenario dicts (the keys of :class:`perfmodel.api.Scenario`) through an
*evaluator* (scenario dict -> ``StepReport.to_dict()``), by default :func:`perfmodel.api.predict`,
so the layer can be tested and benchmarked with cheaper evaluators and run in worker processes.

- :mod:`~perfmodel.search.plans`: enumerate valid DP/TP/PP/micro-batch/schedule/ZeRO/recompute plans.
- :mod:`~perfmodel.search.compare`: rank plans with the analytic fast path, confirm the top with
  the simulation, report Kendall's tau between the two.
- :mod:`~perfmodel.search.whatif` and :mod:`~perfmodel.search.cost`: systems x GPU counts, cost
  per epoch and run, cheapest option for a deadline.
- :mod:`~perfmodel.search.tta`: McCandlish et al. (2018) statistical efficiency, fitting, time to
  accuracy.
- :mod:`~perfmodel.search.sweep`: resumable parallel sweeps streamed to JSONL/CSV.
- :mod:`~perfmodel.search.ranking`: rank-quality metrics against measurements.
"""

from typing import TYPE_CHECKING

from perfmodel._lazy import lazy_exports

if TYPE_CHECKING:
    from perfmodel.search.compare import Objective, SearchResult, search_plans
    from perfmodel.search.compare_table import format_table
    from perfmodel.search.cost import Pricing
    from perfmodel.search.plans import ModelShape, SearchSpace, enumerate_plans
    from perfmodel.search.sweep import SweepSpec, run_sweep
    from perfmodel.search.tta import StatisticalEfficiency, TTAFit, fit_time_to_accuracy
    from perfmodel.search.whatif import SystemOption, WhatIfResult, hardware_whatif

# name -> submodule, imported on first use (issue 14, cold start: predict imports none of them)
_EXPORTS = {
    "Objective": "compare",
    "SearchResult": "compare",
    "format_table": "compare_table",
    "search_plans": "compare",
    "Pricing": "cost",
    "ModelShape": "plans",
    "SearchSpace": "plans",
    "enumerate_plans": "plans",
    "SweepSpec": "sweep",
    "run_sweep": "sweep",
    "StatisticalEfficiency": "tta",
    "TTAFit": "tta",
    "fit_time_to_accuracy": "tta",
    "SystemOption": "whatif",
    "WhatIfResult": "whatif",
    "hardware_whatif": "whatif",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "ModelShape",
    "Objective",
    "Pricing",
    "SearchResult",
    "SearchSpace",
    "StatisticalEfficiency",
    "SweepSpec",
    "SystemOption",
    "TTAFit",
    "WhatIfResult",
    "enumerate_plans",
    "fit_time_to_accuracy",
    "format_table",
    "hardware_whatif",
    "run_sweep",
    "search_plans",
]
