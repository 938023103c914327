"""``perfmodel model maxbatch`` names the largest batch that ``predict`` says fits: its memory is
predict's own (``stage_memory`` through :func:`perfmodel.search.screen.plan_stage_memory`), so
the batch it names fits and the next one up does not. Before, maxbatch read the screen's older
accounting (``search.screen.recipe_memory``, since removed), which missed FSDP's gathered units
and the loss's saved copies: gpt2 on an A100-80GB under fsdp (bf16, Adam) was named at 107,
which predict sizes at 80.0 GiB, over; under torchtitan at 107, which predict sizes at 101.5
GiB."""

from __future__ import annotations

import json

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main

# (model, GPU, system predict runs it on, software, precision, recompute, tp, model arguments)
FLASH = ["flash_attention=true"]  # the zoo default for gpt2 keeps the s x s scores
CASES = [
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", "pytorch-ddp", "bf16", "none", 1, FLASH),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", "fsdp", "bf16", "none", 1, FLASH),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", "fsdp", "bf16", "full", 1, FLASH),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", "torchtitan", "bf16", "none", 1, []),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", "megatron-core", "bf16", "selective", 2, []),
    ("llama", "H100-SXM5-80GB", "dgx-h100", "megatron-core", "fp8", "full", 4, []),
]


def _predicted(case: tuple, batch: int) -> tuple[bool, float]:
    model, gpu, system, software, precision, recompute, tp, margs = case
    rep = predict(
        Scenario(
            system=system,
            gpu=gpu,
            gpus=tp,
            model=model,
            model_args=dict(a.split("=", 1) for a in margs),
            batch_per_gpu=batch,
            microbatch=batch,
            precision=precision,
            optimizer="adam",
            software=software,
            recompute=recompute,
            tp=tp,
            fidelity="analytic",
        ),
        baseline=False,
    )
    return bool(rep.memory.fits), float(rep.memory.total_bytes)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}-{c[5]}-tp{c[6]}")
def test_maxbatch_fits_in_predict_and_the_next_batch_does_not(
    case: tuple, capsys: pytest.CaptureFixture[str]
) -> None:
    model, gpu, _, software, precision, recompute, tp, margs = case
    argv = ["model", "maxbatch", model, "--gpu", gpu, "--precision", precision]
    argv += ["--optimizer", "adam", "--software", software, "--recompute", recompute]
    argv += ["--tp", str(tp), "--json"] + (["--model-arg", *margs] if margs else [])
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    b = d["batch_size"]
    assert b > 1
    fits, total = _predicted(case, b)
    assert fits
    # the same accounting: maxbatch's total is predict's, to rounding
    assert d["breakdown"]["total_bytes"] == pytest.approx(total, rel=1e-9)
    assert not _predicted(case, b + 1)[0]
