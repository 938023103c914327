"""NCCL's search channels across servers (``comm/nccl_graph.py``, NVIDIA/nccl v2.29.7-1
``src/graph/search.cc`` / ``src/init.cc``) and the per-channel caps of the tuner that multiply
them (``src/graph/tuning.cc``: ``graphs[a]->nChannels x perChMax...``)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.comm import CommCostModel
from perfmodel.comm.nccl_choice import graph_channels
from perfmodel.comm.nccl_graph import NCCL_GRAPH_MAX_CHANNELS, inter_graph_channels
from perfmodel.comm.params import Algorithm, Protocol
from perfmodel.ops import CollectiveOp
from perfmodel.topology import load_system
from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule
from perfmodel.units import GB, GiB


@pytest.mark.parametrize(
    ("arch", "nvlinks", "port_GBps", "nics", "want"),
    [
        # 18 x 40.1 = 721.8 GB/s per GPU; 48 x 15 = 720, 45.1 x 16 = 721.6 (more): 16
        ("blackwell", 18, 50.0, 72, 16),
        # 8 NICs of 50 GB/s: one 45-48 GB/s channel each; 45 x 8 = 360 beats 48 x 7 = 336
        ("hopper", 18, 50.0, 8, 8),
        # DGX B200: 48 x 8 NICs = 384 (24 x 16 ties, not kept); 48 < 50, 8 > 4: no doubling
        ("blackwell", 18, 50.0, 8, 8),
        # DGX A100, 8 x HDR: 24 x 8 = 192; 12 x 16 ties; 24 < 25: no doubling
        ("ampere", 12, 25.0, 8, 8),
        # A100, 4 x 100 Gb/s (12.5 GB/s): 12 x 4 = 48; 6 x 8 ties; 5 is below 0.49 x 12
        ("ampere", 12, 12.5, 4, 4),
        # one 400 Gb/s NIC on an A100: 48 GB/s x 1 = 48 ... 30 x 1, 28 x 1, 24 x 2 = 48 tie
        # -> 1 channel of 48 (>= 25 GB/s, compute capability 8.0: doubled to 2)
        ("ampere", 12, 50.0, 1, 2),
    ],
)
def test_golden_search_channels(arch, nvlinks, port_GBps, nics, want) -> None:
    got = inter_graph_channels(arch, nvlinks=nvlinks, net_port_Bps=port_GBps * GB, nics=nics)
    assert got == want


@pytest.mark.parametrize(
    "kwargs",
    [
        {"nvlinks": 0, "net_port_Bps": 50e9, "nics": 8},  # no NVSwitch links
        {"nvlinks": 18, "net_port_Bps": math.inf, "nics": 8},  # one server
        {"nvlinks": 18, "net_port_Bps": 50e9, "nics": 0},  # no NIC
    ],
)
def test_no_count_where_nccl_numbers_are_missing(kwargs) -> None:
    assert inter_graph_channels("hopper", **kwargs) is None
    assert inter_graph_channels("turing", nvlinks=18, net_port_Bps=50e9, nics=8) is None


@given(
    arch=st.sampled_from(["volta", "ampere", "hopper", "blackwell"]),
    nvlinks=st.integers(1, 18),
    port_GBps=st.sampled_from([3.125, 12.5, 25.0, 50.0, 100.0]),
    nics=st.integers(1, 72),
)
def test_channels_fit_nccl_limits(arch, nvlinks, port_GBps, nics) -> None:
    """At most MAXCHANNELS / 2 channels, at least one, and never more than twice what fits
    (doubling halves the per-channel speed, so the doubled graph still fits)."""
    got = inter_graph_channels(arch, nvlinks=nvlinks, net_port_Bps=port_GBps * GB, nics=nics)
    if got is None:  # no speed of the table fits the GPU's links or the port
        return
    assert 1 <= got <= NCCL_GRAPH_MAX_CHANNELS
    # from 32 NICs on, the NICs never bind (each carries at least one channel of the 32)
    wide = inter_graph_channels(arch, nvlinks=nvlinks, net_port_Bps=port_GBps * GB, nics=32)
    assert wide == inter_graph_channels(
        arch, nvlinks=nvlinks, net_port_Bps=port_GBps * GB, nics=32 + nics
    )


def _gb200(racks: int) -> CommCostModel:
    topo = with_nccl_p2p_rule(load_system("gb200-nvl72", nodes=racks), NcclRelease.parse("2.26.2"))
    return CommCostModel(topo)


@pytest.fixture(scope="module")
def gb200_20() -> CommCostModel:
    return _gb200(20)


def test_gb200_racks_tree_capped_at_nccl_graph_channels(gb200_20) -> None:
    """20 GB200 NVL72 racks: NCCL's graph has 16 channels (not the model's 32 rings, one per
    NIC), so NCCL 2.29's tree cap beyond two nodes is 16 x 24 GB/s = 384 GB/s of bus bandwidth
    (it was 0.92 x 810 = 745 under a 32 x 24 = 768 cap), algorithm bandwidth half of it."""
    model = gb200_20
    gpus = model.topology.gpus
    info = model.group_info(tuple(gpus))
    assert len(info.channels) == 32 and info.net_nics == 72
    assert graph_channels(info) == 16
    r = model.collective(CollectiveOp.ALLREDUCE, 16 * GiB, gpus, Algorithm.TREE)
    assert r.protocol is Protocol.SIMPLE
    assert r.bandwidth_Bps == pytest.approx(16 * 24 * GB)
    assert r.time_s == pytest.approx(r.latency_s + 16 * GiB / (16 * 24 * GB / 2))


def test_gb200_racks_ring_beats_tree_for_large_messages(gb200_20) -> None:
    """With NVLS off (ring or tree, as CoreWeave's job), the tree at 384 GB/s loses 16 GiB over
    20 racks to the ring (14.3 ms of latency + 16 GiB at 810 x 1440 / 2878 GB/s) and keeps
    512 MiB (0.69 ms of latency against the ring's 14.3)."""
    model = gb200_20
    gpus = model.topology.gpus

    def t(size: int, algo: Algorithm) -> float:
        return model.collective(CollectiveOp.ALLREDUCE, size, gpus, algo).time_s

    assert t(16 * GiB, Algorithm.RING) < t(16 * GiB, Algorithm.TREE)
    assert t(512 * 2**20, Algorithm.TREE) < t(512 * 2**20, Algorithm.RING)


def test_one_server_keeps_its_ring_count() -> None:
    model = _gb200(1)
    info = model.group_info(tuple(model.topology.gpus))
    assert graph_channels(info) == len(info.channels) == 18
