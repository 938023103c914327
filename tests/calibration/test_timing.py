"""Timing statistics, the timing policy, rotation of input sets."""

from __future__ import annotations

import time

import pytest

from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.calibration.timing import Rotation, TimingPolicy, time_operation
from perfmodel.errors import CalibrationError


def test_stats_median_and_quantiles():
    s = TimingStats.from_samples([5.0, 1.0, 2.0, 4.0, 3.0])
    assert (s.median_s, s.min_s, s.repeats) == (3.0, 1.0, 5)
    assert s.p10_s == pytest.approx(1.4) and s.p90_s == pytest.approx(4.6)
    with pytest.raises(CalibrationError):
        TimingStats.from_samples([])
    with pytest.raises(CalibrationError):
        TimingStats.from_samples([1.0, float("nan")])


def test_time_operation_measures_a_known_sleep():
    stats = time_operation(
        lambda: time.sleep(0.002), policy=TimingPolicy(target_s=0.03, min_repeats=5)
    )
    assert 0.0019 < stats.median_s < 0.02
    assert stats.repeats >= 5


def test_short_operations_are_batched_per_sample():
    calls = []
    stats = time_operation(
        lambda: calls.append(1), policy=TimingPolicy(target_s=0.01, min_sample_s=1e-3)
    )
    assert stats.median_s < 1e-4
    assert len(calls) > 5 * stats.repeats  # many calls per sample


def test_rotation_cycles_and_counts():
    r = Rotation(["a", "b", "c"])
    assert [r.next() for _ in range(5)] == ["a", "b", "c", "a", "b"]
    assert Rotation.count(set_bytes=1e9, cache_bytes=5e7) == 1 + 1
    assert Rotation.count(set_bytes=1e3, cache_bytes=5e7, max_sets=16) == 16


def test_measurement_round_trip_and_rates():
    m = Measurement(
        BenchKind.GEMM,
        "k",
        {"m": 2},
        TimingStats(2.0, 1.0, 1.5, 3.0, 7),
        work_flop=10.0,
        work_bytes=4.0,
    )
    assert Measurement.from_dict(m.to_dict()) == m
    assert m.achieved_flops == 5.0 and m.achieved_Bps == 2.0
    with pytest.raises(CalibrationError, match="kind"):
        Measurement.from_dict({**m.to_dict(), "kind": "warp-drive"})
