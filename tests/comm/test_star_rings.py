"""Collectives on the 2026 systems (issue 25): the rack-scale NVLink domain (rings on NVLink,
NVLS across 72 GPUs, the closed-form star packing), RCCL on the AMD Infinity Fabric mesh, and
the TCP-socket latency of Google's GPUDirect-TCPX/TCPXO."""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm import links as L
from perfmodel.comm import rings as R
from perfmodel.comm.params import NCCL227_NVLS_LATENCY_S, HwClass
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system


@pytest.fixture(scope="module")
def rack():
    return load_system("gb200-nvl72")


@pytest.mark.parametrize("k", [17, 20, 72])
def test_star_packing_is_the_searchs_answer(rack, k: int, monkeypatch) -> None:
    fast = R.pack_rings(CommCostModel(rack).links, rack.gpus[:k])
    monkeypatch.setattr(R, "STAR_MIN_MEMBERS", 10**9)  # the general search
    links = CommCostModel(rack).links
    slow = R._pack_rings(links, tuple(rack.gpus[:k]), R.MAX_CHANNELS)
    assert fast == slow
    assert len(fast) == 18  # one ring per NVLink port of a GPU


def test_star_needs_one_switch_and_equal_ports() -> None:
    # 8-GPU servers never take the closed form (no existing prediction can change)
    t = load_system("dgx-b200")
    assert R._star_rings(CommCostModel(t).links, t.gpus, R.MAX_CHANNELS) is None
    # a mesh has no switch
    m = load_system("mi300x-8", nodes=3)
    assert R._star_rings(CommCostModel(m).links, m.gpus[:24], R.MAX_CHANNELS) is None


def test_rack_rings_stay_on_nvlink_not_through_grace(rack) -> None:
    """The two GPUs of a superchip are 2 hops apart through the NVLink switch and through
    their Grace CPU (NVLink-C2C, one 405 GB/s unit): rings use the switch (NCCL searches
    NVLink paths first), so the group is NVLink class and NVLS is offered."""
    m = CommCostModel(rack)
    for members in (rack.gpus, rack.gpus[:8], rack.gpus[:2]):
        info = m.group_info(members)
        assert info.intra_class is HwClass.NVLINK
        for ch in info.channels:
            for hop in ch.hops:
                assert hop[1] == "nvswitch0", hop


def test_nvls_across_the_rack(rack) -> None:
    m = CommCostModel(rack)
    r = m.collective("allreduce", 8 * 2**30, rack.gpus)
    assert r.algorithm.value == "nvls"
    # hand-computed (NCCL 2.28+, perfmodel.comm.nvls): 32 NVLS heads (NCCL_MAX_NVLS_ARITY) of
    # 20 GB/s (33 x 20 <= 18 x 40.1 GB/s); bus = 2 x 32 x 20 x 0.74 x 31/32 GB/s,
    # algbw = bus x 72 / 142, 25 us
    bus = 2 * 32 * 20e9 * 0.74 * 31 / 32
    t = NCCL227_NVLS_LATENCY_S + 8 * 2**30 / (bus * 72 / 142)
    assert r.time_s == pytest.approx(t, rel=1e-3)


def test_amd_mesh_rings_and_no_nvls() -> None:
    t = load_system("mi300x-8")
    m = CommCostModel(t)
    info = m.group_info(t.gpus)
    assert info.intra_class is HwClass.NVLINK  # RCCL's XGMI is its NVLink class
    assert len(info.channels) >= 6
    for ch in info.channels:
        assert all(len(hop) == 2 for hop in ch.hops)  # every hop a direct Infinity Fabric link
    # 64 GB/s x 0.75 (RCCL's 48 GB/s per direction for gfx94) per ring
    assert info.ring_bw_Bps == pytest.approx(len(info.channels) * 48e9)
    assert m.collective("allreduce", 2**30, t.gpus).algorithm.value != "nvls"
    with pytest.raises(ConfigError, match="nvls is not available"):
        m.collective("allreduce", 2**30, t.gpus, algorithm="nvls")


def test_tcpxo_latency_is_a_socket_latency() -> None:
    """GPUDirect-TCPXO keeps TCP's per-message stack latency: an 8-byte all-reduce over 2 A3
    Mega VMs is charged the catalogue's 25 us per network step beyond NCCL's tables (the
    published log: ~122 us; RDMA would be predicted at ~28 us)."""
    assert L._is_socket("tcpxo-200g") and L._is_socket("tcpx-200g")
    assert not L._is_socket("efa-400g") and not L._is_socket("roce-400g")
    t = load_system("gcp-a3-megagpu-8g", nodes=2)
    small = CommCostModel(t).collective("allreduce", 8, t.gpus).time_s
    rdma = load_system("gcp-a3-ultragpu-8g", nodes=2)
    assert small > 2 * CommCostModel(rdma).collective("allreduce", 8, rdma.gpus).time_s
