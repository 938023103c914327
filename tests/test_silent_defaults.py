"""Issue 28, item 6: silent defaults become stated ones."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main

ROOT = Path(__file__).resolve().parents[1]
CPU_PROFILE = ROOT / "calibration" / "cpu-dev-amd-epyc-1thread.json"
RN50_256 = Scenario(
    system="dgx1-v100", model="resnet50", batch_per_gpu=256, gpus=1, fidelity="analytic"
)


def test_tf_mirrored_does_not_accumulate_gradients() -> None:
    tf = predict(replace(RN50_256, software="tf-mirrored"), baseline=False)
    assert tf.plan["microbatch_size"] == 256 and not tf.fits_in_memory
    assert any("does not accumulate gradients" in d for d in tf.defaults)
    torch = predict(RN50_256, baseline=False)  # PyTorch can: the largest micro-batch that fits
    assert torch.plan["microbatch_size"] == 128 and torch.fits_in_memory
    assert any("chosen automatically" in d for d in torch.defaults)


def test_curve_states_each_default_once(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "256"]
    assert main([*argv, "--gpus", "1,2,4", "--fidelity", "analytic", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.count("micro-batch 128 chosen automatically") == 1
    assert "all rows: micro-batch 128" in out and "1-GPU baseline runs" not in out


@pytest.mark.parametrize(
    ("model", "kind"), [("gpt2", "unfused attention"), ("gpt", "flash attention")]
)
def test_maxbatch_and_predict_name_the_attention_kernel(
    model: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["model", "maxbatch", model, "--gpu", "A100-SXM4-80GB", "--precision", "bf16"]
    assert main([*argv, "--model-arg", "seq_len=1024"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert kind in first and "--model-arg flash_attention=" in first and "pytorch-ddp" in first
    pred = ["predict", "--system", "dgx-a100", "--model", model, "--batch-per-gpu", "4"]
    assert main([*pred, "--gpus", "1", "--fidelity", "analytic", "--precision", "bf16"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(kind)


def test_cpu_profile_names_its_backend_and_explains_mfu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["predict", "--system", "calibrated", "--calibration", str(CPU_PROFILE)]
    assert main([*argv, "--model", "resnet18", "--batch-per-gpu", "8", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "PyTorch on the CPU" not in out and "numpy kernels as calibrated" in out.splitlines()[0]
    mfu = float(out.split("(MFU ")[1].split("%")[0])
    if mfu > 100:
        assert "note: MFU above 100%" in out


@pytest.mark.parametrize(("model", "noop"), [("resnet50", True), ("gpt", True), ("gpt2", False)])
def test_selective_recompute_that_changes_nothing_says_so(model: str, noop: bool) -> None:
    sc = Scenario(
        system="dgx-a100",
        model=model,
        batch_per_gpu=4,
        gpus=1,
        precision="bf16",
        recompute="selective",
        fidelity="analytic",
    )
    rep = predict(sc, baseline=False)
    assert any("re-runs nothing" in d for d in rep.defaults) is noop
