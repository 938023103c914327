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
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache, partial
from typing import TYPE_CHECKING, Any

from perfmodel.comm.maxmin import maxmin_rates_small
from perfmodel.comm.params import HwClass, LinkParams
from perfmodel.errors import ConfigError, PerfModelError
from perfmodel.hardware.links import LinkFamily
from perfmodel.topology import Topology
from perfmodel.topology.model import ReplicaPattern
from perfmodel.topology.routing import route
from perfmodel.topology.schema import TRANSIT_KINDS, NodeKind
from perfmodel.topology.symmetry import ServerSymmetry, server_symmetry

if TYPE_CHECKING:
    import numpy as np

#: NCCL's MAXCHANNELS (src/include/device.h): at most 32 rings.
MAX_CHANNELS = 32
#: Exhaustive ring search up to this many ranks per server (7! = 5040 orders at 8).
EXHAUSTIVE_MAX = 8
_NET_FAMILIES = frozenset({LinkFamily.INFINIBAND, LinkFamily.ETHERNET})
# RCCL types AMD's GPU-to-GPU Infinity Fabric links as its NVLink class (``LINK_NVL``, printed
# "XGMI": ROCm/rccl src/graph/topo.cc ncclTopoAddXGMI, commit 0cbce2a, 2024), so NCCL's NVLink
# latencies and protocols apply to them.
_NVLINK_FAMILIES = frozenset({LinkFamily.NVLINK, LinkFamily.NVSWITCH, LinkFamily.XGMI})


#: The edge attributes a link's columns are computed from (:meth:`_LinkTable.kind`).
_LINK_KEYS = ("tech", "family", "count", "bandwidth_Bps", "efficiency", "latency_s")
_CLASS_RANK = {HwClass.NVLINK: 2, HwClass.PCI: 1, HwClass.NET: 0}
_CLASS_SCALE = 1e16  # above any bandwidth in bytes/s


