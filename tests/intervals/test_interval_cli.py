"""Every answer carries its interval (issue 26): ``predict`` (text, ``--json``, curves),
``compare`` (ties), ``comm``, ``sweep``, with ``--interval LEVEL|off``."""

from __future__ import annotations

import json
import math

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import cli_json

H100 = ["--system", "dgx-h100", "--model", "llama3_8b", "--software", "torchtitan",
        "--global-batch", "16", "--precision", "bf16", "--fidelity", "analytic"]  # fmt: skip


def test_predict_prints_the_range_and_what_it_rests_on(capsys) -> None:
    assert main(["predict", *H100]) == 0
    out = capsys.readouterr().out
    assert "80% range    (from " in out and "published runs" in out and "like this one" in out
    assert "  iteration time  " in out and "  tokens/s/GPU    " in out
    assert "runs like this one were predicted" in out


def test_predict_json_fields_are_consistent(capsys) -> None:
    d = cli_json(capsys, ["predict", *H100, "--json"])
    assert d["interval_level"] == 0.8
    assert d["interval_basis"].endswith(
        "like this one (Hopper, dense transformers, 1B+ parameters)"
    )
    t_lo, t_hi = d["iteration_time_s_low"], d["iteration_time_s_high"]
    assert t_lo < t_hi
    samples = d["samples_per_step"]
    # a rate's range is the inverse of the time's: the slow end of one is the low of the other
    assert d["throughput_samples_per_s_low"] == pytest.approx(samples / t_hi)
    assert d["throughput_samples_per_s_high"] == pytest.approx(samples / t_lo)
    assert d["mfu_low"] / d["mfu"] == pytest.approx(d["iteration_time_s"] / t_hi)
    assert d["tokens_per_s_per_gpu_low"] < d["tokens_per_s_per_gpu"] * 1.5
    assert -1 < d["interval_bias"] < 1 and d["interval_bounded"] is True


def test_interval_level_and_off(capsys) -> None:
    d8 = cli_json(capsys, ["predict", *H100, "--json"])
    d5 = cli_json(capsys, ["predict", *H100, "--json", "--interval", "50%"])
    assert d5["interval_level"] == 0.5
    assert d8["iteration_time_s_low"] < d5["iteration_time_s_low"]  # a higher level is wider
    assert d5["iteration_time_s_high"] < d8["iteration_time_s_high"]
    off = cli_json(capsys, ["predict", *H100, "--json", "--interval", "off"])
    assert off["interval_level"] is None
    assert not [k for k in off if k.endswith(("_low", "_high"))]
    assert main(["predict", *H100, "--interval", "off"]) == 0
    assert "range" not in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0", "1.0", "100%", "-0.2", "nan", "wide"])
def test_bad_interval_is_refused(capsys, bad: str) -> None:
    assert main(["predict", *H100, "--interval", bad]) == 2
    assert "--interval" in capsys.readouterr().err


def test_a_gpu_without_published_runs_says_so(capsys) -> None:
    args = ["predict", "--system", "mi300x-8", "--model", "llama3_8b", "--software", "fsdp",
            "--global-batch", "16", "--precision", "bf16", "--fidelity", "analytic"]  # fmt: skip
    d = cli_json(capsys, [*args, "--json"])
    assert (
        d["interval_warning"] == "outside the validated range: no published run on MI300X (CDNA3)"
    )
    assert main(args) == 0
    assert (
        "note: outside the validated range: no published run on MI300X" in capsys.readouterr().out
    )


def test_speedup_curve_has_the_ratio_range(capsys) -> None:
    args = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "64",
            "--fidelity", "analytic", "--gpus", "1,2,8"]  # fmt: skip
    rows = cli_json(capsys, [*args, "--json"])
    assert "speedup_low" not in rows[0]  # the baseline itself: exactly 1
    for r in rows[1:]:
        assert r["speedup_low"] < r["speedup"] * 1.2 and r["speedup_high"] > r["speedup_low"]
        assert "published speedups" in r["speedup_interval_basis"]
    # the ratio's own range is narrower than two independent step ranges would make it
    step = rows[2]["iteration_time_s_high"] / rows[2]["iteration_time_s_low"]
    assert rows[2]["speedup_high"] / rows[2]["speedup_low"] < step
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "80% speedup" in out and "speedup range from" in out


