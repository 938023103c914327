"""Node tables of a topology for the communication model's searches: each node's server and
local id, a server's nodes by local id, neighbours, the transit nodes, the name order, a
server's NICs; and the groups of endpoints the model accepts (:func:`check_group`).

:class:`NodeTables` is the node half of :class:`~perfmodel.comm.links.DirectedLinks`. Every
table is built on first use; where the topology's build record describes its graph (servers
copied from server 0, :class:`~perfmodel.topology.model.ReplicaPattern`) a table is read off the
record per server or node when first asked for (:class:`OnDemand`), not from the 30,000 nodes
of a 16,384-GPU cluster (issue 14).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import cached_property, lru_cache, partial
from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.topology import Topology
from perfmodel.topology.lazy import server_of_name
from perfmodel.topology.model import ReplicaPattern
from perfmodel.topology.schema import TRANSIT_KINDS, NodeKind
from perfmodel.topology.symmetry import ServerSymmetry, server_symmetry


class NodeTables:
    """Per-node tables of :attr:`topology`, each built on first use (a part of
    :class:`~perfmodel.comm.links.DirectedLinks`, which sets ``topology``)."""

    topology: Topology

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
            return OnDemand(partial(_pattern_nodes, p, frozenset))
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
            return OnDemand(partial(_pattern_by_local, p, self.topology.graph))
        out: dict[int, dict[str, str]] = {}
        lid = self.local_id
        for n, srv in self.server.items():
            out.setdefault(srv, {})[lid[n]] = n
        return out

    @cached_property
    def adjacency(self) -> dict[str, tuple[str, ...]]:
        """Node -> its neighbours, each node's entry made when first read (a search reads the
        nodes of two servers and the fabric, not the 30,000 nodes of a 16,384-GPU cluster)."""
        return OnDemand(partial(_neighbours, self.topology.graph))

    @cached_property
    def adjacency_set(self) -> dict[str, frozenset[str]]:
        """Node -> its neighbours as a set (intersected with a search's allowed nodes); made
        per node when first read, as :attr:`adjacency`."""
        return OnDemand(partial(_neighbour_set, self.adjacency))

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
        if p.servers <= PATTERN_TRANSIT_SERVERS:
            return frozenset(self._in_every_server(inside)).union(fabric)
        lid = self.local_id
        return PatternTransit(
            p, tuple(lid[n] for n in inside), tuple(fabric), self._in_every_server
        )

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
                return OnDemand(
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
    def _symmetry(self) -> ServerSymmetry:
        return server_symmetry(self.topology)


PATTERN_TRANSIT_SERVERS = 64
"""Servers of a cluster of copies above which :attr:`NodeTables.transit` is a
:class:`PatternTransit` (membership read off the node's name) instead of the set of every
server's transit nodes: 2,048 DGX A100 servers have ~25,000 of them, ~5 ms CPU to name and hash
for a prediction whose searches test a few thousand nodes; up to 64 servers (~800 nodes) the
set costs less than its tests through a Python ``__contains__``."""


class PatternTransit(AbstractSet[str]):
    """The transit nodes of a cluster of copies (:class:`~perfmodel.topology.model.
    ReplicaPattern`): node ``n<s>/<local id>`` of server ``s < servers`` where server 0's node
    of that local id is a transit node, and the fabric's transit nodes; equal to the frozenset
    of them (:meth:`NodeTables.transit` below :data:`PATTERN_TRANSIT_SERVERS`), which iteration
    lists in the same order, each membership decided by parsing the name
    (:func:`~perfmodel.topology.lazy.server_of_name`, the inverse of the pattern's naming rule)
    and remembered."""

    __slots__ = ("_fabric", "_fabric_order", "_inside", "_list", "_local_ids", "_seen", "_servers")

    def __init__(
        self,
        pattern: ReplicaPattern,
        inside: tuple[str, ...],
        fabric: tuple[str, ...],
        every_server: Callable[[Iterable[str]], list[str]],
    ) -> None:
        self._servers = pattern.servers
        self._local_ids = frozenset(pattern.local_ids)
        self._inside = frozenset(inside)
        self._fabric = frozenset(fabric)
        self._fabric_order = fabric
        # the eager set's elements in its order, named when first iterated
        self._list = partial(every_server, [pattern.prefix(0) + x for x in inside])
        self._seen: dict[object, bool] = {}

    def __contains__(self, key: object) -> bool:
        got = self._seen.get(key)
        if got is None:
            if key in self._fabric:
                got = True
            else:
                s = server_of_name(key, self._servers, self._local_ids)
                got = s is not None and key[key.find("/") + 1 :] in self._inside  # type: ignore[index]
            self._seen[key] = got
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(frozenset(self._list()).union(self._fabric_order))

    def __len__(self) -> int:
        return self._servers * len(self._inside) + len(self._fabric_order)

    def __hash__(self) -> int:  # the frozenset's (an equal key finds the same entry)
        return hash(frozenset(self))

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (and copied) as the frozenset it equals
        return (frozenset, (tuple(self),))


def _neighbours(graph: Any, node: str) -> tuple[str, ...]:
    return tuple(graph.adj[node])


def _neighbour_set(adjacency: dict[str, tuple[str, ...]], node: str) -> frozenset[str]:
    return frozenset(adjacency[node])


class OnDemand(dict):  # type: ignore[type-arg]
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


def nics_of(topology: Topology, server: int) -> tuple[str, ...]:
    """The server's NICs with a fabric port, sorted."""
    return _fabric_nics(topology).get(server, ())


@lru_cache(maxsize=16)
def _fabric_nics(topology: Topology) -> Mapping[int, tuple[str, ...]]:
    """Server -> its NICs with a fabric port, sorted: per server when first asked, from the
    build record's fabric attachments where there is one, else one pass over the graph (cached
    per topology), not one per server asked."""
    p = topology.pattern
    if p is not None and p.describes(topology):
        return OnDemand(partial(_attached_nics, topology, p))
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
        blocks = equal_runs(members, list(map(server.__getitem__, members)))
        if blocks is not None:
            return blocks
        # runs of one server at a time (a group in rank order is one run per server)
        for srv, run in itertools.groupby(members, key=server.__getitem__):
            part = groups.get(srv)
            if part is None:
                groups[srv] = list(run)
            else:
                part.extend(run)
    return list(groups.values())


def equal_runs(members: Sequence[str], srv: list[int]) -> list[list[str]] | None:
    """:func:`split_by_server` of a group that is consecutive runs of ``k`` members per server,
    each server in one run (a data-parallel group in rank order: ``k`` GPUs of each of
    thousands of servers), read with C loops (slices and comparisons of the members' server
    list); ``None`` for any other group (then split member by member).

    The same parts, in the same order: with every run of length ``k`` and the runs' servers
    distinct, the servers in order of first appearance are the runs' and each run is its
    server's whole part. Issue 27: the 2,048-server ring of 16,384 GPUs is split three times
    per analysis. ``srv``: the members' servers, in order.
    """
    n = len(members)
    if n < 2:
        return None
    first = srv[0]
    k = next((i for i, s in enumerate(srv) if s != first), n)
    if n % k:
        return None
    heads = srv[::k]
    if len(set(heads)) != len(heads) or any(srv[j::k] != heads for j in range(1, k)):
        return None
    return [list(members[i : i + k]) for i in range(0, n, k)]
