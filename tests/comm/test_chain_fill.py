"""Pipelined chains (NCCL ring broadcast / reduce) and shared links (issue 24, InternEvo).

NCCL's tuner prices a ring broadcast as ``nsteps x`` one step latency and says it does not model
the chunks ("waiting for proper chunk modeling", ``src/graph/tuning.cc``). A chain forwards one
protocol step at a time (``BROADCAST_CHUNKSTEPS`` = 1): every network hop stores a whole step
before the proxy posts it, and so does every hop of a Simple chain inside a server. Golden
hand cases below; the InternEvo series (``tests/validation/test_scale_validation.py``) is the
judge at scale.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.comm import CommCostModel
from perfmodel.comm.closed_form import STEP_WIRE_BYTES, chain_time
from perfmodel.comm.nccl_choice import graph_channels
from perfmodel.comm.params import Algorithm, Protocol
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule
from perfmodel.units import GB, us


def test_chain_time_golden() -> None:
    # 8 ranks on 2 servers, 4 channels, Simple: 6 hops inside (1 us + 512 KiB at 25 GB/s each),
    # 1 across (10 us + 512 KiB at 5 GB/s), 5 us launch
    w = 512 * 1024
    hand = 5e-6 + 6 * (1e-6 + w / 25e9) + 1 * (10e-6 + w / 5e9)
    got = chain_time(
        1e9, 8, 2, 4, Protocol.SIMPLE, base_s=5e-6, intra_step_s=1e-6, inter_step_s=10e-6,
        intra_channel_Bps=25e9, inter_channel_Bps=5e9,
    )  # fmt: skip
    assert got == pytest.approx(hand, rel=1e-12)
    # LL128 forwards line by line inside a server: only the network hop stores a step
    got = chain_time(
        1e9, 8, 2, 4, "LL128", base_s=0.0, intra_step_s=1e-6, inter_step_s=10e-6,
        intra_channel_Bps=25e9, inter_channel_Bps=5e9,
    )  # fmt: skip
    assert got == pytest.approx(6e-6 + 10e-6 + 614_400 / 5e9, rel=1e-12)
    # a message smaller than a step per channel sends its channel share (LL: 2 wire bytes/byte)
    got = chain_time(
        4000.0, 2, 2, 4, "LL", base_s=0.0, intra_step_s=0.0, inter_step_s=0.0,
        intra_channel_Bps=math.inf, inter_channel_Bps=1e9,
    )  # fmt: skip
    assert got == pytest.approx(2 * 1000 / 1e9)
    assert chain_time(1e6, 1, 1, 4, "LL", base_s=1.0, intra_step_s=1.0, inter_step_s=1.0,
                      intra_channel_Bps=1.0, inter_channel_Bps=1.0) == 0.0  # fmt: skip
    with pytest.raises(ConfigError):
        chain_time(1e6, 4, 5, 1, "LL", base_s=0, intra_step_s=0, inter_step_s=0,
                   intra_channel_Bps=1, inter_channel_Bps=1)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    n_per=st.integers(1, 8),
    nodes=st.integers(1, 64),
    m=st.floats(1e3, 1e10),
    proto=st.sampled_from(sorted(STEP_WIRE_BYTES)),
)
def test_chain_time_grows_with_servers(n_per, nodes, m, proto) -> None:
    """A longer chain never fills faster: one more server adds hops and their steps."""
    kw = dict(base_s=8e-6, intra_step_s=2e-6, inter_step_s=5e-6, intra_channel_Bps=20e9,
              inter_channel_Bps=4e9)  # fmt: skip
    a = chain_time(m, n_per * nodes, nodes, 8, proto, **kw)
    b = chain_time(m, n_per * (nodes + 1), nodes + 1, 8, proto, **kw)
    assert b > a >= 0


def test_broadcast_over_1024_internevo_ranks() -> None:
    """90 MB over 1,024 A100 (128 servers, 4 x 100 Gb RoCE, NCCL 2.14): the tuner picks LL128
    (its estimate: 1,024 network steps of 4 us); the chain fills in 896 NVLink hops of 1.9 us
    and 127 network hops of 4 us plus 614,400 B at a channel's share of its NIC, then streams at
    LL128's 0.92 x 46 GB/s. NCCL runs 8 channels (4 searched at 12 GB/s, one per NIC, doubled
    by ``ncclTopoPostset``), two per NIC: 46 / 4 / 2 GB/s each, not the model's 12 ring
    channels' 46 / 12."""
    t = with_nccl_p2p_rule(
        load_system("dgx-a100", nodes=128, network="roce-100g", nics_per_node=4),
        NcclRelease(2, 14),
    )
    m = CommCostModel(t)
    info = m.group_info(t.gpus)
    assert len(info.channels) == 12 and info.inter_bw_Bps == pytest.approx(46 * GB)
    assert (info.net_nics, graph_channels(info)) == (4, 4)
    r = m.collective("broadcast", 90e6, t.gpus)
    assert (r.algorithm, r.protocol) == (Algorithm.RING, Protocol.LL128)
    fill = 10 * us + 896 * 1.9 * us + 127 * (4 * us + 614_400 / (46 * GB / 4 / 2))
    assert r.latency_s == pytest.approx(fill, rel=1e-9)
    assert r.time_s == pytest.approx(fill + 90e6 / (0.92 * 46 * GB), rel=1e-9)
    assert r.time_s > 2.5 * (4 * us * 1024 + 90e6 / (0.92 * 46 * GB))  # the tuner's estimate


