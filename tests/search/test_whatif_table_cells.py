"""User22 item 5: the what-if table (``compare --systems``) marks a speedup against more than 1
GPU in its cell, names a row's own precision in the header, and widens the system column to its
longest label (``aws-p5.48xlarge:precision=bf16`` overflowed 28 characters)."""

from __future__ import annotations

import pytest

from perfmodel.cli import main

JOB = ["--batch-per-gpu", "1", "--gpus", "8", "--interval", "off", "--fidelity", "analytic"]


def _table(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert main(["compare", *argv, *JOB]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_speedup_against_four_gpus_is_marked_in_its_cell(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = ["--model", "llama3_8b", "--precision", "bf16", "--optimizer", "adam"]
    argv = ["--systems", "dgx-h100,aws-p6-b200.48xlarge", *job, "--software", "fsdp"]
    lines = _table(capsys, argv)
    h100 = next(x for x in lines if x.startswith("dgx-h100 "))
    b200 = next(x for x in lines if x.startswith("aws-p6-b200.48xlarge "))
    assert " vs4 " in h100 and " vs" not in b200  # B200's 1 GPU fits, H100's needs 4
    assert any(x.startswith("speedup vsN: against N GPUs of that system, not 1") for x in lines)
    assert len(h100) == len(b200) == len(lines[1])  # the widened cell keeps the columns


def test_row_precision_is_named_and_long_labels_fit(capsys: pytest.CaptureFixture[str]) -> None:
    label = "aws-p5.48xlarge:precision=bf16"
    lines = _table(capsys, ["--systems", f"dgx-h100,{label}", "--model", "gpt2"])
    assert "fp32 (default; bf16 on aws-p5.48xlarge:precision=bf16)" in lines[0]
    rows = lines[3:5]  # under the header and its rule
    assert rows[1].startswith(f"{label}     8 ")  # one space, then the right-aligned count
    assert {len(x) for x in rows} == {len(lines[1])}


def test_systems_search_columns_fit_long_labels(capsys: pytest.CaptureFixture[str]) -> None:
    label = "aws-p5.48xlarge:precision=fp16"
    argv = ["compare", "--systems", f"dgx-h100,{label}", "--search", "--model", "llama3_8b"]
    job = ["--global-batch", "64", "--precision", "bf16", "--optimizer", "adam", "--gpus", "16"]
    assert main([*argv, *job, "--software", "fsdp", "--interval", "off"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "bf16 (fp16 on aws-p5.48xlarge:precision=fp16)" in lines[0]
    rows = lines[3:5]
    assert rows[1].startswith(f"{label} dp16 ")
    assert {len(x) for x in rows} == {len(lines[1])}
