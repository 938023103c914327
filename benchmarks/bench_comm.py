"""Benchmark (a script, not a test): how long the communication model itself takes.

Simulated all-reduce of 1 GiB over 1024 GPUs (128 DGX A100 servers on a two-level fat tree of
HDR InfiniBand), plus the analytic fast path for comparison, and a small fully chunked simulation.

    python benchmarks/bench_comm.py            # prints a table; numbers recorded in docs/comm.md
"""

from __future__ import annotations

import platform
import time

from perfmodel.comm import CommCostModel
from perfmodel.topology import load_system
from perfmodel.units import GiB


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    print(f"# python {platform.python_version()} on {platform.machine()}, one process")
    (topo, t_build) = timed(lambda: load_system("dgx-a100", nodes=128, fabric_topology="fat-tree"))
    print(f"build topology {topo.name}: {topo.num_gpus} GPUs, {topo.graph.number_of_nodes()} nodes, "
          f"{topo.graph.number_of_edges()} links: {t_build:.2f} s")  # fmt: skip
    rows = []
    analytic = CommCostModel(topo)
    r, t = timed(lambda: analytic.collective("allreduce", GiB, topo.gpus, "ring"))
    rows.append(("analytic, first call (group analysis)", r, t))
    r, t = timed(lambda: analytic.collective("allreduce", GiB // 2, topo.gpus, "ring"))
    rows.append(("analytic, cached group", r, t))
    sim = CommCostModel(topo, fidelity="simulated")
    r, t = timed(lambda: sim.collective("allreduce", GiB, topo.gpus, "ring"))
    rows.append(("simulated (1 flow per ring channel)", r, t))
    small = load_system("dgx-a100", nodes=4, fabric_topology="fat-tree")
    sim_small = CommCostModel(small, fidelity="simulated")
    r, t = timed(lambda: sim_small.collective("allreduce", GiB, small.gpus, "ring"))
    rows.append(("simulated 32 GPUs (chunked ring steps)", r, t))
    print(f"{'case':42} {'GPUs':>5} {'predicted':>12} {'busbw':>10} {'run time':>10}")
    for name, res, sec in rows:
        print(f"{name:42} {res.group_size:>5} {res.time_s * 1e3:>9.2f} ms "
              f"{res.busbw_Bps / 1e9:>6.1f} GB/s {sec:>8.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