def test_chain_channels_are_nccls_not_the_models_rings() -> None:
    """Across servers a step crosses a NIC at the share of NCCL's channels on it (two per NIC
    while the search finds no more channels than NICs), not of the model's ring channels: a
    group whose GPUs leave through 2 NICs (every other GPU of a 4-NIC A100 server) runs 4
    channels, two per NIC, each at half of one NIC's line rate (the group's 46 GB/s over 2
    NICs is above the 12.5 GB/s port). One server keeps the group's own ring channels."""
    t = with_nccl_p2p_rule(
        load_system("dgx-a100", nodes=4, network="roce-100g", nics_per_node=4),
        NcclRelease(2, 14),
    )
    m = CommCostModel(t)
    even = tuple(g for g in t.gpus if int(g[-1]) % 2 == 0)
    info = m.group_info(even)
    assert (info.net_nics, graph_channels(info), info.net_port_Bps) == (2, 2, 12.5 * GB)
    r = m.collective("broadcast", 90e6, even, "ring")
    assert r.protocol is Protocol.LL128
    fill = 10 * us + 12 * 1.9 * us + 3 * (4 * us + 614_400 / (12.5 * GB / 2))
    assert r.latency_s == pytest.approx(fill, rel=1e-9)
    # one server (8 GPUs, Simple chain stores a step per NVLink hop): the group's ring channels
    one = load_system("dgx-a100", nodes=1)
    m1 = CommCostModel(one)
    i1 = m1.group_info(one.gpus)
    nch = len(i1.channels)
    cands = m1.nccl.candidates(m_op("broadcast"), 1e9, i1)
    assert any(c[2] is Protocol.SIMPLE for c in cands)  # the loop below checks something
    for c in cands:
        if c[2] is Protocol.SIMPLE:
            lat = m1.nccl.chain_time(m_op("broadcast"), 1e9, i1, *c)[1]
            step = m1.nccl.tuner.step_latency_s[(i1.intra_class, "ring", Protocol.SIMPLE)]
            base = m1.nccl.tuner.base_latency_s[("ring", Protocol.SIMPLE)]
            hand = base + 7 * (step + i1.alpha_intra_s + 512 * 1024 / (i1.intra_bw_Bps / nch))
            assert lat == pytest.approx(hand, rel=1e-12)


@pytest.mark.parametrize("proto", [Protocol.LL, Protocol.LL128, Protocol.SIMPLE])
def test_chain_fill_monotone_in_servers_and_bytes(proto) -> None:
    """Per protocol, NCCL's chain over a 4-NIC A100 cluster never fills faster with more
    servers or more bytes."""
    op = m_op("broadcast")
    prev_nodes = 0.0
    for nodes in (1, 2, 3, 8, 32):
        t = with_nccl_p2p_rule(
            load_system("dgx-a100", nodes=nodes, network="roce-100g", nics_per_node=4),
            NcclRelease(2, 14),
        )
        m = CommCostModel(t)
        info = m.group_info(t.gpus)
        prev_bytes = 0.0
        for size in (1e3, 1e5, 2e6, 3e7, 1e9):
            c = next(c for c in m.nccl.candidates(op, size, info) if c[2] is proto)
            lat = m.nccl.chain_time(op, size, info, *c)[1]
            assert lat >= prev_bytes
            prev_bytes = lat
        assert lat > prev_nodes
        prev_nodes = lat


