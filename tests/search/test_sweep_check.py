"""Audit 15, item 13: a sweep spec's axis values are checked before any work (an unknown
system or model, a value the scenario parser refuses, a GPU count no grid point has): a
typed error naming the spec file and the axis, exit 2, nothing written. Errors that only a
whole scenario meets stay error rows, naming the axis value as the spec's."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.search._eval import canonical_key
from perfmodel.search.sweep import SweepSpec, load_results, run_sweep
from perfmodel.search.sweep_check import SweepAxisError, check_spec

BASE = {"model": "resnet50", "batch_per_gpu": 64, "fidelity": "analytic"}


def _spec(axes: dict, zipped: dict | None = None, base: dict | None = None) -> SweepSpec:
    data = {"base": {**BASE, **(base or {})}, "axes": axes}
    if zipped:
        data["zip"] = zipped
    return SweepSpec.from_dict(data, where="grid.toml")


def _own(scenario: dict) -> dict:
    """A caller's evaluator over its own keys."""
    return {"v": scenario["x"]}


def _cli(tmp_path: Path, spec: dict) -> tuple[int, str, Path]:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "out" / "r.jsonl"
    out.parent.mkdir()  # an output file's folder must exist (audit15 item 12)
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        rc = main(["sweep", str(path), "-o", str(out), "--quiet"])
    return rc, err.getvalue(), out


def test_the_audits_spec_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    spec = {"base": BASE, "axes": {"system": ["dgx1-v100", "dgx-foo"], "gpus": [1, 2, 4, 8, 9]}}
    rc, err, out = _cli(tmp_path, spec)
    assert rc == 2
    assert "grid.json:axes.system = 'dgx-foo'" in err and "unknown system 'dgx-foo'" in err
    assert "--system" not in err  # the value came from the spec, not from a flag
    assert not out.exists() and not any(out.parent.iterdir())


@pytest.mark.parametrize(
    ("axes", "zipped", "where", "value"),
    [
        ({"gpus": [1, 8, 9]}, None, "grid.toml:axes.gpus", 9),
        ({"system": ["dgx-a100", "dgx1-v100"], "gpus": [8, 16]}, None, "grid.toml:axes.gpus", 16),
        ({"nodes": [1, 2], "gpus": [16, 32]}, None, "grid.toml:axes.gpus", 32),
        ({"precision": ["fp16", "fp9"]}, None, "grid.toml:axes.precision", "fp9"),
        ({"gpus": [8]}, {"model": ["resnet50", "resnet5000"]}, "grid.toml:zip.model", "resnet5000"),
        (
            {"software": ["pytorch-ddp", "pytorch-dpp"]},
            None,
            "grid.toml:axes.software",
            "pytorch-dpp",
        ),
    ],
)
def test_bad_axis_values_name_the_file_and_the_axis(
    axes: dict, zipped: dict | None, where: str, value: object
) -> None:
    with pytest.raises(SweepAxisError) as exc:
        check_spec(_spec(axes, zipped))
    assert exc.value.where == where and exc.value.value == value
    assert str(exc.value).startswith(f"{where} = {value!r}: ")


def test_gpu_counts_are_checked_against_each_points_hardware() -> None:
    """16 GPUs are two DGX servers: fine with nodes = 2 in the base or paired in [zip]; a
    GB200 NVL72 rack has 72 (the system file's GPUs per server)."""
    check_spec(_spec({"gpus": [8, 16]}, base={"nodes": 2, "system": "dgx-a100"}))
    check_spec(_spec({}, {"system": ["dgx1-v100", "gb200-nvl72"], "gpus": [8, 72]}))
    with pytest.raises(SweepAxisError, match=r"has 8 GPUs \(dgx1-v100: 8 per server x nodes=1\)"):
        check_spec(_spec({}, {"system": ["dgx1-v100", "gb200-nvl72"], "gpus": [72, 8]}))


def test_a_good_spec_passes_and_custom_evaluators_are_not_checked(tmp_path: Path) -> None:
    check_spec(_spec({"system": ["dgx1-v100", "dgx-a100"], "gpus": [1, 8]}))
    odd = SweepSpec.from_dict({"base": {}, "axes": {"x": [1, 2]}})
    with pytest.raises(SweepAxisError, match=r"axes\.x: .x. is not a scenario key"):
        run_sweep(odd, tmp_path / "a.jsonl", progress=None)
    assert not (tmp_path / "a.jsonl").exists()
    s = run_sweep(odd, tmp_path / "b.jsonl", evaluator=_own, key_fn=canonical_key, progress=None)
    assert s.evaluated == 2 and s.errors == 0


