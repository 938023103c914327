"""Groups of one ring pattern share one analysis (issue 14, ``GroupMemo._pattern_key``):
groups of GPUs spanning servers with the same local ids per server and the same classes of
servers in the same order have the numbers of the first such group analysed, bit for bit, in
any name order of their servers; groups of another pattern (other local ids, other classes,
another server count) miss."""

from __future__ import annotations

import dataclasses

import pytest
from reference_models import direct_model, direct_terms, thin_spine_fat_tree

from perfmodel.comm import CommCostModel
from perfmodel.comm.group import GroupInfo
from perfmodel.comm.group_memo import _channel_servers
from perfmodel.topology import Topology, load_system
from perfmodel.topology.symmetry import server_symmetry

NUMBERS = (
    "ring_bw_Bps",
    "intra_bw_Bps",
    "inter_bw_Bps",
    "alpha_intra_s",
    "alpha_inter_s",
    "intra_class",
    "gpu_arch",
    "gpu_memory_Bps",
    "shm",
)


def _group(topo: Topology, servers: tuple[int, ...], lids: tuple[int, ...]) -> tuple[str, ...]:
    gpn = topo.gpus_per_node
    return tuple(topo.gpus[s * gpn + k] for s in servers for k in lids)


def _same_info(model: CommCostModel, got: GroupInfo, want: GroupInfo) -> None:
    for name in NUMBERS:
        assert getattr(got, name) == getattr(want, name), name
    assert (got.members, got.parts, len(got.channels)) == (
        want.members,
        want.parts,
        len(want.channels),
    )
    servers = _channel_servers(model.links, got.channels)  # known, or read off the listing
    assert servers == _channel_servers(model.links, want.channels)
    assert got.channels.intra_hops == want.channels.intra_hops  # type: ignore[attr-defined]
    assert tuple(got.channels) == tuple(want.channels)  # listed: the group's own channels


SYSTEMS = [
    ("dgx-a100", {"nodes": 12}),  # rails: one class
    ("dgx-a100", {"nodes": 12, "fabric_topology": "fat-tree"}),
    ("dgx-h100", {"nodes": 12}),
    ("dgx1-v100", {"nodes": 12}),
]


@pytest.mark.parametrize(("system", "kw"), SYSTEMS, ids=[f"{s}{k}" for s, k in SYSTEMS])
def test_pattern_groups_equaldirect_model(system: str, kw: dict[str, object]) -> None:
    """Data-parallel groups of the stages of a pipeline (servers strided, names in another
    order than the indices: n10 sorts before n2) and of other orders: each group's analysis
    and collective results equal its own direct analysis."""
    topo = load_system(system, **kw)
    model, direct = CommCostModel(topo), direct_model(topo)
    orders = [(0, 4, 8), (1, 5, 9), (2, 6, 10), (3, 7, 11), (10, 2, 7), (11, 0, 5), (2, 3)]
    for lids in [(0,), (4,), (1, 3), (0, 1, 2, 3)]:
        if max(lids) >= topo.gpus_per_node:
            continue
        for servers in orders:
            if max(servers) >= topo.num_nodes:
                continue
            group = _group(topo, servers, lids)
            own = 2**20 + 64 * len(orders) * lids[0] + 64 * orders.index(servers)
            for op in ("allreduce", "allgather", "reducescatter"):
                # sizes met before, and one no other group of the pattern asked for (priced
                # on the pattern's first analysis, this group's never made)
                for m in (2**12, 2**27, own):
                    got = model.collective(op, m, group)
                    assert got == direct.collective(op, m, group), (group, op, m)
            _same_info(model, model.group_info(group), direct.group_info(group))


def test_strided_stages_share_one_pattern() -> None:
    """The four stages' data-parallel groups of one local id (servers s, s+4, s+8, s+12:
    n11 sorts before n3, so no order-preserving image merges them) are one analysis, and
    equal results for equal bytes are one object."""
    topo = load_system("dgx-a100", nodes=16)
    model = CommCostModel(topo)
    built = []
    real = model.groups.build
    model.groups.build = lambda m: built.append(m) or real(m)  # type: ignore[method-assign]
    groups = [_group(topo, tuple(range(s, 16, 4)), (0,)) for s in range(4)]
    results = [model.collective("allreduce", 2**26, g) for g in groups]
    assert len(built) == 1
    assert all(r is results[0] for r in results[1:])
    assert model.groups._pattern_key(groups[1])[0] == model.groups._pattern_key(groups[3])[0]  # type: ignore[index]
    assert model.groups._pattern_key(groups[0])[0] == ("ring", ("gpu0",), (0, 0, 0, 0))  # type: ignore[index]