class DirectedLinks:
    """Every directed link of a topology as a resource with a capacity and a latency.

    ``capacity_Bps[i]`` is the effective bandwidth (raw x efficiency) of directed edge
    ``edges[i]``, or ``count x LinkParams.bandwidth_Bps`` where a link class is overridden;
    ``alpha_s[i]`` is its latency (or the override). Read-only after construction.

    Every table is built on first use (issue 14, cold start and cluster size): a caller that
    only asks whether GPUs use host memory (:func:`perfmodel.comm.model.shm_note`) reads the GPU
    nodes, not the 184,336 directed links of a 16,384-GPU cluster.
    """

    def __init__(self, topology: Topology, link_params: LinkParams | None = None) -> None:
        self.topology = topology
        self.link_params = link_params or LinkParams()
        self._routes: dict[tuple[str, str], tuple[str, ...]] = {}
        self._gpu_nic: dict[str, str | None] = {}
        self._shm: dict[tuple[str, str], str | None] = {}
        self._ids: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._inside: dict[int, frozenset[str]] = {}
        self._fallback: set[tuple[str, str]] = set()
        self._inside_ok: dict[tuple[str, str], bool] = {}
        self._fabric_inner: dict[tuple[Any, ...], tuple[str, ...]] = {}
        self._fabric_sides: dict[str, tuple[tuple[Any, ...], ...]] = {}
        #: canonical fabric pattern (:meth:`_fabric_class`) -> the searched switches, side
        #: nodes as their labels
        self._fabric_classes: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._fabric_keys: dict[str, tuple[Any, ...]] = {}
        self._sides_by_attach: dict[Any, dict[str, tuple[tuple[Any, ...], ...]]] = {}
        self._classes: dict[tuple[str, ...], HwClass] = {}
        self._packed: dict[tuple[tuple[str, ...], int], tuple[Channel, ...]] = {}
        #: ring packings (keys of :attr:`_packed`) no choice of which compared node names
        #: (:func:`pack_rings`): the same, names mapped, on any image of the server
        self._name_free: set[tuple[tuple[str, ...], int]] = set()
        #: counts choices of the ring packing's searches that the name order decided
        #: (``next`` is atomic: a packing's own ties are never missed beside other threads')
        self._name_ties = itertools.count()
        #: (src, dst, allowed) -> :func:`_min_hop_layers` of the ring packing's searches inside
        #: a server (each pair is searched again on every ring's residual)
        self._layers: dict[Any, tuple[dict[str, int], list[str]] | None] = {}

    # ------------------------------------------------------------------ link tables (lazy)
    @cached_property
    def _table(self) -> _LinkTable:
        return _LinkTable(self.topology.graph, self.link_params)

    @cached_property
    def _whole(self) -> _LinkTable:
        """:attr:`_table` with every link of the graph given an id (the readers of the whole
        table: :attr:`edges`, :attr:`capacity_Bps`, ...)."""
        table = self._table
        table.complete()
        return table

    @cached_property
    def edges(self) -> tuple[tuple[str, str], ...]:
        """Every directed edge ``(u, v)``, by id (see :class:`_LinkTable` for the id order)."""
        return tuple(self._whole.edges)

    @cached_property
    def index(self) -> dict[tuple[str, str], int]:
        """Directed edge -> its id (every edge of the graph)."""
        return {e: i for i, e in enumerate(self._whole.edges)}

    # The whole-graph arrays (calibration's readers) import numpy when first read: the
    # analytic prediction reads the plain-list columns below and never imports it.
    @cached_property
    def capacity_Bps(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self._whole.capacity, dtype=float)

    @cached_property
    def alpha_s(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self._whole.alpha, dtype=float)

    @cached_property
    def units(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self._whole.units, dtype=np.int64)

    @cached_property
    def family(self) -> tuple[LinkFamily, ...]:
        return tuple(self._whole.family)

    def link(self, e: int) -> tuple[str, str]:
        """The directed edge ``(u, v)`` of link id ``e`` (an id a path lookup handed out)."""
        return self._table.edges[e]

    def capacity_view(self) -> np.ndarray:
        """Capacity (bytes/s) of every link id handed out so far, by id: the ``capacity_Bps``
        argument of :func:`~perfmodel.comm.maxmin.maxmin_rates` for flows over those links
        (the whole-graph :attr:`capacity_Bps` is not built for them)."""
        return self._table.capacity_array()

    # Plain-Python views for the path searches (hot loops): the table's own columns, which
    # grow as links are given ids (read them by an id you hold, never keep a copy's length).
    @property
    def capacity_list(self) -> list[float]:
        return self._table.capacity

    @property
    def unit_capacity_list(self) -> list[float]:
        return self._table.unit_capacity

    @property
    def alpha_list(self) -> list[float]:
        return self._table.alpha

    def residual_units(self, allowed: frozenset[str] | None) -> list[float]:
        """Link units per directed edge, as floats (the ring packing's starting residual),
        covering every link between ``allowed`` nodes
        (``None``: every link): the ring packing's residual, which its searches index by
        the ids of those links."""
        table = self._table
        if allowed is None:
            table.complete()
        else:
            succ, adj = table.succ, self.adjacency
            for u in allowed:
                row = succ[u]
                for v in adj[u]:
                    if v in allowed:
                        row[v]  # numbers the link
        return list(table.unit_count)

    # ------------------------------------------------------------------ node tables (lazy)
    @cached_property
    def _pattern(self) -> ReplicaPattern | None:
        """The topology's build record where it describes its graph (servers copied from
        server 0, :class:`~perfmodel.topology.model.ReplicaPattern`), else ``None``."""
        p = self.topology.pattern
        return p if p is not None and p.describes(self.topology) else None

    @cached_property
    def server(self) -> dict[str, int]:
        """Node -> server index (``-1``: fabric); the server symmetry's table where the build
        record made it (no second pass over the 30,000 nodes of a 16,384-GPU cluster)."""
        if self._pattern is not None:
            return self._symmetry.server
        return {n: int(d["server"]) for n, d in self.topology.graph.nodes(data=True)}

    @cached_property
    def local_id(self) -> dict[str, str]:
        """Node -> local id (shared with the server symmetry as :attr:`server`)."""
        if self._pattern is not None:
            return self._symmetry.local_id
        return {n: str(d["local_id"]) for n, d in self.topology.graph.nodes(data=True)}

    @cached_property
    def server_nodes(self) -> dict[int, frozenset[str]]:
        """Server index -> its nodes (``-1``: the fabric's); per server when first read where
        the build record names them."""
        p = self._pattern
        if p is not None:
            return _OnDemand(partial(_pattern_nodes, p, frozenset))
        by_server: dict[int, set[str]] = {}
        for node, srv in self.server.items():
            by_server.setdefault(srv, set()).add(node)
        return {k: frozenset(v) for k, v in by_server.items()}

    @cached_property
    def by_local(self) -> dict[int, dict[str, str]]:
        """Server index -> {local id: node}; per server when first read, as
        :attr:`server_nodes`."""
        p = self._pattern
        if p is not None:
            return _OnDemand(partial(_pattern_by_local, p, self.topology.graph))
        out: dict[int, dict[str, str]] = {}
        lid = self.local_id
        for n, srv in self.server.items():
            out.setdefault(srv, {})[lid[n]] = n
        return out

    @cached_property
    def adjacency(self) -> dict[str, tuple[str, ...]]:
        """Node -> its neighbours, each node's entry made when first read (a search reads the
        nodes of two servers and the fabric, not the 30,000 nodes of a 16,384-GPU cluster)."""
        return _OnDemand(partial(_neighbours, self.topology.graph))

    @cached_property
    def adjacency_set(self) -> dict[str, frozenset[str]]:
        """Node -> its neighbours as a set (intersected with a search's allowed nodes); made
        per node when first read, as :attr:`adjacency`."""
        return _OnDemand(partial(_neighbour_set, self.adjacency))

    @cached_property
    def transit(self) -> frozenset[str]:
        """Nodes a path may cross (:data:`~perfmodel.topology.schema.TRANSIT_KINDS`); server
        0's by local id in every server where the build record describes the graph."""
        p = self._pattern
        if p is None:
            return frozenset(
                n for n, d in self.topology.graph.nodes(data=True) if d["kind"] in TRANSIT_KINDS
            )
        nodes = self.topology.graph.nodes
        first = [p.prefix(0) + lid for lid in p.local_ids]
        inside = [n for n in first if nodes[n]["kind"] in TRANSIT_KINDS]
        fabric = [n for n in p.fabric_nodes if nodes[n]["kind"] in TRANSIT_KINDS]
        return frozenset(self._in_every_server(inside)).union(fabric)

    @cached_property
    def rank(self) -> dict[str, int]:
        """Node -> its position in name order (the searches' last tie-break); per node when
        first read where the build record gives the order without sorting 30,000 names:
        server ``s``'s names ``n<s>/<local id>`` are one block (``/`` sorts before the
        digits), blocks in the order of their prefixes, local ids sorted inside, and every
        fabric name before them (checked; else all names are sorted)."""
        p = self._pattern
        if p is not None and p.local_ids:
            fabric = sorted(p.fabric_nodes)
            lids = sorted(p.local_ids)
            if all(f < p.prefix(0) + lids[0] for f in fabric):
                blocks = sorted(range(p.servers), key=p.prefix)
                return _OnDemand(
                    partial(
                        _pattern_rank,
                        self.server,
                        self.local_id,
                        {f: i for i, f in enumerate(fabric)},
                        {s: len(fabric) + i * len(lids) for i, s in enumerate(blocks)},
                        {x: i for i, x in enumerate(lids)},
                    )
                )
        return {n: i for i, n in enumerate(sorted(self.topology.graph.nodes, key=str))}

    @cached_property
    def no_p2p(self) -> frozenset[str]:
        """GPUs without PCIe peer-to-peer (:meth:`perfmodel.topology.Topology.p2p_capable`:
        the node's ``p2p`` flag, else its model's; asked once per model, not per GPU)."""
        topology = self.topology
        nodes = topology.graph.nodes
        by_model: dict[Any, bool] = {}
        out = []
        p = self._pattern
        # every server a copy of server 0 (attributes changed alike in every server): server
        # 0's GPUs answer for all
        for n in topology.gpus[: topology.gpus_per_node] if p is not None else topology.gpus:
            d = nodes[n]
            if d.get("p2p") is not None:
                ok = topology.p2p_capable(n)
            else:
                ok = by_model.get(d["model"])
                if ok is None:
                    ok = by_model[d["model"]] = topology.p2p_capable(n)
            if not ok:
                out.append(n)
        return frozenset(self._in_every_server(out) if p is not None else out)

    @cached_property
    def p2p_denied(self) -> Mapping[str, frozenset[str]]:
        """GPU -> local ids of the GPUs it refuses peer-to-peer with (read off server 0 where
        every server is its copy, as :attr:`no_p2p`: then a :class:`_DeniedInEveryServer`,
        answered per GPU asked, not a table of the 16,384 GPUs of 2,048 DGX-1)."""
        topology = self.topology
        nodes = topology.graph.nodes
        p = self._pattern
        gpus = topology.gpus[: topology.gpus_per_node] if p is not None else topology.gpus
        first = {n: frozenset(nodes[n]["p2p_denied"]) for n in gpus if nodes[n].get("p2p_denied")}
        if p is None or not first:
            return first
        lid = self.local_id
        return _DeniedInEveryServer(
            {lid[n]: v for n, v in first.items()}, p, self.server, lid, self._in_every_server
        )

    def _in_every_server(self, first: Iterable[str]) -> list[str]:
        """The nodes of every server with the local ids of ``first`` (nodes of server 0)."""
        p = self._pattern
        assert p is not None
        lid = self.local_id
        ids = [lid[n] for n in first]
        return [pre + x for pre in map(p.prefix, range(p.servers)) for x in ids] if ids else []

    @cached_property
    def _gpu_set(self) -> frozenset[str]:
        return frozenset(self.topology.gpus)

    @cached_property
    def _p2p_charges(self) -> dict[tuple[str, ...], float]:
        return {}

    def charge_p2p(self, hop: Sequence[str]) -> float:
        """The Intel P2P charge of a ring hop (:func:`perfmodel.comm.pcie_p2p.p2p_charge`),
        cached per hop: pass as ``charge`` to :func:`channel_rates`."""
        key = tuple(hop)
        hit = self._p2p_charges.get(key)
        if hit is None:
            from perfmodel.comm.pcie_p2p import p2p_charge

            hit = self._p2p_charges[key] = p2p_charge(self, key)
        return hit

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
            fams = {self._table.family[i] for i in self._ids_of(plain[2])} if plain else set()
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
        if self._pattern is None:
            return any(self._shm_pairs(gpus) for gpus in by_server.values())
        # Every server a copy of server 0, the P2P rule applied to its template (the build
        # record): a server's answer is its inside twin's for the same local ids where the
        # twin's routes to its CPUs stay inside (:meth:`_twin_route` then gives the server the
        # same ones), asked once per (twin, local ids), not for 2,048 x 56 pairs.
        lid, twin = self.local_id, self._symmetry.twin
        shapes: dict[tuple[int, frozenset[str]], list[int]] = {}
        for srv, gpus in by_server.items():
            shapes.setdefault(
                (twin.get(srv, srv), frozenset(map(lid.__getitem__, gpus))), []
            ).append(srv)
        for (t, ids), servers in shapes.items():
            base = self.by_local[t]
            got = self._shm_pairs([base[x] for x in sorted(ids)])
            if any(s != t for s in servers) and not self._cpu_routes_inside(t):
                got = any(self._shm_pairs(by_server[s]) for s in servers)
            if got:
                return True
        return False

    def _shm_pairs(self, gpus: Sequence[str]) -> bool:
        """Whether two of ``gpus`` (of one server) talk through host memory."""
        return any(self.shm_cpu(a, b) is not None for a in gpus for b in gpus if a != b)

    def _cpu_routes_inside(self, server: int) -> bool:
        """Whether every route :meth:`shm_cpu` asked for so far from a GPU of ``server`` to a CPU
        stays inside the server (:meth:`_stays_inside`)."""
        srv = self.server
        return all(
            self._stays_inside(a, b, path)
            for (a, b), path in list(self._routes.items())
            if srv[a] == server == srv[b] and b not in self._gpu_set and a in self._gpu_set
        )

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        """Minimum-hop, widest route ``src -> dst`` (the rule of :func:`perfmodel.topology.route`),
        searched only inside the two endpoints' servers and the fabric, and cached.

        Equivalent to the topology's route on cluster graphs (a minimum-hop path between two
        servers never enters a third one) and much faster on 1000-GPU clusters. Between nodes
        of interchangeable servers the route is read off the same local ids in the first
        servers of their classes and mapped back
        (:meth:`perfmodel.topology.symmetry.ServerSymmetry.pair_route`; issue 14: a cluster of
        identical servers is routed once per shape, not 2,048 times): the exchange keeps the
        name order of the servers searched and of the fabric, so every comparison of the
        search, tie-breaks by node name included, comes out the same. A route inside one
        server is first read off the server's inside twin where it provably stays inside
        (:meth:`_twin_route`: servers on other fat-tree leaves are no class of server 0's).
        """
        key = (src, dst)
        hit = self._routes.get(key)
        if hit is not None:
            return hit
        if src == dst:
            return (src,)
        path = None
        if self.server[src] == self.server[dst]:
            path = self._twin_route(src, dst)
        if path is None:
            path = self._symmetry.pair_route(src, dst, self._canonical_route)
        if path is None:
            path = self._searched_route(src, dst)
        self._routes[key] = path
        return path

    @cached_property
    def _symmetry(self) -> ServerSymmetry:
        return server_symmetry(self.topology)

    def _canonical_route(self, src: str, dst: str) -> tuple[str, ...] | None:
        """:meth:`route` of a pair that is its own image under the server symmetry, or ``None``
        where the search fell back to the whole graph (a path through a third server, whose
        name order the exchange need not keep: not to be mapped)."""
        path = self.route(src, dst)
        return None if (src, dst) in self._fallback else path

    def _twin_route(self, src: str, dst: str) -> tuple[str, ...] | None:
        """The route ``src -> dst`` inside one server as its inside twin's route between the
        nodes of the same local ids, renamed
        (:meth:`perfmodel.topology.symmetry.ServerSymmetry.twin_map`); ``None`` where that is
        not provably the search's answer.

        Exact when the twin's route stays inside the twin and is shorter than any path that
        leaves the server and comes back (:meth:`_stays_inside`; the server has links leaving
        it only where the twin has, so the bound holds for both). Then every minimum-hop path
        of the search is inside the server, where both servers are the same graph with the same
        attributes, and the tie-breaks (width, latency, node names) order the renamed nodes
        alike.
        """
        fwd = self._symmetry.twin_map(self.server[src])
        if fwd is None:
            return None
        zs, zd = fwd[src], fwd[dst]
        try:
            base = self.route(zs, zd)
        except PerfModelError:  # no route in the twin: let the search name this server's nodes
            return None
        if not self._stays_inside(zs, zd, base):
            return None
        back = {v: k for k, v in fwd.items()}
        return tuple([back[n] for n in base])

    def _stays_inside(self, src: str, dst: str, path: tuple[str, ...]) -> bool:
        """Whether the searched route ``path`` (``src -> dst``, both in one server) is inside
        the server and shorter than any path leaving it: such a path leaves through a node
        ``x`` with a link out of the server and comes back through another one ``y``, so it
        has at least ``d(src, x) + 2 + d(y, dst)`` hops (distances inside the server, through
        transit nodes). Pairs of GPUs without peer-to-peer (their route goes through host
        memory) are left to the search."""
        key = (src, dst)
        hit = self._inside_ok.get(key)
        if hit is not None:
            return hit
        ok = False
        server = self.server[src]
        home = self.server_nodes.get(server, frozenset())
        both_gpus = src in self._gpu_set and dst in self._gpu_set
        if (
            key not in self._fallback
            and all(n in home for n in path)
            and not (both_gpus and (self.no_p2p or self.p2p_denied))
        ):
            exits = self._symmetry.exits[server]
            d_src = self._inside_distances(src)
            d_dst = self._inside_distances(dst)
            transit = self.transit
            outs = [(d_src[x], x) for x in exits if x in d_src and (x == src or x in transit)]
            ins = [(d_dst[y], y) for y in exits if y in d_dst and (y == dst or y in transit)]
            bound = min(
                (dx + 2 + dy for dx, x in outs for dy, y in ins if x != y), default=math.inf
            )
            ok = len(path) - 1 < bound
        self._inside_ok[key] = ok
        return ok

    def _inside_distances(self, start: str) -> dict[str, int]:
        """Hop distances from ``start`` inside its server, through transit nodes only."""
        srv = self.server_nodes[self.server[start]]
        adj, transit = self.adjacency, self.transit
        dist = {start: 0}
        q = deque([start])
        while q:
            u = q.popleft()
            if u != start and u not in transit:
                continue
            for v in adj[u]:
                if v in srv and v not in dist:
                    dist[v] = dist[u] + 1
                    q.append(v)
        return dist

    def _searched_route(self, src: str, dst: str) -> tuple[str, ...]:
        """The search behind :meth:`route` (uncached)."""
        a, b = self.server[src], self.server[dst]
        fabric = self.server_nodes.get(-1, frozenset())
        kinds = self.topology.graph.nodes
        if a != b and kinds[src]["kind"] is NodeKind.NIC and kinds[dst]["kind"] is NodeKind.NIC:
            return self._fabric_route(src, dst, fabric)
        if a == b:
            allowed = self._inside.get(a)
            if allowed is None:
                allowed = self._inside[a] = self.server_nodes.get(a, frozenset()) | fabric
        else:
            allowed = self.server_nodes.get(a, frozenset()) | self.server_nodes.get(b, frozenset())
            allowed = allowed | fabric
        res = _min_hop_widest(self, None, src, dst, allowed, per_unit=False)
        if res is not None:
            return res[2]
        self._fallback.add((src, dst))
        return route(self.topology, src, dst)

    def _fabric_route(
        self, src: str, dst: str, fabric: frozenset[str], pattern: tuple[Any, ...] | None = None
    ) -> tuple[str, ...]:
        """Route between NICs of two servers, through the fabric only.

        The search's answer depends on the fabric, on which fabric nodes each NIC is linked to
        and on those links' capacity and latency, not on the NICs' names (no other NIC may be
        crossed, and the NICs' own names never enter a tie-break: ``src`` is only the end of
        the path, ``dst`` the only node at distance 0). So the switches between are memoised
        by that pattern: 16,384 ring hops over 8 rails are 8 searches, not 16,384.
        ``pattern``: :meth:`_fabric_pattern` of the pair where the caller has it."""
        if pattern is None:
            pattern = self._fabric_pattern(src, dst, fabric)
        inner = self._fabric_inner.get(pattern)
        if inner is not None:
            return (src, *inner, dst)
        key, labels = self._fabric_class(pattern)
        hit = self._fabric_classes.get(key)
        if hit is not None:
            back = {lab: f for f, lab in labels.items()}
            inner = self._fabric_inner[pattern] = tuple(
                back[x] if type(x) is tuple else x for x in hit
            )
            return (src, *inner, dst)
        # the search over the nodes of the minimum-hop paths only: the same answer (see
        # _min_hop_span), without walking every leaf from each spine of a fat tree
        span = _min_hop_span(self, src, dst, fabric | {src, dst})
        res = None if span is None else _min_hop_widest(self, None, src, dst, span, per_unit=False)
        if res is None:
            self._fallback.add((src, dst))
            return route(self.topology, src, dst)
        inner = self._fabric_inner[pattern] = res[2][1:-1]
        side_keys = {lab[0] for lab in labels.values()}
        if len(span) == len(res[2]) and all(  # type: ignore[arg-type]
            f in labels or self._fabric_key(f) not in side_keys for f in inner
        ):
            self._fabric_classes[key] = tuple(labels.get(f, f) for f in inner)
        return res[2]

    def _fabric_class(
        self, pattern: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], dict[str, tuple[Any, int]]]:
        """A :meth:`_fabric_pattern` up to a relabelling of the fabric (issue 14: the 1,640
        leaf pairs of a 2,048-server fat tree are one search, not one each): ``(key, labels)``,
        each fabric node of the two sides labelled ``(its key, k)`` (:meth:`_fabric_key`; the
        ``k``-th distinct node of that key in the sides' order).

        Exact where the search found exactly one minimum-hop path (the span of
        :func:`_min_hop_span` is the path: no width, latency or name tie-break chose it) whose
        other switches have keys no side node has (:meth:`_fabric_route` stores only those).
        Two fabric nodes of one key have the same fabric neighbours by name, with the same
        link attributes, and are not linked to each other, so exchanging them fixes every other
        node and maps the fabric onto itself; two patterns of one class differ by such
        exchanges among their side nodes (which fix the path's other switches) and link their
        NICs to the mapped nodes alike. Breadth-first distances, hence the one minimum-hop path,
        map with them."""
        labels: dict[str, tuple[Any, int]] = {}
        count: dict[tuple[Any, ...], int] = {}
        sides = []
        for side in pattern[:2]:
            out = []
            for f, *attrs in side:
                lab = labels.get(f)
                if lab is None:
                    k = self._fabric_key(f)
                    lab = labels[f] = (k, count.get(k, 0))
                    count[k] = lab[1] + 1
                out.append((lab, *attrs))
            sides.append(tuple(out) if len(out) < 2 else tuple(sorted(out, key=repr)))
        return (*sides, pattern[2]), labels

    def _fabric_key(self, f: str) -> tuple[Any, ...]:
        """What a fabric route search reads of fabric node ``f`` and its links to other fabric
        nodes: its attributes but its name (``local_id``) and, sorted, each fabric neighbour
        with the attributes of the link that :class:`_LinkTable` reads (cached per node)."""
        hit = self._fabric_keys.get(f)
        if hit is None:
            fabric = self.server_nodes.get(-1, frozenset())
            adj = self._table._adj[f]
            nbrs = sorted((v, *(adj[v][a] for a in _LINK_KEYS)) for v in fabric.intersection(adj))
            attrs = self.topology.graph.nodes[f]
            node = sorted((a, repr(x)) for a, x in attrs.items() if a != "local_id")
            hit = self._fabric_keys[f] = (tuple(node), tuple(nbrs))
        return hit

    def _fabric_pattern(self, src: str, dst: str, fabric: frozenset[str]) -> tuple[Any, ...]:
        """What :meth:`_fabric_route`'s answer depends on: the fabric nodes ``src`` and ``dst``
        are linked to, with those links' capacity and latency, and whether they are linked."""
        p, srv = self._pattern, self.server
        a, b = srv[src], srv[dst]
        # the build record's servers are never linked to one another: not read off the graph
        # (which would make both servers)
        apart = p is not None and a != b and 0 <= a < p.servers and 0 <= b < p.servers
        return (
            self._fabric_side(src, fabric),
            self._fabric_side(dst, fabric),
            False if apart else dst in self.adjacency_set[src],
        )

    def fabric_neighbours(self, x: str, fabric: frozenset[str]) -> frozenset[str]:
        """The fabric nodes ``x`` is linked to: read off the build record's fabric attachments
        (:attr:`~perfmodel.topology.model.ReplicaPattern.attach`: every link from a server to
        the fabric) for a node of a recorded server, without making the server in the graph."""
        p = self._pattern
        s = self.server[x]
        if p is not None and 0 <= s < p.servers:
            lid = self.local_id[x]
            return frozenset(f for x_lid, f, _ in p.attach[s] if x_lid == lid)
        return self.adjacency_set[x] & fabric

    def _fabric_side(self, x: str, fabric: frozenset[str]) -> tuple[tuple[Any, ...], ...]:
        """The fabric nodes ``x`` is linked to, with those links' capacity and latency (the
        same both ways), sorted; cached per node (a NIC ends a ring hop out and one in)."""
        hit = self._fabric_sides.get(x)
        if hit is None:
            # the values, without numbering 2 x 16,384 NIC links; read from the fabric end (a
            # fabric node's links are there without making the NIC's server)
            kind = self._table.kind
            hit = self._fabric_sides[x] = tuple(
                sorted(
                    (f, *(c[0] for c in kind(f, x)[:2])) for f in self.fabric_neighbours(x, fabric)
                )
            )
        return hit

    def _attach_sides(self, server: int) -> dict[str, tuple[tuple[Any, ...], ...]] | None:
        """``{local id: its node's :meth:`_fabric_side`}`` for the nodes of ``server`` linked
        to the fabric, read off the build record's attachments (one pass over the server's
        fabric links, without its node names' tables or the server made); ``None`` outside the
        record's servers. Servers of one attachment share the answer."""
        p = self._pattern
        if p is None or not 0 <= server < p.servers:
            return None
        att = p.attach[server]
        hit = self._sides_by_attach.get(att)
        if hit is None:
            prefix, kind = p.prefix(server), self._table.kind
            by_lid: dict[str, dict[str, tuple[Any, ...]]] = {}
            for lid, f, _ in att:
                by_lid.setdefault(lid, {})[f] = (f, *(c[0] for c in kind(f, prefix + lid)[:2]))
            hit = self._sides_by_attach[att] = {
                lid: tuple(sorted(fs.values())) for lid, fs in by_lid.items()
            }
        return hit

    def _hops_from(self, src: str, targets: Sequence[str]) -> dict[str, int]:
        """Hop counts of minimum-hop paths from ``src`` to nodes of its server and of the
        fabric, through transit nodes (the set and the rule of :meth:`route` inside a server),
        searched until every one of ``targets`` is reached (a breadth-first search reaches a
        node first at its distance): the rest of a 2,048-server fabric is not walked."""
        allowed = self._inside.get(self.server[src])
        if allowed is None:
            fabric = self.server_nodes.get(-1, frozenset())
            allowed = self.server_nodes[self.server[src]] | fabric
            self._inside[self.server[src]] = allowed
        adj_set, transit = self.adjacency_set, self.transit
        dist = {src: 0}
        left = set(targets) - {src}
        q = deque([src])
        while q and left:
            u = q.popleft()
            if u != src and u not in transit:
                continue
            du = dist[u] + 1
            for v in adj_set[u] & allowed:
                if v not in dist:
                    dist[v] = du
                    q.append(v)
                    left.discard(v)
        return dist

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
        return list(self._ids_of(path))

    def _ids_of(self, path: Sequence[str]) -> tuple[int, ...]:
        """:meth:`path_ids` as a tuple, memoised per path (the hops of a 16,384-rank ring are
        asked for their links, latency and class)."""
        key = path if type(path) is tuple else tuple(path)
        hit = self._ids.get(key)
        if hit is None:
            succ = self._table.succ
            hit = self._ids[key] = tuple([succ[a][b] for a, b in itertools.pairwise(key)])
        return hit

    def path_latency(self, path: Sequence[str]) -> float:
        """Sum of the latencies (s) along a node path."""
        alpha = self.alpha_list
        return float(sum(alpha[i] for i in self._ids_of(path)))

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
        ids = self._ids_of(path)
        if not self._table.has_extra:  # RDMA and NVLink only: every term is 0.0
            return 0.0
        extra = self._table.extra
        return float(sum(extra[i] for i in ids))

    def path_bandwidth(self, path: Sequence[str]) -> float:
        """Bottleneck capacity (bytes/s) of a node path (``inf`` for a zero-hop path)."""
        ids = self._ids_of(path)
        cap = self.capacity_list
        return float(min(cap[i] for i in ids)) if ids else float("inf")

    def hw_class(self, path: Sequence[str]) -> HwClass:
        """NCCL transport class of a path: network if it crosses a NIC port, NVLink if all NVLink."""
        key = path if type(path) is tuple else tuple(path)
        hit = self._classes.get(key)
        if hit is not None:
            return hit
        family = self._table.family
        fams = {family[i] for i in self._ids_of(key)}
        if fams & _NET_FAMILIES:
            cls = HwClass.NET
        elif fams and fams <= _NVLINK_FAMILIES:
            cls = HwClass.NVLINK
        else:
            cls = HwClass.PCI
        self._classes[key] = cls
        return cls


