"""Host CPU specifications loaded from ``cpus.toml`` (one socket per entry, each number sourced).

CPU numbers feed the parts of training that run on the host: Keras ``multi_gpu_model`` merging
gradients on the CPU, parameter servers, host-staged copies and data loading.

Schema of one ``[[cpu]]`` table in ``cpus.toml``::

    name = "xeon-e5-2620-v4"           # canonical name (topology files, CLI)
    aliases = ["e5-2620-v4"]           # case-insensitive alternative names
    vendor = "Intel"
    architecture = "Broadwell-EP"
    cores = 8                          # physical cores per socket
    threads_per_core = 2               # optional, default 1
    base_clock_GHz = 2.1
    boost_clock_GHz = 3.0              # optional
    fp32_flop_per_cycle = 32           # per core: SIMD lanes x 2 (FMA) x FMA units
    memory_type = "DDR4-2133"          # optional, informative
    memory_channels = 4
    memory_bandwidth_GBps = 68.3       # theoretical peak per socket, decimal GB/s
    pcie_lanes = 40
    pcie_gen = 3
    socket_link = "qpi-8.0"            # a link technology in links.toml
    socket_links = 2                   # links leaving the socket
    tdp_W = 85                         # optional
    notes = "..."
    [cpu.sources]                      # all three required
    compute = "..."                    # cores, clocks, FLOP/cycle
    memory = "..."                     # channels, bandwidth
    io = "..."                         # PCIe, socket links, TDP

The peak FP32 rate is computed, never typed in:
``peak_fp32_flops = cores * base_clock_hz * fp32_flop_per_cycle``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel.hardware._catalogue import (
    Catalogue,
    aliases,
    check_keys,
    integer,
    number,
    require_sources,
    source_table,
)
from perfmodel.hardware.links import LinkTech, get_link

_DATA = Path(__file__).with_name("cpus.toml")

_REQUIRED = (
    "name",
    "vendor",
    "architecture",
    "cores",
    "base_clock_GHz",
    "fp32_flop_per_cycle",
    "memory_channels",
    "memory_bandwidth_GBps",
    "pcie_lanes",
    "pcie_gen",
    "socket_link",
    "socket_links",
    "sources",
)
_ALLOWED = set(_REQUIRED) | {
    "aliases",
    "threads_per_core",
    "boost_clock_GHz",
    "memory_type",
    "tdp_W",
    "notes",
}

#: Every ``[cpu.sources]`` table must name these.
SOURCE_KEYS = ("compute", "memory", "io")


@dataclass(frozen=True)
class CPUSpec:
    """Datasheet description of ONE socket of a host CPU model.

    Attributes
    ----------
    cores
        Physical cores per socket.
    sockets
        Always 1: a spec describes one socket; a topology places as many as the server has.
    base_clock_hz, boost_clock_hz
        Base and maximum single-core turbo clock in Hz (boost may be unknown: ``None``).
    fp32_flop_per_cycle
        FP32 FLOP per cycle per core (SIMD lanes x 2 for FMA x FMA units).
    peak_fp32_flops
        Peak FP32 FLOP/s per socket at the base clock:
        ``cores * base_clock_hz * fp32_flop_per_cycle``.
    memory_channels
        DRAM channels per socket.
    memory_bandwidth_Bps
        Theoretical peak DRAM bandwidth per socket in bytes/s (channels x MT/s x 8 bytes).
    pcie_lanes, pcie_gen
        PCIe lanes leaving one socket and their generation.
    socket_link
        Canonical name of the socket-to-socket link technology (``links.toml``).
    socket_links
        Number of such links leaving the socket.
    sources
        ``compute``, ``memory`` and ``io``, each a citable source.

    Examples
    --------
    >>> from perfmodel.hardware import get_cpu
    >>> cpu = get_cpu("e5-2620-v4")  # 8 cores x 2.1 GHz x 32 FLOP/cycle
    >>> cpu.peak_fp32_flops / 1e9, cpu.socket_link
    (537.6, 'qpi-8.0')
    """

    name: str
    vendor: str
    architecture: str
    cores: int
    base_clock_hz: float
    fp32_flop_per_cycle: int
    peak_fp32_flops: float
    memory_channels: int
    memory_bandwidth_Bps: float
    pcie_lanes: int
    pcie_gen: int
    socket_link: str
    socket_links: int
    sockets: int = 1
    threads_per_core: int = 1
    boost_clock_hz: float | None = None
    memory_type: str = ""
    tdp_w: float | None = None
    aliases: tuple[str, ...] = ()
    sources: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: str = ""

    @property
    def socket_interconnect(self) -> LinkTech:
        """The :class:`LinkTech` of one socket-to-socket link."""
        return get_link(self.socket_link, where=f"cpu {self.name}: socket_link")

    @property
    def socket_interconnect_bandwidth_Bps(self) -> float:
        """Raw bandwidth per direction of all ``socket_links`` together, bytes/s.

        In a two-socket server all links usually join the two sockets; a board may wire fewer
        (the topology file's CPU-CPU edge ``count`` is what the model uses).
        """
        return self.socket_interconnect.bandwidth_Bps * self.socket_links

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in SI units."""
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "vendor": self.vendor,
            "architecture": self.architecture,
            "cores": self.cores,
            "sockets": self.sockets,
            "threads_per_core": self.threads_per_core,
            "base_clock_hz": self.base_clock_hz,
            "boost_clock_hz": self.boost_clock_hz,
            "fp32_flop_per_cycle": self.fp32_flop_per_cycle,
            "peak_fp32_flops": self.peak_fp32_flops,
            "memory_type": self.memory_type,
            "memory_channels": self.memory_channels,
            "memory_bandwidth_Bps": self.memory_bandwidth_Bps,
            "pcie_lanes": self.pcie_lanes,
            "pcie_gen": self.pcie_gen,
            "socket_link": self.socket_link,
            "socket_links": self.socket_links,
            "tdp_w": self.tdp_w,
            "sources": dict(self.sources),
            "notes": self.notes,
        }


