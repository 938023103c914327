"""The sharing factor's name-free shapes read every member in one pass (issue 27, wave 12b):
``costs._servers_and_lids`` cuts one read of all the groups' names into groups; it must equal
reading each group by itself (servers and local ids per member, ``None`` for a name in no
server's table), for groups of one size and of mixed sizes, on small clusters."""

from __future__ import annotations

import random

import pytest

from perfmodel.parallel import costs
from perfmodel.topology import load_system
from perfmodel.topology.symmetry import server_symmetry

SYSTEMS = [
    ("dgx-a100", {"nodes": 4}),
    ("dgx-a100", {"nodes": 5, "fabric_topology": "fat-tree"}),
    ("dgx1-v100", {"nodes": 3}),
]


def _per_group(sym, groups):  # type: ignore[no-untyped-def]
    """Each group read by itself, member by member."""
    try:
        srvs = [tuple(sym.server[m] for m in g) for g in groups]
        lids = tuple(tuple(sym.local_id[m] for m in g) for g in groups)
    except KeyError:
        return None
    return srvs, lids


@pytest.mark.parametrize(("system", "kw"), SYSTEMS, ids=[f"{s}{k}" for s, k in SYSTEMS])
def test_one_pass_equals_per_group(system: str, kw: dict[str, object]) -> None:
    topo = load_system(system, **kw)
    sym = server_symmetry(topo)
    rng = random.Random(1212)
    outside = next(v for v in topo.graph.nodes if sym.server.get(v, -1) < 0)
    for _ in range(200):
        count = rng.choice([1, 2, 3, 8, 16])
        sizes = [rng.choice([1, 2, 4])] * count if rng.random() < 0.7 else None
        if sizes is None:
            sizes = [rng.choice([1, 2, 3, 4]) for _ in range(count)]
        groups = tuple(tuple(rng.sample(topo.gpus, k)) for k in sizes)
        if rng.random() < 0.1:
            groups = (*groups[:-1], (*groups[-1][:-1], outside))
        got = costs._servers_and_lids(sym, groups)
        assert got == _per_group(sym, groups), groups
        if got is not None:  # the shapes built on it, as their callers read them
            assert costs._server_indices(sym.cls, got[0]) == costs._server_indices(
                sym.cls, _per_group(sym, groups)[0]
            )
    assert costs._servers_and_lids(sym, ()) == ([], ())
