"""A run's times and costs carry the step time's range (audit15 item 1): the time to train,
GPU-hours and cost of a token budget, the wall-clock time and cost with failures, an epoch, in
text, ``--json`` and a curve's column, all from one function (``answers.StepInterval.run_range``)."""

from __future__ import annotations

import math

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import cli_json

H100 = ["--system", "dgx-h100", "--model", "llama3_8b", "--software", "torchtitan",
        "--global-batch", "16", "--precision", "bf16", "--fidelity", "analytic",
        "--optimizer", "adamw", "--tokens", "1e10", "--price-per-gpu-hour", "2.5"]  # fmt: skip


def test_token_budget_and_training_run_json_carry_the_step_range(capsys) -> None:
    d = cli_json(capsys, ["predict", *H100, "--json"])
    lo = d["iteration_time_s_low"] / d["iteration_time_s"]
    hi = d["iteration_time_s_high"] / d["iteration_time_s"]
    assert lo < 1 < hi
    tb, run = d["token_budget"], d["training_run"]
    for part, names in (
        (tb, ("time_to_train_s", "gpu_hours", "cost")),
        (run, ("ideal_time_s", "wall_clock_s", "cost_ideal", "cost_wall_clock",
               "cost_per_million_tokens")),
    ):  # fmt: skip
        for k in names:
            assert part[f"{k}_low"] == pytest.approx(part[k] * lo, rel=1e-12), k
            assert part[f"{k}_high"] == pytest.approx(part[k] * hi, rel=1e-12), k
    # the run's time is steps x the iteration time: its range is the iteration time's
    assert tb["time_to_train_s_low"] == pytest.approx(tb["steps"] * d["iteration_time_s_low"])


def test_no_run_range_without_an_interval(capsys) -> None:
    d = cli_json(capsys, ["predict", *H100, "--json", "--interval", "off"])
    assert not [k for k in d["token_budget"] if k.endswith(("_low", "_high"))]
    assert not [k for k in d["training_run"] if k.endswith(("_low", "_high"))]


def test_text_prints_the_time_to_train_and_cost_ranges(capsys) -> None:
    d = cli_json(capsys, ["predict", *H100, "--json"])
    assert main(["predict", *H100]) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(n for n, line in enumerate(out) if line.startswith("time to train"))
    assert out[i + 1].startswith("  80% range     ") and "GPU-hours" in out[i + 1]
    tb = d["token_budget"]
    assert f"{tb['gpu_hours_low']:,.0f} - {tb['gpu_hours_high']:,.0f} GPU-hours" in out[i + 1]
    assert out[i + 2].startswith("cost  ")
    assert out[i + 3] == f"  80% range     {tb['cost_low']:,.2f} - {tb['cost_high']:,.2f}"
    run = d["training_run"]
    wall = f"wall-clock {run['wall_clock_s_low'] / 86400:,.2f} - {run['wall_clock_s_high'] / 86400:,.2f} days"
    assert any(line.startswith("  80% range") and wall in line for line in out)
    cost = f"{run['cost_wall_clock_low']:,.2f} - {run['cost_wall_clock_high']:,.2f} with failures"
    assert any(cost in line for line in out)


def test_curve_rows_carry_the_run_range(capsys) -> None:
    args = ["predict", *H100, "--gpus", "8,16"]
    rows = cli_json(capsys, [*args, "--json"])
    for r in rows:
        tb = r["token_budget"]
        ratio = r["iteration_time_s_high"] / r["iteration_time_s"]
        assert tb["time_to_train_s_high"] / tb["time_to_train_s"] == pytest.approx(ratio)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "80% time to train" in out
    from perfmodel.units import format_duration

    for r in rows:
        tb = r["token_budget"]
        cell = f"{format_duration(tb['time_to_train_s_low'])}-{format_duration(tb['time_to_train_s_high'])}"
        assert cell in out


def test_run_range_is_the_iteration_times_scaled() -> None:
    """A golden case: residual bounds r_lo = -0.2, r_hi = 0.3 scale 100 s to
    100 exp(-0.2) = 81.87 s and 100 exp(0.3) = 134.99 s."""
    from dataclasses import replace

    from perfmodel.intervals.answers import _step_values
    from perfmodel.intervals.conformal import interval, record_index
    from perfmodel.intervals.features import Quantity

    idx = record_index()
    iv = interval(idx.rows[0].features, Quantity.STEP, idx)
    iv = replace(iv, r_lo=-0.2, r_hi=0.3)
    si = _step_values(iv, {"iteration_time_s": 2.0, "epoch_time_s": 100.0})
    lo, hi = si.run_range(100.0)
    assert lo == pytest.approx(81.873075, rel=1e-6) and hi == pytest.approx(134.985881, rel=1e-6)
    assert (si.low["epoch_time_s"], si.high["epoch_time_s"]) == (lo, hi)
    assert math.isclose(si.run_range(2.0)[1], si.high["iteration_time_s"])


def test_training_run_json_carries_the_energy_range(capsys) -> None:
    """fix17 gave the energy a range in the text (``80% range A - B kJ per step; run C - D MWh``)
    but not in ``--json``; ``training_run`` now carries ``energy_ideal_j`` and
    ``energy_wall_clock_j`` ``_low`` / ``_high``: the power model at the step range's ends
    (``energy_range`` of the step energy at ``iteration_time_s_low`` / ``_high``, times the
    steps), the same numbers the text prints, wider than the step time's scaling."""
    from perfmodel.intervals.answers import ENERGY_FIELDS

    d = cli_json(capsys, ["predict", *H100, "--json"])
    run = d["training_run"]
    e = run["energy"]
    steps = run["energy_ideal_j"] / e["energy_per_step_j"]
    # the high end is the miss in busy seconds: the linear power model adds the load power for
    # every second more, E + gpus x load_w x (t_high - t) per step
    missed_s = d["iteration_time_s_high"] - d["iteration_time_s"]
    high = e["energy_per_step_j"] + d["num_gpus"] * e["load_power_w"] * missed_s
    assert run["energy_ideal_j_high"] == pytest.approx(high * steps, rel=1e-9)
    for k in ENERGY_FIELDS:
        assert run[f"{k}_low"] < run[k] < run[f"{k}_high"], k
    t_lo = d["iteration_time_s_low"] / d["iteration_time_s"]
    assert run["energy_ideal_j_low"] / run["energy_ideal_j"] < t_lo  # not the time's scaling
    assert main(["predict", *H100]) == 0
    out = capsys.readouterr().out
    j_per_mwh = 3.6e9
    line = (
        f"  80% range     {run['energy_ideal_j_low'] / steps / 1e3:,.1f} - "
        f"{run['energy_ideal_j_high'] / steps / 1e3:,.1f} kJ per step; run "
        f"{run['energy_wall_clock_j_low'] / j_per_mwh:,.1f} - "
        f"{run['energy_wall_clock_j_high'] / j_per_mwh:,.1f} MWh"
    )
    assert line in out


def test_no_energy_range_where_the_step_has_none(capsys) -> None:
    """A plan that does not fit in memory has no step range, so no energy range either."""
    args = ["predict", "--system", "dgx-h100", "--model", "llama3_70b", "--global-batch", "64",
            "--precision", "bf16", "--optimizer", "adamw", "--fidelity", "analytic", "--plan",
            "dp=8", "--tokens", "1e10", "--json"]  # fmt: skip
    d = cli_json(capsys, args)
    assert d["fits_in_memory"] is False
    assert not [k for k in d["training_run"] if k.endswith(("_low", "_high"))]
