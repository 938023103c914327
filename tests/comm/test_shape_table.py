"""Pipeline sends' name-free shape read off a kept node table (issue 27, wave 12b).

``Transfers._shape`` reads each endpoint's server, class and local id off ``_of_node``, filled
a whole server at a time (``Transfers._learn``) from the server symmetry's tables; the answer
must be what reading those tables endpoint by endpoint gives (``Transfers._shape_read``) for
every set of sends, in any order of asking, including sets that leave the classes (a server
of no class, a node outside every server) or stay in one server. ``Transfers.time``'s one-size
loop must be :meth:`Transfers.flows_time`'s slowest send, ``0.0`` for self-sends only."""

from __future__ import annotations

import dataclasses
import random

import pytest
from reference_models import direct_terms, thin_spine_fat_tree

from perfmodel.comm import CommCostModel
from perfmodel.topology import Topology, load_system
from perfmodel.topology.symmetry import server_symmetry


def _refused_on_one_server() -> Topology:
    """DGX-1 V100 x3, server 1 built unlike the others (no class; a graph without pattern)."""
    topo = load_system("dgx1-v100", nodes=3)
    g = topo.graph.copy()
    g.nodes["n1/gpu0"]["p2p_denied"] = ("gpu1",)
    g.nodes["n1/gpu1"]["p2p_denied"] = ("gpu0",)
    return dataclasses.replace(topo, graph=g, pattern=None)


CASES = [
    ("dgx-a100 x12 rails", lambda: load_system("dgx-a100", nodes=12)),
    ("dgx-a100 x5 fat tree", lambda: load_system("dgx-a100", nodes=5, fabric_topology="fat-tree")),
    ("dgx-h100 x3", lambda: load_system("dgx-h100", nodes=3)),
    ("pcie-8x-server x3", lambda: load_system("pcie-8x-server", nodes=3)),
    ("dgx1-v100 refused on n1", _refused_on_one_server),
    ("thin-spine fat tree", thin_spine_fat_tree),
]


def _sets(topo: Topology, rng: random.Random, count: int) -> list[tuple[tuple[str, str], ...]]:
    """Random sets of sends: between two servers or across several, some within one server,
    some with a node outside every server (a fabric switch) or a self-send."""
    gpn = topo.gpus_per_node
    n = topo.num_nodes
    sym = server_symmetry(topo)
    outside = [v for v in topo.graph.nodes if sym.server.get(v, -1) < 0][:3]
    out = []
    for _ in range(count):
        k = rng.choice([1, 2, 3, gpn, 2 * gpn])
        spread = rng.choice([1, 2, min(4, n)])
        base = rng.sample(range(n), spread)
        pairs = []
        for _ in range(k):
            a, b = rng.choice(base), rng.choice(base)
            if rng.random() < 0.8 and n > 1:
                b = rng.choice([s for s in range(n) if s != a])
            src = topo.gpus[a * gpn + rng.randrange(gpn)]
            dst = topo.gpus[b * gpn + rng.randrange(gpn)]
            pairs.append((src, dst))
        roll = rng.random()
        if roll < 0.05 and outside:
            pairs.append((pairs[0][0], rng.choice(outside)))
        elif roll < 0.1:
            pairs.append((pairs[0][0], pairs[0][0]))
        out.append(tuple(pairs))
    return out


@pytest.mark.parametrize(("name", "make"), CASES, ids=[c[0] for c in CASES])
def test_kept_table_shape_equals_read_shape(name: str, make: object) -> None:
    topo = make()  # type: ignore[operator]
    model = CommCostModel(topo)
    fresh = CommCostModel(topo)  # its table never filled: every answer read off the tables
    tr = model.transfers
    rng = random.Random(1227)
    sets = _sets(topo, rng, 120)
    known = shaped = 0
    for pairs in sets + sets[::-1]:
        want = fresh.transfers._shape_read(pairs)
        known += all(v in tr._of_node for p in pairs for v in p)
        shaped += want is not None
        assert tr._shape(pairs) == want, (name, pairs)
        assert tr._shape_read(pairs) == want
    assert known > 0 or not shaped  # the kept table answered, not only the reads
    assert tr._shape(()) == fresh.transfers._shape_read(()) == ((), (), (), ())


@pytest.mark.parametrize(("name", "make"), CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_time_is_slowest_flow(name: str, make: object) -> None:
    topo = make()  # type: ignore[operator]
    model = CommCostModel(topo)
    rng = random.Random(12)
    for pairs in _sets(topo, rng, 40):
        if any(topo.graph.nodes[v]["kind"].value not in ("gpu", "cpu") for p in pairs for v in p):
            continue
        nbytes = rng.choice([1.0, 4096.0, 3.3e6, 1e9])
        todo = [(s, d, nbytes) for s, d in pairs if s != d]
        want = model.transfers.flows_time(todo)[0] if todo else 0.0
        assert model.transfers.time(pairs, nbytes) == want
        assert model.transfers.time(list(pairs), nbytes) == want
        assert model.transfers.time(pairs, 0.0) == 0.0
        if todo:
            assert model.transfers.terms(tuple((s, d) for s, d, _ in todo)) == direct_terms(
                topo, tuple((s, d) for s, d, _ in todo)
            )
    assert model.transfers.time((), 1.0) == 0.0
    gpu = topo.gpus[0]
    assert model.transfers.time(((gpu, gpu),), 1.0) == 0.0
