"""Calibration: microbenchmarks -> measurements -> fitted parameters in a profile.

Public entry points:

- :func:`load_profile` (used by ``perfmodel predict --calibration``) and :class:`CalibrationProfile`;
- :func:`calibrate` (the ``perfmodel calibrate`` command as a function);
- :mod:`perfmodel.calibration.fit` (robust least squares with uncertainty),
  :mod:`perfmodel.calibration.kineto` (PyTorch profiler traces -> per-layer times),
  :mod:`perfmodel.calibration.nccl` (nccl-tests logs -> link measurements),
  :mod:`perfmodel.calibration.validate` (the validation report).

Importing this package imports neither PyTorch nor SimPy.
"""

from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.calibration.profile import (
    FORMAT_VERSION,
    CalibrationProfile,
    DeviceInfo,
    DeviceKind,
    FitSummary,
    load_profile,
    read_profile,
)
from perfmodel.calibration.runner import calibrate, finish_profile

__all__ = [
    "FORMAT_VERSION",
    "BenchKind",
    "CalibrationProfile",
    "DeviceInfo",
    "DeviceKind",
    "FitSummary",
    "Measurement",
    "TimingStats",
    "calibrate",
    "finish_profile",
    "load_profile",
    "read_profile",
]
