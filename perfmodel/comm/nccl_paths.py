"""NCCL's path types between a GPU and a NIC, read off the topology graph.

NCCL classifies every path of its topology (``src/graph/topo.h``, ``src/graph/paths.cc``) by the
worst hop on it; the ring graph's ``typeInter`` (the path from the GPU that sends to, or
receives from, the network to its NIC) decides, among other things, whether NCCL enables the
LL128 protocol over the network (:func:`perfmodel.comm.tuner.ll128_enabled`). The order below is
NVIDIA/nccl v2.29.7-1's (``PATH_LOC`` 0 ... ``PATH_NET`` 10); older releases lack ``C2C`` and
``P2C`` (added in 2.27) and ``PXN`` (2.12), but keep the relative order of the others, which is
all the rules compare:

``PIX``
    through at most one PCIe switch (GPU and NIC on one switch: every DGX).
``PXB``
    through several PCIe switches, not through a CPU (DGX A100: two levels of switches).
``P2C``
    GPU to its CPU over NVLink-C2C, then PCIe to the NIC (Grace Blackwell).
``PXN``
    over NVLink to another GPU, then ``PIX``/``PXB`` to the NIC from there (NCCL >= 2.12,
    ``NCCL_PXN_DISABLE=0``: what NCCL uses instead of a path through the CPU when a GPU on
    NVLink has the NIC close).
``PHB``
    through one CPU (the NIC hangs off the CPU's root complex, or another switch tree of the
    same CPU).
``SYS``
    across the CPUs' socket link (QPI/UPI/xGMI).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from perfmodel.hardware.links import LinkFamily
from perfmodel.topology import Topology
from perfmodel.topology.schema import NodeKind


class PathType(enum.IntEnum):
    """NCCL's path types, NVIDIA/nccl v2.29.7-1 ``src/graph/topo.h`` order (smaller: closer)."""

    LOC = 0
    NVL = 1
    NVB = 2
    C2C = 3
    PIX = 4
    PXB = 5
    P2C = 6
    PXN = 7
    PHB = 8
    SYS = 9
    NET = 10


#: Node kinds a GPU-to-NIC path may pass without NVLink (NCCL's PCI/CPU graph).
_HOST_PATH_KINDS = frozenset({NodeKind.PCIE_SWITCH, NodeKind.CPU})


def _host_path(topology: Topology, gpu: str, nic: str) -> list[str] | None:
    """The fewest-hop path from ``gpu`` to ``nic`` through PCIe switches and CPUs only (no
    other GPU, no NVSwitch), or ``None``: breadth first, neighbours in name order, the first
    path found."""
    g = topology.graph
    prev: dict[str, str | None] = {gpu: None}
    todo = deque([gpu])
    while todo:
        x = todo.popleft()
        for y in sorted(g.adj[x], key=str):
            if y in prev:
                continue
            if y == nic:
                prev[y] = x
                return _walk_back(prev, y)
            if g.nodes[y]["kind"] in _HOST_PATH_KINDS:
                prev[y] = x
                todo.append(y)
    return None


def _walk_back(prev: dict[str, str | None], end: str) -> list[str]:
    """The path from the search's root to ``end`` along ``prev`` (each node's parent)."""
    path = [end]
    while prev[path[-1]] is not None:
        path.append(prev[path[-1]])  # type: ignore[arg-type]
    return path[::-1]


def _path_type(topology: Topology, path: list[str]) -> PathType:
    """NCCL's type of a GPU-to-NIC host path (:func:`host_path_type`)."""
    g = topology.graph
    inner = path[1:-1]
    cpus = sum(1 for x in inner if g.nodes[x]["kind"] is NodeKind.CPU)
    if cpus == 0:
        switches = sum(1 for x in inner if g.nodes[x]["kind"] is NodeKind.PCIE_SWITCH)
        return PathType.PIX if switches <= 1 else PathType.PXB
    if cpus == 1:
        first = g.edges[path[0], path[1]]
        c2c = first.get("family") is LinkFamily.CPU and "c2c" in str(first.get("tech", ""))
        return PathType.P2C if c2c else PathType.PHB
    return PathType.SYS


