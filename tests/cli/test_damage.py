"""Issue 15, the three damage cases: bad input must never modify a file the command did not write.

1. ``sweep -o`` on an unrelated CSV/JSONL/binary/UTF-16 file is refused before any "repair".
2. ``calibrate --nccl-log`` with NaN/inf in the log refuses it and keeps the good profile.
3. Two sweeps on one output: the second stops at the advisory lock (exit 2).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfmodel.cli import main

ROOT = Path(__file__).resolve().parents[2]
NCCL_LOG = ROOT / "tests" / "fixtures" / "nccl" / "a3mega-h100-2node-all_reduce.txt"

SPEC = (
    '[base]\nmodel = "resnet50"\nsystem = "dgx1-v100"\nfidelity = "analytic"\nbatch_per_gpu = 8\n'
    "[axes]\ngpus = [1]\n"
)


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "grid.toml"
    p.write_text(SPEC)
    return p


FOREIGN = {
    "data.csv": b"a,b,c\n1,2,3\n4,5,6",  # no final newline: the old code cut "4,5,6"
    "data.jsonl": b'{"x": 1}\n{"x": 2}\n{"x": 3',
    "bin.csv": bytes(range(256)) * 4,
    "u16.csv": "a,b\n1,2\n3,4".encode("utf-16"),
    "u16.jsonl": '{"x": 1}\n{"x'.encode("utf-16"),
    "half.jsonl": b'{"x": 1, "y": 2',  # one partial line that is not a sweep row
    "half.csv": b"name,value",  # one partial line that is not a sweep header
}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_sweep_refuses_a_foreign_output_before_touching_it(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / name
    out.write_bytes(FOREIGN[name])
    rc = main(["sweep", str(_spec(tmp_path)), "-o", str(out), "--quiet"])
    assert rc == 2
    assert out.read_bytes() == FOREIGN[name]
    err = capsys.readouterr().err
    assert str(out) in err and "Traceback" not in err


def test_sweep_still_repairs_its_own_torn_last_line(tmp_path: Path) -> None:
    """The repair of a sweep's own torn line (a killed writer) keeps working."""
    out = tmp_path / "r.jsonl"
    own = b'{"key":"k1","status":"ok","error_type":null,"error":null}\n'
    out.write_bytes(own + b'{"key":"k2","sta')
    from perfmodel.search.sweep import read_done_keys

    keys, repaired = read_done_keys(out)
    assert keys == {"k1"} and repaired == len(b'{"key":"k2","sta')
    assert out.read_bytes() == own


def _nccl_log_with(tmp_path: Path, bad: str) -> Path:
    lines = NCCL_LOG.read_text().splitlines(keepends=True)
    i = max(k for k, ln in enumerate(lines) if ln.strip()[:1].isdigit())
    parts = lines[i].split()
    parts[5] = bad  # the out-of-place time (us)
    lines[i] = "  ".join(parts) + "\n"
    p = tmp_path / f"log-{bad}.txt"
    p.write_text("".join(lines))
    return p


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_calibrate_refuses_non_finite_log_and_keeps_the_profile(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = tmp_path / "h.json"
    argv = ["calibrate", "--nccl-log", str(NCCL_LOG), "--link", "infiniband", "--op", "allreduce"]
    assert main([*argv, "-o", str(prof)]) == 0
    good = prof.read_bytes()
    json.loads(good)  # a readable profile
    capsys.readouterr()
    log = _nccl_log_with(tmp_path, bad)
    rc = main(["calibrate", "--nccl-log", str(log), "--link", "infiniband", "--op", "allreduce",
               "-o", str(prof)])  # fmt: skip
    assert rc == 2
    assert prof.read_bytes() == good
    err = capsys.readouterr().err
    assert str(log) in err and bad in err


def test_profile_save_refuses_non_finite_measurements(tmp_path: Path) -> None:
    from perfmodel.calibration.profile import CalibrationProfile
    from perfmodel.errors import CalibrationError

    prof = ROOT / "calibration" / "h100-sxm5-80gb.json"
    data = json.loads(prof.read_text())
    data["measurements"] = data["measurements"][:2]
    p = CalibrationProfile.from_dict(data)
    m = p.measurements[0]
    import dataclasses

    bad = dataclasses.replace(m, timing=dataclasses.replace(m.timing, median_s=float("nan")))
    out = tmp_path / "p.json"
    out.write_text("keep")
    with pytest.raises(CalibrationError, match="non-finite"):
        dataclasses.replace(p, measurements=(bad,)).save(out)
    assert out.read_text() == "keep"


def test_second_sweep_on_one_output_stops_at_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfmodel.search.sweep_file import open_output

    out = tmp_path / "r.csv"
    fd = open_output(out)  # the first sweep, mid-run
    try:
        before = out.read_bytes()
        rc = main(["sweep", str(_spec(tmp_path)), "-o", str(out), "--quiet"])
        assert rc == 2
        assert out.read_bytes() == before
        assert "another perfmodel sweep" in capsys.readouterr().err
    finally:
        os.close(fd)
    assert main(["sweep", str(_spec(tmp_path)), "-o", str(out), "--quiet"]) == 0


def test_a_lock_released_within_the_grace_is_taken(tmp_path: Path) -> None:
    """A lock held for a moment (a child forked by the sweep that held the file, before its
    exec closes the descriptor) is waited for; one held past the grace stops the sweep."""
    import threading

    from perfmodel.search.sweep_file import OutputLockedError, _lock, open_output

    out = tmp_path / "r.csv"
    held = open_output(out)
    threading.Timer(0.3, os.close, args=(held,)).start()
    fd = open_output(out)  # waits for the release instead of failing at once
    os.close(fd)
    held = open_output(out)
    fd = os.open(out, os.O_RDWR)
    try:
        with pytest.raises(OutputLockedError):
            _lock(fd, out, grace_s=0.1)
    finally:
        os.close(fd)
        os.close(held)


def test_second_calibrate_on_one_profile_stops_at_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfmodel._io import output_lock

    prof = tmp_path / "h.json"
    argv = ["calibrate", "--nccl-log", str(NCCL_LOG), "--link", "infiniband", "--op", "allreduce"]
    with output_lock(prof):  # the first calibration, mid-run
        assert main([*argv, "-o", str(prof)]) == 2
        assert not prof.exists()
        assert "another perfmodel process" in capsys.readouterr().err
    assert main([*argv, "-o", str(prof)]) == 0
