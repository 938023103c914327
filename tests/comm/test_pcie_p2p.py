"""PCIe peer-to-peer as NCCL releases and Intel root complexes shape it (issue 12 leftovers).

Hand values: ``pcie-8xtitanx`` has two Intel Xeon E5-2650 v3 sockets, two PCIe 3.0 switches per
socket, two GPUs per switch. A ring over GPUs 0-3 crosses CPU 0's root complex between the two
switches: NCCL's ``INTEL_P2P_OVERHEAD`` (bw x 6/5, ``src/graph/topo.h``) makes it one PCIe 3.0
x16 goodput / 1.2. GPUs 0-1 share a switch: no overhead.
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.validation import _with_cpu_model
from perfmodel.hardware.links import get_link
from perfmodel.topology import load_system
from perfmodel.topology.nccl_p2p import NcclRelease, nccl_p2p_level_denied, with_nccl_p2p_rule

GOODPUT = get_link("pcie3-x16").bandwidth_Bps * get_link("pcie3-x16").efficiency


@pytest.fixture(scope="module")
def titanx():
    """NCCL 2.0's P2P rule (PHB): P2P through one CPU's root complex, as the overhead needs."""
    return with_nccl_p2p_rule(load_system("pcie-8xtitanx"), NcclRelease(2, 0))


def test_intel_root_complex_costs_six_fifths(titanx):
    m = CommCostModel(titanx)
    assert m.group_info(titanx.gpus[:2]).ring_bw_Bps == pytest.approx(GOODPUT, rel=1e-9)
    assert m.group_info(titanx.gpus[:4]).ring_bw_Bps == pytest.approx(GOODPUT / 1.2, rel=1e-9)
    # the same server with a CPU that is not Intel: no overhead
    amd = _with_cpu_model(titanx, "epyc-7742")
    assert CommCostModel(amd).group_info(amd.gpus[:4]).ring_bw_Bps == pytest.approx(GOODPUT)


def test_nccl_p2p_levels_by_release():
    t = load_system("pcie-8x-server")
    pxb = nccl_p2p_level_denied(t, max_cpus=0)  # PXB: switches only (NCCL >= 2.8 on Intel)
    phb = nccl_p2p_level_denied(t, max_cpus=1)  # PHB: not across sockets (NCCL 2.0-2.5)
    assert len(pxb) == 28 - 4  # all pairs but the 4 that share a switch
    assert len(phb) == 16 and ("gpu0", "gpu4") in phb and ("gpu0", "gpu2") not in phb


def test_shm_hops_pay_no_p2p_overhead(titanx):
    """Across sockets NCCL 2.0 stages through host memory (SHM): plain DMA, no P2P TLPs; the
    8-GPU ring still crosses each root complex once by P2P (gpu1 -> gpu2, gpu5 -> gpu6)."""
    nccl20 = titanx
    m = CommCostModel(nccl20)
    r = m.collective("allreduce", 2**30, nccl20.gpus)
    assert r.shm
    assert m.group_info(nccl20.gpus).ring_bw_Bps == pytest.approx(GOODPUT / 1.2, rel=1e-9)
    off = titanx.with_p2p(False)  # everything through host memory: no P2P, no overhead
    assert CommCostModel(off).group_info(off.gpus[:4]).ring_bw_Bps == pytest.approx(GOODPUT / 2)


def test_intel_charge_slows_only_the_pcie_hops():
    """Two NCCL 2.0 Titan X servers on 10 GbE: the charged hops (gpu1 -> gpu2 through cpu0) run at
    PCIe goodput / 1.2 = 9.8 GB/s, far above the network hop; NCCL charges the hop's PCIe links,
    not the channel (``search.cc`` ``followPath``), so the ring runs at the 10 GbE goodput
    1.25 GB/s x 0.94 = 1.175 GB/s (was 1.175 / 1.2 = 0.979 GB/s)."""
    t = with_nccl_p2p_rule(
        load_system("pcie-8xtitanx", nodes=2, network="10gbe"), NcclRelease(2, 0)
    )
    eth = get_link("eth-10g")
    ring = CommCostModel(t).group_info(t.gpus).ring_bw_Bps
    assert ring == pytest.approx(eth.bandwidth_Bps * eth.efficiency, rel=1e-9)
    assert ring == pytest.approx(1.175e9, rel=1e-9)


def test_paths_across_both_sockets_are_not_charged():
    """NCCL charges PATH_PHB (exactly one CPU); gpu0 -> gpu5 on a DGX-1V crosses cpu0 and cpu1
    (PATH_SYS): no charge. gpu1 -> gpu2 on the Titan X server crosses cpu0 only: 6/5."""
    from perfmodel.comm.links import DirectedLinks
    from perfmodel.comm.pcie_p2p import p2p_charge

    dgx = DirectedLinks(load_system("dgx1-v100"))
    hop = dgx.p2p_route("gpu0", "gpu5")
    assert sum(h.startswith("cpu") for h in hop) == 2
    assert p2p_charge(dgx, hop) == 1.0
    links = DirectedLinks(with_nccl_p2p_rule(load_system("pcie-8xtitanx"), NcclRelease(2, 0)))
    assert p2p_charge(links, links.p2p_route("gpu1", "gpu2")) == pytest.approx(1.2)


def test_flow_replay_charges_the_same_hops(titanx):
    """4 Titan X GPUs, NCCL 2.0, 256 MiB all-reduce (the ring crosses cpu0 once): the analytic
    37,445.7 us; the flow replays charge gpu1 -> gpu2's links 6/5 too (was 31,211.9 us, the
    uncharged rate), so the step-by-step replay and the coarse one (one flow per channel, exact
    for a lone ring) give the closed form's time."""
    import simpy

    from perfmodel.comm.flow import FlowNetwork
    from perfmodel.comm.params import Protocol
    from perfmodel.comm.replay import run_collective

    size, group = 256 << 20, titanx.gpus[:4]
    a = CommCostModel(titanx).collective("allreduce", size, group, "ring")
    assert a.time_s == pytest.approx(37445.7e-6, abs=0.1e-6)
    s = CommCostModel(titanx, fidelity="simulated").collective("allreduce", size, group, "ring")
    assert s.time_s == pytest.approx(a.time_s, rel=1e-3)
    env = simpy.Environment()
    net = FlowNetwork(env, titanx)
    run_collective(net, "allreduce", size, group, "ring", protocol=Protocol.SIMPLE, coarse=True)
    env.run()
    assert env.now == pytest.approx(a.time_s, rel=1e-6)
