"""A one-class ring pattern whose boundaries load fabric links, read off a group of the same
local ids over another server count with its rates recounted (issue 27,
``GroupMemo._recounted``, ``RingSummary.recount``): every group so read has its own direct
analysis's numbers, channels and collective results, bit for bit, for 1-4 GPUs a server over
2-8 servers, on rails (GPUs 0 and 4 cross rails through the spine) and on rails with one
spine uplink per rail (the spine binds: the rates move with the count), where the recount
fires; on multi-switch fat trees (a leaf's servers are one class whose rings load no fabric
link: the count-free path, never the recount) and on DGX-1 and DGX H100 clusters, which the
property test samples beside them; the switch off analyses each count itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_models import direct_model
from test_ring_counts import _counting
from test_ring_patterns import _group, _same_info

from perfmodel.comm import CommCostModel
from perfmodel.comm.group import GroupInfo
from perfmodel.comm.group_memo import _PATTERN_FIELDS, GroupMemo
from perfmodel.comm.ring_summary import _Summariser, ring_summary
from perfmodel.topology import Topology, load_system
from perfmodel.topology.symmetry import server_symmetry

NODES = 8
SYSTEMS = (
    ("dgx-a100", ()),  # rails: one class; GPUs 0 and 4 cross rails through the spine
    ("dgx-a100", (("oversubscription", 16.0),)),  # one spine uplink per rail: it binds
    ("dgx-a100", (("fabric_topology", "fat-tree"),)),  # leaves: classes of a few servers
    ("dgx-h100", ()),
    ("dgx1-v100", ()),
)
LIDS = ((0,), (0, 4), (1, 5), (3, 4), (0, 1, 4, 5), (0, 2, 4, 6), (2, 3, 6, 7), (0, 1, 2, 3))
_TOPOS: dict[tuple[str, tuple[tuple[str, object], ...]], Topology] = {}


def _topo(system: str, kw: tuple[tuple[str, object], ...]) -> Topology:
    key = (system, kw)
    if key not in _TOPOS:
        _TOPOS[key] = load_system(system, nodes=NODES, **dict(kw))  # type: ignore[arg-type]
    return _TOPOS[key]


def _biggest_class(topo: Topology) -> list[int]:
    """The servers of the topology's largest class of interchangeable servers."""
    by_cls: dict[int, list[int]] = {}
    for s, c in sorted(server_symmetry(topo).cls.items()):
        if s >= 0:
            by_cls.setdefault(c, []).append(s)
    return max(by_cls.values(), key=len)


def _same_numbers(got: GroupInfo, want: GroupInfo) -> None:
    for f in _PATTERN_FIELDS:
        assert getattr(got, f) == getattr(want, f), f


def _check(model: CommCostModel, direct: CommCostModel, group: tuple[str, ...]) -> None:
    for op in ("allreduce", "allgather", "reducescatter"):
        for m in (2**12, 2**27):
            assert model.collective(op, m, group) == direct.collective(op, m, group), (op, m)
    got, want = model.group_info(group), direct.group_info(group)
    _same_numbers(got, want)
    _same_info(model, got, want)


@st.composite
def _cases(draw):  # type: ignore[no-untyped-def]
    """A topology, local ids, and two or three groups of them over server subsets: of one
    class (other counts, other orders) or, now and then, any servers."""
    system, kw = draw(st.sampled_from(SYSTEMS))
    topo = _topo(system, kw)
    lids = draw(st.sampled_from(LIDS))
    cls = _biggest_class(topo)
    groups = []
    for _ in range(draw(st.integers(2, 3))):
        pool = list(range(NODES)) if draw(st.integers(0, 4)) == 0 else cls
        servers = draw(st.permutations(pool))[: draw(st.integers(2, len(pool)))]
        groups.append(_group(topo, tuple(servers), lids))
    return topo, groups


@settings(max_examples=60, deadline=None)
@given(case=_cases())
def test_recounted_pattern_equals_direct_analysis(case) -> None:  # type: ignore[no-untyped-def]
    topo, groups = case
    model, direct = CommCostModel(topo), direct_model(topo)
    for group in groups:
        _check(model, direct, group)


def _thin_rails() -> Topology:
    return _topo("dgx-a100", (("oversubscription", 16.0),))


def test_count_moves_the_rates_and_is_recounted() -> None:
    """GPUs 0 and 4 of 8 DGX A100 on rails with one spine uplink per rail: the ring's
    boundaries cross the spine, whose load grows with the server count, so the 3-server
    ring's numbers are not the 8-server ring's; they are read off it (one build), recounted,
    and equal the 3-server ring's own analysis."""
    topo = _thin_rails()
    model, direct = CommCostModel(topo), direct_model(topo)
    built = _counting(model)
    wide, narrow = _group(topo, tuple(range(8)), (0, 4)), _group(topo, (5, 2, 7), (0, 4))
    a, b = model.group_info(wide), model.group_info(narrow)
    assert built == [wide]
    assert a.ring_bw_Bps != b.ring_bw_Bps  # the count matters: the pattern is not reusable as is
    _same_numbers(b, direct.group_info(narrow))
    _check(model, direct, narrow)


