"""Training steps measured on an H100 SXM5 in both convolution memory formats, predicted.

Source: ``calibration/h100-sxm5-80gb/layout/steps-cuda.json`` (``calibration/scripts/
layout_steps.sh`` on a lent H100, 23 Nov 2026: PyTorch 2.11, cuDNN 9.19; whole-step medians of 20
un-instrumented steps). ResNet-50 (torchvision) in bf16 autocast and TF32, channels_last and
NCHW, and the CIFAR VGG-19-BN (bearpaw layout, NCHW as its scripts run it) in FP32 and TF32.
No step fed any default or fit. Printed with ``pytest -s``; asserted: the model orders the two
formats as measured (NCHW slower for tensor-core precisions), and the measured model is the zoo
model (same parameter count).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.compute import ComputeParams

STEPS = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb" / "layout"
PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb.json"


@pytest.fixture(scope="module")
def rows() -> list[tuple[str, float, float, float]]:
    path = STEPS / "steps-cuda.json"
    if not path.exists():
        pytest.skip("H100 layout steps not in this checkout")
    from perfmodel.calibration import load_profile
    from perfmodel.calibration.validate import (
        _step_layout,
        load_measurements,
        predict_step,
        step_workload,
    )

    prof = load_profile(PROFILE)
    gpu = prof.device_spec()
    out = []
    for m in load_measurements(path):
        if not m.key.startswith("step/"):
            continue
        w, opt = step_workload(m)
        assert w.total_params == m.params["parameters"], m.key
        pred = []
        for params in (ComputeParams.for_gpu(gpu), prof.compute_params):
            f, b, o, _ = predict_step(w, opt, gpu, _step_layout(params, gpu, m))
            pred.append(f + b + o)
        out.append((m.key, m.time_s, pred[0], pred[1]))
    print(f"\n{'step':<48}{'measured':>10}{'datasheet':>11}{'err':>8}{'profile':>10}{'err':>8}")
    for key, t, d, c in out:
        print(
            f"{key:<48}{t * 1e3:>8.2f}ms{d * 1e3:>9.2f}ms{d / t - 1:>+8.1%}{c * 1e3:>8.2f}ms{c / t - 1:>+8.1%}"
        )
    return out


@pytest.mark.parametrize("pair", [("resnet50/bf16/b256", "bf16"), ("resnet50/tf32/b128", "tf32")])
def test_nchw_is_slower_as_measured(rows: list, pair: tuple[str, str]) -> None:
    by = {k: (t, d, c) for k, t, d, c in rows}
    base, nchw = by[f"step/{pair[0]}"], by[f"step/{pair[0]}/memory_formatnchw"]
    measured = nchw[0] / base[0]
    predicted = nchw[1] / base[1]
    print(f"{pair[0]}: NCHW / channels_last measured {measured:.2f}x, predicted {predicted:.2f}x")
    assert measured > 1.2 and predicted > 1.2
