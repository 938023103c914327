"""A graph built by hand (the public API's ``Topology(name, graph)``) is checked where it enters.

Before wave 14 a hand-built graph reached routing unchecked: two GPUs of one server with one
local id gave a bare ``KeyError`` in ``comm/routes.py``'s ``_twin_route`` (and in the group
memo and the transfers' twin pairs), or silently wrong routes; a node without ``local_id`` or
``server`` a ``KeyError`` in ``Topology.gpus``. ``Topology`` now checks a graph no loader
validated (:func:`perfmodel.topology.schema.check_given_graph`): a :class:`TopologyError` naming
the nodes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.cli import main
from perfmodel.comm.model import CommCostModel
from perfmodel.errors import PerfModelError, TopologyError
from perfmodel.topology import Topology, export_dict, load_system, route
from perfmodel.topology.schema import NodeKind


def _two_servers() -> Topology:
    return load_system("dgx-a100", nodes=2)


def _hand_built(topo: Topology, change: Callable[[nx.Graph], None]) -> Topology:
    """``topo``'s graph copied, changed by ``change``, as a user builds a Topology by hand."""
    g = topo.graph.copy()
    change(g)
    return Topology("mine", g, topo.num_nodes, fabric=topo.fabric)


def test_duplicate_local_id_in_every_server_names_the_nodes() -> None:
    """The session-12 case: every server's gpu1 also called gpu0 (each server the other's inside
    twin). Before: constructed silently, then ``KeyError: 'n1/gpu0'`` from the twin maps."""
    topo = _two_servers()

    def dup(g: nx.Graph) -> None:
        for s in (0, 1):
            g.nodes[f"n{s}/gpu1"]["local_id"] = "gpu0"

    with pytest.raises(TopologyError) as err:
        _hand_built(topo, dup)
    assert "'n0/gpu0' and 'n0/gpu1' share local id 'gpu0' in server 0" in str(err.value)
    assert err.value.value == ("n0/gpu0", "n0/gpu1")
    assert err.value.where == "topology 'mine'"


def test_duplicate_local_id_in_one_server() -> None:
    """Only the last server's two GPUs share a local id (before: no error at all, the route
    between them read off the wrong node)."""

    def dup(g: nx.Graph) -> None:
        g.nodes["n1/gpu7"]["local_id"] = "gpu6"

    with pytest.raises(TopologyError, match="'n1/gpu6' and 'n1/gpu7' share local id 'gpu6'"):
        _hand_built(_two_servers(), dup)


def test_source_named_when_given() -> None:
    g = _two_servers().graph.copy()
    del g.nodes["n1/gpu3"]["local_id"]
    with pytest.raises(TopologyError, match=r"^my_graph.py: node 'n1/gpu3' lacks attribute"):
        Topology("mine", g, 2, source="my_graph.py")


def _edge_of(g: nx.Graph, node: str) -> tuple[str, str]:
    return next(iter(g.edges(node)))


def _set_node(key: str, value: object) -> Callable[[nx.Graph, str], None]:
    def change(g: nx.Graph, node: str) -> None:
        g.nodes[node][key] = value

    return change


def _del_node(key: str) -> Callable[[nx.Graph, str], None]:
    def change(g: nx.Graph, node: str) -> None:
        del g.nodes[node][key]

    return change


def _set_edge(key: str, value: object) -> Callable[[nx.Graph, str], None]:
    def change(g: nx.Graph, node: str) -> None:
        g.edges[_edge_of(g, node)][key] = value

    return change


def _del_edge(key: str) -> Callable[[nx.Graph, str], None]:
    def change(g: nx.Graph, node: str) -> None:
        del g.edges[_edge_of(g, node)][key]

    return change


def _isolate(g: nx.Graph, node: str) -> None:
    g.remove_edges_from(list(g.edges(node)))


def _share_first_local_id(g: nx.Graph, node: str) -> None:
    srv = g.nodes[node]["server"]
    others = [n for n, d in g.nodes(data=True) if d["server"] == srv and n != node]
    if others:  # a node alone in its server (a lone fabric switch) keeps its id
        g.nodes[node]["local_id"] = g.nodes[min(others)]["local_id"]