def host_path_type(topology: Topology, gpu: str, nic: str) -> PathType:
    """NCCL's type of the PCIe/CPU path from ``gpu`` to ``nic`` (no NVLink detour):
    ``PIX``/``PXB`` by the PCIe switches passed, ``P2C`` where the GPU reaches its CPU over
    NVLink-C2C, ``PHB`` through one CPU, ``SYS`` through two; ``SYS`` where no such path is.

    >>> from perfmodel.topology import load_system
    >>> t = load_system("dgx-h100", nodes=2)
    >>> host_path_type(t, "n0/gpu0", "n0/nic0").name, host_path_type(t, "n0/gpu0", "n0/nic7").name
    ('PIX', 'SYS')
    """
    path = _host_path(topology, gpu, nic)
    return PathType.SYS if path is None else _path_type(topology, path)


def host_path_types(topology: Topology, gpu: str) -> dict[str, PathType]:
    """:func:`host_path_type` from ``gpu`` to every node it reaches, in one search: a node
    absent from the answer (``gpu`` itself, or one with no host path) is ``SYS``.

    Equal to :func:`host_path_type` node by node: :func:`_host_path` is this breadth-first
    search stopped at its first meeting with the target, and until then both make the same
    moves (a node of another kind is met but never entered, so remembering where it was first
    met changes nothing else); the target's parent is where it was first met and every parent
    before it is fixed when first set, so the path, hence its type, is the same. The type is
    read off counts carried down the search tree instead of a walk back: a target met from
    ``x`` has as inner nodes ``x``'s own path without ``gpu``, so its CPUs and PCIe switches
    are ``x``'s counts and its first hop ``x``'s (the target itself where ``x`` is ``gpu``)
    (``tests/comm/test_host_path_table.py`` compares both on every catalogue server). One
    search per GPU instead of one per (GPU, NIC) pair and per NVLink peer: a DGX A100 part of
    8 GPUs and 8 NICs, 232 searches -> 8 (issue 27)."""
    g = topology.graph
    nodes = g.nodes
    # entered node -> (CPUs, PCIe switches on its path after gpu, its path's first hop)
    tree: dict[str, tuple[int, int, str | None]] = {gpu: (0, 0, None)}
    out: dict[str, PathType] = {}
    c2c: dict[str, bool] = {}  # first hop -> whether gpu reaches it over NVLink-C2C
    todo = deque([gpu])
    while todo:
        x = todo.popleft()
        cpus, switches, first = tree[x]
        for y in sorted(g.adj[x], key=str):
            if y in tree or y in out:
                continue
            hop = y if first is None else first
            if cpus == 0:
                out[y] = PathType.PIX if switches <= 1 else PathType.PXB
            elif cpus == 1:
                over = c2c.get(hop)
                if over is None:
                    e = g.edges[gpu, hop]
                    over = c2c[hop] = e.get("family") is LinkFamily.CPU and "c2c" in str(
                        e.get("tech", "")
                    )
                out[y] = PathType.P2C if over else PathType.PHB
            else:
                out[y] = PathType.SYS
            kind = nodes[y]["kind"]
            if kind in _HOST_PATH_KINDS:
                cpu = kind is NodeKind.CPU
                tree[y] = (cpus + cpu, switches + (not cpu), hop)
                todo.append(y)
    return out


#: :func:`host_path_types` of one GPU, looked up (a memo's ``__getitem__`` or a search).
HostTypes = Callable[[str], Mapping[str, PathType]]


def _nvlink_peers(topology: Topology, gpu: str, gpus: Sequence[str]) -> list[str]:
    """The GPUs of ``gpus`` that ``gpu`` reaches over NVLink: a direct NVLink/xGMI edge or a
    shared NVSwitch."""
    g = topology.graph
    nvl = (LinkFamily.NVLINK, LinkFamily.NVSWITCH, LinkFamily.XGMI)
    direct = {y for y in g.adj[gpu] if g.edges[gpu, y].get("family") in nvl}
    switches = {y for y in direct if g.nodes[y]["kind"] is NodeKind.NVSWITCH}
    out = []
    for h in gpus:
        if h == gpu:
            continue
        if h in direct or any(s in g.adj[h] for s in switches):
            out.append(h)
    return out


