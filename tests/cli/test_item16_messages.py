"""audit15 item 16's messages: an error names where the value came from (a ``--systems`` entry's
key, maxbatch's flag), ``sweep --dry-run`` checks the spec as the run does, and a sweep CSV
carries the epoch range and the interval's warning its JSONL rows have."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import JOB, refused

CUSTOM = "custom:gpu=H100-PCIE-80GB:intra_node=pcie5"


@pytest.mark.parametrize("search", [[], ["--search"]])
def test_systems_entry_error_names_the_entry_key(
    search: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, ["compare", "--systems", f"dgx-h100,{CUSTOM}", *search, *JOB])
    assert f"--systems entry {CUSTOM!r}: system custom needs gpus_per_node" in err
    assert f"{CUSTOM}:gpus_per_node=..." in err and "--gpus-per-node" not in err


@pytest.mark.parametrize(
    "flag, value", [("--optimizer", "foo"), ("--recompute", "foo"), ("--software", "foo")]
)
def test_maxbatch_bad_choice_names_the_flag(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, ["model", "maxbatch", "gpt2", "--gpu", "H100-SXM5-80GB", flag, value])
    assert flag in err and "scenario." not in err and repr(value) in err


SPEC = """[base]
model = "gpt2"
batch_per_gpu = 8
system = "dgx-h100"
dataset_size = 100000
fidelity = "analytic"
[axes]
gpus = [1, 8]
"""


def test_sweep_dry_run_checks_the_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(
        SPEC.replace('system = "dgx-h100"\n', "").replace(
            "[axes]\n", '[axes]\nsystem = ["dgx-h100", "dgx-foo"]\n'
        )
    )
    out = tmp_path / "o.jsonl"
    err = refused(capsys, ["sweep", str(spec), "-o", str(out), "--dry-run"])
    assert "axes.system = 'dgx-foo'" in err and not out.exists()


def test_sweep_csv_has_the_jsonl_epoch_range_and_warning(tmp_path: Path) -> None:
    spec = tmp_path / "ok.toml"
    spec.write_text(SPEC)
    rows = {}
    for ext in ("jsonl", "csv"):
        assert main(["sweep", str(spec), "-o", str(tmp_path / f"o.{ext}"), "--quiet"]) == 0
    for line in (tmp_path / "o.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows[r["key"]] = r["report"]
    for c in csv.DictReader((tmp_path / "o.csv").open()):
        rep = rows[c["key"]]
        for k in ("epoch_time_s_low", "epoch_time_s_high"):
            assert float(c[k]) == pytest.approx(rep[k], rel=1e-12)
        assert c["interval_warning"] == rep["interval_warning"]
