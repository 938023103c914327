"""Graphs of servers and clusters: one server's nodes and links from its description, and
clusters of copies of it joined by a fabric (single switch, fat tree, rails).

The system catalogue and the loaders by name (:func:`perfmodel.topology.builders.load_system`,
``build_system``) sit above this module; the importers and ``--system custom`` build their
descriptions' graphs here.
"""

from __future__ import annotations

import math
import re

import networkx as nx

from perfmodel.errors import ConfigError, TopologyError
from perfmodel.hardware.gpus import get_gpu
from perfmodel.hardware.links import LinkFamily, get_link, list_links
from perfmodel.topology.io import FABRIC_TOPOLOGIES, LinkSpec, ServerDescription, link_from_tech
from perfmodel.topology.lazy import ClusterFiller, lazy_graph
from perfmodel.topology.model import FabricSpec, ReplicaPattern, Topology
from perfmodel.topology.schema import (
    TRANSIT_KINDS,
    NodeKind,
    check_attributes,
    check_gpu_connectivity,
    own_graph,
    validate_graph,
)


def add_server(
    graph: nx.Graph, desc: ServerDescription, server: int, prefix: str
) -> dict[str, str]:
    """Add one server's nodes and links to ``graph``; return local id -> graph node id."""
    ids: dict[str, str] = {}
    gpu_index = 0
    for n in desc.nodes:
        gid = f"{prefix}{n.id}"
        ids[n.id] = gid
        attrs: dict[str, object] = {"kind": n.kind, "server": server, "local_id": n.id}
        if n.label:
            attrs["label"] = n.label
        if n.model:
            attrs["model"] = n.model
        if n.rail is not None:
            attrs["rail"] = int(n.rail)
        if n.p2p is not None and n.kind is NodeKind.GPU:
            attrs["p2p"] = bool(n.p2p)
        if n.tray is not None:
            attrs["tray"] = int(n.tray)
        if n.p2p_denied and n.kind is NodeKind.GPU:
            attrs["p2p_denied"] = tuple(sorted(n.p2p_denied))
        if n.kind is NodeKind.GPU:
            attrs["gpu_index"] = gpu_index
            gpu_index += 1
        graph.add_node(gid, **attrs)
    gen = _gpu_pcie_generations(desc)
    for link in desc.links:
        _add_link(graph, ids[link.a], ids[link.b], negotiate_pcie(link, gen))
    return ids


MAX_CLUSTER_GPUS = 16_384
"""Largest cluster :func:`build_cluster` builds: the issue-14 target size (Llama-3 405B on
16,384 H100). Every server, NIC and link is a node or edge of one graph (2,048 DGX A100: 63,497
nodes, 92,168 edges); its servers are made when first read (:mod:`perfmodel.topology.lazy`), so
a prediction that reads two servers and the fabric pays for those, but a whole-graph read
(``topo show``, a copy, a search that crosses every server) makes them all (0.2-0.3 s CPU at
this size on the 2-core development machine, ``benchmarks/bench_scale.py``); larger clusters
are refused at once instead of running for minutes."""

_PCIE_TECH = re.compile(r"^pcie(\d+)-x(\d+)$")


def _gpu_pcie_generations(desc: ServerDescription) -> dict[str, int]:
    """Local id -> PCIe generation of each GPU node whose catalogue spec states one."""
    out: dict[str, int] = {}
    for n in desc.nodes:
        if n.kind is not NodeKind.GPU:
            continue
        model = n.model or desc.gpu
        if not model:
            continue
        spec_gen = get_gpu(model).pcie_gen
        if spec_gen:
            out[n.id] = int(spec_gen)
    return out


def negotiate_pcie(link: LinkSpec, gpu_gen: dict[str, int]) -> LinkSpec:
    """The link as trained: a PCIe link to a GPU runs at the highest generation both ends support.

    PCIe link training (PCI Express Base Specification, LTSSM ``Recovery.Speed``) settles on the
    highest data rate advertised by both ports, so a PCIe 2.0 board (Tesla K20: "PCIe 2.0 x16",
    board specification BD-06455-001) in a PCIe 3.0 slot or switch port runs at 5 GT/s. Only
    links named by a catalogue technology ``pcieN-xW`` and without explicit bandwidth numbers are
    re-rated (to ``pcie<gpu gen>-xW``, same lane count and bundle count); links between switches
    and CPUs are left as described.
    """
    if link.family is not LinkFamily.PCIE:
        return link
    m = _PCIE_TECH.match(link.tech)
    if m is None:
        return link
    ends = [gpu_gen[x] for x in (link.a, link.b) if x in gpu_gen]
    if not ends:
        return link
    tech_gen, width = int(m.group(1)), m.group(2)
    want = min(ends)
    if want >= tech_gen:
        return link
    tech = get_link(link.tech)
    if link.bandwidth_Bps != tech.bandwidth_Bps * link.count or link.efficiency != tech.efficiency:
        return link  # explicit numbers in the topology file win
    name = f"pcie{want}-x{width}"
    if name not in {t.name for t in list_links()}:
        return link  # no catalogue entry for that generation: keep the described link
    return link_from_tech(link.a, link.b, name, link.count)