def gpu_nic_path_type(
    topology: Topology,
    gpu: str,
    nic: str,
    server_gpus: Sequence[str],
    *,
    pxn: bool = True,
    host: HostTypes | None = None,
) -> PathType:
    """The path NCCL takes from ``gpu`` to ``nic``: the host path (:func:`host_path_type`), or,
    where that passes a CPU and ``pxn`` (NCCL >= 2.12), ``PXN`` through a GPU of
    ``server_gpus`` on NVLink whose own host path to the NIC is ``PXB`` or better (NCCL
    ``src/graph/paths.cc``: a GPU-to-NIC path worse than ``PXB`` is replaced by the PXN path).
    ``host``: the GPUs' host path tables (:data:`HostTypes`; default one search per GPU asked).

    >>> from perfmodel.topology import load_system
    >>> t = load_system("dgx-h100", nodes=2)
    >>> gpu_nic_path_type(t, "n0/gpu0", "n0/nic7", t.gpus[:8]).name
    'PXN'
    """
    if host is None:
        host = _searched(topology)
    return _with_pxn(host, gpu, nic, pxn, lambda: _nvlink_peers(topology, gpu, server_gpus))


def _with_pxn(
    host: HostTypes, gpu: str, nic: str, pxn: bool, peers: Callable[[], Sequence[str]]
) -> PathType:
    """:func:`gpu_nic_path_type` from the host path tables, ``peers()`` (the GPU's NVLink
    peers of the server's GPUs) asked only where PXN may apply."""
    direct = host(gpu).get(nic, PathType.SYS)
    if not pxn or direct <= PathType.PXB:
        return direct
    for h in peers():
        if host(h).get(nic, PathType.SYS) <= PathType.PXB:
            return min(direct, PathType.PXN)
    return direct


def _searched(topology: Topology) -> HostTypes:
    """:func:`host_path_types` per GPU, each searched once for this lookup's life."""
    tables: dict[str, Mapping[str, PathType]] = {}

    def host(gpu: str) -> Mapping[str, PathType]:
        hit = tables.get(gpu)
        if hit is None:
            hit = tables[gpu] = host_path_types(topology, gpu)
        return hit

    return host


def net_path_type(
    topology: Topology,
    part: Sequence[str],
    nics: Sequence[str],
    *,
    pxn: bool = True,
    host: HostTypes | None = None,
) -> PathType:
    """NCCL's ``typeInter`` of a ring over the GPUs ``part`` of one server that reach the
    network through ``nics``: NCCL enters and leaves each server at the GPUs nearest the NIC
    of each channel (its ring search starts from the lowest path type and relaxes it only
    when no ring is found), so each NIC counts with its nearest GPU of the part and the ring
    takes the worst of those. ``PIX`` where ``nics`` is empty (nothing to classify).
    ``host``: the GPUs' host path tables (:data:`HostTypes`, e.g. a memo kept per topology;
    default one search per GPU of the part, shared by its NICs).

    >>> from perfmodel.topology import load_system
    >>> t = load_system("dgx-a100", nodes=2, network="roce-100g", nics_per_node=4)
    >>> net_path_type(t, t.gpus[:8], ["n0/nic0", "n0/nic1", "n0/nic2", "n0/nic3"]).name
    'PXB'
    """
    if host is None:
        host = _searched(topology)
    known: dict[str, list[str]] = {}  # a GPU's NVLink peers in the part, found once

    def peers_of(x: str) -> Callable[[], Sequence[str]]:
        def peers() -> Sequence[str]:
            hit = known.get(x)
            if hit is None:
                hit = known[x] = _nvlink_peers(topology, x, part)
            return hit

        return peers

    worst = PathType.PIX
    for nic in nics:
        best = min(_with_pxn(host, x, nic, pxn, peers_of(x)) for x in part)
        worst = max(worst, best)
    return worst
