"""Ring patterns of one class over any number of servers share one analysis (issue 14,
``GroupMemo._pattern_of_count``): where each boundary's fabric part is one switch (rails),
a group of the same local ids over 2, 3, 8 or 12 servers of the one class has the numbers of
the first such group analysed, bit for bit; a ring whose boundaries load fabric links (the
fabric-link loads are the boundary count times each boundary's) keeps its count in its key,
its rates recounted from the first such group's summary (issue 27, ``GroupMemo._recounted``;
tests/comm/test_ring_recount.py)."""

from __future__ import annotations

from reference_models import direct_model

from perfmodel.comm import CommCostModel
from perfmodel.comm.group_memo import _any_count_key
from perfmodel.comm.ring_summary import ring_summary
from perfmodel.topology import load_system
from tests.comm.test_ring_patterns import _group, _same_info

ORDERS = [(0, 4, 8), tuple(range(8)), (1, 5), (2, 6, 10, 3, 7, 11), tuple(range(12)), (9, 2)]


def _counting(model: CommCostModel) -> list[tuple[str, ...]]:
    built: list[tuple[str, ...]] = []
    real = model.groups.build
    model.groups.build = lambda m: built.append(m) or real(m)  # type: ignore[method-assign]
    return built


def test_server_counts_share_one_pattern() -> None:
    """Data-parallel (one GPU per server) and wider parts over 2-12 rail-attached DGX A100:
    one ring analysis per local-id sequence; every group's collectives and numbers equal its
    own direct analysis."""
    topo = load_system("dgx-a100", nodes=12)
    model, direct = CommCostModel(topo), direct_model(topo)
    built = _counting(model)
    lid_sets = [(0,), (4,), (0, 1, 2, 3)]
    for lids in lid_sets:
        for k, servers in enumerate(ORDERS):
            group = _group(topo, servers, lids)
            for op in ("allreduce", "allgather", "reducescatter"):
                for m in (2**12, 2**27, 2**20 + 64 * k):
                    assert model.collective(op, m, group) == direct.collective(op, m, group)
            _same_info(model, model.group_info(group), direct.group_info(group))
        assert model.groups._patterns.entries.get(("ring*", tuple(f"gpu{i}" for i in lids), 0))
    spanning = [m for m in built if len({topo.server_of(x) for x in m}) > 1]
    assert len(spanning) == len(lid_sets)  # the first group of each local-id sequence only


def test_fabric_loaded_rings_keep_their_count() -> None:
    """GPUs 0 and 4 of each server leave and enter through NICs of different rails, so every
    boundary loads rail-to-spine links: no count-free entry; the first count is analysed and
    the others recounted from its summary (each equals its direct analysis); servers of two
    classes have no count-free key."""
    topo = load_system("dgx-a100", nodes=12)
    model, direct = CommCostModel(topo), direct_model(topo)
    built = _counting(model)
    groups = [_group(topo, servers, (0, 4)) for servers in ((0, 1, 2), (3, 4), tuple(range(12)))]
    assert not ring_summary(model.links, groups[0]).fabric_free  # type: ignore[union-attr]
    for group in groups:
        assert model.collective("allreduce", 2**27, group) == direct.collective(
            "allreduce", 2**27, group
        )
        _same_info(model, model.group_info(group), direct.group_info(group))
    assert ("ring*", ("gpu0", "gpu4"), 0) not in model.groups._patterns.entries
    assert ("ring*", ("gpu0", "gpu4"), 0) in model.groups._counted.entries
    assert built == groups[:1]
    assert ring_summary(model.links, _group(topo, (0, 1), (0,))).fabric_free  # type: ignore[union-attr]
    assert _any_count_key(("ring", ("gpu0",), (0, 1, 0))) is None
    assert _any_count_key(("ring", ("gpu0",), (("u", 3), ("u", 3)))) is None
    assert _any_count_key(("ring", ("gpu0",), (2, 2, 2))) == ("ring*", ("gpu0",), 2)
