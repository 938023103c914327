"""Graph analyses: pair bandwidths, bisection, NCCL-style rings and trees, ``nvidia-smi topo -m``.

All functions take a :class:`~perfmodel.topology.model.Topology` first and read the graph only.
Bandwidths are *effective* (``bandwidth_Bps * efficiency``, bytes/s per direction), the numbers
to use for timing.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

import networkx as nx

from perfmodel.errors import ConfigError
from perfmodel.topology.model import Topology
from perfmodel.topology.routing import path_bandwidth, path_edges, route
from perfmodel.topology.schema import NodeKind, effective_bandwidth

if TYPE_CHECKING:  # imported by bandwidth_matrix, its one user (issue 14, cold start)
    import numpy as np

__all__ = [
    "Bisection",
    "BisectionMethod",
    "Ring",
    "RingSet",
    "Tree",
    "bandwidth_matrix",
    "bisection_bandwidth",
    "cut_bandwidth",
    "double_binary_tree",
    "format_smi_matrix",
    "nccl_rings",
    "nccl_trees",
    "smi_class",
    "smi_matrix",
]


def _group(topo: Topology, group: Iterable[str] | None) -> tuple[str, ...]:
    if group is None:
        return topo.gpus
    out = tuple(group)
    gpus = set(topo.gpus)
    for g in out:
        if g not in gpus:
            raise ConfigError(f"{g!r} is not a GPU of system {topo.name}", value=g, where=topo.name)
    if len(set(out)) != len(out):
        raise ConfigError(f"GPU group {out} lists a GPU twice", value=out, where=topo.name)
    if not out:
        raise ConfigError("empty GPU group", value=out, where=topo.name)
    return out


# ---------------------------------------------------------------------------------------------
# Pair bandwidths
# ---------------------------------------------------------------------------------------------


def bandwidth_matrix(topo: Topology, gpus: Sequence[str] | None = None) -> np.ndarray:
    """All-pairs GPU bandwidth matrix, bytes/s per direction.

    ``M[i, j]`` is the bottleneck effective bandwidth of the route ``gpus[i] -> gpus[j]``
    (:func:`perfmodel.topology.routing.path_bandwidth`): what one uncontended transfer can reach.
    The diagonal is ``inf`` (no transfer). ``gpus`` defaults to ``topo.gpus`` (rank order).

    Examples
    --------
    >>> from perfmodel.topology import load_system
    >>> m = bandwidth_matrix(load_system("dgx1-v100"))
    >>> float(m[0, 3] / m[0, 1])  # 2 NVLinks vs 1 NVLink
    2.0
    """
    import numpy as np

    order = _group(topo, gpus)
    n = len(order)
    m = np.full((n, n), np.inf)
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            if i != j:
                m[i, j] = path_bandwidth(topo, a, b)
    return m


# ---------------------------------------------------------------------------------------------
# Bisection
# ---------------------------------------------------------------------------------------------


class BisectionMethod(str, enum.Enum):
    """How :func:`bisection_bandwidth` searched the bipartitions."""

    EXACT = "exact"  # every balanced bipartition
    STRUCTURED = "structured"  # server-aligned, rank-half, per-server-half and alternating cuts


@dataclass(frozen=True)
class Bisection:
    """Result of :func:`bisection_bandwidth`.

    Attributes
    ----------
    bandwidth_Bps
        Cut capacity of the minimising bipartition, bytes/s per direction.
    side_a, side_b
        The minimising bipartition of the GPUs.
    method
        Exact enumeration or structured candidates (then an upper bound on the true minimum).
    partitions_checked
        Number of bipartitions evaluated (one max-flow each).
    """

    bandwidth_Bps: float
    side_a: tuple[str, ...]
    side_b: tuple[str, ...]
    method: BisectionMethod
    partitions_checked: int


@lru_cache(maxsize=64)
def _flow_graph(topo: Topology) -> nx.DiGraph:
    g = topo.graph
    d = nx.DiGraph()
    for u, v in g.edges():
        cap = effective_bandwidth(g, u, v)
        d.add_edge(u, v, capacity=cap)
        d.add_edge(v, u, capacity=cap)
    return d


def cut_bandwidth(topo: Topology, side_a: Iterable[str], side_b: Iterable[str]) -> float:
    """Max-flow (= min-cut) bandwidth from GPU set ``side_a`` to GPU set ``side_b``, bytes/s.

    Edges are full duplex with capacity = effective bandwidth per direction; flow may use every
    path (including through GPUs, which only adds capacity the routing rule does not use, so the
    value is the physical cut). By the max-flow/min-cut theorem this equals the smallest total
    capacity of links whose removal separates ``side_a`` from ``side_b``.
    """
    a, b = list(side_a), list(side_b)
    if set(a) & set(b):
        raise ConfigError(f"bisection sides overlap: {sorted(set(a) & set(b))}", value=(a, b))
    d = _flow_graph(topo).copy(as_view=False)
    src, dst = ("__source__", "__sink__")
    for n in a:
        d.add_edge(src, n)  # no capacity attribute = infinite
    for n in b:
        d.add_edge(n, dst)
    value, _ = nx.maximum_flow(d, src, dst, capacity="capacity")
    return float(value)


def _structured_candidates(topo: Topology, gpus: tuple[str, ...]) -> list[tuple[str, ...]]:
    n = len(gpus)
    half = n // 2
    cands: list[tuple[str, ...]] = [gpus[:half]]  # rank halves = server halves / board halves
    by_server: dict[int, list[str]] = {}
    for g in gpus:
        by_server.setdefault(topo.server_of(g), []).append(g)
    if len(by_server) > 1:
        per_server_half = tuple(
            g for members in by_server.values() for g in members[: len(members) // 2]
        )
        if len(per_server_half) == half:
            cands.append(per_server_half)
    cands.append(gpus[0::2][:half])  # alternating ranks
    return cands


def bisection_bandwidth(
    topo: Topology, gpus: Sequence[str] | None = None, *, exact_limit: int = 12
) -> Bisection:
    """Bisection bandwidth of the GPUs, bytes/s per direction.

    Definition: the minimum, over balanced bipartitions ``(A, B)`` of the GPUs
    (``|A| = floor(n/2)``), of the cut capacity between ``A`` and ``B``
    (:func:`cut_bandwidth`, max-flow = min-cut with effective link bandwidths). It is the
    all-to-all throughput bound: half the GPUs can send to the other half at most this fast.

    Method: exact enumeration of all ``C(n-1, n/2-1)`` bipartitions when ``n <= exact_limit``;
    above that, the minimum over structured candidates (the first half of the ranks, i.e. half
    of the servers or baseboards; the first half of every server; alternating ranks), which is
    an upper bound on the true minimum and equals it for the catalogue's symmetric servers and
    leaf-ordered fat trees, whose weakest balanced cut is server-aligned or server-internal.

    Examples
    --------
    A fat tree of 8 single-GPU servers, leaves of 4 ports at 2:1 (2 uplinks per leaf): the
    weakest balanced cut separates the two leaves, 2 uplinks of EDR (100 Gbit/s x 0.92 ... as
    the link catalogue states) - see ``tests/topology/test_analysis.py``.
    """
    order = _group(topo, gpus)
    n = len(order)
    if n < 2:
        raise ConfigError(
            f"bisection needs at least 2 GPUs, {topo.name} group has {n}", value=n, where=topo.name
        )
    half = n // 2
    best: tuple[float, tuple[str, ...]] | None = None
    checked = 0
    if n <= exact_limit:
        method = BisectionMethod.EXACT
        first, rest = order[0], order[1:]
        candidates: Iterable[tuple[str, ...]] = (
            (first, *combo) for combo in itertools.combinations(rest, half - 1)
        )
    else:
        method = BisectionMethod.STRUCTURED
        candidates = _structured_candidates(topo, order)
    for side_a in candidates:
        side_b = tuple(g for g in order if g not in side_a)
        value = cut_bandwidth(topo, side_a, side_b)
        checked += 1
        if best is None or value < best[0] - 1e-9 * max(1.0, best[0]):
            best = (value, tuple(side_a))
    assert best is not None
    a = best[1]
    return Bisection(
        bandwidth_Bps=best[0],
        side_a=a,
        side_b=tuple(g for g in order if g not in a),
        method=method,
        partitions_checked=checked,
    )


# ---------------------------------------------------------------------------------------------
# Rings
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ring:
    """One ring channel: GPUs in ring order (the last sends to the first).

    ``bandwidth_Bps`` is the rate every hop of the ring can sustain at once given the links it
    shares with itself and with earlier channels: ``min_e residual(e) / uses(e)`` over the
    directed links ``e`` of the hops' routes.
    """

    gpus: tuple[str, ...]
    bandwidth_Bps: float

    def hops(self) -> list[tuple[str, str]]:
        """Consecutive (sender, receiver) pairs, closing the ring."""
        n = len(self.gpus)
        return [(self.gpus[i], self.gpus[(i + 1) % n]) for i in range(n)] if n > 1 else []


@dataclass(frozen=True)
class RingSet:
    """Ring channels built over one GPU group (NCCL's channels)."""

    rings: tuple[Ring, ...]

    @property
    def bandwidth_Bps(self) -> float:
        """Aggregate ring bandwidth: the sum over channels, bytes/s per direction per GPU."""
        return float(sum(r.bandwidth_Bps for r in self.rings))

    @property
    def channels(self) -> int:
        return len(self.rings)


def _hop_edges(topo: Topology, a: str, b: str) -> list[tuple[str, str]]:
    return path_edges(route(topo, a, b))


def _ring_rate(
    topo: Topology, order: Sequence[str], residual: Mapping[tuple[str, str], float], closed: bool
) -> float:
    uses: dict[tuple[str, str], int] = {}
    n = len(order)
    pairs = [(order[i], order[i + 1]) for i in range(n - 1)]
    if closed and n > 1:
        pairs.append((order[-1], order[0]))
    for a, b in pairs:
        for e in _hop_edges(topo, a, b):
            uses[e] = uses.get(e, 0) + 1
    if not uses:
        return math.inf
    return min(residual[e] / k for e, k in uses.items())


def _search_cycle(
    gpus: Sequence[str],
    nbrs: Mapping[str, Sequence[str]],
    closing_ok: Mapping[str, bool],
    *,
    closed: bool,
    budget: int,
) -> tuple[str, ...] | None:
    """Depth-first search for a Hamiltonian cycle/path from ``gpus[0]`` over allowed hops."""
    n = len(gpus)
    start = gpus[0]
    path = [start]
    seen = {start}
    expansions = 0

    def dfs() -> bool:
        nonlocal expansions
        expansions += 1
        if expansions > budget:
            return False
        if len(path) == n:
            return (not closed) or closing_ok[path[-1]]
        for b in nbrs[path[-1]]:
            if b not in seen:
                path.append(b)
                seen.add(b)
                if dfs():
                    return True
                path.pop()
                seen.discard(b)
        return False

    return tuple(path) if dfs() else None


def _best_order(
    topo: Topology,
    gpus: Sequence[str],
    residual: Mapping[tuple[str, str], float],
    *,
    closed: bool,
    speed: float | None = None,
    prefer_wide: bool = False,
    budget: int = 200_000,
) -> tuple[str, ...]:
    """Hamiltonian cycle (or path) over ``gpus`` maximising the weakest hop's residual capacity.

    Thresholds are tried from the highest hop capacity down; for each, a depth-first search
    looks for a cycle (path) using only hops at or above it, preferring wide hops and low rank.
    With ``speed`` only that threshold is tried and the *tightest* sufficient hops are preferred
    (best fit, keeping wide links for later channels), or with ``prefer_wide`` the widest. The search is bounded by ``budget``
    expansions per threshold; when it finds nothing the rank order is returned.
    """
    n = len(gpus)
    if n <= 2:
        return tuple(gpus)
    cap: dict[tuple[str, str], float] = {}
    for a in gpus:
        for b in gpus:
            if a != b:
                cap[a, b] = min(residual[e] for e in _hop_edges(topo, a, b))
    rank = {g: i for i, g in enumerate(gpus)}
    start = gpus[0]
    sign = -1.0 if speed is None or prefer_wide else 1.0
    thresholds = (
        sorted({c for c in cap.values() if c > 0}, reverse=True)
        if speed is None
        else [speed * (1 - 1e-9)]
    )
    for t in thresholds:
        nbrs = {
            a: sorted(
                (b for b in gpus if b != a and cap[a, b] >= t),
                key=lambda b: (sign * cap[a, b], rank[b]),
            )
            for a in gpus
        }
        if any(not v for v in nbrs.values()):
            continue
        closing_ok = {a: a != start and cap[a, start] >= t for a in gpus}
        found = _search_cycle(gpus, nbrs, closing_ok, closed=closed, budget=budget)
        if found is not None:
            return found
    return tuple(gpus)


def _fresh_residual(topo: Topology) -> dict[tuple[str, str], float]:
    residual: dict[tuple[str, str], float] = {}
    for u, v in topo.graph.edges():
        bw = effective_bandwidth(topo.graph, u, v)
        residual[u, v] = bw
        residual[v, u] = bw
    return residual


def _next_ring(
    topo: Topology,
    order: tuple[str, ...],
    by_server: Mapping[int, Sequence[str]],
    residual: Mapping[tuple[str, str], float],
    speed: float | None = None,
    prefer_wide: bool = False,
) -> tuple[tuple[str, ...], float]:
    """The next ring on the residual capacities and its rate.

    Without ``speed``: the ring whose weakest hop is widest. With ``speed``: a ring whose hops
    all reach ``speed``, preferring the tightest (or, ``prefer_wide``, the widest) hops. The
    speed search ignores links that hops of one ring share; when its ring falls short of
    ``speed`` the widest ring is taken instead if it does better.
    """
    if speed is None:
        return _next_ring_once(topo, order, by_server, residual, None, False)
    ring, rate = _next_ring_once(topo, order, by_server, residual, speed, prefer_wide)
    if rate >= speed * (1 - 1e-9):
        return ring, rate
    wide = _next_ring_once(topo, order, by_server, residual, None, False)
    return wide if wide[1] > rate else (ring, rate)


def _next_ring_once(
    topo: Topology,
    order: tuple[str, ...],
    by_server: Mapping[int, Sequence[str]],
    residual: Mapping[tuple[str, str], float],
    speed: float | None,
    prefer_wide: bool,
) -> tuple[tuple[str, ...], float]:
    if len(by_server) == 1:
        ring = _best_order(topo, order, residual, closed=True, speed=speed, prefer_wide=prefer_wide)
        return ring, _ring_rate(topo, ring, residual, closed=True)
    groups = list(by_server.values())
    g = topo.graph
    local = [tuple(g.nodes[x]["local_id"] for x in m) for m in groups]
    if all(ids == local[0] for ids in local):
        # Identical servers: every ring loads each server alike, so server 0's residuals stand
        # for all; search its cycle once and map it onto the others by local id.
        base = _best_order(
            topo, groups[0], residual, closed=True, speed=speed, prefer_wide=prefer_wide
        )
        order_ids = [g.nodes[x]["local_id"] for x in base]
        cycles = []
        for m in groups:
            by_id = {g.nodes[x]["local_id"]: x for x in m}
            cycles.append(tuple(by_id[i] for i in order_ids))
    else:
        cycles = [
            _best_order(topo, m, residual, closed=True, speed=speed, prefer_wide=prefer_wide)
            for m in groups
        ]
    # Every server's cycle is cut at the same position k; the position decides which GPUs talk
    # across servers, hence which NICs the channel uses. Take the k with the best ring rate,
    # probed on the first two servers when there are more (identical servers behave alike; the
    # chosen ring is then rated in full).

    def cut(cs: Sequence[tuple[str, ...]], k: int) -> tuple[str, ...]:
        return tuple(x for c in cs for x in (c[k % len(c) :] + c[: k % len(c)]))

    probe = cycles[:2]
    best: tuple[int, float] | None = None
    for k in range(max(len(c) for c in cycles)):
        rate = _ring_rate(topo, cut(probe, k), residual, closed=True)
        if best is None or rate > best[1] * (1 + 1e-12):
            best = (k, rate)
    assert best is not None
    ring = cut(cycles, best[0])
    rate = best[1] if len(cycles) == 2 else _ring_rate(topo, ring, residual, closed=True)
    return ring, rate


def nccl_rings(
    topo: Topology, group: Sequence[str] | None = None, *, max_channels: int = 16
) -> RingSet:
    """NCCL-style ring channels over a GPU group.

    Construction (after NCCL's ring search, simplified):

    - within a server the GPUs are ordered into the cycle whose weakest hop is widest (on a
      DGX-1 the NVLink rings; a PCIe hop only when no all-NVLink ring exists);
    - across servers every server's cycle is cut at the same position and the chains are joined
      in server order through the NICs; the cut position (hence the NICs used) is chosen per
      channel for the best rate;
    - NCCL gives all channels one speed: for every candidate speed ``s`` (the rate of the first
      ring and the six largest per-link bandwidths below it, one link of a bundle counting)
      channels are added greedily (two passes: tightest-sufficient hops first, widest hops
      first), each consuming ``s`` on every directed link it crosses, while the next ring still
      reaches ``s``; the speed with the largest total ``channels x s`` wins
      (ties: the higher speed), up to ``max_channels`` channels.

    Within one server this agrees with the communication model's ring packing
    (:func:`perfmodel.comm.channels.build_channels`); across servers it joins the cycles on plain
    GPU-to-GPU routes and under-counts servers with several NICs (2 x DGX A100: 69 GB/s here,
    184 GB/s there, where every channel gets its own NIC). ``perfmodel topo show`` and the cost
    models use the communication model's channels.

    Examples
    --------
    >>> from perfmodel.topology import load_system
    >>> rs = nccl_rings(load_system("dgx1-v100"))
    >>> rs.channels, round(rs.bandwidth_Bps / 1e9, 1)  # 6 rings x one NVLink (22.5 GB/s)
    (6, 135.0)
    """
    order = _group(topo, group)
    if max_channels < 1:
        raise ConfigError(f"max_channels must be >= 1, got {max_channels}", value=max_channels)
    if len(order) == 1:
        return RingSet((Ring(order, math.inf),))
    by_server: dict[int, list[str]] = {}
    for g in order:
        by_server.setdefault(topo.server_of(g), []).append(g)
    residual0 = _fresh_residual(topo)
    _, first_rate = _next_ring(topo, order, by_server, residual0)
    if first_rate <= 0:
        raise ConfigError(f"no ring over {order} in {topo.name}", value=order, where=topo.name)
    # Candidate speeds: the first ring's rate and the per-link bandwidths j x (bw / count) of the
    # graph's edges below it (the 6 largest): one NVLink of a 2-link bundle can carry a channel.
    per_link: set[float] = set()
    for u, v, d in topo.graph.edges(data=True):
        one = effective_bandwidth(topo.graph, u, v) / int(d["count"])
        per_link.update(one * j for j in range(1, int(d["count"]) + 1))
    below = sorted({bw for bw in per_link if bw < first_rate * (1 - 1e-9)}, reverse=True)
    speeds = [first_rate, *below[:6]]
    best: tuple[float, float, list[tuple[str, ...]]] | None = None
    for s in speeds:
        for prefer_wide in (False, True):
            residual = dict(residual0)
            rings: list[tuple[str, ...]] = []
            while len(rings) < max_channels:
                ring, rate = _next_ring(topo, order, by_server, residual, s, prefer_wide)
                if rate < s * (1 - 1e-9):
                    break
                rings.append(ring)
                n = len(ring)
                for i in range(n):
                    for e in _hop_edges(topo, ring[i], ring[(i + 1) % n]):
                        residual[e] -= s
            total = s * len(rings)
            if rings and (best is None or total > best[0] * (1 + 1e-9)):
                best = (total, s, rings)
    assert best is not None
    _, speed, rings = best
    return RingSet(tuple(Ring(r, speed) for r in rings))


def _cut_weakest(
    topo: Topology, cycle: Sequence[str], residual: Mapping[tuple[str, str], float]
) -> list[str]:
    n = len(cycle)
    if n <= 2:
        return list(cycle)
    weakest = min(
        range(n),
        key=lambda i: (
            min(residual[e] for e in _hop_edges(topo, cycle[i], cycle[(i + 1) % n])),
            i,
        ),
    )
    start = (weakest + 1) % n
    return [cycle[(start + k) % n] for k in range(n)]


# ---------------------------------------------------------------------------------------------
# Trees
# ---------------------------------------------------------------------------------------------


def _inorder_tree(n: int) -> list[int | None]:
    """Parents of an in-order balanced binary tree over ranks ``0..n-1``.

    The root of ``[lo, hi)`` is the rank ``r`` whose ``r + 1`` has the most trailing zero bits
    (the middle of a power-of-two block), so every even rank is a leaf.
    """
    parent: list[int | None] = [None] * n

    def tz(x: int) -> int:
        return (x & -x).bit_length() - 1

    def build(lo: int, hi: int, up: int | None) -> None:
        if lo >= hi:
            return
        root = max(range(lo, hi), key=lambda r: (tz(r + 1), -r))
        parent[root] = up
        build(lo, root, root)
        build(root + 1, hi, root)

    build(0, n, None)
    return parent


def double_binary_tree(n: int) -> tuple[tuple[int | None, ...], tuple[int | None, ...]]:
    """Two complementary binary trees over ranks ``0..n-1`` (parents; ``None`` at the root).

    NCCL's double binary tree (Sanders, Speck and Traeff, "Two-tree algorithms for full
    bandwidth broadcast, reduction and scan", Parallel Computing 2009; NCCL 2.4 blog post):
    tree 1 is an in-order binary tree in which the even ranks are leaves (inner nodes: odd
    ranks); tree 2 is tree 1 with every position played by the next rank (mod ``n``), so its inner
    nodes are even ranks other than 0: no rank is an inner node of both trees, and each tree
    carries half the data. (NCCL mirrors instead of shifting for odd ``n``, with a tree shape
    for which that works; the property is the same.)

    Examples
    --------
    >>> t1, t2 = double_binary_tree(4)  # tree 1: 3 -> 1 -> {0, 2}; tree 2: 0 -> 2 -> {1, 3}
    >>> t1, t2
    ((1, 3, 1, None), (None, 2, 0, 2))
    """
    if n < 1:
        raise ConfigError(f"a tree needs at least one rank, got {n}", value=n)
    base = _inorder_tree(n)
    perm = [(p + 1) % n for p in range(n)]  # position p of tree 1 is played by rank perm[p]
    second: list[int | None] = [None] * n
    for p, up in enumerate(base):
        second[perm[p]] = None if up is None else perm[up]
    return tuple(base), tuple(second)


@dataclass(frozen=True)
class Tree:
    """A reduction/broadcast tree over GPUs: ``parent[gpu]`` (``None`` at the root)."""

    parent: Mapping[str, str | None]
    root: str

    def children(self, gpu: str) -> tuple[str, ...]:
        return tuple(g for g, p in self.parent.items() if p == gpu)

    def depth(self) -> int:
        """Longest root-to-leaf path, in edges."""

        def d(g: str) -> int:
            k = 0
            while self.parent[g] is not None:
                g = self.parent[g]  # type: ignore[assignment]
                k += 1
            return k

        return max(d(g) for g in self.parent)


def nccl_trees(topo: Topology, group: Sequence[str] | None = None) -> tuple[Tree, Tree]:
    """NCCL-style trees: an intra-server chain plus an inter-server double binary tree.

    Within each server the group's GPUs form a chain (the server's best ring, cut at its weakest
    hop, as :func:`nccl_rings`); the chain heads are joined across servers by the two
    complementary binary trees of :func:`double_binary_tree`. Both trees share the chains
    (NCCL runs them on different channels and NICs).
    """
    order = _group(topo, group)
    by_server: dict[int, list[str]] = {}
    for g in order:
        by_server.setdefault(topo.server_of(g), []).append(g)
    residual = _fresh_residual(topo)
    chains = [
        _cut_weakest(topo, _best_order(topo, members, residual, closed=True), residual)
        for members in by_server.values()
    ]
    heads = [c[0] for c in chains]
    trees = []
    for parents in double_binary_tree(len(chains)):
        parent: dict[str, str | None] = {}
        for s, chain in enumerate(chains):
            up = parents[s]
            parent[chain[0]] = None if up is None else heads[up]
            for i in range(1, len(chain)):
                parent[chain[i]] = chain[i - 1]
        root = next(h for s, h in enumerate(heads) if parents[s] is None)
        trees.append(Tree(MappingProxyType(parent), root))
    return trees[0], trees[1]


# ---------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# ---------------------------------------------------------------------------------------------

SMI_LEGEND = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes"),
    ("NODE", "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges"),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe bridges (without traversing the host bridge)"),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
    ("XGMI", "Direct AMD Infinity Fabric (xGMI) link (amd-smi's name)"),
)


