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
import math
import os
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
    """Kind of link; topology edges carry it and calibration fits per family."""

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
        ``"tcp"`` or ``"roce"`` for Ethernet entries, else empty.
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


def _number(entry: dict[str, Any], key: str, where: str) -> float:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: {key} = {value!r} is not a number", value=value, where=where)
    return float(value)


def _parse_link(entry: dict[str, Any], where: str) -> LinkTech:
    """Validate one ``[[link]]`` table and convert it to SI units.

    Raises
    ------
    ConfigError
        On an unknown or missing key, a non-positive bandwidth, an efficiency outside (0, 1], a
        negative latency, an unknown family or a missing source; the message names ``where`` and
        the bad value.
    """
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
        _number(entry, "bandwidth_GBps", where) * units.GB
        if "bandwidth_GBps" in entry
        else _number(entry, "bandwidth_Gbps", where) * units.Gbit
    )
    eff = _number(entry, "efficiency", where) if "efficiency" in entry else 1.0
    lat = _number(entry, "latency_us", where) * units.us
    if bw <= 0:
        raise ConfigError(f"{where}: non-positive bandwidth {bw:g} B/s", value=bw, where=where)
    if not 0 < eff <= 1:
        raise ConfigError(f"{where}: efficiency {eff} outside (0, 1]", value=eff, where=where)
    if lat < 0:
        raise ConfigError(f"{where}: negative latency {lat:g} s", value=lat, where=where)
    try:
        family = LinkFamily(entry["family"])
    except ValueError as exc:
        raise ConfigError(
            f"{where}: unknown family {entry['family']!r}; expected one of "
            f"{', '.join(f.value for f in LinkFamily)}",
            value=entry["family"],
            where=where,
        ) from exc
    sources = entry["sources"]
    if not isinstance(sources, dict):
        raise ConfigError(f"{where}: sources must be a table", value=sources, where=where)
    for key in SOURCE_KEYS:
        if not str(sources.get(key, "")).strip():
            raise ConfigError(
                f"{where}: no source for {key}; add sources.{key}", value=key, where=where
            )
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError(f"{where}: aliases must be a list of strings", value=aliases, where=where)
    return LinkTech(
        name=str(entry["name"]),
        family=family,
        bandwidth_Bps=bw,
        efficiency=eff,
        latency_s=lat,
        aliases=tuple(aliases),
        protocol=str(entry.get("protocol", "")),
        sources=MappingProxyType({str(k): str(v) for k, v in sources.items()}),
        notes=str(entry.get("notes", "")),
    )


def read_links(path: str | os.PathLike[str]) -> dict[str, LinkTech]:
    """Parse a link catalogue file (schema above) into ``{canonical name: LinkTech}``.

    Raises
    ------
    ConfigError
        Naming the file, the entry and the bad value, a duplicate name, or an alias that already
        names another link.
    """
    p = Path(path)
    data = load_toml(p)
    unknown = set(data) - {"link"}
    if unknown:
        raise ConfigError(
            f"{p}: unknown top-level key(s) {sorted(unknown)}; expected [[link]] tables",
            value=sorted(unknown),
            where=str(p),
        )
    entries = data.get("link", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{p}: 'link' must be an array of tables", value=entries, where=str(p))
    techs: dict[str, LinkTech] = {}
    index: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{p.name}: link[{i}] ({entry.get('name', '?')})"
        tech = _parse_link(entry, where)
        if tech.name in techs:
            raise ConfigError(
                f"{where}: duplicate link name {tech.name!r}", value=tech.name, where=where
            )
        techs[tech.name] = tech
        for key in (tech.name, *tech.aliases):
            k = key.lower()
            if k in index and index[k] != tech.name:
                raise ConfigError(
                    f"{where}: alias {key!r} already names {index[k]}", value=key, where=where
                )
            index[k] = tech.name
    return techs


@lru_cache(maxsize=1)
def _catalogue() -> tuple[dict[str, LinkTech], dict[str, str]]:
    techs = read_links(_DATA)
    index = {key.lower(): t.name for t in techs.values() for key in (t.name, *t.aliases)}
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
        f"unknown link technology {name!r} ({where}){hint} (see `perfmodel hw links`)",
        value=name,
        where=where,
    )
