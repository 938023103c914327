"""Interchangeable servers (issue 14): a route or a group analysis read off the same shape in
the first servers of a class, names mapped back, equals the direct computation."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from perfmodel.errors import TopologyError
from perfmodel.topology import load_system
from perfmodel.topology import routing as R
from perfmodel.topology.symmetry import server_symmetry

SYSTEMS = [("dgx-a100", {}), ("dgx-a100", {"fabric_topology": "fat-tree"}), ("dgx1-v100", {})]


def test_identical_servers_form_one_class_in_name_order() -> None:
    topo = load_system("dgx-a100", nodes=12)
    sym = server_symmetry(topo)
    assert list(sym.ordered.values()) == [(0, 1, 10, 11, *range(2, 10))]  # "n1/" < "n10/"
    assert sym.excursion == 3  # every NIC has one fabric port
    # servers 10 and 3, in name order (n10 < n3), go to the first two servers (n0 < n1)
    assert sym.server_map((3, 10)) == {10: 0, 3: 1}
    assert sym.node_map({10: 0, 3: 1})["n3/gpu5"] == "n1/gpu5"
    assert sym.map_node("n3/gpu5", {10: 0, 3: 1}) == "n1/gpu5"
    assert sym.canonical_node("n7/nic2") == "n0/nic2"
    assert sym.canonical_node("fabric/rail2") == "fabric/rail2"


def test_a_changed_server_leaves_the_class() -> None:
    topo = load_system("dgx-a100", nodes=4)
    g = topo.graph.copy()
    u, v = next((u, v) for u, v in g.edges if u.startswith("n3/") and v.startswith("n3/"))
    g.edges[u, v]["bandwidth_Bps"] *= 0.5
    sym = server_symmetry(dataclasses.replace(topo, graph=g))
    assert 3 not in sym.cls and sym.server_map((0, 3)) is None
    assert list(sym.ordered.values()) == [(0, 1, 2)]
    g.edges[u, v]["bandwidth_Bps"] *= 2.0  # server 1 now differs: n0 and n2 are not adjacent
    u, v = next((u, v) for u, v in g.edges if u.startswith("n1/") and v.startswith("n1/"))
    g.edges[u, v]["bandwidth_Bps"] *= 0.5
    sym = server_symmetry(dataclasses.replace(topo, graph=g))
    assert list(sym.ordered.values()) == [(2, 3)]  # n0 alone: n1 sorts between n0 and n2


def _direct(topo, a: str, b: str) -> tuple[str, ...]:
    """The route without the symmetry shortcut."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(R, "_route_by_symmetry", lambda *args: None)
        return R._route_cached.__wrapped__(topo, a, b)


