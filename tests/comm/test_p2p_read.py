"""NCCL's P2P read mode on A100 NVLink: each rank's local ``send`` copy is serial with the
ring's NVLink pulls (:mod:`perfmodel.comm.p2p_read`)."""

from __future__ import annotations

import pytest

from perfmodel.comm.model import CommCostModel
from perfmodel.comm.p2p_read import local_copy_s, reads_over_nvlink
from perfmodel.ops import CollectiveOp
from perfmodel.topology import load_system

GIB = 2**30


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
    assert local_copy_s(CollectiveOp.ALLREDUCE, GIB, 2, mem_Bps) == pytest.approx(
        526.6e-6, abs=0.1e-6
    )


@pytest.mark.parametrize("op", [CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER])
def test_all_gather_and_reduce_scatter_copy_one_shard_per_rank(a100, op):
    """All-gather and reduce-scatter rings start with the same local ``send``: m / n bytes per
    rank at half the memory bandwidth, on top of NCCL's tuner time (8 GPUs, 1 GiB)."""
    r = _ring(a100, 8, op)
    mem_Bps = a100.topology.gpu_spec().memory_bandwidth_Bps
    algbw = 235e9 * 8 / 7  # nsteps = n - 1
    assert r.time_s == pytest.approx(r.latency_s + GIB / algbw + (GIB / 8) / (mem_Bps / 2))


def test_a100_bus_bandwidth_grows_with_the_ring_and_stays_below_nccls_cap(a100):
    """Property: the one copy per chunk weighs 1 / (2n - 1) of the ring's primitives, so a
    larger ring of the same server reaches more bus bandwidth, never NCCL's 235 GB/s."""
    bus = [_ring(a100, n).busbw_Bps for n in (2, 4, 8)]
    assert bus[0] < bus[1] < bus[2] < 235e9


def test_hopper_writes_and_pays_no_copy():
    """H100 over NVSwitch is not compute capability 8.0: NCCL writes, no copy is added (the
    time is the tuner's latency + bytes / algorithm bandwidth)."""
    model = CommCostModel(load_system("dgx-h100"))
    for n in (2, 8):
        r = _ring(model, n)
        algbw = r.bandwidth_Bps * n / (2 * (n - 1))
        assert r.time_s == pytest.approx(r.latency_s + GIB / algbw, rel=1e-9)


def test_across_servers_the_copy_is_not_added():
    """Across servers the ring's pace is the network's (the proxy, not the thread block, moves
    a network step): the group of 2 x 8 A100 pays no copy."""
    model = CommCostModel(load_system("dgx-a100", nodes=2))
    info = model.group_info(tuple(model.topology.gpus[:16]))
    assert info.nodes == 2 and info.p2p_read
    r = model.collective(CollectiveOp.ALLREDUCE, GIB, model.topology.gpus[:16], "ring")
    algbw = r.bandwidth_Bps * 16 / 30
    assert r.time_s == pytest.approx(r.latency_s + GIB / algbw, rel=1e-9)


@pytest.mark.parametrize(
    ("name", "nvlink", "reads"),
    [
        ("A100-SXM4-80GB", True, True),
        ("A30", True, True),
        ("A100-PCIE-40GB", False, False),  # PCIe P2P: NCCL writes
        ("RTX-3090", True, False),  # Ampere, compute capability 8.6
        ("H100-SXM5-80GB", True, False),
        ("B200", True, False),
    ],
)
def test_read_mode_is_compute_capability_8_0_over_nvlink(name, nvlink, reads):
    assert reads_over_nvlink(name, nvlink=nvlink) is reads


def test_other_collectives_and_one_rank_copy_nothing():
    for op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE, CollectiveOp.ALLTOALL):
        assert local_copy_s(op, GIB, 8, 2e12) == 0.0
    assert local_copy_s(CollectiveOp.ALLREDUCE, GIB, 1, 2e12) == 0.0


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
