"""The JSON form of a topology: the exact graph (:func:`export_dict`, what ``perfmodel topo show
--json`` prints), read back into an identical graph (:func:`from_dict`); and server 0 of a
topology as the description a topology file holds (:func:`server_description`).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from perfmodel.errors import ParseError, TopologyError
from perfmodel.hardware.links import LinkFamily
from perfmodel.topology.io import LinkSpec, NodeSpec, ServerDescription
from perfmodel.topology.model import FabricSpec, Topology
from perfmodel.topology.nccl_p2p import HostCpu, NcclRelease, P2pLevel
from perfmodel.topology.schema import (
    EDGE_ATTRS_REQUIRED,
    NODE_ATTRS_OPTIONAL,
    NODE_ATTRS_REQUIRED,
    NodeKind,
    own_graph,
    validate_graph,
)

EXPORT_FORMAT = "perfmodel-topology"

EXPORT_VERSION = 1

# The exported attributes are the graph schema's (topology/schema.py), in its order.
_NODE_EXPORT = (*NODE_ATTRS_REQUIRED, *NODE_ATTRS_OPTIONAL)

_EDGE_EXPORT = EDGE_ATTRS_REQUIRED


def export_dict(topo: Topology) -> dict[str, Any]:
    """The exact graph as a JSON-ready dict (``format``, ``version``, ``nodes``, ``links``...).

    :func:`from_dict` turns it back into an identical graph (same nodes, edges and attributes).
    The record of NCCL's P2P rule (``meta["nccl_p2p_rule"]``: release, host, level and the
    pairs it refused) travels as ``nccl_p2p_rule``, so that a rule applied after re-import
    replaces the exported one (:func:`~perfmodel.topology.nccl_p2p.with_nccl_p2p_rule`) instead of adding to it.
    """
    g = topo.graph
    nodes = []
    for n, d in g.nodes(data=True):
        item: dict[str, Any] = {"id": n}
        for k in _NODE_EXPORT:
            if k in d:
                v = d[k]
                item[k] = v.value if isinstance(v, NodeKind) else v
        nodes.append(item)
    links = []
    for u, v, d in g.edges(data=True):
        item = {"a": u, "b": v}
        for k in _EDGE_EXPORT:
            val = d[k]
            item[k] = val.value if isinstance(val, LinkFamily) else val
        links.append(item)
    fabric = topo.fabric
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "name": topo.name,
        "num_nodes": topo.num_nodes,
        "description": topo.description,
        "sources": list(topo.sources),
        "fabric": None
        if fabric is None
        else {
            **fabric.described(),
            "leaf_radix": fabric.leaf_radix,
            **({"sharp": True} if fabric.sharp else {}),
        },
        "nodes": nodes,
        "links": links,
        **(
            {"nccl_p2p_rule": _rule_export(topo.meta["nccl_p2p_rule"])}
            if "nccl_p2p_rule" in topo.meta
            else {}
        ),
        **(
            {"assumptions": [str(a) for a in topo.meta["assumptions"]]}
            if topo.meta.get("assumptions")
            else {}
        ),
    }


def _rule_export(rule: Any) -> dict[str, Any]:
    """``meta["nccl_p2p_rule"]`` as JSON: pairs as lists."""
    return {**rule, "pairs": [list(p) for p in rule["pairs"]]}


def _rule_import(rule: Any, where: str) -> dict[str, Any]:
    """An exported ``nccl_p2p_rule`` back as :func:`~perfmodel.topology.nccl_p2p.with_nccl_p2p_rule` records it, checked."""
    try:
        pairs = tuple((str(a), str(b)) for a, b in rule["pairs"])
        level = rule["level"]
        return {
            "release": str(NcclRelease.parse(str(rule["release"]), where=where)),
            "host": HostCpu(rule["host"]).value,
            "level": None if level is None else P2pLevel(level).value,
            "pairs": pairs,
            "stated": bool(rule.get("stated", False)),
        }
    except (TypeError, KeyError, ValueError) as exc:
        raise TopologyError(
            f"{where}: expected {{release, host, level, pairs: [[a, b], ...]}} ({exc})",
            value=rule,
            where=where,
        ) from exc


def from_json_text(text: str, source: str) -> Topology:
    """:func:`from_dict` of a JSON text (a file's), its syntax and top level checked first."""
    from perfmodel._io import parse_json

    data = parse_json(text, source, error=ParseError)
    if not isinstance(data, dict):
        raise ParseError(f"{source}: JSON top level is not an object", value=None, where=source)
    return from_dict(data, source=source)


def from_dict(data: dict[str, Any], *, source: str = "<json>") -> Topology:
    """Rebuild a :class:`Topology` from :func:`export_dict` output (or ``topo show --json``)."""
    if "topology" in data and isinstance(data["topology"], dict):
        data = data["topology"]
    if data.get("format") != EXPORT_FORMAT:
        raise ParseError(
            f"{source}: not a perfmodel topology export (format {data.get('format')!r})",
            value=data.get("format"),
            where=source,
        )
    if int(data.get("version", 0)) > EXPORT_VERSION:
        raise ParseError(
            f"{source}: export version {data.get('version')} is newer than {EXPORT_VERSION}",
            value=data.get("version"),
            where=source,
        )
    g = nx.Graph()
    for i, item in enumerate(data.get("nodes", [])):
        where = f"{source}: nodes[{i}]"
        if "id" not in item or "kind" not in item:
            raise TopologyError(f"{where}: needs 'id' and 'kind'", value=item, where=where)
        nid = str(item["id"])
        if nid in g:
            raise TopologyError(f"{where}: duplicate node id {nid!r}", value=nid, where=where)
        unknown = sorted(set(item) - {"id", *_NODE_EXPORT})
        if unknown:
            raise TopologyError(f"{where}: unknown key(s) {unknown}", value=unknown, where=where)
        attrs = {k: item[k] for k in _NODE_EXPORT if k in item}
        attrs["kind"] = NodeKind.parse(item["kind"], where=where)
        if "p2p_denied" in attrs:  # a JSON array: the schema's tuple of local ids
            attrs["p2p_denied"] = tuple(str(x) for x in attrs["p2p_denied"])
        g.add_node(nid, **attrs)
    for i, item in enumerate(data.get("links", [])):
        where = f"{source}: links[{i}]"
        unknown = sorted(set(item) - {"a", "b", *_EDGE_EXPORT})
        if unknown:
            raise TopologyError(f"{where}: unknown key(s) {unknown}", value=unknown, where=where)
        missing = [k for k in ("a", "b", *_EDGE_EXPORT) if k not in item]
        if missing:
            raise TopologyError(f"{where}: missing key(s) {missing}", value=missing, where=where)
        a, b = str(item["a"]), str(item["b"])
        for end in (a, b):
            if end not in g:
                raise TopologyError(
                    f"{where}: endpoint {end!r} is not a node", value=end, where=where
                )
        if g.has_edge(a, b):
            raise TopologyError(f"{where}: duplicate link {a}-{b}", value=(a, b), where=where)
        try:
            family = LinkFamily(item["family"])
        except ValueError as exc:
            raise TopologyError(
                f"{where}: unknown link family {item['family']!r}",
                value=item["family"],
                where=where,
            ) from exc
        g.add_edge(
            a,
            b,
            tech=str(item["tech"]),
            family=family,
            count=int(item["count"]),
            bandwidth_Bps=item["bandwidth_Bps"],
            efficiency=item["efficiency"],
            latency_s=item["latency_s"],
        )
    validate_graph(g, source=source)
    own_graph(g)  # made and checked here: the topology below need not check it again
    fab = data.get("fabric")
    fabric = None if fab is None else _fabric_import(fab, f"{source}: fabric")
    meta: dict[str, Any] = {}
    if data.get("nccl_p2p_rule") is not None:
        meta["nccl_p2p_rule"] = _rule_import(data["nccl_p2p_rule"], f"{source}: nccl_p2p_rule")
    assumptions = data.get("assumptions")
    if assumptions:
        if not isinstance(assumptions, list):
            raise TopologyError(
                f"{source}: assumptions must be a list of sentences",
                value=assumptions,
                where=source,
            )
        meta["assumptions"] = tuple(str(a) for a in assumptions)
    return Topology(
        name=str(data.get("name", "imported")),
        graph=g,
        num_nodes=int(data.get("num_nodes", 1)),
        description=str(data.get("description", "")),
        source=source,
        fabric=fabric,
        sources=tuple(data.get("sources", ())),
        meta=meta,
    )


def _fabric_import(fab: Any, where: str) -> FabricSpec:
    """An exported ``fabric`` object, checked as a topology file's ``[system.fabric]`` is
    (:func:`perfmodel.topology.io.parse_fabric`): a bad key or value names the file."""
    from perfmodel.topology.io import parse_fabric

    return parse_fabric(fab, where)


def server_description(
    topo: Topology, *, name: str | None = None, source: str | None = None
) -> ServerDescription:
    """Server 0 of ``topo`` as the :class:`ServerDescription` a topology file holds: its nodes
    by local id (kind, model, label, rail, ``p2p``, tray, and the ``p2p_denied`` peers other
    than those of NCCL's P2P rule, which loading applies again), the links among them (tech,
    family, bundle count, bandwidth, efficiency, latency as in the graph) and the fabric.
    :func:`perfmodel.topology.cluster.build_cluster` of it rebuilds the same server.

    Raises
    ------
    TopologyError
        If server 0 has no GPU.
    """
    g = topo.graph
    members = topo.server_nodes(0)
    lid = {n: str(g.nodes[n].get("local_id", n)) for n in members}
    rule = topo.meta.get("nccl_p2p_rule")
    rule_pairs = {
        frozenset((str(a), str(b)))
        for a, b in (rule.get("pairs", ()) if isinstance(rule, dict) else ())
    }
    nodes: list[NodeSpec] = []
    for n in members:
        d = g.nodes[n]
        mine = lid[n]
        denied = tuple(
            str(x) for x in d.get("p2p_denied", ()) if frozenset((mine, str(x))) not in rule_pairs
        )
        nodes.append(
            NodeSpec(
                id=mine,
                kind=d["kind"],
                model=str(d.get("model", "")),
                label=str(d.get("label", "")),
                rail=d.get("rail"),
                p2p=d.get("p2p"),
                tray=d.get("tray"),
                p2p_denied=denied,
            )
        )
    if not any(x.kind is NodeKind.GPU for x in nodes):
        raise TopologyError(
            f"{topo.source}: server 0 has no GPU", value=topo.name, where=topo.source
        )
    inside = set(members)
    links = [
        LinkSpec(
            a=lid[u],
            b=lid[v],
            tech=str(d["tech"]),
            family=d["family"],
            count=int(d["count"]),
            bandwidth_Bps=float(d["bandwidth_Bps"]),
            efficiency=float(d["efficiency"]),
            latency_s=float(d["latency_s"]),
        )
        for u, v, d in g.edges(members, data=True)
        if u in inside and v in inside
    ]
    seen: set[frozenset[str]] = set()
    unique = []
    for link in links:  # g.edges(nbunch) yields each edge once; kept defensive
        key = frozenset((link.a, link.b))
        if key not in seen:
            seen.add(key)
            unique.append(link)
    return ServerDescription(
        name=name or topo.name,
        nodes=tuple(nodes),
        links=tuple(unique),
        fabric=topo.fabric,
        description=topo.description,
        sources=tuple(topo.sources),
        gpu=topo.gpu_spec().name,
        source=source or topo.source,
        assumptions=tuple(str(a) for a in topo.meta.get("assumptions", ())),
    )
