"""The screen applies the same eager host floor and memory format as predict."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.search.screen import PlanScreen


@pytest.mark.parametrize("batch", [2, 256])
@pytest.mark.parametrize("fmt", [None, "nhwc"])
def test_single_gpu_screen_equals_predict(batch: int, fmt: str | None) -> None:
    base = dict(system="dgx-h100", gpus=1, model="resnet50", batch_per_gpu=batch,
                precision="bf16", software="pytorch-ddp", memory_format=fmt)  # fmt: skip
    screen = PlanScreen(base)({})
    pred = predict(Scenario(**base, fidelity="analytic"), baseline=False)  # type: ignore[arg-type]
    assert screen["iteration_time_s"] == pytest.approx(pred.iteration_time_s, rel=0.02)
    if batch == 2:  # host-bound: the eager issue sets the step
        assert screen["breakdown"]["host_s"] > 0.5 * screen["iteration_time_s"]
