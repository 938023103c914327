"""Routes between endpoints of a topology graph.

Routing rule (documented assumption): a transfer follows a minimum-hop path whose interior
nodes are transit nodes only (switches, CPUs, NICs; never a third GPU); among minimum-hop
paths the one with the largest bottleneck (effective) bandwidth wins, then the lowest total
latency, then the lexicographically smallest node sequence, so routes are deterministic.
This mirrors what the hardware does: PCIe and network switches forward on the shortest
path, and NCCL's point-to-point transport uses a direct NVLink when there is one, else
PCIe/CPU (P2P or SHM), and the NIC closest to the GPU for inter-node traffic.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from perfmodel.errors import ConfigError, TopologyError
from perfmodel.topology.model import Topology
from perfmodel.topology.schema import TRANSIT_KINDS, NodeKind, effective_bandwidth
from perfmodel.topology.symmetry import server_symmetry


def route(topo: Topology, src: str, dst: str) -> tuple[str, ...]:
    """The node sequence a transfer from ``src`` to ``dst`` follows (both included).

    Raises
    ------
    ConfigError
        If either endpoint is not in the topology.
    TopologyError
        If no path exists.
    """
    for n in (src, dst):
        if n not in topo.graph:
            raise ConfigError(
                f"{n!r} is not a node of system {topo.name}", value=n, where=topo.name
            )
    if src == dst:
        return (src,)
    return _route_cached(topo, src, dst)


@lru_cache(maxsize=200_000)
def _route_cached(topo: Topology, src: str, dst: str) -> tuple[str, ...]:
    mapped = _route_by_symmetry(topo, src, dst)
    if mapped is not None:
        return mapped
    crossed = _route_between_servers(topo, src, dst)
    if crossed is not None:
        return crossed
    adj = _adjacency(topo)
    s, d = adj.index[src], adj.index[dst]
    # Best next hop of every node towards dst, by dynamic programming over the BFS layers of
    # dst (transit nodes only in the interior): widest bottleneck, then lowest latency, then the
    # smallest node id (nodes are indexed in sorted order, so the smaller index).
    nxt = _local_next_hops(topo, adj, s, d)
    if nxt is None:
        _, nxt = _best_paths(topo, dst, None)
    if nxt[s] < 0:
        raise TopologyError(
            f"no route from {src} to {dst} in {topo.name}", value=(src, dst), where=topo.name
        )
    path = [s]
    node = s
    while node != d:
        node = nxt[node]
        path.append(node)
    return tuple(adj.names[int(i)] for i in path)


def _route_by_symmetry(topo: Topology, src: str, dst: str) -> tuple[str, ...] | None:
    """The route between two servers read off the same pair of local ids in the first servers
    of their classes (:mod:`perfmodel.topology.symmetry`), names mapped back; ``None`` where
    that is not provably the route the search would find.

    The server exchange is a graph automorphism that keeps the name order of the two servers'
    and the fabric's nodes, so every comparison the search makes among those nodes comes out
    the same. It is used only when the route found is shorter than any path through a third
    server could be: such a path spends at least ``dist(src, fabric) + excursion +
    dist(fabric, dst)`` hops (:attr:`ServerSymmetry.excursion`), and a shorter minimum means no
    node of a third server is ever a candidate next hop on the route. Issue 14: a GPT-3 plan on
    128 DGX A100 routed ~1,000 new server pairs (2 s); they are one shape per local-id pair.
    """
    if topo.num_nodes <= 1:
        return None
    sym = server_symmetry(topo)
    if sym.server[src] == sym.server[dst]:
        return None
    path = sym.pair_route(src, dst, lambda a, b: _route_cached(topo, a, b))
    if path is None:
        return None
    if not shorter_than_third_server(topo, src, dst, len(path) - 1):
        return None
    return path


def shorter_than_third_server(topo: Topology, src: str, dst: str, hops: int) -> bool:
    """Whether a route of ``hops`` hops between nodes of two servers of a cluster built alike
    is shorter than any path through a third server can be: such a path spends at least
    ``dist(src, fabric) + excursion + dist(fabric, dst)`` hops
    (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.excursion`), so a shorter minimum
    route never has a third server's node as a candidate next hop and maps onto every image
    of the pair under the server symmetry."""
    sym = server_symmetry(topo)
    return hops < _fabric_distance(topo, src) + sym.excursion + _fabric_distance(topo, dst)


def _fabric_distance(topo: Topology, node: str) -> int:
    """Fewest hops from a server node to any fabric node (server ``-1``), interior nodes
    transit, searched inside its server (a large number where none is reachable); the same for
    the node of the same local id in every server of a class."""
    return _fabric_distance_of(topo, server_symmetry(topo).canonical_node(node))


@lru_cache(maxsize=65_536)
def _fabric_distance_of(topo: Topology, node: str) -> int:
    sym = server_symmetry(topo)
    server = sym.server[node]
    if _built_alike(topo):
        assert topo.pattern is not None
        exits = frozenset(lid for lid, _, _ in topo.pattern.attach[server])
        return _block_fabric_distance(topo, sym.local_id[node], exits)
    adj = _adjacency(topo)
    i = adj.index[node]
    dist, _ = _best_paths(topo, node, server)
    best = 1 << 30
    for name in server_symmetry(topo).by_local[server].values():
        j = adj.index[name]
        dj = dist[j]
        if dj < 0 or dj + 1 >= best or (j != i and not adj.transit[j]):
            continue
        if any(adj.server[v] < 0 for v, _, _ in adj.nbrs[j]):
            best = dj + 1
    return best


def _built_alike(topo: Topology) -> bool:
    """Whether ``topo`` is a cluster of copies of one server on a fabric, as built
    (:class:`~perfmodel.topology.model.ReplicaPattern`): no server links to another, and the
    fabric's node names sort before every server's (``fabric/...`` before ``n<s>/...``), so
    that a server block's indices follow the fabric's (:func:`_servers_adjacency`)."""
    p = topo.pattern
    if p is None or not p.describes(topo) or topo.num_nodes <= 1:
        return False
    return not p.fabric_nodes or max(p.fabric_nodes) < p.prefix(0) + min(p.local_ids)


def _route_between_servers(topo: Topology, src: str, dst: str) -> tuple[str, ...] | None:
    """The route between nodes of two servers (or of one) of a cluster built alike, searched
    among the servers' and the fabric's nodes only; ``None`` where that is not provably the
    route the whole-graph search would find. In one server the in-server shortcut
    (:func:`_local_next_hops`) is tried first; where its bound fails (a GPU to a NIC of
    another PCIe switch), the search also takes the fabric, under the bound below.

    Servers of such a cluster meet only through the fabric, so a path through a third server
    spends at least ``dist(src, fabric) + excursion + dist(fabric, dst)`` hops
    (:func:`_route_by_symmetry`). When the route found among the two servers and the fabric is
    shorter, every minimum-hop path, and every node one layer closer to ``dst`` along one, lies
    among them: the BFS layers, and so the widest/lowest-latency/smallest-name choices of the
    search, are those of the whole graph on every node the route can visit (node indices are
    in name order in both searches). Issue 14: a route then costs a search over two servers
    and the fabric switches (about 70 nodes for DGX A100 on rails), not the whole cluster
    (16,000 nodes on 512 servers).
    """
    if not _built_alike(topo):
        return None
    sym = server_symmetry(topo)
    a, b = sym.server[src], sym.server[dst]
    if a < 0 or b < 0:
        return None
    adj = _servers_adjacency(topo, (a,) if a == b else (min(a, b), max(a, b)))
    s, d = adj.index[src], adj.index[dst]
    nxt = None
    if a == b:  # in one server: the in-server shortcut, on the server's own nodes
        nxt = _local_next_hops(topo, adj, s, d, lambda n, srv: _search(adj, adj.index[n], srv))
    bounded = nxt is None  # a search that may leave the server(s): check the third-server bound
    if nxt is None:
        _, nxt = _search(adj, d, None)
    if nxt[s] < 0:
        return None  # the whole-graph search names the failure
    path = [s]
    while path[-1] != d:
        path.append(nxt[path[-1]])
    if bounded and not shorter_than_third_server(topo, src, dst, len(path) - 1):
        return None
    return tuple(adj.names[i] for i in path)


@lru_cache(maxsize=256)
def _servers_adjacency(topo: Topology, servers: tuple[int, ...]) -> _Adjacency:
    """:class:`_Adjacency` of the nodes of ``servers`` and of the fabric of a cluster built
    alike (:func:`_built_alike`), links among them only; index order is name order, as in the
    whole graph's. Assembled from the fabric's own links (:func:`_fabric_part`), server 0's
    block with its index shifted (every server is a copy of it) and the fabric attachments
    the builder recorded (:class:`~perfmodel.topology.model.ReplicaPattern`), without
    visiting other servers: a fat tree of 2,048 DGX A100 has 821 switches, whose rows are
    copied rather than rebuilt for every server pair."""
    pattern = topo.pattern
    assert pattern is not None
    fab_names, fab_transit, fab_rows = _fabric_part(topo)
    lid_order, blk_transit, blk_nics, blk_rows = _server_block(topo)
    fab_index = {f: i for i, f in enumerate(fab_names)}
    out = _Adjacency.__new__(_Adjacency)
    blocks = sorted(set(servers), key=pattern.prefix)  # fabric names sort first (_fabric_part)
    size = len(lid_order)
    base = len(fab_names)
    out.names = list(fab_names)
    out.transit = list(fab_transit)
    out.server = [-1] * base
    out.nics = {}
    out.nbrs = [list(row) for row in fab_rows]
    adj_of = topo.graph._adj
    for k, srv in enumerate(blocks):
        off = base + k * size
        prefix = pattern.prefix(srv)
        out.names.extend(prefix + lid for lid in lid_order)
        out.transit.extend(blk_transit)
        out.server.extend([srv] * size)
        if blk_nics:
            out.nics[srv] = tuple(off + j for j in blk_nics)
        rows = [[(off + j, bw, lat) for j, bw, lat in row] for row in blk_rows]
        pos = {lid: j for j, lid in enumerate(lid_order)}
        for lid, f, _ in pattern.attach[srv]:
            bw, lat = _goodput_latency(adj_of[prefix + lid][f])
            rows[pos[lid]].append((fab_index[f], bw, lat))
            out.nbrs[fab_index[f]].append((off + pos[lid], bw, lat))
        out.nbrs.extend(rows)
    out.index = {n: i for i, n in enumerate(out.names)}
    return out


@lru_cache(maxsize=4096)
def _block_fabric_distance(topo: Topology, lid: str, exits: frozenset[str]) -> int:
    """:func:`_fabric_distance_of` in a cluster built alike: searched in server 0's block
    (every server is a copy), the nodes with local ids ``exits`` having a link to the fabric
    (a server's :attr:`~perfmodel.topology.model.ReplicaPattern.attach`)."""
    lids, transit, _, rows = _server_block(topo)
    block = _Adjacency.__new__(_Adjacency)
    block.names, block.transit, block.server = lids, transit, [0] * len(lids)
    block.nbrs = rows
    i = lids.index(lid)
    dist, _ = _search(block, i, 0)
    best = 1 << 30
    for j, x in enumerate(lids):
        if x in exits and dist[j] >= 0 and (j == i or transit[j]):
            best = min(best, dist[j] + 1)
    return best


@lru_cache(maxsize=64)
def _fabric_part(
    topo: Topology,
) -> tuple[tuple[str, ...], tuple[bool, ...], tuple[tuple[tuple[int, float, float], ...], ...]]:
    """The fabric of a cluster built alike in name order: names, transit flags and the rows of
    its links among fabric nodes (one pass over the switches' ports per topology)."""
    pattern = topo.pattern
    assert pattern is not None
    names = tuple(sorted(pattern.fabric_nodes))
    index = {f: i for i, f in enumerate(names)}
    nodes, adj_of = topo.graph.nodes, topo.graph._adj
    rows = tuple(
        tuple((index[v], *_goodput_latency(d)) for v, d in adj_of[f].items() if v in index)
        for f in names
    )
    return names, tuple(nodes[f]["kind"] in TRANSIT_KINDS for f in names), rows


@lru_cache(maxsize=64)
def _server_block(
    topo: Topology,
) -> tuple[
    tuple[str, ...],
    tuple[bool, ...],
    tuple[int, ...],
    tuple[tuple[tuple[int, float, float], ...], ...],
]:
    """Server 0 of a cluster built alike, by local id in name order: local ids, transit flags,
    positions of its NICs and the rows of its links inside the server (positions in the
    block). Every server is a copy of it."""
    pattern = topo.pattern
    assert pattern is not None
    prefix = pattern.prefix(0)
    lids = tuple(sorted(pattern.local_ids))
    pos = {lid: j for j, lid in enumerate(lids)}
    nodes, adj_of = topo.graph.nodes, topo.graph._adj
    kinds = [nodes[prefix + lid]["kind"] for lid in lids]
    rows = tuple(
        tuple(
            (pos[v[len(prefix) :]], *_goodput_latency(d))
            for v, d in adj_of[prefix + lid].items()
            if v.startswith(prefix)
        )
        for lid in lids
    )
    nics = tuple(j for j, k in enumerate(kinds) if k is NodeKind.NIC)
    return lids, tuple(k in TRANSIT_KINDS for k in kinds), nics, rows


def _local_next_hops(
    topo: Topology,
    adj: _Adjacency,
    s: int,
    d: int,
    paths: Callable[[str, int], tuple[Any, Any]] | None = None,
) -> list[int] | None:
    """Next hops computed inside one server, when that provably gives the global route.

    For two nodes of the same server the search can stay inside the server if every path that
    leaves it is longer: such a path exits through a NIC and re-enters through another, so it
    has at least ``dist(src, nearest NIC) + 2 + dist(nearest NIC, dst)`` hops. When the
    in-server route is strictly shorter than that bound, all minimum-hop routes are in-server
    and the restricted dynamic programme picks exactly the global route. Returns ``None`` when
    the shortcut does not apply. ``paths(node, server)`` is the in-server search on ``adj``
    (default: the cached :func:`_best_paths` of the whole graph's adjacency).
    """
    if paths is None:
        paths = lambda node, srv: _best_paths(topo, node, srv)  # noqa: E731
    server = adj.server[s]
    if topo.num_nodes <= 1 or server < 0 or adj.server[d] != server:
        return None
    dist_d, nxt = paths(adj.names[d], server)
    if dist_d[s] < 0:
        return None
    nics = adj.nics.get(server, ())
    if nics:
        dist_s, _ = paths(adj.names[s], server)
        to_s = [dist_s[n] for n in nics if dist_s[n] >= 0]
        to_d = [dist_d[n] for n in nics if dist_d[n] >= 0]
        if to_s and to_d and dist_d[s] >= min(to_s) + 2 + min(to_d):
            return None
    return nxt


class _Adjacency:
    """Integer-indexed adjacency of a topology graph (node names sorted, so index order is name
    order): ``nbrs[i]`` = list of ``(j, effective bandwidth, latency)``; ``transit[i]``.
    The searches pick among neighbours by a total order (width, latency, index), so their
    answers do not depend on the order of a node's neighbour list."""

    __slots__ = ("index", "names", "nbrs", "nics", "server", "transit")

    def __init__(self, topo: Topology) -> None:
        g = topo.graph
        self.names = sorted(g.nodes)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.transit = [g.nodes[n]["kind"] in TRANSIT_KINDS for n in self.names]
        self.server = [int(g.nodes[n]["server"]) for n in self.names]
        self.nics: dict[int, tuple[int, ...]] = {}
        for i, n in enumerate(self.names):
            if g.nodes[n]["kind"] is NodeKind.NIC:
                self.nics[self.server[i]] = (*self.nics.get(self.server[i], ()), i)
        self.nbrs: list[list[tuple[int, float, float]]] = [[] for _ in self.names]
        for u, v, data in g.edges(data=True):
            bw, lat = _goodput_latency(data)
            iu, iv = self.index[u], self.index[v]
            self.nbrs[iu].append((iv, bw, lat))
            self.nbrs[iv].append((iu, bw, lat))


def _goodput_latency(data: dict[str, Any]) -> tuple[float, float]:
    """A link's effective bandwidth (``bandwidth_Bps * efficiency``, bytes/s) and latency (s)."""
    return float(data["bandwidth_Bps"]) * float(data["efficiency"]), float(data["latency_s"])


@lru_cache(maxsize=64)
def _adjacency(topo: Topology) -> _Adjacency:
    return _Adjacency(topo)


# Graphs at least this large use the vectorised (numpy) search for whole-graph next hops; below,
# the scalar search is faster (measured per destination, DGX A100 clusters: 71 nodes 0.05 ms
# scalar vs 1.6 ms numpy, 505 nodes 0.34 vs 0.94 ms, 1993 nodes 1.47 vs 1.50 ms: break-even).
_VECTOR_MIN_NODES = 2000


class _ArrayAdjacency:
    """CSR arrays of :class:`_Adjacency` for the vectorised search (both edge directions)."""

    __slots__ = ("bw", "dst", "indptr", "lat", "src", "transit")

    def __init__(self, adj: _Adjacency) -> None:
        import numpy as np

        counts = np.array([len(nb) for nb in adj.nbrs], dtype=np.int64)
        self.indptr = np.concatenate(([0], np.cumsum(counts)))
        self.src = np.repeat(np.arange(len(adj.nbrs), dtype=np.int64), counts)
        self.dst = np.array([v for nb in adj.nbrs for v, _, _ in nb], dtype=np.int64)
        self.bw = np.array([b for nb in adj.nbrs for _, b, _ in nb], dtype=np.float64)
        self.lat = np.array([lt for nb in adj.nbrs for _, _, lt in nb], dtype=np.float64)
        self.transit = np.array(adj.transit, dtype=bool)


@lru_cache(maxsize=64)
def _array_adjacency(topo: Topology) -> _ArrayAdjacency:
    return _ArrayAdjacency(_adjacency(topo))


def _best_paths_vectorised(topo: Topology, d: int) -> tuple[Any, Any]:
    """Same result as the scalar search of :func:`_best_paths` (``server=None``), layer by layer
    with numpy: BFS layers from ``d`` (endpoints reached, not expanded), then for each layer the
    lexicographic best of (bottleneck bandwidth desc, latency asc, node index asc) over the
    edges into the previous layer. The latency sums are formed in the same order as the scalar
    code, so ties resolve identically."""
    import numpy as np

    a = _array_adjacency(topo)
    n = len(a.transit)
    dist = np.full(n, -1, dtype=np.int32)
    dist[d] = 0
    expandable = a.transit.copy()
    expandable[d] = True
    layers = [np.array([d], dtype=np.int64)]
    frontier = layers[0]
    level = 0
    while frontier.size:
        level += 1
        f = frontier[expandable[frontier]]
        if not f.size:
            break
        idx = _out_edges(a, f)
        nb = np.unique(a.dst[idx])
        nb = nb[dist[nb] < 0]
        dist[nb] = level
        layers.append(nb)
        frontier = nb
    best_bw = np.zeros(n)
    best_lat = np.zeros(n)
    nxt = np.full(n, -1, dtype=np.int32)
    best_bw[d] = np.inf
    nxt[d] = d
    # edges (u -> v) from a node one layer further to an allowed next hop
    ok_v = a.transit.copy()
    ok_v[d] = True
    for level_nodes in layers[1:]:
        if not level_nodes.size:
            continue
        idx = _out_edges(a, level_nodes)
        u, v = a.src[idx], a.dst[idx]
        keep = (dist[v] == dist[u] - 1) & ok_v[v]
        if not keep.any():
            continue
        u, v, bw, lat = u[keep], v[keep], a.bw[idx][keep], a.lat[idx][keep]
        b = np.minimum(best_bw[v], bw)
        lt = best_lat[v] + lat
        order = np.lexsort((v, lt, -b, u))
        u_sorted = u[order]
        first = np.ones(u_sorted.size, dtype=bool)
        first[1:] = u_sorted[1:] != u_sorted[:-1]
        pick = order[first]
        best_bw[u[pick]] = b[pick]
        best_lat[u[pick]] = lt[pick]
        nxt[u[pick]] = v[pick]
    return dist, nxt  # numpy arrays: index like the scalar search's lists


def _out_edges(a: _ArrayAdjacency, nodes: Any) -> Any:
    """The indices of the directed edges leaving ``nodes`` (an index array) in ``a``'s CSR
    arrays, node after node."""
    import numpy as np

    starts, ends = a.indptr[nodes], a.indptr[nodes + 1]
    lens = ends - starts
    return np.repeat(starts - np.cumsum(np.concatenate(([0], lens[:-1]))), lens) + np.arange(
        lens.sum()
    )


@lru_cache(maxsize=8192)
def _best_paths(topo: Topology, dst: str, server: int | None) -> tuple[Any, Any]:
    """BFS distances to ``dst`` (-1: unreachable) and the best next hop of every node (-1: none).

    Endpoints (GPUs) are reached but not expanded; among neighbours one layer closer the next
    hop maximises (bottleneck bandwidth, -latency) of the remaining route, ties to the smaller
    node id. With ``server`` the search stays among that server's nodes.
    """
    adj = _adjacency(topo)
    d = adj.index[dst]
    if server is None and len(adj.names) >= _VECTOR_MIN_NODES:
        return _best_paths_vectorised(topo, d)
    return _search(adj, d, server)


def _search(adj: _Adjacency, d: int, server: int | None) -> tuple[list[int], list[int]]:
    """The scalar search of :func:`_best_paths` towards node index ``d`` (no cache)."""
    n = len(adj.names)
    srv = adj.server
    dist = [-1] * n
    dist[d] = 0
    order = [d]
    head = 0
    while head < len(order):
        u = order[head]
        head += 1
        if u != d and not adj.transit[u]:
            continue
        du = dist[u] + 1
        for v, _, _ in adj.nbrs[u]:
            if dist[v] < 0 and (server is None or srv[v] == server):
                dist[v] = du
                order.append(v)
    inf = float("inf")
    best_bw = [0.0] * n
    best_lat = [0.0] * n
    nxt = [-1] * n
    best_bw[d] = inf
    nxt[d] = d
    transit = adj.transit
    for u in order[1:]:
        want = dist[u] - 1
        cb, cl, cv = -1.0, 0.0, -1
        for v, bw, lat in adj.nbrs[u]:
            if dist[v] != want or (v != d and not transit[v]):
                continue
            b = best_bw[v] if best_bw[v] < bw else bw
            lt = best_lat[v] + lat
            if b > cb or (b == cb and (lt < cl or (lt == cl and v < cv))):
                cb, cl, cv = b, lt, v
        if cv >= 0:
            best_bw[u], best_lat[u], nxt[u] = cb, cl, cv
    return dist, nxt


def uncached_route(topo: Topology, src: str, dst: str) -> tuple[str, ...]:
    """:func:`route` inside a one-server topology, computed without the routing caches: for a
    throwaway topology (:func:`~perfmodel.topology.nccl_p2p.nccl_p2p_level_denied`) that
    the caches, keyed on the object, would otherwise keep alive. The same route as
    :func:`route` (one server: no symmetry, the scalar search of :func:`_best_paths`)."""
    return uncached_routes(topo, [(src, dst)])[0]


def uncached_routes(topo: Topology, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, ...]]:
    """:func:`uncached_route` of every ``(src, dst)`` pair, on one adjacency and one search
    per destination."""
    if topo.num_nodes > 1:
        raise ConfigError(
            f"uncached_route: {topo.name} has {topo.num_nodes} servers; expected one",
            value=topo.num_nodes,
            where=topo.name,
        )
    adj = _Adjacency(topo)
    searched: dict[int, list[int]] = {}
    out = []
    for src, dst in pairs:
        s, d = adj.index[src], adj.index[dst]
        nxt = searched.get(d)
        if nxt is None:
            nxt = searched[d] = _search(adj, d, None)[1]
        if nxt[s] < 0:
            raise TopologyError(
                f"no route from {src} to {dst} in {topo.name}", value=(src, dst), where=topo.name
            )
        path = [s]
        while path[-1] != d:
            path.append(nxt[path[-1]])
        out.append(tuple(adj.names[i] for i in path))
    return out


def path_edges(path: tuple[str, ...]) -> list[tuple[str, str]]:
    """Directed edges ``(u, v)`` of a node path."""
    return list(itertools.pairwise(path))


def path_bandwidth(topo: Topology, src: str, dst: str) -> float:
    """Bottleneck effective bandwidth (bytes/s, per direction) of the route ``src -> dst``."""
    p = route(topo, src, dst)
    if len(p) == 1:
        return float("inf")
    return min(effective_bandwidth(topo.graph, u, v) for u, v in path_edges(p))


def path_latency(topo: Topology, src: str, dst: str) -> float:
    """Sum of link latencies (seconds) along the route ``src -> dst``."""
    p = route(topo, src, dst)
    return sum(float(topo.graph.edges[u, v]["latency_s"]) for u, v in path_edges(p))
