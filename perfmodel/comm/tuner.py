"""NCCL's tuner constants by release: which table of ``src/graph/tuning.cc`` prices a group.

NCCL picks an algorithm and a protocol per call from a latency + bytes / bandwidth model whose
constants change between releases. Two tables are kept, each copied (as numbers with their
meaning, no code) from the named release of NVIDIA/nccl:

- :data:`NCCL_2_8` (v2.8.4-1; the ring and tree latencies are unchanged through v2.17): what the
  2019-2021 validation rows ran (DGX-1, DGX-2, DGX A100 with NCCL 2.4-2.14). Its numbers are the
  historical ones of :mod:`perfmodel.comm.params` (``NCCL_BASE_LATENCY_S`` ...), which stay the
  defaults there.
- :data:`NCCL_2_29` (v2.29.7-1, ``ncclTunerConstantsDefaults`` and ``ncclTopoTuneModel``): the
  releases from 2.18 on reworked the latencies (ring Simple network step 14 us, tree Simple 14 us,
  base latencies 6.6-14 us, a network post overhead of 1 us on Intel and 2 us on AMD hosts, x3 for
  Simple), the bandwidth caps (per channel and per architecture: Volta, Ampere, Hopper,
  Blackwell, for 1, 2 and more nodes), the ring plateau factor (1.4 on compute capability 8.0 and
  newer) and the tree correction table. Releases 2.18-2.28 differ from 2.29 in a few entries
  (tree Simple NVLink step 28 us in 2.19-2.26; Blackwell tree caps twice Hopper's in 2.27-2.28);
  they are priced with the 2.29 table (an approximation, stated).

Which table applies (:func:`tuner_for`): the release the scenario states (``--nccl``, recorded
by :func:`perfmodel.topology.importers.with_nccl_p2p_rule` as ``stated``); without one, the
release a GPU generation runs: Hopper and Blackwell need NCCL >= 2.12 / 2.25 (their first
supporting releases; every published Hopper/Blackwell run states 2.18 or later), so they get
:data:`NCCL_2_29`; older GPUs keep :data:`NCCL_2_8`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from perfmodel import units
from perfmodel.comm import params as P
from perfmodel.comm.params import HwClass, Protocol

#: GPU architecture -> NCCL's compute-capability index (``NCCL_*_COMPCAP_IDX``).
_ARCH_INDEX = MappingProxyType({"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3})


def arch_index(arch: str) -> int:
    """NCCL's compute-capability index of ``arch`` (Volta 0, Ampere 1, Hopper 2, Blackwell 3);
    older and unknown GPUs take Volta's row, newer ones Blackwell's (NCCL clamps the same way:
    ``minCompCap >= 100 ? BLACKWELL : >= 90 ? HOPPER : >= 80 ? AMPERE : VOLTA``).

    >>> arch_index("hopper"), arch_index("pascal")
    (2, 0)
    """
    return _ARCH_INDEX.get(arch, 0)


def nodes_index(nodes: int) -> int:
    """NCCL's ``index2``: 0 for one node, 1 for two, 2 for more (``nNodes <= 2 ? nNodes-1 : 2``)."""
    return 0 if nodes <= 1 else 1 if nodes == 2 else 2


_LAT = units.us
_BW = units.GB


