"""NCCL's tuner tables by release (issue 24): which table prices a group, and hand-computed
latencies and bandwidth caps of NCCL 2.29's (v2.29.7-1 ``src/graph/tuning.cc``)."""

from __future__ import annotations

import math

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm import params as P
from perfmodel.comm.params import Algorithm, Protocol
from perfmodel.comm.tuner import NCCL_2_8, NCCL_2_29, arch_index, nodes_index, tuner_for
from perfmodel.topology import load_system
from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule
from perfmodel.units import GB, GiB, MiB, us


@pytest.fixture(scope="module")
def b200_2():
    return load_system("dgx-b200", nodes=2)


@pytest.fixture(scope="module")
def b200_8():
    return load_system("dgx-b200", nodes=8)


def test_release_or_generation_picks_the_table(b200_2) -> None:
    assert CommCostModel(b200_2).tuner is NCCL_2_29  # Blackwell: NCCL >= 2.25
    assert CommCostModel(load_system("dgx-a100", nodes=2)).tuner is NCCL_2_8
    stated = with_nccl_p2p_rule(load_system("dgx-a100", nodes=2), NcclRelease.parse("2.21"))
    assert stated.meta["nccl_p2p_rule"]["stated"] is True
    assert CommCostModel(stated).tuner is NCCL_2_29
    old = with_nccl_p2p_rule(b200_2, NcclRelease.parse("2.14"))
    assert CommCostModel(old).tuner is NCCL_2_8
    # a rule re-applied without a release keeps what the scenario stated
    assert with_nccl_p2p_rule(stated).meta["nccl_p2p_rule"]["stated"] is True
    assert not load_system("dgx-a100").meta["nccl_p2p_rule"]["stated"]


def test_the_2_8_table_is_the_historical_one() -> None:
    assert NCCL_2_8.base_latency_s is P.NCCL_BASE_LATENCY_S
    assert NCCL_2_8.step_latency_s is P.NCCL_STEP_LATENCY_S
    assert NCCL_2_8.plateau("ampere") == P.NCCL_RING_PLATEAU_LATENCY_FACTOR == 1.9
    assert tuner_for((2, 17), "blackwell") is NCCL_2_8
    assert tuner_for((2, 18), "volta") is NCCL_2_29
    assert (arch_index("ampere"), arch_index("blackwell"), nodes_index(1), nodes_index(9)) == (
        1,
        3,
        0,
        2,
    )


def test_ring_latency_two_b200_servers(b200_2) -> None:
    """16 GPUs on 2 servers, ring all-reduce, Simple: ``baseLat`` 8.4 us + 28 intra steps x
    max(3.4 us NVLink, 3 x 1 us Intel post overhead) + 2 network steps x 14 us = 131.6 us,
    x 1.4 (plateau, compute capability >= 8.0) once ``m >= 64 x 24 channels x 16 ranks``."""
    m = CommCostModel(b200_2)
    assert m.cpu_vendor == "intel"
    big = m.collective("allreduce", 8 * GiB, b200_2.gpus, "ring")
    assert big.protocol is Protocol.SIMPLE
    assert big.channels == 24
    assert big.latency_s == pytest.approx(131.6 * us * 1.4, rel=1e-12)
    small = m.collective("allreduce", 16 * 1024, b200_2.gpus, "ring")  # below the plateau
    lat = {c[2]: c[3] for c in m.nccl.candidates(small.op, 16 * 1024, m.group_info(b200_2.gpus))
           if c[1] is Algorithm.RING}  # fmt: skip
    assert lat[Protocol.SIMPLE] == pytest.approx(131.6 * us, rel=1e-12)
    # LL: 6.6 us + 28 x max(0.6, 1.0) + 2 x 2.7 us; LL128: 14 + 28 x 1.9 + 2 x 4.0
    assert lat[Protocol.LL] == pytest.approx((6.6 + 28 * 1.0 + 2 * 2.7) * us, rel=1e-12)
    assert lat[Protocol.LL128] == pytest.approx((14 + 28 * 1.9 + 2 * 4.0) * us, rel=1e-12)


