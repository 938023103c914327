"""Ring packings read off an automorphism of the server (issue 14,
``GroupAnalysis._image_pack``, ``symmetry.member_automorphism``): GPUs 4-7 of a DGX A100 are
the image of GPUs 0-3 (the other PCIe complexes, CPU and NICs), so their packing is one
search; every packing equals the group's own search, bit for bit, on several servers; groups
that are no image, and packings a name decided, are searched."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm import rings as rg
from perfmodel.comm.links import DirectedLinks
from perfmodel.comm.rings import pack_rings
from perfmodel.topology import Topology, load_system
from perfmodel.topology.symmetry import member_automorphism


def _gpus(topo, ids: tuple[int, ...]) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    return tuple(topo.gpus[i] for i in ids)


GROUPS = [
    (0, 1, 2, 3),
    (4, 5, 6, 7),
    (5, 4, 7, 6),  # an image of (0, 1, 2, 3) in another order
    (2, 3, 0, 1),
    (0, 2, 4, 6),
    (1, 3, 5, 7),
    (0, 1),
    (2, 3),
    (6, 7),
    (1, 2),
]


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100", "dgx1-v100", "pcie-8x-server"])
def test_packings_equal_own_search(system: str) -> None:
    """On two servers (a lone server is in no class: no image is ever read), every packing,
    read off an image or not, equals the group's own search; on the DGX A100 and H100 some
    are read off an image (the test reaches ``_image_pack``)."""
    topo = load_system(system, nodes=2)
    model = CommCostModel(topo)
    hits = 0
    real = model.groups.analysis._image_pack

    def counted(members):  # type: ignore[no-untyped-def]
        nonlocal hits
        got = real(members)
        hits += got is not None
        return got

    model.groups.analysis._image_pack = counted  # type: ignore[method-assign]
    for ids in GROUPS:
        group = _gpus(topo, ids)
        direct = pack_rings(DirectedLinks(topo, model.link_params), group)
        assert model.groups.analysis.packed(group) == direct, (system, ids)
        own = CommCostModel(topo)
        own.groups.analysis._image_pack = lambda m: None  # type: ignore[method-assign]
        got, want = model.group_info(group), own.group_info(group)
        assert (got.ring_bw_Bps, got.channels) == (want.ring_bw_Bps, want.channels)
    if system in ("dgx-a100", "dgx-h100"):
        assert hits > 0


def _searched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The member tuples every ring-packing search is run on from now on (in order)."""
    searched: list[tuple[str, ...]] = []
    real = rg._pack_rings
    monkeypatch.setattr(
        rg, "_pack_rings", lambda links, m, c: searched.append(m) or real(links, m, c)
    )
    return searched


def test_dgx_a100_halves_pack_once(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    searched = _searched(monkeypatch)
    low, high = _gpus(topo, (0, 1, 2, 3)), _gpus(topo, (4, 5, 6, 7))
    a = model.collective("allreduce", 2**26, low)
    b = model.collective("allreduce", 2**26, high)
    assert searched == [low]
    assert a.time_s == b.time_s
    model.group_info(_gpus(topo, (0, 2, 4, 6)))  # no image of GPUs 0-3: searched
    assert len(searched) == 2


def test_member_automorphism_images_and_misses() -> None:
    topo = load_system("dgx-a100")
    nodes = frozenset(topo.graph.nodes)
    fwd = member_automorphism(topo, nodes, _gpus(topo, (0, 1, 2, 3)), _gpus(topo, (4, 5, 6, 7)))
    assert fwd is not None
    assert fwd["nic0"] == "nic4" and fwd["cpu0"] == "cpu1" and fwd["nvswitch0"] == "nvswitch0"
    assert member_automorphism(topo, nodes, _gpus(topo, (0, 1)), _gpus(topo, (3, 2))) is not None
    # GPUs 0 and 1 share a PCIe switch, GPUs 1 and 2 do not; 0-3 on one CPU, 0, 2, 4, 6 on two
    assert member_automorphism(topo, nodes, _gpus(topo, (0, 1)), _gpus(topo, (1, 2))) is None
    low, spread = _gpus(topo, (0, 1, 2, 3)), _gpus(topo, (0, 2, 4, 6))
    assert member_automorphism(topo, nodes, low, spread) is None


def _two_switches() -> Topology:
    """A DGX A100 with a second NVSwitch node linked to every GPU like the first: every hop's
    switch is chosen by name."""
    topo = load_system("dgx-a100")
    g = topo.graph.copy()
    g.add_node("nvswitch1", **g.nodes["nvswitch0"])
    g.nodes["nvswitch1"]["local_id"] = "nvswitch1"
    for gpu in topo.gpus:
        g.add_edge(gpu, "nvswitch1", **g.edges[gpu, "nvswitch0"])
    return dataclasses.replace(topo, graph=g, pattern=None)


def test_name_decided_packing_is_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two switches alike: the packing of GPUs 0-3 chose switches by name, so GPUs 4-7 (an
    image) are searched themselves."""
    topo = _two_switches()
    model = CommCostModel(topo)
    searched = _searched(monkeypatch)
    low, high = _gpus(topo, (0, 1, 2, 3)), _gpus(topo, (4, 5, 6, 7))
    nodes = frozenset(topo.graph.nodes)
    assert member_automorphism(topo, nodes, low, high) is not None
    model.groups.analysis.packed(low)
    assert (low, rg.MAX_CHANNELS) not in model.links._name_free
    assert model.groups.analysis._image_pack(high) is None
    model.groups.analysis.packed(high)
    assert searched == [low, high]


def test_unlike_link_leaves_no_map() -> None:
    """GPU 4's switch link slower than GPU 0's: the halves are no image of each other."""
    topo = load_system("dgx-a100")
    g = topo.graph.copy()
    g.edges["gpu4", "nvswitch0"]["bandwidth_Bps"] = (
        g.edges["gpu4", "nvswitch0"]["bandwidth_Bps"] / 2
    )
    topo = dataclasses.replace(topo, graph=g, pattern=None)
    nodes = frozenset(topo.graph.nodes)
    low, high = _gpus(topo, (0, 1, 2, 3)), _gpus(topo, (4, 5, 6, 7))
    assert member_automorphism(topo, nodes, low, high) is None
    assert member_automorphism(topo, nodes, low, _gpus(topo, (0, 1, 3, 2))) is not None
