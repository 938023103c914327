"""User22 item 3: ``model maxbatch`` and ``predict`` agree on "will it fit?": maxbatch's largest
batch is one micro-batch's (no gradient accumulation), and predict's memory line says when it
fitted a larger batch by splitting it into micro-batches."""

from __future__ import annotations

import pytest

from perfmodel.cli import main

JOB = "--precision bf16 --optimizer adam".split()
PRED = "predict --system dgx-a100 --gpus 1 --model gpt2 --fidelity analytic".split()


def _memory_line(capsys: pytest.CaptureFixture[str], batch: int) -> str:
    assert main([*PRED, *JOB, "--batch-per-gpu", str(batch), "--interval", "off"]) == 0
    return next(x for x in capsys.readouterr().out.splitlines() if x.startswith("memory per"))


def test_maxbatch_says_one_micro_batch_and_predict_says_it_accumulated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", "maxbatch", "gpt2", "--gpu", "A100-SXM4-80GB", *JOB]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(
        "largest per-GPU batch 52 in one micro-batch (no gradient accumulation; predict runs "
        "a larger batch per GPU as micro-batches that fit)"
    )
    assert "-> fits as 53 micro-batches of 1" in _memory_line(capsys, 53)
    at_max = _memory_line(capsys, 52)
    assert "-> fits" in at_max and "micro-batches" not in at_max
