"""NVLS all-gather / reduce-scatter, NVLS tree and PAT (NCCL 2.27 tuner, issue 12 leftovers).

Hand values from NCCL 2.27 ``src/graph/tuning.cc`` (see :mod:`perfmodel.comm.nccl_recent`):
one DGX H100 offers ``B`` = 18 NVLink4 x 25 GB/s x 0.9 = 405 GB/s per GPU; NVLS moves
``B x 0.85 x 15/16`` (nvlsEfficiency, 16 channels).
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.params import Algorithm
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.units import GB, us

#: NCCL's NVLS graph on one DGX H100 (perfmodel.comm.nvls): 8 heads x 40 GB/s, x nvlsEfficiency
#: x (k - 1)/k
NVLS = 8 * 40 * GB * 0.85 * 7 / 8


@pytest.fixture(scope="module")
def h100():
    return load_system("dgx-h100")


@pytest.mark.parametrize("op", ["allgather", "reducescatter"])
def test_nvls_allgather_reducescatter_on_one_h100_server(h100, op):
    m = CommCostModel(h100)
    r = m.collective(op, 2**30, h100.gpus, algorithm="nvls")
    algbw = NVLS * 7 / 8  # NCCL: bwIntra x (ppn-1)/ppn, no bus-factor ratio
    assert r.time_s == pytest.approx(25 * us + 2**30 / algbw, rel=1e-9)
    # per byte slower than the ring, so the tuner keeps the ring for 1 GiB; the ring's busbw
    # (~404 GB/s) is near the ~370 GB/s NCCL's author gives for non-all-reduce collectives on
    # 8 H100 (NVIDIA/nccl-tests#212)
    auto = m.collective(op, 2**30, h100.gpus)
    assert auto.algorithm is Algorithm.RING
    assert 350 * GB < auto.busbw_Bps < 420 * GB
    with pytest.raises(ConfigError, match="nvls is not available"):
        a100 = load_system("dgx-a100")
        CommCostModel(a100).collective(op, 2**30, a100.gpus, algorithm="nvls")


def test_nvls_tree_two_and_eight_h100_servers():
    two = load_system("dgx-h100", nodes=2)
    m = CommCostModel(two)
    info = m.group_info(two.gpus)
    r = m.collective("allreduce", 8 * 2**30, two.gpus)
    assert r.algorithm is Algorithm.NVLS_TREE
    # NVLS graph across servers: 8 heads x 40 GB/s (sm90SpeedArrayInter: 48, 45 and 42 load the
    # NVSwitch link past 18 x 20.6 GB/s with 9 shares), all-reduce bus 2 x 8 x 40 x 0.85 x 7/8
    intra = 2 * 8 * 40 * GB * 0.85 * 7 / 8
    bus = min(intra, 2 * info.inter_bw_Bps, 8 * 57.7 * GB)
    assert bus == pytest.approx(8 * 57.7 * GB)  # 462 GB/s: NCCL's per-channel cap on 2 servers
    lat = 25 * us + 2 * 1 * 20.9 * us
    assert r.time_s == pytest.approx(lat + 8 * 2**30 / (bus * 16 / 30), rel=1e-9)
    # published 2 x (8 H100 + 8 x 400G) with NVLS ~430 GB/s busbw (NVIDIA/nccl#1221, 2.19.3):
    # +7% (it was +16.5% with a per-link traffic count of the single-server NVLS, 501 GB/s)
    assert r.busbw_Bps / (430 * GB) == pytest.approx(1.071, abs=0.001)
    sim = CommCostModel(two, fidelity="simulated").collective("allreduce", 8 * 2**30, two.gpus)
    assert sim.algorithm is Algorithm.NVLS_TREE and sim.time_s == pytest.approx(r.time_s)
    eight = load_system("dgx-h100", nodes=8)
    m8 = CommCostModel(eight)
    info8 = m8.group_info(eight.gpus)
    r8 = m8.collective("allreduce", 8 * 2**30, eight.gpus, algorithm="nvls_tree")
    bus8 = min(intra, info8.inter_bw_Bps, 8 * 45.5 * GB)
    assert bus8 == pytest.approx(8 * 45.5 * GB)  # beyond 2 nodes NCCL's cap of 45.5 per head
    lat8 = 25 * us + 2 * 3 * 20.9 * us
    assert r8.time_s == pytest.approx(lat8 + 8 * 2**30 / (bus8 * 64 / 126), rel=1e-9)


def test_nvls_tree_size_correction_on_blackwell():
    """NCCL 2.29 applies treeCorrectionFactor[Simple] to the NVLS tree on Blackwell x86 hosts
    below 1 GiB (ncclTopoGetAlgoTime): 0.7 at 16 MiB (log2(16 MiB / 64) = 18), none at 1 GiB."""
    t = load_system("dgx-b200", nodes=4)
    m = CommCostModel(t)
    big = m.collective("allreduce", 2**30, t.gpus, algorithm="nvls_tree")
    small = m.collective("allreduce", 2**24, t.gpus, algorithm="nvls_tree")
    algbw = big.bandwidth_Bps * 32 / 62
    assert big.time_s == pytest.approx(big.latency_s + 2**30 / algbw, rel=1e-9)
    assert small.time_s == pytest.approx(small.latency_s + 2**24 / (0.7 * algbw), rel=1e-9)


def test_no_nvls_tree_on_one_server_or_on_ampere(h100):
    with pytest.raises(ConfigError, match="nvls_tree is not available"):
        CommCostModel(h100).collective("allreduce", 2**30, h100.gpus, algorithm="nvls_tree")
    a100 = load_system("dgx-a100", nodes=2)
    with pytest.raises(ConfigError, match="nvls_tree is not available"):
        CommCostModel(a100).collective("allreduce", 2**30, a100.gpus, algorithm="nvlstree")


def test_pat_one_gpu_per_server():
    t = load_system("dgx-a100", nodes=16)
    group = tuple(g for g in t.gpus if g.endswith("/gpu0"))
    m = CommCostModel(t)
    ring_bw = m.group_info(group).ring_bw_Bps
    lat = (8 + 4 * 14 / 3.5 + 16 * 2.8) * us  # 68.8 us
    r = m.collective("allgather", 2**20, group)
    assert r.algorithm is Algorithm.PAT
    assert r.time_s == pytest.approx(lat + 2**20 / (0.75 * ring_bw), rel=1e-9)
    assert m.collective("allgather", 2**30, group).algorithm is Algorithm.RING
    with pytest.raises(ConfigError, match="pat is not available"):
        CommCostModel(t).collective("allgather", 2**20, t.gpus[:16], algorithm="pat")
    with pytest.raises(ConfigError, match="does not implement allreduce"):
        m.collective("allreduce", 2**20, group, algorithm="pat")


def test_nvls_needs_every_server_switched():
    """One function decides NVLS support (``nccl_recent.nvls_servers``): every server of the group
    holds at least two of its GPUs joined through an NVSwitch. 8 + 1 GPUs of two DGX H100: the
    second server's lone GPU has no NVLS, so no NVLS tree (it was offered: ``any`` server)."""
    from perfmodel.comm.nccl_recent import nvls_servers

    two = load_system("dgx-h100", nodes=2)
    m = CommCostModel(two)
    assert nvls_servers(m.links, m.group_info(two.gpus))
    assert not nvls_servers(m.links, m.group_info(two.gpus[:9]))
    with pytest.raises(ConfigError, match="nvls_tree is not available"):
        m.collective("allreduce", 2**30, two.gpus[:9], algorithm="nvls_tree")
    one = load_system("dgx-h100")
    m1 = CommCostModel(one)
    assert nvls_servers(m1.links, m1.group_info(one.gpus))
    assert m1.collective("allreduce", 2**30, one.gpus, algorithm="nvls").algorithm is Algorithm.NVLS
