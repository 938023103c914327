"""Links as resources, and NCCL-style ring channels built on the topology graph.

A *channel* is one ring over the ranks of a group together with the node path of each hop
(``order[i] -> order[i+1]``). NCCL builds several channels so that together they use every
NVLink (Jeaugey, "NCCL 2.0", GTC 2017; NCCL ``src/graph/search.cc``): each channel needs one
free link unit per directed hop, and NCCL keeps only channels of the same speed.

:func:`pack_rings` mimics that search on our graph: it repeatedly picks the ring whose slowest
hop (per link unit) is fastest on the *residual* link units (an edge with ``count = 2`` bundles
two NVLinks, i.e. two units per direction), allocates one unit per hop, and stops when no ring of
the first ring's speed is left. The steady-state bandwidth of a set of channels is then computed
by max-min fair sharing of the real link capacities (:func:`channel_rates`): the bus bandwidth of
a bandwidth-bound ring equals the sum of its channels' rates, which for a single ring is the
bottleneck link's bandwidth.

Across servers (:func:`build_channels`), each channel is the concatenation, server after
server, of a rotation of an intra-server ring; rotations are chosen so that the channels leave
the servers through different NICs, as NCCL spreads its rings over all NICs.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np

from perfmodel.comm.maxmin import maxmin_rates
from perfmodel.comm.params import HwClass, LinkParams
from perfmodel.errors import ConfigError
from perfmodel.hardware.links import LinkFamily
from perfmodel.topology import Topology
from perfmodel.topology.routing import path_edges, route
from perfmodel.topology.schema import TRANSIT_KINDS, NodeKind

#: NCCL's MAXCHANNELS (src/include/device.h): at most 32 rings.
MAX_CHANNELS = 32
#: Exhaustive ring search up to this many ranks per server (7! = 5040 orders at 8).
EXHAUSTIVE_MAX = 8
_NET_FAMILIES = frozenset({LinkFamily.INFINIBAND, LinkFamily.ETHERNET})
_NVLINK_FAMILIES = frozenset({LinkFamily.NVLINK, LinkFamily.NVSWITCH})


_CLASS_RANK = {HwClass.NVLINK: 2, HwClass.PCI: 1, HwClass.NET: 0}
_CLASS_SCALE = 1e16  # above any bandwidth in bytes/s


class DirectedLinks:
    """Every directed link of a topology as a resource with a capacity and a latency.

    ``capacity_Bps[i]`` is the effective bandwidth (raw x efficiency) of directed edge
    ``edges[i]``, or ``count x LinkParams.bandwidth_Bps`` where a link class is overridden;
    ``alpha_s[i]`` is its latency (or the override). Read-only after construction.
    """

    def __init__(self, topology: Topology, link_params: LinkParams | None = None) -> None:
        self.topology = topology
        self.link_params = link_params or LinkParams()
        g = topology.graph
        edges: list[tuple[str, str]] = []
        cap: list[float] = []
        alpha: list[float] = []
        extra: list[float] = []
        units: list[int] = []
        fam: list[LinkFamily] = []
        for u, v, d in g.edges(data=True):
            over = self.link_params.lookup(d["tech"], d["family"])
            count = int(d["count"])
            bw = float(d["bandwidth_Bps"]) * float(d["efficiency"])
            lat = float(d["latency_s"])
            socket = _is_socket(d["tech"])
            if over is not None:
                if over.bandwidth_Bps is not None:
                    bw = over.bandwidth_Bps * count
                if over.alpha_s is not None:
                    lat = over.alpha_s
                    socket = True  # a calibrated latency is charged as given
            for a, b in ((u, v), (v, u)):
                edges.append((a, b))
                cap.append(bw)
                alpha.append(lat)
                extra.append(lat if socket else 0.0)
                units.append(count)
                fam.append(d["family"])
        self.edges: tuple[tuple[str, str], ...] = tuple(edges)
        self.index: dict[tuple[str, str], int] = {e: i for i, e in enumerate(edges)}
        self.capacity_Bps = np.asarray(cap, dtype=float)
        self.alpha_s = np.asarray(alpha, dtype=float)
        self.units = np.asarray(units, dtype=np.int64)
        self.family: tuple[LinkFamily, ...] = tuple(fam)
        by_server: dict[int, set[str]] = {}
        for node, d in g.nodes(data=True):
            by_server.setdefault(int(d["server"]), set()).add(node)
        self.server_nodes: dict[int, frozenset[str]] = {
            k: frozenset(v) for k, v in by_server.items()
        }
        self._routes: dict[tuple[str, str], tuple[str, ...]] = {}
        self._gpu_nic: dict[str, str | None] = {}
        # Plain-Python views for the path searches (hot loops).
        self.adjacency: dict[str, tuple[str, ...]] = {n: tuple(g.neighbors(n)) for n in g.nodes}
        self.transit: frozenset[str] = frozenset(
            n for n, d in g.nodes(data=True) if d["kind"] in TRANSIT_KINDS
        )
        self.rank: dict[str, int] = {n: i for i, n in enumerate(sorted(g.nodes, key=str))}
        self.capacity_list: list[float] = self.capacity_Bps.tolist()
        self.unit_capacity_list: list[float] = (self.capacity_Bps / self.units).tolist()
        self.alpha_list: list[float] = self.alpha_s.tolist()
        self.extra_alpha_s = np.asarray(extra, dtype=float)
        self.server: dict[str, int] = {n: int(d["server"]) for n, d in g.nodes(data=True)}
        self.local_id: dict[str, str] = {n: str(d["local_id"]) for n, d in g.nodes(data=True)}
        self.by_local: dict[int, dict[str, str]] = {}
        for n, srv in self.server.items():
            self.by_local.setdefault(srv, {})[self.local_id[n]] = n
        self.no_p2p: frozenset[str] = frozenset(
            n for n in topology.gpus if not topology.p2p_capable(n)
        )
        self.p2p_denied: dict[str, frozenset[str]] = {
            n: frozenset(g.nodes[n]["p2p_denied"])
            for n in topology.gpus
            if g.nodes[n].get("p2p_denied")
        }
        self._shm: dict[tuple[str, str], str | None] = {}
        self._gpu_set: frozenset[str] = frozenset(topology.gpus)

    def shm_cpu(self, src: str, dst: str) -> str | None:
        """The CPU whose memory stages traffic ``src -> dst``, or ``None`` when the pair talks
        directly.

        NCCL uses peer-to-peer between two GPUs of a server over NVLink, or over PCIe when both
        allow it; otherwise its SHM transport copies through a host-memory buffer
        (``src/transport/shm.cc``; ``src/graph/paths.cc`` routes such pairs GPU -> CPU -> GPU).
        The buffer sits in the sender's NUMA node: the CPU nearest ``src``.
        """
        key = (src, dst)
        if key in self._shm:
            return self._shm[key]
        cpu: str | None = None
        gpus = self._gpu_set
        denied = src in self.no_p2p or dst in self.no_p2p
        if not denied and src in self.p2p_denied:
            denied = self.local_id.get(dst) in self.p2p_denied[src]
        if (
            denied
            and src in gpus
            and dst in gpus
            and self.server[src] == self.server[dst]
            and src != dst
        ):
            inside = self.server_nodes.get(self.server[src], frozenset())
            plain = _min_hop_widest(self, None, src, dst, inside, per_unit=False, direct=True)
            fams = {self.family[i] for i in self.path_ids(plain[2])} if plain else set()
            if not (fams and fams <= _NVLINK_FAMILIES):
                cpus = [
                    n
                    for n in self.server_nodes.get(self.server[src], ())
                    if self.topology.graph.nodes[n]["kind"] is NodeKind.CPU
                ]
                if cpus:
                    cpu = min(cpus, key=lambda c: (len(self.route(src, c)), c))
        self._shm[key] = cpu
        return cpu

    def uses_shm(self, members: Sequence[str]) -> bool:
        """Whether any two GPUs of ``members`` in one server communicate through host memory."""
        if not self.no_p2p and not self.p2p_denied:
            return False
        by_server: dict[int, list[str]] = {}
        for m in members:
            if m in self._gpu_set:
                by_server.setdefault(self.server[m], []).append(m)
        return any(
            self.shm_cpu(a, b) is not None
            for gpus in by_server.values()
            for a in gpus
            for b in gpus
            if a != b
        )

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        """Minimum-hop, widest route ``src -> dst`` (the rule of :func:`perfmodel.topology.route`),
        searched only inside the two endpoints' servers and the fabric, and cached.

        Equivalent to the topology's route on cluster graphs (a minimum-hop path between two
        servers never enters a third one) and much faster on 1000-GPU clusters.
        """
        key = (src, dst)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        if src == dst:
            return (src,)
        a, b = self.server[src], self.server[dst]
        fabric = self.server_nodes.get(-1, frozenset())
        kinds = self.topology.graph.nodes
        if a != b and kinds[src]["kind"] is NodeKind.NIC and kinds[dst]["kind"] is NodeKind.NIC:
            allowed = fabric | {src, dst}  # NIC to NIC: through the fabric only
        else:
            allowed = self.server_nodes.get(a, frozenset()) | self.server_nodes.get(b, frozenset())
            allowed = allowed | fabric
        res = _min_hop_widest(self, None, src, dst, allowed, per_unit=False)
        path = res[2] if res is not None else route(self.topology, src, dst)
        self._routes[key] = path
        return path

    def gpu_nic(self, gpu: str) -> str | None:
        """The NIC a GPU uses for inter-server point-to-point traffic.

        Among the NICs of its server at the smallest hop distance, GPUs take turns in local
        order (NCCL binds each GPU to a nearby NIC and spreads GPUs over equidistant NICs);
        ``None`` when the server has no fabric NIC.
        """
        if gpu in self._gpu_nic:
            return self._gpu_nic[gpu]
        server = self.server[gpu]
        nics = _nics_of(self.topology, server)
        g = self.topology.graph
        gpus = sorted(
            (n for n in self.server_nodes.get(server, ()) if g.nodes[n]["kind"] is NodeKind.GPU),
            key=lambda n: (g.nodes[n].get("gpu_index", 0), n),
        )
        load = dict.fromkeys(nics, 0)
        for x in gpus:
            near = _near_nics(self, x, nics)
            if not near:
                self._gpu_nic[x] = None
                continue
            pick = min(near, key=lambda nic: (load[nic], nic))
            load[pick] += 1
            self._gpu_nic[x] = pick
        return self._gpu_nic.get(gpu)

    def p2p_route(self, src: str, dst: str) -> tuple[str, ...]:
        """Route of a point-to-point transfer: :meth:`route`, except that GPU-to-GPU traffic
        between servers leaves and enters through each GPU's own NIC (:meth:`gpu_nic`)."""
        if self.server[src] == self.server[dst] or self.server[src] < 0 or self.server[dst] < 0:
            return self.route(src, dst)
        kinds = self.topology.graph.nodes
        if kinds[src]["kind"] is not NodeKind.GPU or kinds[dst]["kind"] is not NodeKind.GPU:
            return self.route(src, dst)
        a, b = self.gpu_nic(src), self.gpu_nic(dst)
        if a is None or b is None:
            return self.route(src, dst)
        x_out = a
        x_in = b
        path = self.route(src, x_out) + self.route(x_out, x_in)[1:] + self.route(x_in, dst)[1:]
        if len(set(path)) != len(path):
            return self.route(src, dst)
        return path

    def path_ids(self, path: Sequence[str]) -> list[int]:
        """Indices of the directed edges of a node path."""
        return [self.index[e] for e in path_edges(tuple(path))]

    def path_latency(self, path: Sequence[str]) -> float:
        """Sum of the latencies (s) along a node path."""
        return float(sum(self.alpha_s[i] for i in self.path_ids(path)))

    def extra_latency(self, path: Sequence[str]) -> float:
        """Latency (s) of a path that NCCL's per-step latency does not already contain.

        NCCL's ``hwLat`` table (``src/graph/tuning.cc``) is the measured cost of one step over
        NVLink, PCIe or the RDMA network (IB verbs / RoCE), wire and switches included, so those
        links add nothing on top of it (counting them again doubled the small-message time:
        8 B on 16 DGX A100 came out 163 us against 58 us measured). Kernel TCP sockets (links
        whose catalogue protocol is ``tcp``) add their stack latency, which the RDMA-measured
        table does not contain, and so does a link class whose ``alpha_s`` a
        :class:`LinkParams` override sets (calibration fits it as the latency NCCL's table
        misses).
        """
        return float(sum(self.extra_alpha_s[i] for i in self.path_ids(path)))

    def path_bandwidth(self, path: Sequence[str]) -> float:
        """Bottleneck capacity (bytes/s) of a node path (``inf`` for a zero-hop path)."""
        ids = self.path_ids(path)
        return float(min(self.capacity_Bps[i] for i in ids)) if ids else float("inf")

    def hw_class(self, path: Sequence[str]) -> HwClass:
        """NCCL transport class of a path: network if it crosses a NIC port, NVLink if all NVLink."""
        fams = {self.family[i] for i in self.path_ids(path)}
        if fams & _NET_FAMILIES:
            return HwClass.NET
        if fams and fams <= _NVLINK_FAMILIES:
            return HwClass.NVLINK
        return HwClass.PCI


