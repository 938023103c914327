"""Reading topology files (TOML) into server descriptions, and the file format.

A topology file describes **one server** (node) and the default fabric that joins several of
them. Format (all keys documented; an unknown key is an error)::

    [system]
    name = "dgx1-v100"                      # must equal the file name without .toml
    description = "..."
    sources = ["whitepaper, figure ..."]    # where the wiring comes from
    gpu = "V100-SXM2-16GB"                  # GPU model of every gpu node that does not name one
    gpu_selectable = false                  # true: --gpu may replace the model
    assumptions = ["..."]                   # optional: what an importer could not know and
                                            # assumed (`perfmodel topo import -o`); shown by
                                            # `topo show` and noted by `predict`
    nvlink_domain = 72                      # optional: GPUs one NVLink domain joins (checked
                                            # against the links; NVLink, NVSwitch or Infinity
                                            # Fabric); a rack-scale server is one domain
    [system.fabric]                         # default fabric for --nodes N > 1
    network = "ib-edr"
    topology = "fat-tree"                   # single-switch | fat-tree | rail
    oversubscription = 1.0
    leaf_radix = 18
    [system.cloud]                          # optional: a cloud instance type (CloudSpec)
    provider = "aws"
    instance = "p5.48xlarge"
    gpus_per_instance = 8
    transport = "EFA v2 (SRD)"
    price_per_gpu_hour = 12.29              # optional, with price_currency, price_date
    price_currency = "USD"                  # (YYYY-MM-DD), price_source and region
    price_date = "2023-07-27"
    price_source = "..."
    price_stale = true                      # optional: the source is known to be out of date
    price_high_by = 1.82                    # optional: the most it may exceed today's price
    region = "us-east-1"
    [[system.reference]]                    # optional, repeatable: a published measurement
    op = "allreduce"                        # that `perfmodel comm` states its prediction
    gpus = 72                               # against (never an input)
    nodes = 1
    size_bytes = 8589934592
    busbw_GBps = 834.57
    source = "..."
    nccl_env = { NCCL_NVLS_ENABLE = "0" }   # optional: NCCL variables the source states

    [[node]]                                # one per device in the server
    id = "gpu0"
    kind = "gpu"                            # gpu | cpu | pcie_switch | nvswitch | nic
    model = "V100-SXM2-16GB"                # optional for gpu (defaults to system.gpu)
    label = "..."                           # optional
    tray = 3                                # optional: compute tray of a rack-scale server
    p2p_denied = ["gpu4"]                   # optional, GPUs: peers refused peer-to-peer
                                            # (nvidia-smi topo -p2p r), through host memory

    [[link]]
    a = "gpu0"
    b = "gpu1"
    tech = "nvlink2"                        # catalogue link technology
    count = 2                               # bundled links (default 1)
    # or explicit numbers instead of / on top of tech (per bundled link):
    # bandwidth_GBps = 10.0   latency_us = 1.0   efficiency = 0.9
    # family = "cpu"          # family of an explicit link without tech (default "pcie")

NIC nodes are the server's fabric ports: a cluster builder connects each NIC to the fabric
with the fabric's ``network`` technology.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Any

from perfmodel import units
from perfmodel._enum import parse_enum
from perfmodel._schema import as_int, as_list, as_number, describe
from perfmodel.errors import ConfigError, PerfModelError, TopologyError, UnknownHardwareError
from perfmodel.hardware.gpus import get_gpu
from perfmodel.hardware.links import LinkFamily, check_link_numbers, get_link
from perfmodel.ops import CollectiveOp
from perfmodel.topology.model import CloudSpec, FabricSpec, ReferenceMeasurement
from perfmodel.topology.schema import NodeKind
from perfmodel.topology.unionfind import UnionFind

_SYSTEM_KEYS = {
    "name",
    "description",
    "sources",
    "gpu",
    "gpu_selectable",
    "fabric",
    "notes",
    "p2p",
    "nvlink_domain",
    "cloud",
    "reference",
    "assumptions",
}
_REFERENCE_KEYS = {"op", "gpus", "nodes", "size_bytes", "busbw_GBps", "source", "nccl_env"}


def _field_names(spec: type) -> set[str]:
    """The keys of a file table that spells a dataclass field for field (``[system.cloud]``,
    ``[system.fabric]``, ``[[node]]``): the dataclass's field names, one list for both."""
    return {f.name for f in fields(spec)}


