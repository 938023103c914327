"""A node's hop distances inside its server (``RouteSearch._inside_distances``) are kept per
node (issue 27): the kept tables are the search's, and whether a route inside a server
stays inside (``RouteSearch._stays_inside``, which reads them for both ends of every pair) is
decided as without the memo, on servers with and without NVSwitches, PCIe-only boxes and
fabric attachments on several nodes."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.comm.links import DirectedLinks
from perfmodel.errors import PerfModelError
from perfmodel.topology import load_system
from perfmodel.topology.schema import NodeKind

SYSTEMS = [
    ("dgx-a100", 3, {}),
    ("dgx1-v100", 2, {}),
    ("pcie-8xtitanx", 2, {"network": "10gbe"}),
    ("dgx-h100", 2, {"fabric_topology": "fat-tree"}),
]


@pytest.mark.parametrize(("system", "nodes", "kw"), SYSTEMS)
def test_kept_distances_decide_as_the_search(system: str, nodes: int, kw: dict) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    kept, fresh = DirectedLinks(topo), DirectedLinks(topo)
    fresh._inside_distances = fresh._search_inside  # type: ignore[method-assign]
    g = topo.graph
    checked = 0
    for server in (0, nodes - 1):
        nodes_here = sorted(n for n in g.nodes if g.nodes[n]["server"] == server)
        ends = [n for n in nodes_here if g.nodes[n]["kind"] in (NodeKind.GPU, NodeKind.NIC)]
        for n in nodes_here:
            assert kept._inside_distances(n) == fresh._search_inside(n)
            assert kept._inside_distances(n) is kept._inside_distances(n)  # kept
        for a, b in itertools.permutations(ends, 2):
            try:
                path = kept.route(a, b)
            except PerfModelError:  # no route (e.g. refused peer-to-peer): nothing to decide
                continue
            assert kept._stays_inside(a, b, path) == fresh._stays_inside(a, b, path), (a, b)
            checked += 1
    assert checked >= 20
