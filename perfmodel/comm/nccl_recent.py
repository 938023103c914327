"""NCCL algorithms of the 2.27-2.29 tuners beyond ring, tree, NVLS all-reduce and CollNet.

Source: NVIDIA/nccl 2.27-2.28 series, ``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``,
``ncclTopoTuneModel``, ``ncclPatEnable``; the file as of v2.28.7-1 carries the same constant
table), read through the code index; constants in :mod:`perfmodel.comm.params`
(``NCCL227_*``). Each candidate is ``(time, algorithm, protocol, latency, bus bandwidth)``, the
tuple :meth:`perfmodel.comm.nccl_choice.NcclChoice.candidates` compares, and every one runs
the Simple protocol (NCCL allows no other for these algorithms):

- **NVLS all-gather / reduce-scatter** (NCCL 2.17 and >= 2.19; one Hopper/Blackwell NVSwitch
  server). NCCL 2.28+'s bandwidth of its NVLS graph (:mod:`perfmodel.comm.nvls`: ``k`` heads
  of ``s`` bytes/s), ``k s x nvlsEfficiency x (k-1)/k x (p-1)/p``, is an *algorithm*
  bandwidth (the tuner applies no bus-factor ratio to non-ring all-gather / reduce-scatter).
  Latency ``hwLat[NVLINK][NVLS][Simple]`` = 25 us. Per byte this is slower than the ring
  (8 H100: 208 GB/s algbw against the ring's 463), so NCCL's tuner, and this one, keep the ring
  for large all-gathers on 8 H100; NVLS is what ``--algorithm nvls`` forces.
- **NVLS tree** (NCCL >= 2.18; all-reduce over several NVLS-capable servers; NCCL disables it
  on one node): bus bandwidth ``min(intra, inter x (2 if nodes <= 2 else 1),
  k x perChMaxNVLSTreeBw)``, algorithm bandwidth ``bus x n / (2(n-1))`` (NCCL converts NVLS and
  NVLS tree like the ring). ``intra`` is NCCL 2.28+'s NVLS all-reduce bus bandwidth of the
  server's NVLS graph across servers (``2 k s x nvlsEfficiency x (k-1)/k``, ``s`` from the
  inter-server speed table, no faster than the NIC port: 8 x 40 GB/s on a DGX H100, 8 x 48 on
  a DGX B200); ``inter`` is the servers' network bandwidth (the ring bandwidth of the
  inter-server hops, standing for ``k x bwInter``). On Blackwell with x86 hosts NCCL 2.29
  multiplies the bandwidth by ``treeCorrectionFactor[Simple]`` below 1 GiB (0.7 at 16 MiB).
  Latency ``25 us + 2 log2(nodes) x 20.9 us``. Two DGX H100 (8 x 400G each): 462 GB/s busbw
  against ~430 published with NCCL 2.19.3 (NVIDIA/nccl#1221).
- **PAT** (NCCL >= 2.23; all-gather / reduce-scatter with one GPU per server, compute
  capability >= 6.0): algorithm bandwidth ``0.75 x B_ring`` (no ratio, as above), latency
  ``8 + log2(nodes) x 14 / 3.5 + n x 2.8`` us. It wins at mid sizes on many nodes (16
  ``dgx-h100`` servers, one GPU each, 1 MiB all-gather: 99.2 us against the ring's 129.8 us;
  doctest of :func:`recent_terms`).

Not modelled: NVLS across servers with SHARP (CollNet + NVLS), CollNet Chain, CollNet Direct for
all-gather / reduce-scatter; the ring and tree candidates keep NCCL 2.7/2.8's tables (the
validation rows of 2019-2021 depend on them), so ``auto`` compares 2.27 candidates against them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import perfmodel.comm.params as P
from perfmodel.comm.nvls import nvls_bus_Bps, nvls_graph
from perfmodel.comm.params import Algorithm, HwClass, Protocol
from perfmodel.comm.tuner import (
    NVLS_FROM,
    NVLS_GATHER_FROM,
    NVLS_TREE_FROM,
    PAT_FROM,
    arch_index,
    nodes_index,
    released,
)
from perfmodel.ops import CollectiveOp
from perfmodel.topology.schema import NodeKind

if TYPE_CHECKING:
    from perfmodel.comm.group import GroupInfo
    from perfmodel.comm.links import DirectedLinks
    from perfmodel.comm.nccl_choice import NcclChoice
    from perfmodel.comm.tuner import NcclTuner

Candidate = tuple[float, Algorithm, Protocol, float, float]

#: NCCL 2.29 ``ncclTopoGetAlgoTime`` corrects the NVLS tree's bandwidth on Blackwell x86 hosts
#: for sizes below ``2**24 x 64`` bytes (``logSize < 24``) with ``treeCorrectionFactor``.
NVLS_TREE_CORRECTION_BELOW = 24

#: Algorithms charged their closed-form time in the simulated fidelity too (no flow model).
CLOSED_FORM_ONLY = frozenset(
    {Algorithm.NVLS, Algorithm.COLLNET, Algorithm.NVLS_TREE, Algorithm.PAT}
)


def _log2i(x: int) -> int:
    """NCCL's ``log2i``: floor of log2 for a positive integer."""
    return int(x).bit_length() - 1


