"""Calibration that draws real power: normal operands, sustained runs, clock/power/throttle logs,
and how a burst profile's GEMM peaks enter training predictions. CPU only, with fakes."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from types import MappingProxyType

import pytest

from perfmodel.calibration import load_profile
from perfmodel.calibration.backends import (
    DEFAULT_SUSTAIN_S,
    SUSTAIN_MIN_FLOP,
    Backend,
    NvmlTelemetry,
    Op,
    TelemetrySample,
    TorchBackend,
    decode_throttle_reasons,
    make_telemetry,
    summarize_telemetry,
)
from perfmodel.calibration.measurement import BenchKind
from perfmodel.calibration.suite import _single
from perfmodel.calibration.timing import TimingPolicy
from perfmodel.dtypes import DType

PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb.json"


class FakeNvml:
    """The pynvml calls NvmlTelemetry makes, with fixed answers (clock in MHz, power in mW)."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, *, fail_power: bool = False) -> None:
        self.fail_power = fail_power

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlDeviceGetClockInfo(self, h: str, which: int) -> int:
        return 1755

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        if self.fail_power:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 699_500

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: str) -> int:
        return 0x4

    def nvmlDeviceGetTemperature(self, h: str, which: int) -> int:
        return 71


def test_nvml_reading_in_si_units_and_missing_fields() -> None:
    s = NvmlTelemetry(FakeNvml()).read()
    assert s == TelemetrySample(1.755e9, 699.5, 0x4, 71.0)
    s = NvmlTelemetry(FakeNvml(fail_power=True)).read()
    assert s.power_w is None and s.sm_clock_hz == 1.755e9


def test_throttle_reasons_and_summary() -> None:
    assert decode_throttle_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_throttle_reasons(0x1000) == ["0x1000"]
    out = summarize_telemetry(
        [TelemetrySample(1.9e9, 600.0, 0), TelemetrySample(1.8e9, 690.0, 0x4, 70.0)]
    )
    assert out == {
        "sm_clock_mhz": 1850.0,
        "power_w": 645.0,
        "throttle_mask": 4,
        "throttle": ["sw_power_cap"],
        "temperature_c": 70.0,
    }
    assert summarize_telemetry([]) == {}


def test_no_nvml_no_telemetry() -> None:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert make_telemetry() is None
    else:  # pragma: no cover - a machine with NVML
        pytest.skip("pynvml installed")


def _bare_torch_backend(sustain_s: float, telemetry: object) -> TorchBackend:
    """A TorchBackend without torch: only the timing wrapper's state (the wrapper is plain
    Python; the sample timer is replaced by a counter)."""
    be = object.__new__(TorchBackend)
    be.sustain_s = sustain_s
    be.telemetry = telemetry
    be._readings = []
    be.calls = []

    def sample(fn, inner):  # the eager timer the heating loop uses
        be.calls.append(("heat", inner))
        for _ in range(inner):
            fn()
        return 1e-3 * inner

    be.sample = sample
    return be


def test_large_operations_are_sustained_before_timing_and_logged() -> None:
    tel = NvmlTelemetry(FakeNvml())
    be = _bare_torch_backend(0.05, tel)
    op = Op(lambda: time.sleep(0.002), work_flop=SUSTAIN_MIN_FLOP)
    timed = []

    def timer(fn, inner):
        timed.append(inner)
        return 1e-3

    wrapped = be._sustained(op, timer)
    t0 = time.monotonic()
    wrapped(op.fn, 1)  # the warm-up call heats first
    assert time.monotonic() - t0 >= 0.05
    assert be.calls and all(kind == "heat" for kind, _ in be.calls)
    n_heat = len(be.calls)
    wrapped(op.fn, 4)
    assert len(be.calls) == n_heat  # heated once only
    assert timed == [1, 4]
    assert be.telemetry_params()["throttle"] == ["sw_power_cap"]
    assert be.telemetry_params()["sm_clock_mhz"] == 1755.0


def test_small_operations_are_not_sustained_and_telemetry_errors_are_ignored() -> None:
    class Broken:
        def read(self):
            raise RuntimeError("gone")

    be = _bare_torch_backend(10.0, Broken())
    op = Op(lambda: None, work_flop=SUSTAIN_MIN_FLOP / 10)
    wrapped = be._sustained(op, lambda fn, inner: 1e-3)
    t0 = time.monotonic()
    assert wrapped(op.fn, 1) == 1e-3
    assert time.monotonic() - t0 < 1.0 and not be.calls
    assert be.telemetry_params() == {}


def test_measurements_carry_the_telemetry() -> None:
    class Fake(Backend):
        name = "fake"

        def telemetry_params(self):
            return {"sm_clock_mhz": 1800.0, "power_w": 700.0, "throttle": ["sw_power_cap"]}

    run = _single(BenchKind.GEMM, "gemm/x", {"m": 1}, lambda be: Op(lambda: None, 1.0))
    (m,) = run(Fake(), TimingPolicy(target_s=0.005, min_repeats=1, max_repeats=2))
    assert m.params["sm_clock_mhz"] == 1800.0 and m.params["throttle"] == ["sw_power_cap"]


def test_burst_profile_peaks_are_capped_for_training_predictions() -> None:
    prof = load_profile(PROFILE)
    assert not prof.sustained_gemms  # uniform [0.5, 1.5) bursts (made before issue 24)
    burst, trained = prof.compute_params, prof.training_compute_params
    assert burst.peak_flops[DType.BF16] == pytest.approx(897.60e12, rel=1e-4)
    assert trained.peak_flops[DType.BF16] == pytest.approx(755e12)
    assert trained.peak_flops[DType.FP8] == pytest.approx(1354e12)
    assert trained.peak_flops[DType.FP32] == burst.peak_flops[DType.FP32]  # CUDA cores: kept
    assert trained.memory_efficiency == burst.memory_efficiency
    assert "capped" in trained.source
    sustained = dataclasses.replace(
        prof,
        provenance=MappingProxyType(
            {**prof.provenance, "operands": "normal", "sustain_s": DEFAULT_SUSTAIN_S}
        ),
    )
    assert sustained.sustained_gemms
    assert sustained.training_compute_params.peak_flops == burst.peak_flops


def test_torch_backend_records_its_method_in_the_provenance() -> None:
    pytest.importorskip("torch")
    be = TorchBackend("cpu")
    prov = be.provenance()
    assert prov["operands"] == "normal" and prov["sustain_s"] == 0.0
    assert prov["telemetry"] == "none"
