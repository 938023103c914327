"""Interchangeable servers: the symmetry that lets a group be analysed once per shape (issue 14).

A cluster of identical servers has many automorphisms: exchanging two servers that are built
alike and hang off the same fabric ports, and fixing every other node, maps the graph onto
itself with every node and edge attribute kept. Anything computed from the graph alone (a
route, a ring packing, a bottleneck) is then the same, node names mapped, for every group of
the same *shape* (members' local ids, and which of the group's servers each sits in).

Where the computation breaks ties by node name (the routing rule of
:mod:`perfmodel.topology.routing` and the ring search of :mod:`perfmodel.comm.rings`: "then the
smallest node names"), the mapping must also keep the name order of every node the computation
can compare. :class:`ServerSymmetry` only offers mappings that do: servers of a class are mapped
in name order onto the first servers of the class in name order, every server's nodes are one
contiguous block of the sorted node names with the same local-id sequence, and no node outside
the class sorts between the class's first and last block. Nodes of servers outside the mapped
set (third servers) may change order; callers use the mapping only where no computation can
reach them (the routes of :mod:`perfmodel.topology.routing` check a hop bound; the ring
search of :mod:`perfmodel.comm.rings` searches the group's servers and the fabric only).

A weaker relation, the *inside twin* (:attr:`ServerSymmetry.twin`), pairs servers built alike
inside whatever fabric ports they hang off (servers of other fat-tree leaves): only a computation
that provably stays inside the server may be read off the twin (the callers check a hop bound or
that the twin's answer uses the twin's nodes only).

This module is the one place that says which servers are interchangeable and how node names map
between them; every reuse of an answer across servers asks it: the global routes of
:mod:`perfmodel.topology.routing`, :meth:`perfmodel.comm.links.DirectedLinks.route` (pairs in
one server or two), and the group analyses, ring packings and point-to-point routes of
:class:`perfmodel.comm.model.CommCostModel`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from itertools import repeat
from typing import Any

from perfmodel._memo import BoundedMemo
from perfmodel.errors import PerfModelError, TopologyError
from perfmodel.topology.lazy import NodeTable, ServerMap
from perfmodel.topology.model import ReplicaPattern, Topology


def _value_key(value: Any) -> Any:
    """An attribute value as a comparable, hashable key: itself, or its ``repr`` when unhashable
    (a list)."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _attrs_key(attrs: dict[str, Any], skip: str = "") -> tuple[tuple[str, Any], ...]:
    """``attrs`` but ``skip`` as sorted ``(name, value key)`` pairs."""
    key = tuple(sorted(kv for kv in attrs.items() if kv[0] != skip))
    try:
        hash(key)
    except TypeError:
        return tuple((k, _value_key(v)) for k, v in key)
    return key


def server_signature(topology: Topology, nodes: frozenset[str]) -> tuple[Any, ...]:
    """A server's nodes and internal links by local id, with every attribute but ``server``
    (a hashable value: two servers built alike have equal signatures)."""
    g = topology.graph
    lid = {n: g.nodes[n]["local_id"] for n in nodes}
    node_sig = tuple(sorted((lid[n], _attrs_key(g.nodes[n], "server")) for n in nodes))
    edge_sig = tuple(
        sorted(
            (tuple(sorted((lid[u], lid[v]))), _attrs_key(d))
            for u, v, d in g.edges(nodes, data=True)
            if u in nodes and v in nodes
        )
    )
    return (node_sig, edge_sig)


