"""Ring search and packing: NCCL-style ring channels over the GPUs of one server.

A *channel* is one ring over the ranks of a group together with the node path of each hop
(``order[i] -> order[i+1]``). NCCL builds several channels so that together they use every
NVLink (Jeaugey, "NCCL 2.0", GTC 2017; NCCL ``src/graph/search.cc``): each channel needs one
free link unit per directed hop, and NCCL keeps only channels of the same speed.

:func:`pack_rings` mimics that search on our graph: it repeatedly picks the ring whose slowest
hop (per link unit) is fastest on the *residual* link units (an edge with ``count = 2`` bundles
two NVLinks, i.e. two units per direction), allocates one unit per hop, and stops when no ring of
the first ring's speed is left. Across servers the channels join such rings server after server,
and their steady-state rates are the max-min fair shares of the links
(:mod:`perfmodel.comm.channels`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import permutations
from typing import TYPE_CHECKING, Any

from perfmodel.comm.params import HwClass
from perfmodel.comm.paths import min_hop_widest
from perfmodel.errors import ConfigError
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks

#: NCCL's MAXCHANNELS (src/include/device.h): at most 32 rings.
MAX_CHANNELS = 32

#: Exhaustive ring search up to this many ranks per server (7! = 5040 orders at 8).
EXHAUSTIVE_MAX = 8

EVERY_ORDER_MAX = 5
"""Ranks up to which :func:`_exhaustive_order` compares every order's key
(:func:`_every_order`) instead of its pruned search: up to 24 orders cost less than the
bounds (GPT-3 175B on DGX A100, a tensor-parallel group of 4 GPUs: 7 searches of its first
ring packing ~38-90 -> ~12 us each, ~0.5 ms of a process's first tp 4 plan; CPU on the 2-core
development machine; 6 ranks: ~100-335 us pruned vs ~270 us every order)."""

_CLASS_RANK = {HwClass.NVLINK: 2, HwClass.PCI: 1, HwClass.NET: 0}

_CLASS_SCALE = 1e16  # above any bandwidth in bytes/s


@dataclass(frozen=True)
class Channel:
    """One ring: ranks in order and the node path of every hop ``order[i] -> order[i+1 mod n]``."""

    order: tuple[str, ...]
    hops: tuple[tuple[str, ...], ...]


def pack_rings(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> tuple[Channel, ...]:
    """NCCL-like ring channels over ``members`` (GPUs of one server, or any small group).

    See the module docstring. Deterministic: ties are broken by the members' order; memoised
    per ``links`` (a server's rings are asked for by the group's channels and again for its
    intra-server bandwidth).
    """
    key = (tuple(members), max_channels)
    hit = links._packed.get(key)
    if hit is None:
        ties = next(links._name_ties)
        hit = links._packed[key] = _pack_rings(links, key[0], max_channels)
        # no choice counted in between (another thread's count only withholds the mark)
        if next(links._name_ties) == ties + 1 and not (links.no_p2p or links.p2p_denied):
            links._name_free.add(key)
    return hit


def _pack_rings(
    links: DirectedLinks, members: tuple[str, ...], max_channels: int
) -> tuple[Channel, ...]:
    n = len(members)
    if n < 2:
        return ()
    star = _star_rings(links, members, max_channels)
    if star is not None:
        return star
    servers = {links.server[m] for m in members}
    allowed = links.server_nodes[next(iter(servers))] if len(servers) == 1 else None
    # residual link units as a plain list (read per hop by the search, copied per ring)
    residual: list[float] = links.residual_units(allowed)
    channels: list[Channel] = []
    first_bw: float | None = None
    idx = {m: i for i, m in enumerate(members)}
    u0: list[list[float]] | None = None
    while len(channels) < max_channels:
        # per ordered pair (a, b): class-ranked per-unit bandwidth (0: no free unit), hops,
        # free units (plain lists: n <= a server's GPUs)
        w = [[0.0] * n for _ in range(n)]
        h = [[1 << 20] * n for _ in range(n)]
        u = [[0.0] * n for _ in range(n)]
        for a in members:
            for b in members:
                if a == b:
                    continue
                res = _ring_hop(links, residual, a, b, allowed)
                if res is None:
                    raise ConfigError(
                        f"no route from {a} to {b} in {links.topology.name}",
                        value=(a, b),
                        where="group",
                    )
                units, unit_bw, path = res
                if units >= 1:
                    # NCCL searches NVLink paths before PCI before network, whatever the speed:
                    # the transport class ranks first, then the per-unit bandwidth.
                    ia, ib = idx[a], idx[b]
                    w[ia][ib] = _CLASS_RANK[links.hw_class(path)] * _CLASS_SCALE + unit_bw
                    h[ia][ib] = len(path) - 1
                    u[ia][ib] = float(units)
        if u0 is None:
            u0 = [row.copy() for row in u]
        order = _best_order(w, h, u, u0)
        if order is None:
            break
        bw = min(w[order[i]][order[(i + 1) % n]] for i in range(n))
        if first_bw is None:
            first_bw = bw
        elif bw < first_bw * (1 - 1e-9):
            break
        # Allocate one unit per hop on the residual graph (hops of one ring may share links),
        # then try the same ring in the opposite direction (full-duplex links: NCCL's rings
        # come in pairs wherever the reverse direction has free units).
        fwd = [members[k] for k in order]
        for ring in (fwd, [fwd[0], *fwd[:0:-1]]):
            if len(channels) >= max_channels:
                break
            got = _allocate(links, residual, ring, allowed)
            if got is None:
                if ring is fwd:
                    return _finish(channels, members, links)
                break
            residual, hops = got
            channels.append(Channel(tuple(ring), hops))
            if n == 2:
                break
    return _finish(channels, members, links)


#: Fewest members for which :func:`_star_rings` answers a one-switch server in closed form (the
#: rack-scale NVLink domains of 72 GPUs; no 8- or 16-GPU server of the catalogue takes it).
STAR_MIN_MEMBERS = 17


def _star_rings(
    links: DirectedLinks, members: tuple[str, ...], max_channels: int
) -> tuple[Channel, ...] | None:
    """The rings :func:`_pack_rings`' search finds on a one-switch NVLink domain, in closed
    form; ``None`` where the group is not such a star (the search then runs).

    A star: more than :data:`STAR_MIN_MEMBERS` - 1 GPUs of one server, each joined to the same
    NVSwitch node by a bundle of the same units and per-unit capacity, no GPU-to-GPU link among
    them, peer-to-peer allowed. Every ordered pair then has the same 2-hop path through the
    switch and nothing ranks one ring order above another, so the search yields the members'
    order and its reverse alternately, one unit per ring per direction, as many rings as a
    GPU's units (capped at ``max_channels``): the answer its greedy tour gives on the GB200 NVL72
    rack (``tests/comm/test_star_rings.py`` checks the two against each other) at a cost that
    does not grow as n^2 path searches per ring (issue 25: 72 GPUs, ~1 s per new group).
    """
    n = len(members)
    if n < STAR_MIN_MEMBERS or links.no_p2p or links.p2p_denied:
        return None
    server = links.server.get(members[0])
    if server is None or any(links.server.get(m) != server for m in members[1:]):
        return None
    g = links.topology.graph
    nodes = g.nodes
    switches = [v for v in g.adj[members[0]] if nodes[v]["kind"] is NodeKind.NVSWITCH]
    if len(switches) != 1:
        return None
    sw = switches[0]
    member_set = set(members)
    units = None
    caps = set()
    for m in members:
        if sw not in g.adj[m] or any(v in member_set for v in g.adj[m]):
            return None
        k = int(g.adj[m][sw]["count"])
        if units is None:
            units = k
        elif k != units:
            return None
        caps.add(links.path_bandwidth((m, sw)))
        caps.add(links.path_bandwidth((sw, m)))
    if units is None or units < 1 or len(caps) != 1:
        return None
    fwd = tuple(members)
    rev = (fwd[0], *fwd[:0:-1])
    out = []
    for i in range(min(units, max_channels)):
        order = fwd if i % 2 == 0 else rev
        hops = tuple((order[j], sw, order[(j + 1) % n]) for j in range(n))
        out.append(Channel(order, hops))
    return tuple(out)


def _ring_hop(
    links: DirectedLinks,
    residual: list[float],
    a: str,
    b: str,
    allowed: frozenset[str] | None,
) -> tuple[int, float, tuple[str, ...]] | None:
    """The path of ring hop ``a -> b`` inside one server (``allowed``: its nodes): an NVLink-
    class path (GPUs and NVSwitch nodes only) while one has a free unit, else
    :func:`min_hop_widest` over the whole server.

    NCCL searches a server's rings over NVLink paths before PCI paths, whatever the speed
    (``ncclTopoCompute`` tries ``PATH_NVL`` before ``PATH_PIX``... ``PATH_SYS``): a GB200 hop
    between the two GPUs of one superchip stays on NVLink although the path through their
    Grace CPU (NVLink-C2C) has as many hops and a wider single unit. Without an NVLink path
    (or with its units spent) the search is the general one, unchanged (issue 25).
    """
    if allowed is not None:
        nvl = _nvlink_nodes(links, allowed)
        if a in nvl and b in nvl:
            res = min_hop_widest(links, residual, a, b, nvl)
            if res is not None and res[0] >= 1:
                return res
    return min_hop_widest(links, residual, a, b, allowed)


def _nvlink_nodes(links: DirectedLinks, allowed: frozenset[str]) -> frozenset[str]:
    """The GPUs and NVSwitch nodes among ``allowed`` (memoised per ``links``)."""
    memo: dict[frozenset[str], frozenset[str]] = links.__dict__.setdefault("_nvl_nodes", {})
    hit = memo.get(allowed)
    if hit is None:
        nodes = links.topology.graph.nodes
        hit = memo[allowed] = frozenset(
            x for x in allowed if nodes[x]["kind"] in (NodeKind.GPU, NodeKind.NVSWITCH)
        )
    return hit


def _allocate(
    links: DirectedLinks, residual: list[float], ring: Sequence[str], allowed: frozenset[str] | None
) -> tuple[list[float], tuple[tuple[str, ...], ...]] | None:
    trial = residual.copy()
    hops: list[tuple[str, ...]] = []
    n = len(ring)
    for i in range(n):
        res = _ring_hop(links, trial, ring[i], ring[(i + 1) % n], allowed)
        if res is None or res[0] < 1:
            return None
        hops.append(res[2])
        for e in links._ids_of(res[2]):
            trial[e] -= 1
    return trial, tuple(hops)


def _finish(
    channels: list[Channel], members: Sequence[str], links: DirectedLinks
) -> tuple[Channel, ...]:
    n = len(members)
    if not channels:
        # No unit-feasible ring (e.g. a member reachable only through saturated units): fall
        # back to the rank-order ring on the default routes (through host memory where the
        # GPUs have no peer-to-peer).
        next(links._name_ties)  # routes break ties by name
        order_nodes = tuple(members)
        hops_t = tuple(links.route(order_nodes[i], order_nodes[(i + 1) % n]) for i in range(n))
        channels.append(Channel(order_nodes, hops_t))
    return tuple(channels)


def _best_order(
    w: list[list[float]], h: list[list[int]], u: list[list[float]], u0: list[list[float]]
) -> list[int] | None:
    """Ring order (starting at 0) maximising the slowest hop, then minimising total hops, then
    preferring hops with many residual link units (keeps scarce single links for later rings).

    ``w[a][b]``, ``h[a][b]``, ``u[a][b]``: the hop ``a -> b``'s ranked bandwidth (``<= 0``: no
    free unit), hops and free units; ``u0``: the free units before the first ring. Up to
    :data:`EXHAUSTIVE_MAX` ranks the best of every order (:func:`_exhaustive_order`), else the
    best of greedy tours."""
    n = len(w)
    if n == 2:
        return [0, 1] if w[0][1] > 0 and w[1][0] > 0 else None
    if n <= EXHAUSTIVE_MAX:
        return _exhaustive_order(w, h, u, u0)
    cands: list[list[int]] = [list(range(n)), [0, *range(n - 1, 0, -1)]]
    for start in range(n):
        tour = [start]
        left = set(range(n)) - {start}
        while left:
            last = tour[-1]
            nxt_node = max(left, key=lambda j: (w[last][j], -h[last][j], -j))
            tour.append(nxt_node)
            left.remove(nxt_node)
        k = tour.index(0)
        cands.append(tour[k:] + tour[:k])
    best_key = None
    best_order = None
    for c in cands:
        bw = min(w[c[i]][c[(i + 1) % n]] for i in range(n))
        hops = sum(int(h[c[i]][c[(i + 1) % n]]) for i in range(n))
        key = (bw, -hops)
        if bw > 0 and (best_key is None or key > best_key):
            best_key, best_order = key, c
    return best_order


def _exhaustive_order(
    w: list[list[float]], h: list[list[int]], u: list[list[float]], u0: list[list[float]]
) -> list[int] | None:
    """The best of all ``(n-1)!`` ring orders ``0, p1, ..., p(n-1)`` by the key
    ``(slowest w, -total h, total u, total u0)``, the first in lexicographic order among equals
    (the order of ``itertools.permutations``); ``None`` where the best slowest hop is ``<= 0``.

    Depth-first in lexicographic order with exact pruning (branch and bound): a partial ring
    is dropped when an upper bound of every completion's key is below a greedy ring's key (the
    best is at least that), or not above the best key found so far (a tie loses to the
    earlier order). The bound gives each node still to enter (node 0 last) its best incoming
    hop from a node that can still precede it: the slowest hop so far capped by their
    smallest best ``w``, the hops so far plus their fewest hops, the units so far plus their
    most units (first the looser bound from any predecessor, O(n) instead of O(n^2)). So the
    answer is the exhaustive search's; a server whose hops all look alike (NVSwitch) is
    settled along the first order. Units are integers (as floats), so the
    totals are exact whatever the order of addition. Up to :data:`EVERY_ORDER_MAX` ranks
    every order's key is compared instead (:func:`_every_order`: the same answer, cheaper than
    the bounds there).
    """
    n = len(w)
    if n <= EVERY_ORDER_MAX:
        return _every_order(w, h, u, u0)
    floor = _ring_key(_greedy_ring(w, h, u, n), w, h, u, u0)
    best: list[Any] = [None, None]  # key, order
    # every node's best incoming hop from any node: a looser bound, O(n) to read
    col = [[x for x in range(n) if x != r] for r in range(n)]
    in_w = [max(w[x][r] for x in col[r]) for r in range(n)]
    in_h = [min(h[x][r] for x in col[r]) for r in range(n)]
    in_u = [max(u[x][r] for x in col[r]) for r in range(n)]
    in_u0 = [max(u0[x][r] for x in col[r]) for r in range(n)]

    def promising(ub: tuple[Any, ...]) -> bool:
        return ub >= floor and (best[0] is None or ub > best[0])

    path = [0]
    left = list(range(1, n))

    def bound(last: int, b: float, hops: int, spare: float, orig: float) -> tuple[Any, ...]:
        # r's predecessor: the last node or another node still to enter; node 0's: a node
        # still to enter (the last node when none is left)
        for r in (*left, 0):
            preds = [last, *(x for x in left if x != r)] if r else left or [last]
            b = min(b, max(w[x][r] for x in preds))
            hops += min(h[x][r] for x in preds)
            spare += max(u[x][r] for x in preds)
            orig += max(u0[x][r] for x in preds)
        return b, -hops, spare, orig

    def visit(bw: float, hops: int, spare: float, orig: float) -> None:
        last = path[-1]
        if not left:
            key = _ring_key(path, w, h, u, u0)
            if best[0] is None or key > best[0]:
                best[0], best[1] = key, path.copy()
            return
        for i, v in enumerate(left):
            b = min(bw, w[last][v])
            hp, sp, og = hops + h[last][v], spare + u[last][v], orig + u0[last][v]
            del left[i]
            path.append(v)
            rest = (*left, 0)
            loose = (
                min(b, *(in_w[r] for r in rest)),
                -(hp + sum(in_h[r] for r in rest)),
                sp + sum(in_u[r] for r in rest),
                og + sum(in_u0[r] for r in rest),
            )
            if promising(loose) and promising(bound(v, b, hp, sp, og)):
                visit(b, hp, sp, og)
            path.pop()
            left.insert(i, v)

    visit(math.inf, 0, 0.0, 0.0)
    if best[0] is None or best[0][0] <= 0:
        return None
    return best[1]


def _every_order(
    w: list[list[float]], h: list[list[int]], u: list[list[float]], u0: list[list[float]]
) -> list[int] | None:
    """:func:`_exhaustive_order`'s answer by the key of every order ``0, p1, ..., p(n-1)`` in
    the order of ``itertools.permutations`` (lexicographic), a later order taken only when
    its key is greater: the first best, as the pruned search finds it (it drops only
    completions that cannot beat a key it knows, and ties lose to the earlier order);
    ``None`` where the best slowest hop is ``<= 0``."""
    best_key: tuple[float, int, float, float] | None = None
    best: tuple[int, ...] = ()
    for rest in permutations(range(1, len(w))):
        order = (0, *rest)
        key = _ring_key(order, w, h, u, u0)
        if best_key is None or key > best_key:
            best_key, best = key, order
    if best_key is None or best_key[0] <= 0:
        return None
    return list(best)


def _ring_key(
    order: Sequence[int],
    w: list[list[float]],
    h: list[list[int]],
    u: list[list[float]],
    u0: list[list[float]],
) -> tuple[float, int, float, float]:
    """``(slowest w, -total h, total u, total u0)`` of the ring ``order`` (closed)."""
    hops = list(zip(order, (*order[1:], order[0])))
    return (
        min(w[a][b] for a, b in hops),
        -sum(h[a][b] for a, b in hops),
        sum(u[a][b] for a, b in hops),
        sum(u0[a][b] for a, b in hops),
    )


def _greedy_ring(
    w: list[list[float]], h: list[list[int]], u: list[list[float]], n: int
) -> list[int]:
    """A ring from rank 0, each next rank by (widest, fewest hops, most units, lowest)."""
    order = [0]
    left = set(range(1, n))
    while left:
        a = order[-1]
        nxt = max(left, key=lambda j: (w[a][j], -h[a][j], u[a][j], -j))
        order.append(nxt)
        left.remove(nxt)
    return order