def test_other_patterns_miss() -> None:
    """Other local ids, another server count, and servers of other classes are other
    patterns; on a fat tree with thin spine links, a group across leaves has a slower
    inter-server ring than one inside a leaf (a key of local ids and server count alone
    would give it the leaf's numbers)."""
    topo = thin_spine_fat_tree()
    assert server_symmetry(topo).cls == {0: 0, 1: 0, 3: 1, 4: 1}
    model, direct = CommCostModel(topo), direct_model(topo)
    key = model.groups._pattern_key
    inside, across = _group(topo, (0, 1), (0,)), _group(topo, (1, 3), (0,))
    a, b = model.group_info(inside), model.group_info(across)
    assert b.inter_bw_Bps < a.inter_bw_Bps
    _same_info(model, b, direct.group_info(across))
    assert key(inside)[0] != key(across)[0]  # type: ignore[index]
    assert key(inside)[0] != key(_group(topo, (0, 1), (4,)))[0]  # type: ignore[index]
    assert key(inside)[0] != key(_group(topo, (3, 4), (0,)))[0]  # type: ignore[index]
    assert key(_group(topo, (0, 3), (0,)))[0] == key(across)[0]  # type: ignore[index]
    assert key(_group(topo, (3, 0), (0,)))[0] != key(across)[0]  # type: ignore[index]
    assert key(_group(topo, (0, 3, 1), (0,)))[0] != key(across)[0]  # type: ignore[index]
    # a server in no class (2 and 5: another name sorts between them and their leaf mates)
    # is its own pattern entry: server 2 never stands for server 5
    assert key(_group(topo, (2, 0), (0,)))[0] != key(_group(topo, (5, 0), (0,)))[0]  # type: ignore[index]
    # one server, or parts of different local ids: no pattern
    assert key(_group(topo, (0,), (0, 1))) is None
    assert key((topo.gpus[0], topo.gpus[9])) is None


def test_twin_groups_share_one_result() -> None:
    """The tensor-parallel groups of every server (two fat-tree leaves: no class holds them
    all) are priced once per (op, bytes), read off the twin's group; their results equal the
    direct ones."""
    topo = load_system("dgx-a100", nodes=6, fabric_topology="fat-tree")
    model, direct = CommCostModel(topo), direct_model(topo)
    priced = []
    real = model.shared._own
    model.shared._own = lambda *a: priced.append(a[2]) or real(*a)  # type: ignore[method-assign]
    for lids in [(0, 1, 2, 3), (4, 5, 6, 7), tuple(range(8))]:
        priced.clear()
        groups = [_group(topo, (s,), lids) for s in range(6)]
        results = [model.collective("allreduce", 2**26, g) for g in groups]
        assert len(priced) == 1 and all(r is results[0] for r in results)
        assert results[0] == direct.collective("allreduce", 2**26, groups[3])
        key = model.groups.numbers_key(groups[4])
        assert key == ("twin", groups[0])  # server 0 is every server's twin


def test_unlike_twin_misses() -> None:
    """Server 1 with a slower NVLink between GPUs 0 and 1 is built unlike the others: its
    group is its own twin's key (a key of local ids alone would give it server 0's ring)."""
    topo = load_system("dgx1-v100", nodes=3)
    g = topo.graph.copy()
    for u, v in (("n1/gpu0", "n1/gpu1"), ("n1/gpu1", "n1/gpu0")):
        if g.has_edge(u, v):
            g.edges[u, v]["bandwidth_Bps"] /= 2
    topo = dataclasses.replace(topo, graph=g, pattern=None)
    model, direct = CommCostModel(topo), direct_model(topo)
    g0, g1, g2 = (_group(topo, (s,), (0, 1)) for s in range(3))
    model.group_info(g1)  # analysed: its key is known before its collective is priced
    r0 = model.collective("allreduce", 2**26, g0)
    r1 = model.collective("allreduce", 2**26, g1)
    assert r1 == direct.collective("allreduce", 2**26, g1)
    assert r1.bandwidth_Bps < r0.bandwidth_Bps
    assert model.groups.numbers_key(g1) == ("twin", g1) != model.groups.numbers_key(g0)
    assert model.collective("allreduce", 2**26, g2) is r0


def _inner_sends(topo: Topology, s: int, lids: tuple[int, ...], to: int) -> tuple:
    """Stage ``k`` -> ``k + 1`` sends on one server (tensor-parallel ranks ``lids`` to the
    ranks ``to`` GPUs further on)."""
    gpn = topo.gpus_per_node
    return tuple((topo.gpus[s * gpn + k], topo.gpus[s * gpn + (k + to) % gpn]) for k in lids)


def test_sends_inside_a_server_read_off_its_twin() -> None:
    """Pipeline sends inside each server (two fat-tree leaves) are one route and rate
    computation, equal to each server's own; a server built unlike (a slower NVLink between
    GPUs 0 and 4) is its own twin and gets its own, slower terms."""
    topo = load_system("dgx-a100", nodes=6, fabric_topology="fat-tree")
    g = topo.graph.copy()
    for u, v, d in g.edges(data=True):
        if {u, v} & {"n4/gpu0", "n4/gpu4"} and "nvswitch" in (u + v):
            d["bandwidth_Bps"] /= 4
    odd = dataclasses.replace(topo, graph=g, pattern=None)
    for t in (topo, odd):
        model = CommCostModel(t)
        routed = []
        real = model.transfers.p2p_route
        model.transfers.p2p_route = lambda a, b, log=routed, f=real: log.append(a) or f(a, b)  # type: ignore[method-assign]
        for lids, to in [((0, 1, 2, 3), 4), ((4, 5, 6, 7), 4), ((0, 2), 1)]:
            for s in range(6):
                pairs = _inner_sends(t, s, lids, to)
                assert model.transfers.terms(pairs) == direct_terms(t, pairs), (s, lids)
        if t is topo:
            assert len(routed) == 4 + 4 + 2  # server 0's sends only
    model = CommCostModel(odd)
    sends = [_inner_sends(odd, s, (0, 1, 2, 3), 4) for s in (0, 4)]
    assert model.transfers._twin_pairs(sends[1]) is None or server_symmetry(odd).twin.get(4) is None
    assert model.transfers.terms(sends[1])[0][1] < model.transfers.terms(sends[0])[0][1]
