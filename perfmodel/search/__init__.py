"""The comparison layer: plan search, hardware what-if, time to accuracy and sweeps.

Everything here evaluates scenario dicts (the keys of :class:`perfmodel.api.Scenario`) through an
*evaluator* (scenario dict -> ``StepReport.to_dict()``), by default :func:`perfmodel.api.predict`,
so the layer can be tested and benchmarked with cheaper evaluators and run in worker processes.

- :mod:`~perfmodel.search.plans`: enumerate valid DP/TP/PP/micro-batch/schedule/ZeRO/recompute plans.
- :mod:`~perfmodel.search.compare`: rank plans with the analytic fast path, confirm the top with
  the simulation, report Kendall's tau between the two.
- :mod:`~perfmodel.search.whatif`, :mod:`~perfmodel.search.system_option` and
  :mod:`~perfmodel.search.cost`: systems (their options) x GPU counts, cost
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
    from perfmodel.search.system_option import SystemOption
    from perfmodel.search.tta import StatisticalEfficiency, TTAFit, fit_time_to_accuracy
    from perfmodel.search.whatif import WhatIfResult, hardware_whatif

# submodule -> the names it exports, imported on first use (the package's one list of them at
# run time; issue 14, cold start: predict imports none of them)
__getattr__, __dir__, __all__ = lazy_exports(
    globals(),
    {
        "compare": ("Objective", "SearchResult", "search_plans"),
        "compare_table": ("format_table",),
        "cost": ("Pricing",),
        "plans": ("ModelShape", "SearchSpace", "enumerate_plans"),
        "sweep": ("SweepSpec", "run_sweep"),
        "tta": ("StatisticalEfficiency", "TTAFit", "fit_time_to_accuracy"),
        "system_option": ("SystemOption",),
        "whatif": ("WhatIfResult", "hardware_whatif"),
    },
)
