"""Parameters of the communication model: per-link-class overrides and NCCL's tuner constants.

:class:`LinkParams` is what calibration fits from nccl-tests logs: for a *link class* (a link
family such as ``nvlink`` or a technology name such as ``ib-hdr``) a latency ``alpha_s`` and/or
a large-message goodput ``bandwidth_Bps`` that replace the topology's values. A technology name
wins over its family.

The NCCL constants below are copied (as numbers, with their meaning) from NCCL's tuning model,
``src/graph/tuning.cc`` (NVIDIA/nccl, 2020 versions 2.7-2.8): the per-collective base latency
(``baseLat``), the per-step hardware latency by transport (``hwLat``), the protocol bandwidth
factors and the tree bandwidth caps. They describe NCCL's own software, not the wire, so they are
the right constants for an approximation of what NCCL does; they are not fitted to our
validation rows.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._enum import ParsedEnum, snake
from perfmodel._schema import as_number
from perfmodel.errors import ConfigError
from perfmodel.hardware.links import LinkFamily

_ALGORITHM_ALIASES = {
    "rhd": "halving_doubling",
    "recursive_halving_doubling": "halving_doubling",
    "hd": "halving_doubling",
    "hier": "hierarchical",
    "2d": "torus2d",
    "torus": "torus2d",
    "ring2d": "torus2d",
    "parameter_server": "ps",
    "cpu": "host",
    "sendrecv": "p2p",
    "dbtree": "tree",
    "double_binary_tree": "tree",
    "nvlstree": "nvls_tree",
    "nvls-tree": "nvls_tree",
}


class Algorithm(
    str,
    ParsedEnum,
    where="--algorithm",
    noun="algorithm",
    normalize=snake,
    aliases=_ALGORITHM_ALIASES,
):
    """Collective algorithms the model knows.

    ``auto`` chooses as NCCL's tuner does (ring or tree, and a protocol) by message size and group
    shape. The others are explicit choices:

    ``ring``
        Ring (Patarasuk & Yuan 2009): reduce-scatter then all-gather around a ring; NCCL's
        default for large messages. Several rings (channels) share the links.
    ``tree``
        NCCL's tree: a chain inside each server and a double binary tree across servers
        (Sanders, Speck & Träff 2009).
    ``halving_doubling``
        Recursive halving (reduce-scatter) and doubling (all-gather), Rabenseifner / Thakur,
        Rabenseifner & Gropp 2005.
    ``hierarchical``
        Intra-node reduce-scatter, inter-node all-reduce across servers, intra-node all-gather
        (Horovod hierarchical all-reduce; Sergeev & Del Balso 2018).
    ``torus2d``
        2-D ring/torus all-reduce (Mikami et al. 2018; Ying et al. 2018): rings along one
        dimension, then the other.
    ``direct``
        Every rank sends to every other rank at once (all-to-all over NVSwitch / a full crossbar).
    ``ps``
        Parameter server: workers push gradients to and pull weights from server(s).
    ``host``
        CPU-side averaging (Keras ``multi_gpu_model``, ``nn.DataParallel``): gather to the host
        (or GPU0), average, scatter back.
    ``p2p``
        A single point-to-point transfer (``sendrecv``).
    ``nvls``
        NVLink SHARP (NCCL >= 2.17, Hopper and Blackwell NVSwitch systems): the NVSwitch reduces
        (``multimem.ld_reduce``) and multicasts (``multimem.st``); one server, all-reduce.
    ``collnet``
        InfiniBand SHARP (NCCL's CollNet): the fabric switches reduce; several servers on a
        fabric marked ``sharp``, all-reduce.
    ``nvls_tree``
        NVLS inside each server and a tree across servers (NCCL >= 2.18, "NVLSTree"): all-reduce
        over several Hopper/Blackwell NVSwitch servers, no SHARP fabric needed.
    ``pat``
        Parallel Aggregated Trees (NCCL >= 2.23): all-gather and reduce-scatter with one GPU per
        server, a Bruck-like pattern of log2(n) network steps.
    """

    AUTO = "auto"
    RING = "ring"
    TREE = "tree"
    HALVING_DOUBLING = "halving_doubling"
    HIERARCHICAL = "hierarchical"
    TORUS2D = "torus2d"
    DIRECT = "direct"
    PS = "ps"
    HOST = "host"
    P2P = "p2p"
    NVLS = "nvls"
    COLLNET = "collnet"
    NVLS_TREE = "nvls_tree"
    PAT = "pat"


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
ALGO_AUTO = Algorithm.AUTO
ALGO_HOST = Algorithm.HOST
ALGO_PS = Algorithm.PS
ALGO_RING = Algorithm.RING
ALGO_TREE = Algorithm.TREE


class Protocol(str, enum.Enum):
    """NCCL wire protocols.

    ``LL`` (low latency: 8-byte stores of 4 data bytes + 4 flag bytes, so at most half the link
    bandwidth and, per NCCL's tuner, 1/3 to 1/4 of it), ``LL128`` (128-byte lines with 8 flag bytes,
    about 92 % of the bandwidth; NVLink only) and ``Simple`` (bulk copies with memory fences,
    full bandwidth but the highest per-step latency).
    """

    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


# (bound once, as above)
PROTO_LL = Protocol.LL
PROTO_LL128 = Protocol.LL128
PROTO_SIMPLE = Protocol.SIMPLE


class HwClass(str, enum.Enum):
    """NCCL's transport classes for the per-step latency table."""

    NVLINK = "nvlink"
    PCI = "pci"
    NET = "net"


# (bound once, as above)
HW_NET = HwClass.NET


#: Link families of NCCL's network class (:attr:`HwClass.NET`): a path crossing one is a
#: network path.
NET_FAMILIES = frozenset({LinkFamily.INFINIBAND, LinkFamily.ETHERNET})
#: Link families of NCCL's NVLink class (:attr:`HwClass.NVLINK`): a path of only these is an
#: NVLink path. RCCL types AMD's GPU-to-GPU Infinity Fabric links as its NVLink class
#: (``LINK_NVL``, printed "XGMI": ROCm/rccl src/graph/topo.cc ncclTopoAddXGMI, commit 0cbce2a,
#: 2024), so NCCL's NVLink latencies and protocols apply to them.
NVLINK_FAMILIES = frozenset({LinkFamily.NVLINK, LinkFamily.NVSWITCH, LinkFamily.XGMI})


# --- NCCL tuner constants (src/graph/tuning.cc, NVIDIA/nccl 2.7/2.8), in seconds -------------
#: ``baseLat``: fixed cost of one collective launch, per algorithm and protocol.
NCCL_BASE_LATENCY_S: Mapping[tuple[str, Protocol], float] = MappingProxyType(
    {
        ("tree", Protocol.LL): 4.4 * units.us,
        ("tree", Protocol.LL128): 4.4 * units.us,
        ("tree", Protocol.SIMPLE): 0.0,
        ("ring", Protocol.LL): 3.6 * units.us,
        ("ring", Protocol.LL128): 10.0 * units.us,
        ("ring", Protocol.SIMPLE): 8.4 * units.us,
    }
)
#: Launch cost of NCCL's all-to-all (grouped send/recv, Simple protocol): the tuner has no entry
#: for it, so it pays the ring/Simple ``baseLat`` (8.4 us) like the collectives it runs beside.
#: Without it a 1 MiB all-to-all on 8 H100 came out 6.7 us, below any NCCL launch.
NCCL_DIRECT_BASE_LATENCY_S = NCCL_BASE_LATENCY_S[("ring", Protocol.SIMPLE)]
#: ``hwLat``: latency of one algorithm step over a transport class.
NCCL_STEP_LATENCY_S: Mapping[tuple[HwClass, str, Protocol], float] = MappingProxyType(
    {
        (HwClass.NVLINK, "tree", Protocol.LL): 0.52 * units.us,
        (HwClass.NVLINK, "tree", Protocol.LL128): 1.2 * units.us,
        (HwClass.NVLINK, "tree", Protocol.SIMPLE): 28.0 * units.us,
        (HwClass.NVLINK, "ring", Protocol.LL): 0.47 * units.us,
        (HwClass.NVLINK, "ring", Protocol.LL128): 1.9 * units.us,
        (HwClass.NVLINK, "ring", Protocol.SIMPLE): 3.4 * units.us,
        (HwClass.PCI, "tree", Protocol.LL): 1.0 * units.us,
        (HwClass.PCI, "tree", Protocol.LL128): 1.9 * units.us,
        (HwClass.PCI, "tree", Protocol.SIMPLE): 28.0 * units.us,
        (HwClass.PCI, "ring", Protocol.LL): 1.0 * units.us,
        (HwClass.PCI, "ring", Protocol.LL128): 2.5 * units.us,
        (HwClass.PCI, "ring", Protocol.SIMPLE): 5.7 * units.us,
        (HwClass.NET, "tree", Protocol.LL): 5.0 * units.us,
        (HwClass.NET, "tree", Protocol.LL128): 8.5 * units.us,
        (HwClass.NET, "tree", Protocol.SIMPLE): 50.0 * units.us,
        (HwClass.NET, "ring", Protocol.LL): 2.7 * units.us,
        (HwClass.NET, "ring", Protocol.LL128): 4.0 * units.us,
        (HwClass.NET, "ring", Protocol.SIMPLE): 9.6 * units.us,
    }
)
#: Ring LL bandwidth factor: 1/4 for all-reduce, reduce or multi-node, else 1/3 (tuning.cc).
NCCL_RING_LL_FACTOR_ALLREDUCE = 1.0 / 4.0
NCCL_RING_LL_FACTOR_OTHER = 1.0 / 3.0
#: Ring LL128 bandwidth factor (120/128 lines, rounded down by NCCL to 0.92; 0.7 with < 2 GPUs per node).
NCCL_LL128_FACTOR = 0.92
NCCL_LL128_FACTOR_ONE_PER_NODE = 0.7
#: Tree: bus bandwidth x 0.9, capped at 80 GB/s (> 2 nodes) or 110 GB/s (A100 LL128: 105 / 130).
NCCL_TREE_BW_FACTOR = 0.9
NCCL_TREE_MAX_BW_Bps = MappingProxyType(
    {
        ("multi", False): 80.0 * units.GB,
        ("multi", True): 105.0 * units.GB,
        ("few", False): 110.0 * units.GB,
        ("few", True): 130.0 * units.GB,
    }
)
NCCL_TREE_LL_FACTOR = 1.0 / 3.8
NCCL_TREE_LL128_FACTOR_INTRA = 7.0 / 9.0
NCCL_TREE_LL128_FACTOR_INTER = 0.915
#: A100 (compute capability 8.0): NCCL caps the bus bandwidth of any algorithm at 235 GB/s.
NCCL_SM80_MAX_BUSBW_Bps = 235.0 * units.GB
#: Ring/Simple all-reduce across nodes: latency x 1.9 above nRanks/16 x 64 KiB ("plateau").
NCCL_RING_PLATEAU_LATENCY_FACTOR = 1.9
#: LL step inside a server once the group spans servers: intra-node step latency x 1.8 (NCCL 2.7+
#: ``src/graph/tuning.cc``: ``if (nNodes > 1 && p == NCCL_PROTO_LL) intraLat *= 1.8``).
NCCL_LL_MULTINODE_INTRA_LATENCY_FACTOR = 1.8
#: treeCorrectionFactor[protocol][log2(bytes/64)], powers of two from 64 B to 128 MiB.
NCCL_TREE_CORRECTION: Mapping[Protocol, tuple[float, ...]] = MappingProxyType(
    {
        Protocol.LL: (
            1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6,
            0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0,
        ),
        Protocol.LL128: (
            1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6,
            0.6, 0.6, 0.5, 0.6, 0.6, 0.7, 0.7, 0.8, 0.9, 0.9, 1.0,
        ),
        Protocol.SIMPLE: (
            0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6,
            0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.6, 0.6, 0.7, 0.8, 0.9,
        ),
    }
)  # fmt: skip
# --- NVLS and CollNet (in-switch reductions) --------------------------------------------------
#: NCCL's ``nvlsEfficiency`` by architecture (``src/graph/tuning.cc`` of v2.23 to v2.29.7-1;
#: Hopper 0.85, Blackwell 0.74): what NCCL's tuner keeps of its NVLS graph's bandwidth
#: (:mod:`perfmodel.comm.nvls`; the all-reduce latency is ``NCCL227_NVLS_LATENCY_S`` below).
NVLS_EFFICIENCY: Mapping[str, float] = MappingProxyType({"hopper": 0.85, "blackwell": 0.74})
#: CollNet: NCCL 2.20.3 ``src/graph/tuning.cc``.
#: CollNet (IB SHARP) all-reduce latency: ``2 x (hwLat[NVLINK][CollNetDirect] 3.7 us + (ppn-1) x
#: 0.4 us arity) + hwLat[NET][CollNetDirect] 31 us`` (NCCL 2.20.3), per-GPU-per-node terms below.
NCCL_COLLNET_INTRA_LATENCY_S = 3.7 * units.us
NCCL_COLLNET_ARITY_LATENCY_S = 0.4 * units.us
NCCL_COLLNET_NET_LATENCY_S = 31.0 * units.us
#: CollNet Direct bandwidth refinements (NCCL 2.20.3): x 0.85 on Hopper and newer, and the
#: algorithm bandwidth is half the bus bandwidth (``ratio = .5``).
NCCL_COLLNET_HOPPER_FACTOR = 0.85
NCCL_COLLNET_ALGBW_RATIO = 0.5

# --- NVLS all-gather/reduce-scatter, NVLS tree, PAT: NCCL 2.27 src/graph/tuning.cc -----------
# (the release series whose tuning.cc holds ``ncclTunerConstantsDefaults`` with ``nvlsEfficiency``,
# ``perChMaxNVLSTreeBws`` and the PAT rows, e.g. v2.28.7-1; read through the code index. "2.27"
# below names that series. The ring/tree tables above stay those of 2.7/2.8, which the 2019-2021
# validation rows depend on.)
#: ``hwLat[NVLINK][NVLS|NVLSTree][Simple]`` of NCCL 2.27 (``baseLat`` 0): one NVLS pass.
NCCL227_NVLS_LATENCY_S = 25.0 * units.us
#: ``hwLat[NET][NVLSTree][Simple]``: one network step of the NVLS tree.
NCCL227_NVLS_TREE_NET_LATENCY_S = 20.9 * units.us
#: ``perChMaxNVLSTreeBws`` (GB/s per channel) by architecture, for 2 nodes and for more.
NCCL227_NVLS_TREE_MAX_BW_PER_CHANNEL_Bps: Mapping[tuple[str, bool], float] = MappingProxyType(
    {
        ("hopper", False): 57.7 * units.GB,
        ("hopper", True): 45.5 * units.GB,
        ("blackwell", False): 96.0 * units.GB,
        ("blackwell", True): 80.0 * units.GB,
    }
)
#: NVLS all-gather / reduce-scatter: the network term of NCCL's ``min(intra, inter x 0.9)``.
NCCL227_NVLS_INTER_FACTOR = 0.9
#: PAT: bus bandwidth x 0.75; latency ``baseLat 8 + log2(nodes) x interLat / 3.5 + nRanks x 2.8``
#: with ``interLat = hwLat[NET][Tree][Simple] = 14 us`` (one GPU per node: tree network latency).
NCCL227_PAT_BW_FACTOR = 0.75
NCCL227_PAT_BASE_LATENCY_S = 8.0 * units.us
NCCL227_PAT_NET_LATENCY_S = 14.0 * units.us
NCCL227_PAT_LOG_DIVISOR = 3.5
NCCL227_PAT_PER_RANK_LATENCY_S = 2.8 * units.us
#: PAT needs CUDA atomics of compute capability >= 6.0 (``ncclPatEnable``).
PAT_ARCHITECTURES = frozenset({"pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"})

#: Intel root complexes split GPU peer-to-peer traffic into 64-byte PCIe TLPs, so a P2P path
#: through an Intel CPU consumes 6/5 of its bandwidth (NCCL ``src/graph/topo.h``
#: ``INTEL_P2P_OVERHEAD(bw) = bw*6/5``, applied in ``src/graph/search.cc`` to GPU-to-GPU paths
#: that cross an Intel x86 CPU). A property of the hardware, whichever NCCL release runs.
INTEL_P2P_OVERHEAD = 6.0 / 5.0

#: Architectures on which NCCL enables LL128 by default (Volta, Ampere; later versions add Hopper+).
LL128_ARCHITECTURES = frozenset({"volta", "ampere", "hopper", "blackwell"})


@dataclass(frozen=True)
class LinkClassParams:
    """Overrides for one link class; ``None`` keeps the topology's value.

    Attributes
    ----------
    alpha_s
        Latency of one traversal of a link of this class, seconds (replaces the edge ``latency_s``).
    bandwidth_Bps
        Large-message goodput per direction of **one** link of this class, bytes/s (replaces
        ``bandwidth_Bps x efficiency / count``; bundles of ``count`` links get ``count`` times it).
    """

    alpha_s: float | None = None
    bandwidth_Bps: float | None = None

    def __post_init__(self) -> None:
        if self.alpha_s is not None and not self.alpha_s >= 0:
            raise ConfigError(
                f"alpha_s must be >= 0, got {self.alpha_s!r}", value=self.alpha_s, where="alpha_s"
            )
        if self.bandwidth_Bps is not None and not self.bandwidth_Bps > 0:
            raise ConfigError(
                f"bandwidth_Bps must be > 0, got {self.bandwidth_Bps!r}",
                value=self.bandwidth_Bps,
                where="bandwidth_Bps",
            )


@dataclass(frozen=True)
class LinkParams:
    """Per-link-class latency and bandwidth overrides (what calibration fits).

    Parameters
    ----------
    classes
        Map from a link family (``"nvlink"``, ``"pcie"``, ``"infiniband"`` ...) or a technology
        name (``"nvlink3"``, ``"ib-hdr"``) to its :class:`LinkClassParams`. Technology names win.
    gpu_reduce_bandwidth_Bps, host_reduce_bandwidth_Bps
        Optional overrides of the memory bandwidth used by the reduction term (gamma) on GPUs
        and on the host CPU (default: GPU datasheet memory bandwidth; host: see
        :data:`perfmodel.comm.closed_form.DEFAULT_HOST_MEMORY_BANDWIDTH_Bps`).
    source
        Where the numbers come from (calibration profile, file, hand).

    >>> p = LinkParams.from_dict({"nvlink": {"alpha_us": 1.0, "bandwidth_GBps": 20}})
    >>> p.classes["nvlink"].bandwidth_Bps
    20000000000.0
    >>> LinkParams.from_dict(p.to_dict()) == p
    True
    """

    classes: Mapping[str, LinkClassParams] = field(default_factory=lambda: MappingProxyType({}))
    gpu_reduce_bandwidth_Bps: float | None = None
    host_reduce_bandwidth_Bps: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "classes", MappingProxyType({str(k).lower(): v for k, v in self.classes.items()})
        )

    def __hash__(self) -> int:
        return hash(
            (
                tuple(sorted(self.classes.items())),
                self.gpu_reduce_bandwidth_Bps,
                self.host_reduce_bandwidth_Bps,
                self.source,
            )
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LinkParams):
            return NotImplemented
        return (
            dict(self.classes) == dict(other.classes)
            and self.gpu_reduce_bandwidth_Bps == other.gpu_reduce_bandwidth_Bps
            and self.host_reduce_bandwidth_Bps == other.host_reduce_bandwidth_Bps
            and self.source == other.source
        )

    def lookup(self, tech: str, family: LinkFamily | str) -> LinkClassParams | None:
        """Overrides for a link of technology ``tech`` and ``family`` (technology wins)."""
        hit = self.classes.get(str(tech).lower())
        if hit is not None:
            return hit
        fam = family.value if isinstance(family, LinkFamily) else str(family)
        return self.classes.get(fam.lower())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "link_params") -> LinkParams:
        """Build from ``{"<class>": {"alpha_us"|"alpha_s": x, "bandwidth_GBps"|"bandwidth_Bps": y}}``.

        Optional top-level keys: ``gpu_reduce_bandwidth_GBps``, ``host_reduce_bandwidth_GBps``
        and ``source``. An unknown key raises :class:`ConfigError` naming it.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping", value=data, where=where)
        classes: dict[str, LinkClassParams] = {}
        gpu_red = host_red = None
        source = ""
        for key, val in data.items():
            if key == "source":
                source = str(val)
                continue
            if key in ("gpu_reduce_bandwidth_GBps", "host_reduce_bandwidth_GBps"):
                bw = as_number(val, key, where=where, error=ConfigError) * units.GB
                if key.startswith("gpu"):
                    gpu_red = bw
                else:
                    host_red = bw
                continue
            if key in ("gpu_reduce_bandwidth_Bps", "host_reduce_bandwidth_Bps"):
                if key.startswith("gpu"):
                    gpu_red = as_number(val, key, where=where, error=ConfigError)
                else:
                    host_red = as_number(val, key, where=where, error=ConfigError)
                continue
            if key == "classes" and isinstance(val, Mapping):
                nested = cls.from_dict(val, where=f"{where}.classes")
                classes.update(nested.classes)
                continue
            if not isinstance(val, Mapping):
                raise ConfigError(
                    f"{where}.{key}: expected a table of alpha/bandwidth, got {val!r}",
                    value=val,
                    where=f"{where}.{key}",
                )
            alpha = bw = None
            for k, raw in val.items():
                v = as_number(raw, f"{key}.{k}", where=where, minimum=0.0, error=ConfigError)
                if k == "alpha_s":
                    alpha = float(v)
                elif k == "alpha_us":
                    alpha = float(v) * units.us
                elif k == "bandwidth_Bps":
                    bw = float(v)
                elif k == "bandwidth_GBps":
                    bw = float(v) * units.GB
                elif k == "bandwidth_Gbps":
                    bw = float(v) * units.Gbit
                else:
                    raise ConfigError(
                        f"{where}.{key}: unknown key {k!r} (alpha_s, alpha_us, bandwidth_Bps, "
                        "bandwidth_GBps, bandwidth_Gbps)",
                        value=k,
                        where=f"{where}.{key}",
                    )
            classes[link_class_name(str(key), where=f"{where}.{key}")] = LinkClassParams(
                alpha_s=alpha, bandwidth_Bps=bw
            )
        for name, red in (("gpu", gpu_red), ("host", host_red)):
            if red is not None and not red > 0:
                raise ConfigError(
                    f"{where}: {name}_reduce_bandwidth must be > 0, got {red}",
                    value=red,
                    where=where,
                )
        return cls(
            classes=classes,
            gpu_reduce_bandwidth_Bps=gpu_red,
            host_reduce_bandwidth_Bps=host_red,
            source=source,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in SI units (``alpha_s``, ``bandwidth_Bps``); inverse of :meth:`from_dict`."""
        out: dict[str, Any] = {}
        for name, p in sorted(self.classes.items()):
            entry: dict[str, float] = {}
            if p.alpha_s is not None:
                entry["alpha_s"] = p.alpha_s
            if p.bandwidth_Bps is not None:
                entry["bandwidth_Bps"] = p.bandwidth_Bps
            out[name] = entry
        if self.gpu_reduce_bandwidth_Bps is not None:
            out["gpu_reduce_bandwidth_Bps"] = self.gpu_reduce_bandwidth_Bps
        if self.host_reduce_bandwidth_Bps is not None:
            out["host_reduce_bandwidth_Bps"] = self.host_reduce_bandwidth_Bps
        if self.source:
            out["source"] = self.source
        return out


def link_class_name(name: str, *, where: str = "link class") -> str:
    """The key :meth:`LinkParams.lookup` matches for a link class name.

    A link family (``nvlink``, ``pcie``, ``infiniband`` ...) stays as is; a technology name or
    alias (``nvlink3``, ``edr``, ``pcie4``) becomes its canonical catalogue name. Anything else
    would never match a link of the topology, so it is refused rather than silently unused.

    >>> link_class_name("NVLink"), link_class_name("edr")
    ('nvlink', 'ib-edr')
    """
    from perfmodel.errors import UnknownHardwareError
    from perfmodel.hardware.links import get_link

    key = str(name).strip().lower()
    if key in {f.value for f in LinkFamily}:
        return key
    try:
        return get_link(key, where=where).name.lower()
    except UnknownHardwareError as exc:
        raise ConfigError(
            f"{where}: {name!r} is neither a link family ({', '.join(f.value for f in LinkFamily)}) "
            "nor a link technology of the catalogue (perfmodel hw links)",
            value=name,
            where=where,
        ) from exc
