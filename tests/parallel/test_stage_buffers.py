"""Batch-norm running statistics are part of every plan's per-GPU memory (not only the
single-GPU ``memory_breakdown``), split over pipeline stages by their batch-norm layers."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.parallel.stage_memory import stage_buffer_bytes
from perfmodel.workload.layers import LayerKind
from perfmodel.workload.memory import memory_breakdown
from perfmodel.workload.zoo import build_model


def test_stage_buffers_split_exactly_over_stages() -> None:
    w = build_model("resnet50", batch_size=8)
    assert w.buffers == 53_120  # 2 x 26,560 batch-norm channels (torchvision ResNet-50)
    half = len(w.layers) // 2
    a = stage_buffer_bytes(w, w.layers[:half])
    b = stage_buffer_bytes(w, w.layers[half:])
    assert a > 0 and b > 0
    assert a + b == pytest.approx(4.0 * w.buffers)


def test_no_buffers_without_batch_norm() -> None:
    w = build_model("gpt2", batch_size=1)
    assert any(la.kind is LayerKind.NORM for la in w.layers)  # layer norms, no buffers
    assert stage_buffer_bytes(w, w.layers) == 0.0


def test_single_gpu_plan_weights_match_memory_breakdown() -> None:
    """A 1-GPU plan's weights equal the workload memory model's, buffers included."""
    sc = Scenario(system="dgx1-v100", gpus=1, model="resnet50", batch_per_gpu=32,
                  software="pytorch-ddp", fidelity="analytic")  # fmt: skip
    mem = predict(sc, baseline=False).memory
    w = build_model("resnet50", batch_size=32)
    assert mem.weights_bytes == pytest.approx(memory_breakdown(w).weights_bytes)
