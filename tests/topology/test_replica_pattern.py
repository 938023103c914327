"""A cluster built by copying server 0 records how it was built (issue 14): its server symmetry
and its routes come from that record, and they equal the full computation on the graph."""

from __future__ import annotations

import dataclasses
import itertools
import pickle

import pytest

from perfmodel.topology import load_system
from perfmodel.topology.model import Topology
from perfmodel.topology.routing import route
from perfmodel.topology.schema import NodeKind
from perfmodel.topology.symmetry import _symmetry_of_graph, server_symmetry

CASES = [
    ("dgx-a100", 5, None),  # rails
    ("dgx-a100", 7, "fat-tree"),  # 20-port leaves: servers split over two leaves
    ("dgx-a100", 3, "single-switch"),
    ("dgx1-v100", 4, None),
    ("dgx-h100", 4, "fat-tree"),
]
SYMMETRY_ONLY = [("dgx-a100", 37, "fat-tree"), ("dgx1-v100", 12, "single-switch")]


def _full(topo: Topology) -> Topology:
    """The same cluster without its build record: every answer computed from the graph."""
    return dataclasses.replace(topo, pattern=None)


def _same_symmetry(a: object, b: object) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x == y, f.name
        if isinstance(x, dict):  # insertion order too
            assert list(x) == list(y), f.name
            for k, v in x.items():
                if isinstance(v, dict):
                    assert list(v) == list(y[k]), f.name


@pytest.mark.parametrize(("system", "nodes", "fabric"), CASES + SYMMETRY_ONLY)
def test_symmetry_from_the_build_equals_the_full_comparison(
    system: str, nodes: int, fabric: str | None
) -> None:
    topo = load_system(system, nodes=nodes, fabric_topology=fabric)
    assert topo.pattern is not None and topo.pattern.describes(topo)
    _same_symmetry(server_symmetry(topo), _symmetry_of_graph(topo))


def test_fat_tree_classes_follow_the_leaves() -> None:
    # DGX A100, 8 NICs per server on 20-port leaves: servers 0, 1 fill leaf 0, server 2 is
    # split over leaves 0 and 1, servers 3, 4 fill leaf 1, ... (period 5 servers, 2 leaves)
    sym = server_symmetry(load_system("dgx-a100", nodes=7, fabric_topology="fat-tree"))
    assert sym.ordered == {0: (0, 1), 1: (3, 4), 2: (5, 6)}
    assert set(sym.twin) == {1, 2, 3, 4, 5, 6}  # all alike inside, exits of server 0 suffice
    # with 37 servers n30/ .. n36/ sort between n3/ and n4/: 3 and 4 are no class
    sym = server_symmetry(load_system("dgx-a100", nodes=37, fabric_topology="fat-tree"))
    assert sym.ordered[0] == (0, 1) and 3 not in sym.cls and 4 not in sym.cls
    assert sym.cls[35] == sym.cls[36]


@pytest.mark.parametrize(("system", "nodes", "fabric"), CASES)
def test_routes_equal_the_whole_graph_search(system: str, nodes: int, fabric: str | None) -> None:
    topo = load_system(system, nodes=nodes, fabric_topology=fabric)
    full = _full(topo)
    ends = list(topo.gpus) + [
        n for n in topo.nodes_of_kind(NodeKind.NIC) + topo.nodes_of_kind(NodeKind.CPU)
    ]
    for a, b in itertools.permutations(ends[:: max(1, len(ends) // 40)], 2):
        assert route(topo, a, b) == route(full, a, b), (a, b)


def test_uniform_changes_keep_the_record_other_changes_drop_it() -> None:
    topo = load_system("dgx-a100", nodes=3)
    denied = topo.with_p2p_denied([("gpu0", "gpu1")])
    assert denied.pattern is not None and denied.pattern.describes(denied)
    _same_symmetry(server_symmetry(denied), _symmetry_of_graph(denied))
    off = topo.with_p2p(False)
    assert off.pattern is not None and off.pattern.describes(off)
    sent = pickle.loads(pickle.dumps(topo))  # a worker process gets the record with its graph
    assert sent.pattern is not None and sent.pattern.describes(sent)
    g = topo.graph.copy()  # one server changed: the record no longer describes the graph
    g.edges["n1/gpu0", "n1/nvswitch0"]["count"] = 1
    changed = dataclasses.replace(topo, graph=g)
    assert changed.pattern is not None and not changed.pattern.describes(changed)
    # server 1 differs; 0 and 2 are alike but n1/ sorts between them: no class
    assert server_symmetry(changed).cls == {}


def test_connectivity_proved_from_the_copies() -> None:
    # a cluster whose copies are disconnected is not proved and the whole-graph check names
    # the GPU: test_cluster_template.py::test_disconnected_gpu_of_a_cluster_is_named
    from perfmodel.topology.cluster import _copies_connected

    for system, nodes, fabric in CASES:
        topo = load_system(system, nodes=nodes, fabric_topology=fabric)
        assert topo.pattern is not None and _copies_connected(topo.graph, topo.pattern)
    # servers grouped by the fabric components they reach (a fat tree's leaves under one spine:
    # one group), not by leaf: a server recorded without fabric links is still found; one
    # with NICs 0-3 linked alone is connected (GPUs 4-7 reach them through the server's PCIe
    # switches and CPUs, one transit component)
    topo = load_system("dgx-a100", nodes=7, fabric_topology="fat-tree")
    p = topo.pattern
    assert p is not None
    for cut, connected in (((), False), (p.attach[3][:4], True)):
        attach = (*p.attach[:3], cut, *p.attach[4:])
        assert _copies_connected(topo.graph, dataclasses.replace(p, attach=attach)) is connected


@pytest.mark.parametrize(("system", "nodes", "fabric"), CASES)
def test_rank_order_and_server_nodes_from_the_build(
    system: str, nodes: int, fabric: str | None
) -> None:
    topo = load_system(system, nodes=nodes, fabric_topology=fabric)
    full = _full(topo)
    assert topo.gpus == full.gpus and topo.gpus_per_node == full.gpus_per_node
    for s in (0, nodes - 1, -1):
        assert topo.server_nodes(s) == full.server_nodes(s)


def test_attachments_hand_written_and_shared_by_servers_wired_alike() -> None:
    # DGX A100 on rails: NIC k of every server on rail k, one port each; one attachment for all
    # servers (one tuple: the builder writes it once, not once per server of 2,048)
    rails = load_system("dgx-a100", nodes=5).pattern
    assert rails is not None
    want = tuple((f"nic{k}", f"fabric/rail{k}", 1) for k in range(8))
    assert rails.attach == (want,) * 5
    assert all(a is rails.attach[0] for a in rails.attach)
    # 20-port leaves: servers 0, 1 fill leaf 0, server 2 is split over leaves 0 and 1 (NICs
    # 0-3, 4-7), servers 3, 4 on leaf 1, servers 5, 6 on leaf 2
    tree = load_system("dgx-a100", nodes=7, fabric_topology="fat-tree").pattern
    assert tree is not None
    on = [tuple((f"nic{k}", f"fabric/leaf{leaf}", 1) for k in range(8)) for leaf in range(3)]
    split = tuple((f"nic{k}", f"fabric/leaf{0 if k < 4 else 1}", 1) for k in range(8))
    assert tree.attach == (on[0], on[0], split, on[1], on[1], on[2], on[2])
    assert tree.attach[0] is tree.attach[1] and tree.attach[5] is tree.attach[6]