class _DeniedInEveryServer(Mapping[str, frozenset[str]]):
    """:attr:`DirectedLinks.p2p_denied` of a cluster whose servers are copies of server 0: GPU
    ``n`` of a recorded server refuses what server 0's GPU of its local id refuses
    (``by_local``). Lookups and ``in`` answer per GPU; iteration, ``len`` and comparison see
    the table of every server (in :meth:`DirectedLinks._in_every_server`'s order)."""

    def __init__(
        self,
        by_local: dict[str, frozenset[str]],
        pattern: ReplicaPattern,
        server: Mapping[str, int],
        local_id: Mapping[str, str],
        every: Callable[[Iterable[str]], list[str]],
    ) -> None:
        self._by_local = by_local
        self._pattern = pattern
        self._server = server
        self._local_id = local_id
        self._first = [pattern.prefix(0) + x for x in by_local]
        self._every = every

    def __getitem__(self, node: str) -> frozenset[str]:
        s = self._server.get(node, -1) if isinstance(node, str) else -1
        if not 0 <= s < self._pattern.servers:
            raise KeyError(node)
        return self._by_local[self._local_id[node]]  # KeyError: a GPU refusing nothing

    def __contains__(self, node: object) -> bool:
        try:
            self[node]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._every(self._first))

    def __len__(self) -> int:
        return self._pattern.servers * len(self._by_local)


