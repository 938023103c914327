"""``perfmodel model maxbatch`` names the largest batch that ``predict`` says fits: its memory is
predict's own (``stage_memory`` through :func:`perfmodel.search.screen_memory.plan_stage_memory`), so
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


# --plan (wave 14): maxbatch took no pipeline, data-parallel or ZeRO axis; it now reads predict's
# --plan (the one merge, cli._common.merge_plan_flag). (model, GPU, system, nodes, software,
# plan without a micro-batch, GPUs, micro-batches per step = pp)
PLAN_CASES = [
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", 1, "megatron-core", "pp4 1f1b", 4, 4),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", 1, "megatron-core", "pp4 gpipe", 4, 4),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", 2, "megatron-core", "dp4 tp2 pp2 zero1 sp", 16, 2),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", 1, "megatron", "dp2 tp2 pp2 rc=full", 8, 2),
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", 1, "megatron-core", "tp2 pp3 interleaved(v=2)", 6, 3),
    # torchtitan cuts 12 blocks over 5 stages balanced on the layer times of the micro-batch
    # (predict's partition; the LM head and loss weigh most at large micro-batches): the screen's
    # even split of round(12 / 5) blocks named 83, which predict sizes at 188.7 GiB; the split
    # of micro-batch 1's times named 54 (123.6 GiB); the split of each size's own times, 34
    ("gpt2", "A100-SXM4-80GB", "dgx-a100", 1, "torchtitan", "pp5", 5, 5),
    # batch-norm running statistics (buffers) split over the stages by their norms' parameters
    # of the whole model: maxbatch read each stage as the whole workload, so a stage held all
    # of them (user24: 190 kB over predict's total)
    ("resnet50", "A100-SXM4-80GB", "dgx-a100", 1, "pytorch-ddp", "pp2", 2, 2),
]


def _predicted_plan(case: tuple, mb: int) -> tuple[bool, float]:
    model, gpu, system, nodes, software, plan, gpus, m = case
    dp = gpus // m // (2 if "tp2" in plan else 1)  # replicas: the plan's dp
    rep = predict(
        Scenario.from_dict(
            {
                "system": system,
                "nodes": nodes,
                "gpu": gpu,
                "gpus": gpus,
                "model": model,
                "global_batch": dp * m * mb,
                "precision": "bf16",
                "optimizer": "adam",
                "software": software,
                "plan": f"{plan} mb{mb}",
                "fidelity": "analytic",
            }
        ),
        baseline=False,
    )
    return bool(rep.memory.fits), float(rep.memory.total_bytes)


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: f"{c[4]}-{c[5]}")
def test_maxbatch_plan_fits_in_predict_and_the_next_does_not(
    case: tuple, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a plan, the micro-batch maxbatch names fits in predict's memory on that plan (with
    pp micro-batches per step: predict's worst stage is the first or the last) and the next one
    up does not; the totals are predict's. Before: ``--plan`` was refused by argparse (exit 2)."""
    model, gpu, _, _, software, plan, _, m = case
    argv = ["model", "maxbatch", model, "--gpu", gpu, "--precision", "bf16"]
    argv += ["--optimizer", "adam", "--software", software, "--plan", plan, "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    mb = d["batch_size"]
    assert mb > 1
    assert d["microbatches_per_step"] == m
    assert f"microbatch={mb}" in d["plan"]
    fits, total = _predicted_plan(case, mb)
    assert fits
    assert d["breakdown"]["total_bytes"] == pytest.approx(total, rel=1e-9)
    assert not _predicted_plan(case, mb + 1)[0]


def test_maxbatch_pipeline_larger_than_without(capsys: pytest.CaptureFixture[str]) -> None:
    """Four stages hold a quarter of the blocks each: a larger micro-batch fits than on one
    GPU holding all (gpt2, megatron-core, A100 80 GB: 70 against 52)."""
    base = ["model", "maxbatch", "gpt2", "--gpu", "A100-SXM4-80GB", "--precision", "bf16"]
    base += ["--optimizer", "adam", "--software", "megatron-core"]
    assert main([*base, "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert "plan" not in one  # no plan flag: the output as before
    assert main([*base, "--plan", "pp4", "--json"]) == 0
    four = json.loads(capsys.readouterr().out)
    assert four["batch_size"] > one["batch_size"]
    assert main([*base, "--plan", "pp4"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith(f"largest micro-batch {four['batch_size']}")
    assert "(4 micro-batches per step; the fullest stage)" in head


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--plan", "tp4", "--tp", "2"], "--plan sets tp=4 but --tp says 2"),
        (["--plan", "pp2", "--recompute", "full", "--plan", "pp2 rc=selective"], "--recompute"),
        (["--plan", "pp2 mb4"], "maxbatch finds the micro-batch"),
        (["--plan", "pp2 zero1", "--zero", "2"], "--plan sets zero=1 but --zero says 2"),
        (["--plan", "pp2 bogus"], "item 'bogus' is neither key=value"),
        (["--plan", "pp99"], "99 pipeline chunks but model gpt2 has only 12 blocks"),
        (["--plan", "tp2 pp4 interleaved(v=2)"], "8 pipeline chunks do not divide the 12"),
    ],
)
def test_maxbatch_plan_errors(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan predict refuses, a micro-batch (the answer) or a plan item a flag contradicts:
    exit status 2 and the message naming the value, as predict's."""
    argv = ["model", "maxbatch", "gpt2", "--gpu", "A100-SXM4-80GB", "--precision", "bf16"]
    assert main([*argv, *extra]) == 2
    assert message in capsys.readouterr().err
