"""``perfmodel compare`` and ``perfmodel sweep`` end to end on small real scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main

pytest.importorskip("perfmodel.api", reason="perfmodel.api (the prediction API) is not available")


def test_compare_without_a_mode_is_one_line_error(capsys) -> None:
    assert main(["compare", "--model", "gpt"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--system" in err[0] and "--systems" in err[0]


def test_compare_bad_gpu_list_names_the_flag(capsys) -> None:
    assert (
        main(
            [
                "compare",
                "--system",
                "dgx-a100",
                "--model",
                "gpt",
                "--gpus",
                "8,x",
                "--global-batch",
                "8",
            ]
        )
        == 2
    )
    assert "--gpus: 'x' is not an integer" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--zero", "0,x", "--zero: 'x' is not a ZeRO stage"),
        ("--sequence-parallel", "yes", "--sequence-parallel: 'yes' is not true or false"),
    ],
)
def test_compare_bad_search_values_are_one_line_errors(capsys, flag, value, needle) -> None:
    argv = ["compare", "--system", "dgx-a100", "--model", "gpt", "--global-batch", "8"]
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_compare_plan_search_small_gpt_json(capsys, tmp_path: Path) -> None:
    plot = tmp_path / "plans.png"
    argv = [
        "compare",
        "--system",
        "dgx-a100",
        "--model",
        "gpt",
        "--model-arg",
        "hidden=1024",
        "layers=8",
        "heads=16",
        "seq_len=1024",
        "--global-batch",
        "32",
        "--precision",
        "bf16",
        "--optimizer",
        "adam",
        "--software",
        "megatron",
        "--microbatch",
        "1,4",
        "--recompute",
        "none",
        "--zero",
        "0",
        "--analytic-k",
        "3",
        "--confirm-k",
        "0",
        "--json",
        "--top",
        "5",
        "--plot",
        str(plot),
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in out["stages"]] == ["screen", "analytic"]
    assert out["stages"][1]["evaluated"] == 3
    plans = out["plans"]
    assert len(plans) == 5 and plans[0]["stage"] == "analytic"
    for p in plans:
        assert p["plan"]["dp"] * p["plan"]["tp"] * p["plan"]["pp"] == 8
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_compare_tta_fit_only(capsys, shared_data) -> None:
    assert (
        main(
            [
                "compare",
                "--tta-data",
                str(shared_data / "seeds.jsonl"),
                "--tta-match",
                "crossbow",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    pts = out["fit_affine"]["points"]
    assert [p["global_batch"] for p in pts] == [32, 64, 128, 256, 512, 1024]
    assert 64 <= out["fit_affine"]["optimal_batch"] <= 512


def test_sweep_cli_resumes_and_records_errors(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(
        '[base]\nsystem = "dgx1-v100"\nmodel = "resnet18"\nbatch_per_gpu = 32\n'
        'fidelity = "analytic"\n[axes]\nmicrobatch = [32, 3]\ngpus = [1, 2]\n'
    )
    out = tmp_path / "r.jsonl"
    assert main(["sweep", str(spec), "-o", str(out), "--backend", "serial", "--quiet"]) == 0
    assert (
        "4 of 4 scenarios done (4 evaluated now, 0 already there, 2 errors)"
        in capsys.readouterr().out
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [r for r in rows if r["status"] == "error"]
    # a value only the whole scenario refuses (3 does not divide 32): error rows naming the axis
    assert len(bad) == 2 and all("(sweep axis microbatch = 3)" in r["error"] for r in bad)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 2
    assert all(r["report"]["iteration_time_s"] > 0 for r in ok)
    assert main(["sweep", str(spec), "-o", str(out), "--backend", "serial", "--quiet"]) == 0
    assert "(0 evaluated now, 4 already there" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 4
    assert main(["sweep", str(spec), "-o", str(tmp_path / "x.jsonl"), "--dry-run"]) == 0
    assert "4 scenarios over axes microbatch, gpus" in capsys.readouterr().out


def test_compare_whatif_cli_costs_and_deadline(capsys) -> None:
    argv = [
        "compare",
        "--systems",
        "dgx1-v100,pcie-8x-server",
        "--model",
        "resnet18",
        "--batch-per-gpu",
        "32",
        "--gpus",
        "1,2",
        "--price-per-gpu-hour",
        "2,1",
        "--epochs",
        "2",
        "--dataset-size",
        "100000",
        "--deadline",
        "10",
        "--fidelity",
        "analytic",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    pts = out["points"]
    assert {(p["system"], p["gpus"]) for p in pts} == {
        (s, g) for s in ("dgx1-v100", "pcie-8x-server") for g in (1, 2)
    }
    for p in pts:
        price = 2.0 if p["system"] == "dgx1-v100" else 1.0
        assert p["epoch_time_s"] == pytest.approx(100000 / p["throughput_samples_per_s"])
        assert p["cost_per_run"] == pytest.approx(2 * p["gpus"] * p["epoch_time_s"] / 3600 * price)
    ok = [p for p in pts if p["run_time_s"] <= 36000]
    assert out["cheapest"] == min(ok, key=lambda p: (p["cost_per_run"], p["run_time_s"]))
    assert (
        main(
            [
                "compare",
                "--systems",
                "dgx1-v100",
                "--model",
                "resnet18",
                "--batch-per-gpu",
                "8",
                "--purchase-price",
                "10000",
            ]
        )
        == 2
    )
    assert "--purchase-price needs --lifetime-years" in capsys.readouterr().err