_CLOUD_KEYS = _field_names(CloudSpec)
_FABRIC_KEYS = _field_names(FabricSpec)
_LINK_KEYS = {
    "a",
    "b",
    "tech",
    "count",
    "bandwidth_GBps",
    "bandwidth_Gbps",
    "latency_us",
    "efficiency",
    "family",
    "label",
}
FABRIC_TOPOLOGIES = ("single-switch", "fat-tree", "rail")


@dataclass(frozen=True)
class NodeSpec:
    id: str
    kind: NodeKind
    model: str = ""
    label: str = ""
    rail: int | None = None
    p2p: bool | None = None
    tray: int | None = None
    p2p_denied: tuple[str, ...] = ()


_NODE_KEYS = _field_names(NodeSpec)


@dataclass(frozen=True)
class LinkSpec:
    a: str
    b: str
    tech: str
    family: LinkFamily
    count: int
    bandwidth_Bps: float
    efficiency: float
    latency_s: float


def link_from_tech(a: str, b: str, tech_name: str, count: int = 1) -> LinkSpec:
    """A link of ``count`` bundled units of catalogue technology ``tech_name`` between ``a`` and
    ``b``: raw bandwidth ``count x`` the technology's (bytes/s per direction), its efficiency and
    latency."""
    tech = get_link(tech_name)
    return LinkSpec(
        a=a,
        b=b,
        tech=tech.name,
        family=tech.family,
        count=count,
        bandwidth_Bps=tech.bandwidth_Bps * count,
        efficiency=tech.efficiency,
        latency_s=tech.latency_s,
    )


@dataclass(frozen=True)
class ServerDescription:
    """One server (machine) as read from a topology file, before replication into a cluster."""

    name: str
    nodes: tuple[NodeSpec, ...]
    links: tuple[LinkSpec, ...]
    fabric: FabricSpec | None
    description: str = ""
    sources: tuple[str, ...] = ()
    gpu: str = ""
    gpu_selectable: bool = False
    source: str = "<memory>"
    nvlink_domain: int | None = None
    cloud: CloudSpec | None = None
    references: tuple[ReferenceMeasurement, ...] = ()
    assumptions: tuple[str, ...] = ()
    """What the file's importer could not know and assumed (``[system] assumptions``)."""

    @property
    def gpu_ids(self) -> list[str]:
        return [n.id for n in self.nodes if n.kind is NodeKind.GPU]


#: Link families that join GPUs into one NVLink domain: NVLink, NVSwitch ports and AMD's
#: Infinity Fabric GPU links (the scale-up fabric of each vendor).
SCALE_UP_FAMILIES = frozenset({LinkFamily.NVLINK, LinkFamily.NVSWITCH, LinkFamily.XGMI})


def nvlink_domains(
    nodes: tuple[NodeSpec, ...], links: tuple[LinkSpec, ...]
) -> list[tuple[str, ...]]:
    """The server's NVLink domains: its GPUs grouped by the scale-up links
    (:data:`SCALE_UP_FAMILIES`) that join them, directly or through NVSwitch nodes, largest
    first (a GPU without such links is a domain of one).

    >>> n = tuple(NodeSpec(f"gpu{i}", NodeKind.GPU) for i in range(3))
    >>> l = (link_from_tech("gpu0", "gpu1", "nvlink4"),)
    >>> nvlink_domains(n, l)
    [('gpu0', 'gpu1'), ('gpu2',)]
    """
    gpus = [n.id for n in nodes if n.kind is NodeKind.GPU]
    members = [n.id for n in nodes if n.kind in (NodeKind.GPU, NodeKind.NVSWITCH)]
    edges = ((lk.a, lk.b) for lk in links if lk.family in SCALE_UP_FAMILIES)
    return joined_groups(gpus, members, edges)


