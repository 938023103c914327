"""NVLink SHARP (NVLS) and InfiniBand SHARP (CollNet) all-reduce (issue 12).

NVLS hand value (NCCL 2.28+'s tuner, :mod:`perfmodel.comm.nvls`): on one DGX H100 NCCL's NVLS
graph has 8 heads of 40 GB/s (the fastest ``sm90SpeedArrayIntra`` entry with 9 x 40 <= 18 NVLink
x 20.6 GB/s); bus bandwidth ``2 x 8 x 40 x 0.85 x 7/8`` = 476 GB/s, algorithm bandwidth
``bus x 8/14``, 25 us. NCCL's author quotes a peak busbw of ~480 GB/s for 8 H100
(NVIDIA/nccl-tests#212).
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.params import Algorithm
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.units import GB, us


@pytest.fixture(scope="module")
def h100():
    return load_system("dgx-h100")


def test_dgx_h100_8gib_allreduce_uses_nvls_near_480(h100):
    m = CommCostModel(h100)
    r = m.collective("allreduce", 8 * 2**30, h100.gpus)
    assert r.algorithm is Algorithm.NVLS
    assert m.group_info(h100.gpus).nvlinks == 18
    bus = 2 * 8 * 40 * GB * 0.85 * 7 / 8
    hand = 25 * us + 8 * 2**30 / (bus * 8 / 14)
    assert r.time_s == pytest.approx(hand, rel=1e-9)
    assert r.bandwidth_Bps == pytest.approx(476 * GB)
    assert 470 * GB < r.busbw_Bps < 480 * GB
    sim = CommCostModel(h100, fidelity="simulated").collective("allreduce", 8 * 2**30, h100.gpus)
    assert sim.algorithm is Algorithm.NVLS and sim.time_s == pytest.approx(r.time_s)


def test_no_nvls_on_ampere_and_small_messages_keep_ring():
    a100 = load_system("dgx-a100")
    m = CommCostModel(a100)
    assert m.collective("allreduce", 2**30, a100.gpus).algorithm is Algorithm.RING
    with pytest.raises(ConfigError, match="nvls is not available"):
        m.collective("allreduce", 2**30, a100.gpus, algorithm="nvls")
    h = load_system("dgx-h100")
    assert CommCostModel(h).collective("allreduce", 1024, h.gpus).algorithm is Algorithm.RING


def test_nvls_bus_bandwidth_flat_with_the_domain():
    """NCCL 2.28+ models NVLS bus bandwidth from its NVLS graph, which holds k s = 640 GB/s on
    8 B200 (8 heads x 80) and on a 72-GPU NVL72 rack (32 heads, NCCL_MAX_NVLS_ARITY, x 20):
    829 and 918 GB/s, not the 2(n-1)/(n+1) growth of a per-link traffic count (1,091 GB/s on
    the rack, 31% above the 834.6 published, coreweave/nccl-tests#43)."""
    from perfmodel.comm.nvls import nvls_graph

    b200, rack = load_system("dgx-b200"), load_system("gb200-nvl72")
    assert nvls_graph("blackwell", 8, 18) == (8, 80 * GB)
    assert nvls_graph("blackwell", 72, 18) == (32, 20 * GB)
    r8 = CommCostModel(b200).collective("allreduce", 8 * 2**30, b200.gpus, algorithm="nvls")
    r72 = CommCostModel(rack).collective("allreduce", 8 * 2**30, rack.gpus, algorithm="nvls")
    assert r8.bandwidth_Bps == pytest.approx(2 * 640 * GB * 0.74 * 7 / 8)
    assert r72.bandwidth_Bps == pytest.approx(2 * 640 * GB * 0.74 * 31 / 32)
    assert r72.busbw_Bps / (834.57 * GB) - 1 == pytest.approx(0.098, abs=0.005)


def test_nvls_needs_a_release_that_has_it():
    """NVLS all-reduce came with NCCL 2.17 (src/graph/tuning.cc of v2.17.1-1), the NVLS tree
    with 2.18; a scenario stating 2.16 gets neither."""
    from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

    h = with_nccl_p2p_rule(load_system("dgx-h100"), NcclRelease(2, 16))
    with pytest.raises(ConfigError, match="nvls is not available"):
        CommCostModel(h).collective("allreduce", 2**30, h.gpus, algorithm="nvls")
    assert CommCostModel(h).collective("allreduce", 2**30, h.gpus).algorithm is Algorithm.RING
    h2 = with_nccl_p2p_rule(load_system("dgx-h100", nodes=2), NcclRelease(2, 17))
    with pytest.raises(ConfigError, match="nvls_tree is not available"):
        CommCostModel(h2).collective("allreduce", 2**30, h2.gpus, algorithm="nvls_tree")


def test_collnet_only_on_a_sharp_fabric():
    two = load_system("dgx-h100", nodes=2)
    with pytest.raises(ConfigError, match="collnet is not available"):
        CommCostModel(two).collective("allreduce", 2**30, two.gpus, algorithm="collnet")
    sharp = two.with_sharp(True)
    m = CommCostModel(sharp)
    info = m.group_info(sharp.gpus)
    r = m.collective("allreduce", 2**30, sharp.gpus, algorithm="collnet")
    bus = min(info.intra_bw_Bps, info.inter_bw_Bps) * 0.85
    lat = 2 * (3.7 + 7 * 0.4) * us + 31 * us
    assert r.time_s == pytest.approx(lat + 2**30 / (bus * 0.5), rel=1e-9)


def test_fabric_sharp_key_and_errors():
    from perfmodel.errors import TopologyError
    from perfmodel.topology.io import parse_fabric

    assert parse_fabric({"network": "ib-ndr", "sharp": True}, "f").sharp is True
    assert parse_fabric({"network": "ib-ndr"}, "f").sharp is False
    with pytest.raises(TopologyError, match="sharp must be true or false"):
        parse_fabric({"network": "ib-ndr", "sharp": "yes"}, "f")
    from perfmodel.topology.custom import custom_system

    with pytest.raises(ConfigError, match="no fabric"):
        custom_system("A100-PCIE-40GB", 2, "pcie4").with_sharp(True)
