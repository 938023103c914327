"""Links as resources: every directed link of a topology with its capacity, latency, link
units and transport class, and the paths' link ids.

:class:`DirectedLinks` is the one table the communication model passes around. It is made of
four parts, one module each: the link table (here: an id per directed link, made when the link
is first read, and its columns), the node tables (:mod:`perfmodel.comm.nodes`), the
peer-to-peer rules (:mod:`perfmodel.comm.pcie_p2p`) and the route search
(:mod:`perfmodel.comm.routes`). It also keeps the memos of the ring packing
(:mod:`perfmodel.comm.rings`), which are per table.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from perfmodel.comm.nodes import NodeTables
from perfmodel.comm.params import NET_FAMILIES, NVLINK_FAMILIES, HwClass, LinkParams
from perfmodel.comm.pcie_p2p import PeerRules
from perfmodel.comm.routes import RouteSearch
from perfmodel.hardware.links import LinkFamily
from perfmodel.topology import Topology

if TYPE_CHECKING:
    import numpy as np

    from perfmodel.comm.rings import Channel


class DirectedLinks(NodeTables, PeerRules, RouteSearch):
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
        self._ids: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._classes: dict[tuple[str, ...], HwClass] = {}
        self._init_routes()
        self._init_peer_rules()
        # The ring packing's memos (perfmodel.comm.rings, per table):
        self._packed: dict[tuple[tuple[str, ...], int], tuple[Channel, ...]] = {}
        #: ring packings (keys of :attr:`_packed`) no choice of which compared node names
        #: (:func:`~perfmodel.comm.rings.pack_rings`): the same, names mapped, on any image of
        #: the server
        self._name_free: set[tuple[tuple[str, ...], int]] = set()
        #: counts choices of the ring packing's searches that the name order decided
        #: (``next`` is atomic: a packing's own ties are never missed beside other threads')
        self._name_ties = itertools.count()
        #: (src, dst, allowed) -> ``_min_hop_layers`` of the ring packing's searches inside a
        #: server (each pair is searched again on every ring's residual,
        #: :func:`~perfmodel.comm.paths.min_hop_widest`)
        self._layers: dict[Any, tuple[dict[str, int], list[str]] | None] = {}

    # ------------------------------------------------------------------ link table (lazy)
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

    # ------------------------------------------------------------------ paths
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
        if fams & NET_FAMILIES:
            cls = HwClass.NET
        elif fams and fams <= NVLINK_FAMILIES:
            cls = HwClass.NVLINK
        else:
            cls = HwClass.PCI
        self._classes[key] = cls
        return cls


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
