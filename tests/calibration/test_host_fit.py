"""The eager host cost per kernel (HOST_DISPATCH_S) is the documented fit over measured steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.calibration.host import fit_eager_host
from perfmodel.calibration.validate import load_measurements
from perfmodel.compute.params import HOST_DISPATCH_S
from perfmodel.errors import CalibrationError
from perfmodel.hardware import get_gpu

STEPS = Path(__file__).resolve().parents[2] / "calibration/h100-sxm5-80gb/hostbound/steps-cuda.json"
HELD_OUT = ("step/resnet50/bf16/b32",)


@pytest.fixture(scope="module")
def measurements() -> list:
    if not STEPS.exists():
        pytest.skip("H100 host-bound steps not in this checkout")
    return load_measurements(STEPS)


def test_constant_is_the_fit(measurements: list) -> None:
    fit = fit_eager_host(measurements, get_gpu("H100-SXM5-80GB"), exclude=HELD_OUT)
    print(
        f"\neager host per modelled kernel: {fit.per_kernel_s * 1e6:.2f} us over "
        f"{len(fit.points)} host-bound steps (range {fit.spread[0] * 1e6:.1f}-"
        f"{fit.spread[1] * 1e6:.1f} us)"
    )
    for p in fit.points:
        print(f"  {p.key:45s} step {p.step_s * 1e3:6.2f} ms busy {p.busy_s * 1e3:5.2f} ms "
              f"kernels {p.kernels:5.0f} -> {p.per_kernel_s * 1e6:5.1f} us")  # fmt: skip
    assert len(fit.points) == 10
    assert all(p.busy_s < 0.5 * p.step_s for p in fit.points)
    assert HOST_DISPATCH_S["pytorch-eager"] == pytest.approx(fit.per_kernel_s, abs=0.01e-6)


def test_gpu_bound_steps_never_enter(measurements: list) -> None:
    gpu_bound = [m for m in measurements if m.key.startswith("step/")
                 and m.params["traced_device_busy_s"] >= 0.5 * m.time_s]  # fmt: skip
    with pytest.raises(CalibrationError, match="host-bound"):
        fit_eager_host(gpu_bound, get_gpu("H100-SXM5-80GB"))
