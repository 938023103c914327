"""Each GPU's NIC (``RouteSearch.gpu_nic``) read off the first server built alike
(``RouteSearch._alike_nics``, issue 27: one breadth-first search per GPU, 10,875 of them for a
450-GPU group on 200 GB200 NVL72 racks) is the one search per GPU's answer
(``NICS_BY_ALIKE`` off), on rails, fat trees, NVL72 racks, PCIe boxes and a cluster whose last
server is built otherwise (a GPU fewer)."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.routes import RouteSearch
from perfmodel.topology import Topology, load_system
from perfmodel.topology.schema import NodeKind

SYSTEMS = [
    ("dgx-h100", 3, {}),
    ("dgx-a100", 4, {"fabric_topology": "fat-tree"}),
    ("gb200-nvl72", 3, {}),
    ("pcie-8xtitanx", 2, {"network": "10gbe"}),
    ("dgx1-v100", 3, {}),
]


def _answers(topo: Topology, alike: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(RouteSearch, "NICS_BY_ALIKE", alike)
    links = DirectedLinks(topo)
    g = topo.graph
    gpus = sorted(n for n in g.nodes if g.nodes[n]["kind"] is NodeKind.GPU)
    got = {x: links.gpu_nic(x) for x in reversed(gpus)}  # last server first: no order luck
    got["read off"] = sum(1 for v in links._inside_nics.values() if v)
    return got


def _uneven(topo: Topology) -> Topology:
    """``topo`` with the last server's last GPU removed (a server built otherwise)."""
    g = topo.graph.copy()
    last = max(d["server"] for _, d in g.nodes(data=True))
    gpus = [n for n, d in g.nodes(data=True) if d["server"] == last and d["kind"] is NodeKind.GPU]
    g.remove_node(max(gpus, key=lambda n: g.nodes[n]["gpu_index"]))
    return dataclasses.replace(topo, graph=g, pattern=None)


@pytest.mark.parametrize(("system", "nodes", "kw"), SYSTEMS)
@pytest.mark.parametrize("uneven", [False, True])
def test_alike_nics_equal_the_searches(
    system: str, nodes: int, kw: dict, uneven: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    if uneven:
        topo = _uneven(topo)
    fast = _answers(topo, True, monkeypatch)
    direct = _answers(topo, False, monkeypatch)
    assert direct.pop("read off") == 0
    used = fast.pop("read off")
    assert fast == direct
    assert used == (2 if uneven else 1)  # the door was taken: one search per kind of server
    assert any(v is not None for v in fast.values())


def test_nvl72_racks_are_read_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """On NVL72 racks (NICs reached from a GPU only through its CPU, the others through the
    fabric) every rack is read off rack 0: one search per rack, not one per GPU."""
    topo = load_system("gb200-nvl72", nodes=3)
    monkeypatch.setattr(RouteSearch, "NICS_BY_ALIKE", True)
    links = DirectedLinks(topo)
    calls = []
    search = links._searched_nics
    monkeypatch.setattr(links, "_searched_nics", lambda s: calls.append(s) or search(s))
    for x in topo.gpus:
        links.gpu_nic(x)
    assert calls == []
    assert links._inside_nics[0]
