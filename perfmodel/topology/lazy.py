"""A cluster graph whose servers are made when first read (issue 14, cost independent of node count).

:func:`~perfmodel.topology.cluster.build_cluster` joins ``servers`` copies of server 0 with a
fabric. A prediction reads the nodes and links of one or two servers and the fabric (routes
between two servers, the GPUs' specs, NCCL's P2P rule on server 0); the build record
(:class:`~perfmodel.topology.model.ReplicaPattern`) answers the rest. Materialising the 2,048
servers of a 16,384-GPU DGX A100 cluster (63,000 nodes, 92,000 links) cost ~0.2 s CPU and
~60 MB per ``predict`` process for nothing it read (``benchmarks/bench_scale.py --only growth``,
peak resident memory 113 -> 78 MB at 16,384 GPUs).

:class:`ServerTable` replaces networkx's two node-keyed dicts (``graph._node``, the node
attributes, and ``graph._adj``, the adjacency; networkx 3.x keeps a graph's whole state in
them) with dicts that hold the fabric's switches from the start and a server's nodes once one
of them is read by key (``[]``, ``get``, ``in``): the entries made are those the copy made
before (:func:`fill_server`). Anything that reads the whole dict (iteration, ``keys`` /
``items`` / ``values``, copy, comparison, pickling, a write) first makes every server and puts
the entries in the graph's order (every server in index order, then the fabric), so it sees the
same graph, node order and adjacency order as the eager build. ``len`` is known without making
anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from operator import add, itemgetter
from typing import Any

import networkx as nx

Attrs = dict[str, Any]

_ABSENT = object()  # no value (a lookup's default that no dict value is)


def server_node(server: int, local_id: str) -> str:
    """Node id ``n<server>/<local id>`` of a server of a cluster of copies (its prefix is
    :meth:`~perfmodel.topology.model.ReplicaPattern.prefix`), read back by
    :func:`server_of_name`."""
    return f"n{server}/{local_id}"


def server_of_name(key: Any, servers: int, local_ids: frozenset[str]) -> int | None:
    """The server ``s`` of node id ``key`` = ``n<s>/<local id>``
    (:meth:`~perfmodel.topology.model.ReplicaPattern.prefix`, the prefix without leading
    zeros) of a cluster of ``servers`` copies, or ``None`` where ``key`` is no such id."""
    if type(key) is not str or not key.startswith("n"):
        return None
    i = key.find("/", 1)
    digits = key[1:i]
    if i < 0 or not digits.isdecimal() or not digits.isascii():
        return None
    if digits[0] == "0" and i > 2:
        return None
    s = int(digits)
    return s if s < servers and key[i + 1 :] in local_ids else None


class ClusterFiller:
    """What makes server ``s``'s entries in a graph's two :class:`ServerTable` dicts.

    Parameters
    ----------
    servers
        Number of servers; server ``s``'s node ids are ``prefix(s) + local id``.
    prefix
        Node-id prefix of a server (:meth:`~perfmodel.topology.model.ReplicaPattern.prefix`,
        ``n<s>/``).
    template
        Server 0 by local id in node order: ``(local id, node attributes, [(neighbour local
        id, link attributes), ...])`` in adjacency order. A copy's node attributes are
        ``{**attributes, "server": s}``; its links share the template's attribute dicts (the
        graph is read-only, :class:`~perfmodel.topology.model.Topology`).
    fabric_links
        Per server, its links to the fabric in the order the builder made them: ``(local id,
        fabric node, link attributes)``, after the server's own links in the node's adjacency
        (read only: servers wired alike may share one list, e.g. every server on rails).
    fabric_nodes
        The fabric's nodes in graph order (after every server's).
    """

    def __init__(
        self,
        servers: int,
        prefix: Callable[[int], str],
        template: list[tuple[str, Attrs, list[tuple[str, Attrs]]]],
        fabric_links: list[list[tuple[str, str, Attrs]]],
        fabric_nodes: list[str],
    ) -> None:
        self.servers = servers
        self.prefix = prefix
        self.template = template
        self.fabric_links = fabric_links
        self.fabric_nodes = fabric_nodes
        self.local_ids = frozenset(lid for lid, _, _ in template)
        self.made: set[int] = set()
        self.complete = False
        # a topology may be read from several threads; re-entrant: a lookup that misses takes
        # it to wait for a reorder (_MadeOnRead._miss)
        self.lock = threading.RLock()
        self.node: ServerTable = ServerTable(self)
        self.adj: ServerTable = ServerTable(self)

    @property
    def size(self) -> int:
        """Nodes of the whole graph (``fabric_nodes`` grows while the builder adds switches)."""
        return self.servers * len(self.template) + len(self.fabric_nodes)

    def server_of_key(self, key: Any) -> int | None:
        """The server whose node ``key`` is, or ``None`` (not a server node id)."""
        return server_of_name(key, self.servers, self.local_ids)

    def make_for(self, key: Any) -> None:
        """Make the server of node ``key`` if it is not made yet (nothing for any other key,
        and once every server is made)."""
        if self.complete:
            return
        s = self.server_of_key(key)
        if s is None:
            return
        with self.lock:
            if s not in self.made and not self.complete:
                self.make(s)

    def make(self, s: int) -> None:
        """Put server ``s``'s node attributes and adjacency (fabric links last) in the tables
        (the caller holds :attr:`lock`)."""
        self.made.add(s)
        prefix = self.prefix(s)
        ids = {lid: prefix + lid for lid in self.local_ids}  # one string per node id
        node_set = dict.__setitem__
        node, adj = self.node, self.adj
        for lid, attrs, nbrs in self.template:
            gid = ids[lid]
            node_set(node, gid, {**attrs, "server": s})
            node_set(adj, gid, {ids[v]: d for v, d in nbrs})
        for lid, f, d in self.fabric_links[s]:
            dict.__getitem__(adj, ids[lid])[f] = d

    def make_all(self) -> None:
        """Make every server not made yet and put both tables in graph order (servers in
        index order, each in template order, then the fabric)."""
        if self.complete:
            return
        with self.lock:
            if not self.complete:
                self._make_all()

    def _make_all(self) -> None:
        for s in range(self.servers):
            if s not in self.made:
                self.make(s)
        order = [
            p + lid for p in map(self.prefix, range(self.servers)) for lid, _, _ in self.template
        ]
        order.extend(self.fabric_nodes)
        for table in (self.node, self.adj):
            entries = [(k, dict.__getitem__(table, k)) for k in order]
            dict.clear(table)
            dict.update(table, entries)
        self.complete = True


def _whole(name: str) -> Callable[..., Any]:
    """``dict.<name>`` after every entry is made (a read or write of the whole dict)."""
    method = getattr(dict, name)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.make_all()
        return method(self, *args, **kwargs)

    call.__name__ = name
    call.__doc__ = f"``dict.{name}`` of the whole dict (every entry made first)."
    return call


class _MadeOnRead(dict):  # type: ignore[type-arg]
    """A dict whose entries are made when first read by key (``[]``, ``get``, ``in``:
    :meth:`_make_for`); any read or write of the whole dict makes every entry first, in the
    order of the eager dict (:meth:`make_all`). ``len`` is known without making anything."""

    __slots__ = ()

    def _make_for(self, key: Any) -> None:
        """Make ``key``'s entry (with what is made with it) if it is a key whose entry is not
        made yet; nothing for any other key."""
        raise NotImplementedError

    def _guard(self) -> threading.RLock:
        """The lock :meth:`make_all` holds while it reorders the dict."""
        raise NotImplementedError

    def make_all(self) -> None:
        """Make every entry and put the entries in the eager dict's order."""
        raise NotImplementedError

    def _size(self) -> int:
        """Entries of the whole dict."""
        raise NotImplementedError

    def _miss(self, key: Any, default: Any) -> Any:
        """``key``'s value after a plain lookup missed (``default`` where there is none): the
        entry made if it is one not made yet, then looked up again under :meth:`_guard`, so
        that a reorder in another thread (:meth:`make_all` empties and refills the dict under
        that lock) is over: a key of the eager dict is never missed."""
        self._make_for(key)
        with self._guard():
            return dict.get(self, key, default)

    def __missing__(self, key: Any) -> Any:
        value = self._miss(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or self._miss(key, _ABSENT) is not _ABSENT

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, _ABSENT)
        return self._miss(key, default) if value is _ABSENT else value

    def __len__(self) -> int:
        return self._size()

    def __iter__(self) -> Iterator[Any]:
        self.make_all()
        return dict.__iter__(self)

    def __eq__(self, other: object) -> bool:
        self.make_all()
        if isinstance(other, _MadeOnRead):
            other.make_all()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce_ex__(self, protocol: Any) -> Any:  # a plain dict when pickled or copied
        self.make_all()
        return (dict, (dict(dict.items(self)),))

    keys = _whole("keys")
    values = _whole("values")
    items = _whole("items")
    copy = _whole("copy")
    __reversed__ = _whole("__reversed__")
    __repr__ = _whole("__repr__")
    __or__ = _whole("__or__")
    __ror__ = _whole("__ror__")
    __ior__ = _whole("__ior__")
    __setitem__ = _whole("__setitem__")
    __delitem__ = _whole("__delitem__")
    __sizeof__ = _whole("__sizeof__")
    update = _whole("update")
    setdefault = _whole("setdefault")
    pop = _whole("pop")
    popitem = _whole("popitem")
    clear = _whole("clear")
    __hash__ = None  # type: ignore[assignment]


