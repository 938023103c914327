"""The route search (``min_hop_widest``) stops at the source and chooses only among nodes on a
minimum-hop path (issue 14); it must give what the full search gives: a breadth-first pass over
every allowed node, then a best choice at every node of the closer layers. The full search is
kept here as the reference."""

from __future__ import annotations

import random
from collections import deque

import pytest

from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.paths import min_hop_widest
from perfmodel.topology import load_system


def _full_search(
    links: DirectedLinks,
    residual: list[float],
    src: str,
    dst: str,
    allowed: frozenset[str] | None,
    per_unit: bool,
) -> tuple[int, float, tuple[str, ...]] | None:
    adj, transit, index = links.adjacency, links.transit, links.index
    dist = {dst: 0}
    q = deque([dst])
    while q:
        u = q.popleft()
        if u != dst and u not in transit:
            continue
        if u == src:
            break
        for v in adj[u]:
            if v in dist or (allowed is not None and v not in allowed):
                continue
            dist[v] = dist[u] + 1
            q.append(v)
    if src not in dist:
        return None
    d_src = dist[src]
    cap, unit_cap, alpha, rank = (
        links.capacity_list, links.unit_capacity_list, links.alpha_list, links.rank
    )  # fmt: skip
    best = {dst: (1 << 30, float("inf"), dst)}
    lat = {dst: 0.0}
    layer = sorted((n for n in dist if dist[n] < d_src and n != dst), key=dist.__getitem__)
    for u in [*layer, src]:
        if u != src and u not in transit:
            continue
        cand = None
        for v in adj[u]:
            if dist.get(v, -1) != dist[u] - 1 or v not in best:
                continue
            i = index[(u, v)]
            bu, bw, _ = best[v]
            if per_unit:
                units, unit_bw = min(int(residual[i]), bu), min(unit_cap[i], bw)
                key = (units, unit_bw, 0.0, -rank[v])
            else:
                units, unit_bw = bu, min(cap[i], bw)
                key = (0, unit_bw, -(lat[v] + alpha[i]), -rank[v])
            if cand is None or key > cand[0]:
                cand = (key, (units, unit_bw, v), lat[v] + alpha[i])
        if cand is not None:
            best[u], lat[u] = cand[1], cand[2]
    if src not in best:
        return None
    path = [src]
    while path[-1] != dst:
        path.append(best[path[-1]][2])
    return best[src][0], best[src][1], tuple(path)


@pytest.mark.parametrize(
    ("system", "nodes", "kw"),
    [
        ("dgx-a100", 2, {}),
        ("dgx1-v100", 3, {}),
        ("dgx-h100", 2, {"fabric_topology": "fat-tree"}),
        ("pcie-8xtitanx", 2, {}),
    ],
)
def test_search_equals_full_search(system: str, nodes: int, kw: dict) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    links = DirectedLinks(topo)
    rng = random.Random(14)
    residual = [float(rng.randint(0, int(u))) for u in links.residual_units(None)]
    nodes_ = sorted(topo.graph.nodes)
    pairs = [(a, b) for a in nodes_ for b in nodes_ if a != b]
    for a, b in rng.sample(pairs, min(len(pairs), 1500)):
        for allowed in (None, links.server_nodes.get(links.server[a])):
            if allowed is not None and b not in allowed:
                continue
            for per_unit in (False, True):
                got = min_hop_widest(links, residual, a, b, allowed, per_unit=per_unit, direct=True)
                ref = _full_search(links, residual, a, b, allowed, per_unit)
                assert got == ref, (a, b, per_unit, allowed is None)