@dataclass(frozen=True)
class ServerSymmetry:
    """Classes of interchangeable servers of a topology and the order-preserving maps between them.

    Attributes
    ----------
    server
        ``{node: server index}`` (``-1`` outside servers).
    cls
        ``{server: class id}`` for servers in a class of two or more; others are absent.
    ordered
        ``{class id: servers of the class in name order}``.
    position
        ``{server: its index in its class's name order}``.
    by_local
        ``{server: {local id: node}}``.
    local_id
        ``{node: local id}``.
    excursion
        Fewest edges a path spends between leaving the fabric (server ``-1`` nodes) and
        re-entering it: 2 (in and out through one node) where some server node has two fabric
        neighbours, else 3.
    twin
        ``{server: its inside twin}``: the server of smallest index built alike inside (the
        same :func:`server_signature` and local-id sequence in name order) whose links to the
        outside are no fewer: every local id with a link leaving this server has one in the
        twin, and every pair of local ids sharing an outside neighbour here shares one there.
        Unlike a class, the twin may hang off other fabric ports (another fat-tree leaf), so
        only a computation that provably stays inside the server may be read off it
        (:meth:`twin_map`). Servers that are their own twin are absent.
    exits
        ``{server: nodes with a link leaving the server}``.
    alike
        ``{server: the server of smallest index built alike inside}`` (the same
        :func:`server_signature` and local-id sequence in name order, whatever its links to the
        outside); servers that are their own are absent. Weaker than :attr:`twin`: only a
        computation on the server's own nodes and links that also checks the server's own exits
        may be read off it (:meth:`perfmodel.comm.routes.RouteSearch.gpu_nic`).
    """

    server: dict[str, int]
    cls: dict[int, int]
    ordered: dict[int, tuple[int, ...]]
    position: dict[int, int]
    by_local: dict[int, dict[str, str]]
    local_id: dict[str, str]
    excursion: int
    twin: dict[int, int]
    exits: dict[int, tuple[str, ...]]
    alike: dict[int, int] = field(default_factory=dict)
    _twin_maps: dict[int, dict[str, str]] = field(default_factory=dict, repr=False)
    """:meth:`twin_map`'s answers so far (shared with the callers: read only)."""

    def server_map(self, servers: Iterable[int]) -> dict[int, int] | None:
        """Order-preserving map of the distinct ``servers`` onto the first servers of their
        classes, or ``None`` where a server is in no class (or is a fabric node, ``-1``).

        The ``k``-th of the given servers of class ``C`` in name order goes to the ``k``-th
        server of ``C`` in name order, so the name order of all their nodes is kept.
        """
        by_cls: dict[int, list[int]] = {}
        for s in set(servers):
            c = self.cls.get(s)
            if c is None:
                return None
            by_cls.setdefault(c, []).append(s)
        out: dict[int, int] = {}
        for c, group in by_cls.items():
            group.sort(key=self.position.__getitem__)
            for k, s in enumerate(group):
                out[s] = self.ordered[c][k]
        return out

    def map_node(self, node: str, smap: dict[int, int]) -> str:
        """``node``'s image under the server map ``smap`` (itself outside the mapped servers)."""
        t = smap.get(self.server[node])
        return node if t is None else self.by_local[t][self.local_id[node]]

    def map_nodes(self, nodes: Iterable[str], smap: dict[int, int]) -> tuple[str, ...]:
        """The images of ``nodes`` under the server map ``smap``, which must map every
        ``nodes``' server (:meth:`map_node` of each, without its lookup of unmapped servers)."""
        by_local, local_id, server = self.by_local, self.local_id, self.server
        return tuple(by_local[smap[server[n]]][local_id[n]] for n in nodes)

    def canonical_node(self, node: str) -> str:
        """The node with ``node``'s local id in the first server of its server's class
        (``node`` itself outside classes)."""
        c = self.cls.get(self.server[node])
        return node if c is None else self.by_local[self.ordered[c][0]][self.local_id[node]]

    def pair_route(
        self, src: str, dst: str, search: Callable[[str, str], tuple[str, ...] | None]
    ) -> tuple[str, ...] | None:
        """``search`` run on the images of ``src`` and ``dst`` in the first servers of their
        classes (:meth:`server_map`), its path mapped back; ``None`` where an endpoint is
        outside the classes or the pair is already its own image, and where ``search`` finds
        no route (the caller's own search then says so with the real names) or returns
        ``None`` (its answer is not one to map). Exact where ``search`` compares only nodes of
        the endpoints' servers and of the fabric (module docstring); both endpoints may be in
        one server."""
        a, b = self.server[src], self.server[dst]
        ca, cb = self.cls.get(a), self.cls.get(b)
        if ca is None or cb is None:  # outside the classes (fabric nodes: server -1)
            return None
        # server_map((a, b)), written out for one or two servers (issue 14: 16,000 calls for
        # the rings of 16,384 GPUs)
        if a == b:
            smap = {a: self.ordered[ca][0]}
        elif ca != cb:
            smap = {a: self.ordered[ca][0], b: self.ordered[cb][0]}
        else:
            first, second = (a, b) if self.position[a] < self.position[b] else (b, a)
            smap = {first: self.ordered[ca][0], second: self.ordered[ca][1]}
        if all(k == v for k, v in smap.items()):
            return None
        by_local, local_id = self.by_local, self.local_id
        try:
            path = search(by_local[smap[a]][local_id[src]], by_local[smap[b]][local_id[dst]])
        except TopologyError:
            return None
        if path is None:
            return None
        back = {t: s for s, t in smap.items()}
        server = self.server
        out = []
        for n in path:
            t = back.get(server[n])
            out.append(n if t is None else by_local[t][local_id[n]])
        return tuple(out)

    def mirrored(
        self, c: int, src_lid: str, dst_lid: str, search: Callable[[str, str], tuple[str, ...]]
    ) -> bool:
        """Whether ``search`` from local id ``src_lid`` of class ``c``'s second server to
        ``dst_lid`` of its first finds the route from the first server's ``src_lid`` to the
        second's ``dst_lid`` with the two servers exchanged (nodes by local id, the fabric
        fixed); ``False`` where either search finds none. (Callers keep the answer.)

        Where it holds, :meth:`pair_route` gives the pair of those local ids between any two
        servers of the class the image of the one route from the first server to the second
        under the map taking those to the pair's source and destination servers, whichever
        name sorts first (through the first search or through the second and the exchange):
        a shape of such pairs need not say which server of a pair sorts first.
        """
        first, second = self.ordered[c][0], self.ordered[c][1]
        by_local, server, local_id = self.by_local, self.server, self.local_id
        try:
            fwd = search(by_local[first][src_lid], by_local[second][dst_lid])
            back = search(by_local[second][src_lid], by_local[first][dst_lid])
        except PerfModelError:  # no route: the caller's own search names it
            return False
        swap = {first: by_local[second], second: by_local[first]}
        image = tuple(swap[server[n]][local_id[n]] if server[n] in swap else n for n in fwd)
        return image == back

    def twin_map(self, server: int) -> dict[str, str] | None:
        """``{node of server: node of the same local id in its inside twin}`` (:attr:`twin`),
        or ``None`` where the server has no twin but itself. Exact for a computation on the
        server's own nodes and links that provably stays inside the server (names inside a
        server sort alike in both: the same local-id sequence in name order). The map is
        made once per server and shared between callers: read it, do not change it."""
        t = self.twin.get(server)
        if t is None:
            return None
        fwd = self._twin_maps.get(server)
        if fwd is None:  # one map per server (issue 14: asked 16 times per server)
            fwd = self._twin_maps[server] = self.node_map({server: t})
        return fwd

    def node_map(self, smap: dict[int, int]) -> dict[str, str]:
        """``{node: image}`` for every node of the servers in ``smap`` (by local id)."""
        out: dict[str, str] = {}
        for s, t in smap.items():
            if s != t:
                target = self.by_local[t]
                for lid, n in self.by_local[s].items():
                    out[n] = target[lid]
        return out


