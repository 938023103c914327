"""Link technologies loaded from ``links.toml`` (bandwidth per direction and latency, sourced).

Schema of one ``[[link]]`` table in ``links.toml``::

    name = "nvlink2"                   # canonical name used in topology files and on the CLI
    aliases = ["nvlink-2", "nvlink2.0"]
    family = "nvlink"                 # pcie | nvlink | nvswitch | xgmi | cpu | infiniband | ethernet | host
    bandwidth_GBps = 25.0              # raw signalling rate per direction, decimal GB/s (per link/port)
    bandwidth_Gbps = 100               # alternatively in Gbit/s (network links); exactly one of the two
    efficiency = 0.9                   # achievable fraction of the raw rate for large transfers
    latency_us = 0.7                   # one-way latency of a small message across this link
    [link.sources]
    bandwidth = "NVIDIA Tesla V100 whitepaper (2017), NVLink section"
    efficiency = "..."
    latency = "..."

``efficiency`` folds in protocol overhead (PCIe TLP/DLLP headers, Ethernet/IP/TCP framing,
InfiniBand headers) so that ``bandwidth_Bps * efficiency`` is the large-message goodput that a
well-implemented transfer sees; a calibration profile replaces it by measured values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._enum import parse_enum
from perfmodel.errors import ConfigError
from perfmodel.hardware._catalogue import (
    Catalogue,
    aliases,
    check_keys,
    number,
    require_sources,
    source_table,
)

_DATA = Path(__file__).with_name("links.toml")


class LinkFamily(str, enum.Enum):
    """Kind of link; topology edges carry it and calibration fits per family."""

    PCIE = "pcie"
    NVLINK = "nvlink"
    NVSWITCH = "nvswitch"
    XGMI = "xgmi"  # AMD Instinct GPU-to-GPU Infinity Fabric links (RCCL's XGMI, its NVLink class)
    CPU = "cpu"  # socket interconnects: QPI, UPI, POWER9 X-Bus, Infinity Fabric
    INFINIBAND = "infiniband"
    ETHERNET = "ethernet"
    HOST = "host"  # on-chip / memory-bus paths (e.g. CPU memory)


_REQUIRED = ("name", "family", "latency_us", "sources")
_ALLOWED = {
    *_REQUIRED,
    "aliases",
    "bandwidth_GBps",
    "bandwidth_Gbps",
    "efficiency",
    "notes",
    "protocol",
}


@dataclass(frozen=True)
class LinkTech:
    """One link technology (per single link or switch port, per direction).

    Attributes
    ----------
    name, aliases
        Canonical catalogue name and case-insensitive alternatives.
    family
        :class:`LinkFamily` (topology edges carry it; calibration fits per family).
    bandwidth_Bps
        Raw data rate per direction in bytes/s (after line coding such as 128b/130b).
    efficiency
        Fraction of ``bandwidth_Bps`` achievable by large transfers (protocol overhead).
    latency_s
        One-way latency of a small message in seconds.
    protocol
        ``"tcp"`` or ``"roce"`` for Ethernet entries (``"efa"``, ``"tcpx"``, ``"tcpxo"`` for the
        cloud transports), else empty.
    sources
        ``bandwidth``, ``efficiency`` and ``latency``, each a citable source or reasoning.

    Examples
    --------
    >>> from perfmodel.hardware import get_link
    >>> edr = get_link("edr")
    >>> edr.name, edr.bandwidth_Bps / 1e9, round(edr.effective_bandwidth_Bps / 1e9, 2)
    ('ib-edr', 12.5, 11.5)
    """

    name: str
    family: LinkFamily
    bandwidth_Bps: float
    efficiency: float
    latency_s: float
    aliases: tuple[str, ...] = ()
    protocol: str = ""
    sources: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: str = ""

    @property
    def effective_bandwidth_Bps(self) -> float:
        """Large-message goodput per direction: ``bandwidth_Bps * efficiency``."""
        return self.bandwidth_Bps * self.efficiency

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in SI units."""
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "family": self.family.value,
            "protocol": self.protocol,
            "bandwidth_Bps": self.bandwidth_Bps,
            "efficiency": self.efficiency,
            "effective_bandwidth_Bps": self.effective_bandwidth_Bps,
            "latency_s": self.latency_s,
            "sources": dict(self.sources),
            "notes": self.notes,
        }