def test_tree_bandwidth_caps_blackwell(b200_2, b200_8) -> None:
    """Tree all-reduce bus bandwidth, Simple, 8 GiB (no size correction from 512 MiB on):
    2 servers take the server's inside bandwidth (NCCL's bwIntra): min(810 x 0.92, 8 x 42.8);
    8 servers the network's: min(368 x 0.92, 8 x 24) GB/s, over the 8 channels of NCCL's
    graph (8 NICs of 400 Gb/s: 48 GB/s each; the model's rings are 24)."""
    for topo, bus in ((b200_2, 8 * 42.8), (b200_8, 8 * 24.0)):
        m = CommCostModel(topo)
        r = m.collective("allreduce", 8 * GiB, topo.gpus, "tree")
        assert r.protocol is Protocol.SIMPLE
        assert r.bandwidth_Bps == pytest.approx(bus * GB, rel=1e-9)
        assert r.time_s == pytest.approx(r.latency_s + 8 * GiB / (bus * GB * 0.5))
    # NCCL 2.7/2.8 capped any tree across more than 2 servers at 80 GB/s
    old = with_nccl_p2p_rule(b200_8, NcclRelease.parse("2.8"))
    tree = CommCostModel(old).collective("allreduce", 8 * GiB, old.gpus, "tree")
    assert tree.bandwidth_Bps == pytest.approx(80 * GB, rel=1e-12)


def test_ll_and_ll128_caps(b200_8) -> None:
    """Ring LL across nodes: min(llMaxBw of an Intel host beyond 2 nodes, B / 2) = 20.4 GB/s;
    LL128: min(0.92 B, 8 channels of NCCL's graph x 40 GB/s)."""
    m = CommCostModel(b200_8)
    info = m.group_info(b200_8.gpus)
    bus = {
        c[2]: c[4]
        for c in m.nccl.candidates(m.collective("allgather", MiB, b200_8.gpus).op, MiB, info)
        if c[1] is Algorithm.RING
    }
    assert bus[Protocol.LL] == pytest.approx(20.4 * GB)
    assert bus[Protocol.LL128] == pytest.approx(min(0.92 * 368, 8 * 40.0) * GB)
    assert bus[Protocol.SIMPLE] == pytest.approx(368 * GB)


def test_one_gpu_per_server_tree_uses_the_network() -> None:
    """Two servers with one GPU each: no part inside a server (intra bandwidth infinite), so
    the tree is held by the network, not by an infinite NCCL bwIntra."""
    topo = load_system("dgx-h100", nodes=2)
    m = CommCostModel(topo)
    pair = [topo.gpus[0], topo.gpus[8]]
    r = m.collective("allreduce", 64 * MiB, pair, "tree")
    assert math.isfinite(r.bandwidth_Bps) and r.bandwidth_Bps <= m.group_info(pair).inter_bw_Bps


# ------------------------------------------------------ 2.25-2.28 tables (issue 24, wave 8)


