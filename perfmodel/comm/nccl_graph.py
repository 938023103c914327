"""How many channels NCCL's ring and tree graphs have across servers: the count the tuner's
per-channel bandwidth caps multiply.

NCCL's tuner caps the tree's bus bandwidth at ``graphs[TREE]->nChannels x perChMaxTreeBw``
and the ring's LL128 at ``graphs[RING]->nChannels x perChMaxRingLL128Bw`` (NVIDIA/nccl
``src/graph/tuning.cc``, ``ncclTopoTuneModel``, v2.26.2-1 to v2.29.7-1). Those counts are the
*search* channels of NCCL's graphs (``src/graph/search.cc``, ``ncclTopoCompute``), not the
model's ring channels (:func:`perfmodel.comm.channels.ring_plan` spreads one channel over each
NIC, up to 32: 32 on a GB200 NVL72 rack with 72 NICs). The tree graph is searched with
``minChannels = maxChannels =`` the ring graph's count (``src/init.cc``), so both share it.

The search across servers (a network present): every channel runs at one speed ``s`` of the
architecture's ``Inter`` speed table (``speedArrayInter``, ``sm90SpeedArrayInter``,
``sm100SpeedArrayInter``), starting at the fastest ``s`` a GPU's path to its NIC carries
(``system->maxBw``); each channel takes ``s`` of every GPU's NVLink total (``totalBw``:
NVLinks x NCCL's per-link bandwidth, ``src/graph/topo.h``) and of one NIC port. It keeps the
best ``channels x s`` found, stops once that reaches ``totalBw``, and tries slower speeds while
the next is more than 0.49 of the best so far. ``ncclTopoDupChannels`` then doubles the
channels (to at most ``maxChannels`` = ``MAXCHANNELS / 2`` = 32) where ``s >= 25`` GB/s, except
on compute capability > 8.0 with ``s < 50`` and more than 4 channels.

This module reproduces that count from NCCL's own unit numbers (the port's line rate, the
NVLink count and NCCL's per-link figure), not the model's measured link rates, whose
efficiencies would move the count off NCCL's (a DGX A100 ring at 8 x 23 GB/s would give 9
channels of 20 GB/s instead of NCCL's 8 of 24).
"""

from __future__ import annotations

import math

from perfmodel import units
from perfmodel.comm.nvls import NCCL_NVLINK_BW_Bps, SPEEDS_INTER_GBps

#: ``speedArrayInter`` (GB/s per channel) of ``src/graph/search.cc`` (v2.26.2-1 to v2.29.7-1):
#: the search speeds across servers before Hopper.
SPEEDS_INTER_BASE_GBps: tuple[float, ...] = (
    48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4,
    1.2, 0.24, 0.12,
)  # fmt: skip

#: ``MAXCHANNELS`` (NVIDIA/nccl v2.29.7-1 ``src/include/device.h`` line 88): the most channels
#: a communicator runs; ``ncclTopoPostset`` doubles the searched ones up to it
#: (``src/graph/connect.cc`` line 453, ``std::min(MAXCHANNELS, nChannels*2)``).
NCCL_MAXCHANNELS = 64

#: ``MAXCHANNELS / 2``: the most channels the ring graph search keeps (``src/init.cc``,
#: ``ringGraph->maxChannels``).
NCCL_GRAPH_MAX_CHANNELS = NCCL_MAXCHANNELS // 2

#: The search tries a slower speed only while it is more than this share of the best speed
#: found (``speedArray[speedIndex+1]/graph->bwInter > .49``).
SLOWER_SPEED_RATIO = 0.49

#: ``ncclTopoDupChannels``: channels double from this per-channel speed (GB/s) up ...
DUP_FROM_GBps = 25.0
#: ... except, on compute capability > 8.0, below this speed with more than
#: :data:`DUP_KEEP_ABOVE_CHANNELS` channels.
DUP_SM90_BELOW_GBps = 50.0
DUP_KEEP_ABOVE_CHANNELS = 4

#: Architectures of compute capability > 8.0 (``ccMin > 80``).
_CC_ABOVE_80 = frozenset({"hopper", "blackwell"})


def inter_graph_channels(arch: str, *, nvlinks: int, net_port_Bps: float, nics: int) -> int | None:
    """Search channels of NCCL's ring (and so tree) graph across servers, ``None`` where the
    count cannot be read off NCCL's numbers (no NVSwitch links, no finite NIC port, no NIC,
    an architecture without NCCL's per-link figure): the caller keeps its own count.

    ``nvlinks``: NVLinks from each GPU to its NVSwitch; ``net_port_Bps``: line rate of one NIC
    port the ring uses; ``nics``: NICs a server's GPUs leave through.

    >>> # GB200 NVL72 racks: 18 x 40.1 GB/s per GPU, 72 x 400 Gb/s: 48 GB/s fits 15 channels
    >>> # (720 GB/s), 45.1 fits 16 (721.6, more): 16; no doubling (45.1 < 50, 16 > 4)
    >>> inter_graph_channels("blackwell", nvlinks=18, net_port_Bps=50e9, nics=72)
    16
    >>> # DGX H100, 8 x 400 Gb/s: 45 GB/s x 8 channels (the 8 NICs carry one channel each)
    >>> inter_graph_channels("hopper", nvlinks=18, net_port_Bps=50e9, nics=8)
    8
    >>> # DGX A100, 8 x 200 Gb/s (25 GB/s): 24 GB/s x 8, no doubling below 25 GB/s
    >>> inter_graph_channels("ampere", nvlinks=12, net_port_Bps=25e9, nics=8)
    8
    """
    per_link = NCCL_NVLINK_BW_Bps.get(arch)
    if per_link is None or nvlinks < 1 or nics < 1 or not math.isfinite(net_port_Bps):
        return None
    total = nvlinks * per_link
    table = SPEEDS_INTER_GBps.get(arch, SPEEDS_INTER_BASE_GBps)
    best_ch, best_s = 0, 0.0
    for speed in table:
        s = speed * units.GB
        if s > net_port_Bps or s > total:
            continue  # above the GPU's path to its NIC (maxBw) or its links
        if best_ch and s / best_s <= SLOWER_SPEED_RATIO:
            break
        ch = min(
            NCCL_GRAPH_MAX_CHANNELS,
            int(total // s),
            nics * int(net_port_Bps // s),
        )
        if ch * s > best_ch * best_s:
            best_ch, best_s = ch, s
        if best_ch * best_s >= total:
            break
    if best_ch == 0:
        return None
    sm90 = arch in _CC_ABOVE_80
    if best_s >= DUP_FROM_GBps * units.GB and not (
        sm90 and best_s < DUP_SM90_BELOW_GBps * units.GB and best_ch > DUP_KEEP_ABOVE_CHANNELS
    ):
        best_ch = min(2 * best_ch, NCCL_GRAPH_MAX_CHANNELS)
    return best_ch
