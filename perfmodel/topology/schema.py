"""The topology graph schema: node kinds, node and edge attributes, and validation.

A topology is an undirected :class:`networkx.Graph`. Links are full duplex: the edge's
``bandwidth_Bps`` is available *in each direction* independently (the flow-level simulator
treats ``(u, v)`` and ``(v, u)`` as two resources).

Node attributes
---------------
kind : NodeKind
    ``gpu``, ``cpu``, ``pcie_switch``, ``nvswitch``, ``nic``, ``network_switch``.
server : int
    Index of the server (machine) the node belongs to; ``-1`` for fabric switches.
local_id : str
    The node's id inside its server description (``gpu3``), equal to the id for single nodes.
model : str
    GPU model (canonical catalogue name) for GPUs; free text for others (optional).
gpu_index : int
    Local GPU index within the server (GPUs only); global rank order is ``(server, gpu_index)``.
tier : int
    Fabric tier for network switches (0 = leaf / top of rack, 1 = spine, ...).
p2p : bool
    GPUs only, optional: whether this GPU may exchange data with its PCIe peers directly
    (peer-to-peer). ``False`` makes NCCL stage GPU-to-GPU traffic through host memory (its SHM
    transport: the route goes through the CPU). Absent: the GPU model's ``pcie_p2p``
    (:class:`perfmodel.hardware.gpus.GPUSpec`; ``False`` for GeForce RTX 3090/4090). NVLink
    peers always use P2P. Set per node or server-wide (``[system] p2p = false``), or with
    :meth:`perfmodel.topology.Topology.with_p2p` (``--p2p on|off``).
tray : int
    Optional: the compute tray (board) of a rack-scale server the node sits in (GB200 NVL72: 18
    trays of 2 CPUs, 4 GPUs and 4 NICs). Informative: the NVLink domain, not the tray, decides
    where traffic goes.
p2p_denied : tuple[str, ...]
    GPUs only, optional: local ids of the peers this GPU cannot reach by peer-to-peer although
    both allow it (``nvidia-smi topo -p2p r`` not OK, e.g. ``CNS`` across sockets; or NCCL's P2P
    level rule for the CPU of an imported NCCL topology). Those pairs go through host memory.

Edge attributes
---------------
tech : str
    Link technology name from the catalogue (``nvlink2``, ``pcie3-x16``, ``ib-hdr``) or
    ``custom`` for explicit numbers.
family : LinkFamily
    The technology family.
count : int
    Number of parallel links bundled in this edge (e.g. 2 NVLinks between a DGX-1V pair).
bandwidth_Bps : float
    Raw bandwidth per direction of the whole edge (``count`` x per-link), bytes/s, > 0.
efficiency : float
    Achievable fraction of the raw bandwidth, in (0, 1].
latency_s : float
    One-way latency in seconds, >= 0.

A missing physical attribute is an error, never a silent default.
"""

from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Collection, Iterable

import networkx as nx

from perfmodel._enum import ParsedEnum
from perfmodel.errors import TopologyError
from perfmodel.hardware.links import LinkFamily


class NodeKind(
    str,
    ParsedEnum,
    normalize=str,
    error=TopologyError,
    template="{where}: unknown node kind {text!r}; expected {expected}",
):
    GPU = "gpu"
    CPU = "cpu"
    PCIE_SWITCH = "pcie_switch"
    NVSWITCH = "nvswitch"
    NIC = "nic"
    NETWORK_SWITCH = "network_switch"


NODE_ATTRS_REQUIRED = ("kind", "server", "local_id")
NODE_ATTRS_OPTIONAL = (
    "model", "gpu_index", "tier", "label", "rail", "p2p", "p2p_denied", "tray",
)  # fmt: skip
EDGE_ATTRS_REQUIRED = ("tech", "family", "count", "bandwidth_Bps", "efficiency", "latency_s")

# Nodes that can forward traffic between two other nodes. GPUs are endpoints only: NCCL does not
# route a point-to-point transfer through a third GPU's memory (its rings do hop GPU to GPU, but as
# separate transfers), and neither does the CPU-hosted parameter path.
TRANSIT_KINDS = frozenset(
    {NodeKind.CPU, NodeKind.PCIE_SWITCH, NodeKind.NVSWITCH, NodeKind.NIC, NodeKind.NETWORK_SWITCH}
)


