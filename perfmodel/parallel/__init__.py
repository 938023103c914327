"""Parallelism plans, software presets, placement and lowering to a task graph.

See ``docs/predict.md``. Imports nothing heavy (no SimPy, no matplotlib).
"""

from perfmodel.parallel.placement import Placement, place
from perfmodel.parallel.plan import (
    DPMode,
    Hybrid,
    ParallelismPlan,
    PipelineSchedule,
    PSHost,
    Recompute,
    parse_plan_string,
)
from perfmodel.parallel.software import PRESETS, SoftwarePreset, get_preset
from perfmodel.parallel.taskgraph import CommKind, CommSpec, Task, TaskGraph, TaskKind

__all__ = [
    "PRESETS",
    "CommKind",
    "CommSpec",
    "DPMode",
    "Hybrid",
    "PSHost",
    "ParallelismPlan",
    "PipelineSchedule",
    "Placement",
    "Recompute",
    "SoftwarePreset",
    "Task",
    "TaskGraph",
    "TaskKind",
    "get_preset",
    "parse_plan_string",
    "place",
]