#: What a hand-built graph can get wrong that routing assumes (each refused by the schema).
MUTATIONS: dict[str, Callable[[nx.Graph, str], None]] = {
    "duplicate local id": _share_first_local_id,
    "no local_id": _del_node("local_id"),
    "no server": _del_node("server"),
    "no kind": _del_node("kind"),
    "kind as text": _set_node("kind", "gpu"),
    "server as text": _set_node("server", "1"),
    "no model": _del_node("model"),
    "unknown model": _set_node("model", "H900"),
    "no gpu_index": _del_node("gpu_index"),
    "gpu_index as text": _set_node("gpu_index", "0"),
    "GPU with no link": _isolate,
    "no bandwidth": _del_edge("bandwidth_Bps"),
    "zero bandwidth": _set_edge("bandwidth_Bps", 0.0),
    "negative latency": _set_edge("latency_s", -1e-6),
    "efficiency above 1": _set_edge("efficiency", 1.5),
    "family as text": _set_edge("family", "nvlink"),
    "count as text": _set_edge("count", "2"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutation_is_a_typed_error(name: str) -> None:
    """Each mutation of one GPU of server 1 is refused where the topology is made, by a typed
    error naming the GPU or its link."""
    topo = _two_servers()
    gpu = "n1/gpu5"
    with pytest.raises(PerfModelError) as err:
        _hand_built(topo, lambda g: MUTATIONS[name](g, gpu))
    assert gpu in str(err.value) or "gpu5" in str(err.value)


_SYSTEMS = ("dgx-a100", "dgx1-v100", "pcie-8x-server", "gb200-nvl72")


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    system=st.sampled_from(_SYSTEMS),
    nodes=st.sampled_from((1, 2)),
    mutation=st.sampled_from(sorted(MUTATIONS)),
    pick=st.integers(min_value=0, max_value=10_000),
    gpu_only=st.booleans(),
)
def test_mutated_catalogue_topologies_fail_typed_or_work(
    system: str, nodes: int, mutation: str, pick: int, gpu_only: bool
) -> None:
    """Fuzz: one mutation on one node (a GPU, or any node) of a catalogue topology; the
    topology is refused with a :class:`PerfModelError` or, where the mutation leaves a graph
    the schema accepts (a CPU with a text model, a switch's link...), routes, prices a
    collective and sends between GPUs, or says why not with a :class:`PerfModelError` naming
    the nodes (a CPU with no link: ``no route from gpu2 to cpu1``), never another exception."""
    topo = load_system(system, nodes=nodes)
    g0 = topo.graph
    nodes_ = list(topo.gpus) if gpu_only else [n for n in g0 if g0.degree(n) > 0]
    node = nodes_[pick % len(nodes_)]
    g = topo.graph.copy()
    try:
        MUTATIONS[mutation](g, node)
    except (KeyError, StopIteration):  # the mutation itself needs a key this node lacks
        return
    try:  # only the mutation may raise a bare KeyError: the Topology never
        mine = Topology("mine", g, topo.num_nodes, fabric=topo.fabric)
    except PerfModelError:
        return
    gpus = list(mine.gpus)
    try:
        route(mine, gpus[0], gpus[-1])
        model = CommCostModel(mine)
        assert model.collective("allreduce", 1e8, gpus).time_s > 0
        assert model.transfers_time([(gpus[0], gpus[-1])], 1e6) > 0
    except PerfModelError as exc:
        assert any(n in str(exc) for n in mine.graph)  # names a node


def test_valid_hand_built_graph_unchanged() -> None:
    """A valid hand-built copy is accepted and prices a collective exactly as the loaded
    topology does (the check changes nothing)."""
    topo = _two_servers()
    mine = Topology("mine", topo.graph.copy(), 2, fabric=topo.fabric)
    gpus = list(topo.gpus)
    a = CommCostModel(topo).collective("allreduce", 1e9, gpus, algorithm="ring").time_s
    b = CommCostModel(mine).collective("allreduce", 1e9, list(mine.gpus), algorithm="ring")
    assert b.time_s == a


def test_graph_checked_once() -> None:
    """Replacing fields of a loaded topology (same graph) does not check the graph again; a
    changed copy is checked, and recorded as perfmodel's own."""
    from perfmodel.topology import schema

    topo = load_system("dgx-a100")
    assert topo.graph in schema._OWN
    again = dataclasses.replace(topo, name="renamed")
    assert again.graph is topo.graph
    p2p = topo.with_p2p(False)
    assert p2p.graph is not topo.graph and p2p.graph in schema._OWN


def test_hand_given_graph_edited_after_a_topology_is_checked_again() -> None:
    """rev15b item 5: a hand-given graph that passed once, edited afterwards, then made into a
    second topology. Before: the identity memo let the second one through silently with two
    GPUs sharing a local id. Now every hand-given graph is checked, and never recorded."""
    from perfmodel.topology import schema
    from perfmodel.topology.schema import validate_graph

    g = load_system("dgx-a100").graph.copy()
    Topology("mine", g)
    validate_graph(g)  # the public check remembers nothing either
    g.nodes["gpu7"]["local_id"] = "gpu6"
    with pytest.raises(TopologyError, match="'gpu6' and 'gpu7' share local id 'gpu6'") as err:
        Topology("mine2", g)
    assert err.value.where == "topology 'mine2'"
    assert g not in schema._OWN


def test_calibrated_device_outside_catalogue_accepted() -> None:
    """A device the GPU catalogue lacks is accepted where the topology carries its spec
    (``device_specs``, ``--system calibrated``) and refused where it does not."""
    from perfmodel.hardware import get_gpu
    from perfmodel.topology.custom import device_system

    spec = dataclasses.replace(get_gpu("V100-SXM2-16GB"), name="my-cpu")
    topo = device_system(spec)
    assert topo.gpu_spec().name == "my-cpu"
    with pytest.raises(PerfModelError, match="my-cpu"):
        Topology("bare", topo.graph.copy())


def test_cli_json_with_shared_local_id_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topology JSON (``topo show --json``) whose gpu1 has gpu0's local id: exit status 2 with
    the node names, for ``predict`` and ``topo import -o`` (which writes nothing)."""
    data = export_dict(load_system("dgx-a100"))
    for n in data["nodes"]:
        if n["id"] == "gpu1":
            n["local_id"] = "gpu0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    argv = ["predict", "--system", str(bad), "--model", "gpt2", "--batch-per-gpu", "4"]
    assert main(argv) == 2
    assert "nodes 'gpu0' and 'gpu1' share local id 'gpu0'" in capsys.readouterr().err
    out = tmp_path / "out.toml"
    assert main(["topo", "import", str(bad), "-o", str(out)]) == 2
    assert "share local id" in capsys.readouterr().err
    assert not out.exists()


def test_kind_enum_still_required() -> None:
    """``kind`` must be the NodeKind value (strings are parsed at the file edge)."""
    g = nx.Graph()
    g.add_node("g0", kind=NodeKind.GPU, server=0, local_id="g0", model="A100-SXM4-80GB")
    g.nodes["g0"]["gpu_index"] = 0
    assert Topology("one", g).num_gpus == 1
