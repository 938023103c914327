"""A cluster is server 0 built from its description and copied (issue 14): the copies equal the
servers built one by one, and validation still sees the whole graph."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from perfmodel.errors import TopologyError
from perfmodel.topology import load_system
from perfmodel.topology.builders import system_path
from perfmodel.topology.cluster import add_server
from perfmodel.topology.files import read_server_file


@pytest.mark.parametrize(("system", "nodes"), [("dgx1-v100", 5), ("dgx-a100", 3), ("dgx2-v100", 2)])
def test_copies_equal_servers_built_one_by_one(system: str, nodes: int) -> None:
    topo = load_system(system, nodes=nodes)
    desc = read_server_file(system_path(system), gpu_override=None)
    ref = nx.Graph()
    for s in range(nodes):
        add_server(ref, desc, s, f"n{s}/")
    g = topo.graph
    server_nodes = [n for n, srv in g.nodes(data="server") if srv != -1]
    # same nodes, same order, same attributes (attribute order included)
    assert server_nodes == list(ref.nodes)
    for n in server_nodes:
        # less NCCL's P2P rule, which loading applies (DGX-1V: NVB pairs denied)
        assert [kv for kv in g.nodes[n].items() if kv[0] != "p2p_denied"] == list(
            ref.nodes[n].items()
        )
        # same neighbours in the same order; fabric links come after the server's own
        inside = [v for v in g.adj[n] if g.nodes[v]["server"] != -1]
        assert inside == list(ref.adj[n])
        for v in inside:
            assert g.edges[n, v] == ref.edges[n, v]
    # every copy owns its node attribute dicts; its links share server 0's attribute dicts
    # (the graph is read-only), also after NCCL's P2P rule changed every server alike
    # (DGX-1V: with_p2p_denied, topology/lazy.changed_copy), and a copy of the graph gives
    # every link its own
    link = desc.links[0]
    dicts = [g.edges[f"n{s}/{link.a}", f"n{s}/{link.b}"] for s in range(nodes)]
    nodes_d = [g.nodes[f"n{s}/{link.a}"] for s in range(nodes)]
    assert len({id(d) for d in nodes_d}) == nodes
    assert len({id(d) for d in dicts}) == 1
    c = g.copy()
    copied = [c.edges[f"n{s}/{link.a}", f"n{s}/{link.b}"] for s in range(nodes)]
    assert len({id(d) for d in copied}) == nodes


# Two GPUs of a server with no path between them inside the server: each reaches the other only
# through its own NIC and the fabric.
SPLIT = """
[system]
name = "split"
description = "two GPUs, each with its own CPU and NIC, the CPUs not linked"
sources = ["test"]
gpu = "V100-PCIE-16GB"
[system.fabric]
network = "ib-edr"
topology = "single-switch"
nics_per_node = 2

[[node]]
id = "cpu0"
kind = "cpu"
[[node]]
id = "cpu1"
kind = "cpu"
[[node]]
id = "gpu0"
kind = "gpu"
[[node]]
id = "gpu1"
kind = "gpu"
[[node]]
id = "nic0"
kind = "nic"
[[node]]
id = "nic1"
kind = "nic"

[[link]]
a = "cpu0"
b = "gpu0"
tech = "pcie3-x16"
[[link]]
a = "cpu1"
b = "gpu1"
tech = "pcie3-x16"
[[link]]
a = "cpu0"
b = "nic0"
tech = "pcie3-x16"
[[link]]
a = "cpu1"
b = "nic1"
tech = "pcie3-x16"
"""


def test_connectivity_checked_on_the_whole_cluster(tmp_path: Path) -> None:
    path = tmp_path / "split.toml"
    path.write_text(SPLIT)
    with pytest.raises(TopologyError, match="disconnected"):
        load_system(str(path))  # one server: gpu1 cannot reach gpu0
    topo = load_system(str(path), nodes=2)  # through the NICs and the switch: valid
    assert topo.num_gpus == 4


def test_disconnected_gpu_of_a_cluster_is_named(tmp_path: Path) -> None:
    path = tmp_path / "split.toml"
    path.write_text(SPLIT.replace('[[link]]\na = "cpu1"\nb = "nic1"\ntech = "pcie3-x16"\n', ""))
    with pytest.raises(TopologyError, match=r"GPU 'n0/gpu1' cannot reach GPU 'n0/gpu0'"):
        load_system(str(path), nodes=3)
