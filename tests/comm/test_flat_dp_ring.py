"""A data-parallel ring over many servers built alike costs little more than over a few
(issue 27 item 3): the transit nodes of a cluster of copies are read off a node's name beyond
``PATTERN_TRANSIT_SERVERS`` servers, and a summarised ring's NIC path type is read off its first
server. Both give what the whole tables give."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from perfmodel.comm.group import GroupAnalysis
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.nodes import PATTERN_TRANSIT_SERVERS, PatternTransit
from perfmodel.comm.ring_summary import ring_summary
from perfmodel.topology import load_system

WIDE = PATTERN_TRANSIT_SERVERS + 3

SYSTEMS = [
    ("dgx-a100", WIDE, {}),  # rails
    ("dgx-a100", WIDE, {"fabric_topology": "fat-tree"}),  # leaves and spines
    ("dgx1-v100", WIDE, {}),  # NCCL's P2P rule applied to the template
    ("dgx-h100", WIDE, {}),
]


@pytest.mark.parametrize(("system", "nodes", "kw"), SYSTEMS)
def test_pattern_transit_is_the_set_of_transit_nodes(system: str, nodes: int, kw: dict) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    got = DirectedLinks(topo).transit
    assert isinstance(got, PatternTransit)
    plain = DirectedLinks(dataclasses.replace(topo, pattern=None)).transit  # a graph pass
    assert isinstance(plain, frozenset)
    probes = [*topo.graph.nodes, "n0/", "n01/gpu0", f"n{nodes}/gpu0", "gpu0", 3, ("n0/gpu0",)]
    assert [x in got for x in probes] == [x in plain for x in probes]
    assert [x in got for x in probes] == [x in plain for x in probes]  # remembered answers
    assert len(got) == len(plain) and got == plain and plain == got
    assert set(got) == plain and hash(got) == hash(plain)
    back = pickle.loads(pickle.dumps(got))  # as the frozenset it equals
    assert type(back) is frozenset and back == plain and copy.deepcopy(got) == plain


def test_few_servers_keep_the_frozenset() -> None:
    topo = load_system("dgx-a100", nodes=PATTERN_TRANSIT_SERVERS)
    assert isinstance(DirectedLinks(topo).transit, frozenset)


@pytest.mark.parametrize(("system", "nodes", "kw"), SYSTEMS)
@pytest.mark.parametrize("per_server", [1, 2, 8])
def test_summarised_ring_net_path_is_the_first_servers(
    system: str, nodes: int, kw: dict, per_server: int
) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    links = DirectedLinks(topo)
    g = topo.gpus_per_node
    members = tuple(topo.gpus[s * g + i] for s in range(nodes) for i in range(per_server))
    analysis = GroupAnalysis(topo, links, None)
    parts = [members[i : i + per_server] for i in range(0, len(members), per_server)]
    assert ring_summary(links, members) is not None
    whole = GroupAnalysis(topo, DirectedLinks(topo), None)._net_path(parts)
    assert analysis._net_path(parts[:1]) == whole
    info, summary = analysis.build(members)
    assert summary is not None and (info.net_path, info.net_port_Bps, info.net_nics) == whole