def joined_groups(
    gpus: Iterable[str], members: Iterable[str], edges: Iterable[tuple[str, str]]
) -> list[tuple[str, ...]]:
    """``gpus`` (in their order) grouped by the connected components of ``edges`` among
    ``members`` (GPUs and the switches between them; an edge with an end outside is ignored,
    and a GPU outside ``members`` is left out), largest group first (:class:`UnionFind`), for both
    :func:`nvlink_domains` (a system file's nodes and links) and
    :func:`perfmodel.topology.analysis.nvlink_domains` (a built topology's graph).

    >>> joined_groups(["g0", "g1", "g2"], ["g0", "g1", "g2", "sw"], [("g2", "sw"), ("sw", "g0")])
    [('g0', 'g2'), ('g1',)]
    """
    uf = UnionFind(members)
    for a, b in edges:
        if a in uf and b in uf:
            uf.union(a, b)
    groups = uf.groups(n for n in gpus if n in uf)
    return sorted((tuple(g) for g in groups), key=lambda g: -len(g))


def _check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(table, dict):
        raise TopologyError(
            f"{where}: expected a table, got {describe(table)}", value=table, where=where
        )
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise TopologyError(
            f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}",
            value=unknown,
            where=where,
        )


# A topology file's field checks: the shared ones of :mod:`perfmodel._schema`, their errors
# :class:`~perfmodel.errors.TopologyError` (one rule, stated here once).


def _int(value: Any, path: str, *, where: str, minimum: int | None = None) -> int:
    """:func:`~perfmodel._schema.as_int` raising :class:`~perfmodel.errors.TopologyError`."""
    return as_int(value, path, where=where, minimum=minimum, error=TopologyError)


def _number(value: Any, path: str, *, where: str, **checks: Any) -> float:
    """:func:`~perfmodel._schema.as_number` (its ``minimum`` / ``positive`` ``checks``) raising
    :class:`~perfmodel.errors.TopologyError`."""
    return as_number(value, path, where=where, error=TopologyError, **checks)


def _list(value: Any, path: str, *, where: str) -> list[Any]:
    """:func:`~perfmodel._schema.as_list` raising :class:`~perfmodel.errors.TopologyError`."""
    return as_list(value, path, where=where, error=TopologyError)


#: The smallest fat-tree oversubscription (leaf downlinks : uplinks) a fabric may have: 1 is
#: non-blocking; below 1 would mean more uplinks than ports feed them, which the builders do not
#: model. One rule for topology files, ``--oversubscription`` and scenario files.
MIN_OVERSUBSCRIPTION = 1.0


