"""NCCL algorithms of the 2.27 tuner beyond ring, tree, NVLS all-reduce and CollNet.

Source: NVIDIA/nccl 2.27-2.28 series, ``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``,
``ncclTopoTuneModel``, ``ncclPatEnable``; the file as of v2.28.7-1 carries the same constant
table), read through the code index; constants in :mod:`perfmodel.comm.params`
(``NCCL227_*``). Each candidate is ``(time, algorithm, protocol, latency, bus bandwidth)``, the
tuple :meth:`perfmodel.comm.model.CommCostModel._nccl_candidates` compares, and every one runs
the Simple protocol (NCCL allows no other for these algorithms):

- **NVLS all-gather / reduce-scatter** (NCCL >= 2.19; one Hopper/Blackwell NVSwitch server).
  NCCL's bandwidth ``min(B_nvls x (n-1)/n, B_inter x 0.9)`` is an *algorithm* bandwidth (the
  tuner applies no bus-factor ratio to non-ring all-gather / reduce-scatter), with
  ``B_nvls = B x nvlsEfficiency x (c-1)/c``: ``B`` the server's NVLink bus bandwidth (the ring
  bandwidth over its GPUs), ``c`` the NVLS channels; on one server NCCL's ``bwInter`` is not the
  limit (its ``inter`` is infinite there; the factor 0.9 is
  :data:`~perfmodel.comm.params.NCCL227_NVLS_INTER_FACTOR`). Latency
  ``hwLat[NVLINK][NVLS][Simple]`` = 25 us. Per byte this is slower than the ring
  (8 H100: 282 GB/s algbw against the ring's 463), so NCCL's tuner, and this one, keep the ring
  for large all-gathers on 8 H100; NVLS is what ``--algorithm nvls`` forces.
- **NVLS tree** (all-reduce over several NVLS-capable servers; NCCL disables it on one node):
  bus bandwidth ``min(intra, inter x (2 if nodes <= 2 else 1), 16 x perChMaxNVLSTreeBw)``
  (16 = NVLS channels), algorithm bandwidth ``bus x n / (2(n-1))`` (NCCL 2.27 converts NVLS and
  NVLS tree like the ring). ``intra`` is the bus bandwidth one server's NVLS sustains for its
  ``p`` GPUs, ``B x nvlsEfficiency x (c-1)/c x 2(p-1)/(p+1)`` (the single-server NVLS model of
  :meth:`~perfmodel.comm.model.CommCostModel._in_switch_candidates`, ~500 GB/s on a DGX H100 where
  NCCL's author quotes ~480, NVIDIA/nccl-tests#212): NCCL's own ``2 x bwIntra`` rests on an NVLS
  graph bandwidth the topology does not carry. ``inter`` is the servers' network bandwidth (the
  ring bandwidth of the inter-server hops). Latency ``25 us + 2 log2(nodes) x 20.9 us``.
- **PAT** (NCCL >= 2.23; all-gather / reduce-scatter with one GPU per server, compute
  capability >= 6.0): algorithm bandwidth ``0.75 x B_ring`` (no ratio, as above), latency
  ``8 + log2(nodes) x 14 / 3.5 + n x 2.8`` us. It wins at mid sizes on many nodes (16
  ``dgx-h100`` servers, one GPU each, 1 MiB all-gather: 99.2 us against the ring's 129.8 us;
  doctest of :func:`recent_candidates`).

Not modelled: NVLS across servers with SHARP (CollNet + NVLS), CollNet Chain, CollNet Direct for
all-gather / reduce-scatter; the ring and tree candidates keep NCCL 2.7/2.8's tables (the
validation rows of 2019-2021 depend on them), so ``auto`` compares 2.27 candidates against them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from perfmodel.comm import params as P
from perfmodel.comm.params import Algorithm, HwClass, Protocol
from perfmodel.comm.tuner import arch_index, nodes_index
from perfmodel.ops import CollectiveOp
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.model import CommCostModel, GroupInfo

Candidate = tuple[float, Algorithm, Protocol, float, float]

#: Algorithms charged their closed-form time in the simulated fidelity too (no flow model).
CLOSED_FORM_ONLY = frozenset(
    {Algorithm.NVLS, Algorithm.COLLNET, Algorithm.NVLS_TREE, Algorithm.PAT}
)


def _log2i(x: int) -> int:
    """NCCL's ``log2i``: floor of log2 for a positive integer."""
    return int(x).bit_length() - 1


