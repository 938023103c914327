"""The C-loop fast paths of issue 27 equal the member-by-member slow paths: ``split_by_server``
of consecutive equal runs (``equal_runs``) and ``GroupMemo._ring_pattern``'s one-size parts
and class sequence, on clusters of 2-16 servers and arbitrary groups (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.comm import CommCostModel
from perfmodel.comm.nodes import equal_runs, split_by_server
from perfmodel.topology import load_system


def _slow_split(members: tuple[str, ...], server: dict[str, int]) -> list[list[str]]:
    """Members by server, servers in order of first appearance (no fast path)."""
    groups: dict[int, list[str]] = {}
    for m in members:
        groups.setdefault(server[m], []).append(m)
    return list(groups.values())


def _slow_pattern(model: CommCostModel, members: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """The ring pattern as ``GroupMemo._ring_pattern`` defines it, member by member."""
    links = model.links
    parts = _slow_split(members, links.server)
    if len(parts) < 2:
        return None
    key0 = tuple(links.local_id[m] for m in parts[0])
    if any(tuple(links.local_id[m] for m in p) != key0 for p in parts[1:]):
        return None
    seq = []
    for p in parts:
        s = links.server[p[0]]
        c = links._symmetry.cls.get(s)
        seq.append(c if c is not None else ("u", s))
    return ("ring", key0, tuple(seq)), parts


_MODELS: dict[int, CommCostModel] = {}


def _model(nodes: int) -> CommCostModel:
    if nodes not in _MODELS:
        _MODELS[nodes] = CommCostModel(load_system("dgx-a100", nodes=nodes))
    return _MODELS[nodes]


@st.composite
def _groups(draw):  # type: ignore[no-untyped-def]
    """A cluster size and a group on it: equal runs of local ids over distinct servers in any
    order (the fast path), or any duplicate-free GPU list (mostly the slow path)."""
    nodes = draw(st.integers(2, 16))
    topo = _model(nodes).topology
    gpn = topo.gpus_per_node
    if draw(st.booleans()):
        servers = draw(st.permutations(range(nodes)))[: draw(st.integers(1, nodes))]
        lids = draw(st.lists(st.integers(0, gpn - 1), min_size=1, max_size=gpn, unique=True))
        if draw(st.booleans()):  # one lid order per server: other parts' lids differ
            return nodes, tuple(topo.gpus[s * gpn + k] for s in servers for k in lids)
        per = [draw(st.permutations(lids)) for _ in servers]
        return nodes, tuple(topo.gpus[s * gpn + k] for s, ks in zip(servers, per) for k in ks)
    idx = draw(st.lists(st.integers(0, nodes * gpn - 1), min_size=1, max_size=40, unique=True))
    return nodes, tuple(topo.gpus[i] for i in idx)


@settings(max_examples=150, deadline=None)
@given(_groups())
def test_split_fast_path_is_the_slow_split(case) -> None:  # type: ignore[no-untyped-def]
    nodes, members = case
    model = _model(nodes)
    server = model.links.server
    want = _slow_split(members, server)
    assert split_by_server(model.topology, members, server) == want
    assert split_by_server(model.topology, members) == want
    fast = equal_runs(members, list(map(server.__getitem__, members)))
    assert fast is None or fast == want


@settings(max_examples=150, deadline=None)
@given(_groups())
def test_ring_pattern_fast_path_is_the_slow_pattern(case) -> None:  # type: ignore[no-untyped-def]
    nodes, members = case
    model = _model(nodes)
    memo = model.groups
    assert memo._ring_pattern(members) == _slow_pattern(model, members)


def _runs(*members: str) -> list[list[str]] | None:
    server = {"a": 0, "b": 0, "c": 1, "d": 1, "e": 0, "f": 2}
    return equal_runs(members, [server[m] for m in members])


def test_equal_runs_cases() -> None:
    """Hand cases: runs of 2 over distinct servers split; a server met twice, unequal runs
    and a single member are left to the slow path."""
    assert _runs("a", "b", "c", "d") == [["a", "b"], ["c", "d"]]
    assert _runs("a", "c", "e", "d") is None  # server 0 twice
    assert _runs("a", "b", "c") is None  # 3 members, first run of 2
    assert _runs("a", "b", "c", "f") is None  # runs of 2 and 1 + 1
    assert _runs("a") is None
    assert _runs("c", "f") == [["c"], ["f"]]  # one member per server
