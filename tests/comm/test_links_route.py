"""``DirectedLinks.route`` (comm's server-restricted search, for speed on large clusters) gives the
same path as ``perfmodel.topology.route`` (the documented routing rule) on cluster graphs."""

import pytest

from perfmodel.comm.links import DirectedLinks
from perfmodel.topology import load_system, route
from perfmodel.topology.schema import NodeKind

_ENDPOINTS = (NodeKind.GPU, NodeKind.NIC, NodeKind.CPU)


@pytest.mark.parametrize(
    ("system", "nodes"),
    [("dgx1-v100", 3), ("dgx-a100", 3), ("pcie-8x-server", 2), ("dgx2-v100", 2)],
)
def test_links_route_is_the_topology_route(system, nodes):
    topo = load_system(system, nodes=nodes)
    links = DirectedLinks(topo)
    ends = [n for n, d in topo.graph.nodes(data=True) if d["kind"] in _ENDPOINTS]
    pairs = [(a, b) for a in ends for b in ends if a != b]
    assert len(pairs) > 100
    differ = [(a, b) for a, b in pairs if links.route(a, b) != route(topo, a, b)]
    assert differ == []