def parse_fabric(table: dict[str, Any], where: str) -> FabricSpec:
    _check_keys(table, _FABRIC_KEYS, where)
    if "network" not in table:
        raise TopologyError(f"{where}: missing key 'network'", value=None, where=where)
    get_link(table["network"], where=where)
    topology = str(table.get("topology", "fat-tree"))
    if topology not in FABRIC_TOPOLOGIES:
        raise TopologyError(
            f"{where}: unknown fabric topology {topology!r}; expected one of {FABRIC_TOPOLOGIES}",
            value=topology,
            where=where,
        )
    over = _number(table.get("oversubscription", 1.0), "fabric.oversubscription", where=where)
    if over < MIN_OVERSUBSCRIPTION:
        raise TopologyError(
            f"{where}: oversubscription {over} must be >= 1", value=over, where=where
        )
    radix = _int(table.get("leaf_radix", 32), "fabric.leaf_radix", where=where)
    if radix < 1:
        raise TopologyError(f"{where}: leaf_radix {radix} must be >= 1", value=radix, where=where)
    return FabricSpec(
        network=str(table["network"]),
        topology=topology,
        nics_per_node=_int(
            table.get("nics_per_node", 1), "fabric.nics_per_node", where=where, minimum=1
        ),
        oversubscription=over,
        leaf_radix=radix,
        sharp=bool(_flag(table, "sharp", where)),
    )


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_cloud(table: dict[str, Any], where: str) -> CloudSpec:
    """The ``[system.cloud]`` table as a :class:`CloudSpec`.

    Raises
    ------
    TopologyError
        On an unknown or missing key, a non-positive GPU count, a price that is not a positive
        number (a negative price: the value and the table named), or a price without its
        date (``YYYY-MM-DD``) and source.
    """
    _check_keys(table, _CLOUD_KEYS, where)
    for key in ("provider", "instance", "transport"):
        if not str(table.get(key, "")).strip():
            raise TopologyError(f"{where}: missing key {key!r}", value=None, where=where)
    gpus = _int(
        table.get("gpus_per_instance", 8), "cloud.gpus_per_instance", where=where, minimum=1
    )
    price: float | None = None
    date = str(table.get("price_date", ""))
    if "price_per_gpu_hour" in table:
        price = _number(
            table["price_per_gpu_hour"], "price_per_gpu_hour", where=where, positive=True
        )
        if not _DATE.match(date):
            raise TopologyError(
                f'{where}: a price needs price_date = "YYYY-MM-DD" (the date of its source), '
                f"got {date!r}",
                value=date,
                where=where,
            )
        if not str(table.get("price_source", "")).strip():
            raise TopologyError(
                f"{where}: a price needs price_source (where it was read)", value=None, where=where
            )
    stale = _flag(table, "price_stale", where) is True
    high_by = table.get("price_high_by")
    if high_by is not None:
        high_by = _number(high_by, "price_high_by", where=where, minimum=1)
    if high_by is not None and not (stale and price is not None):
        raise TopologyError(
            f"{where}: price_high_by needs a price and price_stale = true",
            value=high_by,
            where=where,
        )
    return CloudSpec(
        provider=str(table["provider"]),
        instance=str(table["instance"]),
        gpus_per_instance=gpus,
        transport=str(table["transport"]),
        price_per_gpu_hour=price,
        price_currency=str(table.get("price_currency", "")),
        price_date=date,
        price_source=str(table.get("price_source", "")),
        region=str(table.get("region", "")),
        price_stale=stale,
        price_high_by=high_by,
    )


def parse_references(items: Any, where: str) -> tuple[ReferenceMeasurement, ...]:
    """The ``[[system.reference]]`` tables as :class:`ReferenceMeasurement` values.

    Raises
    ------
    TopologyError
        On an unknown or missing key, an unknown collective, a non-positive count, size or
        bandwidth, an empty source, or an ``nccl_env`` that is not a table of ``NCCL_*`` names
        to strings.
    """
    out = []
    for i, table in enumerate(_list(items, "system.reference", where=where)):
        w = f"{where}[{i}]"
        _check_keys(table, _REFERENCE_KEYS, w)
        for key in ("op", "gpus", "size_bytes", "busbw_GBps", "source"):
            if key not in table:
                raise TopologyError(f"{w}: missing key {key!r}", value=None, where=w)
        try:
            op = CollectiveOp.parse(str(table["op"]), where=f"{w}.op")
        except PerfModelError as exc:
            raise TopologyError(str(exc), value=table["op"], where=w) from exc
        bw = _number(table["busbw_GBps"], "busbw_GBps", where=w)
        if not bw > 0:
            raise TopologyError(f"{w}: busbw_GBps {bw} must be > 0", value=bw, where=w)
        if not str(table["source"]).strip():
            raise TopologyError(f"{w}: empty source", value=None, where=w)
        out.append(
            ReferenceMeasurement(
                op=op,
                gpus=_int(table["gpus"], "gpus", where=w, minimum=1),
                nodes=_int(table.get("nodes", 1), "nodes", where=w, minimum=1),
                message_bytes=_int(table["size_bytes"], "size_bytes", where=w, minimum=1),
                busbw_Bps=bw * units.GB,
                source=str(table["source"]),
                nccl_env=_nccl_env(table.get("nccl_env", {}), f"{w}.nccl_env"),
            )
        )
    return tuple(out)


