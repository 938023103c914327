"""Step specs for the layout measurements: memory_format and the CIFAR VGG-19-BN step."""

from __future__ import annotations

import pytest

from perfmodel.calibration.steps import StepSpec, memory_format_name
from perfmodel.calibration.suite import parse_step
from perfmodel.errors import ConfigError
from perfmodel.workload.zoo import build_model


def test_memory_format_argument() -> None:
    spec = parse_step("resnet50:256:bf16:memory_format=nchw")
    assert spec.key == "resnet50/bf16/b256/memory_formatnchw"
    assert memory_format_name(spec.args) == "nchw"
    assert memory_format_name({}) == "channels_last"
    assert memory_format_name({}, default="nchw") == "nchw"
    assert memory_format_name({"memory_format": "NHWC"}) == "channels_last"
    with pytest.raises(ConfigError, match="nwhc"):
        memory_format_name({"memory_format": "nwhc"})


def test_cifar_vgg_step_is_the_zoo_model() -> None:
    torch = pytest.importorskip("torch", reason="the torch step builder needs torch")
    from perfmodel.calibration.steps import _build_torch

    model, x, _y, _, opt = _build_torch(StepSpec("vgg19_bn_cifar", 2, "fp32"), torch.device("cpu"))
    zoo = build_model("vgg19_bn_cifar", batch_size=2)
    assert sum(p.numel() for p in model.parameters()) == zoo.total_params == 20_040_522
    assert tuple(model(x).shape) == (2, 10)
    assert x.is_contiguous()  # NCHW, as the CIFAR scripts run it
    assert opt == "sgd-momentum"
