"""One meaning of speedup (audit15 item 4): a run at its baseline's GPU count reads exactly
1.00x, and every speedup names what it divides by (``StepReport.speedup_basis``)."""

from __future__ import annotations

from perfmodel.api import Scenario, predict
from perfmodel.cli import main

FSDP_GPT2 = dict(
    system="dgx-h100", model="gpt2", global_batch=16, precision="bf16", optimizer="adamw",
    software="torchtitan", fidelity="analytic",
)  # fmt: skip


def test_a_one_gpu_run_is_its_own_baseline() -> None:
    # FSDP on one GPU runs its copy kernels; the 1-GPU baseline of a multi-GPU run is unsharded,
    # so the ratio to it was below 1 (0.97x for llama3_8b on a B200)
    rep = predict(Scenario(**FSDP_GPT2, gpus=1))
    assert rep.speedup == 1.0 and rep.scaling_efficiency == 1.0 and rep.baseline_gpus == 1
    assert rep.speedup_basis.startswith("this run itself")
    assert rep.to_dict()["speedup_basis"] == rep.speedup_basis


def test_a_multi_gpu_speedup_names_its_baseline(capsys) -> None:
    rep = predict(Scenario(**{**FSDP_GPT2, "fidelity": "simulated"}, gpus=8))
    assert rep.baseline_gpus == 1 and rep.speedup is not None
    basis = rep.speedup_basis
    assert basis.startswith("1 GPU of dgx-h100 running the whole global batch, 16 samples")
    assert "unsharded (zero=0" in basis and "analytic" in basis
    argv = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--global-batch", "16",
            "--precision", "bf16", "--optimizer", "adamw", "--software", "pytorch-ddp",
            "--fidelity", "analytic", "--gpus", "1,8", "--interval", "off"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "  1 GPU: speedup against this run itself" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("  8 GPUs: speedup against"))
    # DDP is unsharded and the run analytic: nothing to explain beyond the batch
    assert line.endswith("(strong scaling): the same model and software"), line
    row1 = next(ln for ln in out.splitlines() if ln.lstrip().startswith("1 dp=1"))
    assert "   1.00x  100%" in row1