class ServerTable(_MadeOnRead):
    """One of a cluster graph's node-keyed dicts, a server's entries made on first read by key
    (see the module docstring); subscript of a made key is the plain dict lookup."""

    __slots__ = ("_filler",)

    def __init__(self, filler: ClusterFiller) -> None:
        super().__init__()
        self._filler = filler

    def _make_for(self, key: Any) -> None:
        self._filler.make_for(key)

    def _guard(self) -> threading.RLock:
        return self._filler.lock

    def make_all(self) -> None:
        self._filler.make_all()

    def _size(self) -> int:
        f = self._filler
        return dict.__len__(self) if f.complete else f.size


class _OwnLocked(_MadeOnRead):
    """A :class:`_MadeOnRead` dict holding its own lock and completion flag: :meth:`make_all`
    puts :meth:`_eager_entries` in place once, under the lock."""

    __slots__ = ("_complete", "_lock")

    def __init__(self) -> None:
        super().__init__()
        self._complete = False
        self._lock = threading.RLock()

    def _eager_entries(self) -> list[tuple[Any, Any]]:
        """Every entry, in the eager dict's order (made where not made yet)."""
        raise NotImplementedError

    def _guard(self) -> threading.RLock:
        return self._lock

    def make_all(self) -> None:
        if self._complete:
            return
        with self._lock:
            if not self._complete:
                entries = self._eager_entries()
                dict.clear(self)
                dict.update(self, entries)
                self._complete = True


