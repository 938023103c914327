"""The link table gives a link its id on first lookup (issue 14: a ring over 2,048 servers
reads one server's links and a few fabric links, not the cluster's 184,336 directed links).
Whatever order the links are numbered in, each directed edge ``(u, v)`` has the values of the
whole-graph table (numbered in graph edge order before any lookup), and analyses give the same
numbers as on the whole table."""

from __future__ import annotations

import random

import pytest

from perfmodel.comm.channels import build_channels, channel_rates
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.model import CommCostModel
from perfmodel.comm.params import LinkParams
from perfmodel.comm.rings import pack_rings
from perfmodel.errors import PerfModelError
from perfmodel.topology import load_system

_COLUMNS = ("capacity", "alpha", "extra", "units", "unit_count", "unit_capacity", "family")

SYSTEMS = [
    ("dgx-a100", 4, {}),
    ("dgx-a100", 3, {"fabric_topology": "fat-tree"}),
    ("dgx1-v100", 3, {}),
    ("pcie-8xtitanx", 2, {}),
]


def _touch(links: DirectedLinks, seed: int) -> None:
    """Ask for links the way the analyses do, in a scrambled order: routes between random
    node pairs, then one server's ring packing."""
    topo = links.topology
    rng = random.Random(seed)
    nodes = sorted(topo.graph.nodes)
    for _ in range(15):
        a, b = rng.sample(nodes, 2)
        try:
            there, back = links.route(a, b), links.route(b, a)
        except PerfModelError:  # e.g. from a switch: no path through transit nodes
            continue
        links.path_ids(there)
        links.extra_latency(back)
    pack_rings(links, list(topo.gpus[: topo.gpus_per_node]))


def _same_per_edge(lazy: DirectedLinks, whole: DirectedLinks) -> None:
    table, ref = lazy._table, whole._whole
    for i, (u, v) in enumerate(table.edges):
        j = whole.index[(u, v)]
        assert table.succ[u][v] == i and table.edges[i ^ 1] == (v, u)
        for col in _COLUMNS:
            assert getattr(table, col)[i] == getattr(ref, col)[j], (u, v, col)
    assert table.has_extra == any(ref.extra[whole.index[e]] for e in table.edges)


@pytest.mark.parametrize(("system", "nodes", "kw"), SYSTEMS)
def test_lazy_table_equals_whole_graph_table(system: str, nodes: int, kw: dict) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    whole = DirectedLinks(topo)
    assert len(whole.edges) == 2 * topo.graph.number_of_edges()
    lazy = DirectedLinks(topo)
    _touch(lazy, seed=nodes)
    n_touched = len(lazy._table.edges)
    assert 0 < n_touched < len(whole.edges)  # numbered on demand, not all at once
    _same_per_edge(lazy, whole)
    # completing the table numbers the rest: every edge once, the same values per edge
    assert len(lazy.edges) == len(whole.edges)
    assert set(lazy.index) == set(whole.index)
    assert lazy._table.edges[:n_touched] == list(lazy.edges[:n_touched])
    _same_per_edge(lazy, whole)
    for e in whole.edges:
        i, j = lazy.index[e], whole.index[e]
        assert lazy.capacity_Bps[i] == whole.capacity_Bps[j]
        assert lazy.units[i] == whole.units[j]
        assert lazy.family[i] == whole.family[j]


def test_overridden_latency_is_extra_per_edge() -> None:
    """A calibrated latency (a ``LinkParams`` override) is latency outside NCCL's tables: the
    lazily numbered links carry it as the whole table does, and ``extra_latency`` sees it on
    the first lookup of the path's links."""
    topo = load_system("dgx-a100", nodes=2)
    params = LinkParams.from_dict({"infiniband": {"alpha_us": 3.0}})
    lazy, whole = DirectedLinks(topo, params), DirectedLinks(topo, params)
    src, dst = topo.gpus[0], topo.gpus[-1]
    path = lazy.route(src, dst)
    assert lazy.extra_latency(path) == whole.extra_latency(path) > 0
    inside = lazy.route(topo.gpus[0], topo.gpus[1])
    assert lazy.extra_latency(inside) == 0.0
    _touch(lazy, seed=1)
    _same_per_edge(lazy, whole)