@pytest.mark.parametrize(("system", "kw"), SYSTEMS)
def test_routes_by_symmetry_equal_direct_routes(system: str, kw: dict[str, str]) -> None:
    topo = load_system(system, nodes=4, **kw)
    gpus = topo.gpus
    mapped = 0
    for a, b in itertools.permutations(gpus[:: max(1, len(gpus) // 12)], 2):
        if topo.server_of(a) == topo.server_of(b):
            continue
        mapped += R._route_by_symmetry(topo, a, b) is not None
        assert R.route(topo, a, b) == _direct(topo, a, b), (a, b)
    # the shortcut was taken (the small fat tree has one class of two servers, n0 and n1)
    assert mapped > 0 or kw


def _direct_group(topo, group: tuple[str, ...]):
    """The group's analysis with no server class (every ring packed where it is)."""
    import perfmodel.comm.group as M
    from perfmodel.comm import CommCostModel

    none = dataclasses.replace(server_symmetry(topo), cls={}, ordered={}, position={})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "server_symmetry", lambda t: none)
        return CommCostModel(topo).groups.build(group)


@pytest.mark.parametrize(("system", "kw"), SYSTEMS)
def test_group_shapes_equal_direct_analysis(system: str, kw: dict[str, str]) -> None:
    from perfmodel.comm import CommCostModel

    topo = load_system(system, nodes=4, **kw)
    gpn = topo.gpus_per_node
    model = CommCostModel(topo)
    for s in range(4):  # one server: the rings packed in the class's first server, mapped back
        for pick in ((0, 1, 2, 3, 4, 5, 6, 7), (3, 1, 2), (6, 7)):
            group = tuple(topo.gpus[s * gpn + i] for i in pick if i < gpn)
            assert model.groups.analysis.packed(group) == _direct_group(topo, group).channels, (
                s,
                pick,
            )
    built = []
    build = model.groups.build
    model.groups.build = lambda members: built.append(members) or build(members)  # type: ignore[method-assign]
    shapes = [((0, 0), (1, 0)), ((0, 1), (1, 1), (0, 3), (1, 3)), ((1, 2), (0, 2), (1, 0))]
    for shape in shapes:
        for s0, s1 in ((2, 3), (3, 1), (1, 2)):
            group = tuple(topo.gpus[(s0, s1)[k] * gpn + i % gpn] for k, i in shape)
            info = model.group_info(group)
            assert info == _direct_group(topo, group), (shape, s0, s1)
    if len(server_symmetry(topo).cls) == topo.num_nodes:
        # one class: the first two shapes hold the same local ids in every server, one ring
        # pattern each in any server order (GroupMemo._pattern_key); the third (mixed local
        # ids) one analysis per server order ((2, 3) and (1, 2) alike, (3, 1) mirrored: its
        # first server sorts last)
        assert len(built) == 1 + 1 + 2


@pytest.mark.parametrize(("system", "kw"), SYSTEMS)
def test_p2p_routes_by_symmetry_equal_direct(system: str, kw: dict[str, str]) -> None:
    from perfmodel.comm import CommCostModel

    topo = load_system(system, nodes=4, **kw)
    model, direct = CommCostModel(topo), CommCostModel(topo)
    gpus = topo.gpus[:: max(1, len(topo.gpus) // 12)]
    for a, b in itertools.permutations(gpus, 2):
        assert model.transfers.p2p_route(a, b) == direct.links.p2p_route(a, b), (a, b)


@pytest.mark.parametrize(("system", "kw"), SYSTEMS)
def test_link_routes_by_symmetry_equal_direct(system: str, kw: dict[str, str]) -> None:
    from search_only import SearchOnly

    from perfmodel.comm import CommCostModel

    topo = load_system(system, nodes=4, **kw)
    links = CommCostModel(topo).links
    direct = SearchOnly(topo, links.link_params)  # no symmetry shortcut: the full search
    nodes = [n for n in topo.graph.nodes if topo.server_of(n) >= 0]
    picks = nodes[:: max(1, len(nodes) // 40)]
    for a, b in itertools.permutations(picks, 2):
        try:
            want = direct.route(a, b)
        except Exception as exc:  # no route: the same error
            with pytest.raises(type(exc)):
                links.route(a, b)
            continue
        assert links.route(a, b) == want, (a, b)


def test_no_route_names_the_nodes_asked_about() -> None:
    from perfmodel.errors import TopologyError

    topo = load_system("dgx-a100", nodes=6)
    with pytest.raises(TopologyError, match="n3/nic7 to n5/nvswitch0"):
        R.route(topo, "n3/nic7", "n5/nvswitch0")  # an NVSwitch is no endpoint


def test_inside_twins_need_no_more_outside_links() -> None:
    """A server built alike inside has the first such server as its inside twin unless it has
    links leaving it from more nodes, or more node pairs sharing an outside switch."""
    topo = load_system("dgx-a100", nodes=3)
    sym = server_symmetry(topo)
    assert sym.twin == {1: 0, 2: 0}
    assert sym.twin_map(2)["n2/gpu3"] == "n0/gpu3"
    assert sym.twin_map(0) is None  # its own twin
    assert set(sym.exits[1]) == {f"n1/nic{i}" for i in range(8)}
    g = topo.graph.copy()
    # server 1: a second fabric port on nic0 (rail 1): nic0 and nic1 now share a switch
    g.add_edge("n1/nic0", "fabric/rail1", **g.edges["n1/nic0", "fabric/rail0"])
    # server 2: a CPU with a fabric port (a node that has no link out in server 0)
    g.add_edge("n2/cpu0", "fabric/rail2", **g.edges["n2/nic2", "fabric/rail2"])
    changed = server_symmetry(dataclasses.replace(topo, graph=g))
    assert changed.twin == {}
    assert changed.cls == {}  # attached unlike server 0 as well


def test_mirrored_compares_the_reverse_route_with_the_exchanged_one() -> None:
    """A rail route is mirrored (n1 -> n0 is n0 -> n1 with the servers exchanged); a search
    whose every path passes server 0's NIC is not, nor one that finds no route."""
    topo = load_system("dgx-a100", nodes=3)
    sym = server_symmetry(topo)
    assert sym.mirrored(0, "gpu0", "gpu0", lambda a, b: R.route(topo, a, b))
    assert sym.mirrored(0, "gpu0", "gpu0", lambda a, b: (a, "fabric/rail0", b))
    assert not sym.mirrored(0, "gpu0", "gpu1", lambda a, b: (a, "n0/nic0", "fabric/rail0", b))

    def refuse(a: str, b: str) -> tuple[str, ...]:
        raise TopologyError("no route", value=(a, b), where="test")

    assert not sym.mirrored(0, "gpu0", "gpu0", refuse)