@dataclass(frozen=True)
class NcclTuner:
    """The constants of one NCCL release's tuner (seconds, bytes/s).

    Attributes
    ----------
    release
        The release series the numbers come from (``"2.8"``, ``"2.29"``).
    base_latency_s
        ``baseLat[algorithm][protocol]``: fixed cost of one call.
    step_latency_s
        ``hwLat[transport][algorithm][protocol]``: latency of one algorithm step.
    per_channel_caps
        Whether bandwidth caps are per channel and architecture (2.18+) rather than the 2.7/2.8
        totals (:data:`perfmodel.comm.params.NCCL_TREE_MAX_BW_Bps`, the A100 235 GB/s cap).
    ll_max_Bps
        ``llMaxBws[index1][index2]`` (GB/s converted): LL bandwidth cap; ``index1`` is the GPU
        architecture on one node, the host CPU vendor across nodes (Intel 0, AMD 1).
    ring_ll128_max_per_channel_Bps, tree_ll128_max_per_channel_Bps, tree_max_per_channel_Bps
        ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws`` by
        [architecture index][nodes index].
    nvls_tree_max_per_channel_Bps
        ``perChMaxNVLSTreeBws`` by [architecture index][nodes index].
    tree_bw_factor
        Tree all-reduce bus bandwidth factor (``busBw * .92``).
    plateau_factor
        Ring Simple multi-node all-reduce latency factor (``1.9`` before compute capability 8.0,
        ``plateau_factor_sm80`` from it); applied from ``plateau_bytes_per_rank_channel`` bytes
        per rank and channel on.
    net_overhead_s
        ``getNetOverhead``: host post cost of one network step by CPU vendor (x3 for Simple);
        the floor of an intra-node ring step once the group spans nodes. 0 in 2.8.
    tree_correction
        ``treeCorrectionFactor[protocol][log2(bytes / 64)]``, applied below index
        ``tree_correction_below`` (NCCL 2.29: ``logSize < 23`` of a 24-entry table).
    source
        The file the numbers are read from.
    """

    release: str
    base_latency_s: Mapping[tuple[str, Protocol], float]
    step_latency_s: Mapping[tuple[HwClass, str, Protocol], float]
    per_channel_caps: bool
    ll_max_Bps: tuple[tuple[float, float, float], ...]
    ring_ll128_max_per_channel_Bps: tuple[tuple[float, float, float], ...]
    tree_ll128_max_per_channel_Bps: tuple[tuple[float, float, float], ...]
    tree_max_per_channel_Bps: tuple[tuple[float, float, float], ...]
    nvls_tree_max_per_channel_Bps: tuple[tuple[float, float, float], ...]
    tree_bw_factor: float
    plateau_factor: float
    plateau_factor_sm80: float
    plateau_bytes_per_rank_channel: float
    net_overhead_s: Mapping[str, float]
    tree_correction: Mapping[Protocol, tuple[float, ...]]
    tree_correction_below: int
    source: str

    def plateau(self, arch: str) -> float:
        """The ring plateau latency factor for GPUs of ``arch``.

        >>> NCCL_2_29.plateau("hopper"), NCCL_2_29.plateau("volta"), NCCL_2_8.plateau("ampere")
        (1.4, 1.9, 1.9)
        """
        return self.plateau_factor_sm80 if arch_index(arch) >= 1 else self.plateau_factor

    def overhead_s(self, cpu_vendor: str, proto: Protocol) -> float:
        """The network post overhead of one step (``getNetOverhead``, x3 for Simple), s.

        >>> round(NCCL_2_29.overhead_s("amd", Protocol.SIMPLE) * 1e6, 1)
        6.0
        """
        o = self.net_overhead_s.get(cpu_vendor, self.net_overhead_s.get("other", 0.0))
        return o * (3.0 if proto is Protocol.SIMPLE else 1.0)

    def tree_correction_at(self, proto: Protocol, message_bytes: float) -> float:
        """``treeCorrectionFactor`` for ``message_bytes`` (1 beyond the table).

        >>> NCCL_2_29.tree_correction_at(Protocol.SIMPLE, 2**20)
        0.5
        """
        i = int(math.log2(max(message_bytes / 64.0, 1.0)))
        return self.tree_correction[proto][i] if i < self.tree_correction_below else 1.0


def _gb(rows: tuple[tuple[float, ...], ...]) -> tuple[tuple[float, float, float], ...]:
    return tuple((r[0] * _BW, r[1] * _BW, r[2] * _BW) for r in rows)


#: NVIDIA/nccl v2.8.4-1 ``src/graph/tuning.cc`` (ring and tree latencies unchanged to v2.17): the
#: table the model always used (:mod:`perfmodel.comm.params`).
NCCL_2_8 = NcclTuner(
    release="2.8",
    base_latency_s=P.NCCL_BASE_LATENCY_S,
    step_latency_s=P.NCCL_STEP_LATENCY_S,
    per_channel_caps=False,
    ll_max_Bps=_gb(((39.0, 39.0, 20.4), (87.7, 22.5, 19.0))),
    ring_ll128_max_per_channel_Bps=_gb(((20.0, 20.0, 20.0),) * 4),
    tree_ll128_max_per_channel_Bps=_gb(((20.0, 20.0, 20.0),) * 4),
    tree_max_per_channel_Bps=_gb(((26.5, 18.5, 10.0), (24.0, 22.5, 16.0))),
    nvls_tree_max_per_channel_Bps=_gb(
        ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
    ),
    tree_bw_factor=P.NCCL_TREE_BW_FACTOR,
    plateau_factor=P.NCCL_RING_PLATEAU_LATENCY_FACTOR,
    plateau_factor_sm80=P.NCCL_RING_PLATEAU_LATENCY_FACTOR,
    plateau_bytes_per_rank_channel=65536 / 16.0,
    net_overhead_s=MappingProxyType({}),
    tree_correction=P.NCCL_TREE_CORRECTION,
    tree_correction_below=22,
    source="NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc",
)

#: ``treeCorrectionFactor`` of NVIDIA/nccl v2.29.7-1 (24 sizes, 64 B to 512 MiB).
_TREE_CORRECTION_2_29: Mapping[Protocol, tuple[float, ...]] = MappingProxyType(
    {
        Protocol.LL: (
            1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5,
            .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0,
        ),
        Protocol.LL128: (
            1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6,
            .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0,
        ),
        Protocol.SIMPLE: (
            .9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
            .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9,
        ),
    }
)  # fmt: skip

