"""A group inside one server read off an automorphic image (issue 27,
``GroupMemo._image_group``), and the inter-server rates of a ring whose hops all join two
servers (``GroupAnalysis.build``): each equal, field for field, to the group's own analysis on
every catalogue system, and used where the brief says (GPUs 4-7 of a DGX A100)."""

from __future__ import annotations

import dataclasses

import pytest
from reference_models import direct_model

from perfmodel.comm import CommCostModel
from perfmodel.comm.channels import channel_rates
from perfmodel.comm.maxmin import numpy_sum
from perfmodel.comm.rings import Channel
from perfmodel.topology import list_systems, load_system
from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule


def _inside_groups(n: int) -> list[tuple[int, ...]]:
    """Local GPU numbers of groups inside one server of ``n`` GPUs: blocks of 2 and 4 in
    order, each block reversed and rotated (images in another order), strided sets."""
    out: list[tuple[int, ...]] = []
    for k in (2, 4):
        for start in range(0, n - k + 1, k):
            block = tuple(range(start, start + k))
            out += [block, block[::-1], block[1:] + block[:1]]
    out += [tuple(range(0, n, 2)), tuple(range(1, n, 2))]
    return [g for g in dict.fromkeys(out) if len(g) >= 2]


def _own(topo):  # type: ignore[no-untyped-def]
    """A model that analyses a group itself: no image of a group or of its packing."""
    model = direct_model(topo)
    model.groups._image_group = lambda members: None  # type: ignore[method-assign]
    model.groups.analysis._image_pack = lambda members: None  # type: ignore[method-assign]
    return model


@pytest.mark.parametrize("system", list_systems())
def test_image_groups_equal_own_analysis(system: str) -> None:
    topo = load_system(system, nodes=2)
    model = CommCostModel(topo)
    per = topo.gpus_per_node
    for ids in _inside_groups(per):
        for server in (0, 1):
            group = tuple(topo.gpus[server * per + i] for i in ids)
            got = model.group_info(group)
            assert got == _own(topo).group_info(group), (system, group)


def test_second_dgx_a100_quartet_is_read_off_the_first() -> None:
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    used: list[tuple[str, ...]] = []
    real = model.groups._image_group

    def counted(members):  # type: ignore[no-untyped-def]
        got = real(members)
        if got is not None:
            used.append(members)
        return got

    model.groups._image_group = counted  # type: ignore[method-assign]
    low, high = topo.gpus[0:4], topo.gpus[4:8]
    model.group_info(low)
    assert used == []
    assert model.group_info(high) == _own(topo).group_info(high)
    assert used == [high]
    # another server's quartet: its twin's (server 0's) analysis, read off the image there
    model.group_info(topo.gpus[12:16])
    assert used == [high]


def test_p2p_rule_refuses_the_image() -> None:
    """A NCCL release whose P2P rule stages some pairs through host memory: no group is read
    off an image, and every group equals its own analysis. (Under a P2P rule no packing is
    marked name-free, so no packing is an image and the door finds no source; its own check
    of the rule, which the charge and the staging read, is a second guard:
    ``test_p2p_rule_refuses_a_planted_image``.)"""
    topo = with_nccl_p2p_rule(load_system("pcie-8xtitanx", nodes=2), NcclRelease(2, 0))
    model = CommCostModel(topo)
    assert model.links.no_p2p or model.links.p2p_denied
    for ids in _inside_groups(topo.gpus_per_node):
        group = tuple(topo.gpus[i] for i in ids)
        assert model.groups._image_group(group) is None
        assert model.group_info(group) == _own(topo).group_info(group)