@dataclass(frozen=True)
class Channel:
    """One ring: ranks in order and the node path of every hop ``order[i] -> order[i+1 mod n]``."""

    order: tuple[str, ...]
    hops: tuple[tuple[str, ...], ...]


@cache
def _is_socket(tech: str) -> bool:
    """Whether a link technology is reached through kernel TCP sockets (catalogue ``protocol``)."""
    from perfmodel.errors import UnknownHardwareError
    from perfmodel.hardware.links import get_link

    try:
        return get_link(str(tech)).protocol.lower() == "tcp"
    except UnknownHardwareError:
        return False


def check_group(
    topology: Topology, group: Iterable[str], *, where: str = "group"
) -> tuple[str, ...]:
    """Validate a group of endpoint node ids (GPUs, or CPUs as host / server endpoints)."""
    if isinstance(group, str):
        raise ConfigError(
            f"{where} must be a sequence of node ids, got the string {group!r}",
            value=group,
            where=where,
        )
    members = tuple(group)
    if not members:
        raise ConfigError(f"{where} is empty (zero GPUs)", value=members, where=where)
    seen: set[str] = set()
    g = topology.graph
    for n in members:
        if n not in g:
            raise ConfigError(
                f"{n!r} in {where} is not a node of system {topology.name} "
                f"(GPUs: {', '.join(topology.gpus[:4])}{', ...' if topology.num_gpus > 4 else ''})",
                value=n,
                where=where,
            )
        if g.nodes[n]["kind"] not in (NodeKind.GPU, NodeKind.CPU):
            raise ConfigError(
                f"{n!r} in {where} is a {g.nodes[n]['kind'].value}, not a GPU or CPU endpoint",
                value=n,
                where=where,
            )
        if n in seen:
            raise ConfigError(f"{n!r} appears twice in {where}", value=n, where=where)
        seen.add(n)
    return members