#: NVIDIA/nccl v2.29.7-1 ``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``,
#: ``ncclTopoTuneModel``, ``getNetOverhead``, ``treeCorrectionFactor``, ``ncclTopoGetAlgoTime``).
NCCL_2_29 = NcclTuner(
    release="2.29",
    base_latency_s=MappingProxyType(
        {
            ("tree", Protocol.LL): 6.8 * _LAT,
            ("tree", Protocol.LL128): 14.0 * _LAT,
            ("tree", Protocol.SIMPLE): 8.4 * _LAT,
            ("ring", Protocol.LL): 6.6 * _LAT,
            ("ring", Protocol.LL128): 14.0 * _LAT,
            ("ring", Protocol.SIMPLE): 8.4 * _LAT,
        }
    ),
    step_latency_s=MappingProxyType(
        {
            (HwClass.NVLINK, "tree", Protocol.LL): 0.6 * _LAT,
            (HwClass.NVLINK, "tree", Protocol.LL128): 1.25 * _LAT,
            (HwClass.NVLINK, "tree", Protocol.SIMPLE): 4.0 * _LAT,
            (HwClass.NVLINK, "ring", Protocol.LL): 0.6 * _LAT,
            (HwClass.NVLINK, "ring", Protocol.LL128): 1.9 * _LAT,
            (HwClass.NVLINK, "ring", Protocol.SIMPLE): 3.4 * _LAT,
            (HwClass.PCI, "tree", Protocol.LL): 1.0 * _LAT,
            (HwClass.PCI, "tree", Protocol.LL128): 1.9 * _LAT,
            (HwClass.PCI, "tree", Protocol.SIMPLE): 4.0 * _LAT,
            (HwClass.PCI, "ring", Protocol.LL): 1.0 * _LAT,
            (HwClass.PCI, "ring", Protocol.LL128): 2.5 * _LAT,
            (HwClass.PCI, "ring", Protocol.SIMPLE): 5.7 * _LAT,
            (HwClass.NET, "tree", Protocol.LL): 5.0 * _LAT,
            (HwClass.NET, "tree", Protocol.LL128): 8.5 * _LAT,
            (HwClass.NET, "tree", Protocol.SIMPLE): 14.0 * _LAT,
            (HwClass.NET, "ring", Protocol.LL): 2.7 * _LAT,
            (HwClass.NET, "ring", Protocol.LL128): 4.0 * _LAT,
            (HwClass.NET, "ring", Protocol.SIMPLE): 14.0 * _LAT,
        }
    ),
    per_channel_caps=True,
    ll_max_Bps=_gb(
        ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
    ),
    ring_ll128_max_per_channel_Bps=_gb(
        ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
    ),
    tree_ll128_max_per_channel_Bps=_gb(
        ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
    ),
    tree_max_per_channel_Bps=_gb(
        ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
    ),
    nvls_tree_max_per_channel_Bps=_gb(
        ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 43.8))
    ),
    tree_bw_factor=0.92,
    plateau_factor=1.9,
    plateau_factor_sm80=1.4,
    plateau_bytes_per_rank_channel=64.0,
    net_overhead_s=MappingProxyType({"intel": 1.0 * _LAT, "amd": 2.0 * _LAT, "other": 1.0 * _LAT}),
    tree_correction=_TREE_CORRECTION_2_29,
    tree_correction_below=23,
    source="NVIDIA/nccl v2.29.7-1 src/graph/tuning.cc",
)

#: First release of the :data:`NCCL_2_29` latency table (v2.18.1-1 reworked ``baseLat`` and
#: ``hwLat``: ring Simple network step 9.6 -> 14 us).
MODERN_FROM = (2, 18)

#: Architectures whose first supporting NCCL release is already past :data:`MODERN_FROM` in every
#: published run (Hopper: 2.12+, in practice 2.18+; Blackwell: 2.25+).
MODERN_ARCHITECTURES = frozenset({"hopper", "blackwell"})


def tuner_for(release: tuple[int, int] | None, arch: str) -> NcclTuner:
    """The tuner table of a stated ``release`` (``(major, minor)``), else of ``arch``'s era.

    >>> tuner_for((2, 14), "hopper").release, tuner_for((2, 21), "ampere").release
    ('2.8', '2.29')
    >>> tuner_for(None, "blackwell").release, tuner_for(None, "ampere").release
    ('2.29', '2.8')
    """
    if release is not None:
        return NCCL_2_29 if tuple(release) >= MODERN_FROM else NCCL_2_8
    return NCCL_2_29 if arch in MODERN_ARCHITECTURES else NCCL_2_8
