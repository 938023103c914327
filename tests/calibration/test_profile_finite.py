"""A profile holding a non-finite measured number is refused before it is written
(:func:`perfmodel.calibration.profile.check_finite`), naming the number as the file names it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from perfmodel.calibration.measurement import TimingStats
from perfmodel.calibration.profile import CalibrationProfile, read_profile
from perfmodel.errors import CalibrationError


def _with(profile: CalibrationProfile, **changes: object) -> CalibrationProfile:
    (m,) = profile.measurements
    return replace(profile, measurements=(replace(m, **changes),))


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"timing": TimingStats(math.nan, 1e-4, 1e-4, 1e-4, 5)}, "time_s"),
        ({"timing": TimingStats(1e-4, math.inf, 1e-4, 1e-4, 5)}, "min_s"),
        ({"timing": TimingStats(1e-4, 1e-4, 1e-4, math.nan, 5)}, "p90_s"),
        ({"work_flop": math.inf}, "work_flop"),
        ({"work_bytes": math.nan}, "work_bytes"),
    ],
)
def test_non_finite_measurement_is_refused_and_the_old_file_kept(
    gpu_profile: CalibrationProfile, tmp_path, changes: dict, name: str
) -> None:
    path = tmp_path / "profile.json"
    gpu_profile.save(path)
    before = path.read_text()
    with pytest.raises(CalibrationError, match=rf": {name} is (nan|inf); refusing"):
        _with(gpu_profile, **changes).save(path)
    assert path.read_text() == before


def test_finite_profile_round_trips(gpu_profile: CalibrationProfile, tmp_path) -> None:
    path = tmp_path / "profile.json"
    gpu_profile.save(path)
    assert read_profile(path).measurements == gpu_profile.measurements
