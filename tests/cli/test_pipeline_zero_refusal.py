"""``perfmodel predict`` refuses a DeepSpeed ZeRO-2/3 plan with pipeline parallelism (DeepSpeed's
``PipelineEngine`` asserts ZeRO-1 at most), exit 2, naming the stage, the software, ``pp`` and
what runs instead, with nothing written; ``perfmodel compare`` whose every plan is refused says
why and what to try."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import refused

from perfmodel.cli import main

JOB = [
    "--system", "dgx-a100", "--model", "gpt", "--model-arg", "layers=4", "hidden=256", "heads=4",
    "seq_len=128", "vocab=1000", "--global-batch", "16", "--precision", "bf16",
    "--optimizer", "adam", "--fidelity", "analytic",
]  # fmt: skip


@pytest.mark.parametrize("software", ["deepspeed-zero3", "deepspeed-zero2"])
def test_predict_refuses_and_writes_nothing(
    software: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, gantt = tmp_path / "t.json", tmp_path / "g.png"
    argv = ["predict", *JOB, "--software", software, "--plan", "dp=4,pp=2"]
    err = refused(capsys, [*argv, "--trace", str(trace), "--gantt", str(gantt)])
    assert err.startswith(f"perfmodel: error: --software: software {software} with pp=2: ")
    assert "(the preset's stage) is refused" in err
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in err
    assert "use pp=1, or zero=1 (software deepspeed-zero1) with pp=2" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    assert "pipeline_max_zero=1" in refused(capsys, [*argv, "--json"])


def test_predict_names_a_stated_zero_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", *JOB, "--software", "deepspeed-zero1", "--plan", "dp=4,pp=2"]
    err = refused(capsys, [*argv, "--zero", "3"])
    assert "--zero: software deepspeed-zero1 with pp=2: zero=3 (the scenario's) is refused" in err
    assert main([*argv, "--zero", "1"]) == 0  # ZeRO-1 with pipelining runs
    capsys.readouterr()


def test_predict_runs_it_for_a_stack_that_lifts_the_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["predict", *JOB, "--software", "deepspeed-zero3", "--plan", "dp=4,pp=2"]
    assert main([*argv, "--software-option", "pipeline_max_zero=3"]) == 0
    assert "zero=3" in capsys.readouterr().out


def test_compare_with_every_plan_refused_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", *JOB[:-2], "--gpus", "8", "--software", "deepspeed-zero3"]
    rc = main([*argv, "--tp", "1", "--pp", "2"])
    out = capsys.readouterr()
    assert rc == 2
    assert "ZeRO stage above what the stack runs with pp > 1 (pipeline_max_zero)" in out.out
    assert "no feasible plan among 0 enumerated; " in out.err
    assert "deepspeed-zero3 runs at most ZeRO-1 with pipeline parallelism" in out.err
    assert "try --pp 1, --zero 0,1, or --software fsdp or torchtitan" in out.err
    # the hint's --zero 0,1 is a search that ranks pipelined plans
    assert main([*argv, "--tp", "1", "--pp", "2", "--zero", "0,1"]) == 0
    capsys.readouterr()


def test_systems_search_names_the_refusal_of_a_per_system_software(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``compare --systems ... --search`` whose entry states the software
    (``dgx-a100:software=deepspeed-zero3``): the system's line says why no plan is left, from
    that entry's stack (final20b: the note read the base's software, pytorch-ddp, and said
    nothing)."""
    job = [a for a in JOB[:-2] if a not in ("--system", "dgx-a100")]
    argv = ["compare", *job, "--systems", "dgx-a100:software=deepspeed-zero3", "--search"]
    main([*argv, "--gpus", "8", "--tp", "1", "--pp", "2"])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "deepspeed-zero3 runs at most ZeRO-1 with pipeline parallelism" in text
