"""Expert-count arguments of the MoE builder are integers, never truncated."""

from __future__ import annotations

import pytest

from perfmodel.errors import ConfigError
from perfmodel.workload.zoo.moe import _positive


def test_positive_accepts_integral_values() -> None:
    assert _positive("experts", 8) == 8
    assert _positive("top_k", 2.0) == 2


@pytest.mark.parametrize("value", [8.7, 2.5, True, 0])
def test_positive_refuses_fractions_bools_and_small(value: object) -> None:
    with pytest.raises(ConfigError, match="experts must be an integer >= 1"):
        _positive("experts", value)  # type: ignore[arg-type]
