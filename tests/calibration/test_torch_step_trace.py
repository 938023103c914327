"""torch_step's temporary Kineto trace is deleted after it has been summarised."""

from __future__ import annotations

import tempfile

import pytest

from perfmodel.calibration.steps import StepSpec, torch_step

pytest.importorskip("torch")


def test_temporary_trace_is_removed(tmp_path, monkeypatch) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    spec = StepSpec("mlp", 4, "fp32", (("widths", (8, 8, 2)),))
    ms = torch_step(spec, "cpu", warmup=1, repeats=2)
    assert ms[0].params["trace_file"] == "mlp.json"
    assert any(m.kind.value == "step_layer" for m in ms)
    left = [p for p in scratch.rglob("*.json")]
    assert left == [], f"temporary traces left behind: {left}"


def test_trace_path_is_kept(tmp_path) -> None:
    trace = tmp_path / "t" / "mlp.json"
    spec = StepSpec("mlp", 4, "fp32", (("widths", (8, 8, 2)),))
    torch_step(spec, "cpu", warmup=1, repeats=2, trace_path=trace)
    assert trace.exists()
