"""Issue 28, items 3 and 4: notes are data on the report and every view prints them, naming the
GPU pairs they concern; a run that does not fit in memory has no speedup."""

from __future__ import annotations

import json

import pytest

from perfmodel.api import Scenario, predict, predict_curve
from perfmodel.cli import main

RTX = ["--system", "pcie-8x-server", "--gpu", "RTX-4090"]
RN50 = ["--model", "resnet50", "--batch-per-gpu", "32", "--fidelity", "analytic"]


def _rtx(gpus: int) -> Scenario:
    return Scenario(
        system="pcie-8x-server",
        gpu="RTX-4090",
        model="resnet50",
        batch_per_gpu=32,
        gpus=gpus,
        fidelity="analytic",
    )


def test_the_host_memory_note_is_on_the_report_and_in_its_dict() -> None:
    rep = predict(_rtx(2), baseline=False)
    note = next(n for n in rep.notes if "host memory" in n)
    assert "RTX-4090: no PCIe peer-to-peer" in note and "gpu0-gpu1" in note
    d = rep.to_dict()
    assert note in d["notes"] and note in d["printed_notes"]
    assert note in rep.format_table()
    one = predict(_rtx(1), baseline=False)
    assert not any("host memory" in n for n in one.notes)  # one GPU talks to nobody


def test_curve_and_json_curve_print_the_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", *RTX, *RN50, "--gpus", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "no PCIe peer-to-peer" in out and "gpu0-gpu1" in out
    assert main(["predict", *RTX, *RN50, "--gpus", "1,2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert not any("host memory" in n for n in rows[0]["printed_notes"])
    assert any("no PCIe peer-to-peer" in n for n in rows[1]["notes"])
    assert main(["predict", *RTX, *RN50, "--gpus", "2", "--json"]) == 0
    assert any("no PCIe peer-to-peer" in n for n in json.loads(capsys.readouterr().out)["notes"])


def test_whatif_prints_each_systems_notes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--systems", "pcie-8x-server:gpu=RTX-4090", *RN50, "--gpus", "1,2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pcie-8x-server:gpu=RTX-4090 x2: note:" in out and "gpu0-gpu1" in out


def test_dgx1_note_names_the_pairs_without_nvlink_only() -> None:
    """On the hybrid cube mesh the GPUs of one quad are all NVLink neighbours: no note for 4
    GPUs; for 8 the note names the 12 pairs without NVLink, not every transfer."""
    sc = Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=32, fidelity="analytic")
    four = predict(Scenario(**{**sc.to_dict(), "gpus": 4}), baseline=False)
    assert not any("host memory" in n for n in four.notes)
    eight = predict(sc, baseline=False)
    note = next(n for n in eight.notes if "host memory" in n)
    assert "12 of the 28 GPU pairs" in note and "gpu0-gpu5" in note
    assert "every GPU-to-GPU transfer" not in note
    assert "gpu0-gpu1" not in note  # NVLink neighbours talk directly


def test_a_plan_that_does_not_fit_has_no_speedup(capsys: pytest.CaptureFixture[str]) -> None:
    big = Scenario(
        system="dgx-a100",
        model="gpt",
        model_args={"hidden": 12288, "layers": 96, "heads": 96, "seq_len": 2048},
        global_batch=64,
        precision="bf16",
        optimizer="adam",
        software="megatron",
        fidelity="analytic",
    )
    rep = predict(big)
    assert not rep.fits_in_memory
    assert rep.speedup is None and rep.scaling_efficiency is None
    assert any("does not fit" in d for d in rep.defaults)
    assert "speedup " not in rep.format_table().replace("no speedup", "")
    small = predict_curve(_rtx(1), [1, 2])
    assert all(r.speedup is not None for r in small)


def test_curve_row_that_does_not_fit_shows_no_speedup(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "--system", "dgx-a100", "--model", "gpt", "--model-arg", "hidden=12288"]
    argv += ["layers=96", "heads=96", "--global-batch", "8", "--precision", "bf16"]
    argv += ["--optimizer", "adam", "--software", "megatron", "--fidelity", "analytic"]
    assert main([*argv, "--gpus", "1,8"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [ln for ln in out if ln[:5].strip().isdigit() and ln.rstrip().endswith(("yes", "NO"))]
    assert len(rows) == 2
    for row in rows:
        assert row.rstrip().endswith("NO")
        assert "x " not in row  # no "1.00x" next to a run that cannot start
