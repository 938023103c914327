"""PCIe peer-to-peer rules: which GPU pairs talk directly, which through host memory, and
what a direct path through an Intel root complex costs (the 64-byte TLP overhead).

:class:`PeerRules` (a part of :class:`~perfmodel.comm.links.DirectedLinks`) holds the GPUs
without peer-to-peer and the pairs refused it (``nvidia-smi topo -p2p``, NCCL's P2P level), and
the CPU whose memory stages each refused pair's traffic (NCCL's SHM transport).


Intel CPUs forward GPU-to-GPU (peer-to-peer) PCIe traffic between their root ports as 64-byte
TLPs, so such a path moves data at 5/6 of what its links carry for ordinary DMA; NCCL models it
as ``INTEL_P2P_OVERHEAD(bw) = bw * 6/5`` on the PCIe links of P2P paths through one Intel x86
CPU (``PATH_PHB``; ``src/graph/topo.h``, used by ``src/graph/search.cc``). :func:`p2p_charge`
gives each ring hop its factor: :data:`~perfmodel.comm.params.INTEL_P2P_OVERHEAD` when it is a
direct GPU peer-to-peer path (not NCCL's SHM staging, :meth:`DirectedLinks.shm_cpu`) whose
interior holds exactly one CPU, an Intel one, else 1; the hop then spends 1.2 bytes of each of
its links' capacity per byte (:func:`~perfmodel.comm.channels.channel_rates`), the other hops of
its channel are not charged. Which CPUs are Intel comes from the CPU node's ``model``: the
catalogue vendor (``perfmodel hw cpus``), or a free-text model naming Intel or Xeon.

NCCL 2.8 and later (``ncclTopoCheckP2p``: ``PATH_PXB`` on Intel; the default release's rule,
applied when a system is loaded, :func:`perfmodel.topology.nccl_p2p.nccl_p2p_level`) does not
use P2P across the CPU at all; the overhead matters where P2P crosses it anyway: NCCL 2.0-2.5
(P2P up to ``PATH_PHB``), 2.6-2.7 on Intel CPUs other than Broadwell, ``perfmodel comm --nccl``
with such a release, and ``--p2p on`` (``NCCL_P2P_LEVEL=SYS``). The flow simulation
charges the same hops (:meth:`FlowNetwork.transfer_multi <perfmodel.comm.flow.FlowNetwork.
transfer_multi>`, ``transfer(charge=...)``), so its lone-ring replay equals the closed form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

import perfmodel.comm.params as P
from perfmodel.comm.params import NVLINK_FAMILIES
from perfmodel.comm.paths import min_hop_widest
from perfmodel.topology.model import ReplicaPattern
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.links import DirectedLinks


class PeerRules:
    """Which GPUs of a server talk peer-to-peer and which through host memory (a part of
    :class:`~perfmodel.comm.links.DirectedLinks`: reads its node tables, link ids and routes)."""

    def _init_peer_rules(self) -> None:
        self._shm: dict[tuple[str, str], str | None] = {}

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

    @cached_property
    def _p2p_charges(self) -> dict[tuple[str, ...], float]:
        return {}

    def charge_p2p(self, hop: Sequence[str]) -> float:
        """The Intel P2P charge of a ring hop (:func:`perfmodel.comm.pcie_p2p.p2p_charge`),
        cached per hop: pass as ``charge`` to
        :func:`~perfmodel.comm.channels.channel_rates`."""
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
            plain = min_hop_widest(self, None, src, dst, inside, per_unit=False, direct=True)
            fams = {self._table.family[i] for i in self._ids_of(plain[2])} if plain else set()
            if not (fams and fams <= NVLINK_FAMILIES):
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


@cache
def _intel_model(model: str) -> bool:
    """Whether a CPU ``model`` string names an Intel part (catalogue vendor or free text)."""
    from perfmodel.topology.nccl_p2p import HostCpu

    return HostCpu.from_text(model) in (HostCpu.INTEL, HostCpu.INTEL_BROADWELL)


def intel_cpu(links: DirectedLinks, node: str) -> bool:
    """Whether ``node`` is a CPU whose model is an Intel part."""
    attrs = links.topology.graph.nodes[node]
    if attrs["kind"] is not NodeKind.CPU:
        return False
    model = attrs.get("model")
    return bool(model) and _intel_model(str(model))


def p2p_charge(links: DirectedLinks, hop: Sequence[str]) -> float:
    """Link capacity a ring hop spends per byte it moves: 6/5 for Intel P2P, else 1.

    NCCL's graph search (``src/graph/search.cc``, ``followPath``) charges
    ``INTEL_P2P_OVERHEAD(bw) = bw * 6/5`` on the PCIe links of a GPU-to-GPU path of type
    ``PATH_PHB``: through exactly one CPU's root complex, that CPU an Intel x86. A path across both
    sockets (``PATH_SYS``) is not charged, nor is NCCL's SHM staging through host memory
    (:meth:`DirectedLinks.shm_cpu`: plain DMA, no P2P TLPs), nor a hop between servers. The
    charge is per hop: a charged hop runs at its PCIe capacity / 1.2 and a ring channel at the
    minimum over its hops (:func:`~perfmodel.comm.channels.channel_rates` with ``charge``), so a
    channel limited by another hop (a network link) is not slowed.

    Returns
    -------
    float
        :data:`~perfmodel.comm.params.INTEL_P2P_OVERHEAD` (1.2) or 1.0 (dimensionless).

    >>> from perfmodel.comm.links import DirectedLinks
    >>> from perfmodel.topology import load_system
    >>> from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule
    >>> t = load_system("pcie-8xtitanx")  # 2 x Intel Xeon E5-2650 v3
    >>> t = with_nccl_p2p_rule(t, NcclRelease(2, 0))  # NCCL 2.0: P2P through one CPU
    >>> links = DirectedLinks(t)
    >>> p2p_charge(links, links.p2p_route("gpu1", "gpu2"))  # through cpu0's root complex
    1.2
    >>> p2p_charge(links, links.p2p_route("gpu0", "gpu1"))  # same PCIe switch
    1.0
    """
    a, b = hop[0], hop[-1]
    gpus = links._gpu_set
    if a not in gpus or b not in gpus or links.server[a] != links.server[b]:
        return 1.0
    if links.shm_cpu(a, b) is not None:
        return 1.0
    nodes = links.topology.graph.nodes
    cpus = [x for x in hop[1:-1] if nodes[x]["kind"] is NodeKind.CPU]
    if len(cpus) == 1 and intel_cpu(links, cpus[0]):
        return P.INTEL_P2P_OVERHEAD
    return 1.0
