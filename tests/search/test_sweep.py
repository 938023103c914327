"""Sweeps: grid expansion, streaming, resume after Ctrl-C or a killed process, errors as rows."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_fakes import cheap_predict

from perfmodel.errors import ConfigError
from perfmodel.search._eval import canonical_key
from perfmodel.search.sweep import SweepSpec, load_results, read_done_keys, run_sweep

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def small_spec(n_x: int = 4, n_y: int = 3) -> SweepSpec:
    return SweepSpec.from_dict(
        {
            "base": {"model": "toy", "model_args": {"depth": 1}},
            "axes": {"x": list(range(n_x)), "y": list(range(n_y))},
        }
    )


class CountingEvaluator:
    """Counts calls; raises KeyboardInterrupt on call number ``stop_at`` (1-based)."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.calls: list[dict] = []
        self.stop_at = stop_at

    def __call__(self, sc):
        if self.stop_at is not None and len(self.calls) + 1 == self.stop_at:
            raise KeyboardInterrupt
        self.calls.append(dict(sc))
        return cheap_predict(sc)


def sweep(spec: SweepSpec, out: Path, **kw):
    """``run_sweep`` in this process on the toy evaluator with canonical keys and no progress
    output, unless ``kw`` says otherwise."""
    opts = {
        "backend": "serial",
        "evaluator": cheap_predict,
        "key_fn": canonical_key,
        "progress": None,
        **kw,
    }
    return run_sweep(spec, out, **opts)


def keys_in(path: Path) -> list[str]:
    return [r["key"] for r in load_results(path)]


def test_spec_from_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        '[base]\nsystem = "dgx1-v100"\nmodel = "gpt"\n[base.model_args]\nhidden = 512\n'
        '[axes]\ngpus = [1, 2, 4]\n"model_args.layers" = [2, 4]\n'
        '[zip]\nsystem = ["a", "b"]\nnetwork = ["n1", "n2"]\n'
    )
    spec = SweepSpec.from_file(f)
    pts = list(spec.points())
    assert len(spec) == len(pts) == 3 * 2 * 2
    assert spec.axis_names == ("gpus", "model_args.layers", "system", "network")
    axes, sc = pts[-1]
    assert axes == {"gpus": 4, "model_args.layers": 4, "system": "b", "network": "n2"}
    # dotted keys reach into nested tables without dropping the base's other entries
    assert sc["model_args"] == {"hidden": 512, "layers": 4}
    assert sc["system"] == "b" and sc["network"] == "n2" and sc["model"] == "gpt"
    # the base is not mutated between points
    assert pts[0][1]["model_args"] == {"hidden": 512, "layers": 2}


def test_spec_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="gridd"):
        SweepSpec.from_dict({"base": {}, "gridd": {}}, where="x.toml")
    with pytest.raises(ConfigError, match=r"axes\.gpus must be a list"):
        SweepSpec.from_dict({"axes": {"gpus": 4}}, where="x.toml")
    with pytest.raises(ConfigError, match="equal lengths"):
        SweepSpec.from_dict({"zip": {"a": [1, 2], "b": [1]}})
    with pytest.raises(ConfigError, match="no values"):
        SweepSpec.from_dict({"axes": {"a": []}})
    with pytest.raises(ConfigError, match="vary twice"):
        SweepSpec.from_dict({"axes": {"a": [1]}, "zip": {"a": [2]}})
    with pytest.raises(ConfigError, match="unsupported extension"):
        run_sweep(small_spec(), tmp_path / "out.txt", evaluator=cheap_predict, key_fn=canonical_key)


