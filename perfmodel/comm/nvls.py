"""NVLink SHARP (NVLS) bandwidth as NCCL 2.28+ models it: the NVLS graph and its bus bandwidth.

NVLS all-reduce inside an NVLink domain: each *head* GPU reduces its share of the buffer in the
NVSwitch (``multimem.ld_reduce``) and multicasts the result (``multimem.st``). NCCL searches an
NVLS graph (NVIDIA/nccl v2.29.7-1 ``src/graph/search.cc``, ``ncclTopoSearchTryNvls``) whose
channels are the heads, at most ``NCCL_MAX_NVLS_ARITY`` = 32 (``src/include/device.h``), one
per GPU of the domain up to that: each channel loads every GPU's NVSwitch link with its
per-channel bandwidth ``s`` once, and its head's twice, so ``(k + 1) s`` must fit the link of
``L`` = NVLinks x NCCL's per-link bandwidth (``src/graph/topo.h`` ``SM90_NVLINK_BW`` 20.6 GB/s,
``SM100_NVLINK_BW`` 40.1 GB/s); ``s`` is the fastest entry of NCCL's speed table for the
architecture that fits (``sm90SpeedArrayIntra`` / ``sm100SpeedArrayIntra`` on one domain; the
``Inter`` tables, also bounded by the NIC port, across servers, where the search starts at the
GPU-to-NIC path's bandwidth). A single domain forces ``k`` channels (NCCL: "pull evenly from
all GPUs").

The tuner (``src/graph/tuning.cc`` of v2.28.3-1 and v2.29.7-1, ``ncclTopoTuneModel``) turns the
graph into a bus bandwidth per channel ``s x nvlsEfficiency x (k - 1)/k``, doubled for the
all-reduce ("AllReduce pipelines two operations"), times ``(p - 1)/p`` for all-gather and
reduce-scatter (``p`` GPUs per server), summed over the ``k`` channels. So the all-reduce bus
bandwidth does *not* grow as ``2 (n - 1)/(n + 1)`` with the domain: 8 B200 and a 72-GPU NVL72
rack are both ``k s`` = 640 GB/s of graph (80 x 8 and 20 x 32), 829 and 918 GB/s of bus
bandwidth, against ~830-850 measured on 8 B200; 8 H100 get 320 GB/s of graph, 476 GB/s of bus
bandwidth, against ~480 that NCCL's author quotes (NVIDIA/nccl-tests#212). CoreWeave's GB200
NVL72 rack log (834.6 GB/s at 8 GiB, coreweave/nccl-tests README, commit bee97e7) is not a
stated NVLS measurement: the README's job sets ``NCCL_NVLS_ENABLE=0`` (ring and tree only,
:data:`perfmodel.comm.validation.CORE_WEAVE_GB200_JOB`, which also tells its older history).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from perfmodel import units

#: ``NCCL_MAX_NVLS_ARITY``: at most this many NVLS heads (channels of the NVLS graph).
NVLS_MAX_ARITY = 32

#: NCCL's bandwidth of one NVLink link by architecture, ``src/graph/topo.h`` (v2.29.7-1):
#: ``SM60_NVLINK_BW`` 18, ``SM70``/``SM80`` 20, ``SM90`` 20.6, ``SM100`` 40.1 GB/s (the NVLS
#: graph and the ring/tree graph search, :mod:`perfmodel.comm.nccl_graph`, read it).
NCCL_NVLINK_BW_Bps: Mapping[str, float] = MappingProxyType(
    {
        "pascal": 18.0 * units.GB,
        "volta": 20.0 * units.GB,
        "ampere": 20.0 * units.GB,
        "hopper": 20.6 * units.GB,
        "blackwell": 40.1 * units.GB,
    }
)

#: NCCL's graph-search speed tables (GB/s per channel), v2.29.7-1 ``src/graph/search.cc``:
#: ``sm90SpeedArrayIntra``/``Inter`` and ``sm100SpeedArrayIntra``/``Inter``.
SPEEDS_INTRA_GBps: Mapping[str, tuple[float, ...]] = MappingProxyType(
    {
        "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
        "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    }
)
SPEEDS_INTER_GBps: Mapping[str, tuple[float, ...]] = MappingProxyType(
    {
        "hopper": (
            48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
            1.2, 0.24, 0.12,
        ),
        "blackwell": (
            96.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
            3.0, 2.4, 1.2, 0.24, 0.12,
        ),
    }
)  # fmt: skip


def nvls_graph(
    arch: str, gpus: int, nvlinks: int, *, net_port_Bps: float = math.inf
) -> tuple[int, float]:
    """NCCL's NVLS graph over ``gpus`` GPUs of one NVLink domain: ``(heads k, per-channel
    bandwidth s in bytes/s)``; ``(0, 0.0)`` where there is none (fewer than 2 GPUs, no
    NVLink, an architecture without NVLS).

    ``s`` is the fastest entry of the architecture's speed table with ``(k + 1) s`` within
    the GPU's NVSwitch link (``nvlinks`` x NCCL's per-link bandwidth) and, across servers
    (``net_port_Bps`` finite: the ``Inter`` table), ``s`` within the NIC port.

    >>> k, s = nvls_graph("blackwell", 8, 18)
    >>> k, s / 1e9
    (8, 80.0)
    >>> k, s = nvls_graph("blackwell", 72, 18)
    >>> k, s / 1e9
    (32, 20.0)
    >>> k, s = nvls_graph("hopper", 8, 18, net_port_Bps=50e9)
    >>> k, s / 1e9
    (8, 40.0)
    """
    per_link = NCCL_NVLINK_BW_Bps.get(arch)
    if per_link is None or arch not in SPEEDS_INTRA_GBps or gpus < 2 or nvlinks < 1:
        return 0, 0.0  # NVLS: Hopper and later (the speed tables)
    k = min(NVLS_MAX_ARITY, int(gpus))
    link = nvlinks * per_link
    multi = math.isfinite(net_port_Bps)
    table = (SPEEDS_INTER_GBps if multi else SPEEDS_INTRA_GBps)[arch]
    for speed in table:
        s = speed * units.GB
        if (k + 1) * s <= link and (not multi or s <= net_port_Bps):
            return k, s
    return 0, 0.0


def nvls_bus_Bps(efficiency: float, k: int, s: float, *, allreduce: bool, ppn: int = 0) -> float:
    """NCCL 2.28+'s NVLS bus bandwidth of a graph of ``k`` channels of ``s`` bytes/s:
    ``k s x efficiency x (k - 1)/k``, x 2 for the all-reduce, x ``(ppn - 1)/ppn`` for
    all-gather and reduce-scatter; 0 with fewer than 2 channels (NCCL skips NVLS then).

    >>> round(nvls_bus_Bps(0.74, 8, 80e9, allreduce=True) / 1e9, 1)  # 8 B200
    828.8
    >>> round(nvls_bus_Bps(0.85, 8, 40e9, allreduce=True) / 1e9, 1)  # 8 H100
    476.0
    >>> round(nvls_bus_Bps(0.74, 32, 20e9, allreduce=True) / 1e9, 1)  # GB200 NVL72
    917.6
    """
    if k < 2:
        return 0.0
    per_channel = s * efficiency * (k - 1) / k
    per_channel *= 2.0 if allreduce else (ppn - 1) / ppn
    return k * per_channel
