"""perfmodel: predict deep-learning training speed on multi-GPU hardware.

The public API is organised as a pipeline of immutable values (see ``docs/design.md``)::

    Topology -> CommCostModel -> Workload -> ParallelismPlan -> TaskGraph -> Timeline -> StepReport
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
