"""Issue 14, item 4: the output says which executor timed the step: ``[simulated]`` (the default)
or ``[analytic]`` on a prediction's plan line, and a ``fidelity used`` line under a curve."""

from __future__ import annotations

import pytest

from perfmodel.cli import main

MLP = ["predict", "--system", "dgx1-v100", "--model", "mlp", "--batch-per-gpu", "8", "--quiet"]


@pytest.mark.parametrize(
    ("flags", "used"), [([], "simulated"), (["--fidelity", "analytic"], "analytic")]
)
def test_prediction_and_curve_name_the_fidelity(
    flags: list[str], used: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*MLP, "--gpus", "2", *flags]) == 0
    plan = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("plan "))
    assert plan.endswith(f"[{used}]")
    assert main([*MLP, "--gpus", "1,2", *flags]) == 0
    assert f"fidelity used: {used}" in capsys.readouterr().out.splitlines()