def _link_attrs(link: LinkSpec) -> dict[str, object]:
    """The edge attributes of ``link`` (the edge schema, topology/schema.py)."""
    return {
        "tech": link.tech,
        "family": link.family,
        "count": link.count,
        "bandwidth_Bps": link.bandwidth_Bps,
        "efficiency": link.efficiency,
        "latency_s": link.latency_s,
    }


def _add_link(graph: nx.Graph, u: str, v: str, link: LinkSpec) -> None:
    """Edge ``u - v`` with the link's attributes (the edge schema, topology/schema.py)."""
    graph.add_edge(u, v, **_link_attrs(link))


def build_cluster(desc: ServerDescription, nodes: int, fabric: FabricSpec | None) -> Topology:
    """Replicate a server ``nodes`` times and join the servers' NICs with ``fabric``.

    Fabrics
    -------
    single-switch
        Every NIC port on one network switch (non-blocking).
    fat-tree
        Two-level leaf/spine. ``leaf_radix`` NIC ports per leaf; each leaf has
        ``ceil(leaf_radix / oversubscription)`` uplinks of the same technology to the spine
        layer, modelled as one aggregated spine node (ideal ECMP spreading).
    rail
        Rail-optimised: NIC ``k`` of every server on leaf (rail) ``k``; rails joined by a spine
        with ``ceil(nodes / oversubscription)`` uplinks per rail.
    """
    if nodes < 1:
        raise ConfigError(f"--nodes must be >= 1, got {nodes}", value=nodes, where="--nodes")
    if nodes == 1:
        return _one_server(desc, fabric)
    nic_ids = _cluster_nics(desc, nodes, fabric)
    assert fabric is not None
    # Servers 1.. are copies of server 0, made in the graph when first read (topology/lazy.py):
    # the fabric's switches and links are written now, a server's links to them kept in
    # ``links`` until the server is made.
    template = _server_template(desc)
    prefix = ReplicaPattern.prefix
    wiring = _FabricWiring(nodes, nic_ids, fabric.network, template)
    graph = lazy_graph(wiring.filler)
    wiring.wire(fabric)
    # Server 0 and the fabric are checked attribute by attribute; servers 1.. are copies of
    # server 0 and the fabric's links of one bundle size share one attribute dict (checked
    # once, on the first such link).
    node_data = graph.nodes(data=True)
    first_ids = [prefix(0) + lid for lid, _, _ in template]
    first = [(n, node_data[n]) for n in first_ids]
    first_edges = [(u, v, d) for u, v, d in graph.edges(first_ids, data=True)]
    fabric_nodes = [(n, node_data[n]) for n in wiring.switches]
    fabric_edges = [(u, v, wiring.by_count[c]) for c, (u, v) in wiring.first_of_count.items()]
    gpus = check_attributes(
        graph, first + fabric_nodes, first_edges + fabric_edges, source=desc.source
    )
    if not gpus:
        raise TopologyError(f"{desc.source}: topology has no GPU", value=None, where=desc.source)
    pattern = ReplicaPattern(
        graph,
        nodes,
        tuple(lid for lid, _, _ in template),
        tuple(wiring.switches),
        _attachments(wiring.ends),
    )
    topo = Topology(
        f"{desc.name}x{nodes}",
        graph,
        nodes,
        desc.description,
        desc.source,
        fabric,
        desc.sources,
        pattern=pattern,
        cloud=desc.cloud,
        references=desc.references,
    )
    if not _copies_connected(graph, pattern):  # else the whole graph names the GPU
        gpus_in_node_order = [n for n, kind in graph.nodes(data="kind") if kind is NodeKind.GPU]
        check_gpu_connectivity(graph, gpus_in_node_order, desc.source)
    return topo