def _graph_error(source: str, message: str, value: object) -> TopologyError:
    """The error of a graph that fails a check: ``"{source}: {message}"``, naming the bad
    ``value`` (one form for every check of :func:`validate_graph`)."""
    return TopologyError(f"{source}: {message}", value=value, where=source)


def _is_integer(value: object) -> bool:
    """Whether a graph attribute is an integer (a Python or NumPy integer; not a boolean, a
    float or text): the one test of the ``server``, ``gpu_index`` and ``count`` attributes.

    >>> _is_integer(3), _is_integer(True), _is_integer(3.0)
    (True, False, False)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def effective_bandwidth(graph: nx.Graph, u: str, v: str) -> float:
    """Large-message goodput of edge ``u-v`` per direction, bytes/s: ``bandwidth_Bps * efficiency``."""
    data = graph.edges[u, v]
    return float(data["bandwidth_Bps"]) * float(data["efficiency"])


def validate_graph(
    graph: nx.Graph, *, source: str = "<graph>", device_models: Collection[str] = ()
) -> None:
    """Check a graph against the schema; raise :class:`TopologyError` naming source, element, value.

    Checks: required attributes present and typed; positive bandwidth; efficiency in (0, 1];
    non-negative latency; GPU models known to the catalogue (or named in ``device_models``: the
    devices a :class:`~perfmodel.topology.Topology` describes itself, ``device_specs``); no two
    nodes of one server with one local id; at least one GPU; every GPU reaches every other GPU
    through transit nodes. Nothing is remembered: a graph checked here and edited afterwards is
    checked again where a :class:`~perfmodel.topology.Topology` is made of it
    (:func:`check_given_graph`).
    """
    gpus = check_attributes(
        graph,
        graph.nodes(data=True),
        graph.edges(data=True),
        source=source,
        device_models=device_models,
    )
    if not gpus:
        raise _graph_error(source, "topology has no GPU", None)
    check_gpu_connectivity(graph, gpus, source)


#: Graphs perfmodel's own code made and checked (the file loaders, the cluster builder, the
#: copies a topology's ``with_*`` methods change), by identity (weak keys: dropped with the
#: graph); :func:`own_graph` adds one. A graph a user builds is never here, however often it
#: passed: the user holds it and may edit it between two topologies made of it. A graph listed
#: here reaches a user only as ``Topology.graph``, which is read-only by contract: an in-place
#: edit already leaves that topology's cached GPUs, routes and prices stale, and the supported
#: way to change hardware (``with_*``, or ``graph.copy()`` edited by hand) makes a new graph,
#: which is not listed.
_OWN: weakref.WeakKeyDictionary[nx.Graph, bool] = weakref.WeakKeyDictionary()


def own_graph(graph: nx.Graph) -> nx.Graph:
    """Record ``graph`` as made and checked by perfmodel itself (see :data:`_OWN`); returns it.

    Call only on a graph this package built and checked (:func:`validate_graph`, or a
    :class:`~perfmodel.topology.Topology` made of it) and has not yet handed to a caller.
    """
    _OWN[graph] = True
    return graph


def check_given_graph(
    graph: nx.Graph, *, source: str = "<graph>", device_models: Collection[str] = ()
) -> None:
    """:func:`validate_graph`, unless perfmodel's own code made and checked this very graph
    object (:func:`own_graph`).

    The check :class:`~perfmodel.topology.Topology` runs on a graph it was given (a graph built
    by hand through the public API: two GPUs of one server with one local id, a node without a
    ``local_id``, a GPU with no link raise :class:`TopologyError` naming the nodes where the
    topology is made, not a ``KeyError`` deep in routing). A hand-given graph is checked every
    time, so one edited after an earlier topology was made of it is caught; the loaders' and
    the builder's graphs cost one dictionary lookup.
    """
    if graph not in _OWN:
        validate_graph(graph, source=source, device_models=device_models)


def check_attributes(
    graph: nx.Graph,
    nodes: Iterable[tuple[str, dict]],
    edges: Iterable[tuple[str, str, dict]],
    *,
    source: str = "<graph>",
    device_models: Collection[str] = (),
) -> list[str]:
    """The attribute checks of :func:`validate_graph` on the given ``(node, data)`` and
    ``(u, v, data)`` items of ``graph``; returns the GPU nodes among ``nodes`` (a GPU's
    ``model`` must be in the catalogue or in ``device_models``).

    The cluster builder checks one server and the fabric this way: its other servers are copies
    of the checked one, attribute for attribute (:func:`perfmodel.topology.cluster.build_cluster`).
    """
    from perfmodel.hardware.gpus import get_gpu

    gpus: list[str] = []
    seen: dict[tuple[object, str], str] = {}  # (server, local id) -> the node that has it
    for node, data in nodes:
        for key in NODE_ATTRS_REQUIRED:
            if key not in data:
                raise _graph_error(source, f"node {node!r} lacks attribute {key!r}", node)
        server = data["server"]
        if not _is_integer(server):
            raise _graph_error(
                source, f"node {node!r} has server {server!r}, not an integer index", server
            )
        other = seen.setdefault((server, str(data["local_id"])), node)
        if other != node:
            raise _graph_error(
                source,
                f"nodes {other!r} and {node!r} share local id {data['local_id']!r} in"
                f" server {data['server']!r} (a server's local ids name its nodes one to one)",
                (other, node),
            )
        kind = data["kind"]
        if not isinstance(kind, NodeKind):
            raise _graph_error(source, f"node {node!r} has kind {kind!r}, not a NodeKind", kind)
        if kind is NodeKind.GPU:
            if "model" not in data or "gpu_index" not in data:
                raise _graph_error(source, f"GPU node {node!r} needs 'model' and 'gpu_index'", node)
            index = data["gpu_index"]
            if not _is_integer(index):
                raise _graph_error(
                    source, f"GPU node {node!r} has gpu_index {index!r}, not an integer", index
                )
            if data["model"] not in device_models:
                get_gpu(data["model"], where=f"{source}: node {node!r}")
            gpus.append(node)
    for u, v, data in edges:
        for key in EDGE_ATTRS_REQUIRED:
            if key not in data:
                raise _graph_error(source, f"link {u}-{v} lacks attribute {key!r}", (u, v))
        bw = data["bandwidth_Bps"]
        if not (isinstance(bw, (int, float)) and math.isfinite(bw) and bw > 0):
            raise _graph_error(source, f"link {u}-{v} has non-positive bandwidth {bw!r}", bw)
        eff = data["efficiency"]
        if not (isinstance(eff, (int, float)) and 0 < eff <= 1):
            raise _graph_error(source, f"link {u}-{v} has efficiency {eff!r} outside (0, 1]", eff)
        lat = data["latency_s"]
        if not (isinstance(lat, (int, float)) and math.isfinite(lat) and lat >= 0):
            raise _graph_error(source, f"link {u}-{v} has negative or invalid latency {lat!r}", lat)
        if not isinstance(data["family"], LinkFamily):
            raise _graph_error(
                source,
                f"link {u}-{v} family {data['family']!r} is not a LinkFamily",
                data["family"],
            )
        count = data["count"]
        if not _is_integer(count) or count < 1:
            raise _graph_error(
                source, f"link {u}-{v} has count {count!r}, not an integer >= 1", data["count"]
            )
    return gpus


def transit_view(graph: nx.Graph, endpoints: Iterable[str]) -> nx.Graph:
    """Subgraph view in which only transit nodes plus the given endpoints appear."""
    keep = set(endpoints)
    return nx.subgraph_view(
        graph, filter_node=lambda n: n in keep or graph.nodes[n]["kind"] in TRANSIT_KINDS
    )


def check_gpu_connectivity(graph: nx.Graph, gpus: list[str], source: str) -> None:
    if len(gpus) < 2:
        return
    # Components of the transit-only graph; each GPU must touch the same component set (or
    # connect directly to every other GPU). A plain search over the adjacency: the component
    # numbers only need to be equal within a component.
    adj = graph.adj
    transit = {n for n, kind in graph.nodes(data="kind") if kind in TRANSIT_KINDS}
    comp_of: dict[str, int] = {}
    for start in transit:
        if start in comp_of:
            continue
        i = comp_of[start] = len(comp_of)
        stack = [start]
        while stack:
            for n in adj[stack.pop()]:
                if n in transit and n not in comp_of:
                    comp_of[n] = i
                    stack.append(n)
    reach: dict[str, set[int]] = {}
    for g in gpus:
        reach[g] = {comp_of[n] for n in graph.neighbors(g) if n in comp_of}
    ref = gpus[0]
    for g in gpus[1:]:
        if reach[g] & reach[ref] or graph.has_edge(g, ref):
            continue
        # Fall back to an exact check (rare: direct GPU-GPU links only).
        view = transit_view(graph, (ref, g))
        if not nx.has_path(view, ref, g):
            raise _graph_error(source, f"GPU {g!r} cannot reach GPU {ref!r} (disconnected GPU)", g)
