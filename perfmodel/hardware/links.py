"""Link technologies loaded from ``links.toml`` (bandwidth per direction and latency, sourced).

Schema of one ``[[link]]`` table in ``links.toml``::

    name = "nvlink2"                   # canonical name used in topology files and on the CLI
    aliases = ["nvlink-2", "nvlink2.0"]
    family = "nvlink"                 # pcie | nvlink | nvswitch | cpu | infiniband | ethernet | host
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

import difflib
import enum
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._io import load_toml
from perfmodel.errors import ConfigError, UnknownHardwareError

_DATA = Path(__file__).with_name("links.toml")


class LinkFamily(str, enum.Enum):
    PCIE = "pcie"
    NVLINK = "nvlink"
    NVSWITCH = "nvswitch"
    CPU = "cpu"  # socket interconnects: QPI, UPI, POWER9 X-Bus, Infinity Fabric
    INFINIBAND = "infiniband"
    ETHERNET = "ethernet"
    HOST = "host"  # on-chip / memory-bus paths (e.g. CPU memory)


_ALLOWED = {
    "name",
    "aliases",
    "family",
    "bandwidth_GBps",
    "bandwidth_Gbps",
    "efficiency",
    "latency_us",
    "sources",
    "notes",
    "protocol",
}


@dataclass(frozen=True)
class LinkTech:
    """One link technology.

    Attributes
    ----------
    bandwidth_Bps
        Raw data rate per direction in bytes/s (after line coding such as 128b/130b).
    efficiency
        Fraction of ``bandwidth_Bps`` achievable by large transfers (protocol overhead).
    latency_s
        One-way latency in seconds.
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


def _parse_link(entry: dict[str, Any], where: str) -> LinkTech:
    unknown = set(entry) - _ALLOWED
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}", value=sorted(unknown), where=where
        )
    for key in ("name", "family", "latency_us", "sources"):
        if key not in entry:
            raise ConfigError(f"{where}: missing key {key!r}", value=key, where=where)
    if ("bandwidth_GBps" in entry) == ("bandwidth_Gbps" in entry):
        raise ConfigError(
            f"{where}: give exactly one of bandwidth_GBps, bandwidth_Gbps",
            value=entry.get("name"),
            where=where,
        )
    bw = (
        float(entry["bandwidth_GBps"]) * units.GB
        if "bandwidth_GBps" in entry
        else float(entry["bandwidth_Gbps"]) * units.Gbit
    )
    eff = float(entry.get("efficiency", 1.0))
    lat = float(entry["latency_us"]) * units.us
    if bw <= 0:
        raise ConfigError(f"{where}: non-positive bandwidth {bw}", value=bw, where=where)
    if not 0 < eff <= 1:
        raise ConfigError(f"{where}: efficiency {eff} outside (0, 1]", value=eff, where=where)
    if lat < 0:
        raise ConfigError(f"{where}: negative latency {lat}", value=lat, where=where)
    try:
        family = LinkFamily(entry["family"])
    except ValueError as exc:
        raise ConfigError(
            f"{where}: unknown family {entry['family']!r}", value=entry["family"], where=where
        ) from exc
    return LinkTech(
        name=str(entry["name"]),
        family=family,
        bandwidth_Bps=bw,
        efficiency=eff,
        latency_s=lat,
        aliases=tuple(str(a) for a in entry.get("aliases", ())),
        protocol=str(entry.get("protocol", "")),
        sources=MappingProxyType(dict(entry["sources"])),
        notes=str(entry.get("notes", "")),
    )


@lru_cache(maxsize=1)
def _catalogue() -> tuple[dict[str, LinkTech], dict[str, str]]:
    data = load_toml(_DATA)
    techs: dict[str, LinkTech] = {}
    index: dict[str, str] = {}
    for i, entry in enumerate(data.get("link", [])):
        where = f"{_DATA.name}: link[{i}] ({entry.get('name', '?')})"
        tech = _parse_link(entry, where)
        if tech.name in techs:
            raise ConfigError(
                f"{where}: duplicate link name {tech.name!r}", value=tech.name, where=where
            )
        techs[tech.name] = tech
        for key in (tech.name, *tech.aliases):
            index[key.lower()] = tech.name
    return techs, index


def list_links() -> list[LinkTech]:
    """All link technologies in the catalogue, in file order."""
    return list(_catalogue()[0].values())


def get_link(name: str | LinkTech, *, where: str = "link") -> LinkTech:
    """Look up a link technology by name or alias (case-insensitive)."""
    if isinstance(name, LinkTech):
        return name
    techs, index = _catalogue()
    key = str(name).lower()
    if key in index:
        return techs[index[key]]
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(techs[index[c]].name for c in close)}?" if close else ""
    raise UnknownHardwareError(
        f"unknown link technology {name!r} ({where}){hint}", value=name, where=where
    )
