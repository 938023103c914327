"""The server-level sharing factor of data-parallel rings (``costs._nic_sharing_factor``):
hand-counted flows per server and NIC set on 128 DGX A100 (issue 14 made it read the server
and local-id tables; the counts must not change)."""

from __future__ import annotations

import random

import pytest
from per_group_reads import server_indices, servers_and_lids

from perfmodel.parallel import costs
from perfmodel.topology import load_system, nic_tables

TOPO = load_system("dgx-a100", nodes=128)
GPN = TOPO.gpus_per_node


def _dp(first: int, stride: int, n: int, lids: tuple[int, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(TOPO.gpus[(first + stride * i) * GPN + k] for i in range(n)) for k in lids)


def test_two_gpus_per_nic_pair() -> None:
    """GPUs 0 and 1 reach the same two HDR NICs: group 0 alone sends one flow per server
    through them, ``min(b_gpu, 2 b_nic)`` = the GPU's PCIe link; beside group 1, two flows
    share ``2 b_nic``: factor ``b_gpu / b_nic`` (25.84 / 23.0 GB/s = 1.1233)."""
    near = nic_tables.near_nic_sets(TOPO)
    nics, b_gpu, b_nic = near["gpu0"]
    assert near["gpu1"][0] == nics and len(nics) == 2 and b_gpu < 2 * b_nic
    groups = _dp(3, 4, 32, (0, 1, 2, 3))
    assert costs._uses_nic_sets(TOPO, groups)
    assert costs._nic_sharing_factor(TOPO, groups) == b_gpu / b_nic
    assert costs.ring_sharing_factor(TOPO, groups) == b_gpu / b_nic


def test_own_nic_pairs_do_not_share() -> None:
    """GPUs 0 and 2 sit behind different NIC pairs: no sharing (1.0); a ring of GPUs 0 and 1
    on every other server leaves each server through both GPUs' uplinks onto their NIC pair
    (its own ring analysis finds 2 x 23 GB/s): beside a ring of GPU 1 alone on the same NIC
    pair it keeps half of the pair, factor ``min(2 b_gpu, 2 b_nic) / b_nic`` = 2."""
    assert costs._nic_sharing_factor(TOPO, _dp(0, 2, 40, (0, 2))) == 1.0
    pairs = tuple(
        tuple(TOPO.gpus[s * GPN + k + d] for s in range(0, 64, 2) for d in (0, 1)) for k in (0, 4)
    )
    assert costs._nic_sharing_factor(TOPO, pairs) == 1.0
    mixed = (pairs[0], tuple(TOPO.gpus[s * GPN + 1] for s in range(0, 64, 2)))
    near = nic_tables.near_nic_sets(TOPO)
    b_gpu, b_nic = near["gpu0"][1], near["gpu0"][2]
    assert costs._nic_sharing_factor(TOPO, mixed) == min(2 * b_gpu, 2 * b_nic) / b_nic == 2.0


def test_nic_shape_memo_misses_other_shapes() -> None:
    """Through the shape memo (:func:`costs._nic_shape`): translates and reorderings of the
    servers share one factor; other local ids (other NIC sets) or another server pattern
    (two GPUs per server on one ring) miss and get their own factor."""
    near = nic_tables.near_nic_sets(TOPO)
    shared = near["gpu0"][1] / near["gpu0"][2]
    a = _dp(1, 4, 32, (0, 1, 2, 3))
    b = _dp(2, 4, 32, (0, 1, 2, 3))
    assert costs._nic_shape(TOPO, a) == costs._nic_shape(TOPO, b)
    assert costs.ring_sharing_factor(TOPO, a) == costs.ring_sharing_factor(TOPO, b) == shared
    apart = _dp(1, 4, 32, (0, 2, 4, 6))  # one GPU per NIC pair: no sharing
    assert costs.ring_sharing_factor(TOPO, apart) == 1.0
    assert costs._nic_shape(TOPO, apart) != costs._nic_shape(TOPO, a)
    # group 0 alone on its NIC pair: GPU 1 rides in a ring that stays in its server
    inside = (a[0], tuple(TOPO.gpus[1 * GPN + k] for k in (1, 2, 3, 4, 5, 6, 7, 0)), *a[2:])
    assert costs._uses_nic_sets(TOPO, inside)
    assert costs.ring_sharing_factor(TOPO, inside) == costs._nic_sharing_factor(TOPO, inside)
    assert costs.ring_sharing_factor(TOPO, inside) == 1.0
    assert costs._nic_shape(TOPO, inside) != costs._nic_shape(TOPO, a)


def test_parallel_rings_share_one_factor_for_any_server_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The data-parallel groups of one stage over 9, 12, 32 or 64 servers (any stride) are one
    shape per local ids; each factor equals the direct count. Two local ids per group, or
    groups on other servers, keep the full shape."""
    costs._NIC_FACTORS.entries.clear()
    made: list[object] = []
    real = costs._nic_sharing_factor
    monkeypatch.setattr(costs, "_nic_sharing_factor", lambda t, g: made.append(g) or real(t, g))
    sets = [
        _dp(0, 1, 9, tuple(range(8))),
        _dp(5, 2, 32, tuple(range(8))),
        _dp(3, 1, 64, tuple(range(8))),
    ]
    for groups in sets:
        assert costs._nic_shape(TOPO, groups) == (
            "parallel",
            0,
            tuple((f"gpu{k}",) for k in range(8)),
        )
        assert costs.ring_sharing_factor(TOPO, groups) == real(TOPO, groups)
    assert len(made) == 1
    four = _dp(0, 1, 20, (0, 1, 2, 3))
    assert costs._nic_shape(TOPO, four) == ("parallel", 0, tuple((f"gpu{k}",) for k in range(4)))
    assert costs.ring_sharing_factor(TOPO, four) == real(TOPO, four)
    mixed = (
        *_dp(0, 1, 20, (0,)),
        tuple(TOPO.gpus[s * GPN + (s % 2)] for s in range(20)),
        *_dp(0, 1, 20, (2, 3)),
    )
    assert costs._nic_shape(TOPO, mixed)[0] != "parallel"  # type: ignore[index]
    assert costs.ring_sharing_factor(TOPO, mixed) == real(TOPO, mixed)
    shifted = (*_dp(0, 1, 20, (0, 1)), *_dp(20, 1, 20, (2, 3)))
    assert costs._nic_shape(TOPO, shifted)[0] != "parallel"  # type: ignore[index]
    assert costs.ring_sharing_factor(TOPO, shifted) == real(TOPO, shifted)


@pytest.mark.parametrize("nodes", [4, 8, 16, 32])
def test_sibling_groups_over_shared_nics_agree_below_and_above_64_ranks(nodes: int) -> None:
    """Two tensor-parallel siblings' data-parallel groups (GPUs 0,2,4,6 and 1,3,5,7 of every
    server) on a DGX A100 with only 4 NICs cabled: each group's ring uses all 4 NICs alone and
    half of them together, x2, whether the ring routes (<= 64 ranks) or the NIC sets (above)
    decide. Before issue 24 the NIC-set path counted one exit GPU per server: x1.12 from 16
    servers on, so a 128-GPU step came out faster than a 64-GPU one."""
    topo = load_system("dgx-a100", nodes=nodes, network="roce-100g", nics_per_node=4)
    groups = (tuple(topo.gpus[::2]), tuple(topo.gpus[1::2]))
    assert costs._uses_nic_sets(topo, groups) is (nodes * 8 > 64)
    assert costs.ring_sharing_factor(topo, groups) == pytest.approx(2.0)


_CUT_SYSTEMS = {
    "dgx-a100": load_system("dgx-a100", nodes=12),
    "dgx-a100 fat tree": load_system("dgx-a100", nodes=12, fabric_topology="fat-tree"),
    "dgx-a100 4 nics": load_system("dgx-a100", nodes=12, network="roce-100g", nics_per_node=4),
    "dgx-h100": load_system("dgx-h100", nodes=10),
    "dgx1-v100": load_system("dgx1-v100", nodes=10),
}


@pytest.mark.parametrize("name", sorted(_CUT_SYSTEMS))
def test_parallel_rings_cut_to_two_servers_give_the_whole_factor(name: str) -> None:
    """Property (the shortcut of :func:`costs._nic_counted`): parallel rings over 2 to 12
    servers of one class (strides 1-5, every start, local-id sets of 1 to 8 GPUs) have bit for
    bit the factor of the same rings cut to their first two servers; other shapes are counted
    whole.
    Through the memo, each parallel shape is made once and equals the whole count."""
    topo = _CUT_SYSTEMS[name]
    gpn, nodes = topo.gpus_per_node, topo.num_nodes
    lid_sets = [(0,), (0, 1), (0, 2), (1, 3), (0, 1, 2, 3), (4, 5, 6, 7), (0, 2, 4, 6)]
    lid_sets += [tuple(range(gpn)), tuple(range(gpn - 1, -1, -1)), (gpn - 1, 0)]
    seen = 0
    for stride in range(1, 6):
        for first in range(nodes):
            n = (nodes - 1 - first) // stride + 1
            if n < 2:
                continue
            for lids in lid_sets:
                groups = tuple(
                    tuple(topo.gpus[(first + stride * i) * gpn + k] for i in range(n)) for k in lids
                )
                shape = costs._nic_shape(topo, groups)
                if shape is None or shape[0] != "parallel":  # servers of several classes
                    assert shape is None or costs._nic_counted(shape, groups) is groups
                    continue
                cut = costs._nic_counted(shape, groups)
                assert all(len(g) == 2 for g in cut)
                whole = costs._nic_sharing_factor(topo, groups)
                assert costs._nic_sharing_factor(topo, cut) == whole, (stride, first, lids)
                seen += 1
    assert seen >= 10
    costs._NIC_FACTORS.entries.clear()
    for lids in lid_sets:
        groups = tuple(tuple(topo.gpus[s * gpn + k] for s in range(nodes)) for k in lids)
        if sum(map(len, groups)) > 64:
            assert costs.ring_sharing_factor(topo, groups) == costs._nic_sharing_factor(
                topo, groups
            )
    mixed = ((topo.gpus[0], topo.gpus[gpn]), (topo.gpus[0], topo.gpus[gpn + 1]))
    shape = costs._nic_shape(topo, mixed)
    assert shape is not None and shape[0] != "parallel"
    assert costs._nic_counted(shape, mixed) is mixed


def _per_group_nic_shape(groups: tuple[tuple[str, ...], ...]) -> object:
    """``_nic_shape`` as it read the groups before issue 27's one-pass read: per-group
    servers and local ids (the reference the one-pass key must partition alike)."""
    sym = costs.server_symmetry(TOPO)
    got = servers_and_lids(sym, groups)
    if got is None:
        return None
    srvs, lids = got
    first = srvs[0]
    if len(first) >= 2 and all(sv == first for sv in srvs) and len(set(first)) == len(first):
        c = sym.cls.get(first[0])
        if (
            c is not None
            and all(sym.cls.get(s) == c for s in first)
            and all(len(set(ids)) == 1 for ids in lids)
        ):
            return ("parallel", c, tuple((ids[0],) for ids in lids))
    indexed = server_indices(sym.cls, srvs)
    return None if indexed is None else (*indexed, lids)


def test_one_pass_shape_partitions_as_the_per_group_reads() -> None:
    """Parallel rings, translates, mixed local ids, rings of unequal sizes and random GPUs:
    the one-pass ``_nic_shape`` is ``("parallel", ...)`` of one GPU a server exactly where the
    per-group read was (the same tuple), and two sets share a key exactly where they shared
    one before."""
    rng = random.Random(27)
    sets = [
        _dp(f, s, n, lids)
        for f in (0, 3)
        for s in (1, 2)
        for n in (16, 40)
        for lids in ((0, 1, 2, 3), (0, 2), (5,))
    ]
    sets += [
        (_dp(0, 2, 40, (0,))[0], _dp(0, 2, 40, (1,))[0][::-1]),  # other server order
        (_dp(0, 2, 40, (0,))[0], _dp(0, 2, 30, (1,))[0]),  # unequal sizes
        tuple((*g[:-1], TOPO.gpus[5]) for g in _dp(0, 2, 40, (0, 1))),  # one member elsewhere
        # the same servers in the same order, two local ids in each group
        tuple(tuple(TOPO.gpus[2 * i * GPN + k + i % 2] for i in range(40)) for k in (0, 2)),
    ]
    for _ in range(40):
        n = rng.choice((2, 4, 8))
        sets.append(tuple(tuple(rng.sample(TOPO.gpus, 80 // n)) for _ in range(n)))
    new = [costs._nic_shape(TOPO, g) for g in sets]
    old = [_per_group_nic_shape(g) for g in sets]
    assert any(o is not None and o[0] == "parallel" for o in old)
    for a, b, g in zip(new, old, sets, strict=True):
        assert (a is None) == (b is None), g
        if b is not None and b[0] == "parallel":
            assert a == b
        else:  # one GPU a server exactly where the per-group read says; else k >= 2 blocks
            assert a is None or a[0] != "parallel" or len(a[2][0]) >= 2
    for i in range(len(sets)):
        for j in range(len(sets)):
            assert (new[i] == new[j]) == (old[i] == old[j]), (sets[i], sets[j])


_BLOCKS = [
    ((0, 4), (1, 5), (2, 6), (3, 7)),  # a tp4 plan's data-parallel groups: two GPUs a server
    ((0, 1), (2, 3)),
    ((4, 0), (5, 1)),  # the local ids of a server in another order
    ((0, 2, 4, 6), (1, 3, 5, 7)),
    ((0, 1, 2, 3),),
]


@pytest.mark.parametrize("name", sorted(_CUT_SYSTEMS))
def test_parallel_rings_of_k_gpus_a_server_cut_to_two_servers(name: str) -> None:
    """Property (``costs._parallel_blocks``): groups of ``k`` GPUs on each of the same 2-12
    servers of one class (strides 1-3, every start) are one ``"parallel"`` shape per class
    and local ids, whatever the server count; the factor of the groups cut to their first two
    servers is, bit for bit, the whole groups' factor, and so is the memo's. A server whose
    block is out of order or a group whose members change local ids keeps the full shape."""
    topo = _CUT_SYSTEMS[name]
    gpn, nodes = topo.gpus_per_node, topo.num_nodes
    seen: dict[object, float] = {}
    for stride in range(1, 4):
        for first in range(nodes):
            n = (nodes - 1 - first) // stride + 1
            for blocks in [b for b in _BLOCKS if max(map(max, b)) < gpn] if n >= 2 else []:
                groups = tuple(
                    tuple(topo.gpus[(first + stride * i) * gpn + k] for i in range(n) for k in b)
                    for b in blocks
                )
                shape = costs._nic_shape(topo, groups)
                if shape is None or shape[0] != "parallel":  # servers of several classes
                    assert shape is None or costs._nic_counted(shape, groups) is groups
                    continue
                whole = costs._nic_sharing_factor(topo, groups)
                cut = costs._nic_counted(shape, groups)
                assert all(len(g) == 2 * len(b) for g, b in zip(cut, blocks, strict=True))
                assert costs._nic_sharing_factor(topo, cut) == whole, (stride, first, blocks)
                assert seen.setdefault(shape, whole) == whole  # one factor per shape
                if sum(map(len, groups)) > 64:
                    assert costs.ring_sharing_factor(topo, groups) == whole
    assert len(seen) >= len(_BLOCKS)
    ring = tuple(topo.gpus[s * gpn + k] for s in range(nodes) for k in (0, 4))
    swapped = tuple(topo.gpus[s * gpn + k] for s in range(nodes) for k in ((4, 0) if s else (0, 4)))
    drift = tuple(topo.gpus[s * gpn + k] for s in range(nodes) for k in (0, 4 + s % 2))
    for other in (swapped, drift):  # (None: servers of several classes)
        shape = costs._nic_shape(topo, (ring, other))
        assert shape is None or shape[0] != "parallel"
        assert shape is None or costs._nic_counted(shape, (ring, other)) == (ring, other)
    # every server's block in one order but the servers visited s0 s0 s1 s2 s2 s1: the local
    # ids repeat as parallel rings' do, the servers do not (last21: no test reached this check)
    if nodes >= 3:
        visits = ((0, 0), (0, 1), (1, 0), (2, 1), (2, 0), (1, 1))
        hop = tuple(tuple(topo.gpus[s * gpn + b[i]] for s, i in visits) for b in ((0, 1), (2, 3)))
        shape = costs._nic_shape(topo, hop)
        assert shape is None or shape[0] != "parallel"
        assert shape is None or costs._nic_counted(shape, hop) == hop


def test_rings_over_servers_of_several_classes_are_not_parallel() -> None:
    """On a fat tree each leaf's servers are a class of their own: data-parallel rings over
    the servers of two leaves (one or two GPUs a server) keep their whole shape, whose factor
    counts every server (the one-class check of ``costs._parallel_blocks``)."""
    from perfmodel.topology.symmetry import server_symmetry

    topo = load_system("dgx-a100", nodes=8, fabric_topology="fat-tree")
    gpn = topo.gpus_per_node
    assert len({server_symmetry(topo).cls.get(s) for s in range(8)}) > 1
    for lids in (((0,), (1,)), ((0, 4), (1, 5))):
        groups = tuple(tuple(topo.gpus[s * gpn + k] for s in range(8) for k in b) for b in lids)
        shape = costs._nic_shape(topo, groups)
        assert shape is None or shape[0] != "parallel"
        assert shape is None or costs._nic_counted(shape, groups) == groups