def _one_server(desc: ServerDescription, fabric: FabricSpec | None) -> Topology:
    """The server alone, its nodes named by their local ids."""
    graph = nx.Graph()
    add_server(graph, desc, 0, "")
    validate_graph(graph, source=desc.source)
    own_graph(graph)  # made and checked here: a topology made of it need not check it again
    return Topology(
        desc.name,
        graph,
        1,
        desc.description,
        desc.source,
        fabric,
        desc.sources,
        cloud=desc.cloud,
        references=desc.references,
    )


def _cluster_nics(desc: ServerDescription, nodes: int, fabric: FabricSpec | None) -> list[str]:
    """The local ids of the NICs each server joins to ``fabric`` (the first ``nics_per_node``),
    after checking that ``nodes`` servers can be built."""
    if fabric is None:
        raise ConfigError(
            f"system {desc.name} states no default fabric; give --network to build {nodes} nodes",
            value=nodes,
            where="--nodes",
        )
    if fabric.topology not in FABRIC_TOPOLOGIES:
        raise ConfigError(
            f"unknown fabric topology {fabric.topology!r}", value=fabric.topology, where="fabric"
        )
    nic_ids = [n.id for n in desc.nodes if n.kind is NodeKind.NIC]
    if not nic_ids:
        raise ConfigError(
            f"system {desc.name} has no NIC node; cannot build a {nodes}-node cluster",
            value=desc.name,
            where="--nodes",
        )
    gpus = nodes * sum(1 for n in desc.nodes if n.kind is NodeKind.GPU)
    if gpus > MAX_CLUSTER_GPUS:
        raise ConfigError(
            f"--nodes {nodes} of {desc.name} is {gpus:,} GPUs, more than the "
            f"{MAX_CLUSTER_GPUS:,} perfmodel builds: the cluster is materialised link by link "
            "as one graph, which at this size takes minutes (issue 14: a fat tree described as "
            "a pattern). Data-parallel replicas behave alike, so predict a slice with the same "
            "per-replica plan on fewer nodes",
            value=nodes,
            where="--nodes",
        )
    if fabric.nics_per_node and fabric.nics_per_node < len(nic_ids):
        nic_ids = nic_ids[: fabric.nics_per_node]
    return nic_ids