def _nvswitch_ports(g: nx.Graph, gpu: str) -> int:
    return sum(
        int(g.edges[gpu, n]["count"])
        for n in g.neighbors(gpu)
        if g.nodes[n]["kind"] is NodeKind.NVSWITCH
    )


def _nv_class(g: nx.Graph, a: str, b: str) -> str | None:
    if g.has_edge(a, b) and g.edges[a, b]["family"].value == "nvlink":
        return f"NV{int(g.edges[a, b]['count'])}"
    if g.has_edge(a, b) and g.edges[a, b]["family"].value == "xgmi":
        return "XGMI"  # amd-smi topology: a direct Infinity Fabric link
    sw_a = {n for n in g.neighbors(a) if g.nodes[n]["kind"] is NodeKind.NVSWITCH}
    sw_b = {n for n in g.neighbors(b) if g.nodes[n]["kind"] is NodeKind.NVSWITCH}
    if not sw_a or not sw_b:
        return None
    view = nx.subgraph_view(g, filter_node=lambda n: g.nodes[n]["kind"] is NodeKind.NVSWITCH)
    for s in sw_a:
        reach = nx.node_connected_component(view, s)
        if reach & sw_b:
            return f"NV{min(_nvswitch_ports(g, a), _nvswitch_ports(g, b))}"
    return None


