"""The synchronous step waits for its slowest GPU (issue 24, :mod:`perfmodel.parallel.straggler`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError
from perfmodel.parallel.straggler import (
    PER_GPU_SPEED_CV,
    expected_max_std_normal,
    straggler_wait_s,
)


def test_speed_spread_from_the_source() -> None:
    """8% whisker-to-whisker spread (Sinha et al. SC22) over +-2.698 sigma: 1.48%."""
    assert PER_GPU_SPEED_CV == pytest.approx(0.0148258, rel=1e-5)


@pytest.mark.parametrize("n", [2, 8, 64, 1024])
def test_blom_against_the_order_statistic(n: int) -> None:
    """Blom's closed form against a Monte Carlo of the maximum of ``n`` normal draws: 5% at
    ``n = 2`` (0.589 for the exact 1/sqrt(pi) = 0.564), 1% from ``n = 8`` on."""
    rng = np.random.default_rng(24)
    draws = 400_000 // n
    mc = rng.standard_normal((draws, n)).max(axis=1).mean()
    tol = 0.05 if n == 2 else 0.01
    assert expected_max_std_normal(n) == pytest.approx(mc, rel=tol)
    assert expected_max_std_normal(2) == pytest.approx(0.5642, rel=0.05)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=100_000), st.integers(min_value=1, max_value=100_000))
def test_more_gpus_wait_longer(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert 0.0 <= expected_max_std_normal(lo) <= expected_max_std_normal(hi)
    assert straggler_wait_s(2.0, hi) == pytest.approx(2 * straggler_wait_s(1.0, hi))


def test_golden_and_errors() -> None:
    # 1 s of compute on 1,024 GPUs: 1.4826% x 3.2337 = 47.9 ms; one GPU waits for nobody
    assert straggler_wait_s(1.0, 1024) == pytest.approx(0.0479, abs=1e-4)
    assert straggler_wait_s(5.0, 1) == 0.0
    with pytest.raises(ConfigError):
        straggler_wait_s(-1.0, 8)
    with pytest.raises(ConfigError):
        expected_max_std_normal(2.5)  # type: ignore[arg-type]


def _llama(gpus: int, nodes: int = 1) -> Scenario:
    return Scenario(
        system="dgx-a100",
        nodes=nodes,
        gpus=gpus,
        model="gpt",
        model_args={"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 512, "vocab": 8000},
        global_batch=8 * gpus,
        precision="bf16",
        software="megatron-core",
        fidelity="analytic",
    )


def test_the_step_charges_the_wait_on_compute() -> None:
    """The wait is the critical GPU's compute x sigma x E[max], its own breakdown class, and
    the classes still sum to the iteration; one GPU is charged nothing."""
    one = predict(_llama(1), baseline=False)
    assert one.breakdown.sync_wait_s == 0.0
    for gpus, nodes in ((8, 1), (32, 4)):
        r = predict(_llama(gpus, nodes), baseline=False)
        b = r.breakdown
        assert b.sync_wait_s == pytest.approx(straggler_wait_s(b.compute_s, gpus), rel=1e-12)
        assert b.total_s == pytest.approx(r.iteration_time_s, rel=1e-12)
        assert r.to_dict()["breakdown"]["sync_wait_s"] == b.sync_wait_s
        assert "slowest-GPU wait" in r.format_table()
