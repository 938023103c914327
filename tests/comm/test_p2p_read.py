"""NCCL's P2P transport over NVLink: each rank's one local ring copy is serial with the ring's
NVLink steps (:mod:`perfmodel.comm.p2p_read`): read mode on A100, write mode without direct
pointers elsewhere."""

from __future__ import annotations

import pytest

from perfmodel.comm.model import CommCostModel
from perfmodel.comm.p2p_read import (
    P2pPath,
    ProcessLayout,
    local_copy_s,
    p2p_path,
    with_process_layout,
)
from perfmodel.ops import CollectiveOp
from perfmodel.topology import load_system

GIB = 2**30
READ = P2pPath(read=True, direct=False)


@pytest.fixture(scope="module")
def a100() -> CommCostModel:
    return CommCostModel(load_system("dgx-a100"))


def _ring(model: CommCostModel, n: int, op: CollectiveOp = CollectiveOp.ALLREDUCE, m: int = GIB):
    return model.collective(op, m, model.topology.gpus[:n], "ring")


def test_two_a100_all_reduce_adds_half_the_buffer_copied_at_half_the_hbm_rate(a100):
    """Hand value: 2 A100 (DGX A100, HBM2e 2,039 GB/s) all-reduce 1 GiB, ring/Simple: NCCL's
    tuner time latency + m / 235 GB/s (2.8 table: A100 cap; algorithm = bus bandwidth on 2
    ranks), plus each rank's local copies, (m / 2) / (2,039 / 2 GB/s) = 526.6 us."""
    r = _ring(a100, 2)
    mem_Bps = a100.topology.gpu_spec().memory_bandwidth_Bps
    assert mem_Bps == pytest.approx(2039e9)
    assert r.protocol is not None and r.protocol.value == "Simple"
    hand = r.latency_s + GIB / 235e9 + (GIB / 2) / (mem_Bps / 2)
    assert r.time_s == pytest.approx(hand, rel=1e-12)
    assert local_copy_s(CollectiveOp.ALLREDUCE, GIB, 2, mem_Bps, READ) == pytest.approx(
        526.6e-6, abs=0.1e-6
    )


@pytest.mark.parametrize(
    ("op", "traffic"), [(CollectiveOp.ALLGATHER, 3.0), (CollectiveOp.REDUCESCATTER, 2.0)]
)
def test_all_gather_and_reduce_scatter_copy_one_shard_per_rank(a100, op, traffic):
    """Read mode: reduce-scatter's step-0 ``send`` reads and writes one shard (2 m / n bytes);
    all-gather's out-of-place ``directCopySend`` reads it once and writes it twice, to the
    output and the FIFO (3 m / n), both at the memory bandwidth on top of NCCL's tuner time
    (8 GPUs, 1 GiB)."""
    r = _ring(a100, 8, op)
    mem_Bps = a100.topology.gpu_spec().memory_bandwidth_Bps
    algbw = 235e9 * 8 / 7  # nsteps = n - 1
    assert r.time_s == pytest.approx(r.latency_s + GIB / algbw + traffic * (GIB / 8) / mem_Bps)


def test_a100_bus_bandwidth_grows_with_the_ring_and_stays_below_nccls_cap(a100):
    """Property: the one copy per chunk weighs 1 / (2n - 1) of the ring's primitives, so a
    larger ring of the same server reaches more bus bandwidth, never NCCL's 235 GB/s."""
    bus = [_ring(a100, n).busbw_Bps for n in (2, 4, 8)]
    assert bus[0] < bus[1] < bus[2] < 235e9


def test_hopper_in_one_process_per_gpu_pays_the_final_recv_copy():
    """H100 over NVSwitch writes; a job of one process per GPU (torchrun) has no direct
    pointers, so the final ``directRecv`` copies the FIFO into the output: 2 m / n bytes at the
    HBM3 bandwidth on top of the tuner's latency + bytes / algorithm bandwidth. This failed
    before the write-mode copy (the old module charged A100 only)."""
    model = CommCostModel(load_system("dgx-h100"))
    mem_Bps = model.topology.gpu_spec().memory_bandwidth_Bps
    for n in (2, 8):
        r = _ring(model, n)
        assert r.protocol is not None and r.protocol.value == "Simple"
        algbw = r.bandwidth_Bps * n / (2 * (n - 1))
        copy = 2 * (GIB / n) / mem_Bps
        assert r.time_s == pytest.approx(r.latency_s + GIB / algbw + copy, rel=1e-9)


@pytest.mark.parametrize(("release", "copies"), [((2, 22), False), ((2, 23), True)])
def test_one_process_writes_through_direct_pointers_until_2_22(release, copies):
    """One process for the server's GPUs (nccl-tests ``-g N``): NCCL <= 2.22 gives unregistered
    write-mode connections direct pointers (no copy); 2.23 dropped them (copy)."""
    path = p2p_path((9, 0), nvlink=True, layout=ProcessLayout.PER_SERVER, release=release)
    assert path is not None and path.read is False and path.direct is not copies
    assert (local_copy_s(CollectiveOp.ALLREDUCE, GIB, 8, 3.35e12, path) > 0) is copies


