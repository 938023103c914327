"""Collectives measured through ``torch.distributed`` (NCCL on >= 2 GPUs, Gloo on the CPU).

One process per rank (``torch.multiprocessing.spawn``), rendezvous over TCP on the loopback
interface. Each (op, size) is warmed up, then timed ``repeats`` times; a repetition is
barrier -> start -> collective -> end on every rank, and the time of a repetition is the slowest
rank's (the collective is done when the last rank is done). NCCL runs are timed with CUDA events
on each rank's stream, Gloo runs with the host clock. Sizes follow the nccl-tests convention of
:class:`perfmodel.ops.CollectiveOp` (all-gather: the whole output buffer).

The result is a list of ``collective`` :class:`Measurement` s tagged with ``link_class`` (the link
family or technology the GPUs are connected by, as :class:`perfmodel.comm.LinkParams` matches it;
:func:`intra_node_link_class` reads it from ``nvidia-smi topo -m``), ready for
:func:`perfmodel.calibration.nccl.fit_link_params`.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Sequence
from typing import Any

from perfmodel.calibration.measurement import Measurement, TimingStats, collective_measurement
from perfmodel.comm.params import link_class_name
from perfmodel.errors import CalibrationError
from perfmodel.ops import CollectiveOp

DEFAULT_OPS = (CollectiveOp.ALLREDUCE, CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(
    rank: int,
    world: int,
    port: int,
    backend: str,
    device: str,
    plan: list[tuple[str, int]],
    repeats: int,
    queue: Any,
) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_DEBUG", "WARN")
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        dev = torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")
        if device == "cuda":
            torch.cuda.set_device(dev)
        results: list[tuple[str, int, list[float]]] = []
        for op_name, nbytes in plan:
            op = CollectiveOp(op_name)
            elems = max(world, nbytes // 4)
            elems -= elems % world
            full = torch.rand(elems, device=dev) + 0.5
            shard = torch.rand(elems // world, device=dev) + 0.5

            def run(op: CollectiveOp = op, full: Any = full, shard: Any = shard) -> None:
                if op is CollectiveOp.ALLREDUCE:
                    dist.all_reduce(full)
                elif op is CollectiveOp.ALLGATHER:
                    dist.all_gather_into_tensor(full, shard)
                elif op is CollectiveOp.REDUCESCATTER:
                    dist.reduce_scatter_tensor(shard, full)
                elif op is CollectiveOp.BROADCAST:
                    dist.broadcast(full, src=0)
                else:
                    raise CalibrationError(
                        f"collective {op.value} is not benchmarked", value=op.value
                    )

            for _ in range(3):
                run()
            if device == "cuda":
                torch.cuda.synchronize(dev)
            times = []
            for _ in range(repeats):
                dist.barrier()
                if device == "cuda":
                    s, e = (
                        torch.cuda.Event(enable_timing=True),
                        torch.cuda.Event(enable_timing=True),
                    )
                    s.record()
                    run()
                    e.record()
                    e.synchronize()
                    t = s.elapsed_time(e) * 1e-3
                else:
                    t0 = time.perf_counter()
                    run()
                    t = time.perf_counter() - t0
                times.append(t)
            # the repetition's time is the slowest rank's
            tt = torch.tensor(times, dtype=torch.float64, device=dev)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            results.append((op_name, elems * 4, tt.cpu().tolist()))
        if rank == 0:
            queue.put(results)
    finally:
        dist.destroy_process_group()


def measure_collectives(
    world_size: int,
    *,
    backend: str = "nccl",
    device: str = "cuda",
    sizes: Sequence[int] = tuple(2**k for k in range(10, 31, 2)),
    ops: Sequence[CollectiveOp] = DEFAULT_OPS,
    repeats: int = 10,
    link_class: str,
    timeout_s: float = 300.0,
) -> list[Measurement]:
    """Time ``ops`` at ``sizes`` (bytes) over ``world_size`` local ranks; one measurement each.

    Raises
    ------
    CalibrationError
        Fewer than 2 ranks, more ranks than GPUs, or the worker processes failed.
    """
    import torch
    import torch.multiprocessing as mp

    if world_size < 2:
        raise CalibrationError(
            f"collectives need >= 2 ranks, got {world_size}", value=world_size, where="world_size"
        )
    if device == "cuda" and torch.cuda.device_count() < world_size:
        raise CalibrationError(
            f"{world_size} ranks need {world_size} GPUs, found {torch.cuda.device_count()}",
            value=world_size,
            where="world_size",
        )
    plan = [(op.value, int(n)) for op in ops for n in sizes]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = [
        ctx.Process(
            target=_worker,
            args=(r, world_size, port, backend, device, plan, repeats, queue),
            daemon=True,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    for p in procs:
        if p.is_alive():
            p.terminate()
    if failed or queue.empty():
        raise CalibrationError(
            f"collective benchmark workers failed (exit codes {[p.exitcode for p in procs]})",
            value=failed,
            where=f"torch.distributed {backend}",
        )
    results = queue.get()
    out = []
    for op_name, nbytes, times in results:
        out.append(
            collective_measurement(
                op_name,
                nbytes,
                ranks=world_size,
                nodes=1,
                dtype="float",
                link_class=link_class_name(link_class, where="link_class"),
                timing=TimingStats.from_samples(times, where=f"{op_name} {nbytes} B"),
                backend=f"torch.distributed-{backend}",
                notes=f"median of {len(times)} repetitions, slowest rank per repetition "
                f"(median {statistics.median(times) * 1e6:.1f} us)",
                more_params={"backend": backend},
            )
        )
    return out


def intra_node_link_class(smi_text: str, gpu_model: str) -> str:
    """The link technology that bounds a transfer between GPU 0 and GPU 1 of this machine.

    ``smi_text`` is the output of ``nvidia-smi topo -m``; the server graph is rebuilt with
    :func:`perfmodel.topology.importers.from_smi_text` and the narrowest link of the route
    GPU 0 -> GPU 1 names the class (e.g. ``nvlink4`` on an H100 NVSwitch board, ``pcie4-x16``
    on a PCIe box), so that fitted link parameters apply to the links they were measured on.

    Raises
    ------
    CalibrationError
        If the text has fewer than two GPUs.
    """
    from perfmodel.topology import route
    from perfmodel.topology.importers import from_smi_text
    from perfmodel.topology.routing import path_edges
    from perfmodel.topology.schema import effective_bandwidth

    topo = from_smi_text(smi_text, gpu=gpu_model, source="nvidia-smi topo -m")
    if topo.num_gpus < 2:
        raise CalibrationError(
            "nvidia-smi topo -m shows fewer than 2 GPUs", value=topo.num_gpus, where="nvidia-smi"
        )
    g = topo.graph
    u, v = min(
        path_edges(route(topo, topo.gpus[0], topo.gpus[1])),
        key=lambda e: effective_bandwidth(g, *e),
    )
    return link_class_name(g.edges[u, v]["tech"], where="nvidia-smi topo -m")
