"""user21 item 4: the refusals of a GPU count or a global batch suggest only what is accepted,
name the system as given and the flags as the user wrote them (``--nodes 2``, not ``nodes=2``,
when no scenario file set the key), and the default plan's batch refusal points at ``--plan``
and ``perfmodel compare`` (each assertion failed before the fix)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.errors import InfeasiblePlanError
from tests.cli.cli_helpers import refused

PRED = ["predict", "--model", "resnet50", "--batch-per-gpu", "8", "--fidelity", "analytic"]


def test_global_batch_examples_are_distinct_and_name_the_plan() -> None:
    sc = Scenario(system="dgx-a100", model="resnet50", global_batch=4, fidelity="analytic")
    with pytest.raises(InfeasiblePlanError) as exc:
        predict(sc)
    msg = str(exc.value)
    assert "multiples of 8, e.g. 8;" in msg and "8 or 8" not in msg
    assert "tp=2 (--plan tp=2) leaves dp=4" in msg and "`perfmodel compare`" in msg
    # a plan the user gave gets no such hint
    with pytest.raises(InfeasiblePlanError) as exc:
        predict(Scenario(system="dgx-a100", model="resnet50", global_batch=12, dp=8))
    assert "e.g. 8 or 16" in str(exc.value) and "--plan" not in str(exc.value)


def test_default_plan_hint_is_a_plan_predict_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    """rev27b item 1: Llama 3 405B's batch 100 on 128 H100s suggested ``--plan tp=32``, which
    predict refuses (tp=32 does not divide kv_heads=8); the hint is now a plan within a server
    (``tp=8 pp=4``) and, pasted, accepted (failed before: the suggestion was refused)."""
    argv = [
        "predict", "--system", "dgx-h100", "--nodes", "16", "--model", "llama3_405b",
        "--global-batch", "100", "--precision", "bf16", "--optimizer", "adamw",
        "--fidelity", "analytic",
    ]  # fmt: skip
    err = refused(capsys, argv)
    hint = re.search(r"\(--plan (\S+)\)", err)
    assert hint is not None, err
    assert hint.group(1) == "tp=8,pp=4" and "leaves dp=4" in err
    assert main([*argv, "--plan", hint.group(1)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # gpt2's 12 heads refuse tp=8 on a server of 8: the checks, run on the plan, pick tp=4 pp=2
    gpt2 = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--global-batch", "1"]
    err = refused(capsys, [*gpt2, "--fidelity", "analytic"])
    assert "(--plan tp=4,pp=2) leaves dp=1" in err, err


def test_cluster_cap_suggests_only_what_is_accepted() -> None:
    sc = Scenario(
        system="dgx-h100", nodes=2048, gpus=16385, model="resnet50", batch_per_gpu=8,
        fidelity="analytic",
    )  # fmt: skip
    with pytest.raises(InfeasiblePlanError) as exc:
        predict(sc)
    msg = str(exc.value)
    assert "system dgx-h100 with nodes=2048 has 16,384 GPUs" in msg  # not dgx-h100x2048
    assert "use at most gpus=16384 (nodes=2049 would be 16,392 GPUs" in msg
    assert "use nodes=2049" not in msg


def test_cli_names_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, [*PRED, "--system", "dgx-a100", "--gpus", "12"])
    assert "--gpus 12 but system dgx-a100 with --nodes 1 has 8 GPUs" in err
    assert "use --nodes 2, or at most --gpus 8" in err
    err = refused(capsys, ["predict", "--system", "dgx-a100", "--model", "resnet50",
                           "--global-batch", "4"])  # fmt: skip
    assert "error: --global-batch: global batch 4" in err


def test_cli_names_a_file_key_as_the_file_wrote_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "run.toml"
    f.write_text('system = "dgx-a100"\nmodel = "resnet50"\nbatch_per_gpu = 8\ngpus = 12\n')
    err = refused(capsys, ["predict", str(f)])
    assert f"{f}: gpus=12 but system dgx-a100 with nodes=1 has 8 GPUs" in err
    assert "use nodes=2, or at most gpus=8" in err
    assert "--gpus" not in err


def test_cli_names_each_key_in_its_own_origins_form(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """rev27b item 5: a file's ``gpus = 20`` with ``--nodes 2`` said "with nodes=2 ... use
    nodes=3" though --nodes came from the command line (failed before)."""
    f = tmp_path / "g.toml"
    f.write_text('system = "dgx-a100"\nmodel = "resnet50"\nbatch_per_gpu = 8\ngpus = 20\n')
    err = refused(capsys, ["predict", str(f), "--nodes", "2"])
    assert f"{f}: gpus=20 but system dgx-a100 with --nodes 2 has 16 GPUs" in err
    assert "use --nodes 3, or at most gpus=16" in err and "--gpus" not in err


@pytest.mark.parametrize("gpus", ["16", "8,16"])
def test_a_flags_error_names_the_file_of_a_file_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gpus: str
) -> None:
    """rev29 item 2: ``predict s1.toml --gpus 8,16`` (the file sets ``nodes = 1``) said
    "with nodes=1" without the file, as no other file key's error does."""
    f = tmp_path / "s1.toml"
    f.write_text('system = "dgx-h100"\nnodes = 1\nmodel = "resnet50"\nbatch_per_gpu = 8\n')
    err = refused(capsys, ["predict", str(f), "--gpus", gpus])
    assert f"--gpus 16 but system dgx-h100 with nodes=1 ({f}) has 8 GPUs" in err
    assert "use nodes=2, or at most --gpus 8" in err