def _planted(model, done: tuple[str, ...], members: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """``_image_group(members)`` with ``members`` planted as the image of the analysed group
    ``done`` (``analysis.images``, names mapped in order), whatever the door would find."""
    model.group_info(done)
    model.groups.analysis.images[members] = (done, dict(zip(done, members, strict=True)))
    return model.groups._image_group(members)


def test_p2p_rule_refuses_a_planted_image() -> None:
    """Under a P2P rule (host-memory staging reads names) even a group the analysis lists as
    an image of an analysed one is analysed itself: the door's own check of the rule."""
    topo = with_nccl_p2p_rule(load_system("pcie-8xtitanx", nodes=2), NcclRelease(2, 0))
    model = CommCostModel(topo)
    assert model.links.no_p2p or model.links.p2p_denied
    done, members = tuple(topo.gpus[0:2]), tuple(topo.gpus[2:4])
    assert _planted(model, done, members) is None
    assert model.group_info(members) == _own(topo).group_info(members)


def test_image_of_another_nvlink_count_is_refused() -> None:
    """An image whose analysed group counts other NVLinks from its first GPU than the
    members' first GPU has (planted: the analysis of GPUs 0-3 with one link more) is refused;
    the true count is read off the image."""
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    done, members = tuple(topo.gpus[0:4]), tuple(topo.gpus[4:8])
    real = model.group_info(done)
    assert _planted(model, done, members) == _own(topo).group_info(members)
    model.groups.infos.pop(members, None)
    model.groups.infos[done] = dataclasses.replace(real, nvlinks=real.nvlinks + 1)
    assert _planted(model, done, members) is None


def test_image_across_two_servers_is_refused() -> None:
    """A group across two servers planted as the image of a group inside one: refused (the
    door reads only groups of one server, whose channels stay in it)."""
    topo = load_system("dgx-a100", nodes=2)
    model = CommCostModel(topo)
    per = topo.gpus_per_node
    done = (topo.gpus[0], topo.gpus[1])
    assert _planted(model, done, (topo.gpus[0], topo.gpus[per + 1])) is None
    assert _planted(model, done, (topo.gpus[per], topo.gpus[1])) is None


#: (server, local GPU) of a ring on two servers, two GPUs in each, whose hops inside a server
#: are slower than its hops between servers: PCIe through the host (a DGX-1's GPUs 0 and 5,
#: not NVLink-joined in its hybrid cube mesh; the PCIe server's GPUs on two switches or two
#: sockets) against the servers' NICs (four, two); the two servers' pairs differ.
SLOW_INSIDE = {
    "dgx1-v100": ((0, 0), (0, 2), (1, 0), (1, 5)),
    "pcie-8x-server": ((0, 0), (0, 4), (1, 0), (1, 2)),
}


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100", "dgx1-v100", "pcie-8x-server"])
def test_one_gpu_per_server_inter_rates(system: str) -> None:
    """A ring with one GPU per server (its hops all join two servers): the inter-server
    rates are those of its channels filled with only those hops, uncharged, as the
    direct computation fills them; a ring with hops inside a server still fills them so,
    where a hop inside a server is slower than the network too (:data:`SLOW_INSIDE`; the
    servers' parts differ, so the ring is analysed channel by channel): there the ring's
    rate is lower than the inter-server rates, which only the inter-server hops give."""
    topo = load_system(system, nodes=3)
    per = topo.gpus_per_node
    model = _own(topo)
    links = model.links
    for group in [
        (topo.gpus[0], topo.gpus[per + 1]),
        (topo.gpus[2], topo.gpus[2 * per + 3], topo.gpus[per + 2]),
        (topo.gpus[0], topo.gpus[1], topo.gpus[per], topo.gpus[per + 1]),
        slow := tuple(topo.gpus[s * per + i] for s, i in SLOW_INSIDE.get(system, ())),
    ]:
        if not group:
            continue
        info = model.group_info(group)
        if group == slow:
            assert info.ring_bw_Bps < info.inter_bw_Bps, (system, group)  # the slow hop
        srv = links.server
        inter = [
            Channel(ch.order, tuple(h for h in ch.hops if srv[h[0]] != srv[h[-1]]))
            for ch in info.channels
        ]
        assert info.inter_bw_Bps == numpy_sum(channel_rates(links, inter)), (system, group)