def test_a_run_time_error_row_names_the_axis_value(tmp_path: Path) -> None:
    """A micro-batch of 3 is a valid value that only this batch (64 per GPU) cannot split:
    an error row, naming the axis instead of a flag."""
    out = tmp_path / "r.jsonl"
    s = run_sweep(_spec({"microbatch": [3, 64]}, base={"system": "dgx1-v100"}), out, progress=None)
    assert s.errors == 1
    (bad,) = [r for r in load_results(out) if r["status"] == "error"]
    assert bad["error"].endswith("(sweep axis microbatch = 3)")
    assert "does not divide" in bad["error"]


def test_a_gpu_count_some_combination_runs_is_not_refused(tmp_path: Path) -> None:
    """Review rev15b, finding 1: `system` [dgx1-v100, dgx-a100] zipped with `nodes` [1, 2],
    crossed with `gpus` [8, 16]: dgx-a100 x 2 nodes runs 16 GPUs, so the spec passes and the
    one corner that cannot (dgx1-v100 x 1 node x 16 GPUs) is an error row naming the axis
    value; a count no combination runs (32) is still refused before any work."""
    zipped = {"system": ["dgx1-v100", "dgx-a100"], "nodes": [1, 2]}
    spec = _spec({"gpus": [8, 16]}, zipped)
    check_spec(spec)
    out = tmp_path / "r.jsonl"
    s = run_sweep(spec, out, progress=None)
    assert (s.evaluated, s.errors) == (4, 1)
    (bad,) = [r for r in load_results(out) if r["status"] == "error"]
    assert bad["axes"] == {"gpus": 16, "system": "dgx1-v100", "nodes": 1}
    assert bad["error"].endswith("(sweep axis gpus = 16)")
    with pytest.raises(SweepAxisError) as exc:
        check_spec(_spec({"gpus": [8, 16, 32]}, zipped))
    assert exc.value.where == "grid.toml:axes.gpus" and exc.value.value == 32
    assert "no grid point has the GPUs" in str(exc.value)


def test_a_point_without_a_system_is_checked_on_the_scenarios_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fix17 item 4: the GPU-count check of a point that names no system reads the scenario's
    default system (``Scenario.system``), not a copy of it: with a 16-GPU default (DGX-2) a
    16-GPU point passes, with the 8-GPU one it is refused naming it."""
    from perfmodel.scenario import Scenario

    with pytest.raises(SweepAxisError, match=r"dgx1-v100: 8 per server"):
        check_spec(_spec({"gpus": [16]}, base={"model": "gpt2"}))
    monkeypatch.setattr(Scenario, "system", "dgx2-v100")
    check_spec(_spec({"gpus": [16]}, base={"model": "gpt2"}))


def test_spec_point_is_the_points_scenario() -> None:
    """fix17 item 4: ``SweepSpec.point`` (the one place a grid point's scenario dict is made) is
    what ``points`` yields, grouped or not, dotted keys included."""
    spec = SweepSpec.from_dict(
        {"base": {"model": "gpt2", "model_args": {"depth": 2}},
         "axes": {"gpus": [1, 2], "model_args.depth": [3, 4]}}
    )  # fmt: skip
    for grouped in (False, True):
        for axis_values, sc in spec.points(grouped=grouped):
            assert spec.point(axis_values) == sc and sc["model_args"]["depth"] in (3, 4)
    assert spec.base["model_args"] == {"depth": 2}  # copied, not changed


@pytest.mark.parametrize(
    ("base", "axes", "match"),
    [
        ({"precison": "fp16"}, {"gpus": [1, 2]}, r"\[base\].*'precison'.*did you mean 'precision'"),
        ({}, {"model_args.hiden": [512, 1024]}, r"\[axes\] model_args\.hiden"),
        ({}, {"software_options.bucket_mbb": [25, 50]}, r"bucket_mbb"),
    ],
)
def test_the_api_refuses_what_the_cli_refuses(
    tmp_path: Path, base: dict, axes: dict, match: str
) -> None:
    """``run_sweep`` (the API) checks ``[base]`` keys and dotted sub-keys before any work, as
    ``perfmodel sweep`` does (:func:`perfmodel.search.sweep_check.check_spec_keys` in
    ``check_spec``): before, a ``[base]`` typo made every row an error row."""
    from perfmodel.errors import ConfigError

    spec = _spec(axes, base={"model": "gpt", **base})
    with pytest.raises(ConfigError, match=match):
        run_sweep(spec, tmp_path / "rows.jsonl", progress=None)
    assert not (tmp_path / "rows.jsonl").exists()
