"""Servers whose P2P rule refuses GPU pairs (DGX-1, PCIe-8x hosts; host-memory routes) are
analysed by :func:`perfmodel.comm.ring_summary.ring_summary` like any servers built alike (issue 14:
a 2,048-server DGX-1 walked every hop of its 16,384-rank ring): every field of the
:class:`~perfmodel.comm.model.GroupInfo` equals the direct analysis over the listed channels
with every route searched (:class:`SearchOnly`)."""

from __future__ import annotations

import dataclasses

import pytest

import perfmodel.comm.group as comm_group
from perfmodel.comm import CommCostModel
from perfmodel.comm.channels import LazyChannels
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.ring_summary import ring_summary
from perfmodel.topology import load_system
from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule
from tests.comm.search_only import SearchOnly


def _direct(topo, group, monkeypatch):
    """The analysis over the listed channels, every route searched."""
    with monkeypatch.context() as m:
        m.setattr(comm_group, "ring_summary", lambda *a, **k: None)
        return CommCostModel(topo, links=SearchOnly(topo)).groups.build(tuple(group))


def _same(fast, direct, name) -> None:
    for f in dataclasses.fields(fast):
        a, b = getattr(fast, f.name), getattr(direct, f.name)
        if f.name == "channels":
            assert tuple(a) == tuple(b), name
        else:
            assert a == b, (name, f.name)


def _groups(topo):
    gpn, gs = topo.gpus_per_node, topo.gpus
    return {
        "all": gs,
        "one per server": gs[1::gpn],
        "two per server": tuple(g for i, g in enumerate(gs) if i % gpn in (0, gpn - 1)),
        "first half": tuple(g for i, g in enumerate(gs) if i % gpn < gpn // 2),
        "refused pair": tuple(g for i, g in enumerate(gs) if i % gpn in (0, 5)),
    }


@pytest.mark.parametrize(
    ("system", "nodes", "kw"),
    [
        ("dgx1-v100", 2, {}),
        ("dgx1-v100", 5, {}),  # servers across fat-tree leaves
        ("dgx1-v100", 3, {"fabric_topology": "rail"}),
        ("pcie-8x-server", 3, {}),
        ("pcie-8x-server", 4, {"fabric_topology": "fat-tree", "oversubscription": 2.0}),
    ],
)
def test_refused_pairs_summarised_as_direct(system, nodes, kw, monkeypatch) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    model = CommCostModel(topo)
    assert model.links.p2p_denied  # the P2P rule refuses pairs in every server
    shm = set()
    for name, group in _groups(topo).items():
        fast = model.groups.build(tuple(group))
        assert ring_summary(model.links, group) is not None, name
        assert isinstance(fast.channels, LazyChannels)
        _same(fast, _direct(topo, group, monkeypatch), name)
        shm.add(fast.shm)
    assert shm == {True, False}  # host-memory pairs in some groups, not in others


def test_no_p2p_at_all_summarised(monkeypatch) -> None:
    """``--p2p off``: every GPU pair of a PCIe host through host memory (all hops SHM)."""
    topo = load_system("pcie-8x-server", nodes=3).with_p2p(False)
    model = CommCostModel(topo)
    assert model.links.no_p2p
    fast = model.groups.build(topo.gpus)
    assert isinstance(fast.channels, LazyChannels) and fast.shm
    _same(fast, _direct(topo, topo.gpus, monkeypatch), "all")


def test_intel_p2p_charge_keeps_the_direct_path(monkeypatch) -> None:
    """NCCL 2.0's rule on Intel hosts allows P2P through one CPU, charged 6/5 per byte
    (:func:`~perfmodel.comm.pcie_p2p.p2p_charge`): fractional weights, not summarised."""
    topo = with_nccl_p2p_rule(load_system("pcie-8xtitanx", nodes=2), NcclRelease(2, 0))
    model = CommCostModel(topo)
    assert ring_summary(model.links, topo.gpus) is None
    _same(model.groups.build(topo.gpus), _direct(topo, topo.gpus, monkeypatch), "all")


def test_rule_in_one_server_only_is_not_summarised(monkeypatch) -> None:
    """A graph whose servers refuse different pairs (no build record: one server's GPUs
    changed) has servers of different signatures: no common inside twin, the direct path."""
    topo = load_system("dgx1-v100", nodes=3)
    g = topo.graph.copy()
    for n in topo.gpus[8:16]:  # server 1: gpu0 refuses nothing, nor is refused
        data = g.nodes[n]
        left = (
            () if n == topo.gpus[8] else tuple(x for x in data.get("p2p_denied", ()) if x != "gpu0")
        )
        if left:
            data["p2p_denied"] = left
        else:
            data.pop("p2p_denied", None)
    changed = dataclasses.replace(topo, graph=g)
    links = DirectedLinks(changed)
    assert links._pattern is None
    assert ring_summary(links, changed.gpus) is None
    fast = CommCostModel(changed).groups.build(changed.gpus)
    _same(fast, _direct(changed, changed.gpus, monkeypatch), "all")


def test_shm_read_once_per_shape() -> None:
    """On 64 DGX-1 servers the host-memory question is asked of one server's pairs."""
    topo = load_system("dgx1-v100", nodes=64)
    links = DirectedLinks(topo)
    assert links.uses_shm(topo.gpus)
    assert {links.server[a] for a, _ in links._shm} == {0}
    assert not links.uses_shm(topo.gpus[1::8])


def test_denied_table_answers_per_gpu() -> None:
    """The P2P exceptions of a cluster of copies are answered per GPU asked, and read whole
    are every server's GPUs with server 0's exceptions by local id (the eager table)."""
    topo = load_system("dgx1-v100", nodes=3)
    links = DirectedLinks(topo)
    nodes = topo.graph.nodes
    eager = {n: frozenset(nodes[n]["p2p_denied"]) for n in topo.gpus if nodes[n].get("p2p_denied")}
    denied = links.p2p_denied
    assert eager and dict(denied) == eager and len(denied) == len(eager)
    assert list(denied) == [n for s in range(3) for n in eager if n.startswith(f"n{s}/")]
    for n in (*topo.gpus, "n1/cpu0", "fabric/switch0", "nowhere"):
        assert (n in denied) == (n in eager)
        assert denied.get(n) == eager.get(n)