class _FabricWiring:
    """The fabric of a cluster being built: its switches and links, written into the lazy
    graph's fabric part (:class:`~perfmodel.topology.lazy.ClusterFiller`), and each server's
    links to the fabric, kept until the server is made.

    One catalogue lookup and one attribute dict per bundle size, shared by every fabric link of
    that size (the graph is read-only, :class:`~perfmodel.topology.model.Topology`), not one
    per port.
    """

    def __init__(
        self,
        nodes: int,
        nic_ids: list[str],
        network: str,
        template: list[tuple[str, dict, list[tuple[str, dict]]]],
    ) -> None:
        self.nodes = nodes
        self.nic_ids = nic_ids
        self.network = network
        #: per server: its links to the fabric as (local id, fabric node, attributes)
        self.links: list[list[tuple[str, str, dict[str, object]]]] = [[] for _ in range(nodes)]
        self.switches: list[str] = []
        self.filler = ClusterFiller(
            nodes, ReplicaPattern.prefix, template, self.links, self.switches
        )
        self.adj = (
            self.filler.adj
        )  # the fabric's adjacency dicts: plain dicts, present from the start
        self.by_count: dict[int, dict[str, object]] = {}
        self.first_of_count: dict[int, tuple[str, str]] = {}  # the first link of each bundle size
        self.pre = [ReplicaPattern.prefix(s) for s in range(nodes)]
        #: per server, its links to the fabric as (local id, fabric node), each of one port
        #: (count 1): the key of its attachment (ReplicaPattern.attach), hashable
        self.ends: list[list[tuple[str, str]]] = [[] for _ in range(nodes)]

    def wire(self, fabric: FabricSpec) -> None:
        """The switches and links of ``fabric`` (see :func:`build_cluster`)."""
        nodes, nic_ids = self.nodes, self.nic_ids
        n_ports = nodes * len(nic_ids)
        if fabric.topology in ("single-switch", "fat-tree"):
            ports = [(s, k) for s in range(nodes) for k in range(len(nic_ids))]
        if fabric.topology == "single-switch" or (
            fabric.topology == "fat-tree" and n_ports <= fabric.leaf_radix
        ):
            self._port_edges(ports, self._switch("fabric/switch0", 0))
        elif fabric.topology == "fat-tree":
            n_leaves = math.ceil(n_ports / fabric.leaf_radix)
            spine = self._switch("fabric/spine", 1)
            for i in range(n_leaves):
                leaf = self._switch(f"fabric/leaf{i}", 0)
                members = ports[i * fabric.leaf_radix : (i + 1) * fabric.leaf_radix]
                self._port_edges(members, leaf)
                uplinks = max(1, math.ceil(len(members) / fabric.oversubscription))
                self._trunk(leaf, spine, uplinks)
        else:  # rail: NIC k of every server on rail k, every server's links alike (one list)
            links, ends = self.links, self.ends
            links[1:] = links[:1] * (nodes - 1)
            ends[1:] = ends[:1] * (nodes - 1)
            rails = len(nic_ids)
            spine = self._switch("fabric/spine", 1) if rails > 1 else None
            for k in range(rails):
                leaf = self._switch(f"fabric/rail{k}", 0)
                self._rail_edges(k, leaf)
                if spine is not None:
                    self._trunk(leaf, spine, max(1, math.ceil(nodes / fabric.oversubscription)))

    def _link_data(self, u: str, v: str, count: int) -> dict[str, object]:
        data = self.by_count.get(count)
        if data is None:
            data = self.by_count[count] = _link_attrs(link_from_tech(u, v, self.network, count))
            self.first_of_count[count] = (u, v)
        return data

    def _port_edges(self, members: list[tuple[int, int]], sw: str) -> None:
        """One link from NIC ``k`` of server ``s`` to switch ``sw`` for each ``(s, k)`` of
        ``members``, in that order."""
        pre, nic_ids, links, ends = self.pre, self.nic_ids, self.links, self.ends
        s0, k0 = members[0]
        data = self._link_data(pre[s0] + nic_ids[k0], sw, 1)
        out = self.adj[sw]
        for s, k in members:
            lid = nic_ids[k]
            links[s].append((lid, sw, data))
            ends[s].append((lid, sw))
            out[pre[s] + lid] = data

    def _rail_edges(self, k: int, sw: str) -> None:
        """:meth:`_port_edges` of NIC ``k`` of every server, in server order, where every
        server shares one list of links and one of attachment ends (rails: every server is
        wired alike)."""
        pre = self.pre
        lid = self.nic_ids[k]
        data = self._link_data(pre[0] + lid, sw, 1)
        self.links[0].append((lid, sw, data))
        self.ends[0].append((lid, sw))
        self.adj[sw].update(zip([p + lid for p in pre], [data] * self.nodes))

    def _trunk(self, u: str, v: str, count: int) -> None:
        """``count`` links between switches ``u`` and ``v``."""
        adj = self.adj
        adj[u][v] = adj[v][u] = self._link_data(u, v, count)

    def _switch(self, name: str, tier: int) -> str:
        attrs = {"kind": NodeKind.NETWORK_SWITCH, "server": -1, "local_id": name, "tier": tier}
        dict.__setitem__(self.filler.node, name, attrs)
        dict.__setitem__(self.adj, name, {})
        self.switches.append(name)
        return name


def _attachments(
    ends: list[list[tuple[str, str]]],
) -> tuple[tuple[tuple[str, str, int], ...], ...]:
    """Each server's links to the fabric as its attachment (sorted ``(local id, fabric node,
    1)``); servers with the same links share one (on rails: every server)."""
    attach_of: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str, int], ...]] = {}
    attach = []
    last: list[tuple[str, str]] | None = None  # servers sharing one list of ends: one lookup
    for e in ends:
        if e is not last:
            last, key = e, tuple(e)
            a = attach_of.get(key)
            if a is None:
                a = attach_of[key] = tuple(sorted([(lid, f, 1) for lid, f in key]))
        attach.append(a)
    return tuple(attach)


