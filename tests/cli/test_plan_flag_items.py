"""``--plan``'s items under their scenario keys, read in one place
(:func:`perfmodel.cli._common.plan_flag_items`): the merge into the scenario and the
scenario-file error's "this key came from a flag" agree on ``mb`` being ``microbatch``."""

from __future__ import annotations

import argparse

import pytest

from perfmodel.cli._common import merge_plan_flag, plan_flag_items
from perfmodel.cli.predict_checks import name_the_file
from perfmodel.errors import ConfigError


def _args(**kw: object) -> argparse.Namespace:
    base = dict(scenario="job.toml", plan=None, nodes=None, gpus=None, model_arg=None)
    return argparse.Namespace(**{**base, **kw})


def test_items_under_scenario_keys() -> None:
    assert plan_flag_items("tp2 pp4 mb8") == {"tp": 2, "pp": 4, "microbatch": 8}


def test_merge_and_the_file_error_read_the_same_keys() -> None:
    fields: dict[str, object] = {"plan": "old"}
    merge_plan_flag(fields, _args(plan="tp2 mb8", microbatch=None, tp=None))
    assert fields == {"tp": 2, "microbatch": 8}
    # a bad microbatch set by --plan is the flag's, not the file's: left unnamed
    exc = ConfigError("microbatch 8 does not divide the batch", where="scenario.microbatch")
    name_the_file(exc, _args(plan="tp2 mb8"), flag_keys=())
    assert exc.where == "scenario.microbatch"
    # without --plan the same error came from the file and names it
    exc = ConfigError("microbatch 8 does not divide the batch", where="scenario.microbatch")
    name_the_file(exc, _args(), flag_keys=())
    assert exc.where == "job.toml: scenario.microbatch"


def test_merge_refuses_a_contradicting_flag() -> None:
    with pytest.raises(ConfigError, match="--plan sets microbatch=8 but --microbatch says 4"):
        merge_plan_flag({}, _args(plan="mb8", microbatch=4, tp=None))