def test_channel_rates_on_lazy_ids_equal_whole_table() -> None:
    """Max-min rates of ring channels, bit for bit, whether the ids come from a fresh table
    (a few links numbered) or from the whole-graph table."""
    topo = load_system("dgx-a100", nodes=4, fabric_topology="fat-tree")
    whole = DirectedLinks(topo)
    whole.edges  # noqa: B018 - number every link in graph edge order first
    lazy = DirectedLinks(topo)
    channels = build_channels(whole, topo.gpus)
    rates_whole = channel_rates(whole, channels)
    rates_lazy = channel_rates(lazy, channels)
    assert rates_lazy == rates_whole
    assert len(lazy._table.edges) < len(whole.edges)


def test_large_cluster_analysis_numbers_few_links() -> None:
    """A data-parallel all-reduce over 64 DGX A100 numbers the links its rings cross (one
    server's and the fabric links of the boundaries), far fewer than the cluster has."""
    topo = load_system("dgx-a100", nodes=64)
    model = CommCostModel(topo)
    model.collective("allreduce", 2**30, topo.gpus)
    assert len(model.links._table.edges) < topo.graph.number_of_edges() // 4


@pytest.mark.parametrize(
    ("system", "nodes", "kw", "change"),
    [
        ("dgx-a100", 4, {}, None),
        ("dgx-a100", 3, {"fabric_topology": "fat-tree"}, None),
        ("dgx1-v100", 3, {}, "no-p2p"),
        ("pcie-8xtitanx", 2, {}, "denied"),
        ("dgx-h100", 2, {"fabric_topology": "fat-tree"}, "no-p2p"),
    ],
)
def test_node_tables_from_build_record_equal_graph_pass(
    system: str, nodes: int, kw: dict, change: str | None
) -> None:
    """Server membership, local ids, NICs with a fabric port and the peer-to-peer exceptions,
    read off the build record (server 0's copies), equal a pass over the graph's nodes."""
    import dataclasses

    from perfmodel.comm.nodes import nics_of

    topo = load_system(system, nodes=nodes, **kw)
    if change == "no-p2p":
        topo = topo.with_p2p(False)
    elif change == "denied":
        topo = topo.with_p2p_denied([("gpu0", "gpu4"), ("gpu1", "gpu6")])
    assert topo.pattern is not None and topo.pattern.describes(topo)
    plain = dataclasses.replace(topo, pattern=None)  # same graph, no record: the graph pass
    rec, ref = DirectedLinks(topo), DirectedLinks(plain)
    assert rec._pattern is not None and ref._pattern is None
    assert rec.server == ref.server and rec.local_id == ref.local_id
    assert rec.transit == ref.transit
    assert all(rec.rank[n] == ref.rank[n] for n in topo.graph), "name order"
    for s in [*range(nodes), -1]:
        assert rec.server_nodes.get(s) == ref.server_nodes.get(s), s
        assert rec.by_local.get(s) == ref.by_local.get(s), s
        assert nics_of(topo, s) == nics_of(plain, s), s
    assert rec.server_nodes.get(nodes) is None and rec.by_local.get(nodes) is None
    assert nics_of(topo, nodes) == ()
    assert rec.no_p2p == ref.no_p2p and rec.p2p_denied == ref.p2p_denied
    if change == "no-p2p":
        assert rec.no_p2p == frozenset(topo.gpus)
    if change == "denied":
        assert "gpu0" in rec.p2p_denied["n1/gpu4"] and "gpu1" in rec.p2p_denied["n0/gpu6"]
