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
  newer) and the tree correction table.
- :data:`NCCL_2_25` (v2.25.1-1 to v2.27.7-1, read at v2.26.2-1): 2.29's table but for the
  Blackwell per-channel caps, twice Hopper's in those releases (``2*38.7, 2*41.4, 2*36.0`` tree,
  ``2*36.7`` ring LL128, ``2*36.7, 2*36.7, 2*29.0`` tree LL128), where 2.28 and 2.29 have
  NVIDIA's later, lower figures (tree 70 / 42.8 / 24 GB/s).
- :data:`NCCL_2_28` (v2.28.9-1): 2.29's table but for the Blackwell ring LL128 caps
  (``2*36.7, 34.6, 2*36.7`` against 2.29.7's 40 GB/s).

Releases 2.18-2.24 are priced with :data:`NCCL_2_29`: they predate Blackwell, and their
Volta / Ampere / Hopper caps are 2.29's; their latencies differ in places (tree Simple step
28 us on every transport in 2.19-2.22, 4 us from 2.23; 2.18's ring LL factor 1/4 and ring LL128
0.7 with one GPU per node), an approximation stated here. The NVLS and NVLS tree candidates
keep the 2.28+ model (:mod:`perfmodel.comm.nccl_recent`, :mod:`perfmodel.comm.nvls`) and its
NVLS-tree caps for every release (2.25-2.27 have no NVLS-tree cap and another NVLS bandwidth
formula).

Which table applies (:func:`tuner_for`): the release the scenario states (``--nccl``, recorded
by :func:`perfmodel.topology.nccl_p2p.with_nccl_p2p_rule` as ``stated``); without one, the
release a GPU generation runs: Hopper and Blackwell need NCCL >= 2.12 / 2.25 (their first
supporting releases; every published Hopper/Blackwell run states 2.18 or later), so they get
:data:`NCCL_2_29`; older GPUs keep :data:`NCCL_2_8`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType

import perfmodel.comm.params as P
from perfmodel import units
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

#: NVIDIA/nccl v2.26.2-1 ``src/graph/tuning.cc`` lines 151-175 (``llMaxBws``,
#: ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws``; the same numbers in
#: every tag from v2.25.1-1 to v2.27.7-1): Blackwell's caps are twice Hopper's. Everything else
#: of the ring and tree model is :data:`NCCL_2_29`'s (the latencies, ``getNetOverhead``, the
#: tree correction below ``logSize`` 23 and the plateau factor are the same in v2.26.2-1).
NCCL_2_25 = replace(
    NCCL_2_29,
    release="2.25",
    ring_ll128_max_per_channel_Bps=_gb(
        ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (73.4, 73.4, 73.4))
    ),
    tree_ll128_max_per_channel_Bps=_gb(
        ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (73.4, 73.4, 58.0))
    ),
    tree_max_per_channel_Bps=_gb(
        ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (77.4, 82.8, 72.0))
    ),
    source="NVIDIA/nccl v2.26.2-1 src/graph/tuning.cc (v2.25.1-1 to v2.27.7-1)",
)

#: NVIDIA/nccl v2.28.9-1 ``src/graph/tuning.cc`` lines 169-198 (``ncclTunerConstantsDefaults``):
#: 2.29's caps but Blackwell's ring LL128, ``{2*36.7, 34.6, 2*36.7}`` GB/s per channel
#: (v2.28.7-1 and v2.28.9-1; v2.28.3-1 has ``2*36.7`` for two nodes too).
NCCL_2_28 = replace(
    NCCL_2_29,
    release="2.28",
    ring_ll128_max_per_channel_Bps=_gb(
        ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (73.4, 34.6, 73.4))
    ),
    source="NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc",
)

#: First release of :data:`NCCL_2_25`'s and :data:`NCCL_2_28`'s tables.
BLACKWELL_CAPS_FROM = MappingProxyType({(2, 25): NCCL_2_25, (2, 28): NCCL_2_28, (2, 29): NCCL_2_29})

#: The table that prices a choice made by each release's table (:func:`pricing_tuner`).
_PRICED_BY = MappingProxyType({NCCL_2_25.release: NCCL_2_29, NCCL_2_28.release: NCCL_2_29})


