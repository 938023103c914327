"""Plan search never enumerates, screens or ranks a plan the stack refuses: DeepSpeed's
``PipelineEngine`` runs at most ZeRO-1 with pipeline parallelism
(``SoftwarePreset.pipeline_max_zero``), so a ``deepspeed-zero2``/``-zero3`` search keeps
``pp > 1`` plans only at ZeRO 0/1 and counts the others under their reason; a search whose every
plan is refused says why and what runs instead (``perfmodel compare``, exit 2)."""

from __future__ import annotations

from typing import Any

import pytest

from perfmodel.api import Scenario, resolve
from perfmodel.errors import ConfigError
from perfmodel.parallel.software import get_preset
from perfmodel.search.compare import search_plans
from perfmodel.search.plans import (
    PIPELINE_ZERO_REASON,
    ModelFamily,
    ModelShape,
    SearchSpace,
    enumerate_plans,
)

GPT = {"hidden": 512, "layers": 8, "heads": 8, "seq_len": 512, "vocab": 8000}
SHAPE = ModelShape(num_blocks=8, num_heads=8, family=ModelFamily.TRANSFORMER)


def _base(software: str, **kw: Any) -> dict[str, Any]:
    return {
        "system": "dgx-a100", "model": "gpt", "model_args": GPT, "software": software,
        "precision": "bf16", "optimizer": "adam", "nodes": 2, **kw,
    }  # fmt: skip


@pytest.mark.parametrize("software", ["deepspeed-zero2", "deepspeed-zero3"])
def test_enumeration_keeps_no_refused_plan(software: str) -> None:
    space = SearchSpace().for_preset(get_preset(software))
    assert space.pipeline_max_zero == 1
    en = enumerate_plans(16, 64, SHAPE, space)
    assert en.plans, "pp = 1 plans at the preset's stage remain"
    assert all(p["pp"] == 1 or p["zero"] <= 1 for p in en.plans)
    assert any(p["pp"] == 1 and p["zero"] >= 2 for p in en.plans)
    assert en.rejected[PIPELINE_ZERO_REASON] > 0


def test_zero1_and_unlimited_stacks_keep_pipelined_plans() -> None:
    ds1 = enumerate_plans(16, 64, SHAPE, SearchSpace().for_preset(get_preset("deepspeed-zero1")))
    assert any(p["pp"] > 1 and p["zero"] == 1 for p in ds1.plans)
    assert PIPELINE_ZERO_REASON not in ds1.rejected
    # a stack that states no limit (and a space without a preset) searches ZeRO-3 with pp > 1
    space = SearchSpace(zero_stages=(3,), pp_degrees=(2,))
    assert space.for_preset(get_preset("fsdp")).pipeline_max_zero is None
    sharded = [p for p in enumerate_plans(16, 64, SHAPE, space).plans if p["dp"] > 1]
    assert sharded and all(p["pp"] == 2 and p["zero"] == 3 for p in sharded)


def test_search_space_refuses_a_bad_limit() -> None:
    with pytest.raises(ConfigError, match="pipeline_max_zero must be a ZeRO stage"):
        SearchSpace(pipeline_max_zero=4)


@pytest.mark.parametrize("software", ["deepspeed-zero2", "deepspeed-zero3"])
def test_search_ranks_only_plans_predict_runs(software: str) -> None:
    base = _base(software)
    res = search_plans(
        base, gpus=(16,), global_batches=(64,), analytic_k=2, confirm_k=0, budget_s=None
    )
    assert res.ranked
    assert res.rejected[PIPELINE_ZERO_REASON] > 0
    # nothing was screened only to be refused: the enumeration left it out
    assert not any("pipeline_max_zero" in reason for reason in res.pruned)
    for c in res.ranked:
        assert c.plan["pp"] == 1 or c.plan["zero"] <= 1, c.label
        resolve(Scenario.from_dict(c.scenario))  # predict accepts every ranked plan


def test_every_plan_refused_leaves_an_empty_ranking_that_says_why() -> None:
    space = SearchSpace(tp_degrees=(1,), pp_degrees=(2,))
    res = search_plans(
        _base("deepspeed-zero3"), gpus=(16,), global_batches=(64,), space=space,
        analytic_k=0, confirm_k=0, budget_s=None,
    )  # fmt: skip
    assert not res.ranked
    assert res.enumerated == 0
    assert res.rejected[PIPELINE_ZERO_REASON] > 0


def test_a_lifted_limit_in_the_base_searches_pipelined_zero3() -> None:
    """The base's software options are the stack the search enumerates for."""
    space = SearchSpace(tp_degrees=(1,), pp_degrees=(2,), recompute=("none",))
    base = _base("deepspeed-zero3", software_options={"pipeline_max_zero": 3})
    res = search_plans(
        base, gpus=(16,), global_batches=(64,), space=space, analytic_k=0, confirm_k=0,
        budget_s=None,
    )  # fmt: skip
    assert res.ranked and all(c.plan["pp"] == 2 and c.plan["zero"] == 3 for c in res.ranked)
    assert PIPELINE_ZERO_REASON not in res.rejected