_PCIE_VIEW_KINDS = frozenset({NodeKind.CPU, NodeKind.PCIE_SWITCH})


def smi_class(topo: Topology, a: str, b: str) -> str:
    """``nvidia-smi topo -m`` class of devices ``a`` and ``b`` (GPUs or NICs) of one server.

    Rules (computed from the graph):

    - ``NV#``: a direct NVLink bundle of ``#`` links, or both GPUs on a connected set of NVSwitch
      nodes (``#`` = the smaller GPU's NVSwitch port count).
    - otherwise the host path (shortest path through CPUs and PCIe switches only, where CPU-GPU
      NVLink as on POWER9 counts as the host attachment): ``SYS`` if it crosses two CPUs,
      ``NODE`` if it crosses one CPU and both devices sit behind PCIe switches (different
      host-bridge ports of the socket), ``PHB`` if it crosses one CPU and a device is on a CPU
      root port, ``PIX`` through exactly one PCIe switch, ``PXB`` through several.
    - different servers, or no host path: ``SYS``.
    """
    g = topo.graph
    if a == b:
        return "X"
    if topo.server_of(a) != topo.server_of(b):
        return "SYS"
    if g.nodes[a]["kind"] is NodeKind.GPU and g.nodes[b]["kind"] is NodeKind.GPU:
        nv = _nv_class(g, a, b)
        if nv is not None:
            return nv
    keep = {a, b}
    view = nx.subgraph_view(
        g, filter_node=lambda n: n in keep or g.nodes[n]["kind"] in _PCIE_VIEW_KINDS
    )
    view = nx.subgraph_view(view, filter_edge=lambda u, v: not ({u, v} == keep))
    try:
        path = nx.shortest_path(view, a, b)
    except nx.NetworkXNoPath:
        return "SYS"
    inner = path[1:-1]
    cpus = sum(1 for n in inner if g.nodes[n]["kind"] is NodeKind.CPU)
    switches = sum(1 for n in inner if g.nodes[n]["kind"] is NodeKind.PCIE_SWITCH)
    if cpus >= 2:
        return "SYS"
    if cpus == 1:
        behind_switch = (
            g.nodes[path[1]]["kind"] is NodeKind.PCIE_SWITCH
            and g.nodes[path[-2]]["kind"] is NodeKind.PCIE_SWITCH
        )
        if behind_switch:
            return str(topo.meta.get("smi_node_label", "NODE"))
        return "PHB"
    return "PIX" if switches <= 1 else "PXB"


