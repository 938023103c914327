"""Issue 15's fuzz tier: generated bad flags and malformed files for every subcommand.

Properties: bad input exits 2 with a message (never a traceback, never exit 0), and no file the
command did not write changes. Documents are fuzzed by replacing one field of a valid document
(found by a generated path) with a generated value of any JSON type: the loader either accepts
it or raises a :class:`~perfmodel.errors.PerfModelError`; nothing else may escape. Bounded
(``max_examples``) so the tier stays within a few seconds per test on 2 cores.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import tomllib
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from perfmodel.cli import main
from perfmodel.errors import PerfModelError
from tests.cli.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
PROFILE = json.loads((ROOT / "calibration" / "h100-sxm5-80gb.json").read_text())
PROFILE["measurements"] = PROFILE["measurements"][:6]

#: examples per property (``PERFMODEL_FUZZ_EXAMPLES=500`` for a deeper local run)
FUZZ = settings(
    max_examples=int(os.environ.get("PERFMODEL_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ------------------------------------------------------------------------------- flags

_SYS = ["--system", "dgx1-v100"]
_PRED = ["predict", *_SYS, "--model", "resnet50", "--batch-per-gpu", "8", "--fidelity", "analytic"]
_CMP = ["compare", *_SYS, "--model", "resnet50", "--global-batch", "64"]

#: (command line before the flag, flag, kind) for every numeric flag of every subcommand
NUMERIC_FLAGS: list[tuple[list[str], str, str]] = [
    *[(_PRED, f, "int") for f in ("--nodes", "--nics-per-node", "--gpus-per-node")],
    (_PRED, "--oversubscription", "float"),
    *[(_PRED, f, "int") for f in ("--learners-per-gpu", "--dataset-size")],
    (["predict", *_SYS, "--model", "resnet50", "--fidelity", "analytic"], "--batch-per-gpu", "int"),
    (["predict", *_SYS, "--model", "resnet50", "--fidelity", "analytic"], "--global-batch", "int"),
    (["comm", *_SYS], "--gpus", "int"),
    (["comm", *_SYS], "--nodes", "int"),
    *[(_CMP, f, "int") for f in ("--top", "--max-tp")],
    *[(_CMP, f, "count") for f in ("--analytic-k", "--confirm-k")],
    (_CMP, "--jobs", "jobs"),
    *[
        (_CMP, f, "float")
        for f in ("--lifetime-years", "--utilization", "--epochs", "--deadline", "--b-noise")
    ],
    (["model", "show", "resnet50"], "--batch", "int"),
    (["model", "show", "resnet50"], "--tp", "int"),
    (["model", "maxbatch", "resnet50", "--gpu", "V100"], "--tp", "int"),
    (["sweep", "x.toml", "-o", "never-written.jsonl"], "--jobs", "jobs"),
]

_BAD_COMMON = ["", " ", "x", "1e", "nan", "inf", "-inf", "NaN", "1,2", "--", "0x10"]
BAD_VALUES = {
    "int": [*_BAD_COMMON, "0", "-3", "1.5", "true", "2.0", "\u0663"],
    "count": [*_BAD_COMMON, "-1", "-3", "1.5", "true"],
    "jobs": [*_BAD_COMMON, "0", "-2", "-3", "1.5", "true"],
    "float": [*_BAD_COMMON, "0", "-1", "-0.5", "1e999"],
}


@FUZZ
@given(
    case=st.sampled_from(NUMERIC_FLAGS),
    pick=st.integers(min_value=0, max_value=40),
)
def test_bad_numeric_flag_exits_2_naming_it(
    case: tuple[list[str], str, str], pick: int, capsys: pytest.CaptureFixture[str]
) -> None:
    before, flag, kind = case
    value = BAD_VALUES[kind][pick % len(BAD_VALUES[kind])]
    rc, err = run_cli([*before, f"{flag}={value}"], capsys)
    assert rc == 2, f"{flag}={value!r} exited {rc}"
    assert flag.lstrip("-") in err or "usage:" in err


# ----------------------------------------------------------------------- documents


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys/indexes) into a JSON-like document."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return doc


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

_PROFILE_PATHS = _paths(PROFILE)


@FUZZ
@given(path=st.sampled_from(_PROFILE_PATHS), value=JSON_VALUES)
def test_mutated_profile_is_loaded_or_refused(path: tuple, value: Any) -> None:
    from perfmodel.calibration.profile import CalibrationProfile

    doc = _replace(PROFILE, path, value)
    try:
        p = CalibrationProfile.from_dict(doc, where="fuzz.json")
    except PerfModelError:
        return
    # accepted: it must survive its own round trip and never hold a non-finite measured time
    for m in p.measurements:
        assert math.isfinite(m.time_s)


@FUZZ
@given(path=st.sampled_from(_PROFILE_PATHS), value=JSON_VALUES)
@example(path=("provenance", "refits"), value=None)  # was a TypeError (null: no re-fits yet)
@example(path=("provenance", "refits"), value=5)  # not a list: exit 2 naming the key
def test_refit_of_a_mutated_profile_exits_0_or_2_and_writes_only_its_output(
    path: tuple, value: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    d = tmp_path_factory.mktemp("refit")
    src = d / "in.json"
    src.write_text(json.dumps(_replace(PROFILE, path, value)))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    out = d / "out.json"
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["calibrate", "--refit", str(src), "-o", str(out)])
    assert rc in (0, 2)
    assert "Traceback" not in err.getvalue()
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest
    if rc == 2:
        assert not out.exists()


_TOPO = None


def _topology_doc() -> dict:
    global _TOPO
    if _TOPO is None:
        from perfmodel._io import load_toml

        _TOPO = load_toml(ROOT / "topologies" / "dgx1-v100.toml")
    return _TOPO


@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_mutated_topology_is_built_or_refused(data: st.DataObject, value: Any) -> None:
    from perfmodel.topology.io import parse_server

    doc = _topology_doc()
    path = data.draw(st.sampled_from(_paths(doc)))
    try:
        parse_server(_replace(doc, path, value), source="fuzz.toml")
    except PerfModelError:
        pass


_SCENARIO = {
    "system": "dgx1-v100",
    "model": "resnet50",
    "batch_per_gpu": 8,
    "gpus": 2,
    "precision": "fp16",
    "plan": "dp=2",
    "model_args": {"num_classes": 10},
    "fidelity": "analytic",
    "oversubscription": 1.0,
    "sequence_parallel": False,
}


@FUZZ
@given(key=st.sampled_from(sorted(_SCENARIO)), value=JSON_VALUES)
def test_mutated_scenario_is_predicted_or_refused(key: str, value: Any) -> None:
    from perfmodel.api import Scenario, predict

    try:
        predict(Scenario.from_dict({**_SCENARIO, key: value}, where="fuzz.toml"))
    except PerfModelError:
        pass


_LINK_PARAMS = {"nvlink": {"alpha_us": 2.0, "bandwidth_GBps": 20.0}, "source": "fuzz"}


@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_mutated_link_params_are_read_or_refused(data: st.DataObject, value: Any) -> None:
    from perfmodel.comm import LinkParams

    path = data.draw(st.sampled_from(_paths(_LINK_PARAMS)))
    try:
        LinkParams.from_dict(_replace(_LINK_PARAMS, path, value), where="fuzz.toml")
    except PerfModelError:
        pass


_SWEEP = {"base": {"model": "toy"}, "axes": {"x": [1, 2]}, "zip": {"a": [1, 2], "b": [3, 4]}}


@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_mutated_sweep_spec_is_read_or_refused(data: st.DataObject, value: Any) -> None:
    from perfmodel.search.sweep import SweepSpec

    path = data.draw(st.sampled_from(_paths(_SWEEP)))
    try:
        spec = SweepSpec.from_dict(_replace(_SWEEP, path, value), where="fuzz.toml")
        list(spec.points())
    except PerfModelError:
        pass


# ------------------------------------------------------------------------ raw bytes

_FILE_COMMANDS = [
    ("predict {f}", ".toml"),
    ("predict --system {f} --model resnet50 --batch-per-gpu 8", ".toml"),
    ("predict --system dgx1-v100 --model resnet50 --batch-per-gpu 8 --calibration {f}", ".json"),
    ("comm --system dgx1-v100 --link-params {f}", ".toml"),
    ("comm --system dgx1-v100 --compare {f}", ".txt"),
    ("topo import {f}", ".xml"),
    ("topo import {f}", ".json"),
    ("compare --tta-data {f}", ".jsonl"),
    ("sweep {f} -o {out}.jsonl", ".toml"),
    ("sweep {spec} -o {f}", ".jsonl"),
    ("sweep {spec} -o {f}", ".csv"),
    ("validate --profile {f} -o {out}", ".json"),
    ("validate --measurements {f} -o {out}", ".jsonl"),
    ("calibrate --refit {f} -o {out}.json", ".json"),
    (
        "calibrate --nccl-log {f} --link infiniband --op allreduce -o {out}.json",
        ".txt",
    ),
]

_GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(lambda t: t.encode("utf-16")),
    st.sampled_from([b"\xff\xfe", b"\x00" * 8, b"{", b"[1,", b"a,b\n1", b'{"key": 1}\n{', b"\xe9"]),
)


def _blank(blob: bytes, suffix: str) -> bool:
    """Whether ``blob`` says nothing: blank, or (``.toml``) a document that parses to ``{}``."""
    if not blob.strip():
        return True
    if suffix != ".toml":
        return False
    try:
        return tomllib.loads(blob.decode("utf-8")) == {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


@FUZZ
@given(case=st.sampled_from(_FILE_COMMANDS), blob=_GARBAGE)
@example(case=("comm --system dgx1-v100 --link-params {f}", ".toml"), blob=b"#")
@example(case=("sweep {f} -o {out}.jsonl", ".toml"), blob=b"#")
@example(case=("sweep {f} -o {out}.jsonl", ".toml"), blob=b" ")
def test_garbage_file_exits_2_and_stays_unchanged(
    case: tuple[str, str], blob: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    d = tmp_path_factory.mktemp("garbage")
    f = d / f"in{case[1]}"
    f.write_bytes(blob)
    spec = d / "spec.toml"
    spec.write_text(
        '[base]\nmodel = "resnet50"\nfidelity = "analytic"\nbatch_per_gpu = 8\n[axes]\ngpus = [1]\n'
    )
    argv = case[0].format(f=f, out=d / "out", spec=spec).split()
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    # an empty results file (a sweep's -o, resumed) can be valid input, and so can a
    # --link-params file that says nothing (blank, or TOML of comments only: an empty table
    # keeps every default); everything else, a blank log or spec included, is not
    if rc == 0:
        said_nothing = _blank(blob, f.suffix) and "--link-params" in case[0]
        assert said_nothing or f.suffix in (".jsonl", ".csv"), f"{argv} accepted {blob!r}"
    else:
        assert rc == 2, f"{argv}: exit {rc}"
    assert "Traceback" not in err.getvalue()
    if rc == 2:
        assert f.read_bytes() == blob