#: Node attributes a member automorphism may change: the names, and the GPU's number in its
#: server (read for the order in which GPUs take their NICs for sends, never by a ring search).
_RENAMED = ("server", "local_id", "gpu_index")


def member_automorphism(
    topology: Topology, nodes: frozenset[str], src: tuple[str, ...], dst: tuple[str, ...]
) -> dict[str, str] | None:
    """A map of the server's ``nodes`` onto themselves sending ``src[i]`` to ``dst[i]`` that
    keeps every link inside them with all its attributes, and every node attribute but the
    names and the GPU number (:data:`_RENAMED`), or ``None`` where this construction finds none.

    Candidates: each node goes to a node of the same kind and the same hop distances (inside
    ``nodes``) to ``dst[i]`` as it has to ``src[i]``, for every ``i``; nodes alike by that go
    to each other in name order. The map is then checked node by node and link by link, so a
    returned map is an automorphism of the server's graph (a finer search could find one where
    this returns ``None``; the caller then computes as before). Issue 14: GPUs 4-7 of a DGX
    A100 are the image of GPUs 0-3 (the other PCIe complexes, CPU and NICs), so their ring
    packing is one search.
    """
    if len(src) != len(dst) or len(set(src)) != len(src):
        return None
    adj, kind = _server_tables(topology, nodes)

    def hops(root: str) -> dict[str, int]:
        dist = {root: 0}
        frontier = [root]
        while frontier:
            nxt = []
            for u in frontier:
                du = dist[u] + 1
                for v in adj[u]:
                    if v not in dist:
                        dist[v] = du
                        nxt.append(v)
            frontier = nxt
        return dist

    d_src, d_dst = [hops(x) for x in src], [hops(y) for y in dst]
    by_sig: dict[Any, tuple[list[str], list[str]]] = {}
    # each node's distances to the members as rows of per-member columns (the same tuples
    # as one generator per node, in C loops)
    # (no members: every node's row is empty, as its generator was)
    rows_src = zip(*[[d.get(n, -1) for n in kind] for d in d_src]) if src else repeat(())
    rows_dst = zip(*[[d.get(n, -1) for n in kind] for d in d_dst]) if src else repeat(())
    for n, k, a, b in zip(kind, kind.values(), rows_src, rows_dst):  # in name order
        by_sig.setdefault((k, *a), ([], []))[0].append(n)
        by_sig.setdefault((k, *b), ([], []))[1].append(n)
    out: dict[str, str] = {}
    for froms, tos in by_sig.values():
        if len(froms) != len(tos):
            return None
        out.update(zip(froms, tos))
    g = topology.graph
    # networkx's own dicts (``graph._node``, ``graph._adj``): the values ``g.nodes[u]`` and
    # ``g.adj[u]`` wrap, without a view object per read (issue 27: the views were half of
    # the ~0.25 ms check of a DGX A100's 31 nodes)
    attrs, links = g._node, g._adj
    for u, x in out.items():
        if u != x:
            a, b = attrs[u], attrs[x]
            if a.keys() != b.keys() or any(a[k] != b[k] for k in a if k not in _RENAMED):
                return None
        lu, lx = links[u], links[x]
        for v in adj[u]:
            y = out[v]
            if (u != x or v != y) and (y not in lx or lu[v] != lx[y]):
                return None
    return out