def _min_hop_widest(
    links: DirectedLinks,
    residual: np.ndarray | list[float] | None,
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
            up = _min_hop_widest(links, residual, src, cpu, allowed, per_unit=per_unit)
            down = _min_hop_widest(links, residual, cpu, dst, allowed, per_unit=per_unit)
            if up is None or down is None:
                return None
            return min(up[0], down[0]), min(up[1], down[1]), up[2] + down[2][1:]
    adj = links.adjacency
    transit = links.transit
    index = links.index
    dist = {dst: 0}
    q = deque([dst])
    while q:
        u = q.popleft()
        if u != dst and u not in transit:
            continue
        if u == src:
            break
        du = dist[u] + 1
        nbrs = adj[u]
        if allowed is not None and len(allowed) < len(nbrs):
            # a switch of a large cluster: scan the few allowed nodes, not its thousands of
            # ports (BFS distances, hence the result, do not depend on the scan order)
            nbrs = [v for v in allowed if (u, v) in index]
        for v in nbrs:
            if v in dist or (allowed is not None and v not in allowed):
                continue
            dist[v] = du
            q.append(v)
    if src not in dist:
        return None
    d_src = dist[src]
    cap = links.capacity_list
    unit_cap = links.unit_capacity_list
    alpha = links.alpha_list
    rank = links.rank
    res = residual.tolist() if isinstance(residual, np.ndarray) else residual
    # DP from dst outwards over the BFS layers (nodes strictly closer than src, then src).
    best: dict[str, tuple[int, float, str]] = {dst: (1 << 30, float("inf"), dst)}
    lat: dict[str, float] = {dst: 0.0}
    layer = sorted((n for n in dist if dist[n] < d_src and n != dst), key=dist.__getitem__)
    for u in [*layer, src]:
        if u != src and u not in transit:
            continue
        du = dist[u] - 1
        cand: tuple[Any, tuple[int, float, str], float] | None = None
        nbrs = adj[u]
        if len(best) < len(nbrs):  # as above; the key's rank term makes the best unique
            nbrs = [v for v in best if (u, v) in index]
        for v in nbrs:
            if dist.get(v, -1) != du or v not in best:
                continue
            i = index[(u, v)]
            bu, bw, _ = best[v]
            if per_unit:
                assert res is not None
                units = min(int(res[i]), bu)
                unit_bw = min(unit_cap[i], bw)
                key: tuple[float, ...] = (units, unit_bw, 0.0, -rank[v])
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


def _server_nodes(topology: Topology, server: int) -> frozenset[str]:
    g = topology.graph
    return frozenset(n for n, d in g.nodes(data=True) if d["server"] == server)


def pack_rings(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> tuple[Channel, ...]:
    """NCCL-like ring channels over ``members`` (GPUs of one server, or any small group).

    See the module docstring. Deterministic: ties are broken by the members' order.
    """
    n = len(members)
    if n < 2:
        return ()
    topo = links.topology
    servers = {topo.server_of(m) for m in members}
    allowed = _server_nodes(topo, next(iter(servers))) if len(servers) == 1 else None
    residual = links.units.astype(float).copy()
    channels: list[Channel] = []
    first_bw: float | None = None
    idx = {m: i for i, m in enumerate(members)}
    u0: np.ndarray | None = None
    while len(channels) < max_channels:
        w = np.zeros((n, n))
        h = np.full((n, n), 1 << 20, dtype=np.int64)
        u = np.zeros((n, n))
        res_list = residual.tolist()
        for a in members:
            for b in members:
                if a == b:
                    continue
                res = _min_hop_widest(links, res_list, a, b, allowed)
                if res is None:
                    raise ConfigError(
                        f"no route from {a} to {b} in {topo.name}", value=(a, b), where="group"
                    )
                units, unit_bw, path = res
                if units >= 1:
                    # NCCL searches NVLink paths before PCI before network, whatever the speed:
                    # the transport class ranks first, then the per-unit bandwidth.
                    w[idx[a], idx[b]] = _CLASS_RANK[links.hw_class(path)] * _CLASS_SCALE + unit_bw
                    h[idx[a], idx[b]] = len(path) - 1
                    u[idx[a], idx[b]] = units
        if u0 is None:
            u0 = u.copy()
        order = _best_order(w, h, u, u0)
        if order is None:
            break
        bw = min(w[order[i], order[(i + 1) % n]] for i in range(n))
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


def _allocate(
    links: DirectedLinks, residual: np.ndarray, ring: Sequence[str], allowed: frozenset[str] | None
) -> tuple[np.ndarray, tuple[tuple[str, ...], ...]] | None:
    trial = residual.copy()
    hops: list[tuple[str, ...]] = []
    n = len(ring)
    for i in range(n):
        res = _min_hop_widest(links, trial, ring[i], ring[(i + 1) % n], allowed)
        if res is None or res[0] < 1:
            return None
        hops.append(res[2])
        for e in links.path_ids(res[2]):
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
        order_nodes = tuple(members)
        hops_t = tuple(links.route(order_nodes[i], order_nodes[(i + 1) % n]) for i in range(n))
        channels.append(Channel(order_nodes, hops_t))
    return tuple(channels)


def _best_order(w: np.ndarray, h: np.ndarray, u: np.ndarray, u0: np.ndarray) -> list[int] | None:
    """Ring order (starting at 0) maximising the slowest hop, then minimising total hops, then
    preferring hops with many residual link units (keeps scarce single links for later rings)."""
    n = w.shape[0]
    if n == 2:
        return [0, 1] if w[0, 1] > 0 and w[1, 0] > 0 else None
    if n <= EXHAUSTIVE_MAX:
        perms = np.array([(0, *p) for p in itertools.permutations(range(1, n))], dtype=np.int64)
        nxt = np.roll(perms, -1, axis=1)
        bw = w[perms, nxt].min(axis=1)
        hops = h[perms, nxt].sum(axis=1)
        spare = u[perms, nxt].sum(axis=1)
        orig = u0[perms, nxt].sum(axis=1)
        if bw.max() <= 0:
            return None
        best = np.lexsort((np.arange(len(perms)), -orig, -spare, hops, -bw))[0]
        return [int(x) for x in perms[best]]
    cands: list[list[int]] = [list(range(n)), [0, *range(n - 1, 0, -1)]]
    for start in range(n):
        tour = [start]
        left = set(range(n)) - {start}
        while left:
            last = tour[-1]
            nxt_node = max(left, key=lambda j: (w[last, j], -h[last, j], -j))
            tour.append(nxt_node)
            left.remove(nxt_node)
        k = tour.index(0)
        cands.append(tour[k:] + tour[:k])
    best_key = None
    best_order = None
    for c in cands:
        bw = min(w[c[i], c[(i + 1) % n]] for i in range(n))
        hops = sum(int(h[c[i], c[(i + 1) % n]]) for i in range(n))
        key = (bw, -hops)
        if bw > 0 and (best_key is None or key > best_key):
            best_key, best_order = key, c
    return best_order


@lru_cache(maxsize=4096)
def _nics_of(topology: Topology, server: int) -> tuple[str, ...]:
    """The server's NICs with a fabric port, sorted (cached, hence a tuple)."""
    g = topology.graph
    return tuple(
        sorted(
            (
                n
                for n, d in g.nodes(data=True)
                if d["kind"] is NodeKind.NIC
                and d["server"] == server
                and any(g.nodes[v]["server"] == -1 for v in g.neighbors(n))
            ),
            key=str,
        )
    )


def split_by_server(topology: Topology, members: Sequence[str]) -> list[list[str]]:
    """Members grouped by server, servers in order of first appearance, members in given order."""
    groups: dict[int, list[str]] = {}
    for m in members:
        groups.setdefault(int(topology.graph.nodes[m]["server"]), []).append(m)
    return list(groups.values())


def build_channels(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> tuple[Channel, ...]:
    """Ring channels over a group that may span servers (see the module docstring)."""
    topo = links.topology
    parts = split_by_server(topo, members)
    if len(parts) == 1:
        return pack_rings(links, members, max_channels=max_channels)
    intra: list[tuple[Channel, ...]] = []
    cache: dict[tuple[str, ...], tuple[Channel, ...]] = {}
    for part in parts:
        key = tuple(links.local_id[m] for m in part)
        if len(part) == 1:
            intra.append((Channel((part[0],), ()),))
            continue
        if key in cache:
            intra.append(_remap(cache[key], links, part))
        else:
            rings = pack_rings(links, part, max_channels=max_channels)
            cache[key] = rings
            intra.append(rings)
    nics = _nics_of(topo, topo.server_of(parts[0][0]))
    n_rings = max(len(r) for r in intra)
    n_ch = max(n_rings, len(nics), 1)
    if nics:  # a multiple of the NIC count, so that every NIC carries as many channels
        n_ch = -(-n_ch // len(nics)) * len(nics)
    n_ch = min(max_channels, n_ch)
    first = intra[0]
    near = {m: _near_nics(links, m, nics) for m in parts[0]}
    out_load = dict.fromkeys(nics, 0)
    in_load = dict.fromkeys(nics, 0)
    local_of = {n: topo.graph.nodes[n]["local_id"] for n in nics}
    channels: list[Channel] = []
    for c in range(n_ch):
        base = first[c % len(first)]
        k = len(base.order)
        best = None
        for r in range(k):
            outs = near[base.order[(r - 1) % k]]
            ins = near[base.order[r % k]]
            common = sorted(set(outs) & set(ins))
            if not outs or not ins:
                key: tuple[int, ...] = (0, 0, 0, (r - c) % k)
                choice = (None, None)
            elif common:
                # rail-aligned: leave and enter every server through the same NIC index, so
                # the hop stays on one rail (NCCL keeps the inter-node hop on one NIC;
                # crossNic = 0 in src/graph/search.cc). The exit GPU of this server and the
                # entry GPU of the next share that NIC.
                x = min(common, key=lambda nic: (max(out_load[nic], in_load[nic]), nic))
                o, i = out_load[x] + 1, in_load[x] + 1
                key = (0, max(o, i), o + i, (r - c) % k)
                choice = (x, x)
            else:
                xo = min(outs, key=lambda x: (out_load[x], x))
                xi = min(ins, key=lambda x: (in_load[x], x))
                o, i = out_load[xo] + 1, in_load[xi] + 1
                key = (1, max(o, i), o + i, (r - c) % k)
                choice = (xo, xi)
            if best is None or key < best[0]:
                best = (key, r, choice)
        assert best is not None
        _, rot, (exit_nic, entry_nic) = best
        if exit_nic is not None and entry_nic is not None:
            out_load[exit_nic] += 1
            in_load[entry_nic] += 1
        order: list[str] = []
        hops: list[tuple[str, ...]] = []
        for s, rings in enumerate(intra):
            ring = rings[c % len(rings)]
            kk = len(ring.order)
            r = rot % kk
            seg = ring.order[r:] + ring.order[:r]
            seg_hops = ring.hops[r:] + ring.hops[:r]
            order.extend(seg)
            hops.extend(seg_hops[: kk - 1])
            nxt = intra[(s + 1) % len(intra)][c % len(intra[(s + 1) % len(intra)])]
            kn = len(nxt.order)
            entry = nxt.order[rot % kn]
            hops.append(_via_nics(links, seg[-1], entry, exit_nic, entry_nic, local_of))
        channels.append(Channel(tuple(order), tuple(hops)))
    return tuple(channels)


def _near_nics(links: DirectedLinks, gpu: str, nics: Sequence[str]) -> list[str]:
    """The NICs of the GPU's server at the smallest hop distance from it (ties kept)."""
    if not nics:
        return []
    dist = {nic: len(links.route(gpu, nic)) for nic in nics}
    d = min(dist.values())
    return sorted(nic for nic in nics if dist[nic] == d)


def _via_nics(
    links: DirectedLinks,
    src: str,
    dst: str,
    exit_nic: str | None,
    entry_nic: str | None,
    local_of: dict[str, str],
) -> tuple[str, ...]:
    """Inter-server hop ``src -> dst`` leaving through ``exit_nic`` and entering through the NIC of
    ``dst``'s server with the same local id as ``entry_nic`` (NCCL assigns a NIC per channel)."""
    if exit_nic is None or entry_nic is None:
        return links.route(src, dst)
    x_out = links.by_local[links.server[src]].get(local_of[exit_nic])
    x_in = links.by_local[links.server[dst]].get(local_of[entry_nic])
    if x_out is None or x_in is None:
        return links.route(src, dst)
    a = links.route(src, x_out)
    b = links.route(x_out, x_in)
    c = links.route(x_in, dst)
    path = a + b[1:] + c[1:]
    if len(set(path)) != len(path):  # a detour through a node twice: use the plain route
        return links.route(src, dst)
    return path


def channel_route(links: DirectedLinks, src: str, dst: str, channel: int) -> tuple[str, ...]:
    """Route for channel ``channel`` of a collective: inside a server the plain route; across
    servers through the server's NIC number ``channel mod #NICs`` on both sides (NCCL gives each
    channel its own NIC), falling back to the plain route."""
    topo = links.topology
    a, b = links.server[src], links.server[dst]
    if a == b:
        return links.route(src, dst)
    nics = _nics_of(topo, a)
    if not nics:
        return links.route(src, dst)
    nic = nics[channel % len(nics)]
    return _via_nics(links, src, dst, nic, nic, {nic: links.local_id[nic]})


def _remap(
    rings: tuple[Channel, ...], links: DirectedLinks, part: Sequence[str]
) -> tuple[Channel, ...]:
    """Map rings computed on one server onto an identical server (by local ids)."""
    by_local = links.by_local[links.server[part[0]]]
    lid = links.local_id
    out = []
    for ch in rings:
        order = tuple(by_local[lid[m]] for m in ch.order)
        hops = tuple(tuple(by_local[lid[x]] for x in hop) for hop in ch.hops)
        out.append(Channel(order, hops))
    return tuple(out)


def channel_rates(links: DirectedLinks, channels: Sequence[Channel]) -> np.ndarray:
    """Steady-state max-min fair rate (bytes/s) of each channel, all hops of a channel at one rate."""
    flow_idx: list[int] = []
    edge_idx: list[int] = []
    for c, ch in enumerate(channels):
        for hop in ch.hops:
            for e in links.path_ids(hop):
                flow_idx.append(c)
                edge_idx.append(e)
    if not flow_idx:
        return np.full(len(channels), np.inf)
    fi = np.asarray(flow_idx, dtype=np.int64)
    ei = np.asarray(edge_idx, dtype=np.int64)
    # Merge duplicate (flow, edge) pairs into multiplicities.
    key = fi * len(links.edges) + ei
    uniq, counts = np.unique(key, return_counts=True)
    return maxmin_rates(
        uniq // len(links.edges),
        uniq % len(links.edges),
        counts.astype(float),
        links.capacity_Bps,
        len(channels),
    )


def flow_rates(links: DirectedLinks, paths: Sequence[Sequence[str]]) -> np.ndarray:
    """Max-min fair rates of independent point-to-point flows along node paths."""
    return channel_rates(links, [Channel((p[0], p[-1]), (tuple(p),)) for p in paths])