def pricing_tuner(tuner: NcclTuner) -> NcclTuner:
    """The table whose numbers price the (algorithm, protocol) ``tuner`` chooses: itself, but
    for :data:`NCCL_2_25` and :data:`NCCL_2_28`, whose choices are priced by
    :data:`NCCL_2_29`.

    A tuner's per-channel cap is NVIDIA's figure for what one channel of a kernel sustains on a
    GPU generation. The 2.25-2.27 Blackwell caps are Hopper's doubled (written ``2*38.7`` in
    v2.26.2-1 ``src/graph/tuning.cc``); 2.28 replaced them with Blackwell's own (tree 70 /
    42.8 / 24 GB/s per channel), and 2.29.7 the ring LL128 cap (40 GB/s). The release a job
    runs decides what NCCL chooses; how fast the chosen kernel runs on the GPUs is priced with
    the latest figures for those same GPUs. Where the two tables agree, as everywhere off
    Blackwell, the price is the release's own.

    ASSUMPTIONS (not read from NCCL): (1) the 2.25-2.27 Blackwell caps were a placeholder for
    GPUs NCCL had not yet measured, not a measurement of those releases' kernels (the source
    writes them as Hopper's doubled and says no more); (2) the ring and tree kernels run as fast
    in 2.25-2.28 as in 2.29 on the same GPUs (no release note or benchmark compared them). The
    only evidence for pricing by 2.29 is one validation row: scale.jsonl's CoreWeave GB200 20
    racks 16 GiB all-reduce (NCCL 2.26: tree), +49.3% priced by 2.25's caps, -6.2% by 2.29's;
    no other comm or scale row moves. ``--explain`` says which table chose and which priced
    (:class:`perfmodel.report.explain.StepContext`).

    >>> pricing_tuner(NCCL_2_25).release, pricing_tuner(NCCL_2_8).release
    ('2.29', '2.8')
    """
    return _PRICED_BY.get(tuner.release, tuner)


#: First release of the :data:`NCCL_2_29` latency table (v2.18.1-1 reworked ``baseLat`` and
#: ``hwLat``: ring Simple network step 9.6 -> 14 us).
MODERN_FROM = (2, 18)

#: Architectures whose first supporting NCCL release is already past :data:`MODERN_FROM` in every
#: published run (Hopper: 2.12+, in practice 2.18+; Blackwell: 2.25+).
MODERN_ARCHITECTURES = frozenset({"hopper", "blackwell"})


def _release_pair(series: str) -> tuple[int, int]:
    """``"2.29"`` -> ``(2, 29)``."""
    major, minor = series.split(".")
    return int(major), int(minor)


#: The tuner table a job follows where no release is stated (``--nccl``): that of the era of
#: its GPU generation, :data:`NCCL_2_29` on :data:`MODERN_ARCHITECTURES`, :data:`NCCL_2_8`
#: before them (:func:`tuner_for`). The ``--nccl`` help and ``predict --explain`` format these.
DEFAULT_TUNER_MODERN = NCCL_2_29
DEFAULT_TUNER_EARLIER = NCCL_2_8
#: Their releases as ``(major, minor)``: what the LL128 rules assume where none is stated.
DEFAULT_RELEASE_MODERN = _release_pair(DEFAULT_TUNER_MODERN.release)
DEFAULT_RELEASE_EARLIER = _release_pair(DEFAULT_TUNER_EARLIER.release)


def tuner_for(release: tuple[int, int] | None, arch: str) -> NcclTuner:
    """The tuner table of a stated ``release`` (``(major, minor)``), else of ``arch``'s era.

    >>> tuner_for((2, 14), "hopper").release, tuner_for((2, 21), "ampere").release
    ('2.8', '2.29')
    >>> [tuner_for((2, m), "blackwell").release for m in (25, 26, 27, 28, 29, 30)]
    ['2.25', '2.25', '2.25', '2.28', '2.29', '2.29']
    >>> tuner_for(None, "blackwell").release, tuner_for(None, "ampere").release
    ('2.29', '2.8')
    """
    if release is None:
        return DEFAULT_TUNER_MODERN if arch in MODERN_ARCHITECTURES else DEFAULT_TUNER_EARLIER
    release = tuple(release)
    if release < MODERN_FROM:
        return NCCL_2_8
    found = NCCL_2_29
    for first, table in BLACKWELL_CAPS_FROM.items():
        if release >= first:
            found = table
    return found


