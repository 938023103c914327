"""Issue 28, item 5: precision as the framework runs it.

PyTorch runs "fp32" convolutions on TF32 tensor cores on Ampere and newer by default
(``torch.backends.cudnn.allow_tf32 = True``) while matmuls stay FP32
(``torch.backends.cuda.matmul.allow_tf32 = False``, PyTorch >= 1.12); a precision the GPU cannot
run (bf16 on a V100) is refused, as docs/cli.md promises.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.api import TF32_CONV_NOTE, Scenario, check_precision_runs, predict
from perfmodel.cli import main
from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import build_recipe
from perfmodel.parallel.software import get_preset
from perfmodel.workload import build_model
from perfmodel.workload.layers import LayerKind
from perfmodel.workload.memory import Optimizer


def _layers(model: str, **kw: object) -> dict[LayerKind, object]:
    wl = build_model(model, batch_size=64, precision="fp32", **kw)
    out: dict[LayerKind, object] = {}
    for la in wl.layers:
        out.setdefault(la.kind, la)
    return out


@pytest.mark.parametrize("gpu", ["A100-SXM4-80GB", "H100-SXM5-80GB"])
def test_fp32_convolutions_run_tf32_and_matmuls_stay_fp32(gpu: str) -> None:
    spec = get_gpu(gpu)
    plain = ComputeModel(spec, ComputeParams.for_gpu(spec))
    torch_like = ComputeModel(spec, ComputeParams.for_gpu(spec, fp32_conv_tf32=True))
    tf32 = ComputeModel(spec, ComputeParams.for_gpu(spec))
    conv = _layers("resnet50")[LayerKind.CONV]
    lin = _layers("gpt", hidden=1024, layers=2, heads=16, seq_len=512)[LayerKind.LINEAR]
    assert (
        torch_like.layer_time(conv, "fp32").total_s < 0.5 * plain.layer_time(conv, "fp32").total_s
    )
    assert torch_like.layer_time(conv, "fp32") == tf32.layer_time(conv, "tf32")
    assert torch_like.layer_time(lin, "fp32") == plain.layer_time(lin, "fp32")


def test_no_tf32_units_no_change() -> None:
    v100 = get_gpu("V100-SXM2-16GB")
    conv = _layers("resnet50")[LayerKind.CONV]
    a = ComputeModel(v100, ComputeParams.for_gpu(v100)).layer_time(conv, "fp32")
    b = ComputeModel(v100, ComputeParams.for_gpu(v100, fp32_conv_tf32=True)).layer_time(
        conv, "fp32"
    )
    assert a == b


def test_pytorch_presets_set_it_and_other_stacks_do_not() -> None:
    plan = ParallelismPlan()
    for name, expect in (("pytorch-ddp", True), ("fsdp", True), ("tf-replicated", False)):
        r = build_recipe(get_preset(name), Precision.FP32, Optimizer.SGD, plan)
        assert r.fp32_conv_tf32 is expect, name
        assert r.compute.fp32_conv_tf32 is expect
    r = build_recipe(get_preset("pytorch-ddp"), Precision.BF16, Optimizer.SGD, plan)
    assert not r.fp32_conv_tf32


def test_a100_resnet50_fp32_under_pytorch_is_about_its_tf32_speed() -> None:
    sc = Scenario(
        system="dgx-a100", model="resnet50", batch_per_gpu=256, gpus=1, fidelity="analytic"
    )
    fp32 = predict(sc, baseline=False)
    tf32 = predict(replace(sc, precision="tf32"), baseline=False)
    tf = predict(replace(sc, software="tf-replicated"), baseline=False)  # not PyTorch: FP32
    assert fp32.throughput_samples_per_s == pytest.approx(tf32.throughput_samples_per_s, rel=0.02)
    assert fp32.throughput_samples_per_s > 1.5 * tf.throughput_samples_per_s
    assert TF32_CONV_NOTE in fp32.printed_notes and TF32_CONV_NOTE not in tf.notes
    assert fp32.mfu == pytest.approx(tf32.mfu, rel=0.02)  # against the TF32 peak, not FP32's
    v100 = predict(replace(sc, system="dgx1-v100", batch_per_gpu=64), baseline=False)
    assert TF32_CONV_NOTE not in v100.notes


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "64"],
        ["model", "maxbatch", "gpt2", "--gpu", "V100-SXM2-16GB"],
        ["model", "show", "resnet50", "--gpu", "V100-SXM2-16GB", "--batch", "8"],
        [
            "predict",
            "--system",
            "custom",
            "--gpu",
            "T4",
            "--gpus-per-node",
            "1",
            "--intra-node",
            "pcie3",
            "--model",
            "resnet50",
            "--batch-per-gpu",
            "8",
        ],
    ],
)
def test_bf16_on_a_gpu_without_bf16_units_exits_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--precision", "bf16"]) == 2
    err = capsys.readouterr().err
    assert "no BF16 tensor cores" in err and "fp16" in err
    assert main(["--quiet", *argv, "--precision", "fp16"]) == 0


@pytest.mark.parametrize(
    ("system", "gpu"),
    [("dgx1-v100", "V100-SXM2-16GB (Volta)"), ("dgx1-p100", "P100-SXM2-16GB (Pascal)")],
)
def test_tf32_on_a_gpu_without_tf32_units_exits_2(
    system: str, gpu: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """user21 item 2: a V100 "tf32" run was accepted and computed as fp32 (PyTorch's
    allow_tf32 changes nothing there); refused like bf16, from the catalogue's TF32 rate
    (exit 0 before the fix); nothing written."""
    argv = ["predict", "--system", system, "--model", "resnet50", "--batch-per-gpu", "64"]
    trace = tmp_path / "t.json"
    assert main([*argv, "--precision", "tf32", "--trace", str(trace)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and not trace.exists()
    assert f"--precision: {gpu} has no TF32 tensor cores" in out.err
    assert "use fp32 (the same run)" in out.err


def test_tf32_refusal_reads_the_catalogue_and_the_api_names_the_field() -> None:
    """The rule is the GPU's own TF32 rate, not a name list: an Ampere GPU runs tf32, and the
    API's error names ``scenario.precision``."""
    a100 = get_gpu("A100-SXM4-80GB")
    assert DType.TF32 in a100.peak_flops
    check_precision_runs(a100, Precision.TF32)  # accepted
    with pytest.raises(ConfigError, match=r"T4 \(Turing\) has no TF32 tensor cores") as exc:
        check_precision_runs(get_gpu("T4"), Precision.TF32)
    assert exc.value.where == "precision"
    sc = Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=8, precision="tf32")
    with pytest.raises(ConfigError) as exc:
        predict(sc)
    assert exc.value.where == "scenario.precision" and exc.value.value == "tf32"