def _neighbours(graph: Any, node: str) -> tuple[str, ...]:
    return tuple(graph.adj[node])


def _neighbour_set(adjacency: dict[str, tuple[str, ...]], node: str) -> frozenset[str]:
    return frozenset(adjacency[node])


class _OnDemand(dict):  # type: ignore[type-arg]
    """A mapping whose value for a key is ``make(key)``, computed on the first ``[key]`` or
    ``get`` and kept (a missing key raises what ``make`` raises: ``KeyError`` for a node not in
    the graph; ``get`` then returns its default). Read by subscript or ``get`` only: ``in``,
    ``len`` and iteration see the entries made so far."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self._make(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def _pattern_nodes(pattern: ReplicaPattern, wrap: Callable[[Any], Any], server: int) -> Any:
    """``wrap`` of the nodes of ``server`` (``-1``: the fabric) in graph order, read off the
    build record; ``KeyError`` for a server the record does not have (as a table without it)."""
    if 0 <= server < pattern.servers:
        prefix = pattern.prefix(server)
        return wrap([prefix + lid for lid in pattern.local_ids])
    if server == -1 and pattern.fabric_nodes:
        return wrap(list(pattern.fabric_nodes))
    raise KeyError(server)


def _pattern_rank(
    server: Mapping[str, int],
    local_id: Mapping[str, str],
    fabric: Mapping[str, int],
    block: Mapping[int, int],
    within: Mapping[str, int],
    node: str,
) -> int:
    """Name-order position of ``node`` (see :attr:`DirectedLinks.rank`)."""
    s = server[node]
    return fabric[node] if s < 0 else block[s] + within[local_id[node]]


def _pattern_by_local(pattern: ReplicaPattern, graph: Any, server: int) -> dict[str, str]:
    """{local id: node} of ``server`` (``-1``: the fabric): server ``s``'s node of local id
    ``x`` is ``n<s>/<x>`` (:class:`~perfmodel.topology.model.ReplicaPattern`)."""
    if 0 <= server < pattern.servers:
        prefix = pattern.prefix(server)
        return {lid: prefix + lid for lid in pattern.local_ids}
    data = graph.nodes
    return {str(data[n]["local_id"]): n for n in _pattern_nodes(pattern, list, server)}


class _LinkTable:
    """Directed link ids and their columns, an id made for a link when first asked for.

    ``succ[u][v]`` is the id of link ``u -> v``: the first lookup of either direction of a
    graph edge gives ``u -> v`` the next even id ``2k`` and ``v -> u`` ``2k + 1`` and appends
    both to the columns (a ``KeyError`` where ``u`` and ``v`` are not linked). A ring over
    2,048 servers reads one server's links and a few fabric links, not the 184,336 directed
    links of the cluster (issue 14: cost flat in cluster size). :meth:`complete` gives every
    remaining edge its ids in graph edge order (networkx's ``Graph.edges``: each node's
    adjacency in insertion order, an edge at its first end), so a table completed before any
    lookup numbers graph edge ``k`` as ``2k, 2k + 1``.

    Per link (the columns, by id): effective bandwidth ``bandwidth_Bps x efficiency`` (or
    ``count x`` the class override), latency ``latency_s`` (or the override), the latency
    NCCL's tables do not contain (:meth:`DirectedLinks.extra_latency`), the unit count (int and
    float), the bandwidth per unit and the family; links with the same attributes share one
    computation (:func:`_link_kind`). The values do not depend on the id order, and neither do
    the max-min rates (:func:`~perfmodel.comm.maxmin.maxmin_rates` sums each link's load over
    its entries in entry order and takes minima).
    """

    def __init__(self, graph: Any, link_params: LinkParams) -> None:
        self._adj: dict[str, dict[str, dict[str, Any]]] = graph._adj  # plain dicts (hot path)
        self._params = link_params
        self._kinds: dict[tuple[Any, ...], tuple[tuple[Any, Any], ...]] = {}
        self.edges: list[tuple[str, str]] = []
        self.capacity: list[float] = []
        self.alpha: list[float] = []
        self.extra: list[float] = []
        self.units: list[int] = []
        self.unit_count: list[float] = []
        self.unit_capacity: list[float] = []
        self.family: list[LinkFamily] = []
        #: whether some link numbered or looked up (:meth:`kind`) so far has latency outside
        #: NCCL's tables
        self.has_extra = False
        self.succ: dict[str, dict[str, int]] = _LinkRows(self)
        self._array: np.ndarray | None = None
        self._complete = False

    def kind(self, u: str, v: str) -> tuple[tuple[Any, Any], ...]:
        """The column values of link ``u -> v``, each twice (both directions), in the order
        capacity, latency, extra latency, units, units as float, capacity per unit, family;
        without numbering the link (``KeyError`` where ``u`` and ``v`` are not linked)."""
        d = self._adj[u][v]
        key = (
            d["tech"],
            d["family"],
            d["count"],
            d["bandwidth_Bps"],
            d["efficiency"],
            d["latency_s"],
        )
        kind = self._kinds.get(key)
        if kind is None:
            cap, lat, extra, n, family = _link_kind(self._params, *key)
            kind = self._kinds[key] = tuple(
                (x, x) for x in (cap, lat, extra, n, float(n), cap / n, family)
            )
            if extra:
                self.has_extra = True
        return kind

    def add(self, u: str, v: str) -> int:
        """Give ``u -> v`` and ``v -> u`` (not yet numbered) their ids; returns ``u -> v``'s."""
        kind = self.kind(u, v)
        k = len(self.edges)
        succ = self.succ
        succ[u][v] = k
        succ[v][u] = k + 1
        self.edges += ((u, v), (v, u))
        self.capacity += kind[0]
        self.alpha += kind[1]
        self.extra += kind[2]
        self.units += kind[3]
        self.unit_count += kind[4]
        self.unit_capacity += kind[5]
        self.family += kind[6]
        return k

    def complete(self) -> None:
        """Give every edge of the graph its ids (the rest in graph edge order)."""
        if self._complete:
            return
        seen: set[str] = set()
        succ = self.succ
        for u, nbrs in self._adj.items():
            row = succ[u]
            for v in nbrs:
                if v not in seen and v not in row:
                    self.add(u, v)
            seen.add(u)
        self._complete = True

    def capacity_array(self) -> np.ndarray:
        """:attr:`capacity` as an array (remade when ids were added since)."""
        if self._array is None or len(self._array) != len(self.capacity):
            import numpy as np

            self._array = np.asarray(self.capacity, dtype=float)
        return self._array