#: First releases of the in-switch and recent algorithms (NVIDIA/nccl ``src/graph/tuning.cc``
#: of each tag): NVLS all-reduce 2.17.1 (also all-gather / reduce-scatter there, dropped in
#: 2.18 and back from 2.19), NVLS tree 2.18.1, PAT 2.23.4.
NVLS_FROM = (2, 17)
NVLS_TREE_FROM = (2, 18)
NVLS_GATHER_FROM = (2, 19)
PAT_FROM = (2, 23)


def released(release: tuple[int, int] | None, first: tuple[int, int]) -> bool:
    """Whether a stated ``release`` has what came with ``first`` (no stated release: yes, the
    recent algorithms are offered as the era's tuner, :func:`tuner_for`, assumes).

    >>> released((2, 14), NVLS_FROM), released(None, PAT_FROM), released((2, 29), PAT_FROM)
    (False, True, True)
    """
    return release is None or tuple(release) >= first


#: First release with PXN (NVLink to a peer GPU, then its NIC: "PCI x NVLink", NCCL 2.12,
#: ``NCCL_PXN_DISABLE`` default 0; NVIDIA technical blog "Doubling all2all Performance with
#: NVIDIA Collective Communication Library 2.12", 2022).
PXN_FROM = (2, 12)


# --- LL128 enable rule by release (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel) -------

#: NCCL's compute capability of each GPU architecture the catalogue names (datacentre parts:
#: Ampere is the A100's 8.0, Blackwell the B200's 10.0).
COMPUTE_CAPABILITY = MappingProxyType(
    {
        "kepler": 35,
        "maxwell": 52,
        "pascal": 60,
        "volta": 70,
        "turing": 75,
        "ampere": 80,
        "ada": 89,
        "hopper": 90,
        "blackwell": 100,
    }
)


@dataclass(frozen=True)
class Ll128Rule:
    """When one release series enables LL128 by default (``NCCL_PROTO`` unset).

    Attributes
    ----------
    first
        The first release (``(major, minor)``) of the series.
    capabilities
        Compute capabilities allowed (``None``: every one from 7.0 on).
    inter_max
        The worst GPU-to-NIC path (``typeInter``) allowed.
    inter_max_sm90
        The worst allowed from compute capability 9.0 on.
    source
        The release whose ``tuning.cc`` states the rule.
    """

    first: tuple[int, int]
    capabilities: frozenset[int] | None
    inter_max: int
    inter_max_sm90: int
    source: str


@cache
def _ll128_rules() -> tuple[Ll128Rule, ...]:
    """Every release series' :class:`Ll128Rule`, oldest first: made once (frozen, read only;
    issue 27: ten rules built for each new group table a plan prices)."""
    from perfmodel.comm.nccl_paths import PathType as T

    def rule(first, caps, inter, sm90, source):
        return Ll128Rule(first, None if caps is None else frozenset(caps), inter, sm90, source)

    return (
        # 2.5-2.6: "only on Volta+NVLink", typeInter <= LINK_PCI (= PATH_PIX)
        rule((2, 5), {70}, T.PIX, T.PIX, "v2.6.4-1"),
        # 2.7-2.14: Volta/Ampere, typeInter <= PATH_PXB, typeIntra <= PATH_NVL
        rule((2, 7), {70, 80}, T.PXB, T.PXB, "v2.14.3-1"),
        # 2.15-2.16: + Hopper (case 90)
        rule((2, 15), {70, 80, 90}, T.PXB, T.PXB, "v2.16.5-1"),
        # 2.17-2.18: PXN allowed from compute capability 9.0
        rule((2, 17), {70, 80, 90}, T.PXB, T.PXN, "v2.18.1-1"),
        # 2.19-2.24: typeIntra <= PATH_NVB
        rule((2, 19), {70, 80, 90}, T.PXB, T.PXN, "v2.24.3-1"),
        # 2.25-2.26: + Blackwell (cases 100, 120)
        rule((2, 25), {70, 80, 90, 100, 120}, T.PXB, T.PXN, "v2.26.2-1"),
        # 2.27: every capability >= 7.0; from 9.0 up to P2C (NCCL_LL128_C2C=1 default)
        rule((2, 27), None, T.PXB, T.P2C, "v2.27.3-1"),
        # 2.28+: from 9.0 every path up to PXN (P2C included), else up to PXB
        rule((2, 28), None, T.PXB, T.PXN, "v2.29.7-1"),
    )