def test_v100_copy_follows_the_process_layout():
    """DGX-1 V100 (NCCL 2.8 era, no release stated): one process per GPU pays the final
    ``directRecv`` copy, one process for all (direct pointers) does not; the reduce-scatter's
    final ``recvReduceCopy`` (3 m / n) is local in both."""
    base = load_system("dgx1-v100")
    per_gpu = CommCostModel(base)
    one = CommCostModel(with_process_layout(base, ProcessLayout.PER_SERVER))
    mem_Bps = base.gpu_spec().memory_bandwidth_Bps
    gpus = base.gpus[:2]
    ar_gpu = per_gpu.collective(CollectiveOp.ALLREDUCE, GIB, gpus, "ring")
    ar_one = one.collective(CollectiveOp.ALLREDUCE, GIB, gpus, "ring")
    assert ar_gpu.time_s - ar_one.time_s == pytest.approx(2 * (GIB / 2) / mem_Bps, rel=1e-9)
    rs_gpu = per_gpu.collective(CollectiveOp.REDUCESCATTER, GIB, gpus, "ring")
    rs_one = one.collective(CollectiveOp.REDUCESCATTER, GIB, gpus, "ring")
    assert rs_gpu.time_s == pytest.approx(rs_one.time_s, rel=1e-12)


def test_across_servers_the_copy_is_not_added():
    """Across servers the ring's pace is the network's (the proxy, not the thread block, moves
    a network step): the group of 2 x 8 A100 pays no copy."""
    model = CommCostModel(load_system("dgx-a100", nodes=2))
    info = model.group_info(tuple(model.topology.gpus[:16]))
    assert info.nodes == 2 and info.p2p is not None and info.p2p.read
    r = model.collective(CollectiveOp.ALLREDUCE, GIB, model.topology.gpus[:16], "ring")
    algbw = r.bandwidth_Bps * 16 / 30
    assert r.time_s == pytest.approx(r.latency_s + GIB / algbw, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "nvlink", "reads"),
    [
        ("A100-SXM4-80GB", True, True),
        ("A100-PCIE-40GB", False, None),  # PCIe P2P: no NVLink, no copy charged
        ("RTX-3090", True, False),  # Ampere, compute capability 8.6: writes
        ("H100-SXM5-80GB", True, False),
        ("B200-SXM-180GB", True, False),
    ],
)
def test_read_mode_is_compute_capability_8_0_over_nvlink(name, nvlink, reads):
    """The catalogue's compute capability decides the mode (not the GPU's name)."""
    from perfmodel.hardware import get_gpu

    cc = get_gpu(name).compute_capability
    path = p2p_path(cc, nvlink=nvlink, layout=ProcessLayout.PER_GPU, release=(2, 29))
    assert (None if path is None else path.read) is reads


def test_other_collectives_and_one_rank_copy_nothing():
    for op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE, CollectiveOp.ALLTOALL):
        assert local_copy_s(op, GIB, 8, 2e12, READ) == 0.0
    assert local_copy_s(CollectiveOp.ALLREDUCE, GIB, 1, 2e12, READ) == 0.0


def test_the_flow_replay_pays_the_same_copy(a100):
    """The simulated fidelity replays the ring's flows, then the ranks' local copies: alone on
    its links, a 2-GPU A100 all-reduce takes the analytic time (both include the copy)."""
    sim = CommCostModel(a100.topology, fidelity="simulated")
    for n in (2, 8):
        assert sim.collective(CollectiveOp.ALLREDUCE, GIB, a100.topology.gpus[:n]).time_s == (
            pytest.approx(
                a100.collective(CollectiveOp.ALLREDUCE, GIB, a100.topology.gpus[:n]).time_s,
                rel=1e-6,
            )
        )


def test_vtrain_rows_take_nccl_tests_single_process_example():
    """vTrain does not state its layout: the mapping takes nccl-tests' ``-g N`` example (one
    process), so its V100 ring writes through direct pointers (NCCL 2.8 era) and pays no copy,
    while a CoreWeave MPIJob row keeps one process per GPU."""
    from perfmodel.comm.validation import compare, map_row

    row = {
        "id": "vtrain-ar-v100-8g-1GiB",
        "hardware": {"gpus": 8},
        "value": 130.0,
        "unit": "GB/s",
        "notes": "message 1073741824 B",
    }
    sc = map_row(row)
    assert sc.processes is ProcessLayout.PER_SERVER
    model = CommCostModel(with_process_layout(load_system("dgx1-v100"), ProcessLayout.PER_SERVER))
    info = model.group_info(tuple(model.topology.gpus[:8]))
    assert info.p2p is not None and info.p2p.direct
    r = model.collective(CollectiveOp.ALLREDUCE, GIB, model.topology.gpus[:8])
    assert compare(sc).predicted == pytest.approx(r.busbw_Bps, rel=1e-12)
    cw = map_row({**row, "id": "coreweave-a100-128g-1GiB", "hardware": {"gpus": 128}})
    assert cw.processes is ProcessLayout.PER_GPU