class NodeTable(_OwnLocked):
    """``{node: value}`` over the nodes of a cluster of copies (:class:`ClusterFiller`'s
    naming) and fixed entries (the fabric's): server ``s``'s node ids ``names(s)`` with values
    ``values(s)`` (both aligned with ``local_ids``), made on the first read by key of one of
    its nodes; in eager order: servers in index order, each in ``local_ids`` order, then
    ``fixed``.

    A table that :mod:`perfmodel.topology.symmetry` would otherwise fill for the 63,000
    nodes of a 16,384-GPU cluster (server index, local id) where a prediction reads some.

    ``names(s)`` must be ``[server_node(s, lid) for lid in local_ids]`` (the ids that
    :func:`server_of_name` reads back). Once :attr:`WIDE` servers are made, a read of another
    server's node makes that node's local id in every server not made yet instead of the
    server's every node (a data-parallel group of 16,384 GPUs reads the 8 GPU local ids of
    2,048 servers: 16,000 entries per table instead of 63,000, and 8 misses instead of 2,048;
    :func:`~perfmodel.topology.symmetry.server_symmetry`'s two tables 29 -> ~10 ms CPU on the
    2-core development machine). A reader of fewer servers never pays for the others; one
    that reads whole servers beyond :attr:`WIDE` makes at most the whole table, once.
    """

    WIDE = 64
    """Servers made one by one before a read makes a local id in every server."""

    __slots__ = (
        "_fixed",
        "_lid_index",
        "_lid_set",
        "_lids_made",
        "_made",
        "_names",
        "_rows",
        "_servers",
        "_values",
    )

    def __init__(
        self,
        servers: int,
        names: Callable[[int], Sequence[str]],
        local_ids: Iterable[str],
        values: Callable[[int], Sequence[Any]],
        fixed: dict[Any, Any],
    ) -> None:
        super().__init__()
        lids = tuple(local_ids)
        self._servers, self._names, self._lid_set = servers, names, frozenset(lids)
        self._values, self._fixed = values, fixed
        self._lid_index = {lid: i for i, lid in enumerate(lids)}
        self._made: set[int] = set()  # servers made whole
        self._lids_made: set[str] = set()  # local ids made in every server (WIDE)
        # (node-id prefix, values) of the servers not made whole, once WIDE
        self._rows: tuple[list[str], list[Sequence[Any]]] | None = None
        dict.update(self, fixed)

    def _make_for(self, key: Any) -> None:
        if self._complete:
            return
        s = server_of_name(key, self._servers, self._lid_set)
        if s is None:
            return
        with self._lock:
            if s in self._made or self._complete:
                return
            if len(self._made) < self.WIDE:
                # the server's entries at once (a caller reads every GPU of a group)
                dict.update(self, zip(self._names(s), self._values(s), strict=True))
                self._made.add(s)
                return
            lid = key[key.index("/") + 1 :]
            if lid not in self._lids_made:
                self._make_local_id(lid)

    def _make_local_id(self, lid: str) -> None:
        """Put ``lid``'s entry of every server not made whole in the table (the caller holds
        the lock): the same keys and values as the servers' ``names`` and ``values``."""
        if self._rows is None:  # the servers not made whole (none is made whole from now on)
            made = self._made
            todo = [s for s in range(self._servers) if s not in made]
            self._rows = (
                list(map(server_node, todo, repeat(""))),
                list(map(self._values, todo)),
            )
        prefixes, rows = self._rows
        # the same keys and values in the same order, in C loops (2,048 servers per local id)
        dict.update(
            self, zip(map(add, prefixes, repeat(lid)), map(itemgetter(self._lid_index[lid]), rows))
        )
        self._lids_made.add(lid)

    def make_all(self) -> None:
        super().make_all()
        self._rows = None

    def _eager_entries(self) -> list[tuple[Any, Any]]:
        names, values = self._names, self._values
        entries = [kv for s in range(self._servers) for kv in zip(names(s), values(s), strict=True)]
        entries.extend(self._fixed.items())
        return entries

    def _size(self) -> int:
        return self._servers * len(self._lid_set) + len(self._fixed)


