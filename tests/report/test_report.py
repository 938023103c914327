"""Reports: breakdown accounting, Chrome trace, plots."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_synthetic import FakeCosts, block_workload, lower_synthetic

from perfmodel.parallel.plan import ParallelismPlan, PipelineSchedule
from perfmodel.report.step_breakdown import breakdown
from perfmodel.report.trace import chrome_trace, plot_gantt, plot_speedup, write_chrome_trace
from perfmodel.sim.engine import evaluate


def _timeline(bw: float = 1e8):
    plan = ParallelismPlan(dp=2, pp=4, microbatch_size=1, schedule=PipelineSchedule.ONE_F_ONE_B)
    step = lower_synthetic(
        plan,
        block_workload(8),
        FakeCosts(bandwidth_Bps=bw, alpha_s=0.0 if bw == float("inf") else 1e-5),
        batch_per_replica=8,
    )
    return evaluate(step.graph)


@pytest.mark.parametrize("bw", [1e6, 1e8, float("inf")])
def test_breakdown_sums_to_iteration(bw: float) -> None:
    tl = _timeline(bw)
    bd = breakdown(tl)
    assert bd.total_s == pytest.approx(tl.makespan_s, rel=1e-9)
    assert bd.compute_s > 0
    if bw == float("inf"):
        # free communication: the 1F1B bubble is exactly (p - 1) / m of the compute
        assert bd.bubble_s == pytest.approx(bd.compute_s * 3 / 8, rel=1e-9)
        assert bd.exposed_comm_total_s == pytest.approx(0.0, abs=1e-12)
    else:
        assert bd.exposed_comm_total_s > 0


def test_chrome_trace_is_perfetto_shaped(tmp_path: Path) -> None:
    tl = _timeline()
    tr = chrome_trace(tl)
    ev = tr["traceEvents"]
    procs = {e["pid"] for e in ev if e.get("name") == "process_name"}
    assert procs == set(range(len(tl.graph.devices)))  # one process per simulated GPU
    threads = {(e["pid"], e["args"]["name"]) for e in ev if e.get("name") == "thread_name"}
    assert (0, "compute") in threads and (0, "send_fwd") in threads
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == len(tl.graph.tasks)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    out = tmp_path / "t.json"
    write_chrome_trace(tl, out)
    assert json.loads(out.read_text())["traceEvents"]


def test_plots_write_png(tmp_path: Path) -> None:
    tl = _timeline()
    plot_gantt(tl, tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"

    class R:
        def __init__(self, n: int, s: float) -> None:
            self.num_gpus, self.speedup, self.fits_in_memory = n, s, n < 8

    plot_speedup([R(1, 1.0), R(2, 1.9), R(4, 3.5), R(8, 6.0)], tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
