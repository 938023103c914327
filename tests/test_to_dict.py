"""``Scenario.to_dict`` and ``ParallelismPlan.to_dict`` without ``dataclasses.asdict`` (issue 14:
both run on every prediction) give what ``asdict`` gave."""

from __future__ import annotations

import dataclasses
import enum

from perfmodel.api import Scenario
from perfmodel.parallel.plan import ParallelismPlan, PipelineSchedule, Recompute


def _asdict_scenario(sc: Scenario) -> dict:
    d = dataclasses.asdict(sc)
    d["model_args"] = dict(sc.model_args)
    if sc.pipeline_layout is None:  # left out while unset: earlier scenarios keep their hash
        del d["pipeline_layout"]
    return d


def test_scenario_to_dict_is_asdict():
    sc = Scenario(
        model="gpt",
        model_args={"layers": 2, "dims": [1, 2]},
        global_batch=8,
        tp=2,
        sequence_parallel=True,
        oversubscription=2.0,
    )
    d = sc.to_dict()
    assert d == _asdict_scenario(sc)
    assert list(d) == list(_asdict_scenario(sc))  # same key order (the hash sorts; JSON does not)
    assert d["model_args"] is not sc.model_args  # a copy: editing it leaves the scenario alone
    # a value that is not text, number or flag (set directly, not through from_dict) is copied
    odd = Scenario(model="gpt", global_batch=8, nodes=[1, 2])  # type: ignore[arg-type]
    d = odd.to_dict()
    assert d == _asdict_scenario(odd) and d["nodes"] is not odd.nodes
    stated = Scenario(model="gpt", global_batch=8, pp=2, pipeline_layout="Et|tL")
    assert stated.to_dict() == _asdict_scenario(stated)
    assert stated.to_dict()["pipeline_layout"] == "Et|tL" and "pipeline_layout" not in sc.to_dict()


def test_plan_to_dict_is_asdict():
    plan = ParallelismPlan(
        dp=2, tp=2, pp=2, microbatch_size=4, schedule=PipelineSchedule.INTERLEAVED,
        interleave=2, recompute=Recompute.FULL,
    )  # fmt: skip
    old = {
        k: v.value if isinstance(v, enum.Enum) else v for k, v in dataclasses.asdict(plan).items()
    }
    assert plan.to_dict() == old and list(plan.to_dict()) == list(old)
    assert plan.to_dict()["schedule"] == "interleaved" and plan.to_dict()["recompute"] == "full"