class ServerMap(_OwnLocked):
    """``{server: value(server)}`` for the servers of ``order`` (every key, in eager order),
    a server's value made on first read by key."""

    __slots__ = ("_keys", "_order", "_value")

    def __init__(self, order: list[int], value: Callable[[int], Any]) -> None:
        super().__init__()
        self._order, self._keys, self._value = order, frozenset(order), value

    def _make_for(self, key: Any) -> None:
        if self._complete:
            return
        try:
            known = key in self._keys
        except TypeError:
            return
        if not known:
            return
        with self._lock:
            if not dict.__contains__(self, key) and not self._complete:
                dict.__setitem__(self, key, self._value(key))

    def _eager_entries(self) -> list[tuple[Any, Any]]:
        get, value = dict.get, self._value
        return [
            (s, v if (v := get(self, s, _ABSENT)) is not _ABSENT else value(s)) for s in self._order
        ]

    def _size(self) -> int:
        return len(self._order)


def changed_copy(graph: nx.Graph, change: Callable[[str, Attrs], None]) -> nx.Graph | None:
    """``graph.copy()`` of a cluster graph built by :class:`ClusterFiller` with every server's
    node attributes changed alike, its servers again made when first read; ``None`` where
    ``graph`` was not built so.

    ``change(local id, attributes)`` edits a copy of server 0's attributes of each local id
    (what :meth:`~perfmodel.topology.model.Topology.with_p2p_denied` does to every server's
    GPU of that local id in a ``graph.copy()``). The nodes are in the same order and each
    node's neighbours in the order networkx's ``Graph.copy`` gives them (it adds the edges
    node by node in node order, each node's in adjacency order: a node's neighbours that
    come before it in node order first, by their position, then the others in the order they
    had; :func:`_copy_order`). Node attribute dicts are the copy's own; link attribute dicts
    are shared with ``graph`` (both are read-only, :class:`~perfmodel.topology.model.Topology`),
    where ``graph.copy()`` gives each link its own dict of the same attributes.
    """
    node = graph._node
    if type(node) is not ServerTable:
        return None
    old = node._filler
    width = len(old.template)
    index = {lid: i for i, (lid, _, _) in enumerate(old.template)}
    template = []
    for i, (lid, attrs, nbrs) in enumerate(old.template):
        new = dict(attrs)
        change(lid, new)
        # a server's fabric links (after every server node) keep their place, last
        template.append((lid, new, _copy_order(i, nbrs, index.__getitem__)))
    filler = ClusterFiller(
        old.servers, old.prefix, template, old.fabric_links, list(old.fabric_nodes)
    )
    base = old.servers * width
    fabric_pos = {f: base + j for j, f in enumerate(old.fabric_nodes)}

    def position(x: str) -> int:
        s = server_of_name(x, old.servers, old.local_ids)
        return fabric_pos[x] if s is None else s * width + index[x[len(old.prefix(s)) :]]

    with old.lock:  # not while another thread reorders the tables (make_all)
        fabric = [
            (f, dict(dict.__getitem__(old.node, f)), list(dict.__getitem__(old.adj, f).items()))
            for f in old.fabric_nodes
        ]
    for f, attrs, nbrs in fabric:  # the fabric as a copy has it: its own dicts
        dict.__setitem__(filler.node, f, attrs)
        dict.__setitem__(filler.adj, f, dict(_copy_order(fabric_pos[f], nbrs, position)))
    out = lazy_graph(filler)
    out.graph.update(graph.graph)
    return out


def _copy_order(
    at: int, nbrs: list[tuple[str, Attrs]], position: Callable[[str], int]
) -> list[tuple[str, Attrs]]:
    """The neighbours ``nbrs`` (adjacency order) of the node at node-order position ``at`` in
    the order of networkx's ``Graph.copy``: those before it by position, then the others as
    they were."""
    keyed = [(position(v), k) for k, (v, _) in enumerate(nbrs)]
    before = sorted((p, k) for p, k in keyed if p < at)
    return [nbrs[k] for _, k in before] + [nbrs[k] for p, k in keyed if p >= at]


def lazy_graph(filler: ClusterFiller) -> nx.Graph:
    """An empty :class:`networkx.Graph` whose node and adjacency dicts are ``filler``'s tables
    (set before any of networkx's views of the graph is made)."""
    g = nx.Graph()
    g._node = filler.node
    g._adj = filler.adj
    return g