def nvls_servers(model: CommCostModel, info: GroupInfo) -> bool:
    """Whether every server of the group offers NVLS: Hopper/Blackwell GPUs, at least two of the
    group's GPUs in each server, joined by NVLink through an NVSwitch there (NCCL's
    ``nvlsSupport``: multicast-capable third-generation NVSwitch and later). The one test of
    NVLS support: single-server NVLS (:meth:`~perfmodel.comm.model.CommCostModel.
    _in_switch_candidates`, ``nodes == 1``) and the NVLS tree across servers both use it.

    >>> from perfmodel.comm import CommCostModel
    >>> from perfmodel.topology import load_system
    >>> t = load_system("dgx-h100", nodes=2)
    >>> m = CommCostModel(t)
    >>> nvls_servers(m, m.group_info(t.gpus)), nvls_servers(m, m.group_info(t.gpus[:9]))
    (True, False)
    """
    if info.gpu_arch not in P.NVLS_EFFICIENCY or min((len(p) for p in info.parts), default=0) < 2:
        return False
    if info.intra_class is not HwClass.NVLINK:
        return False
    g = model.topology.graph
    same = getattr(info.channels, "intra_hops", None)
    if same is not None:  # every server's hops, by local id (a summarised wide group)
        return any(any(g.nodes[x]["kind"] is NodeKind.NVSWITCH for x in h[1:-1]) for h in same)
    srv = model.links.server
    switched = {
        srv[hop[0]]
        for ch in info.channels
        for hop in ch.hops
        if srv[hop[0]] == srv[hop[-1]]
        and any(g.nodes[x]["kind"] is NodeKind.NVSWITCH for x in hop[1:-1])
    }
    return all(srv[p[0]] in switched for p in info.parts)


def nvls_bus_Bps(info: GroupInfo, nvlink_bus_Bps: float) -> float:
    """``B x nvlsEfficiency x (c - 1)/c``: what NVLS moves per GPU link, bytes/s (NCCL 2.27)."""
    eff = P.NVLS_EFFICIENCY[info.gpu_arch]
    return nvlink_bus_Bps * eff * (P.NVLS_CHANNELS - 1) / P.NVLS_CHANNELS


def recent_candidates(
    model: CommCostModel, op: CollectiveOp, m: float, info: GroupInfo
) -> list[Candidate]:
    """NVLS all-gather / reduce-scatter, NVLS tree all-reduce and PAT candidates for ``op``.

    >>> from perfmodel.topology import load_system
    >>> from perfmodel.comm import CommCostModel
    >>> h = load_system("dgx-h100")
    >>> r = CommCostModel(h).collective("allgather", 2**30, h.gpus, algorithm="nvls")
    >>> round(r.bandwidth_Bps / 1e9, 1)  # 405 x 0.85 x 15/16 x 7/8 GB/s (plus 25 us)
    282.4

    PAT against the ring: 16 DGX H100 servers, one GPU each, 1 MiB all-gather (us):

    >>> t = load_system("dgx-h100", nodes=16)
    >>> g, m = [f"n{i}/gpu0" for i in range(16)], CommCostModel(t)
    >>> [round(m.collective("allgather", 2**20, g, a).time_s * 1e6, 1) for a in ("pat", "ring")]
    [99.2, 129.8]
    """
    out: list[Candidate] = []
    n, nodes = info.n, info.nodes
    gather = op in (CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER)
    if gather and nodes == 1 and nvls_servers(model, info):
        algbw = min(
            nvls_bus_Bps(info, info.ring_bw_Bps) * (n - 1) / n,
            info.inter_bw_Bps * P.NCCL227_NVLS_INTER_FACTOR,  # inf on one server
        )
        lat = P.NCCL227_NVLS_LATENCY_S
        out.append((lat + m / algbw, Algorithm.NVLS, Protocol.SIMPLE, lat, algbw))
    if op is CollectiveOp.ALLREDUCE and nodes > 1 and nvls_servers(model, info):
        p = info.local
        intra = nvls_bus_Bps(info, info.intra_bw_Bps) * 2 * (p - 1) / (p + 1)
        inter = info.inter_bw_Bps * (2 if nodes <= 2 else 1)
        # perChMaxNVLSTreeBw of the model's tuner table (2.27-2.28: Blackwell 80 GB/s per channel
        # beyond 2 nodes, 2.29: 43.8; Hopper 57.7 / 45.5 in both; perfmodel.comm.tuner)
        per_channel = model.tuner.nvls_tree_max_per_channel_Bps[arch_index(info.gpu_arch)]
        cap = P.NVLS_CHANNELS * per_channel[nodes_index(nodes)]
        bus = min(intra, inter, cap)
        lat = P.NCCL227_NVLS_LATENCY_S + 2 * _log2i(nodes) * P.NCCL227_NVLS_TREE_NET_LATENCY_S
        if bus > 0 and math.isfinite(bus):
            algbw = bus * n / (2 * (n - 1))
            out.append((lat + m / algbw, Algorithm.NVLS_TREE, Protocol.SIMPLE, lat, bus))
    if gather and nodes == n and n > 1 and info.gpu_arch in P.PAT_ARCHITECTURES:
        algbw = info.ring_bw_Bps * P.NCCL227_PAT_BW_FACTOR
        lat = (
            P.NCCL227_PAT_BASE_LATENCY_S
            + _log2i(nodes) * P.NCCL227_PAT_NET_LATENCY_S / P.NCCL227_PAT_LOG_DIVISOR
            + n * P.NCCL227_PAT_PER_RANK_LATENCY_S
        )
        if algbw > 0 and math.isfinite(algbw):
            out.append((lat + m / algbw, Algorithm.PAT, Protocol.SIMPLE, lat, algbw))
    return out