def _copies_connected(graph: nx.Graph, pattern: ReplicaPattern) -> bool:
    """Whether every GPU of a cluster built alike touches a transit component that the first
    GPU touches: the check of :func:`~perfmodel.topology.schema.check_gpu_connectivity`,
    proved on the components of server 0's transit nodes (the same in every copy) joined
    through the fabric links the builder recorded (servers meet only there), without
    searching the 16,000-server-node graph. ``False`` means "not proved" (the whole-graph
    check then decides and names the GPU).

    Servers whose fabric attachments (:attr:`ReplicaPattern.attach`) reach the same
    components of the fabric alone from the same local ids (on rails and on a fat tree of
    leaves under one spine, every server) join the same fabric components alike and their
    GPUs pass or fail alike, except that server 0's components, unlike another's, may be the
    first GPU's without a fabric link: the first two servers of each such signature (server 0
    is the first of its own) stand for all. Any join of two fabric components through a
    server is made by the chosen server of its signature too."""
    nodes = graph._node
    adj = graph._adj  # networkx's dict-of-dicts adjacency
    fabric = {f: i for i, f in enumerate(pattern.fabric_nodes)}
    fabric_transit = {f for f in fabric if nodes[f]["kind"] in TRANSIT_KINDS}
    parent = list(range(len(fabric)))  # the fabric's nodes, then the chosen servers' components

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x: int, y: int) -> None:
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)

    for f in fabric_transit:
        for v in adj[f]:
            if v in fabric_transit:
                union(fabric[f], fabric[v])
    sig_of: dict[tuple[tuple[str, str, int], ...], frozenset[tuple[str, int]]] = {}
    sigs: dict[frozenset[tuple[str, int]], list[int]] = {}
    last = None  # servers sharing one attachment (on rails: all) hash it once
    for s, att in enumerate(pattern.attach):
        if att is not last:
            last, sig = att, sig_of.get(att)
            if sig is None:  # (local id, fabric component) of each link into the fabric's transit
                sig = sig_of[att] = frozenset(
                    (lid, find(fabric[f])) for lid, f, _ in att if f in fabric_transit
                )
            got = sigs.setdefault(sig, [])
        if len(got) < 2:
            got.append(s)
    chosen = sorted(s for srvs in sigs.values() for s in srvs)  # starts with server 0
    p0 = pattern.prefix(0)
    lids = pattern.local_ids
    kind = {lid: nodes[p0 + lid]["kind"] for lid in lids}
    transit = {lid for lid in lids if kind[lid] in TRANSIT_KINDS}
    comp: dict[str, int] = {}  # server 0's transit components, by local id
    n_comp = 0
    for start in lids:
        if start not in transit or start in comp:
            continue
        c = comp[start] = n_comp
        n_comp += 1
        stack = [start]
        while stack:
            for v in adj[p0 + stack.pop()]:
                lid = v[len(p0) :] if v.startswith(p0) else None
                if lid in transit and lid not in comp:
                    comp[lid] = c
                    stack.append(lid)
    base = len(fabric)  # server chosen[i]'s components are base + i * n_comp + c
    parent.extend(range(base, base + len(chosen) * n_comp))
    gpus = [lid for lid in lids if kind[lid] is NodeKind.GPU]
    inner = {  # a GPU's transit neighbours in its own server, as components
        g: {comp[v[len(p0) :]] for v in adj[p0 + g] if v.startswith(p0) and v[len(p0) :] in comp}
        for g in gpus
    }
    for i, s in enumerate(chosen):
        for lid, f, _ in pattern.attach[s]:
            if lid in transit and f in fabric_transit:
                union(base + i * n_comp + comp[lid], fabric[f])
    if not gpus:
        return False

    def reach(i: int, g: str) -> set[int]:
        """Components GPU ``g`` of server ``chosen[i]`` touches."""
        out = {find(base + i * n_comp + c) for c in inner[g]}
        out.update(
            find(fabric[f])
            for lid, f, _ in pattern.attach[chosen[i]]
            if lid == g and f in fabric_transit
        )
        return out

    ref = reach(0, gpus[0])
    cabled = {lid for att in sig_of for lid, _, _ in att if lid in inner}
    for i in range(len(chosen)):
        good = {c for c in range(n_comp) if find(base + i * n_comp + c) in ref}
        for g in gpus:
            if not inner[g] & good and not (g in cabled and reach(i, g) & ref):
                return False
    return True


def _server_template(desc: ServerDescription) -> list[tuple[str, dict, list[tuple[str, dict]]]]:
    """Server 0 of a cluster by local id, as :class:`~perfmodel.topology.lazy.ClusterFiller`
    copies it: ``(local id, node attributes, [(neighbour, link attributes), ...])`` in the
    node and adjacency order of :func:`add_server` (the description's order)."""
    one = nx.Graph()
    add_server(one, desc, 0, "")
    return [(lid, attrs, list(one._adj[lid].items())) for lid, attrs in one._node.items()]
