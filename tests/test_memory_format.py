"""Convolution memory format (NCHW vs channels_last) from the software preset or the scenario."""

from __future__ import annotations

import json

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.compute.params import parse_memory_format
from perfmodel.errors import ConfigError
from perfmodel.parallel.software import PRESETS, get_preset


def _step_ms(**kw: object) -> float:
    base = dict(system="dgx1-v100", gpus=1, model="resnet50", batch_per_gpu=32, fidelity="analytic")
    base.update(kw)
    return predict(Scenario(**base), baseline=False).iteration_time_s * 1e3  # type: ignore[arg-type]


def test_framework_defaults() -> None:
    """PyTorch stacks default to contiguous NCHW, every other stack to NHWC."""
    for p in PRESETS.values():
        assert p.memory_format == ("nchw" if p.eager else "nhwc"), p.name
    assert get_preset("pytorch-ddp").memory_format == "nchw"
    assert get_preset("tf-mirrored").memory_format == "nhwc"


@pytest.mark.parametrize(
    ("text", "want"),
    [("nchw", "nchw"), ("NHWC", "nhwc"), ("channels_last", "nhwc"), ("contiguous", "nchw")],
)
def test_spellings(text: str, want: str) -> None:
    assert parse_memory_format(text) == want


def test_unknown_format_names_the_value() -> None:
    with pytest.raises(ConfigError, match="nwhc"):
        predict(
            Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=8, memory_format="nwhc")
        )


def test_nchw_costs_transposes_only_on_tensor_cores() -> None:
    """cuDNN transposes NCHW tensors around tensor-core convolutions; FP32 CUDA-core kernels are
    native NCHW, so FP32 is unchanged."""
    fp16 = {f: _step_ms(precision="fp16", memory_format=f) for f in ("nchw", "nhwc")}
    fp32 = {f: _step_ms(precision="fp32", memory_format=f) for f in ("nchw", "nhwc")}
    assert fp16["nchw"] > 1.2 * fp16["nhwc"]
    assert fp32["nchw"] == pytest.approx(fp32["nhwc"])
    # no preset override: pytorch-ddp (the default software) is NCHW, tf-mirrored NHWC
    assert _step_ms(precision="fp16") == pytest.approx(fp16["nchw"])
    assert _step_ms(precision="fp16", software="tf-mirrored") < fp16["nchw"]


def test_transformers_do_not_care() -> None:
    a = _step_ms(
        model="gpt2", batch_per_gpu=2, precision="bf16", system="dgx-a100", memory_format="nchw"
    )
    b = _step_ms(
        model="gpt2", batch_per_gpu=2, precision="bf16", system="dgx-a100", memory_format="nhwc"
    )
    assert a == pytest.approx(b)


def test_cli_flag_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--system", "dgx1-v100", "--gpus", "1", "--model", "resnet50",
            "--batch-per-gpu", "32", "--precision", "fp16", "--fidelity", "analytic", "--json"]  # fmt: skip
    assert main(args) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*args, "--memory-format", "channels_last"]) == 0
    nhwc = json.loads(capsys.readouterr().out)
    assert default["plan"]["memory_format"] == "nchw"
    assert nhwc["plan"]["memory_format"] == "nhwc"
    assert nhwc["scenario"]["memory_format"] == "channels_last"
    assert nhwc["iteration_time_s"] < default["iteration_time_s"]