def _smi_label(topo: Topology, node: str) -> str:
    d = topo.graph.nodes[node]
    if d["kind"] is NodeKind.GPU:
        return f"GPU{d['gpu_index']}"
    return f"NIC{_nic_index(topo, node)}"


def _nic_index(topo: Topology, node: str) -> int:
    server = topo.server_of(node)
    nics = [
        n
        for n, d in topo.graph.nodes(data=True)
        if d["kind"] is NodeKind.NIC and d["server"] == server
    ]
    return nics.index(node)


def smi_matrix(
    topo: Topology, server: int = 0, *, include_nics: bool = True
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The ``nvidia-smi topo -m`` matrix of one server: (device labels, rows of classes).

    Devices are the server's GPUs (``GPU0``..) then, with ``include_nics``, its NICs
    (``NIC0``..), in graph order. A rack-scale server whose nodes carry compute ``tray``
    numbers (GB200 NVL72) shows its first tray only, as ``nvidia-smi`` does there: each tray
    runs its own operating system and sees its own 4 GPUs and NICs.
    """
    g = topo.graph
    servers = {topo.server_of(n) for n in topo.gpus}
    if server not in servers:
        raise ConfigError(
            f"server {server} not in system {topo.name} (servers 0..{max(servers)})",
            value=server,
            where=topo.name,
        )
    devs = [n for n in topo.gpus if topo.server_of(n) == server]
    if include_nics:
        devs += [
            n for n, d in g.nodes(data=True) if d["kind"] is NodeKind.NIC and d["server"] == server
        ]
    trays = {g.nodes[n].get("tray") for n in devs}
    if None not in trays and len(trays) > 1:
        first = min(trays)  # type: ignore[type-var]
        devs = [n for n in devs if g.nodes[n]["tray"] == first]
    labels = tuple(_smi_label(topo, n) for n in devs)
    rows = tuple(tuple(smi_class(topo, a, b) for b in devs) for a in devs)
    return labels, rows


def nvlink_domains(topo: Topology, server: int = 0) -> list[tuple[str, ...]]:
    """The NVLink domains of one server: its GPUs grouped by the scale-up links (NVLink,
    NVSwitch ports, AMD Infinity Fabric: :data:`perfmodel.topology.io.SCALE_UP_FAMILIES`) that
    join them, directly or through NVSwitch nodes; largest first.

    A DGX H100 is one domain of 8, a GB200 NVL72 rack one of 72, a PCIe server 8 domains of 1.

    >>> from perfmodel.topology import load_system
    >>> [len(d) for d in nvlink_domains(load_system("gb200-nvl72"))]
    [72]
    >>> [len(d) for d in nvlink_domains(load_system("dgx1-v100"))]
    [8]
    """
    from perfmodel.topology.io import SCALE_UP_FAMILIES, joined_groups

    g = topo.graph
    members = [
        n
        for n in topo.server_nodes(server)
        if g.nodes[n]["kind"] in (NodeKind.GPU, NodeKind.NVSWITCH)
    ]
    edges = (
        (n, v) for n in members for v, d in g.adj[n].items() if d["family"] in SCALE_UP_FAMILIES
    )
    return joined_groups(topo.gpus, members, edges)


def format_smi_matrix(topo: Topology, server: int = 0, *, include_nics: bool = True) -> str:
    """Text in the layout of ``nvidia-smi topo -m`` (importable by :mod:`.importers`)."""
    labels, rows = smi_matrix(topo, server, include_nics=include_nics)
    width = max(6, *(len(x) + 2 for x in labels))
    lines = [" " * width + "".join(f"{lab:<{width}}" for lab in labels)]
    for lab, row in zip(labels, rows, strict=True):
        lines.append(f"{lab:<{width}}" + "".join(f"{c:<{width}}" for c in row))
    lines.append("")
    lines.append("Legend:")
    lines.append("")
    for key, text in SMI_LEGEND:
        lines.append(f"  {key:<4} = {text}")
    return "\n".join(lines) + "\n"
