"""Expert-count arguments of the MoE builder are integers, never truncated."""

from __future__ import annotations

import pytest

from perfmodel.errors import ConfigError
from perfmodel.workload.zoo import build_model
from perfmodel.workload.zoo.moe import _positive


def test_positive_accepts_integral_values() -> None:
    assert _positive("experts", 8) == 8
    assert _positive("top_k", 2.0) == 2


@pytest.mark.parametrize("value", [8.7, 2.5, True, 0])
def test_positive_refuses_fractions_bools_and_small(value: object) -> None:
    with pytest.raises(ConfigError, match="experts must be an integer >= 1"):
        _positive("experts", value)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", ["moe", "deepseek_v3"])
def test_more_routed_experts_than_experts_is_named_first(model: str) -> None:
    # top_k > experts is the error, whatever else the arguments say: DeepSeek-V3's 8 router
    # groups of 256 experts, cut to 8 experts, were reported as groups too small for top_k
    with pytest.raises(ConfigError, match=r"^top_k=10 exceeds experts=8$") as err:
        build_model(model, batch_size=1, precision="bf16", experts=8, top_k=10)
    assert err.value.where == "top_k"
