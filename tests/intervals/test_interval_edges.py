"""Interval edges that cannot happen (audit15 item 7): the fast end of a step past 100% MFU, a
speedup range past linear where the model predicts no superlinear mechanism, a range on a run
that does not fit in memory, and ``--interval``'s one rule."""

from __future__ import annotations

import json
import math

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import cli_json

CPU = ["predict", "--system", "calibrated", "--calibration",
       "calibration/cpu-dev-amd-epyc-1thread.json", "--model", "mlp", "--batch-per-gpu", "128"]  # fmt: skip
NO_FIT = ["predict", "--system", "dgx-h100", "--model", "llama3_70b", "--global-batch", "64",
          "--precision", "bf16", "--optimizer", "adamw", "--fidelity", "analytic", "--plan",
          "dp=8"]  # fmt: skip
GPT2 = ["predict", "--system", "dgx-h100", "--model", "gpt2", "--global-batch", "64",
        "--precision", "bf16", "--fidelity", "analytic", "--gpus", "1,2,4,8"]  # fmt: skip


def test_the_fast_end_stops_at_the_peak(capsys) -> None:
    """The calibrated CPU's MLP runs at 85% MFU; its pool's lower residual bound put the fast
    end at 112.5% (main e1dbb0a; 111.0% and a slow end of 54.4% against 56.5% once the
    Blackwell rows' residuals moved with the sourced cuDNN attention tables, branch opt21; a
    slow end of 55.0% once the DeepSeek-V3 rows ran their recipes' pipeline layouts, layout22).
    Its peak is fitted (fits.gemm.fp32.peak_flops 79.64 +- 2.96
    GFLOP/s, relative 3.72%), not a datasheet figure (rev15b item 10: the note said "no step
    runs faster than the peak" and capped at 100%): the cap is the fitted peak plus 2 standard
    errors, 1 + 2 x 0.0372 = 107.4%, worded as such. Every speed and time field is cut alike."""
    d = cli_json(capsys, [*CPU, "--json"])
    bound = 1 + 2 * 2.96 / 79.64  # the profile's stated stderr, to its printed digits
    assert d["mfu_high"] == pytest.approx(bound, rel=1e-3)
    assert d["iteration_time_s_low"] == pytest.approx(
        d["iteration_time_s"] * d["mfu"] / bound, rel=1e-3
    )
    assert d["throughput_samples_per_s_high"] == pytest.approx(
        d["throughput_samples_per_s"] * bound / d["mfu"], rel=1e-3
    )
    assert d["interval_capped"].startswith(
        "the fast end is capped at MFU 107.4% of the calibrated GEMM peak (was 111.0%"
    )
    assert "no step runs" not in d["interval_capped"]
    assert main(CPU) == 0
    out = capsys.readouterr().out
    assert "  MFU             55.0% - 107.4%" in out
    assert "plus 2 standard errors of 3.7%" in out
    # the shipped profile records no degrees of freedom (written before fix17): a normal reading
    assert "read as a normal: the profile records no degrees of freedom" in d["interval_capped"]


@pytest.mark.parametrize(
    ("dof", "k", "bound"),
    [(1, 13.97, None), (2, 4.53, None), (15, 2.18, 1.08106)],
)
def test_a_fitted_peak_is_read_with_t(capsys, tmp_path, dof: int, k: float, bound) -> None:
    """fix17: a fit's standard errors have ``dof`` residual degrees of freedom and span two
    normal standard errors' coverage at ``k = t_dof(Phi(2))`` of them. The shipped CPU profile's
    gemm.fp32 peak 79.64 +- 2.96 GFLOP/s (relative 3.7163%) given ``dof``: the cap is the fitted
    peak plus ``k`` standard errors where that is below the 111.0% fast end, worded as such.

    ``k`` by hand: 1 dof is the Cauchy, ``tan(pi (Phi(2) - 1/2))`` = tan(pi x 0.47725) = 13.97,
    cap 1 + 13.97 x 3.716% = 151.9%: no cap; 2 dof ``(2p - 1) / sqrt(2 p (1 - p))`` at ``p =
    Phi(2) = 0.97725`` = 0.9545 / 0.2108 = 4.53, cap 116.8%: no cap; 15 dof from
    ``scipy.stats.t.ppf(scipy.stats.norm.cdf(2), 15)`` = 2.1812 (tables: t_15 at 0.975 is
    2.131, at 0.98 2.249), cap 1 + 2.1812 x 0.037163 = 108.106%, printed 108.1%."""
    prof = json.loads(open("calibration/cpu-dev-amd-epyc-1thread.json").read())
    fit = prof["fits"]["gemm.fp32"]
    assert fit["stderr"]["peak_flops"] / fit["values"]["peak_flops"] == pytest.approx(
        0.037163, rel=1e-4
    )
    fit["dof"] = dof
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(prof))
    d = cli_json(capsys, [*CPU[:4], str(path), *CPU[5:], "--json"])
    if bound is None:
        assert d["mfu_high"] == pytest.approx(1.110, abs=1e-3) and "interval_capped" not in d
        return
    assert d["mfu_high"] == pytest.approx(bound, rel=1e-5)
    assert "capped at MFU 108.1% of the calibrated GEMM peak" in d["interval_capped"]
    assert (
        f"read with Student's t at {dof} degrees of freedom: {k:.2f} standard errors"
        in d["interval_capped"]
    )