def nvls_servers(links: DirectedLinks, info: GroupInfo) -> bool:
    """Whether every server of the group offers NVLS: Hopper/Blackwell GPUs, at least two of the
    group's GPUs in each server, joined by NVLink through an NVSwitch there (NCCL's
    ``nvlsSupport``: multicast-capable third-generation NVSwitch and later). The one test of
    NVLS support: single-server NVLS (:meth:`~perfmodel.comm.nccl_choice.NcclChoice.
    in_switch_terms`, ``nodes == 1``) and the NVLS tree across servers both use it.

    >>> from perfmodel.comm import CommCostModel
    >>> from perfmodel.topology import load_system
    >>> t = load_system("dgx-h100", nodes=2)
    >>> m = CommCostModel(t)
    >>> nvls_servers(m.links, m.group_info(t.gpus)), nvls_servers(m.links, m.group_info(t.gpus[:9]))
    (True, False)
    """
    if info.gpu_arch not in P.NVLS_EFFICIENCY or min((len(p) for p in info.parts), default=0) < 2:
        return False
    if info.intra_class is not HwClass.NVLINK:
        return False
    g = links.topology.graph
    same = getattr(info.channels, "intra_hops", None)
    if same is not None:  # every server's hops, by local id (a summarised wide group)
        return any(any(g.nodes[x]["kind"] is NodeKind.NVSWITCH for x in h[1:-1]) for h in same)
    srv = links.server
    switched = {
        srv[hop[0]]
        for ch in info.channels
        for hop in ch.hops
        if srv[hop[0]] == srv[hop[-1]]
        and any(g.nodes[x]["kind"] is NodeKind.NVSWITCH for x in hop[1:-1])
    }
    return all(srv[p[0]] in switched for p in info.parts)


#: A candidate without its size (:func:`recent_terms`): (algorithm, protocol, latency (s),
#: algorithm bandwidth (B/s) before any size correction, the bandwidth the candidate reports
#: (B/s), whether NCCL 2.29's NVLS tree size correction applies).
Term = tuple[Algorithm, Protocol, float, float, float, bool]


def priced_terms(terms: list[Term], m: float, tuner: NcclTuner) -> list[Candidate]:
    """The candidates of size-free ``terms`` (:func:`recent_terms`,
    :meth:`~perfmodel.comm.nccl_choice.NcclChoice.in_switch_terms`) at ``m`` bytes: time
    ``latency + m / algbw``, where a term marked for the NVLS tree correction first takes
    ``algbw x treeCorrectionFactor[Simple][logSize]`` for ``logSize = floor(log2(max(m / 64,
    1))) < 24`` (NCCL 2.29 ``ncclTopoGetAlgoTime``), the one place a size enters besides the
    division: the same operations on the same floats as one pass reading ``m`` throughout."""
    out: list[Candidate] = []
    for algo, proto, lat, algbw, reported, corrected in terms:
        if corrected:
            log_size = int(math.log2(max(m / 64.0, 1.0)))
            if log_size < NVLS_TREE_CORRECTION_BELOW:
                algbw *= tuner.tree_correction[Protocol.SIMPLE][log_size]
        out.append((lat + m / algbw, algo, proto, lat, reported))
    return out