def test_release_tables_2_25_to_2_28() -> None:
    """NVIDIA/nccl v2.26.2-1 and v2.28.9-1 ``src/graph/tuning.cc``: Blackwell caps per channel
    (GB/s); every other number is 2.29's."""
    from perfmodel.comm.tuner import NCCL_2_25, NCCL_2_28, pricing_tuner

    bw = arch_index("blackwell")
    assert [tuner_for((2, m), "blackwell") for m in (24, 25, 26, 27, 28, 29)] == [
        NCCL_2_29, NCCL_2_25, NCCL_2_25, NCCL_2_25, NCCL_2_28, NCCL_2_29,
    ]  # fmt: skip
    gb = [round(x / GB, 2) for x in NCCL_2_25.tree_max_per_channel_Bps[bw]]
    assert gb == [77.4, 82.8, 72.0]  # 2*38.7, 2*41.4, 2*36.0
    assert [round(x / GB, 2) for x in NCCL_2_25.ring_ll128_max_per_channel_Bps[bw]] == [73.4] * 3
    assert [round(x / GB, 2) for x in NCCL_2_25.tree_ll128_max_per_channel_Bps[bw]] == [
        73.4, 73.4, 58.0,
    ]  # fmt: skip
    assert [round(x / GB, 2) for x in NCCL_2_28.ring_ll128_max_per_channel_Bps[bw]] == [
        73.4, 34.6, 73.4,
    ]  # fmt: skip
    assert NCCL_2_28.tree_max_per_channel_Bps == NCCL_2_29.tree_max_per_channel_Bps
    for t in (NCCL_2_25, NCCL_2_28):
        assert pricing_tuner(t) is NCCL_2_29
        for field in ("base_latency_s", "step_latency_s", "ll_max_Bps", "tree_correction"):
            assert getattr(t, field) == getattr(NCCL_2_29, field)
        for field in ("tree_max_per_channel_Bps", "ring_ll128_max_per_channel_Bps"):
            assert getattr(t, field)[:bw] == getattr(NCCL_2_29, field)[:bw]  # off Blackwell
    assert pricing_tuner(NCCL_2_29) is NCCL_2_29 and pricing_tuner(NCCL_2_8) is NCCL_2_8


def test_nccl_2_26_chooses_the_tree_across_gb200_racks() -> None:
    """Golden: 3 GB200 NVL72 racks, 512 MiB all-reduce, NVLS and CollNet off (CoreWeave's job;
    its 20-rack 16 GiB row is the validation's case). Beyond two nodes NCCL 2.26's Blackwell
    tree cap, 16 graph channels x 72 GB/s = 1,152 GB/s, does not bind and 2.29's,
    16 x 24 = 384 GB/s, does: 2.26 chooses the tree, 2.29 the ring (LL128). The tree 2.26 runs
    is priced at 2.29's cap: bus bandwidth 384 GB/s, the time of 2.29's tree forced."""
    from perfmodel.comm.nccl_env import NcclEnv, with_nccl_env

    base = with_nccl_env(
        load_system("gb200-nvl72", nodes=3),
        NcclEnv.parse([("NCCL_NVLS_ENABLE", "0"), ("NCCL_COLLNET_ENABLE", "0")]),
    )
    size = 512 * MiB
    m26, m29 = (
        CommCostModel(with_nccl_p2p_rule(base, NcclRelease.parse(release)))
        for release in ("2.26.2", "2.29.7")
    )
    r26, r29 = (m.collective("allreduce", size, base.gpus) for m in (m26, m29))
    assert (r26.algorithm, r26.protocol) == (Algorithm.TREE, Protocol.SIMPLE)
    assert (r29.algorithm, r29.protocol) == (Algorithm.RING, Protocol.LL128)
    assert r26.bandwidth_Bps == pytest.approx(16 * 24 * GB)
    assert r26.time_s == m29.collective("allreduce", size, base.gpus, "tree").time_s
    # NCCL 2.26's own estimate of the tree it picks: the cap does not bind
    info = m26.group_info(base.gpus)
    tree = [
        c
        for c in m26.nccl.candidates(r26.op, size, info)
        if c[1:3] == (r26.algorithm, r26.protocol)
    ]
    assert tree[0][4] > 16 * 24 * GB


def test_explain_says_which_table_chose_and_which_priced() -> None:
    """Review mend 9: ``--explain`` of a Blackwell step under NCCL 2.26 says the choice is
    2.25's table's and the price 2.29's (an assumption, pricing_tuner); under the default
    release one table does both."""
    from perfmodel.api import Scenario, predict

    base = dict(system="gb200-nvl72", nodes=2, model="llama3_8b", batch_per_gpu=1,
                precision="bf16", fidelity="analytic")  # fmt: skip

    def comm_line(**kw) -> str:
        exp = predict(Scenario(**base, **kw)).explanation
        return next(line for line in exp.format_lines() if "comm:dp" in line)

    old = comm_line(nccl="2.26")
    assert "chosen by NCCL 2.25's table, priced by 2.29's" in old
    assert "NCCL 2.29 tuner" in comm_line() and "priced by" not in comm_line()