def test_chain_fill_only_for_chains() -> None:
    """All-reduce and all-gather rings keep the tuner's time: every rank sends from the first
    step, no chain fills."""
    t = load_system("dgx-a100", nodes=4)
    m = CommCostModel(t)
    info = m.group_info(t.gpus)
    for op in ("allreduce", "allgather"):
        r = m.collective(op, 2**28, t.gpus, algorithm="ring")
        cands = [c for c in m.nccl.candidates(m_op(op), 2**28, info) if c[1] is Algorithm.RING]
        best = min(cands, key=lambda c: c[0])
        assert (r.time_s, r.latency_s) == (best[0], best[3])


def m_op(name: str):
    from perfmodel.ops import CollectiveOp

    return CollectiveOp(name)


def test_sharing_stretches_bandwidth_not_latency() -> None:
    """Two groups sharing a server's NICs (the TP siblings' ZeRO groups of InternEvo tp=2): the
    shared links halve the bandwidth, so the part of the time above the latency doubles; the
    latency (launch, steps, a chain's fill) does not."""
    from perfmodel.dtypes import Precision
    from perfmodel.parallel.costs import SystemCosts, ring_sharing_factor

    t = load_system("dgx-a100", nodes=16, network="roce-100g", nics_per_node=4)
    a = tuple(g for g in t.gpus if int(g[-1]) % 2 == 0)
    b = tuple(g for g in t.gpus if int(g[-1]) % 2 == 1)
    costs = SystemCosts(t, Precision.parse("bf16"))
    f = ring_sharing_factor(t, (a, b))
    assert f == pytest.approx(2.0)
    for op in ("broadcast", "allreduce"):
        r = costs.comm.collective(op, 64e6, a)
        got = costs.concurrent_time(m_op(op), 64e6, (a, b))
        assert got == pytest.approx(r.latency_s + f * (r.time_s - r.latency_s), rel=1e-12)
        assert r.time_s < got < f * r.time_s


def test_tuner_pick_can_cost_a_hair_with_more_bandwidth() -> None:
    """NCCL picks the chain's protocol by its estimate (``nsteps`` step latencies, no chunks),
    so more bandwidth can move the pick to a protocol whose chain is slower: 3 ranks on the
    star test switch (20 GB/s links, 1 us), a 117,237 B broadcast takes LL128 (estimate
    22.07 us, chain 20.17158 us); at 22.5 GB/s LL's estimate (20.64 us) wins and its chain,
    4.54 us of hops plus 117,237 B at 7.5 GB/s, takes 20.17160 us. Each protocol's own chain
    is faster with the faster links."""
    from comm_topos import star

    from perfmodel.comm import LinkParams

    topo = star(8, 20 * GB, 1e-6)
    slow = CommCostModel(topo)
    fast = CommCostModel(topo, LinkParams.from_dict({"nvswitch": {"bandwidth_Bps": 22.5 * GB}}))
    group = topo.gpus[:3]
    a = slow.collective("broadcast", 117_237, group)
    b = fast.collective("broadcast", 117_237, group)
    assert (a.protocol, b.protocol) == (Protocol.LL128, Protocol.LL)
    assert b.time_s == pytest.approx(b.latency_s + 117_237 / (7.5 * GB), rel=1e-12)
    assert a.time_s < b.time_s < a.time_s * (1 + 1e-5)


@settings(max_examples=60, deadline=None)
@given(
    arch=st.sampled_from(["ampere", "hopper", "blackwell"]),
    nvlinks=st.integers(1, 18),
    port_GBps=st.floats(1.0, 200.0),
    nics=st.integers(1, 16),
)
def test_run_channels_never_pass_maxchannels(arch, nvlinks, port_GBps, nics) -> None:
    """Review mend 10: NCCL runs ``min(MAXCHANNELS, 2 s)`` channels for ``s`` searched
    (v2.29.7-1 src/graph/connect.cc line 453); the search keeps at most ``MAXCHANNELS / 2``,
    so the doubling never reaches the cap the chain's channel count takes."""
    from perfmodel.comm.nccl_graph import NCCL_MAXCHANNELS, inter_graph_channels

    s = inter_graph_channels(arch, nvlinks=nvlinks, net_port_Bps=port_GBps * GB, nics=nics)
    assert s is None or (1 <= s and 2 * s <= NCCL_MAXCHANNELS)
