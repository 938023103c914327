"""Helpers of the calibration tests (a uniquely named module: tests are not packages)."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.calibration.profile import CalibrationProfile, DeviceInfo, DeviceKind

REPO = Path(__file__).resolve().parents[2]
H100_PROFILE = REPO / "calibration" / "h100-sxm5-80gb.json"
FIXTURES = REPO / "tests" / "fixtures" / "calibration"


def make_measurement(kind: BenchKind, key: str, time_s: float, **params: object) -> Measurement:
    return Measurement(
        kind=kind,
        key=key,
        params=params,
        timing=TimingStats(time_s, time_s, time_s, time_s, 5),
    )


def small_gpu_profile() -> CalibrationProfile:
    """A small, complete profile of an H100 (one GEMM) for file-format tests."""
    return CalibrationProfile(
        device=DeviceInfo(
            DeviceKind.CUDA, "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", 85_000_000_000, 132
        ),
        provenance=MappingProxyType(
            {"created_utc": "2026-11-23T00:00:00+00:00", "perfmodel_version": "0.1.0"}
        ),
        measurements=(
            make_measurement(
                BenchKind.GEMM,
                "gemm/bf16/m4096-n4096-k4096-b1",
                2e-4,
                m=4096,
                n=4096,
                k=4096,
                batch=1,
                dtype="bf16",
            ),
        ),
        complete=True,
    )
