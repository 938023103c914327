"""A group spanning servers built alike is analysed without listing its channels
(:func:`perfmodel.comm.ring_summary.ring_summary`, issue 14); every number of its
:class:`~perfmodel.comm.model.GroupInfo` equals the direct analysis over the listed channels, and
the channels, read, are the direct ones."""

from __future__ import annotations

import dataclasses

import pytest

import perfmodel.comm.group as comm_group
from perfmodel.comm import CommCostModel
from perfmodel.comm.channels import LazyChannels
from perfmodel.comm.ring_summary import ring_summary
from perfmodel.topology import load_system


def _direct(topo, group, monkeypatch):
    """The analysis over the listed channels (the summary switched off)."""
    with monkeypatch.context() as m:
        m.setattr(comm_group, "ring_summary", lambda *a, **k: None)
        return CommCostModel(topo).groups.build(tuple(group))


def _groups(topo, nodes):
    gpn = topo.gpus_per_node
    gs = topo.gpus
    return {
        "all": gs,
        "one per server": gs[1::gpn],
        "two per server": tuple(g for i, g in enumerate(gs) if i % gpn in (0, gpn - 1)),
        "mixed local ids": (*gs[:gpn], *gs[gpn + 1 : gpn + 3]),
    }


CASES = [
    ("dgx-a100", {}, 3),  # rails: one class of servers
    ("dgx-a100", {"fabric_topology": "fat-tree"}, 7),  # servers across leaves, a spine
    ("dgx-a100", {"fabric_topology": "fat-tree", "oversubscription": 3.0}, 5),
    ("dgx-h100", {}, 2),
    ("ibm-ac922-4xv100", {"network": "eth-10g"}, 3),  # PCIe/NVLink hosts, TCP sockets
    ("dgx1-v100", {}, 2),  # refused P2P pairs alike in every server
]


@pytest.mark.parametrize(("system", "kw", "nodes"), CASES)
def test_summary_equals_direct_analysis(system, kw, nodes, monkeypatch) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    model = CommCostModel(topo)
    for name, group in _groups(topo, nodes).items():
        fast = model.groups.build(tuple(group))
        direct = _direct(topo, group, monkeypatch)
        summarised = ring_summary(model.links, group) is not None
        # where it applies: servers built alike (P2P rule included), same local ids in each
        assert summarised == (name != "mixed local ids"), name
        assert isinstance(fast.channels, LazyChannels) == summarised
        for f in dataclasses.fields(fast):
            a, b = getattr(fast, f.name), getattr(direct, f.name)
            if f.name == "channels":
                assert len(a) == len(b), name
                assert tuple(a) == tuple(b), name
            else:
                assert a == b, (name, f.name)


def test_rails_golden_and_channels_not_listed() -> None:
    """2 DGX A100 on rails: 16 channels (two per NIC), 8 HDR NICs x 23 GB/s = 184 GB/s across
    servers and around the ring; inside a server 12 NVLink3 x 25 GB/s x 0.9 = 270 GB/s. An
    analytic all-reduce reads none of the 16 x 16 hop paths."""
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    r = model.collective("allreduce", 2**30, topo.gpus)
    info = model.group_info(topo.gpus)
    assert isinstance(info.channels, LazyChannels)
    assert info.channels._items is None
    assert r.channels == len(info.channels) == 16
    assert info.ring_bw_Bps == pytest.approx(184e9)
    assert info.inter_bw_Bps == pytest.approx(184e9)
    assert info.intra_bw_Bps == pytest.approx(270e9)
    assert info.channels._items is None
    assert len({len(ch.order) for ch in info.channels}) == 1  # listed on demand
    assert len(info.channels[0].order) == 16


def test_relabelled_lazy_channels_are_mapped() -> None:
    """A group read off its canonical shape (:meth:`GroupMemo._shape_group`) gets the
    canonical channels renamed when they are listed."""
    topo = load_system("dgx-a100", nodes=4)
    model = CommCostModel(topo)
    group = tuple(topo.gpus[8 * s + 2] for s in (2, 3))
    info = model.group_info(group)
    direct = CommCostModel(topo).groups.build(group)
    assert isinstance(info.channels, LazyChannels)
    assert tuple(info.channels) == tuple(direct.channels)
    assert {n for ch in info.channels for n in ch.order} == set(group)


def test_nvls_check_reads_one_servers_hops(monkeypatch) -> None:
    """On DGX H100 the NVLS candidates ask whether every server's ring hops cross its NVSwitch
    (:func:`perfmodel.comm.nccl_recent.nvls_servers`): answered from one server's hops, with the
    result of the listed channels and without listing them."""
    from perfmodel.comm.nccl_recent import nvls_servers

    topo = load_system("dgx-h100", nodes=3)
    model = CommCostModel(topo)
    fast = model.collective("allreduce", 2**30, topo.gpus)
    info = model.group_info(topo.gpus)
    assert nvls_servers(model.links, info)
    assert info.channels._items is None
    with monkeypatch.context() as m:
        m.setattr(comm_group, "ring_summary", lambda *a, **k: None)
        direct = CommCostModel(topo).collective("allreduce", 2**30, topo.gpus)
    assert fast == direct
    assert fast.algorithm.value == "nvls_tree"


def test_link_table_in_graph_edge_order() -> None:
    """Both directions of graph edge ``k`` are links ``2k, 2k+1`` with the edge's capacity
    (bandwidth x efficiency), latency and unit count, as before the table was built by link
    kind; the neighbour maps are made per node on first read."""
    from perfmodel.comm.links import DirectedLinks

    topo = load_system("dgx-a100", nodes=2, fabric_topology="fat-tree")
    links = DirectedLinks(topo)
    graph_edges = list(topo.graph.edges(data=True))
    assert len(links.edges) == 2 * len(graph_edges)
    for k, (u, v, d) in enumerate(graph_edges):
        assert links.edges[2 * k] == (u, v) and links.edges[2 * k + 1] == (v, u)
        bw = float(d["bandwidth_Bps"]) * float(d["efficiency"])
        assert links.capacity_Bps[2 * k] == links.capacity_Bps[2 * k + 1] == bw
        assert links.alpha_s[2 * k + 1] == float(d["latency_s"])
        assert links.units[2 * k] == int(d["count"])
        assert links.index[(v, u)] == 2 * k + 1
    gpu = topo.gpus[3]
    assert links.adjacency[gpu] == tuple(topo.graph.adj[gpu])
    assert links.adjacency_set[gpu] == frozenset(topo.graph.adj[gpu])