def _nccl_env(table: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A reference's ``nccl_env`` table as sorted ``(name, value)`` pairs of strings, each
    value checked by NCCL's rules when the file is loaded
    (:meth:`perfmodel.comm.nccl_env.NcclEnv.parse`), so a bad one (``NCCL_NVLS_ENABLE =
    "off"``) is a :class:`TopologyError` naming the file and the key, not a failure halfway
    through ``perfmodel comm``'s table."""
    if not isinstance(table, dict):
        raise TopologyError(
            f'{where}: expected a table of NCCL_* = "value"', value=table, where=where
        )
    for name, value in table.items():
        if not name.startswith("NCCL_") or not isinstance(value, str):
            raise TopologyError(
                f"{where}: {name} = {value!r}: expected an NCCL_* variable set to a string",
                value=value,
                where=where,
            )
    from perfmodel.comm.nccl_env import NcclEnv  # lazy: comm/ is not a topology dependency

    try:
        return NcclEnv.parse(table.items(), where=where).variables
    except ConfigError as exc:
        raise TopologyError(str(exc), value=exc.value, where=where) from None


def _flag(table: dict[str, Any], key: str, where: str) -> bool | None:
    """An optional boolean key of a table (``p2p``: GPU peer-to-peer over PCIe allowed;
    ``sharp``: in-network reduction; ``price_stale``: the price's source is out of date), or
    ``None`` when absent."""
    if key not in table:
        return None
    val = table[key]
    if not isinstance(val, bool):
        raise TopologyError(
            f"{where}: {key} must be true or false, got {val!r}", value=val, where=where
        )
    return val


def parse_server(
    data: dict[str, Any], *, source: str, gpu_override: str | None = None
) -> ServerDescription:
    """Turn the dict of a topology file into a validated :class:`ServerDescription`.

    Every error names ``source`` (the file), the element and the bad value.
    """
    _check_keys(data, {"system", "node", "link"}, source)
    system = data.get("system")
    if not isinstance(system, dict):
        raise TopologyError(f"{source}: missing [system] table", value=None, where=source)
    _check_keys(system, _SYSTEM_KEYS, f"{source}: [system]")
    if "name" not in system:
        raise TopologyError(f"{source}: [system] lacks 'name'", value=None, where=source)
    default_gpu = str(system.get("gpu", ""))
    selectable = bool(system.get("gpu_selectable", False))
    if gpu_override is not None:
        default_gpu = get_gpu(gpu_override, where="--gpu").name
    fabric = (
        parse_fabric(system["fabric"], f"{source}: [system.fabric]") if "fabric" in system else None
    )
    server_p2p = _flag(system, "p2p", f"{source}: [system]")
    cloud = parse_cloud(system["cloud"], f"{source}: [system.cloud]") if "cloud" in system else None
    refs = parse_references(system.get("reference", []), f"{source}: [[system.reference]]")

    nodes = _parse_nodes(data, source, default_gpu, gpu_override, server_p2p)
    if not any(n.kind is NodeKind.GPU for n in nodes):
        raise TopologyError(f"{source}: no GPU node", value=None, where=source)
    _check_p2p_denied(nodes, source)
    links = _parse_links(data, source, {n.id for n in nodes})
    domain = _check_nvlink_domain(system, tuple(nodes), tuple(links), source)
    return ServerDescription(
        name=str(system["name"]),
        nodes=tuple(nodes),
        links=tuple(links),
        fabric=fabric,
        description=str(system.get("description", "")),
        sources=tuple(
            str(s) for s in _list(system.get("sources", []), "system.sources", where=source)
        ),
        gpu=default_gpu,
        gpu_selectable=selectable,
        source=source,
        nvlink_domain=domain,
        cloud=cloud,
        references=refs,
        assumptions=tuple(
            str(a) for a in _list(system.get("assumptions", []), "system.assumptions", where=source)
        ),
    )


def _entries(
    data: dict[str, Any], table: str, keys: Any, required: tuple[str, str], source: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, entry)`` of each ``[[table]]`` entry, its keys checked (known ``keys``, the
    two ``required`` ones present)."""
    for i, entry in enumerate(_list(data.get(table, []), table, where=source)):
        where = f"{source}: {table}[{i}]"
        _check_keys(entry, keys, where)
        if required[0] not in entry or required[1] not in entry:
            need = f"'{required[0]}' and '{required[1]}'"
            raise TopologyError(f"{where}: needs {need}", value=entry, where=where)
        yield where, entry


def _parse_nodes(
    data: dict[str, Any],
    source: str,
    default_gpu: str,
    gpu_override: str | None,
    server_p2p: bool | None,
) -> list[NodeSpec]:
    """The ``[[node]]`` entries, checked: unique ids, a known kind (no network switch), a GPU
    model from the entry or ``[system] gpu`` (``gpu_override`` replaces both)."""
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for where, entry in _entries(data, "node", _NODE_KEYS, ("id", "kind"), source):
        nid = str(entry["id"])
        if nid in seen:
            raise TopologyError(f"{where}: duplicate node id {nid!r}", value=nid, where=where)
        seen.add(nid)
        kind = NodeKind.parse(entry["kind"], where=f"{where} ({nid})")
        if kind is NodeKind.NETWORK_SWITCH:
            raise TopologyError(
                f"{where}: network switches belong to the fabric, not a server file",
                value=nid,
                where=where,
            )
        model = str(entry.get("model", ""))
        if kind is NodeKind.GPU:
            if gpu_override is not None or not model:
                model = default_gpu
            if not model:
                raise TopologyError(
                    f"{where}: GPU {nid!r} has no model and [system] has no 'gpu'",
                    value=nid,
                    where=where,
                )
            try:
                model = get_gpu(model, where=f"{where} ({nid})").name
            except UnknownHardwareError as exc:
                raise TopologyError(str(exc), value=model, where=where) from exc
        nodes.append(
            NodeSpec(
                id=nid,
                kind=kind,
                model=model,
                label=str(entry.get("label", "")),
                rail=entry.get("rail"),
                p2p=_flag(entry, "p2p", where) if "p2p" in entry else server_p2p,
                tray=(
                    _int(entry["tray"], "tray", where=where, minimum=0) if "tray" in entry else None
                ),
                p2p_denied=tuple(
                    str(x) for x in _list(entry.get("p2p_denied", []), "p2p_denied", where=where)
                ),
            )
        )
    return nodes


def _parse_links(data: dict[str, Any], source: str, seen: set[str]) -> list[LinkSpec]:
    """The ``[[link]]`` entries, checked: both ends declared nodes (``seen``), no self-loop, one
    entry per pair (bundles are ``count``)."""
    links: list[LinkSpec] = []
    pairs: set[frozenset[str]] = set()
    for where, entry in _entries(data, "link", _LINK_KEYS, ("a", "b"), source):
        a, b = str(entry["a"]), str(entry["b"])
        for end in (a, b):
            if end not in seen:
                raise TopologyError(
                    f"{where}: endpoint {end!r} is not a declared node", value=end, where=where
                )
        if a == b:
            raise TopologyError(f"{where}: self-loop on {a!r}", value=a, where=where)
        key = frozenset((a, b))
        if key in pairs:
            raise TopologyError(
                f"{where}: duplicate link {a}-{b} (use count = N for bundles)",
                value=(a, b),
                where=where,
            )
        pairs.add(key)
        links.append(parse_link_entry(entry, where=f"{where} ({a}-{b})"))
    return links


def _check_p2p_denied(nodes: list[NodeSpec], source: str) -> None:
    """Every ``p2p_denied`` entry names another GPU of the file, and only GPUs carry one."""
    gpus = {n.id for n in nodes if n.kind is NodeKind.GPU}
    for i, n in enumerate(nodes):
        if n.p2p_denied and n.kind is not NodeKind.GPU:
            raise TopologyError(
                f"{source}: node[{i}] ({n.id}): p2p_denied is for GPU nodes, not {n.kind.value}",
                value=n.id,
                where=f"{source}: node[{i}]",
            )
        for peer in n.p2p_denied:
            if peer not in gpus or peer == n.id:
                raise TopologyError(
                    f"{source}: node[{i}] ({n.id}): p2p_denied names {peer!r}, which is not "
                    "another GPU of the file",
                    value=peer,
                    where=f"{source}: node[{i}]",
                )


def _check_nvlink_domain(
    system: dict[str, Any], nodes: tuple[NodeSpec, ...], links: tuple[LinkSpec, ...], source: str
) -> int | None:
    """The ``nvlink_domain`` a system file declares, checked against its GPUs and links.

    Raises
    ------
    TopologyError
        If it is not a positive integer, exceeds the GPUs the server holds, or differs from the
        largest group of GPUs its NVLink/NVSwitch/Infinity Fabric links join.
    """
    if "nvlink_domain" not in system:
        return None
    where = f"{source}: [system] nvlink_domain"
    declared = _int(system["nvlink_domain"], "nvlink_domain", where=where, minimum=1)
    gpus = sum(1 for n in nodes if n.kind is NodeKind.GPU)
    if declared > gpus:
        raise TopologyError(
            f"{where} = {declared} is larger than the {gpus} GPUs system "
            f"{system.get('name', '?')!r} holds; an NVLink domain spans GPUs of one server "
            f"(a rack-scale system describes the whole rack): use nvlink_domain <= {gpus}",
            value=declared,
            where=where,
        )
    largest = len(nvlink_domains(nodes, links)[0])
    if declared != largest:
        raise TopologyError(
            f"{where} = {declared}, but the file's NVLink, NVSwitch and Infinity Fabric links "
            f"join at most {largest} GPUs",
            value=declared,
            where=where,
        )
    return declared


def parse_link_entry(entry: dict[str, Any], *, where: str) -> LinkSpec:
    """A link from a technology name and/or explicit numbers (explicit numbers win)."""
    count = _int(entry.get("count", 1), "count", where=where)
    if count < 1:
        raise TopologyError(f"{where}: count {count} must be >= 1", value=count, where=where)
    tech_name = entry.get("tech")
    if tech_name is not None:
        try:
            tech = get_link(tech_name, where=where)
        except UnknownHardwareError as exc:
            raise TopologyError(str(exc), value=tech_name, where=where) from exc
        bw, eff, lat, family, name = (
            tech.bandwidth_Bps * count,
            tech.efficiency,
            tech.latency_s,
            tech.family,
            tech.name,
        )
    else:
        bw = eff = lat = None  # type: ignore[assignment]
        family, name = LinkFamily.PCIE, "custom"
    if "family" in entry:
        family = parse_enum(
            LinkFamily, entry["family"], where=where, normalize=str, error=TopologyError,
            template="{where}: unknown link family {text!r}; expected {expected}",
        )  # fmt: skip
    for key, unit in (("bandwidth_GBps", units.GB), ("bandwidth_Gbps", units.Gbit)):
        if key in entry:
            bw = _number(entry[key], key, where=where, positive=True) * unit * count
    if "latency_us" in entry:
        lat = _number(entry["latency_us"], "latency_us", where=where) * units.us
    if "efficiency" in entry:
        eff = _number(entry["efficiency"], "efficiency", where=where)
    if bw is None or lat is None:
        raise TopologyError(
            f"{where}: give 'tech' or both a bandwidth and 'latency_us'", value=entry, where=where
        )
    if eff is None:
        eff = 1.0
    check_link_numbers(bw, eff, lat, where=where, error=TopologyError)
    return LinkSpec(
        a=str(entry["a"]),
        b=str(entry["b"]),
        tech=name,
        family=family,
        count=count,
        bandwidth_Bps=bw,
        efficiency=eff,
        latency_s=lat,
    )


# --------------------------------------------------------------------------- writing a file


def _toml_str(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    import json

    return json.dumps(str(text), ensure_ascii=False)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not (v == v and abs(v) != float("inf")):
            raise TopologyError(f"cannot write {v!r} to TOML", value=v, where="system file")
        return repr(v)
    if isinstance(v, (list, tuple)):
        items = [_toml_value(x) for x in v]
        if sum(len(x) + 2 for x in items) > 80:  # one item a line, as a reader edits them
            return "[\n" + "".join(f"    {x},\n" for x in items) + "]"
        return "[" + ", ".join(items) + "]"
    return _toml_str(str(v))


def _link_table(link: LinkSpec) -> dict[str, Any]:
    """A ``[[link]]`` table: the catalogue technology and count when the link is exactly that,
    else explicit numbers per bundled link (and the technology's name when it has one)."""
    from perfmodel.hardware.links import find_link

    out: dict[str, Any] = {"a": link.a, "b": link.b}
    tech = find_link(link.tech) if link.tech != "custom" else None
    exact = (
        tech is not None
        and abs(tech.bandwidth_Bps * link.count - link.bandwidth_Bps) <= 1e-12 * link.bandwidth_Bps
        and tech.efficiency == link.efficiency
        and tech.latency_s == link.latency_s
        and tech.family is link.family
    )
    if tech is not None:
        out["tech"] = tech.name
    if link.count != 1:
        out["count"] = link.count
    if not exact:
        out["bandwidth_GBps"] = link.bandwidth_Bps / link.count / units.GB
        out["latency_us"] = link.latency_s / units.us
        out["efficiency"] = link.efficiency
        out["family"] = link.family.value
    return out


def format_system_file(desc: ServerDescription, *, header: str = "") -> str:
    """The TOML topology file of ``desc`` (the format of this module's docstring):
    :func:`parse_server` of it gives back ``desc``'s nodes, links, fabric and assumptions.
    ``header``: comment lines put first (each prefixed ``#`` if it is not)."""
    lines = [ln if ln.startswith("#") else f"# {ln}" for ln in header.splitlines() if ln.strip()]
    system: dict[str, Any] = {"name": desc.name}
    if desc.description:
        system["description"] = desc.description
    if desc.sources:
        system["sources"] = list(desc.sources)
    if desc.gpu:
        system["gpu"] = desc.gpu
    if desc.assumptions:
        system["assumptions"] = list(desc.assumptions)
    lines.append("[system]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in system.items()]
    fab = desc.fabric
    if fab is not None:
        lines += ["", "[system.fabric]"]
        table: dict[str, Any] = {
            "network": fab.network,
            "topology": fab.topology,
            "nics_per_node": fab.nics_per_node,
            "oversubscription": float(fab.oversubscription),
            "leaf_radix": fab.leaf_radix,
        }
        if fab.sharp:
            table["sharp"] = True
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for n in desc.nodes:
        lines += ["", "[[node]]", f"id = {_toml_str(n.id)}", f"kind = {_toml_str(n.kind.value)}"]
        if n.model:
            lines.append(f"model = {_toml_str(n.model)}")
        if n.label:
            lines.append(f"label = {_toml_str(n.label)}")
        if n.rail is not None:
            lines.append(f"rail = {int(n.rail)}")
        if n.p2p is not None:
            lines.append(f"p2p = {_toml_value(bool(n.p2p))}")
        if n.tray is not None:
            lines.append(f"tray = {int(n.tray)}")
        if n.p2p_denied:
            lines.append(f"p2p_denied = {_toml_value(list(n.p2p_denied))}")
    for link in desc.links:
        lines += ["", "[[link]]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in _link_table(link).items()]
    return "\n".join(lines) + "\n"
