"""Routes inside a server read off the first server of its class (issue 14; the one mechanism of
:mod:`perfmodel.topology.symmetry`) equal the routes the search finds in that server, on
catalogue clusters and on servers whose fabric makes them differ."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
from search_only import SearchOnly

from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.model import CommCostModel
from perfmodel.errors import PerfModelError
from perfmodel.topology import Topology, load_system
from perfmodel.topology.schema import NodeKind
from perfmodel.topology.symmetry import server_symmetry


def _route_or_error(links: DirectedLinks, a: str, b: str) -> object:
    try:
        return links.route(a, b)
    except PerfModelError as exc:  # e.g. to an NVSwitch, reachable only through GPUs
        return type(exc), str(exc)


def _assert_routes_equal(topo: Topology, servers: range) -> DirectedLinks:
    links, plain = DirectedLinks(topo), SearchOnly(topo)
    for s in servers:
        nodes = sorted(links.server_nodes[s])
        for a in nodes:
            for b in nodes:
                assert _route_or_error(links, a, b) == _route_or_error(plain, a, b), (a, b)
    return links


@pytest.mark.parametrize(
    ("system", "nodes", "kw", "mapped"),
    [
        ("dgx-a100", 3, {}, 3),
        ("dgx1-v100", 5, {}, 4),  # fat tree, leaf radix 18: server 4's NICs span two leaves
        ("dgx1-v100", 3, {"fabric_topology": "rail"}, 3),
        ("pcie-8xtitanx", 3, {}, 3),
        ("asus-z10pe-2x1080ti", 2, {}, 2),  # GeForce: no peer-to-peer, routes through the CPU
    ],
)
def test_copied_routes_equal_searched_routes(
    system: str, nodes: int, kw: dict, mapped: int
) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    _assert_routes_equal(topo, range(1, nodes))
    # servers 0 .. mapped-1 were recognised as interchangeable; every server >= 1 has server 0
    # as its inside twin (server 4 of the fat tree too: its routes inside are read off server 0)
    sym = server_symmetry(topo)
    assert [s for s in range(nodes) if sym.cls.get(s) == sym.cls[0]] == list(range(mapped))
    assert sym.twin == dict.fromkeys(range(1, nodes), 0)


@pytest.mark.parametrize(
    ("system", "nodes", "kw"),
    [
        ("dgx-a100", 3, {}),
        ("dgx1-v100", 5, {}),
        ("dgx1-v100", 4, {"oversubscription": 2.0}),
        ("dgx-a100", 3, {"fabric_topology": "fat-tree"}),
    ],
)
def test_memoised_fabric_routes_equal_searched_routes(system: str, nodes: int, kw: dict) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    links, plain = DirectedLinks(topo), SearchOnly(topo)
    nics = [n for n, kind in topo.graph.nodes(data="kind") if kind is NodeKind.NIC]
    pairs = [(a, b) for a in nics for b in nics if links.server[a] != links.server[b]]
    for a, b in pairs:
        assert links.route(a, b) == plain.route(a, b), (a, b)
    assert len(links._fabric_inner) < len(pairs) / 2  # searched once per pattern, not per pair


def test_changed_server_is_searched() -> None:
    topo = load_system("dgx-a100", nodes=2)
    g = topo.graph.copy()
    u, v = next((u, v) for u, v in g.edges if u.startswith("n1/") and v.startswith("n1/"))
    g.edges[u, v]["bandwidth_Bps"] *= 0.5
    changed = dataclasses.replace(topo, graph=g)
    _assert_routes_equal(changed, range(1, 2))
    assert server_symmetry(changed).cls.get(1) is None
    assert server_symmetry(changed).twin == {}


# CPU0 and CPU1 joined by k PCIe switches inside the server (k + 1 hops), and through NICs to a
# fat tree. Two NICs on 3-port leaves: server 0's NICs share a leaf (the CPUs are 4 hops apart
# through it), server 1's do not (6 hops). Three NICs (two on CPU0) on 2-port leaves: server 0's
# shared leaf joins two NICs of CPU0, server 1's joins a NIC of each CPU (4 hops against 6 in
# server 0). So a path through the fabric beats, ties with or loses to the inside path in one
# server and not in the other.
def _ladder(k: int, nic_cpus: tuple[str, ...], radix: int) -> str:
    head = f"""
