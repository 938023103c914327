"""user21 item 3: ``compare --systems A,B --objective tta`` (the what-if) exited 0 with the
objective ignored, while the plan search refused the same flags; one check
(:func:`perfmodel.cli.compare_checks.check_objective`) now refuses them on every path, before
any prediction (the what-if cases exited 0 before the fix)."""

from __future__ import annotations

import pytest

from tests.cli.cli_helpers import refused

JOB = ["--model", "resnet50", "--batch-per-gpu", "64", "--gpus", "8"]


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "--systems", "dgx-a100,dgx-h100", *JOB, "--objective", "tta"],
        ["compare", "--system", "dgx-a100", "--model", "resnet50", "--global-batch", "512",
         "--objective", "tta"],
        ["compare", "--systems", "dgx-a100,dgx-h100", "--search", "--model", "resnet50",
         "--global-batch", "512", "--gpus", "8", "--objective", "tta"],
    ],
)  # fmt: skip
def test_tta_without_its_model_is_refused_on_every_path(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, argv)
    assert "--objective tta needs a statistical-efficiency model: --b-noise" in err


@pytest.mark.parametrize("objective", [["tta", "--b-noise", "1000", "--min-steps", "50"], ["cost"]])
def test_the_whatif_reads_no_objective(
    objective: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(
        capsys, ["compare", "--systems", "dgx-a100,dgx-h100", *JOB, "--objective", *objective]
    )
    assert f"--objective {objective[0]}: the what-if (--systems without --search)" in err
    assert "add --search" in err