def test_the_profile_is_read_once_per_file(monkeypatch, tmp_path) -> None:
    """peak_uncertainty read the calibration profile for every interval (a search asks for one
    per plan); it now reads it once per file version and again after the file changes."""
    import perfmodel.calibration as calibration
    from perfmodel.intervals import answers

    calls = []
    real = calibration.load_profile

    def counted(path, *a, **k):
        calls.append(path)
        return real(path, *a, **k)

    monkeypatch.setattr(calibration, "load_profile", counted)
    path = tmp_path / "cpu.json"
    text = open("calibration/cpu-dev-amd-epyc-1thread.json").read()
    path.write_text(text)
    d = {"scenario": {"system": "calibrated", "calibration": str(path)}, "mfu_peak_dtype": "fp32"}
    first = answers.peak_uncertainty(d)
    assert first[0] == pytest.approx(0.0372, abs=1e-4) and first[1] is None
    assert [answers.peak_uncertainty(d) for _ in range(5)] == [first] * 5
    assert len(calls) == 1
    prof = json.loads(text)
    prof["fits"]["gemm.fp32"]["dof"] = 15
    path.write_text(json.dumps(prof) + " " * 7)  # another size: another version
    assert answers.peak_uncertainty(d) == (first[0], 15) and len(calls) == 2
    assert answers.peak_uncertainty({**d, "mfu_peak_dtype": "bf16"}) == (None, None)
    assert answers.peak_uncertainty({"scenario": {"system": "dgx-h100"}}) == (0.0, None)


def test_no_cap_where_the_peak_does_not_cut(capsys) -> None:
    d = cli_json(capsys, [*GPT2[:-2], "--json"])
    assert d["mfu_high"] < 1 and "interval_capped" not in d


def test_a_run_that_does_not_fit_has_no_range(capsys) -> None:
    d = cli_json(capsys, [*NO_FIT, "--json"])
    assert d["fits_in_memory"] is False and d["interval_level"] == 0.8
    assert not [k for k in d if k.endswith(("_low", "_high"))]
    assert "does not fit in memory" in d["interval_warning"]
    assert main(NO_FIT) == 0
    out = capsys.readouterr().out
    assert "80% range    none: the plan does not fit in memory" in out
    assert "  iteration time  " not in out


def test_speedup_range_stops_at_linear(capsys) -> None:
    """gpt2 on 2 and 4 H100 is predicted under linear (1.97x, 3.80x); its ratio range went to
    2.0x+ on main. The cap cuts only the high end, and only there. (The 2-GPU range's low end,
    1.51x at main17, is 1.49x since the Blackwell rows' residuals moved, branch opt21.)"""
    rows = cli_json(capsys, [*GPT2, "--json"])
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
    assert "1.49-2.00x*" in out and "* speedup range capped at linear scaling" in out


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
    # the same stderr with 10 residual degrees of freedom: t_10(Phi(2)) = 2.28 of them, bound
    # 1 + 0.05 x 2.284 = 1.114 (fix17: the fit's errors are read with t), which r_lo = -0.8
    # (111.3%) does not reach and r_lo = -0.9 (123.0%) does; 0 dof: no cap
    assert peak_capped(iv, 0.5, 0.05, 10) is iv
    t10 = peak_capped(replace(iv, r_lo=-0.9), 0.5, 0.05, 10)
    assert t10.r_lo == pytest.approx(math.log(0.5 / (1 + 0.05 * 2.2837)), abs=1e-4)
    assert "MFU 111.4% " in t10.capped and "Student's t at 10 degrees of freedom" in t10.capped
    assert "read as a normal" in fit.capped
    assert peak_capped(iv, 0.5, 0.05, 0) is iv


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


def test_a_bad_level_from_python_names_the_argument() -> None:
    """rev27b item 6: ``StepReport.interval(1.5)`` names ``level``, not the ``--interval`` flag."""
    from perfmodel.api import Scenario, predict
    from perfmodel.errors import ConfigError

    report = predict(
        Scenario(system="dgx-a100", model="gpt2", batch_per_gpu=8, fidelity="analytic")
    )
    for bad in (1.5, 0, True):
        with pytest.raises(ConfigError, match=r"^level=") as err:
            report.interval(bad)  # type: ignore[arg-type]
        assert err.value.where == "level"
