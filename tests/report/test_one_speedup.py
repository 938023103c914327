"""One meaning of speedup (audit15 item 4): a run at its baseline's GPU count reads exactly
1.00x, and every speedup names what it divides by (``StepReport.speedup_basis``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.cli.predict import _curve_basis, _curve_fits_cell

FSDP_GPT2 = dict(
    system="dgx-h100", model="gpt2", global_batch=16, precision="bf16", optimizer="adamw",
    software="torchtitan", fidelity="analytic",
)  # fmt: skip


def test_a_one_gpu_run_is_its_own_baseline() -> None:
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


B200_8B = dict(
    system="dgx-b200", model="llama3_8b", global_batch=256, precision="bf16", optimizer="adamw",
)  # fmt: skip


@pytest.mark.parametrize("software", ["torchtitan", "pytorch-ddp"])
def test_speedup_is_the_ratio_of_the_rows(software: str) -> None:
    """rev15b item 1: the 8-GPU row's speedup times its iteration time is the 1-GPU row's
    (strong scaling: the 1-GPU row is the baseline's scenario). torchtitan's 1-GPU row ran
    FSDP copy kernels the unsharded baseline does not (146.8 s against 142.2): 7.79x printed,
    8.04x between the rows."""
    one = predict(Scenario(**B200_8B, software=software, gpus=1))
    eight = predict(Scenario(**B200_8B, software=software, gpus=8))
    assert eight.baseline_gpus == 1 and eight.speedup is not None
    assert math.isclose(eight.speedup * eight.iteration_time_s, one.iteration_time_s, rel_tol=1e-9)


def test_the_curve_names_the_row_it_divides_by(capsys) -> None:
    argv = ["predict", "--system", "dgx-b200", "--model", "llama3_8b", "--global-batch", "256",
            "--precision", "bf16", "--optimizer", "adamw", "--software", "torchtitan",
            "--gpus", "1,8", "--interval", "off"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(
        ln.startswith("  8 GPUs: speedup against the 1-GPU row, 1 GPU of dgx-b200") for ln in out
    )
    # the 1-GPU row fits within the memory model's error of the B200's capacity: marked as
    # the single prediction marks it, and said once below
    row1 = next(ln for ln in out if ln.lstrip().startswith("1 dp=1"))
    assert row1.endswith(" yes!"), row1
    assert any(ln.startswith("  1 GPU: memory fits, but tight (yes!): within") for ln in out)


def _row(gpus: int, thr: float, speedup: float | None = None, **kw: object) -> SimpleNamespace:
    base = dict(num_gpus=gpus, throughput_samples_per_s=thr, speedup=speedup, baseline_gpus=1,
                speedup_basis="B" if speedup else "", device="GPU", fits_in_memory=True,
                memory_tight=False)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_curve_basis_is_a_row_only_when_its_throughput_is_the_baseline() -> None:
    # 8 GPUs at 10 samples/s and 5.00x: the baseline runs 2 samples/s
    same = [_row(1, 2.0, 1.0, speedup_basis="self"), _row(8, 10.0, 5.0)]
    assert _curve_basis(same[1], same) == "the 1-GPU row, B"
    assert _curve_basis(same[0], same) == "self"
    other = [_row(1, 2.5, 1.0), _row(8, 10.0, 5.0)]  # 10 / 2.5: the rows are 4.00x apart
    assert _curve_basis(other[1], other) == (
        "B; not the 1-GPU row, another scenario (the rows' throughputs are 4.00x apart)"
    )
    assert _curve_basis(other[1], other[1:]) == "B"  # no row at the baseline's count
    fitting = [_row(2, 4.0, 1.0, baseline_gpus=2), _row(8, 12.0, 3.0, baseline_gpus=2)]
    assert _curve_basis(fitting[1], fitting) == "the 2-GPU row, B"


def test_curve_fits_cell_marks_a_tight_fit() -> None:
    assert _curve_fits_cell(_row(1, 1.0)) == " yes"
    assert _curve_fits_cell(_row(1, 1.0, memory_tight=True)) == "yes!"
    assert _curve_fits_cell(_row(1, 1.0, fits_in_memory=False)) == "  NO"