def test_switch_off_builds_each_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """With :attr:`GroupMemo.RECOUNT` off, each server count of the ring is analysed itself,
    with the same numbers."""
    topo = _thin_rails()
    groups = [_group(topo, tuple(range(n)), (0, 4)) for n in (8, 3, 5)]
    on = CommCostModel(topo)
    on_infos = [on.group_info(g) for g in groups]
    assert len(on.groups._counted.entries) == 1  # the 3- and 5-server rings were recounted
    monkeypatch.setattr(GroupMemo, "RECOUNT", False)
    off = CommCostModel(topo)
    built = _counting(off)
    for g, want in zip(groups, on_infos, strict=True):
        _same_numbers(off.group_info(g), want)
        _same_info(off, off.group_info(g), want)
    assert built == groups
    assert not off.groups._counted.entries


@pytest.mark.parametrize("lids", LIDS)
def test_thin_rails_every_count_recounted_equals_direct(lids: tuple[int, ...]) -> None:
    """On rails with one spine uplink per rail, each set of local ids over 8 servers, then
    over 2, 3, 5 and 7: every narrower ring is its own direct analysis (the property test
    draws the rails now and then; this walks them every time)."""
    topo = _thin_rails()
    model, direct = CommCostModel(topo), direct_model(topo)
    for n in (8, 2, 3, 5, 7):
        _check(model, direct, _group(topo, tuple(range(n)), lids))


def test_fat_tree_rings_are_count_free_not_recounted() -> None:
    """On a fat tree, a ring inside one leaf's class loads no fabric link (the count-free
    path: nothing is kept for a recount), and a ring over two leaves' servers (several
    classes) is no one-class pattern: it is analysed itself."""
    topo = _topo("dgx-a100", (("fabric_topology", "fat-tree"),))
    cls = _biggest_class(topo)
    other = [s for s in range(NODES) if s not in cls]
    model, direct = CommCostModel(topo), direct_model(topo)
    built = _counting(model)
    inside = _group(topo, tuple(cls), (0, 4))
    across = _group(topo, (cls[0], *other[:2]), (0, 4))
    model.group_info(inside)
    _check(model, direct, across)
    assert across in built
    assert not model.groups._counted.entries


#: topologies where a one-class ring is recounted: thin rails (the spine binds), and two where
#: a ring's inter-server rates differ from its rates (rev33: there a recount of the wrong kept
#: incidence shows; on DGX A100 rails the two are equal)
KEPT_SYSTEMS = (
    ("dgx-a100", (("oversubscription", 16.0),)),
    ("pcie-8x-server", ()),
    ("mi300x-8", ()),
)


@pytest.mark.parametrize("system", KEPT_SYSTEMS, ids=lambda s: s[0] + "+" * len(s[1]))
def test_kept_incidence_recounts_as_built_anew(
    system: tuple[str, tuple[tuple[str, object], ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_Summariser.KEEP_INCIDENCE``: a recount scales the kept incidences' fabric entries;
    its rates and inter-server rates equal those of the incidences built anew from the scaled
    loads (the switch off) and those of the ring's own summary over that many servers, for
    every count and the local ids of :data:`LIDS` that the server has; at least one case has
    inter-server rates other than its rates, so each kept incidence is checked as itself."""
    topo = _topo(*system)
    links = CommCostModel(topo).links
    recounted = differ = 0
    for lids in LIDS:
        if max(lids) >= topo.gpus_per_node:
            continue
        summary = ring_summary(links, _group(topo, tuple(range(NODES)), lids))
        if summary is None or summary.recount is None:
            continue
        assert summary.recount.func.__self__._kept is not None  # type: ignore[attr-defined]
        recounted += 1
        for n in (2, 3, 5, 7, 8, 11):
            kept = summary.recount(n)
            with monkeypatch.context() as mp:
                mp.setattr(_Summariser, "KEEP_INCIDENCE", False)
                anew = summary.recount(n)
            assert kept == anew, (lids, n)
            differ += kept[0] != kept[1]
            if n <= NODES:
                own = ring_summary(links, _group(topo, tuple(range(n)), lids))
                assert own is not None and kept == (own.rates, own.inter_rates), (lids, n)
    assert recounted
    if system[0] != "dgx-a100":
        assert differ