def _parse_cpu(entry: dict[str, Any], where: str) -> CPUSpec:
    """Validate one ``[[cpu]]`` table and convert it to SI units.

    Raises
    ------
    ConfigError
        On an unknown or missing key, a non-positive or non-numeric value, an unknown
        ``socket_link`` or a missing source; the message names ``where`` and the bad value.
    """
    check_keys(entry, _REQUIRED, _ALLOWED, where)
    sources = source_table(entry, where)
    require_sources(sources, SOURCE_KEYS, where)
    link = get_link(str(entry["socket_link"]), where=f"{where}: socket_link")
    names = aliases(entry, where)
    cores = integer(entry, "cores", where)
    base_hz = number(entry, "base_clock_GHz", where) * units.GHz
    fpc = integer(entry, "fp32_flop_per_cycle", where)
    return CPUSpec(
        name=str(entry["name"]),
        vendor=str(entry["vendor"]),
        architecture=str(entry["architecture"]),
        cores=cores,
        base_clock_hz=base_hz,
        fp32_flop_per_cycle=fpc,
        peak_fp32_flops=cores * base_hz * fpc,
        memory_channels=integer(entry, "memory_channels", where),
        memory_bandwidth_Bps=number(entry, "memory_bandwidth_GBps", where) * units.GB,
        pcie_lanes=integer(entry, "pcie_lanes", where),
        pcie_gen=integer(entry, "pcie_gen", where),
        socket_link=link.name,
        socket_links=integer(entry, "socket_links", where),
        threads_per_core=integer(entry, "threads_per_core", where)
        if "threads_per_core" in entry
        else 1,
        boost_clock_hz=number(entry, "boost_clock_GHz", where) * units.GHz
        if "boost_clock_GHz" in entry
        else None,
        memory_type=str(entry.get("memory_type", "")),
        tdp_w=number(entry, "tdp_W", where) if "tdp_W" in entry else None,
        aliases=names,
        sources=sources,
        notes=str(entry.get("notes", "")),
    )


_CPUS: Catalogue[CPUSpec] = Catalogue(
    table="cpu",
    kind="CPU",
    unknown="CPU model",
    command="cpus",
    spec_type=CPUSpec,
    parse=_parse_cpu,
    data=_DATA,
)

#: ``read_cpus(path) -> {canonical name: CPUSpec}``: a CPU catalogue file of the schema above
#: (the shipped one or a user's), its errors naming the file, the entry and the bad value.
read_cpus = _CPUS.read
#: ``list_cpus() -> list[CPUSpec]``: every CPU model of the shipped catalogue, in file order.
list_cpus = _CPUS.specs
#: ``get_cpu(name, where="cpu") -> CPUSpec``: the CPU model named ``name`` (canonical name or
#: alias, case-insensitive; a CPUSpec as is), an UnknownHardwareError naming ``where`` and the
#: closest names otherwise.
get_cpu = _CPUS.get
