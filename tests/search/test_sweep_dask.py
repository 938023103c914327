"""The Dask backend on a real ``dask.distributed.LocalCluster`` (2 worker processes): a worker
killed mid-sweep loses nothing and duplicates nothing; a scenario that kills every worker it runs
on becomes an error row (and ``--retry-errors`` evaluates it again)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip(
    "dask.distributed",
    reason="dask is not installed (optional extra: pip install 'perfmodel[dask]')",
)
import dask  # noqa: E402

from perfmodel.search._eval import canonical_key  # noqa: E402
from perfmodel.search.sweep import SweepSpec, run_sweep  # noqa: E402


def spec(n_x: int = 6, n_y: int = 4) -> SweepSpec:
    return SweepSpec.from_dict(
        {"base": {"model": "toy"}, "axes": {"x": list(range(n_x)), "y": list(range(n_y))}}
    )


class KillWorker:
    """Evaluator run on the workers: on scenario ``x == victim, y == 0`` it SIGKILLs its own
    worker process, once (``flag`` records the pid it killed) or every time (``flag=None``)."""

    def __init__(self, flag: str | None, victim: int = 2, delay_s: float = 0.02) -> None:
        self.flag, self.victim, self.delay_s = flag, victim, delay_s

    def __call__(self, sc: dict) -> dict:
        time.sleep(self.delay_s)  # keep both workers busy while the kill happens
        if sc["x"] == self.victim and sc["y"] == 0:
            if self.flag is None:
                os.kill(os.getpid(), signal.SIGKILL)
            elif not os.path.exists(self.flag):
                Path(self.flag).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
        return {"iteration_time_s": 0.1 * (1 + sc["x"] + sc["y"]), "pid": os.getpid()}


@pytest.fixture(scope="module")
def cluster():
    # one failure allowed per task: the second test's repeat killer is declared dead quickly
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as c:
            yield c


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_worker_killed_mid_sweep_every_row_once(cluster, tmp_path: Path) -> None:
    flag = tmp_path / "killed.pid"
    out = tmp_path / "sweep.jsonl"
    s = run_sweep(
        spec(),
        out,
        backend="dask",
        scheduler=cluster.scheduler_address,
        evaluator=KillWorker(str(flag)),
        key_fn=canonical_key,
        chunk_size=1,
        progress=None,
    )
    assert flag.exists(), "the evaluator did not kill its worker"
    got = rows(out)
    expected = {canonical_key(sc) for _a, sc in spec().points()}
    assert len(got) == 24 == len(expected)
    assert sorted(r["key"] for r in got) == sorted(expected)  # every row exactly once
    assert all(r["status"] == "ok" for r in got)
    victim = next(r for r in got if r["axes"] == {"x": 2, "y": 0})
    assert victim["report"]["pid"] != int(flag.read_text())  # re-run on another worker process
    assert s.evaluated == 24 and s.errors == 0


def test_scenario_that_kills_every_worker_is_an_error_row(cluster, tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    small = spec(3, 2)
    s = run_sweep(
        small,
        out,
        backend="dask",
        scheduler=cluster.scheduler_address,
        evaluator=KillWorker(None, delay_s=0.0),
        key_fn=canonical_key,
        chunk_size=1,
        progress=None,
    )
    got = rows(out)
    assert len(got) == 6 and len({r["key"] for r in got}) == 6
    bad = [r for r in got if r["status"] == "error"]
    # the killer, and perhaps a task queued on the same worker when it died twice (dask counts
    # every task assigned to a dying worker as suspicious)
    assert {"x": 2, "y": 0} in [r["axes"] for r in bad]
    assert {r["error_type"] for r in bad} == {"KilledWorker"}
    assert s.errors == len(bad) and s.evaluated == 6
    # resume: the error row is evaluated again (now by an evaluator that does not kill)
    flag = tmp_path / "done.pid"
    flag.write_text("0")
    s2 = run_sweep(
        small,
        out,
        backend="dask",
        scheduler=cluster.scheduler_address,
        evaluator=KillWorker(str(flag), delay_s=0.0),
        key_fn=canonical_key,
        retry_errors=True,
        progress=None,
    )
    assert s2.evaluated == len(bad) and s2.errors == 0
    got = rows(out)
    assert len(got) == 6 and all(r["status"] == "ok" for r in got)
