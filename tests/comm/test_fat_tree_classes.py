"""Fabric routes between servers of a fat tree by symmetry (issue 14): the leaf pairs of a fat
tree are one route search per class of pairs up to a relabelling of the leaves
(:meth:`perfmodel.comm.links.DirectedLinks._fabric_class`), and the ring analysis of a
2,048-server fat tree makes O(1) of its lazily made servers. Every route and every
:class:`~perfmodel.comm.model.GroupInfo` field equals the search-only, listed analysis
(:class:`SearchOnly`)."""

from __future__ import annotations

import dataclasses
import random

import pytest

import perfmodel.comm.group as comm_group
from perfmodel.comm import CommCostModel
from perfmodel.comm.channels import LazyChannels
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.nodes import nics_of
from perfmodel.comm.ring_summary import ring_summary
from perfmodel.topology import load_system
from perfmodel.topology.cluster import build_cluster
from perfmodel.topology.files import read_server_file
from perfmodel.topology.nccl_p2p import with_nccl_p2p_rule
from tests.comm.search_only import SearchOnly


def _fat_tree(system: str, nodes: int, radix: int, oversub: float, nics: int | None = None):
    """``system`` x ``nodes`` on a fat tree of ``radix`` ports per leaf."""
    base = load_system(system, nodes=2, fabric_topology="fat-tree")
    desc = read_server_file(base.source)
    fabric = dataclasses.replace(
        base.fabric, leaf_radix=radix, oversubscription=oversub, nics_per_node=nics
    )
    return with_nccl_p2p_rule(build_cluster(desc, nodes, fabric))


def _random_cases(n: int, seed: int = 14):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        system = rng.choice(["dgx-a100", "dgx1-v100", "pcie-8x-server", "dgx-h100"])
        out.append((system, rng.randint(3, 9), rng.randint(2, 24), rng.choice([1.0, 2.0, 3.0])))
    return out


CASES = _random_cases(8)


@pytest.mark.parametrize(("system", "nodes", "radix", "oversub"), CASES)
def test_fabric_routes_equal_search(system, nodes, radix, oversub) -> None:
    """Every NIC pair between servers: the route read off its class is the searched one."""
    topo = _fat_tree(system, nodes, radix, oversub)
    links, plain = DirectedLinks(topo), SearchOnly(topo)
    nics = [x for s in range(nodes) for x in nics_of(topo, s)]
    fabric = links.server_nodes[-1]
    for a in nics:
        for b in nics:
            if links.server[a] != links.server[b]:
                got = links._fabric_route(a, b, fabric)
                assert got == plain.route(a, b), (a, b)
    # fewer searches than leaf pairs: the classes were used
    assert len(links._fabric_classes) <= 4


@pytest.mark.parametrize(("system", "nodes", "radix", "oversub"), CASES)
def test_group_info_equals_search_only(system, nodes, radix, oversub, monkeypatch) -> None:
    topo = _fat_tree(system, nodes, radix, oversub)
    gpn, gs = topo.gpus_per_node, topo.gpus
    model = CommCostModel(topo)
    for name, group in {
        "all": gs,
        "one per server": gs[1::gpn],
        "two per server": tuple(g for i, g in enumerate(gs) if i % gpn in (0, gpn - 1)),
    }.items():
        fast = model.groups.build(tuple(group))
        with monkeypatch.context() as m:
            m.setattr(comm_group, "ring_summary", lambda *a, **k: None)
            direct = CommCostModel(topo, links=SearchOnly(topo)).groups.build(tuple(group))
        for f in dataclasses.fields(fast):
            a, b = getattr(fast, f.name), getattr(direct, f.name)
            assert (tuple(a) == tuple(b)) if f.name == "channels" else (a == b), (name, f.name)


def test_fabric_key_tells_apart_the_last_short_leaf() -> None:
    """A last leaf with fewer ports has fewer uplinks (oversubscribed): another key, so no
    pair through it is read off a full leaf's pair."""
    topo = _fat_tree("dgx-a100", 5, 12, 3.0)  # 40 ports: leaves of 12, 12, 12, 4
    links = DirectedLinks(topo)
    keys = [links._fabric_key(f"fabric/leaf{i}") for i in range(4)]
    assert keys[0] == keys[1] == keys[2] != keys[3]
    assert links._fabric_key("fabric/spine") != keys[0]


@pytest.mark.parametrize(("system", "kw"), [("dgx-a100", {}), ("dgx1-v100", {})])
def test_ring_analysis_of_2048_servers_makes_few(system, kw) -> None:
    """The data-parallel ring of a 2,048-server fat tree: a handful of searches (one per class
    of leaf pairs) and of servers made in the graph, not 1,640 searches and 2,048 servers."""
    topo = load_system(system, nodes=2048, fabric_topology="fat-tree", **kw)
    filler = topo.graph._node._filler
    model = CommCostModel(topo)
    before = set(filler.made)
    info = model.group_info(topo.gpus)
    assert isinstance(info.channels, LazyChannels) and info.channels._items is None
    assert ring_summary(model.links, topo.gpus) is not None
    assert len(filler.made - before) <= 8, sorted(filler.made - before)
    assert not filler.complete
    assert len(model.links._fabric_classes) <= 4
