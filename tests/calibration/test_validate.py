"""The validation report: rows, signed errors, Markdown + PNG + JSON written atomically."""

from __future__ import annotations

import json

import pytest
from calibration_testlib import H100_PROFILE

from perfmodel.calibration import read_profile
from perfmodel.calibration.validate import (
    ValidationReport,
    ValidationRow,
    build_report,
    write_report,
    zoo_layer_name,
)
from perfmodel.cli import main
from perfmodel.errors import CalibrationError


def test_signed_error_and_summary():
    rows = (
        ValidationRow("step", "a", "v", measured_s=2.0, predicted_s=1.5),
        ValidationRow("step", "b", "v", measured_s=1.0, predicted_s=1.2),
        ValidationRow("step", "c", "v", measured_s=1.0, predicted_s=1.0),
    )
    assert rows[0].error == pytest.approx(-0.25)
    (s,) = ValidationReport(rows).summaries()
    assert s.n == 3 and s.median_error == pytest.approx(0.0)
    assert s.median_abs_error == pytest.approx(0.2) and s.worst_name == "a"


def test_layer_names_map_to_the_zoo():
    assert zoo_layer_name("layer3.5.conv2") == "layer3.5.2.conv"
    assert zoo_layer_name("bn1") == "conv1.bn"
    assert zoo_layer_name("blocks.11.attn") == "layer11.attention"


def test_h100_report_written(tmp_path):
    profile = read_profile(H100_PROFILE)
    report = build_report(profile)
    cats = {(r.category, r.variant) for r in report.rows}
    for cat in ("step", "layer", "layer_kind", "gemm", "conv"):
        for var in ("datasheet", "gemm+bw", "full"):
            assert (cat, var) in cats
    steps = [r for r in report.rows if r.category == "step"]
    assert len({r.name for r in steps}) == 7  # 7 measured training steps on the H100
    paths = write_report(report, tmp_path)
    assert {p.name for p in paths} == {"report.md", "report.json", "scatter.png", "errors.png"}
    assert (tmp_path / "scatter.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["summary"] and len(data["rows"]) == len(report.rows)
    md = (tmp_path / "report.md").read_text()
    assert "| step | full |" in md and "resnet50 b128 bf16" in md
    assert not list(tmp_path.glob("*.tmp"))


def test_empty_report_is_an_error(tmp_path):
    with pytest.raises(CalibrationError, match="nothing to validate"):
        write_report(ValidationReport(()), tmp_path)


def test_validate_cli(tmp_path, capsys):
    assert main(["validate", "--measurements", str(H100_PROFILE), "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| step | datasheet |" in out and (tmp_path / "errors.png").exists()
    assert main(["validate", "-o", str(tmp_path)]) == 2  # no profile: one-line error, exit 2
