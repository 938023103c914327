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
from collections import deque
from functools import lru_cache

from perfmodel.errors import ConfigError, TopologyError
from perfmodel.topology.model import Topology
from perfmodel.topology.schema import TRANSIT_KINDS, effective_bandwidth


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
    # BFS distances from dst through transit nodes (dst itself always allowed).
    dist = _bfs_from(topo, dst)
    if src not in dist:
        raise TopologyError(
            f"no route from {src} to {dst} in {topo.name}", value=(src, dst), where=topo.name
        )
    # Walk forward choosing, at each step, among neighbours one hop closer, the best by
    # (bottleneck bandwidth of the remainder, latency). Done by DP over the BFS layering.
    best = _best_paths(topo, dst)
    path = [src]
    node = src
    while node != dst:
        node = best[node][2]
        path.append(node)
    return tuple(path)


@lru_cache(maxsize=4096)
def _bfs_from(topo: Topology, dst: str) -> dict[str, int]:
    g = topo.graph
    dist = {dst: 0}
    q = deque([dst])
    while q:
        u = q.popleft()
        if u != dst and g.nodes[u]["kind"] not in TRANSIT_KINDS:
            continue  # endpoints (GPUs) are reached but not expanded
        for v in g.neighbors(u):
            if v not in dist:
                dist[v] = dist[u] + 1
                q.append(v)
    return dist


@lru_cache(maxsize=4096)
def _best_paths(topo: Topology, dst: str) -> dict[str, tuple[float, float, str]]:
    """For every node reaching ``dst``: (bottleneck bw, -latency, next hop) of its best route."""
    g = topo.graph
    dist = _bfs_from(topo, dst)
    order = sorted(dist, key=lambda n: dist[n])
    best: dict[str, tuple[float, float, str]] = {dst: (float("inf"), 0.0, dst)}
    for u in order:
        if u == dst:
            continue
        cand = None
        for v in g.neighbors(u):
            if dist.get(v, -1) != dist[u] - 1:
                continue
            if v != dst and g.nodes[v]["kind"] not in TRANSIT_KINDS:
                continue
            bw_v, neg_lat_v, _ = best[v]
            bw = min(bw_v, effective_bandwidth(g, u, v))
            neg_lat = neg_lat_v - float(g.edges[u, v]["latency_s"])
            key = (bw, neg_lat, _neg_str(v))
            if cand is None or key > cand[0]:
                cand = (key, (bw, neg_lat, v))
        if cand is not None:
            best[u] = cand[1]
    return best


def _neg_str(s: str) -> tuple[int, ...]:
    # Prefer lexicographically smaller node ids in ties (deterministic).
    return tuple(-ord(c) for c in s)


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