def ll128_rule(release: tuple[int, int] | None, arch: str) -> Ll128Rule | None:
    """The LL128 rule of ``release`` (``None``: the release era :func:`tuner_for` assumes for
    ``arch``: 2.29 for Hopper and Blackwell, 2.8 before), or ``None`` before LL128 (2.4).

    >>> ll128_rule((2, 14), "ampere").source, ll128_rule(None, "hopper").source
    ('v2.14.3-1', 'v2.29.7-1')
    >>> ll128_rule((2, 4), "volta") is None
    True
    """
    if release is None:
        release = (
            DEFAULT_RELEASE_MODERN if arch in MODERN_ARCHITECTURES else DEFAULT_RELEASE_EARLIER
        )
    found = None
    for r in _ll128_rules():
        if tuple(release) >= r.first:
            found = r
    return found


def ll128_enabled(
    release: tuple[int, int] | None,
    arch: str,
    *,
    intra_nvlink: bool,
    net_path: int | None,
) -> bool:
    """Whether NCCL enables LL128 by default on a group: the GPUs' compute capability in the
    release's list, the ring inside servers over NVLink (``typeIntra``), and, across servers
    (``net_path`` the ring's GPU-to-NIC path type, :mod:`perfmodel.comm.nccl_paths`; ``None``
    on one server, where NCCL's ``typeInter`` stays at its best), the path to the NIC no worse
    than the release allows (``typeInter``). The GPU-to-GPU limit (``typeIntra`` up to
    ``NVL``, from 2.19 ``NVB``) is met by every NVLink ring the model builds (direct or
    switched NVLink hops), so ``intra_nvlink`` stands for it. NVIDIA/nccl ``src/graph/tuning.cc`` of the
    releases in :func:`ll128_rule` (the "Enable LL128 by default only on ..." block).

    The InternEvo servers (A100, NICs behind two PCIe switch levels: ``PXB``) keep LL128 with
    2.14; a V100 server whose NIC hangs off the CPU (``PHB``) loses it across servers; a
    Hopper stating 2.14 loses it everywhere (Hopper joined in 2.15), a Blackwell stating 2.24
    too (Blackwell joined in 2.25); a GPU that reaches its NIC over NVLink through another GPU
    (``PXN``) keeps it from Hopper on (2.17+), not on Ampere:

    >>> from perfmodel.comm.nccl_paths import PathType as T
    >>> ll128_enabled((2, 14), "ampere", intra_nvlink=True, net_path=T.PXB)
    True
    >>> ll128_enabled((2, 8), "volta", intra_nvlink=True, net_path=T.PHB)
    False
    >>> ll128_enabled((2, 14), "hopper", intra_nvlink=True, net_path=None)
    False
    >>> ll128_enabled((2, 24), "blackwell", intra_nvlink=True, net_path=None)
    False
    >>> [ll128_enabled((2, 29), a, intra_nvlink=True, net_path=T.PXN) for a in ("ampere", "hopper")]
    [False, True]
    """
    if release is None:
        release = (
            DEFAULT_RELEASE_MODERN if arch in MODERN_ARCHITECTURES else DEFAULT_RELEASE_EARLIER
        )
    rule = ll128_rule(release, arch)
    if rule is None or not intra_nvlink:
        return False
    cc = COMPUTE_CAPABILITY.get(arch)
    if cc is None or cc < 70:
        return False
    if rule.capabilities is not None and cc not in rule.capabilities:
        return False
    if net_path is None:
        return True
    from perfmodel.comm.nccl_paths import PathType

    path = int(net_path)
    if tuple(release) < (2, 27) and path == PathType.P2C:
        path = int(PathType.PHB)  # no P2C type before 2.27: the CPU is a host bridge
    return path <= (rule.inter_max_sm90 if cc >= 90 else rule.inter_max)
