"""The NIC tables of the server-level sharing factor (topology/nic_tables.py) read one server of a
cluster built by copying, not the whole graph (issue 14: a whole-graph pass makes every server
of the lazily built cluster, topology/lazy.py), and equal the whole-graph answers."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.topology import load_system
from perfmodel.topology.nic_tables import near_nic_sets, nics_per_server

CASES = [
    ("dgx-a100", 6, None),  # rails
    ("dgx-a100", 7, "fat-tree"),  # a server split over two leaves
    ("dgx1-v100", 4, None),  # NCCL's P2P rule copies the graph
    ("dgx-h100", 3, "single-switch"),
]


@pytest.mark.parametrize(("system", "nodes", "fabric"), CASES)
def test_nic_tables_read_one_server_and_equal_the_whole_graph(
    system: str, nodes: int, fabric: str | None
) -> None:
    topo = load_system(system, nodes=nodes, fabric_topology=fabric)
    near, per_server = near_nic_sets(topo), nics_per_server(topo)
    filler = topo.graph._node._filler
    # not every server made (server 0 read; a route may read its neighbour in the fabric)
    assert not filler.complete and len(filler.made) <= 2
    whole = dataclasses.replace(topo, pattern=None)  # the same graph, read whole
    assert near == near_nic_sets(whole) and list(near) == list(near_nic_sets(whole))
    assert per_server == nics_per_server(whole)
    assert list(per_server) == list(nics_per_server(whole))


def test_nic_counts_hand_counted() -> None:
    # DGX A100 (topologies/dgx-a100.toml): 8 HDR NICs per server, two GPUs and two NICs behind
    # each of its four PCIe switches
    topo = load_system("dgx-a100", nodes=3)
    assert nics_per_server(topo) == {0: 8, 1: 8, 2: 8}
    near = near_nic_sets(topo)
    pairs = {f"gpu{i}": (f"nic{i // 2 * 2}", f"nic{i // 2 * 2 + 1}") for i in range(8)}
    assert {gpu: nics for gpu, (nics, _, _) in near.items()} == pairs