class _LinkRows(dict):  # type: ignore[type-arg]
    """``succ`` of a :class:`_LinkTable`: node -> its :class:`_LinkRow`, made on first read
    (``KeyError`` for a node not in the graph)."""

    __slots__ = ("_table",)

    def __init__(self, table: _LinkTable) -> None:
        super().__init__()
        self._table = table

    def __missing__(self, u: str) -> _LinkRow:
        if u not in self._table._adj:
            raise KeyError(u)
        row = self[u] = _LinkRow()
        row._table = self._table
        row._node = u
        return row


class _LinkRow(dict):  # type: ignore[type-arg]
    """``succ[u]`` of a :class:`_LinkTable`: neighbour -> link id, numbered on first read."""

    __slots__ = ("_node", "_table")
    _node: str
    _table: _LinkTable

    def __missing__(self, v: str) -> int:
        return self._table.add(self._node, v)


def _link_kind(
    link_params: LinkParams,
    tech: Any,
    family: LinkFamily,
    count: Any,
    bandwidth_Bps: Any,
    efficiency: Any,
    latency_s: Any,
) -> tuple[float, float, float, int, LinkFamily]:
    """(capacity B/s, latency s, latency outside NCCL's tables s, units, family) of a link with
    these attributes (:meth:`_LinkTable.add`)."""
    over = link_params.lookup(tech, family)
    n = int(count)
    bw = float(bandwidth_Bps) * float(efficiency)
    lat = float(latency_s)
    socket = _is_socket(tech)
    if over is not None:
        if over.bandwidth_Bps is not None:
            bw = over.bandwidth_Bps * n
        if over.alpha_s is not None:
            lat = over.alpha_s
            socket = True  # a calibrated latency is charged as given
    return bw, lat, lat if socket else 0.0, n, family


@dataclass(frozen=True)
class Channel:
    """One ring: ranks in order and the node path of every hop ``order[i] -> order[i+1 mod n]``."""

    order: tuple[str, ...]
    hops: tuple[tuple[str, ...], ...]


@cache
def _is_socket(tech: str) -> bool:
    """Whether a link technology is reached through TCP sockets (catalogue ``protocol``): the
    kernel stack (``tcp``) or Google's GPUDirect-TCPX/TCPXO plugins (``tcpx``, ``tcpxo``), which
    keep TCP's per-message stack latency (a 2-VM A3 Mega 8-byte all-reduce: ~122 us,
    tests/fixtures/nccl/a3mega-h100-2node-all_reduce.txt) while moving payloads to and from GPU
    memory: their latency is charged as given, outside NCCL's tables."""
    from perfmodel.hardware.links import find_link

    link = find_link(str(tech))
    return link is not None and link.protocol.lower() in _SOCKET_PROTOCOLS


#: Catalogue ``protocol`` values that reach the network through TCP sockets.
_SOCKET_PROTOCOLS = frozenset({"tcp", "tcpx", "tcpxo"})


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
    try:
        if len(set(members)) == len(members) and all_gpus(topology, members):
            return members  # distinct GPUs: nothing to name (a set test, not a read per node)
    except TypeError:  # an unhashable member: named below
        pass
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


@lru_cache(maxsize=16)
def _gpu_names(topology: Topology) -> frozenset[str]:
    return frozenset(topology.gpus)


def all_gpus(topology: Topology, members: Iterable[str]) -> bool:
    """Whether every member is a GPU of ``topology`` (one set test per group, no node read)."""
    return _gpu_names(topology).issuperset(members)


