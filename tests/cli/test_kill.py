"""Issue 15: killing a ``--jobs 2`` sweep (SIGKILL, no chance to clean up) leaves no worker
process and nothing of it in ``/dev/shm`` behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import sys, time
sys.path[:0] = [{search!r}, {repo!r}]
from search_fakes import cheap_predict
from perfmodel.search._eval import canonical_key
from perfmodel.search.sweep import SweepSpec, run_sweep

def slow(sc):
    time.sleep(0.2)
    return cheap_predict(sc)

spec = SweepSpec.from_dict({{"base": {{"model": "toy"}}, "axes": {{"x": list(range(400))}}}})
run_sweep(spec, {out!r}, backend="joblib", jobs=2, chunk_size=1, evaluator=slow,
          key_fn=canonical_key, progress=None)
"""


def _children(pid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.add(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_killed_jobs2_sweep_leaves_no_worker_and_no_semaphore(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    script = _SCRIPT.format(search=str(ROOT / "tests" / "search"), repo=str(ROOT), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and out.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.05)
        kids = _children(proc.pid)
        assert len(kids) >= 2, "the sweep should be running its workers"
        shm = (
            {p for p in os.listdir("/dev/shm") if str(proc.pid) in p}
            if os.path.isdir("/dev/shm")
            else set()
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 30  # a bound on waiting, not a speed requirement
        while time.monotonic() < deadline and any(_alive(k) for k in kids):
            time.sleep(0.1)
        assert not [k for k in kids if _alive(k)], f"worker processes outlived the sweep: {kids}"
        while time.monotonic() < deadline and any(os.path.exists(f"/dev/shm/{p}") for p in shm):
            time.sleep(0.1)
        assert not [p for p in shm if os.path.exists(f"/dev/shm/{p}")]
    finally:
        if proc.poll() is None:
            proc.kill()