[system]
name = "ladder"
description = "two CPUs k PCIe switches apart, NICs on both"
sources = ["test"]
gpu = "V100-PCIE-16GB"
[system.fabric]
network = "ib-edr"
topology = "fat-tree"
nics_per_node = {len(nic_cpus)}
leaf_radix = {radix}
"""
    nodes = [("cpu0", "cpu"), ("cpu1", "cpu"), ("gpu0", "gpu"), ("gpu1", "gpu")]
    nodes += [(f"nic{i}", "nic") for i in range(len(nic_cpus))]
    nodes += [(f"sw{i}", "pcie_switch") for i in range(k)]
    chain = ["cpu0", *(f"sw{i}" for i in range(k)), "cpu1"]
    links = [*itertools.pairwise(chain), ("cpu0", "gpu0"), ("cpu1", "gpu1")]
    links += [(cpu, f"nic{i}") for i, cpu in enumerate(nic_cpus)]
    text = head + "".join(f'[[node]]\nid = "{i}"\nkind = "{kind}"\n' for i, kind in nodes)
    return text + "".join(f'[[link]]\na = "{a}"\nb = "{b}"\ntech = "pcie3-x16"\n' for a, b in links)


@pytest.mark.parametrize(
    ("k", "nic_cpus", "radix"),
    [
        (2, ("cpu0", "cpu1"), 3),
        (3, ("cpu0", "cpu1"), 3),
        (4, ("cpu0", "cpu1"), 3),
        (3, ("cpu0", "cpu0", "cpu1"), 2),
        (4, ("cpu0", "cpu0", "cpu1"), 2),
    ],
)
@pytest.mark.parametrize("nodes", [2, 3])
def test_fabric_shortcut_is_never_copied(
    tmp_path: Path, nodes: int, k: int, nic_cpus: tuple[str, ...], radix: int
) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(_ladder(k, nic_cpus, radix))
    topo = load_system(str(path), nodes=nodes)
    links = _assert_routes_equal(topo, range(1, nodes))
    inside = all(n.startswith("n1/") for n in links.route("n1/gpu0", "n1/gpu1"))
    if k == 4 and len(nic_cpus) == 2:
        # server 0: through the shared leaf (6 hops against 7 inside); server 1: inside
        assert links.route("n0/gpu0", "n0/gpu1")[3] == "fabric/leaf0"
        assert inside
    if k == 4 and len(nic_cpus) == 3:
        # server 0 inside (7 hops against 8); server 1 through its shared leaf (6 hops)
        assert all(n.startswith("n0/") for n in links.route("n0/gpu0", "n0/gpu1"))
        assert not inside
    # the sends inside each server, which may be read off the server's inside twin
    # (:meth:`Transfers._twin_pairs`), equal those priced on their own routes: a twin whose
    # route leaves through the fabric is never copied (server 1 of the k = 4, two-CPU ladder:
    # 8.3e-5 s, against server 0's 9.7e-5 s if it were)
    model, direct = CommCostModel(topo), CommCostModel(topo)
    direct.transfers._canonical_pairs = direct.transfers._twin_pairs = lambda p: None  # type: ignore[method-assign]
    for s in range(nodes):
        pairs = [(f"n{s}/gpu0", f"n{s}/gpu1")]
        assert model.transfers_time(pairs, 1e6) == direct.transfers_time(pairs, 1e6), s


def test_routes_are_searched_once_per_shape() -> None:
    """Plain DirectedLinks (the flow simulation's links) search each shape once: the routes
    inside servers 1..3 and between other server pairs are mapped from servers 0 and 1."""
    topo = load_system("dgx-a100", nodes=4)
    searched: list[tuple[str, str]] = []

    class _Counting(DirectedLinks):
        def _searched_route(self, src: str, dst: str) -> tuple[str, ...]:
            searched.append((src, dst))
            return super()._searched_route(src, dst)

    links, plain = _Counting(topo), SearchOnly(topo)
    gpus = topo.gpus
    gpn = topo.gpus_per_node
    inside = [(gpus[s * gpn], gpus[s * gpn + 5]) for s in range(4)]
    across = [(gpus[s * gpn + 2], gpus[((s + 1) % 4) * gpn + 6]) for s in range(4)]
    for a, b in inside + across:
        assert links.route(a, b) == plain.route(a, b), (a, b)
    # one search inside server 0; across: (0, 1) for s = 0, 1, 2 and (1, 0) for 3 -> 0
    assert searched == [inside[0], across[0], ("n1/gpu2", "n0/gpu6")]
