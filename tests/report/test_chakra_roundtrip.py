"""Issue 28, item 9: a Chakra round trip without hand repair.

perfmodel's own export names its GPU, parameter counts, precision, batch and plan in its metadata,
so ``model import-chakra`` of it needs no ``--gpu``/``--params``/``--batch``/``--precision``; a
tensor-parallel rank's trace is read as a shard; importing an export reproduces the native
prediction within 2% (before: 2x the parameters from FP32 gradient bytes read as bf16, one
"layer" per forward or backward node, and 1.37 -> 3.76 ms of exposed communication).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.workload.chakra_et import read_trace
from tests.cli.cli_helpers import cli_json

CASES = {
    "gpt2-dp8-ddp": (
        ["--system", "dgx-h100", "--model", "gpt2", "--batch-per-gpu", "8", "--precision", "bf16"],
        "dgx-h100",
        1,
    ),
    "resnet50-dp8-ddp": (
        ["--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "64"],
        "dgx1-v100",
        1,
    ),
    "gpt-tp2-megatron": (
        [
            "--system",
            "dgx-a100",
            "--model",
            "gpt",
            "--model-arg",
            "layers=12",
            "hidden=2048",
            "heads=16",
            "--global-batch",
            "32",
            "--precision",
            "bf16",
            "--software",
            "megatron",
            "--plan",
            "dp=4,tp=2,microbatch=8",
        ],
        "dgx-a100",
        2,
    ),
    "gpt-tp2-mcore-accumulation": (
        [
            "--system",
            "dgx-a100",
            "--model",
            "gpt",
            "--model-arg",
            "layers=12",
            "hidden=2048",
            "heads=16",
            "--global-batch",
            "32",
            "--precision",
            "bf16",
            "--software",
            "megatron-core",
            "--plan",
            "dp=4,tp=2,microbatch=4",
        ],
        "dgx-a100",
        2,
    ),
}


def _export(capsys: pytest.CaptureFixture[str], flags: list[str], folder: Path) -> dict:
    """``perfmodel predict FLAGS --fidelity analytic --chakra FOLDER --json``: the prediction,
    with its Chakra execution trace written to ``FOLDER/perfmodel.0.et``."""
    cmd = ["--quiet", "predict", *flags, "--fidelity", "analytic", "--chakra", str(folder)]
    return cli_json(capsys, [*cmd, "--json"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_of_an_export_reproduces_the_prediction(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, system, tp = CASES[case]
    native = _export(capsys, flags, tmp_path)
    et = tmp_path / "perfmodel.0.et"
    meta = {a.name: a.value for a in read_trace(et).metadata}
    assert meta["perfmodel_gpu"] and meta["perfmodel_tp"] == tp
    assert meta["perfmodel_rank_params"] > 0 and meta["perfmodel_model_params"] > 0
    imported = cli_json(
        capsys,
        ["--quiet", "model", "import-chakra", str(et), "--system", system, "--gpus", "8", "--json"],
    )
    assert imported["tp"] == tp
    # the rank's parameters: the whole model, or one tensor-parallel shard of it
    assert imported["params"] == meta["perfmodel_rank_params"]
    got = imported["predictions"][-1]
    assert got["num_gpus"] == 8
    assert got["iteration_time_s"] == pytest.approx(native["iteration_time_s"], rel=0.02)
    # the gradient reduction is predicted again around the measured segments (a blocking TP
    # collective's measured time is part of its segment's)
    dp_got = got["breakdown"]["exposed_comm_s"].get("dp", 0.0)
    dp_native = native["breakdown"]["exposed_comm_s"].get("dp", 0.0)
    assert dp_got == pytest.approx(dp_native, rel=0.1, abs=2e-4)


def test_gpt2_parameters_and_gpu_come_from_the_metadata(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, _, _ = CASES["gpt2-dp8-ddp"]
    _export(capsys, flags, tmp_path)
    out = cli_json(
        capsys, ["--quiet", "model", "import-chakra", str(tmp_path / "perfmodel.0.et"), "--json"]
    )
    assert out["gpu"] == "H100-SXM5-80GB" and out["precision"] == "bf16"
    assert out["params"] == 124_439_808  # FP32 gradients all-reduced under autocast: 4 B each
    assert out["layers"] == 13 and out["batch"] == 8


def test_a_shard_refuses_gpu_counts_tp_does_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags, system, _ = CASES["gpt-tp2-megatron"]
    _export(capsys, flags, tmp_path)
    et = str(tmp_path / "perfmodel.0.et")
    assert main(["model", "import-chakra", et, "--system", system, "--gpus", "1,8"]) == 2
    assert "multiple of 2" in capsys.readouterr().err