def recent_terms(choice: NcclChoice, op: CollectiveOp, info: GroupInfo) -> list[Term]:
    """NVLS all-gather / reduce-scatter, NVLS tree all-reduce and PAT candidates for ``op``
    without the size: which candidates the group has and each one's latency and bandwidths
    (:data:`Term`). Every condition reads the op, the group's
    analysis, the release, the host CPU and the tuner table, never the size, and so does
    every latency and bandwidth but the NVLS tree's size correction (marked in the term), so
    a group's terms are one list for every size (:meth:`NcclChoice.candidates
    <perfmodel.comm.nccl_choice.NcclChoice.candidates>` keeps it per table entry), priced at
    a size by :func:`priced_terms`.

    >>> from perfmodel.topology import load_system
    >>> from perfmodel.comm import CommCostModel
    >>> h = load_system("dgx-h100")
    >>> r = CommCostModel(h).collective("allgather", 2**30, h.gpus, algorithm="nvls")
    >>> round(r.bandwidth_Bps / 1e9, 1)  # NVLS graph 8 x 40 GB/s x 0.85 x 7/8 x 7/8 (+ 25 us)
    208.2

    PAT against the ring: 16 DGX H100 servers, one GPU each, 1 MiB all-gather (us):

    >>> t = load_system("dgx-h100", nodes=16)
    >>> g, m = [f"n{i}/gpu0" for i in range(16)], CommCostModel(t)
    >>> [round(m.collective("allgather", 2**20, g, a).time_s * 1e6, 1) for a in ("pat", "ring")]
    [99.2, 129.8]
    """
    out: list[Term] = []
    n, nodes = info.n, info.nodes
    release = choice.release
    gather = op in (CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER)
    nvls_gather = released(release, NVLS_GATHER_FROM) or tuple(release or ()) == NVLS_FROM
    if gather and nodes == 1 and nvls_gather and nvls_servers(choice.links, info):
        k, s = nvls_graph(info.gpu_arch, n, info.nvlinks)
        eff = P.NVLS_EFFICIENCY[info.gpu_arch]
        algbw = nvls_bus_Bps(eff, k, s, allreduce=False, ppn=n)  # no bus-factor ratio
        lat = P.NCCL227_NVLS_LATENCY_S
        if algbw > 0:
            out.append((Algorithm.NVLS, Protocol.SIMPLE, lat, algbw, algbw, False))
    if (
        op is CollectiveOp.ALLREDUCE
        and nodes > 1
        and released(release, NVLS_TREE_FROM)
        and nvls_servers(choice.links, info)
    ):
        p = info.local
        k, s = nvls_graph(info.gpu_arch, p, info.nvlinks, net_port_Bps=info.net_port_Bps)
        intra = nvls_bus_Bps(P.NVLS_EFFICIENCY[info.gpu_arch], k, s, allreduce=True)
        inter = info.inter_bw_Bps * (2 if nodes <= 2 else 1)
        # perChMaxNVLSTreeBw of the model's tuner table (2.27-2.28: Blackwell 80 GB/s per channel
        # beyond 2 nodes, 2.29: 43.8; Hopper 57.7 / 45.5 in both; perfmodel.comm.tuner), per
        # channel of the NVLS graph
        per_channel = choice.tuner.nvls_tree_max_per_channel_Bps[arch_index(info.gpu_arch)]
        cap = k * per_channel[nodes_index(nodes)]
        bus = min(intra, inter, cap)
        lat = P.NCCL227_NVLS_LATENCY_S + 2 * _log2i(nodes) * P.NCCL227_NVLS_TREE_NET_LATENCY_S
        if bus > 0 and math.isfinite(bus):
            algbw = bus * n / (2 * (n - 1))
            # NCCL 2.29 ncclTopoGetAlgoTime: NVLS tree on Blackwell with x86 hosts takes the
            # tree's size correction below 2**24 x 64 B (1 GiB): priced_terms
            corrected = arch_index(info.gpu_arch) >= 3 and choice.cpu_vendor in ("intel", "amd")
            out.append((Algorithm.NVLS_TREE, Protocol.SIMPLE, lat, algbw, bus, corrected))
    if (
        gather
        and nodes == n
        and n > 1
        and info.gpu_arch in P.PAT_ARCHITECTURES
        and released(release, PAT_FROM)
    ):
        algbw = info.ring_bw_Bps * P.NCCL227_PAT_BW_FACTOR
        lat = (
            P.NCCL227_PAT_BASE_LATENCY_S
            + _log2i(nodes) * P.NCCL227_PAT_NET_LATENCY_S / P.NCCL227_PAT_LOG_DIVISOR
            + n * P.NCCL227_PAT_PER_RANK_LATENCY_S
        )
        if algbw > 0 and math.isfinite(algbw):
            out.append((Algorithm.PAT, Protocol.SIMPLE, lat, algbw, algbw, False))
    return out
