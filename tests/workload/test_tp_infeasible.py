"""A tensor-parallel degree the model cannot be sharded by is an infeasible plan, raised where it
is known (the zoo), with the degrees that would fit."""

import pytest

from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.workload import build_model


def test_tp_not_dividing_heads_is_infeasible_with_what_fits():
    with pytest.raises(InfeasiblePlanError) as info:
        build_model("gpt", batch_size=1, tp=8, heads=12)
    assert info.value.value == 8 and info.value.where == "tp"
    assert "tp values that fit: [1, 2, 3, 4, 6, 12]" in str(info.value)
    assert isinstance(info.value, ConfigError)