def _min_hop_span(
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
    (its 820 leaves are not walked). :func:`_min_hop_widest` over these nodes gives its answer over ``allowed``: its
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


def _min_hop_widest(
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
            up = _min_hop_widest(links, residual, src, cpu, allowed, per_unit=per_unit)
            down = _min_hop_widest(links, residual, cpu, dst, allowed, per_unit=per_unit)
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
    """The breadth-first part of :func:`_min_hop_widest`, which no residual or bandwidth
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
    :func:`_min_hop_widest` over the whole server.

    NCCL searches a server's rings over NVLink paths before PCI paths, whatever the speed
    (``ncclTopoCompute`` tries ``PATH_NVL`` before ``PATH_PIX``... ``PATH_SYS``): a GB200 hop
    between the two GPUs of one superchip stays on NVLink although the path through their
    Grace CPU (NVLink-C2C) has as many hops and a wider single unit. Without an NVLink path
    (or with its units spent) the search is the general one, unchanged (issue 25).
    """
    if allowed is not None:
        nvl = _nvlink_nodes(links, allowed)
        if a in nvl and b in nvl:
            res = _min_hop_widest(links, residual, a, b, nvl)
            if res is not None and res[0] >= 1:
                return res
    return _min_hop_widest(links, residual, a, b, allowed)


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
    totals are exact whatever the order of addition.
    """
    n = len(w)
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


def _nics_of(topology: Topology, server: int) -> tuple[str, ...]:
    """The server's NICs with a fabric port, sorted."""
    return _fabric_nics(topology).get(server, ())


@lru_cache(maxsize=16)
def _fabric_nics(topology: Topology) -> Mapping[int, tuple[str, ...]]:
    """Server -> its NICs with a fabric port, sorted: per server when first asked, from the
    build record's fabric attachments where there is one, else one pass over the graph (cached
    per topology), not one per server asked."""
    p = topology.pattern
    if p is not None and p.describes(topology):
        return _OnDemand(partial(_attached_nics, topology, p))
    g = topology.graph
    server = dict(g.nodes(data="server"))
    adj = g.adj
    by_server: dict[int, list[str]] = {}
    for n, kind in g.nodes(data="kind"):
        if kind is NodeKind.NIC and any(server[v] == -1 for v in adj[n]):
            by_server.setdefault(server[n], []).append(n)
    return {srv: tuple(sorted(nics, key=str)) for srv, nics in by_server.items()}


def _attached_nics(topology: Topology, pattern: ReplicaPattern, server: int) -> tuple[str, ...]:
    """The NICs of ``server`` among its fabric attachments
    (:attr:`~perfmodel.topology.model.ReplicaPattern.attach`: every link from the server to a
    fabric node), sorted; ``KeyError`` outside the record's servers."""
    if not 0 <= server < pattern.servers:
        raise KeyError(server)
    prefix = pattern.prefix(server)
    nodes = topology.graph.nodes
    names = {prefix + lid for lid, _, _ in pattern.attach[server]}
    return tuple(sorted((n for n in names if nodes[n]["kind"] is NodeKind.NIC), key=str))


def split_by_server(
    topology: Topology, members: Sequence[str], server: Mapping[str, int] | None = None
) -> list[list[str]]:
    """Members grouped by server, servers in order of first appearance, members in given order
    (``server``: node -> server index where the caller has it, e.g. :attr:`DirectedLinks.server`).
    """
    groups: dict[int, list[str]] = {}
    if server is None:
        nodes = topology.graph.nodes
        for m in members:
            groups.setdefault(int(nodes[m]["server"]), []).append(m)
    else:
        # runs of one server at a time (a group in rank order is one run per server)
        for srv, run in itertools.groupby(members, key=server.__getitem__):
            part = groups.get(srv)
            if part is None:
                groups[srv] = list(run)
            else:
                part.extend(run)
    return list(groups.values())


@dataclass(frozen=True)
class _RingPlan:
    """What :func:`build_channels` decides on the first server of a group spanning servers.

    ``parts``: members by server (:func:`split_by_server`); ``first``: the ring channels of the
    first part (:func:`pack_rings`, or the lone member); ``choices[c]``: channel ``c``'s rotation
    of its intra-server ring and its exit and entry NIC (names in the first server, ``None``
    where the server has no fabric NIC); ``local_of``: NIC -> local id.
    """

    parts: list[list[str]]
    first: tuple[Channel, ...]
    choices: tuple[tuple[int, str | None, str | None], ...]
    local_of: dict[str, str]


def _ring_plan(links: DirectedLinks, parts: list[list[str]], max_channels: int) -> _RingPlan:
    """The channel count, rotations and NICs of :func:`build_channels` (first server only)."""
    topo = links.topology
    first_part = parts[0]
    first = (
        (Channel((first_part[0],), ()),)
        if len(first_part) == 1
        else pack_rings(links, first_part, max_channels=max_channels)
    )
    nics = _nics_of(topo, topo.server_of(first_part[0]))
    n_rings = max(
        1 if len(p) == 1 else len(pack_rings(links, p, max_channels=max_channels))
        for p in _distinct_shapes(links, parts)
    )
    n_ch = max(n_rings, len(nics), 1)
    if nics:  # a multiple of the NIC count, so that every NIC carries as many channels
        n_ch = -(-n_ch // len(nics)) * len(nics)
    n_ch = min(max_channels, n_ch)
    near = {m: _near_nics(links, m, nics) for m in first_part}
    out_load = dict.fromkeys(nics, 0)
    in_load = dict.fromkeys(nics, 0)
    local_of = {n: topo.graph.nodes[n]["local_id"] for n in nics}
    choices: list[tuple[int, str | None, str | None]] = []
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
        choices.append((rot, exit_nic, entry_nic))
    return _RingPlan(parts, first, tuple(choices), local_of)


def _distinct_shapes(links: DirectedLinks, parts: list[list[str]]) -> list[list[str]]:
    """One part per local-id sequence (the parts :func:`build_channels` packs; the others are
    remapped copies with as many rings)."""
    seen: dict[tuple[str, ...], list[str]] = {}
    for part in parts:
        seen.setdefault(tuple(map(links.local_id.__getitem__, part)), part)
    return list(seen.values())


def build_channels(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> tuple[Channel, ...]:
    """Ring channels over a group that may span servers (see the module docstring)."""
    topo = links.topology
    parts = split_by_server(topo, members)
    if len(parts) == 1:
        return pack_rings(links, members, max_channels=max_channels)
    plan = _ring_plan(links, parts, max_channels)
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
    local_of = plan.local_of
    channels: list[Channel] = []
    for c, (rot, exit_nic, entry_nic) in enumerate(plan.choices):
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
    # one breadth-first search gives the hop count of every NIC's route (minimum-hop routes in
    # the GPU's server and the fabric, the set DirectedLinks.route searches)
    reach = links._hops_from(gpu, nics)
    dist = {nic: reach[nic] if nic in reach else len(links.route(gpu, nic)) - 1 for nic in nics}
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
    ``dst``'s server with the same local id as ``entry_nic`` (NCCL assigns a NIC per channel);
    the plain route where no NIC is given or found, or the NIC path passes a node twice."""
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


#: Incidence entries above which :func:`channel_rates` runs numpy's progressive filling
#: (:func:`~perfmodel.comm.maxmin.maxmin_rates`) instead of the plain-Python one: the same rates
#: bit for bit either way, so only the speed depends on it. The analytic predictions' groups
#: have 48-416 entries (GPT-3 175B on 128 DGX A100, 32 GPUs of 4 DGX-1); measured on the
#: 2-core machine, plain Python takes 0.06 / 0.17 / 1.2 ms at 100 / 300 / 1,000 entries and
#: numpy 0.11 / 0.11 / 0.32 ms, its import ~0.1-0.25 s once per process.
SMALL_ENTRIES = 512


def channel_rates(
    links: DirectedLinks,
    channels: Sequence[Channel],
    charge: Callable[[tuple[str, ...]], float] | None = None,
) -> list[float]:
    """Steady-state max-min fair rate (bytes/s) of each channel, all hops of a channel at one rate.

    ``charge(hop)`` (default 1): how many bytes of link capacity a hop spends per byte it moves,
    on every link of that hop (the Intel P2P charge, :func:`perfmodel.comm.pcie_p2p.p2p_charge`):
    a lone channel runs at ``min over its links of capacity / (sum of its hops' charges there)``,
    so only the charged hops' links are slowed.

    A channel's multiplicity on a link is ``0.0`` plus its hops' charges there in hop order
    (``numpy.bincount``'s sum); the entries go to the filling sorted by (channel, link id).
    Up to :data:`SMALL_ENTRIES` of them in plain Python
    (:func:`~perfmodel.comm.maxmin.maxmin_rates_small`), above with numpy: the same numbers.
    """
    ids_of = links._ids_of
    merged: dict[tuple[int, int], float] = {}
    for c, ch in enumerate(channels):
        for hop in ch.hops:
            weight = 1.0 if charge is None else float(charge(hop))
            for e in ids_of(hop):
                key = (c, e)
                merged[key] = merged.get(key, 0.0) + weight
    if not merged:
        return [math.inf] * len(channels)
    keys = sorted(merged)
    fi = [c for c, _ in keys]
    ei = [e for _, e in keys]
    return _fill(fi, ei, [merged[k] for k in keys], links.capacity_list, len(channels))


def _fill(
    fi: list[int], ei: list[int], mult: list[float], capacity: Sequence[float], n: int
) -> list[float]:
    """Max-min fair rates of ``n`` flows with incidence entries ``(fi, ei, mult)`` over
    resources of ``capacity`` (bytes/s): plain Python up to :data:`SMALL_ENTRIES` entries,
    numpy above (the same rates bit for bit, :mod:`perfmodel.comm.maxmin`)."""
    if len(fi) <= SMALL_ENTRIES:
        return maxmin_rates_small(fi, ei, mult, capacity, n)
    import numpy as np

    from perfmodel.comm.maxmin import maxmin_rates

    rates = maxmin_rates(
        np.asarray(fi, dtype=np.int64),
        np.asarray(ei, dtype=np.int64),
        np.asarray(mult, dtype=float),
        np.asarray(capacity, dtype=float),
        n,
    )
    return [float(r) for r in rates]


def flow_rates(links: DirectedLinks, paths: Sequence[Sequence[str]]) -> list[float]:
    """Max-min fair rates of independent point-to-point flows along node paths."""
    return channel_rates(links, [Channel((p[0], p[-1]), (tuple(p),)) for p in paths])


class LazyChannels(Sequence[Channel]):
    """A group's ring channels, listed only when read (issue 14: the 16 channels of a 16,384-rank
    ring are 262,144 hop paths that the analytic fidelity never reads).

    ``len`` is known at once; iteration, indexing and comparison list the channels once through
    ``build`` (the direct :func:`build_channels`, so readers get what they got before).
    ``servers``: the servers (``-1``: the fabric) the hops touch, where known without listing;
    ``intra_hops``: the intra-server hops of one server, where every server of the group has
    the same ones by local id (:attr:`RingSummary.intra_hops`), else ``None``.
    """

    __slots__ = ("_build", "_items", "_n", "intra_hops", "servers")

    def __init__(
        self,
        n: int,
        build: Callable[[], Sequence[Channel]],
        servers: frozenset[int] | None = None,
        intra_hops: tuple[tuple[str, ...], ...] | None = None,
    ) -> None:
        self._n = n
        self._build = build
        self._items: tuple[Channel, ...] | None = None
        self.servers = servers
        self.intra_hops = intra_hops

    def _all(self) -> tuple[Channel, ...]:
        if self._items is None:
            items = tuple(self._build())
            if len(items) != self._n:  # pragma: no cover - the summary and the list disagree
                raise AssertionError(f"{len(items)} channels listed, {self._n} counted")
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __iter__(self) -> Any:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LazyChannels, tuple)):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"LazyChannels({self._n} channels{'' if self._items is None else ', listed'})"


@dataclass(frozen=True)
class RingSummary:
    """The analysis of a group's ring channels without listing them (:func:`ring_summary`).

    ``rates``: every channel's max-min fair rate (bytes/s), as :func:`channel_rates` of the
    listed channels with the P2P charge gives; ``inter_rates``: the same with the
    inter-server hops only (no charge); ``intra_hops``: the first server's intra-server hops,
    which every server of the group has by local id; ``inter_hops``: one path for every
    inter-server hop up to renaming (one boundary of each class pair), with the same links'
    attributes in the same order as every hop it stands for; ``servers``: the servers (``-1``:
    fabric) the channels' hops touch; ``fabric_free``: no channel loads a link between two
    fabric nodes (each boundary's fabric part is one switch), so the rates read no count of
    boundaries (the ring's server count enters only through fabric-link loads, which are each
    boundary's count times that count).
    """

    n_channels: int
    rates: tuple[float, ...]
    inter_rates: tuple[float, ...]
    intra_hops: tuple[tuple[str, ...], ...]
    inter_hops: tuple[tuple[str, ...], ...]
    servers: frozenset[int]
    fabric_free: bool = False


def ring_summary(
    links: DirectedLinks, members: Sequence[str], *, max_channels: int = MAX_CHANNELS
) -> RingSummary | None:
    """:func:`build_channels` over servers built alike, analysed without walking every hop; or
    ``None`` where that is not shown exact (the caller then lists the channels).

    Channel ``c`` of :func:`build_channels` is, in every server, the same local-id segment of
    the first server's ring (:func:`_remap`), then one boundary hop to the next server through
    NICs of fixed local ids (:func:`_via_nics`): the route from the segment's last GPU to the
    exit NIC, the NIC-to-NIC route through the fabric, the route from the entry NIC to the next
    segment's first GPU. Where every server has the same inside twin
    (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.twin`: built alike inside), the two
    routes inside a server are, by local id, the twin's wherever the twin's stays inside
    (:meth:`DirectedLinks._twin_route` reads them off it then), and the fabric part is memoised
    by the two NICs' fabric links (:meth:`DirectedLinks._fabric_route`; servers of one class,
    :attr:`~perfmodel.topology.symmetry.ServerSymmetry.cls`, hang off the same ones). So the
    boundary between servers of classes ``(A, B)`` (a server outside classes is its own) is
    composed once per class pair, without a route search per server, and:

    - a link with an end in a server carries, from channel ``c``, the count of its pattern
      (local ids; a NIC's one fabric link as "its fabric link") in ``c``'s segment and in the
      two boundaries' parts in that server: the same counts in every server, so one link per
      (pattern, capacity) stands for all;
    - a fabric link carries, from channel ``c``, its count in each class pair's boundary times
      the number of boundaries of that pair (its true load); fabric links of one capacity and
      the same load from every channel are one resource, as above.

    Progressive filling (:func:`~perfmodel.comm.maxmin.maxmin_rates`) keeps links with the same
    capacity and the same per-channel counts at the same load and residual at every step, so
    they saturate together: one link of each such set gives the same rates, bit for bit (the
    counts are integers, summed exactly). Servers whose P2P rule refuses pairs (host-memory
    routes, :meth:`DirectedLinks.shm_cpu`) are summarised alike: the segments are the first
    server's packed rings, host-memory hops included, remapped in every server by
    :func:`build_channels`; the boundary routes join a GPU and a NIC (never a refused pair);
    and the rule is the same in every server of one inside twin (a node attribute of the
    server signature; on a cluster built by copying, applied to server 0's template). Not used
    (``None``): one server; parts of different local ids;
    servers built differently inside; an Intel P2P charge on a segment hop (fractional
    weights); a server route that may leave the server; a fabric route the search did not
    find inside the fabric; a boundary on the plain route; a NIC with several fabric links or
    linked to another server's NIC.
    """
    topo = links.topology
    parts = split_by_server(topo, members, links.server)
    if len(parts) < 2:
        return None
    lid = links.local_id
    key0 = tuple(lid[m] for m in parts[0])
    if any(tuple(map(lid.__getitem__, p)) != key0 for p in parts[1:]):
        return None
    sym = links._symmetry
    srv = links.server
    servers = [srv[p[0]] for p in parts]
    if len({sym.twin.get(s, s) for s in servers}) != 1:
        return None
    plan = _ring_plan(links, parts, max_channels)
    n_ch = len(plan.choices)
    seg_hops: list[tuple[tuple[str, ...], ...]] = []
    ends: list[tuple[str, str]] = []
    for c, (rot, _, _) in enumerate(plan.choices):
        ring = plan.first[c % len(plan.first)]
        k = len(ring.order)
        r = rot % k
        seg = ring.order[r:] + ring.order[:r]
        seg_hops.append((ring.hops[r:] + ring.hops[:r])[: k - 1])
        ends.append((lid[seg[-1]], lid[seg[0]]))
    if any(links.charge_p2p(h) != 1.0 for hops in seg_hops for h in hops):
        return None
    cap = links.capacity_list
    edges = links._table.edges  # by id, as the ids are handed out
    kind = links._table.kind
    by_local = links.by_local
    fabric = links.server_nodes.get(-1, frozenset())
    twin = sym.twin.get(servers[0], servers[0])
    inside: dict[tuple[str, str], tuple[str, ...] | None] = {}

    def inside_lids(x: str, y: str) -> tuple[str, ...] | None:
        # DirectedLinks.route between local ids x and y of any server of the group: the twin's
        # route where it provably stays inside (_twin_route), by local id; None: not shown
        key = (x, y)
        if key not in inside:
            zs, zd = by_local[twin][x], by_local[twin][y]
            path = links.route(zs, zd)
            ok = links._stays_inside(zs, zd, path)
            inside[key] = tuple(lid[n] for n in path) if ok else None
        return inside[key]

    def fabric_inner(x_out: str, x_in: str) -> tuple[str, ...] | None:
        # DirectedLinks.route between NICs of two servers: the fabric switches memoised by the
        # NICs' fabric links (_fabric_route; a class's first servers have the same links)
        # (route() of two NICs of different servers is this search, on the first servers of
        # their classes; called here directly, no server is made)
        pattern = links._fabric_pattern(x_out, x_in, fabric)
        hit = links._fabric_inner.get(pattern)
        if hit is None:
            links._fabric_route(x_out, x_in, fabric)
            hit = links._fabric_inner.get(pattern)
        return hit

    one_link: dict[str, bool] = {}

    def node_key(x: str, other: str) -> tuple[str, ...] | None:
        # a server node by local id; a fabric node as the one fabric node of ``other``
        if srv[x] >= 0:
            return ("s", lid[x])
        hit = one_link.get(other)
        if hit is None:
            hit = one_link[other] = len(links.fabric_neighbours(other, fabric)) == 1
        return ("F",) if hit else None

    # per-server link patterns -> capacities they have in some server
    pattern_caps: dict[Any, set[float]] = {}
    seg_count: list[dict[Any, int]] = []
    for hops in seg_hops:
        cnt: dict[Any, int] = {}
        for h in hops:
            for e in links._ids_of(h):
                u, v = edges[e]
                pk = (("s", lid[u]), ("s", lid[v]))
                cnt[pk] = cnt.get(pk, 0) + 1
                pattern_caps.setdefault(pk, set()).add(cap[e])
        seg_count.append(cnt)
    cls = [("c", sym.cls[s]) if s in sym.cls else ("u", s) for s in servers]
    n_srv = len(servers)
    pairs: dict[tuple[Any, Any], list[int]] = {}  # class pair -> [a boundary's index, count]
    for i in range(n_srv):
        hit = pairs.setdefault((cls[i], cls[(i + 1) % n_srv]), [i, 0])
        hit[1] += 1
    inter_hops: list[tuple[str, ...]] = []
    touched: set[int] = set(servers)
    out_tmpl: list[dict[Any, int]] | None = None  # per channel: counts on the leaving server
    in_tmpl: list[dict[Any, int]] | None = None  # per channel: counts on the entered server
    fab_load: list[dict[int, int]] = [{} for _ in range(n_ch)]
    # a later class pair of servers of the build record: its fabric part and NIC links per
    # (exit NIC's fabric side, entry NIC's fabric side), what they are a function of
    # (_fabric_pattern: servers of the record are never linked to each other); the
    # boundaries of a 2,048-server fat tree are 2,047 class pairs, a few sides each
    by_sides: dict[Any, tuple[tuple[int, ...], float, float]] = {}
    for i, count in pairs.values():
        a, b = servers[i], servers[(i + 1) % n_srv]
        outs: list[dict[Any, int]] = []
        ins: list[dict[Any, int]] = []
        sides_a = sides_b = None
        if out_tmpl is not None and not links._table.has_extra:
            sides_a, sides_b = links._attach_sides(a), links._attach_sides(b)
        for c, (_, exit_nic, entry_nic) in enumerate(plan.choices):
            if exit_nic is None or entry_nic is None:
                return None
            l_out, l_in = ends[c]
            n_out, n_in = plan.local_of[exit_nic], plan.local_of[entry_nic]
            side_key = None
            if sides_a is not None and sides_b is not None:
                so, si = sides_a.get(n_out), sides_b.get(n_in)
                if so is not None and si is not None:
                    side_key = (so, si)
                    got = by_sides.get(side_key)
                    if got is None:
                        # _fabric_pattern of the two NICs (servers of the record are never
                        # linked); the NIC names are made only for a search
                        pattern = (so, si, False)
                        mid = links._fabric_inner.get(pattern)
                        if mid is None:
                            x_out, x_in = by_local[a].get(n_out), by_local[b].get(n_in)
                            if x_out is None or x_in is None:
                                return None
                            links._fabric_route(x_out, x_in, fabric, pattern)
                            mid = links._fabric_inner.get(pattern)
                        # node_key's test: each NIC linked to one fabric node, the link's
                        # capacity in its side
                        if not mid or len(so) != 1 or len(si) != 1:
                            return None
                        if so[0][0] != mid[0] or si[0][0] != mid[-1]:  # pragma: no cover
                            raise AssertionError("a fabric route off the NICs' fabric sides")
                        got = by_sides[side_key] = (links._ids_of(mid), so[0][1], si[0][1])
                    ids, cap_o, cap_i = got
                    pattern_caps[(("s", n_out), ("F",))].add(cap_o)
                    pattern_caps[(("F",), ("s", n_in))].add(cap_i)
                    load = fab_load[c]
                    for e in ids:
                        load[e] = load.get(e, 0) + count
                    continue
            up, down = inside_lids(l_out, n_out), inside_lids(n_in, l_in)
            x_out, x_in = by_local[a].get(n_out), by_local[b].get(n_in)
            if up is None or down is None or x_out is None or x_in is None:
                return None
            mid = fabric_inner(x_out, x_in)
            if not mid:  # not memoised (the search fell back), or two NICs linked directly
                return None
            if out_tmpl is not None:
                # a later class pair: the parts inside the two servers are the first pair's by
                # local id (checked there); only the fabric part and the NICs' links are new
                for x in (x_out, x_in):
                    if node_key(mid[0], x) is None:  # a NIC linked to several fabric nodes
                        return None
                cap_o, cap_i = kind(mid[0], x_out)[0][0], kind(mid[-1], x_in)[0][0]
                pattern_caps[(("s", n_out), ("F",))].add(cap_o)
                pattern_caps[(("F",), ("s", n_in))].add(cap_i)
                load = fab_load[c]
                ids = links._ids_of(mid)
                for e in ids:
                    load[e] = load.get(e, 0) + count
                if side_key is not None:
                    by_sides[side_key] = (ids, cap_o, cap_i)
                # The hop's latency outside NCCL's tables is 0 unless some link met so far
                # has such latency: its fabric and NIC links were just met, and its links
                # inside the two servers have the attributes of the first pair's (every
                # server has one inside twin). The caller takes the largest: a 0 adds nothing.
                if links._table.has_extra:
                    inter_hops.append(
                        (*(by_local[a][x] for x in up), *mid, *(by_local[b][x] for x in down))
                    )
                continue
            path = (*(by_local[a][x] for x in up), *mid, *(by_local[b][x] for x in down))
            if len(set(path)) != len(path):  # _via_nics takes the plain route
                return None
            inter_hops.append(path)
            touched.add(-1)
            o: dict[Any, int] = {}
            n_: dict[Any, int] = {}
            for e in links._ids_of(path):
                u, v = edges[e]
                su, sv = srv[u], srv[v]
                if su < 0 and sv < 0:
                    fab_load[c][e] = fab_load[c].get(e, 0) + count
                    continue
                ku, kv = node_key(u, v), node_key(v, u)
                if ku is None or kv is None:  # a NIC linked to several fabric nodes
                    return None
                pk = (ku, kv)
                tgt = o if a in (su, sv) else n_
                tgt[pk] = tgt.get(pk, 0) + 1
                pattern_caps.setdefault(pk, set()).add(cap[e])
            outs.append(o)
            ins.append(n_)
        if out_tmpl is None:
            out_tmpl, in_tmpl = outs, ins
    assert out_tmpl is not None and in_tmpl is not None
    # fabric links of one capacity and the same count from every channel saturate together,
    # as the server links of one pattern (above): one resource stands for them (issue 14: the
    # 1,640 leaf up- and downlinks of a 2,048-server fat tree are a few resources)
    loads: dict[int, list[tuple[int, int]]] = {}
    for c in range(n_ch):
        for e, k in fab_load[c].items():
            loads.setdefault(e, []).append((c, k))
    fab_key = {e: ("f", cap[e], tuple(v)) for e, v in loads.items()}
    fab_entries: list[list[tuple[Any, float, int]]] = []  # per channel: (resource, capacity, k)
    for c in range(n_ch):
        seen: dict[Any, tuple[Any, float, int]] = {}
        for e, k in fab_load[c].items():
            rkey = fab_key[e]
            if rkey not in seen:
                seen[rkey] = (rkey, cap[e], k)
        fab_entries.append(list(seen.values()))

    def rates(with_segments: bool) -> tuple[float, ...]:
        res: dict[Any, int] = {}
        res_cap: list[float] = []
        fi: list[int] = []
        ri: list[int] = []
        mult: list[float] = []

        def add(c: int, rkey: Any, capacity: float, k: int) -> None:
            r = res.get(rkey)
            if r is None:
                r = res[rkey] = len(res_cap)
                res_cap.append(capacity)
            fi.append(c)
            ri.append(r)
            mult.append(float(k))

        for c in range(n_ch):
            cnt: dict[Any, int] = dict(seg_count[c]) if with_segments else {}
            for side in (out_tmpl[c], in_tmpl[c]):
                for pk, k in side.items():
                    cnt[pk] = cnt.get(pk, 0) + k
            for pk, k in cnt.items():
                for capacity in sorted(pattern_caps[pk]):
                    add(c, ("s", pk, capacity), capacity, k)
            for rkey, capacity, k in fab_entries[c]:
                add(c, rkey, capacity, k)
        if not fi:
            return (math.inf,) * n_ch
        return tuple(_fill(fi, ri, mult, res_cap, n_ch))

    return RingSummary(
        n_channels=n_ch,
        rates=rates(True),
        inter_rates=rates(False),
        intra_hops=tuple(h for hops in seg_hops for h in hops),
        inter_hops=tuple(inter_hops),
        servers=frozenset(touched),
        fabric_free=not any(fab_load),
    )