_SERVER_TABLES: BoundedMemo[tuple[Topology, frozenset[str]], Any] = BoundedMemo(8)


def _server_tables(
    topology: Topology, nodes: frozenset[str]
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """The links among ``nodes`` and each node's kind (nodes in name order); kept for the last
    few servers asked."""
    return _SERVER_TABLES.get((topology, nodes), partial(_make_server_tables, topology, nodes))


def _make_server_tables(
    topology: Topology, nodes: frozenset[str]
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    g = topology.graph
    adj = {n: [v for v in g.adj[n] if v in nodes] for n in nodes}
    return adj, {n: g.nodes[n]["kind"] for n in sorted(nodes)}


@lru_cache(maxsize=64)
def server_symmetry(topology: Topology) -> ServerSymmetry:
    """The :class:`ServerSymmetry` of a topology (cached per Topology object).

    Two servers are in one class when they have the same :func:`server_signature`, the same
    local-id sequence in node-name order, and the same links (by local id, outside node and
    every attribute) to nodes outside them, all of which are fabric nodes (server ``-1``), and
    when their nodes are adjacent blocks of the sorted node names with no other node between
    (such servers, split where another node sorts between them; see the module docstring).
    """
    pattern = topology.pattern
    if pattern is not None and pattern.describes(topology):
        sym = _symmetry_of_pattern(topology, pattern)
        if sym is not None:
            return sym
    return _symmetry_of_graph(topology)


def _symmetry_of_graph(topology: Topology) -> ServerSymmetry:
    """:func:`server_symmetry` by comparing every server's nodes and links."""
    g = topology.graph
    names = sorted(g.nodes, key=str)
    rank = {n: i for i, n in enumerate(names)}
    server = {n: int(d["server"]) for n, d in g.nodes(data=True)}
    local_id = {n: str(d["local_id"]) for n, d in g.nodes(data=True)}
    members: dict[int, list[str]] = {}
    for n in names:
        if server[n] >= 0:
            members.setdefault(server[n], []).append(n)
    two_fabric = False
    sigs: dict[Any, list[int]] = {}
    inner: dict[Any, list[int]] = {}
    exits: dict[int, tuple[str, ...]] = {}
    shared: dict[int, set[tuple[str, str]]] = {}
    for s, nodes in members.items():
        fs = frozenset(nodes)
        outside = []
        attached: dict[str, set[str]] = {}
        ok = True
        for n in nodes:
            fabric_nbrs = 0
            for v, d in g[n].items():
                if v in fs:
                    continue
                attached.setdefault(v, set()).add(local_id[n])
                if server[v] >= 0:
                    ok = False  # a direct link to another server
                    continue
                fabric_nbrs += 1
                outside.append((local_id[n], v, _attrs_key(d)))
            two_fabric = two_fabric or fabric_nbrs >= 2
        exits[s] = tuple(n for n in nodes if any(v not in fs for v in g[n]))
        shared[s] = {(a, b) for ids in attached.values() for a in ids for b in ids if a < b}
        inside_key = (tuple(local_id[n] for n in nodes), server_signature(topology, fs))
        inner.setdefault(inside_key, []).append(s)
        block = [rank[n] for n in nodes]
        if not ok or block[-1] - block[0] != len(block) - 1:
            continue  # a direct link to another server, or not contiguous in name order
        sigs.setdefault((*inside_key, tuple(sorted(outside))), []).append(s)
    twin: dict[int, int] = {}
    alike: dict[int, int] = {}
    for servers in inner.values():
        t = min(servers)
        alike.update((s, t) for s in servers if s != t)
        t_exits = {local_id[n] for n in exits[t]}
        for s in servers:
            if s != t and {local_id[n] for n in exits[s]} <= t_exits and shared[s] <= shared[t]:
                twin[s] = t
    runs: list[list[int]] = []
    for servers in sigs.values():
        servers.sort(key=lambda s: rank[members[s][0]])
        run = [servers[0]]
        for s in servers[1:]:
            if rank[members[s][0]] != rank[members[run[-1]][-1]] + 1:
                runs.append(run)  # another node sorts between: a new class
                run = []
            run.append(s)
        runs.append(run)
    by_local: dict[int, dict[str, str]] = {
        s: {local_id[n]: n for n in nodes} for s, nodes in members.items()
    }
    return _from_runs(runs, server, by_local, local_id, two_fabric, twin, exits, alike)


def _symmetry_of_pattern(topology: Topology, pattern: ReplicaPattern) -> ServerSymmetry | None:
    """:func:`server_symmetry` of a cluster made by copying server 0 (:class:`ReplicaPattern`),
    from how it was built: the same classes, maps and twins as :func:`_symmetry_of_graph`
    without comparing 2,048 servers' nodes and links (issue 14).

    By construction every server has server 0's signature and local-id sequence, no server
    links to another, and each server's links leaving it are its fabric attachments
    (:attr:`ReplicaPattern.attach`; links of one bundle size have one set of attributes), so
    the class key of :func:`server_symmetry` is the attachment alone. Server ``s``'s nodes are
    ``n<s>/<local id>``: each server is one block of the sorted names (``/`` sorts before the
    digits), blocks in the name order of the prefixes; ``None`` (use the full comparison)
    where a fabric node's name does not sort before every server's, so that no other node can
    sort between two blocks.
    """
    lids = pattern.local_ids
    n = pattern.servers
    fabric = pattern.fabric_nodes
    first_name = ReplicaPattern.prefix(0) + min(lids)
    if any(not f < first_name for f in fabric):
        return None
    lid_order = sorted(lids)  # name order inside every block (one prefix)
    g = topology.graph
    prefix = ReplicaPattern.prefix
    # the node tables and the per-server maps are made per node / server when first read
    # (a prediction reads those of a few servers; topology/lazy.py), in the order of the eager
    # dicts: servers in index order, then the fabric
    names_of: dict[int, list[str]] = {}  # server -> its node ids, shared by both tables

    def names(srv: int) -> list[str]:
        got = names_of.get(srv)
        if got is None:
            p = prefix(srv)
            got = names_of[srv] = [p + lid for lid in lids]
        return got

    server = NodeTable(n, names, lids, lambda s: [s] * len(lids), dict.fromkeys(fabric, -1))
    local_id = NodeTable(
        n, names, lids, lambda s: lids, {f: str(g.nodes[f]["local_id"]) for f in fabric}
    )
    by_name = sorted(range(n), key=ReplicaPattern.prefix)  # servers in name order
    place = {srv: i for i, srv in enumerate(by_name)}
    two_fabric = False
    exit_lids: dict[int, set[str]] = {}
    shared: dict[int, set[tuple[str, str]]] = {}
    sigs: dict[Any, list[int]] = {}  # servers by attachment (on rails: one for all)
    for srv in by_name:
        sigs.setdefault(pattern.attach[srv], []).append(srv)
    for att, servers in sigs.items():
        ids = [lid for lid, _, _ in att]
        two_fabric = two_fabric or len(set(ids)) < len(ids)
        attached: dict[str, set[str]] = {}
        for lid, v, _ in att:
            attached.setdefault(v, set()).add(lid)
        exits_here = set(ids)
        pairs = {(a, b) for ls in attached.values() for a in ls for b in ls if a < b}
        for srv in servers:
            exit_lids[srv] = exits_here
            shared[srv] = pairs

    def local_names(srv: int) -> dict[str, str]:  # the prefix made once per server (issue 27)
        p = prefix(srv)
        return {lid: p + lid for lid in lid_order}

    def exit_names(srv: int) -> tuple[str, ...]:
        p, out = prefix(srv), exit_lids[srv]
        return tuple([p + lid for lid in lid_order if lid in out])

    by_local = ServerMap(by_name, local_names)
    exits = ServerMap(by_name, exit_names)
    twin = {  # all servers are alike inside: the twin is server 0 where its exits suffice
        srv: 0
        for srv in by_name
        if srv != 0 and exit_lids[srv] <= exit_lids[0] and shared[srv] <= shared[0]
    }
    runs: list[list[int]] = []
    for servers in sigs.values():  # each already in name order
        run = [servers[0]]
        for srv in servers[1:]:
            if place[srv] != place[run[-1]] + 1:
                runs.append(run)  # another server sorts between: a new class
                run = []
            run.append(srv)
        runs.append(run)
    alike = {srv: 0 for srv in by_name if srv != 0}  # every server is server 0's copy
    return _from_runs(runs, server, by_local, local_id, two_fabric, twin, exits, alike)


def _from_runs(
    runs: list[list[int]],
    server: dict[str, int],
    by_local: dict[int, dict[str, str]],
    local_id: dict[str, str],
    two_fabric: bool,
    twin: dict[int, int],
    exits: dict[int, tuple[str, ...]],
    alike: dict[int, int],
) -> ServerSymmetry:
    """The symmetry whose classes are the runs of two or more servers (each run: servers of one
    signature, consecutive in name order, in that order); both constructors end here."""
    cls: dict[int, int] = {}
    ordered: dict[int, tuple[int, ...]] = {}
    for c, run in enumerate(r for r in runs if len(r) >= 2):
        ordered[c] = tuple(run)
        for srv in run:
            cls[srv] = c
    position = {srv: i for servers in ordered.values() for i, srv in enumerate(servers)}
    return ServerSymmetry(
        server=server,
        cls=cls,
        ordered=ordered,
        position=position,
        by_local=by_local,
        local_id=local_id,
        excursion=2 if two_fabric else 3,
        twin=twin,
        exits=exits,
        alike=alike,
    )
