"""GPU peer-to-peer through an Intel root complex: the 64-byte TLP overhead.

Intel CPUs forward GPU-to-GPU (peer-to-peer) PCIe traffic between their root ports as 64-byte
TLPs, so such a path moves data at 5/6 of what its links carry for ordinary DMA; NCCL models it
as ``INTEL_P2P_OVERHEAD(bw) = bw * 6/5`` on P2P paths through an Intel x86 CPU (``src/graph/
topo.h``, used by ``src/graph/search.cc``). :func:`p2p_overhead` gives each ring channel its
factor: :data:`~perfmodel.comm.params.INTEL_P2P_OVERHEAD` when one of its hops is a direct GPU
peer-to-peer path (not NCCL's SHM staging, :meth:`DirectedLinks.shm_cpu`) whose interior
crosses an Intel CPU, else 1. Which CPUs are Intel comes from the CPU node's ``model``: the
catalogue vendor (``perfmodel hw cpus``), or a free-text model naming Intel or Xeon.

NCCL 2.8 and later (``ncclTopoCheckP2p``: ``PATH_PXB`` on Intel; the default release's rule,
applied when a system is loaded, :func:`perfmodel.topology.importers.nccl_p2p_level`) does not
use P2P across the CPU at all; the overhead matters where P2P crosses it anyway: NCCL 2.0-2.5
(P2P up to ``PATH_PHB``), 2.6-2.7 on Intel CPUs other than Broadwell, ``perfmodel comm --nccl``
with such a release, and ``--p2p on`` (``NCCL_P2P_LEVEL=SYS``). Analytic fidelity only (the
flow simulation charges the links their plain capacity).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from perfmodel.comm import params as P
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.rings import Channel, DirectedLinks


@cache
def _intel_model(model: str) -> bool:
    """Whether a CPU ``model`` string names an Intel part (catalogue vendor or free text)."""
    from perfmodel.errors import PerfModelError
    from perfmodel.hardware import get_cpu

    try:
        return get_cpu(model).vendor.lower() == "intel"
    except PerfModelError:
        text = model.lower()
        return "intel" in text or "xeon" in text


def intel_cpu(links: DirectedLinks, node: str) -> bool:
    """Whether ``node`` is a CPU whose model is an Intel part."""
    attrs = links.topology.graph.nodes[node]
    if attrs["kind"] is not NodeKind.CPU:
        return False
    model = attrs.get("model")
    return bool(model) and _intel_model(str(model))


def p2p_overhead(links: DirectedLinks, channels: Sequence[Channel]) -> np.ndarray:
    """Per-channel divisor of the ring rate: 6/5 where a hop is GPU P2P through an Intel CPU.

    >>> from perfmodel.comm.rings import DirectedLinks, build_channels
    >>> from perfmodel.topology import load_system
    >>> from perfmodel.topology.importers import NcclRelease, with_nccl_p2p_rule
    >>> t = load_system("pcie-8xtitanx")  # 2 x Intel Xeon E5-2650 v3
    >>> t = with_nccl_p2p_rule(t, NcclRelease(2, 0))  # NCCL 2.0: P2P through one CPU
    >>> links = DirectedLinks(t)
    >>> p2p_overhead(links, build_channels(links, t.gpus[:4])).tolist()
    [1.2]
    """
    gpus = links._gpu_set
    out = np.ones(len(channels))
    for c, ch in enumerate(channels):
        for hop in ch.hops:
            a, b = hop[0], hop[-1]
            if a not in gpus or b not in gpus or links.server[a] != links.server[b]:
                continue
            if links.shm_cpu(a, b) is not None:
                continue
            if any(intel_cpu(links, x) for x in hop[1:-1]):
                out[c] = P.INTEL_P2P_OVERHEAD
                break
    return out
