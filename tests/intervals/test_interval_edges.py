"""Interval edges that cannot happen (audit15 item 7): the fast end of a step past 100% MFU, a
speedup range past linear where the model predicts no superlinear mechanism, a range on a run
that does not fit in memory, and ``--interval``'s one rule."""

from __future__ import annotations

import json
import math

import pytest

from perfmodel.cli import main

CPU = ["predict", "--system", "calibrated", "--calibration",
       "calibration/cpu-dev-amd-epyc-1thread.json", "--model", "mlp", "--batch-per-gpu", "128"]  # fmt: skip
NO_FIT = ["predict", "--system", "dgx-h100", "--model", "llama3_70b", "--global-batch", "64",
          "--precision", "bf16", "--optimizer", "adamw", "--fidelity", "analytic", "--plan",
          "dp=8"]  # fmt: skip
GPT2 = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--global-batch", "64",
        "--precision", "bf16", "--fidelity", "analytic", "--gpus", "1,2,4,8"]  # fmt: skip


def _json(capsys, args: list[str]):
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_the_fast_end_stops_at_the_peak(capsys) -> None:
    """The calibrated CPU's MLP runs at 85% MFU; its pool's lower residual bound put the fast
    end at 112.5% (main e1dbb0a). Its peak is fitted (fits.gemm.fp32.peak_flops 79.64 +- 2.96
    GFLOP/s, relative 3.72%), not a datasheet figure (rev15b item 10: the note said "no step
    runs faster than the peak" and capped at 100%): the cap is the fitted peak plus 2 standard
    errors, 1 + 2 x 0.0372 = 107.4%, worded as such. Every speed and time field is cut alike."""
    d = _json(capsys, [*CPU, "--json"])
    bound = 1 + 2 * 2.96 / 79.64  # the profile's stated stderr, to its printed digits
    assert d["mfu_high"] == pytest.approx(bound, rel=1e-3)
    assert d["iteration_time_s_low"] == pytest.approx(
        d["iteration_time_s"] * d["mfu"] / bound, rel=1e-3
    )
    assert d["throughput_samples_per_s_high"] == pytest.approx(
        d["throughput_samples_per_s"] * bound / d["mfu"], rel=1e-3
    )
    assert d["interval_capped"].startswith(
        "the fast end is capped at MFU 107.4% of the calibrated GEMM peak (was 112.5%"
    )
    assert "no step runs" not in d["interval_capped"]
    assert main(CPU) == 0
    out = capsys.readouterr().out
    assert "  MFU             56.5% - 107.4%" in out
    assert "plus 2 standard errors of 3.7%" in out


def test_no_cap_where_the_peak_does_not_cut(capsys) -> None:
    d = _json(capsys, [*GPT2[:-2], "--json"])
    assert d["mfu_high"] < 1 and "interval_capped" not in d


def test_a_run_that_does_not_fit_has_no_range(capsys) -> None:
    d = _json(capsys, [*NO_FIT, "--json"])
    assert d["fits_in_memory"] is False and d["interval_level"] == 0.8
    assert not [k for k in d if k.endswith(("_low", "_high"))]
    assert "does not fit in memory" in d["interval_warning"]
    assert main(NO_FIT) == 0
    out = capsys.readouterr().out
    assert "80% range    none: the plan does not fit in memory" in out
    assert "  iteration time  " not in out


def test_speedup_range_stops_at_linear(capsys) -> None:
    """gpt2 on 2 and 4 H100 is predicted under linear (1.97x, 3.80x); its ratio range went to
    2.0x+ on main. The cap cuts only the high end, and only there."""
    rows = _json(capsys, [*GPT2, "--json"])
    capped = 0
    for r in rows[1:]:
        linear = r["num_gpus"] / r["baseline_gpus"]
        assert r["speedup"] <= linear
        assert r["speedup_high"] <= linear + 1e-12
        assert r["speedup_low"] < r["speedup"]
        capped += r["speedup_capped_at_linear"]
        if r["speedup_capped_at_linear"]:
            assert r["speedup_high"] == linear
    assert capped >= 1
    assert main(GPT2) == 0
    out = capsys.readouterr().out
    assert "1.51-2.00x*" in out and "* speedup range capped at linear scaling" in out


def test_a_superlinear_prediction_keeps_its_range() -> None:
    from types import SimpleNamespace

    from perfmodel.intervals import answers
    from perfmodel.intervals.conformal import record_index

    idx = record_index()
    sc = {"system": "dgx-h100", "model": "gpt2", "global_batch": 64}
    base = dict(num_gpus=8, baseline_gpus=1, scenario=sc)
    sp = answers.speedup_interval(SimpleNamespace(speedup=8.04, **base), index=idx)
    assert sp is not None and sp[3] is None and sp[1] > 8.04
    sp = answers.speedup_interval(SimpleNamespace(speedup=7.9, **base), index=idx)
    assert sp is not None and sp[3] == 8.0 and sp[1] == 8.0


def test_peak_capped_golden() -> None:
    """MFU 0.5 and r_lo = -0.8: the fast end exp(0.8) x 0.5 = 111% of peak; capped,
    r_lo = log(0.5) = -0.693 (the fast end exactly the peak); r_lo = -0.5 is not cut."""
    from dataclasses import replace

    from perfmodel.intervals.answers import peak_capped
    from perfmodel.intervals.conformal import interval, record_index
    from perfmodel.intervals.features import Quantity

    idx = record_index()
    iv = replace(interval(idx.rows[0].features, Quantity.STEP, idx), r_lo=-0.8, r_hi=0.3)
    cut = peak_capped(iv, 0.5)
    assert cut.r_lo == pytest.approx(math.log(0.5)) and cut.r_hi == 0.3
    assert "was 111.3%" in cut.capped
    same = replace(iv, r_lo=-0.5)
    assert peak_capped(same, 0.5) is same and peak_capped(iv, None) is iv
    assert "no step runs its model FLOPs faster than the peak" in cut.capped  # datasheet peak
    # a fitted peak with a 5% stderr: bound 1.1, r_lo = log(0.5 / 1.1) = -0.788; no stated
    # uncertainty (the best measured rate): no cap
    fit = peak_capped(iv, 0.5, 0.05)
    assert fit.r_lo == pytest.approx(math.log(0.5 / 1.1))
    assert fit.capped.startswith("the fast end is capped at MFU 110.0% of the calibrated GEMM")
    assert peak_capped(iv, 0.5, None) is iv


@pytest.mark.parametrize(("text", "level"), [("0.9", 0.9), ("90%", 0.9), ("1.5%", 0.015),
                                             ("0.5", 0.5), ("off", None), (" 80% ", 0.8)])  # fmt: skip
def test_interval_rule_accepts(text: str, level: float | None) -> None:
    from perfmodel.cli._types import interval_level

    got = interval_level()(text)
    assert got == (None if level is None else pytest.approx(level))


@pytest.mark.parametrize("bad", ["1", "1.0", "1.5", "90", "99.9", "100", "100%", "0%", "0", "inf"])
def test_interval_rule_refuses_with_exit_2(capsys, bad: str) -> None:
    """A bare number is a fraction: ``1.5`` was read as 1.5% (a zero-width range) while ``1``
    was refused; now both are refused, naming the percentage they may mean."""
    assert main([*GPT2[:-2], "--interval", bad]) == 2
    err = capsys.readouterr().err
    assert f"--interval {bad!r}" in err
    if bad in ("1", "1.5", "90", "99.9"):
        assert f"write {float(bad):g}%" in err


def test_help_states_the_rule(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "a fraction strictly between 0 and 1 (0.9), or a percentage written with %" in out
