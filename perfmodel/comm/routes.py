"""Routes on the topology graph as NCCL's transports take them: the minimum-hop, widest route
between two nodes, searched inside their servers and the fabric only; the NIC each GPU leaves its
server through; a point-to-point send's route through those NICs.

:class:`RouteSearch` is a part of :class:`~perfmodel.comm.links.DirectedLinks` and keeps every
answer. Between nodes of interchangeable servers a route is read off the first servers of their
classes and renamed, inside one server off its inside twin, and the fabric part of a route
between two NICs is searched once per pattern of the NICs' fabric links
(:mod:`perfmodel.topology.symmetry`; issue 14: 16,384 ring hops over 8 rails are 8 searches).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from perfmodel.comm.nodes import nics_of
from perfmodel.comm.paths import min_hop_span, min_hop_widest
from perfmodel.errors import PerfModelError
from perfmodel.topology.routing import route
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks

#: The edge attributes a link's columns are computed from
#: (:meth:`perfmodel.comm.links._LinkTable.kind`), which a fabric route search reads.
LINK_KEYS = ("tech", "family", "count", "bandwidth_Bps", "efficiency", "latency_s")


class RouteSearch:
    """The routes of :meth:`route` and :meth:`p2p_route`, searched on first use and kept (a part
    of :class:`~perfmodel.comm.links.DirectedLinks`: reads its node tables and link table)."""

    def _init_routes(self) -> None:
        self._routes: dict[tuple[str, str], tuple[str, ...]] = {}
        self._gpu_nic: dict[str, str | None] = {}
        self._inside: dict[int, frozenset[str]] = {}
        #: a node -> :meth:`_inside_distances` from it (read only)
        self._distances: dict[str, dict[str, int]] = {}
        self._fallback: set[tuple[str, str]] = set()
        self._inside_ok: dict[tuple[str, str], bool] = {}
        self._fabric_inner: dict[tuple[Any, ...], tuple[str, ...]] = {}
        self._fabric_sides: dict[str, tuple[tuple[Any, ...], ...]] = {}
        #: canonical fabric pattern (:meth:`_fabric_class`) -> the searched switches, side
        #: nodes as their labels
        self._fabric_classes: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._fabric_keys: dict[str, tuple[Any, ...]] = {}
        self._sides_by_attach: dict[Any, dict[str, tuple[tuple[Any, ...], ...]]] = {}
        #: first server built alike -> :meth:`_inside_nics_of` (``()``: not to be read off)
        self._inside_nics: dict[int, Any] = {}

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
        """Hop distances from ``start`` inside its server, through transit nodes only (a
        function of the read-only graph: kept per node, shared by the pairs it is an end of;
        issue 27: the sends between two pipeline stages in one server and back, 26 searches
        from 11 nodes for a DGX A100 tensor-parallel degree of 4). Read it, do not change it."""
        hit = self._distances.get(start)
        if hit is None:
            hit = self._distances[start] = self._search_inside(start)
        return hit

    def _search_inside(self, start: str) -> dict[str, int]:
        """:meth:`_inside_distances`, searched."""
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
        res = min_hop_widest(self, None, src, dst, allowed, per_unit=False)
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
        # min_hop_span), without walking every leaf from each spine of a fat tree
        span = min_hop_span(self, src, dst, fabric | {src, dst})
        res = None if span is None else min_hop_widest(self, None, src, dst, span, per_unit=False)
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
        :func:`min_hop_span` is the path: no width, latency or name tie-break chose it) whose
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
            nbrs = sorted((v, *(adj[v][a] for a in LINK_KEYS)) for v in fabric.intersection(adj))
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
        ``None`` when the server has no fabric NIC. Every GPU of the server is answered at
        once: read off the first server built alike (:meth:`_alike_nics`) where
        :attr:`NICS_BY_ALIKE` and that is provably the searches' answer, else searched
        (:meth:`_searched_nics`).
        """
        if gpu in self._gpu_nic:
            return self._gpu_nic[gpu]
        server = self.server[gpu]
        got = self._alike_nics(server) if self.NICS_BY_ALIKE else None
        if got is None:
            got = self._searched_nics(server)
        self._gpu_nic.update(got)
        return self._gpu_nic.get(gpu)

    #: Whether :meth:`gpu_nic` reads a server's NICs off the first server built alike
    #: (:meth:`_alike_nics`); off: one breadth-first search per GPU (a test flips it).
    NICS_BY_ALIKE = True

    def _server_gpus(self, server: int) -> list[str]:
        """The GPUs of ``server`` in local order (``gpu_index``, then name)."""
        g = self.topology.graph
        return sorted(
            (n for n in self.server_nodes.get(server, ()) if g.nodes[n]["kind"] is NodeKind.GPU),
            key=lambda n: (g.nodes[n].get("gpu_index", 0), n),
        )

    def _searched_nics(self, server: int) -> dict[str, str | None]:
        """:meth:`gpu_nic` of every GPU of ``server``, one :func:`near_nics` search per GPU
        (the direct path)."""
        nics = nics_of(self.topology, server)
        return take_turns(self._server_gpus(server), nics, lambda x: near_nics(self, x, nics))

    def _alike_nics(self, server: int) -> dict[str, str | None] | None:
        """:meth:`gpu_nic` of every GPU of ``server`` read off the first server built alike
        (:attr:`~perfmodel.topology.symmetry.ServerSymmetry.alike`, or itself) by local id;
        ``None`` where that is not provably :meth:`_searched_nics`' answer (issue 27: 10,875
        searches of ~600 nodes, 8 s CPU, for a 450-GPU group on 200 GB200 NVL72 racks, whose
        racks hang off different fabric ports: no two in a class).

        Exact: :meth:`_inside_nics_of` finds, for each GPU, its NICs' hop distances inside the
        server and the exits ``y`` that could start a shorter or equal path through the
        fabric (any such path leaves through a node ``y`` it may cross, reached inside first,
        and re-enters the server, so it has at least ``d(gpu, y) + 2`` hops). Where none of
        this server's exits is one of them, the search's smallest distance and the NICs at it
        are the inside ones (a NIC reached only through the fabric is farther, and the search
        reaches it where one NIC of this server reaches all), which are the same by local
        id in servers built alike (same nodes, links, attributes and transit kinds), as is the
        order the GPUs take turns in and the name order of the NICs (the same local-id
        sequence in name order); the server's fabric NICs must be the same local ids."""
        sym = self._symmetry
        first = sym.alike.get(server, server)
        base = self._inside_nics.get(first)
        if base is None:
            base = self._inside_nics[first] = self._inside_nics_of(first)
        if not base:
            return None
        picks, nic_ids, risky, apart = base
        lid = sym.local_id
        if not risky.isdisjoint(lid[y] for y in sym.exits[server]):
            return None
        nics = nics_of(self.topology, server)
        if frozenset(lid[n] for n in nics) != nic_ids:
            return None
        if apart and not set(nics) <= self._hops_from(nics[0], nics).keys():
            return None
        names = sym.by_local[server]
        return {names[g]: None if n is None else names[n] for g, n in picks.items()}

    def _inside_nics_of(
        self, server: int
    ) -> tuple[dict[str, str | None], frozenset[str], frozenset[str], bool] | tuple[()]:
        """For :meth:`_alike_nics`: ``(picks, NICs, risky exits, apart)`` of ``server`` by
        local id: the NICs chosen as :meth:`_searched_nics` chooses them but on hop distances
        inside the server (:meth:`_inside_distances`); the nodes ``y`` a GPU could leave
        through with ``d(gpu, y) + 2`` no more than its nearest NIC's distance; whether some
        GPU reaches some NIC only through the fabric (the search then reaches it, so that
        :func:`near_nics` needs no route, where one NIC reaches all through the server and
        the fabric and every NIC may be crossed: the way back to the GPU's nearest NIC and on).
        ``()`` where the server has no fabric NIC, a GPU reaches none inside, or some NIC
        is reached only through the fabric and NICs may not be crossed."""
        nics = nics_of(self.topology, server)
        if not nics:
            return ()
        lid, transit = self._symmetry.local_id, self.transit
        gpus = self._server_gpus(server)
        near: dict[str, list[str]] = {}
        risky: set[str] = set()
        apart = False
        for x in gpus:
            d = self._inside_distances(x)
            reached = [n for n in nics if n in d]
            if not reached:
                return ()
            apart = apart or len(reached) < len(nics)
            best = min(d[n] for n in reached)
            near[x] = sorted(n for n in reached if d[n] == best)
            risky.update(
                lid[y] for y, dy in d.items() if dy + 2 <= best and (y == x or y in transit)
            )
        if apart and not all(n in transit for n in nics):
            return ()
        picks = take_turns(gpus, nics, near.__getitem__)
        return (
            {lid[g]: None if n is None else lid[n] for g, n in picks.items()},
            frozenset(lid[n] for n in nics),
            frozenset(risky),
            apart,
        )

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


def take_turns(
    gpus: Sequence[str], nics: Sequence[str], near: Callable[[str], list[str]]
) -> dict[str, str | None]:
    """Each of ``gpus`` in turn takes the least loaded of its ``near(gpu)`` NICs (ties: the
    smallest name); ``None`` where it has none (:meth:`RouteSearch.gpu_nic`)."""
    load = dict.fromkeys(nics, 0)
    out: dict[str, str | None] = {}
    for x in gpus:
        here = near(x)
        if not here:
            out[x] = None
            continue
        pick = min(here, key=lambda nic: (load[nic], nic))
        load[pick] += 1
        out[x] = pick
    return out


def near_nics(links: DirectedLinks, gpu: str, nics: Sequence[str]) -> list[str]:
    """The NICs of the GPU's server at the smallest hop distance from it (ties kept)."""
    if not nics:
        return []
    # one breadth-first search gives the hop count of every NIC's route (minimum-hop routes in
    # the GPU's server and the fabric, the set DirectedLinks.route searches)
    reach = links._hops_from(gpu, nics)
    dist = {nic: reach[nic] if nic in reach else len(links.route(gpu, nic)) - 1 for nic in nics}
    d = min(dist.values())
    return sorted(nic for nic in nics if dist[nic] == d)
