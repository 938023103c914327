"""Fixtures of the calibration tests."""

from __future__ import annotations

import pytest
from calibration_testlib import small_gpu_profile

from perfmodel.calibration.profile import CalibrationProfile


@pytest.fixture
def gpu_profile() -> CalibrationProfile:
    """A small, complete profile of an H100 (one GEMM) for file-format tests."""
    return small_gpu_profile()
