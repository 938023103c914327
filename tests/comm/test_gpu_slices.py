"""A group that is a strided slice of a cluster's GPUs is split by server by index arithmetic
(``comm/gpu_slices.server_runs``, issue 27): the same parts, local ids and servers as the server
tables give member by member, hence the same ring pattern and collective shape as the direct
path (switch ``gpu_slices.ON`` off), and a data-parallel ring over many servers makes no
per-member table entry."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.comm import CommCostModel, gpu_slices
from perfmodel.comm.gpu_slices import server_runs
from perfmodel.comm.nodes import split_by_server
from perfmodel.comm.params import Algorithm
from perfmodel.parallel.placement import Placement
from perfmodel.topology import Topology, load_system

#: the size from which the door is taken, as shipped (the fixture below lowers it)
DEFAULT_MIN_MEMBERS = gpu_slices.MIN_MEMBERS


@pytest.fixture(autouse=True)
def _every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every slice of two members or more takes the door."""
    monkeypatch.setattr(gpu_slices, "MIN_MEMBERS", 2)


SYSTEMS = [
    ("dgx-a100", {"nodes": 12}),  # rails: one class
    ("dgx-a100", {"nodes": 12, "fabric_topology": "fat-tree"}),
    ("dgx-h100", {"nodes": 6}),
    ("dgx1-v100", {"nodes": 4}),
]


def _slices(topo: Topology) -> list[tuple[str, ...]]:
    """Strided slices of the GPUs (kept, refused and one-server ones) and every group of
    placements of every order."""
    gpus, out = topo.gpus, []
    for r, step in itertools.product(range(0, 20, 3), (1, 2, 3, 4, 5, 8, 16, 24)):
        for n in (2, 3, 4, 6, 8, 16):
            g = gpus[r : r + step * n : step]
            if len(g) == n:
                out.append(g)
    total = len(gpus)
    for dp, tp, pp in [(total, 1, 1), (total // 8, 8, 1), (total // 8, 4, 2), (2, 4, total // 8)]:
        for order in itertools.permutations(("tp", "dp", "pp")):
            pl = Placement(dp, tp, pp, gpus, order)  # type: ignore[arg-type]
            out += [pl.dp_group(p, t) for p in range(pp) for t in range(tp)]
            out += [pl.tp_group(d, p) for d in range(dp) for p in range(pp)]
            out += [pl.pp_group(d, t) for d in range(dp) for t in range(tp)]
    out.append((gpus[5], gpus[1], gpus[9]))  # not a slice
    return [g for g in dict.fromkeys(out) if len(g) > 1]


def _direct(flip: pytest.MonkeyPatch, model: CommCostModel, group: tuple[str, ...]) -> object:
    with flip.context() as m:
        m.setattr(gpu_slices, "ON", False)
        return (
            model.groups._ring_pattern(group),
            model.groups.collective_shape(group, Algorithm.AUTO),
        )


@pytest.mark.parametrize(("system", "kw"), SYSTEMS, ids=[f"{s}{k}" for s, k in SYSTEMS])
def test_slices_equal_direct(monkeypatch: pytest.MonkeyPatch, system: str, kw: dict) -> None:
    """Every slice's parts, local ids and servers are the tables' (where kept), and its ring
    pattern and collective shape equal the direct path's."""
    topo = load_system(system, **kw)
    model = CommCostModel(topo)
    links, kept = model.links, 0
    for group in _slices(topo):
        got = server_runs(topo, links, group)
        if got is not None:
            kept += 1
            parts, lids, servers = got
            assert parts == split_by_server(topo, group, links.server), group
            assert list(servers) == [links.server[p[0]] for p in parts]
            assert all(tuple(links.local_id[x] for x in p) == lids for p in parts)
        fast = (
            model.groups._ring_pattern(group),
            model.groups.collective_shape(group, Algorithm.AUTO),
        )
        assert fast == _direct(monkeypatch, model, group), group
    assert kept > 50  # the door is taken (placements' groups are slices)


def test_refused_slices() -> None:
    """Slices whose servers hold unequal counts, other orders and one-member groups are left
    to the direct path."""
    topo = load_system("dgx-a100", nodes=4)
    links, gpus = CommCostModel(topo).links, topo.gpus
    assert server_runs(topo, links, gpus[:12]) is None  # 8 then 4 GPUs
    assert server_runs(topo, links, gpus[4:12]) is None  # starts mid-server
    assert server_runs(topo, links, gpus[0:30:3]) is None  # 3 does not divide 8
    assert server_runs(topo, links, gpus[:1]) is None
    assert server_runs(topo, links, (gpus[8], gpus[0])) is None
    assert server_runs(topo, links, (gpus[0], gpus[8], gpus[17])) is None  # not a slice
    assert server_runs(topo, links, (*gpus[:15], gpus[31])) is None  # not a slice
    assert server_runs(topo, links, (gpus[0], gpus[0])) is None  # step 0
    parts, lids, servers = server_runs(topo, links, gpus[1:32:2])  # type: ignore[misc]
    assert (len(parts), len(lids), servers) == (4, 4, range(4))


def test_wide_ring_reads_no_member(monkeypatch: pytest.MonkeyPatch) -> None:
    """The data-parallel ring of all GPUs of 128 servers (beyond the tables' per-server
    fill) makes no per-member entry of the server tables; the direct path makes all."""
    monkeypatch.setattr(gpu_slices, "MIN_MEMBERS", DEFAULT_MIN_MEMBERS)  # the shipped size
    topo = load_system("dgx-a100", nodes=128)
    model = CommCostModel(topo)
    tables = (model.links.server, model.links.local_id)
    before = [dict.__len__(t) for t in tables]
    key = model.groups._ring_pattern(topo.gpus)
    assert key is not None and len(key[1]) == 128
    assert [dict.__len__(t) for t in tables] == before
    assert model.groups.collective_shape(topo.gpus, Algorithm.AUTO) is None
    assert [dict.__len__(t) for t in tables] == before
    assert _direct(monkeypatch, model, topo.gpus) == (key, None)
    assert all(dict.__len__(t) >= len(topo.gpus) for t in tables)


@pytest.mark.parametrize("step", [1, 4, 8])
def test_pattern_group_equal_direct(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """A wide data-parallel group's analysis read off its ring pattern (the second group of
    the pattern: its parts' servers by arithmetic) and its collectives equal the direct
    path's, field by field."""
    topo = load_system("dgx-a100", nodes=16)
    gpus = topo.gpus
    first, second = gpus[0:64:step], gpus[64::step]  # servers 0-7, then 8-15
    got = []
    for on in (True, False):
        monkeypatch.setattr(gpu_slices, "ON", on)
        model = CommCostModel(topo)
        model.group_info(first)
        info = model.group_info(second)
        got.append(
            (
                {f: getattr(info, f) for f in info.__dataclass_fields__ if f != "channels"},
                info.channels.servers,  # type: ignore[attr-defined]
                info.channels.intra_hops,  # type: ignore[attr-defined]
                tuple(info.channels),
                [model.collective("allreduce", m, second) for m in (2**20, 2**28)],
            )
        )
    assert got[0] == got[1]