def test_compare_marks_statistical_ties(capsys) -> None:
    args = ["compare", "--system", "dgx-a100", "--model", "gpt", "--model-arg", "layers=12",
            "--model-arg", "hidden=1024", "--model-arg", "heads=16", "--model-arg", "seq_len=1024",
            "--global-batch", "32", "--precision", "bf16", "--software", "megatron-core",
            "--top", "4", "--confirm-k", "0", "--analytic-k", "4"]  # fmt: skip
    d = cli_json(capsys, [*args, "--json"])
    assert d["interval_level"] == 0.8 and "published runs" in d["interval_basis"]
    plans = d["plans"]
    assert plans[0]["interval"]["tied_with_best"] is False
    best_hi = plans[0]["interval"]["score_high"]
    for p in plans[1:]:
        iv = p["interval"]
        assert iv["tied_with_best"] == (iv["score_low"] <= best_hi)
        assert iv["score_low"] < p["scores"][p["stage"]] < iv["score_high"] or math.isclose(
            iv["score_low"], iv["score_high"]
        )
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "statistically tied with #1" in out or "beyond the model's error" in out
    assert main([*args, "--interval", "off"]) == 0
    assert "statistically tied" not in capsys.readouterr().out


def test_compare_basis_line_is_predicts_with_the_bias(capsys) -> None:
    """mend17a item 6: the plan search says what its ranges rest on as predict, the systems
    search and the what-if do (``intervals.wording.basis_clause``: the basis, then the median
    bias of runs like the best plan, then its notes), not a basis without the bias."""
    args = ["compare", "--system", "dgx-a100", "--model", "gpt", "--model-arg", "layers=12",
            "--model-arg", "hidden=1024", "--model-arg", "heads=16", "--model-arg", "seq_len=1024",
            "--global-batch", "32", "--precision", "bf16", "--software", "megatron-core",
            "--top", "4", "--confirm-k", "0", "--analytic-k", "4"]  # fmt: skip
    d = cli_json(capsys, [*args, "--json"])
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    basis = [ln for ln in lines if ln.startswith("  80% ranges from ")]
    assert len(basis) == 1
    assert basis[0].startswith(f"  80% ranges from {d['interval_basis']}; runs like these were ")
    assert basis[0].split("; ")[1].endswith("(median)")


def test_comm_bounds_each_size(capsys) -> None:
    args = ["comm", "--system", "dgx-a100", "--nodes", "2", "--sizes", "1M:256M:16"]
    d = cli_json(capsys, [*args, "--json"])
    assert d["interval_level"] == 0.8
    for r in d["results"]:
        assert (
            r["busbw_Bps_low"] < r["busbw_Bps"] < r["busbw_Bps_high"]
            or r["busbw_Bps_low"] < r["busbw_Bps_high"]
        )
        assert r["time_s_low"] == pytest.approx(r["time_s"] * r["busbw_Bps"] / r["busbw_Bps_high"])
        assert "published collective measurements" in r["interval_basis"]
    assert main(args) == 0
    assert "busbw 80%" in capsys.readouterr().out


def test_sweep_rows_carry_the_range(tmp_path, capsys) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(
        '[base]\nsystem = "dgx1-v100"\nmodel = "resnet50"\nbatch_per_gpu = 32\n'
        'fidelity = "analytic"\n[axes]\ngpus = [1, 2]\n'
    )
    out = tmp_path / "r.jsonl"
    args = ["sweep", str(spec), "-o", str(out), "--backend", "serial", "--quiet"]
    assert main(args) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    for r in rows:
        rep = r["report"]
        assert rep["interval_level"] == 0.8
        assert rep["iteration_time_s_low"] < rep["iteration_time_s_high"]
    off = tmp_path / "off.jsonl"
    assert main(["sweep", str(spec), "-o", str(off), "--backend", "serial", "--quiet",
                 "--interval", "off"]) == 0  # fmt: skip
    assert "interval_level" not in json.loads(off.read_text().splitlines()[0])["report"]


def test_compare_gives_no_tie_verdict_on_ranges_it_cannot_bound(capsys) -> None:
    """At a level the record cannot bound (its publications too few for a 99% range, the widest
    they give standing in) the plan search marks no tie and says why, in text and JSON (rev15b
    item 2); at 80% the same plans' ranges are bounded."""
    args = ["compare", "--system", "dgx-a100", "--model", "gpt", "--model-arg", "layers=12",
            "--model-arg", "hidden=1024", "--model-arg", "heads=16", "--model-arg", "seq_len=1024",
            "--global-batch", "32", "--precision", "bf16", "--software", "megatron-core",
            "--top", "4", "--confirm-k", "0", "--analytic-k", "4"]  # fmt: skip
    d = cli_json(capsys, [*args, "--json", "--interval", "0.99"])
    ivs = [p["interval"] for p in d["plans"]]
    assert ivs and all(not iv["bounded"] and not iv["tied_with_best"] for iv in ivs)
    assert main([*args, "--interval", "0.99"]) == 0
    out = capsys.readouterr().out
    assert "no verdict on ties with #1" in out and "statistically tied" not in out
    assert "beyond the model's error" not in out
    d = cli_json(capsys, [*args, "--json"])
    assert all(p["interval"]["bounded"] for p in d["plans"])
