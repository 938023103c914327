"""Ring-path sharing factors by name-free shape (issue 14, ``costs._route_shape``): sibling
groups whose servers are other servers of the same classes, in any name order that keeps each
ring hop's own order (any order where every hop's route is mirrored), share one factor, equal
bit for bit to each set's direct computation; a hop in the other name order where a route is
not mirrored, servers of other classes and servers in no class miss."""

from __future__ import annotations

import random

import pytest
from per_group_reads import server_indices, servers_and_lids

from perfmodel.parallel import costs
from perfmodel.topology import Topology, load_system


def _groups(topo: Topology, rings: list[tuple[int, ...]], lid: int) -> tuple[tuple[str, ...], ...]:
    """One ring per server tuple, over GPU ``lid`` and ``lid + 1`` of each server in turn."""
    gpn = topo.gpus_per_node
    return tuple(
        tuple(topo.gpus[s * gpn + k] for s in ring for k in (lid, lid + 1)) for ring in rings
    )


SETS = [
    [(0, 1), (2, 3)],
    [(2, 3), (0, 1)],  # the same shape; another order-preserving image (group 0 on n2, n3)
    [(10, 11), (4, 5)],  # n10 < n11 < n4 < n5: the same shape, set 0's image
    [(1, 0), (3, 2)],  # each hop in the other name order
    [(0, 4, 8), (1, 5, 9)],
    [(2, 6, 10), (3, 7, 11)],  # n10 < n2: hops 6 -> 10 and 10 -> 2 turn
    [(8, 4, 0), (9, 5, 1)],
]


@pytest.mark.parametrize(
    "kw", [{"nodes": 12}, {"nodes": 12, "fabric_topology": "fat-tree"}], ids=["rails", "fat-tree"]
)
def test_factors_equal_direct(kw: dict[str, object]) -> None:
    topo = load_system("dgx-a100", **kw)
    for rings in SETS:
        for lid in (0, 2, 6):
            groups = _groups(topo, rings, lid)
            want = costs._ring_sharing_factor(topo, groups)
            assert costs.ring_sharing_factor(topo, groups) == want, (rings, lid)


def test_images_across_name_orders_share_one_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sets 0-2 are one shape but two order-preserving images (group 0 on the first or the
    second pair of servers in name order); the factor is computed once."""
    topo = load_system("dgx-a100", nodes=12)
    costs._ROUTE_FACTORS.entries.clear()
    sets = [_groups(topo, rings, 0) for rings in SETS[:3]]
    assert len({costs._canonical_groups(topo, g) for g in sets}) == 2
    assert len({costs._route_shape(topo, g) for g in sets}) == 1
    direct = [costs._ring_sharing_factor(topo, g) for g in sets]
    computed: list[object] = []
    real = costs._ring_sharing_factor
    monkeypatch.setattr(
        costs, "_ring_sharing_factor", lambda t, g: computed.append(g) or real(t, g)
    )
    assert [costs.ring_sharing_factor(topo, g) for g in sets] == direct
    assert len(computed) == 1


def test_other_shapes_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = load_system("dgx-a100", nodes=12)
    shape = costs._route_shape
    base = shape(topo, _groups(topo, SETS[0], 0))
    assert shape(topo, _groups(topo, SETS[0], 2)) != base  # other local ids
    # rails: every hop's route is mirrored, so the name orders are left out (issue 27) ...
    assert shape(topo, _groups(topo, SETS[3], 0)) == base
    assert shape(topo, _groups(topo, SETS[4], 0)) == shape(topo, _groups(topo, SETS[5], 0))
    # ... and where a hop's route is not, a hop in the other name order is another shape
    costs._ORDER_FREE.entries.clear()
    monkeypatch.setattr(costs, "_mirrored", lambda *_: False)
    unmirrored = shape(topo, _groups(topo, SETS[0], 0))
    assert unmirrored is not None and unmirrored[-1] is not None
    assert shape(topo, _groups(topo, SETS[3], 0)) != unmirrored  # hops in the other name order
    assert shape(topo, _groups(topo, SETS[4], 0)) != shape(topo, _groups(topo, SETS[5], 0))
    costs._ORDER_FREE.entries.clear()
    tree = load_system("dgx-a100", nodes=12, fabric_topology="fat-tree")  # leaves of 3, classes
    same_leaf, across = _groups(tree, [(0, 1)], 0), _groups(tree, [(1, 3)], 0)
    assert shape(tree, same_leaf) != shape(tree, across)
    assert shape(tree, _groups(tree, [(2, 0)], 0)) is None  # server 2 is in no class


@pytest.mark.parametrize("fabric", ["rail", "fat-tree"])
def test_flat_shape_says_what_the_per_group_reads_say(fabric: str) -> None:
    """``_flat_shape`` (issue 27: every member read at once) holds exactly the per-group
    servers, local ids, classes and server indices (``per_group_reads``' ``servers_and_lids``,
    ``server_indices``) cut at its sizes, so two sets of groups have one flat shape if and
    only if they have one per-group shape; ``None`` where a name is in no server's table or a
    server in no class, as the per-group reads."""
    kw: dict[str, object] = {"nodes": 12}
    if fabric == "fat-tree":
        kw["fabric_topology"] = "fat-tree"
    topo = load_system("dgx-a100", **kw)
    sym = costs.server_symmetry(topo)
    rng = random.Random(27)
    seen: dict[object, object] = {}
    for _ in range(300):
        n_groups, size = rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 3, 4))
        groups = tuple(tuple(rng.sample(topo.gpus, size)) for _ in range(n_groups))
        flat = costs._flat_shape(sym, groups)
        per_group = servers_and_lids(sym, groups)
        assert per_group is not None
        srvs, lids = per_group
        indexed = server_indices(sym.cls, srvs)
        if indexed is None:
            assert flat is None
            continue
        assert flat is not None
        srv, classes, sizes, indices, flat_lids = flat
        assert sizes == tuple(map(len, groups))
        assert costs._nested(srv, sizes) == srvs
        assert tuple(costs._nested(flat_lids, sizes)) == lids
        assert (classes, tuple(costs._nested(indices, sizes))) == indexed
        # one flat key per per-group key and back
        key, old = (classes, sizes, indices, flat_lids), (indexed, lids)
        assert seen.setdefault(key, old) == old
    assert costs._flat_shape(sym, ((topo.gpus[0], "no-such-gpu"),)) is None
    if fabric == "fat-tree":  # server 2 is in no class (leaves of 3)
        server2 = tuple(g for g in topo.gpus if sym.server[g] == 2)[:2]
        assert costs._flat_shape(sym, (server2,)) is None
        assert server_indices(sym.cls, [[2, 2]]) is None