#: Every ``[link.sources]`` table must name these three.
SOURCE_KEYS = ("bandwidth", "efficiency", "latency")


def check_link_numbers(
    bandwidth_Bps: float,
    efficiency: float,
    latency_s: float,
    *,
    where: str,
    error: type[ConfigError] = ConfigError,
) -> None:
    """The rule of a link's numbers, for a catalogue entry and a topology file's link alike:
    bandwidth ``> 0`` B/s, efficiency in ``(0, 1]``, latency ``>= 0`` s.

    >>> check_link_numbers(25e9, 1.5, 1e-6, where="link[0]")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: link[0]: efficiency 1.5 outside (0, 1]

    Raises
    ------
    ConfigError
        (or ``error``) On the first number that breaks the rule, naming ``where`` and the value.
    """
    if not bandwidth_Bps > 0:
        raise error(
            f"{where}: non-positive bandwidth {bandwidth_Bps:g} B/s",
            value=bandwidth_Bps,
            where=where,
        )
    if not 0 < efficiency <= 1:
        raise error(
            f"{where}: efficiency {efficiency} outside (0, 1]", value=efficiency, where=where
        )
    if not latency_s >= 0:
        raise error(f"{where}: negative latency {latency_s:g} s", value=latency_s, where=where)


def _parse_link(entry: dict[str, Any], where: str) -> LinkTech:
    """Validate one ``[[link]]`` table and convert it to SI units.

    Raises
    ------
    ConfigError
        On an unknown or missing key, a non-positive bandwidth, an efficiency outside (0, 1], a
        negative latency, an unknown family or a missing source; the message names ``where`` and
        the bad value.
    """
    check_keys(entry, _REQUIRED, _ALLOWED, where)
    if ("bandwidth_GBps" in entry) == ("bandwidth_Gbps" in entry):
        raise ConfigError(
            f"{where}: give exactly one of bandwidth_GBps, bandwidth_Gbps",
            value=entry.get("name"),
            where=where,
        )
    bw = (
        number(entry, "bandwidth_GBps", where, sign=None) * units.GB
        if "bandwidth_GBps" in entry
        else number(entry, "bandwidth_Gbps", where, sign=None) * units.Gbit
    )
    eff = number(entry, "efficiency", where, sign=None) if "efficiency" in entry else 1.0
    lat = number(entry, "latency_us", where, sign=None) * units.us
    check_link_numbers(bw, eff, lat, where=where)
    family = parse_enum(
        LinkFamily,
        entry["family"],
        where=where,
        normalize=lambda s: s,
        template="{where}: unknown family {text!r}; expected {expected}",
    )
    sources = source_table(entry, where)
    require_sources(sources, SOURCE_KEYS, where)
    names = aliases(entry, where)
    return LinkTech(
        name=str(entry["name"]),
        family=family,
        bandwidth_Bps=bw,
        efficiency=eff,
        latency_s=lat,
        aliases=names,
        protocol=str(entry.get("protocol", "")),
        sources=sources,
        notes=str(entry.get("notes", "")),
    )


_LINKS: Catalogue[LinkTech] = Catalogue(
    table="link",
    kind="link",
    unknown="link technology",
    command="links",
    spec_type=LinkTech,
    parse=_parse_link,
    data=_DATA,
)

#: ``read_links(path) -> {canonical name: LinkTech}``: a link catalogue file of the schema above
#: (the shipped one or a user's), its errors naming the file, the entry and the bad value.
read_links = _LINKS.read
#: ``list_links() -> list[LinkTech]``: every link technology of the shipped catalogue, in file order.
list_links = _LINKS.specs
#: ``get_link(name, where="link") -> LinkTech``: the link technology named ``name`` (canonical name or
#: alias, case-insensitive; a LinkTech as is), an UnknownHardwareError naming ``where`` and the
#: closest names otherwise.
get_link = _LINKS.get


def find_link(name: str) -> LinkTech | None:
    """The link technology named ``name`` (canonical name or alias, case-insensitive), ``None``
    when the catalogue has none (:func:`get_link` without its error)."""
    return _LINKS.find(name)
