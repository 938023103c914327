"""A CPU calibration read and used as a CPU (issue 16): honest fit sources and summaries, CLI
hints in CLI terms, and CPU wording in predictions of the calibrated CPU."""

from __future__ import annotations

import math
from pathlib import Path

from perfmodel.calibration.fit import FitResult, fit_compute_params
from perfmodel.calibration.profile import read_profile, synthesize_spec
from perfmodel.cli import main
from perfmodel.cli.calibrate import fit_summary_line

CPU = Path(__file__).resolve().parents[2] / "calibration" / "cpu-dev-amd-epyc-1thread.json"


def test_fit_summary_marks_unconstrained_values() -> None:
    fit = FitResult(
        values={"memory_efficiency": 0.25, "conv_efficiency": 0.9},
        stderr={"memory_efficiency": 0.01, "conv_efficiency": math.nan},
        residuals=(0.1, -0.1),
        success=True,
    )
    line = fit_summary_line("compute", fit)
    assert "nan" not in line
    assert "conv_efficiency=0.9 (not fitted)" in line.replace("0.900", "0.9")
    assert "memory_efficiency=" in line and "±" in line


def test_fit_source_names_only_the_benchmarks_it_used() -> None:
    prof = read_profile(CPU)
    kinds = {m.kind.value for m in prof.measurements}
    assert "conv" not in kinds and "attention" not in kinds  # skipped by the numpy backend
    params, _ = fit_compute_params(prof.measurements, synthesize_spec(prof))
    used = params.source.split("(", 1)[1].rstrip(")").split(", ")
    assert set(used) <= kinds and "conv" not in used and "attention" not in used
    assert used == sorted(used) and "gemm" in used


def test_other_device_hint_speaks_cli(capsys) -> None:
    args = ["predict", "--system", "dgx-h100", "--model", "mlp", "--batch-per-gpu", "8",
            "--gpus", "1", "--calibration", str(CPU)]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--system calibrated --calibration FILE" in err
    assert "pass allow_other_device=True" not in err


def test_cpu_prediction_speaks_of_a_cpu(capsys) -> None:
    args = ["predict", "--system", "calibrated", "--calibration", str(CPU), "--model", "mlp",
            "--batch-per-gpu", "8", "--fidelity", "analytic"]  # fmt: skip
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    # the library the profile measured (NumPy), not a framework it never ran (issue 28)
    assert "CPU: numpy kernels as calibrated" in lines[0] and "pytorch-ddp," not in lines[0]
    text = "\n".join(lines[1:])
    for phrase in ("on 1 CPU(s)", "vs 1 CPU", "breakdown (critical CPU)", "memory per CPU",
                   "model FLOP/s/CPU", "GFLOP/s", "CUDA context"):  # fmt: skip
        assert phrase in text, phrase
    assert "GPU(s)" not in text and "memory per GPU" not in text