def test_serial_sweep_writes_every_row_once(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    s = sweep(small_spec(), out)
    assert (s.total, s.unique, s.evaluated, s.errors, s.interrupted) == (12, 12, 12, 0, False)
    rows = load_results(out)
    assert len(rows) == 12 and len({r["key"] for r in rows}) == 12
    r = next(r for r in rows if r["axes"] == {"x": 3, "y": 2})
    assert r["report"]["iteration_time_s"] == pytest.approx(1 + 3 + 4)
    assert r["key"] == canonical_key(r["scenario"])
    # a second run finds everything done and evaluates nothing
    ev = CountingEvaluator()
    s2 = sweep(small_spec(), out, evaluator=ev)
    assert s2.already_done == 12 and s2.evaluated == 0 and ev.calls == []


def test_ctrl_c_then_resume_loses_and_repeats_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    ev1 = CountingEvaluator(stop_at=6)
    err = io.StringIO()
    s1 = sweep(small_spec(), out, evaluator=ev1, progress=err)
    assert s1.interrupted and s1.evaluated == 5
    assert "interrupted; 5 of 12 rows" in err.getvalue()
    first = keys_in(out)
    assert len(first) == 5
    assert out.read_bytes().endswith(b"\n")
    ev2 = CountingEvaluator()
    s2 = sweep(small_spec(), out, evaluator=ev2)
    assert s2.already_done == 5 and s2.evaluated == 7 and not s2.interrupted
    recomputed = {canonical_key(sc) for sc in ev2.calls} & set(first)
    assert recomputed == set()
    final = keys_in(out)
    assert len(final) == 12 and len(set(final)) == 12
    assert final[:5] == first  # rows already written are untouched


#: A child sweep of 40 rows at 0.05 s each, signalled after 4-5 rows. It restores Python's
#: SIGINT handler first: a test run started as a background job of a non-interactive shell
#: (``cmd &``) inherits SIGINT ignored (POSIX), and the child would then finish its sweep
#: ("finished" instead of "interrupted"), as in two fresh-clone runs of session 22.
_KILL_SCRIPT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [{here!r}, {repo!r}]
from search_fakes import cheap_predict
from perfmodel.search._eval import canonical_key
from perfmodel.search.sweep import SweepSpec, run_sweep

def slow(sc):
    time.sleep(0.05)
    return cheap_predict(sc)

spec = SweepSpec.from_dict({{"base": {{"model": "toy"}}, "axes": {{"x": list(range(40))}}}})
run_sweep(spec, {out!r}, backend="serial", evaluator=slow, key_fn=canonical_key, progress=None)
"""


def _n_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_killed_process_and_half_written_line_are_repaired(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    script = _KILL_SCRIPT.format(here=str(HERE), repo=str(REPO), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while _n_lines(out) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    done_before = keys_in(out)
    assert 5 <= len(done_before) < 40
    # simulate a write torn by the kill: half a JSON line at the end
    with out.open("ab") as fh:
        fh.write(b'{"key": "deadbeef", "status": "o')
    ev = CountingEvaluator()
    spec = SweepSpec.from_dict({"base": {"model": "toy"}, "axes": {"x": list(range(40))}})
    err = io.StringIO()
    s = sweep(spec, out, evaluator=ev, progress=err)
    assert s.repaired_bytes == len(b'{"key": "deadbeef", "status": "o')
    assert "cut a partial last line" in err.getvalue()
    assert s.already_done == len(done_before) and s.evaluated == 40 - len(done_before)
    assert not ({canonical_key(sc) for sc in ev.calls} & set(done_before))
    final = keys_in(out)
    assert len(final) == 40 == len(set(final))


def test_errors_are_rows_not_crashes(tmp_path: Path) -> None:
    spec = SweepSpec.from_dict({"base": {"x": 1}, "axes": {"model": ["toy", "broken", "toy2"]}})
    out = tmp_path / "r.jsonl"
    s = sweep(spec, out)
    assert s.evaluated == 3 and s.errors == 1
    bad = [r for r in load_results(out) if r["status"] == "error"]
    assert len(bad) == 1
    assert bad[0]["error_type"] == "InfeasiblePlanError" and "broken" in bad[0]["error"]
    assert bad[0]["axes"] == {"model": "broken"}
    # errors count as done unless asked to retry them
    assert len(read_done_keys(out)[0]) == 3
    assert len(read_done_keys(out, retry_errors=True)[0]) == 2
    ev = CountingEvaluator()
    s2 = sweep(spec, out, evaluator=ev, retry_errors=True)
    assert [c["model"] for c in ev.calls] == ["broken"]  # only the error row is evaluated again
    assert s2.already_done == 2 and s2.evaluated == 1
    rows = load_results(out)
    assert len(rows) == 3 and len({r["key"] for r in rows}) == 3  # the old error row was replaced


def test_key_function_errors_become_rows(tmp_path: Path) -> None:
    def strict_key(sc):
        if sc["x"] == 2:
            raise ConfigError("unknown scenario key 'x' value 2", value=2, where="x")
        return canonical_key(sc)

    spec = SweepSpec.from_dict({"base": {}, "axes": {"x": [1, 2, 3]}})
    out = tmp_path / "r.jsonl"
    s = sweep(spec, out, key_fn=strict_key)
    assert s.key_errors == 1 and s.errors == 1 and s.evaluated == 3
    rows = load_results(out)
    assert sum(r["status"] == "error" for r in rows) == 1
    s2 = sweep(spec, out, key_fn=strict_key)
    assert s2.evaluated == 0 and s2.already_done == 3


def test_csv_output_resume_and_header_check(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    ev1 = CountingEvaluator(stop_at=4)
    sweep(small_spec(), out, evaluator=ev1)
    sweep(small_spec(), out)
    rows = load_results(out)
    assert len(rows) == 12 and len({r["key"] for r in rows}) == 12
    assert list(rows[0])[:7] == ["key", "status", "error_type", "error", "elapsed_s", "x", "y"]
    r = next(r for r in rows if r["x"] == "1" and r["y"] == "1")
    assert float(r["iteration_time_s"]) == pytest.approx(4.0)
    other = SweepSpec.from_dict({"base": {}, "axes": {"z": [1]}})
    with pytest.raises(ConfigError, match="differs from this sweep's columns"):
        sweep(other, out)


def test_refuses_to_append_to_a_foreign_file(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text('{"not": "a row"}\n')
    with pytest.raises(ConfigError, match=r"r\.jsonl:1: not a sweep result row"):
        sweep(small_spec(), out)


def test_joblib_matches_serial(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    sweep(small_spec(8, 5), a)
    s = sweep(small_spec(8, 5), b, backend="joblib", jobs=2)
    assert s.evaluated == 40
    ra = {r["key"]: r["report"] for r in load_results(a)}
    rb = {r["key"]: r["report"] for r in load_results(b)}
    assert ra == rb


def test_ten_thousand_scenarios(tmp_path: Path) -> None:
    spec = SweepSpec.from_dict(
        {"base": {"model": "toy"}, "axes": {"x": list(range(100)), "y": list(range(100))}}
    )
    assert len(spec) == 10_000
    out = tmp_path / "big.jsonl"
    err = io.StringIO()
    t0 = time.perf_counter()
    s = sweep(spec, out, backend="joblib", jobs=2, progress=err)
    elapsed = time.perf_counter() - t0
    assert s.evaluated == 10_000 and not s.interrupted
    assert _n_lines(out) == 10_000
    assert len(read_done_keys(out)[0]) == 10_000
    assert "10000/10000 done" in err.getvalue()
    assert elapsed < 40, f"10,000 cheap scenarios took {elapsed:.1f} s"


def test_dask_backend_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip(
        "dask.distributed",
        reason="dask is not installed (optional extra: pip install 'perfmodel[dask]')",
    )
    out = tmp_path / "d.jsonl"
    s = sweep(small_spec(), out, backend="dask", jobs=2)
    assert s.evaluated == 12 and len(set(keys_in(out))) == 12


def test_dask_missing_is_a_config_error(tmp_path: Path) -> None:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"perfmodel\[dask\]"):
            sweep(small_spec(), tmp_path / "d.jsonl", backend="dask")
    else:
        pytest.skip("dask is installed; the missing-dask message cannot be shown")


def test_bad_jobs_and_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--jobs"):
        run_sweep(
            small_spec(),
            tmp_path / "a.jsonl",
            jobs=0,
            evaluator=cheap_predict,
            key_fn=canonical_key,
        )
    with pytest.raises(ConfigError, match="unknown --backend 'spark'"):
        run_sweep(
            small_spec(),
            tmp_path / "a.jsonl",
            backend="spark",
            evaluator=cheap_predict,
            key_fn=canonical_key,
        )


def test_written_rows_are_json_lines(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    sweep(small_spec(2, 2), out)
    for line in out.read_text().splitlines():
        row = json.loads(line)
        assert set(row) >= {"key", "status", "report", "axes", "scenario", "elapsed_s"}
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@settings(max_examples=12, deadline=None)
@given(stop_at=st.integers(1, 13), second_stop=st.integers(1, 13))
def test_any_two_interruptions_then_resume_gives_every_row_once(
    stop_at: int, second_stop: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.jsonl"
        calls: list[str] = []
        for stop in (stop_at, second_stop, None):
            ev = CountingEvaluator(stop_at=stop)
            sweep(small_spec(), out, evaluator=ev)
            calls.extend(canonical_key(sc) for sc in ev.calls)
        keys = keys_in(out)
        assert sorted(keys) == sorted(set(keys)) and len(keys) == 12
        assert sorted(calls) == sorted(keys)  # each scenario evaluated exactly once overall


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_real_sigint_keeps_finished_rows_and_resume_completes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    script = (
        _KILL_SCRIPT.format(here=str(HERE), repo=str(REPO), out=str(out)).replace(
            "run_sweep(spec,", "s = run_sweep(spec,"
        )
        + "\nprint('interrupted' if s.interrupted else 'finished')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while _n_lines(out) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and stdout.strip() == "interrupted"
    assert out.read_bytes().endswith(b"\n")
    done = keys_in(out)
    assert 4 <= len(done) < 40
    ev = CountingEvaluator()
    spec = SweepSpec.from_dict({"base": {"model": "toy"}, "axes": {"x": list(range(40))}})
    s = sweep(spec, out, evaluator=ev)
    assert s.already_done == len(done) and s.evaluated == 40 - len(done)
    assert len(set(keys_in(out))) == 40 == len(keys_in(out))


@pytest.mark.parametrize("data", [{}, {"base": {}}, {"axes": {}, "zip": {}}])
def test_a_spec_that_names_no_scenario_is_refused(data: dict) -> None:
    with pytest.raises(ConfigError, match="names no scenario") as exc:
        SweepSpec.from_dict(data, where="empty.toml")
    assert exc.value.where == "empty.toml"
    # one axis alone, or a base alone, is a sweep
    assert len(SweepSpec.from_dict({"axes": {"gpus": [1, 2]}})) == 2
    assert len(SweepSpec.from_dict({"base": {"model": "resnet50"}})) == 1


def test_csv_from_an_earlier_version_is_refused_naming_what_differs(tmp_path: Path) -> None:
    """fix17 item 4: a CSV written before session 14 (no ``epoch_time_s_low``/``_high``,
    ``interval_warning`` columns) does not resume: a typed error names the file and the missing
    columns (not two whole headers), and the file is left byte for byte."""
    from perfmodel.errors import FileAccessError
    from perfmodel.search.sweep_file import _META_COLUMNS, ROW_COLUMNS

    out = tmp_path / "old.csv"
    new_cols = ("epoch_time_s_low", "epoch_time_s_high", "interval_warning")
    old = [c for c in (*_META_COLUMNS, "x", "y", *ROW_COLUMNS) if c not in new_cols]
    row = ["x=1,y=1", "ok", "", "", "0.1", "1", "1", *[""] * (len(old) - 7)]
    out.write_text(",".join(old) + "\n" + ",".join(row) + "\n")
    before = out.read_bytes()
    with pytest.raises(FileAccessError) as info:
        sweep(small_spec(), out)
    msg = str(info.value)
    assert str(out) in msg and "lacks column(s) epoch_time_s_low, epoch_time_s_high" in msg
    assert "interval_warning" in msg and "another perfmodel version" in msg
    assert "throughput_samples_per_s" not in msg  # the columns both have are not listed
    assert out.read_bytes() == before
