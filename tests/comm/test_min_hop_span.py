"""The fabric route search runs over the nodes of the minimum-hop paths only
(``min_hop_span``, a breadth-first search from both ends; issue 14: a fat tree's spines are
reached, never expanded). The span must be exactly the nodes ``x`` with
``d(src, x) + d(x, dst) = d(src, dst)`` through transit nodes, and the route over it the route
over the whole fabric."""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from types import SimpleNamespace

import networkx as nx
import pytest

from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.paths import min_hop_span, min_hop_widest
from perfmodel.topology import load_system
from perfmodel.topology.schema import NodeKind


def _dist(links: DirectedLinks, start: str, allowed: frozenset[str]) -> dict[str, int]:
    dist = {start: 0}
    q = deque([start])
    while q:
        u = q.popleft()
        if u != start and u not in links.transit:
            continue
        for v in links.adjacency[u]:
            if v in allowed and v not in dist:
                dist[v] = dist[u] + 1
                q.append(v)
    return dist


@pytest.mark.parametrize(
    ("system", "nodes", "kw"),
    [
        ("dgx-a100", 6, {"fabric_topology": "fat-tree"}),
        ("dgx-h100", 4, {"fabric_topology": "fat-tree"}),
        ("dgx1-v100", 4, {"oversubscription": 2.0}),
        ("dgx-a100", 3, {}),
    ],
)
def test_span_is_the_min_hop_nodes_and_gives_the_same_route(
    system: str, nodes: int, kw: dict
) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    links = DirectedLinks(topo)
    fabric = links.server_nodes[-1]
    nics = sorted(n for n, k in topo.graph.nodes(data="kind") if k is NodeKind.NIC)
    pairs = [(a, b) for a in nics for b in nics if links.server[a] != links.server[b]]
    for a, b in pairs[::3]:
        allowed = fabric | {a, b}
        span = min_hop_span(links, a, b, allowed)
        ds, dd = _dist(links, a, allowed), _dist(links, b, allowed)
        if b not in ds:
            assert span is None
            continue
        on_path = {
            x
            for x in ds
            if x in dd and ds[x] + dd[x] == ds[b] and (x in (a, b) or x in links.transit)
        }
        assert span == on_path, (a, b)
        full = min_hop_widest(links, None, a, b, allowed, per_unit=False)
        assert min_hop_widest(links, None, a, b, span, per_unit=False) == full, (a, b)


def _spined(nodes: int, spines: int, seed: int):
    """A DGX A100 fat tree with ``spines`` extra spine switches, each linked to every leaf
    (some links at half bandwidth or double latency): several minimum-hop paths per leaf pair,
    with ties and different widths."""
    topo = load_system("dgx-a100", nodes=nodes, fabric_topology="fat-tree")
    g = topo.graph.copy()
    rng = random.Random(seed)
    leaves = sorted(n for n in g if n.startswith("fabric/leaf"))
    attrs = dict(g.nodes["fabric/spine"])
    up = dict(g.edges[leaves[0], "fabric/spine"])
    for k in range(spines):
        sp = f"fabric/spine{k}"
        g.add_node(sp, **{**attrs, "local_id": f"spine{k}"})
        for leaf in leaves:
            d = dict(up)
            if rng.random() < 0.3:
                d["bandwidth_Bps"] = d["bandwidth_Bps"] / 2
            if rng.random() < 0.3:
                d["latency_s"] = d["latency_s"] * 2
            g.add_edge(leaf, sp, **d)
    return dataclasses.replace(topo, graph=g, pattern=None)


@pytest.mark.parametrize("seed", [1, 2])
def test_several_spines_same_route_as_whole_fabric(seed: int) -> None:
    topo = _spined(nodes=24, spines=3, seed=seed)
    links = DirectedLinks(topo)
    fabric = links.server_nodes[-1]
    nics = sorted(n for n, k in topo.graph.nodes(data="kind") if k is NodeKind.NIC)
    rng = random.Random(seed)
    pairs = [(a, b) for a in nics for b in nics if links.server[a] != links.server[b]]
    sizes = set()
    for a, b in rng.sample(pairs, 200):
        allowed = fabric | {a, b}
        span = min_hop_span(links, a, b, allowed)
        assert span is not None
        sizes.add(len(span))
        full = min_hop_widest(links, None, a, b, allowed, per_unit=False)
        assert min_hop_widest(links, None, a, b, span, per_unit=False) == full, (a, b)
    assert max(sizes) >= 8  # several spines on the paths between two leaves


@pytest.mark.parametrize("seed", range(6))
def test_span_on_random_graphs(seed: int) -> None:
    """On random graphs with random non-transit nodes, every pair: the span is the set of
    nodes with ``d(src, x) + d(x, dst) = d(src, dst)`` (interior nodes transit)."""
    rng = random.Random(seed)
    g = nx.gnm_random_graph(30, 55, seed=seed)
    names = {i: f"v{i}" for i in g}
    g = nx.relabel_nodes(g, names)
    transit = frozenset(n for n in g if rng.random() < 0.7)
    links = SimpleNamespace(
        adjacency={n: tuple(g.adj[n]) for n in g},
        adjacency_set={n: frozenset(g.adj[n]) for n in g},
        transit=transit,
    )
    allowed = frozenset(g)
    for a in g:
        ds = _dist(links, a, allowed)
        for b in g:
            span = min_hop_span(links, a, b, allowed)  # type: ignore[arg-type]
            if b not in ds:
                assert span is None, (a, b)
                continue
            dd = _dist(links, b, allowed)
            on_path = {
                x
                for x in ds
                if x in dd and ds[x] + dd[x] == ds[b] and (x in (a, b) or x in transit)
            }
            assert span == on_path, (a, b)


def test_no_path_and_same_node() -> None:
    topo = load_system("dgx-a100", nodes=2)
    links = DirectedLinks(topo)
    a, b = topo.gpus[0], topo.gpus[-1]
    assert min_hop_span(links, a, b, frozenset({a, b})) is None  # nothing between them
    assert min_hop_span(links, a, a, frozenset({a})) == frozenset({a})
