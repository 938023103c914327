"""GPU peer-to-peer through an Intel root complex: the 64-byte TLP overhead.

Intel CPUs forward GPU-to-GPU (peer-to-peer) PCIe traffic between their root ports as 64-byte
TLPs, so such a path moves data at 5/6 of what its links carry for ordinary DMA; NCCL models it
as ``INTEL_P2P_OVERHEAD(bw) = bw * 6/5`` on the PCIe links of P2P paths through one Intel x86
CPU (``PATH_PHB``; ``src/graph/topo.h``, used by ``src/graph/search.cc``). :func:`p2p_charge`
gives each ring hop its factor: :data:`~perfmodel.comm.params.INTEL_P2P_OVERHEAD` when it is a
direct GPU peer-to-peer path (not NCCL's SHM staging, :meth:`DirectedLinks.shm_cpu`) whose
interior holds exactly one CPU, an Intel one, else 1; the hop then spends 1.2 bytes of each of
its links' capacity per byte (:func:`~perfmodel.comm.rings.channel_rates`), the other hops of
its channel are not charged. Which CPUs are Intel comes from the CPU node's ``model``: the
catalogue vendor (``perfmodel hw cpus``), or a free-text model naming Intel or Xeon.

NCCL 2.8 and later (``ncclTopoCheckP2p``: ``PATH_PXB`` on Intel; the default release's rule,
applied when a system is loaded, :func:`perfmodel.topology.importers.nccl_p2p_level`) does not
use P2P across the CPU at all; the overhead matters where P2P crosses it anyway: NCCL 2.0-2.5
(P2P up to ``PATH_PHB``), 2.6-2.7 on Intel CPUs other than Broadwell, ``perfmodel comm --nccl``
with such a release, and ``--p2p on`` (``NCCL_P2P_LEVEL=SYS``). The flow simulation
charges the same hops (:meth:`FlowNetwork.transfer_multi <perfmodel.comm.flow.FlowNetwork.
transfer_multi>`, ``transfer(charge=...)``), so its lone-ring replay equals the closed form.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

from perfmodel.comm import params as P
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.rings import DirectedLinks


@cache
def _intel_model(model: str) -> bool:
    """Whether a CPU ``model`` string names an Intel part (catalogue vendor or free text)."""
    from perfmodel.topology.importers import HostCpu

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
    minimum over its hops (:func:`~perfmodel.comm.rings.channel_rates` with ``charge``), so a
    channel limited by another hop (a network link) is not slowed.

    Returns
    -------
    float
        :data:`~perfmodel.comm.params.INTEL_P2P_OVERHEAD` (1.2) or 1.0 (dimensionless).

    >>> from perfmodel.comm.rings import DirectedLinks
    >>> from perfmodel.topology import load_system
    >>> from perfmodel.topology.importers import NcclRelease, with_nccl_p2p_rule
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
