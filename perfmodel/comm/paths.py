"""Minimum-hop path searches on the topology graph, through transit nodes only: the widest
such path (by residual link units, or by capacity, then latency, then node names) and the nodes
on every such path.

The route search (:mod:`perfmodel.comm.routes`), NCCL's host-memory staging
(:mod:`perfmodel.comm.pcie_p2p`) and the ring packing (:mod:`perfmodel.comm.rings`) share them;
each takes the :class:`~perfmodel.comm.links.DirectedLinks` whose tables it reads.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


def min_hop_span(
    links: DirectedLinks, src: str, dst: str, allowed: frozenset[str]
) -> frozenset[str] | None:
    """The nodes on minimum-hop paths ``src -> dst`` through transit nodes of ``allowed``
    (``src`` and ``dst`` included), or ``None`` where there is no such path.

    A breadth-first search from both ends, one whole layer at a time on the side whose
    frontier has fewer links, stops at the first layer that meets the other side at a node
    that may be on a path (a transit node, or an end): with radii ``a`` and ``b`` then, no
    path is shorter than ``a + b`` (a shorter one would have met earlier) and each meeting
    node lies on one of length ``a + b``; the path nodes are then traced back layer by layer
    from the meeting nodes to both ends. A spine of a fat tree is reached but never expanded
    (its 820 leaves are not walked). :func:`min_hop_widest` over these nodes gives its answer over ``allowed``: its
    distances to ``dst`` of path nodes are the same (a shortest path from a path node to
    ``dst`` is made of path nodes), and it chooses only among path nodes.
    """
    if src == dst:
        return frozenset((src,))
    adj_set, transit = links.adjacency_set, links.transit
    ends = (src, dst)
    dist = ({src: 0}, {dst: 0})
    layers: tuple[list[list[str]], list[list[str]]] = ([[src]], [[dst]])
    meet: list[str] = []
    adj = links.adjacency
    while not meet:
        # grow the side whose frontier has fewer links to scan (not a spine's 820 leaves)
        cost = [sum(len(adj[u]) for u in layers[k][-1]) for k in (0, 1)]
        side = 0 if cost[0] <= cost[1] else 1
        mine, other, end = dist[side], dist[1 - side], ends[side]
        depth = len(layers[side])
        nxt = []
        for u in layers[side][-1]:
            if u != end and u not in transit:
                continue
            for v in adj_set[u] & allowed:
                if v not in mine:
                    mine[v] = depth
                    nxt.append(v)
        if not nxt:
            return None
        layers[side].append(nxt)
        meet = [v for v in nxt if v in other and (v in transit or v in ends)]
    out = set(meet)
    for side in (0, 1):
        cur = set(meet)
        for k in range(dist[side][meet[0]] - 1, -1, -1):
            layer = {y for y in layers[side][k] if y == ends[side] or y in transit}
            cur = {y for x in cur for y in adj_set[x] & layer}
            out |= cur
    return frozenset(out)


def min_hop_widest(
    links: DirectedLinks,
    residual: list[float] | None,
    src: str,
    dst: str,
    allowed: frozenset[str] | None,
    *,
    per_unit: bool = True,
    direct: bool = False,
) -> tuple[int, float, tuple[str, ...]] | None:
    """Among minimum-hop paths ``src -> dst`` through transit nodes, the one with the most
    residual link units (then the fastest per-unit bottleneck). Returns (units, unit_bw, path).

    With ``per_unit=False`` units are ignored and the widest path (by capacity) wins, then the
    lowest latency, then the smallest node names: the routing rule of
    :mod:`perfmodel.topology.routing`. Two GPUs without peer-to-peer go through the CPU that
    stages their traffic (:meth:`DirectedLinks.shm_cpu`) unless ``direct``."""
    if not direct and (links.no_p2p or links.p2p_denied):
        cpu = links.shm_cpu(src, dst)
        if cpu is not None:
            up = min_hop_widest(links, residual, src, cpu, allowed, per_unit=per_unit)
            down = min_hop_widest(links, residual, cpu, dst, allowed, per_unit=per_unit)
            if up is None or down is None:
                return None
            return min(up[0], down[0]), min(up[1], down[1]), up[2] + down[2][1:]
    if allowed is None or not per_unit:
        found = _min_hop_layers(links, src, dst, allowed)
    else:  # the ring packing's searches inside a server: the same pairs on every residual
        key = (src, dst, allowed)
        if key in links._layers:
            found = links._layers[key]
        else:
            found = links._layers[key] = _min_hop_layers(links, src, dst, allowed)
    if found is None:
        return None
    dist, layer = found
    adj = links.adjacency
    adj_set = links.adjacency_set
    transit = links.transit
    succ = links._table.succ
    cap = links.capacity_list
    unit_cap = links.unit_capacity_list
    alpha = links.alpha_list
    rank = links.rank
    res = residual
    # DP from dst outwards over the BFS layers (nodes strictly closer than src, then src).
    best: dict[str, tuple[int, float, str]] = {dst: (1 << 30, float("inf"), dst)}
    lat: dict[str, float] = {dst: 0.0}
    for u in layer:
        if u != src and u not in transit:
            continue
        du = dist[u] - 1
        cand: tuple[Any, tuple[int, float, str], float] | None = None
        nbrs = adj[u]
        out = succ[u]
        if len(best) < len(nbrs):  # as above; the key's rank term makes the best unique
            nbrs = adj_set[u].intersection(best)
        for v in nbrs:
            if dist.get(v, -1) != du or v not in best:
                continue
            i = out[v]
            bu, bw, _ = best[v]
            if per_unit:
                assert res is not None
                units = min(int(res[i]), bu)
                unit_bw = min(unit_cap[i], bw)
                key: tuple[float, ...] = (units, unit_bw, 0.0, -rank[v])
                if cand is not None and key[:3] == cand[0][:3]:
                    next(links._name_ties)  # the name order decides this choice
            else:
                units = bu
                unit_bw = min(cap[i], bw)
                key = (0, unit_bw, -(lat[v] + alpha[i]), -rank[v])
            if cand is None or key > cand[0]:
                cand = (key, (units, unit_bw, v), lat[v] + alpha[i])
        if cand is not None:
            best[u] = cand[1]
            lat[u] = cand[2]
    if src not in best:
        return None
    path = [src]
    node = src
    while node != dst:
        node = best[node][2]
        path.append(node)
    units, unit_bw, _ = best[src]
    return units, unit_bw, tuple(path)


def _min_hop_layers(
    links: DirectedLinks, src: str, dst: str, allowed: frozenset[str] | None
) -> tuple[dict[str, int], list[str]] | None:
    """The breadth-first part of :func:`min_hop_widest`, which no residual or bandwidth
    changes: ``(dist, order)`` with ``dist`` the hop distances to ``dst`` (through transit
    nodes, inside ``allowed``) found until ``src``'s, and ``order`` the nodes on some
    minimum-hop path ``src -> dst`` closer than ``src`` by distance, then ``src`` (the order
    of the search's dynamic programme); ``None`` where ``src`` is not reached."""
    adj = links.adjacency
    adj_set = links.adjacency_set
    transit = links.transit
    dist = {dst: 0}
    q = deque([dst])
    while q and src not in dist:
        # Stop when src is reached: every node closer to dst than src has its distance by then
        # (breadth first), and no farther node can be on a minimum-hop path.
        u = q.popleft()
        if u != dst and u not in transit:
            continue
        du = dist[u] + 1
        # Only the allowed neighbours: the set intersection scans the smaller side (a switch
        # of a large cluster has thousands of ports; BFS distances, hence the result, do not
        # depend on the scan order).
        for v in adj[u] if allowed is None else adj_set[u] & allowed:
            if v in dist:
                continue
            dist[v] = du
            q.append(v)
    if src not in dist:
        return None
    d_src = dist[src]
    # The nodes on some minimum-hop path src -> dst, found backwards from src layer by layer:
    # the chain of best choices from src only meets those, and the best choice of each of them
    # depends only on those (a neighbour one step closer to dst of a node on such a path is on
    # one too). The other nodes of the layers (a fat tree's every leaf) need no choice.
    layers: dict[int, set[str]] = {}
    for n, d in dist.items():
        if d < d_src:
            layers.setdefault(d, set()).add(n)
    on_path: list[str] = []
    frontier = [src]
    for k in range(d_src - 1, 0, -1):
        nxt: set[str] = set()
        for u in frontier:
            if u == src or u in transit:
                nxt |= adj_set[u] & layers.get(k, set())
        on_path += nxt
        frontier = list(nxt)
    return dist, [*sorted(on_path, key=dist.__getitem__), src]
