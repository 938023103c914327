"""A group inside one server reuses the analysis of the same local ids in the first server of its
class (:mod:`perfmodel.topology.symmetry`), relabelled, only where the servers are
interchangeable; the result equals a direct analysis."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.topology import load_system
from perfmodel.topology.symmetry import server_symmetry

PICKS = ((0, 1, 2, 3, 4, 5, 6, 7), (0, 1), (0, 2, 4, 6), (3, 5, 7))


@pytest.mark.parametrize(
    ("system", "kw"),
    [("dgx-a100", {}), ("dgx-a100", {"fabric_topology": "fat-tree"}), ("dgx1-v100", {})],
)
def test_twin_equals_direct_analysis(system: str, kw: dict[str, str]) -> None:
    topo = load_system(system, nodes=3, **kw)
    gpn = topo.gpus_per_node
    model = CommCostModel(topo)
    for server in (1, 2):
        for pick in PICKS:
            group = tuple(topo.gpus[server * gpn + i] for i in pick if i < gpn)
            twin = model.group_info(group)
            direct = CommCostModel(topo).groups.build(group)
            assert twin == direct, (server, pick)
    sym = server_symmetry(topo)
    assert sym.cls.get(1) == sym.cls[0]  # interchangeable (fat tree: server 2 on a new leaf)
    assert sym.twin == {1: 0, 2: 0}  # built alike inside: one-server groups read off server 0


def test_different_server_is_analysed_directly() -> None:
    topo = load_system("dgx-a100", nodes=2)
    g = topo.graph.copy()
    u, v = next((u, v) for u, v in g.edges if u.startswith("n1/") and v.startswith("n1/"))
    g.edges[u, v]["bandwidth_Bps"] *= 0.5
    other = dataclasses.replace(topo, graph=g)
    model = CommCostModel(other)
    group = tuple(other.gpus[8:16])
    assert model.group_info(group) == CommCostModel(other).groups.build(group)
    assert server_symmetry(other).cls.get(1) is None
    assert server_symmetry(other).twin == {}
