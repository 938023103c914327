"""The analytic prediction's ring analysis without numpy (issue 14, cold start) gives the numbers
the numpy code gave, bit for bit: progressive filling (:func:`maxmin_rates_small` against
:func:`maxmin_rates`), a group's bus bandwidth (:func:`numpy_sum` against ``numpy.sum``), the
exhaustive ring-order search (the pruned depth-first search against the lexsort over every
permutation that it replaced), and every field of a group's
:class:`~perfmodel.comm.model.GroupInfo` on several systems with the numpy paths forced.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import signal

import numpy as np
import pytest

import perfmodel.comm.channels as channels
import perfmodel.comm.rings as rings
from perfmodel.comm import CommCostModel
from perfmodel.comm.maxmin import maxmin_rates, maxmin_rates_small, numpy_sum
from perfmodel.topology import load_system


def _lexsort_order(w, h, u, u0) -> list[int] | None:
    """The numpy exhaustive search of ``rings._best_order`` before this change (commit 82a6bdb):
    every order from rank 0, best by (slowest hop, fewest hops, most units, most first units),
    then the first permutation."""
    n = len(w)
    w, h, u, u0 = (np.asarray(x) for x in (w, h, u, u0))
    perms = np.array([(0, *p) for p in itertools.permutations(range(1, n))], dtype=np.int64)
    nxt = np.roll(perms, -1, axis=1)
    bw = w[perms, nxt].min(axis=1)
    hops = h[perms, nxt].sum(axis=1)
    spare = u[perms, nxt].sum(axis=1)
    orig = u0[perms, nxt].sum(axis=1)
    if bw.max() <= 0:
        return None
    best = np.lexsort((np.arange(len(perms)), -orig, -spare, hops, -bw))[0]
    return [int(x) for x in perms[best]]


def _matrices(rng: random.Random, n: int, levels: int):
    """Hop matrices with few distinct values (ties everywhere, as in real servers) and some
    pairs without a free unit (w = 0)."""
    ws = [
        0.0,
        *(rng.choice([1e16, 2e16]) + rng.choice([12.5e9, 25e9, 50e9]) for _ in range(levels)),
    ]
    w = [[0.0 if a == b else rng.choice(ws) for b in range(n)] for a in range(n)]
    h = [[1 << 20 if a == b else rng.choice([1, 2, 2, 3]) for b in range(n)] for a in range(n)]
    u = [[0.0 if a == b else float(rng.choice([1, 2, 2, 4])) for b in range(n)] for a in range(n)]
    u0 = [[x + float(rng.choice([0, 0, 1])) for x in row] for row in u]
    return w, h, u, u0


@pytest.mark.parametrize(
    ("n", "every"), [*((n, False) for n in range(3, 9)), *((n, True) for n in range(3, 6))]
)
def test_pruned_order_search_equals_the_lexsort_over_every_order(
    n: int, every: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pruned search and (up to ``EVERY_ORDER_MAX`` ranks, issue 27) the comparison of
    every order's key each give the lexsort's order."""
    assert n <= rings.EVERY_ORDER_MAX or not every
    monkeypatch.setattr(rings, "EVERY_ORDER_MAX", n if every else 2)
    rng = random.Random(n)
    for trial in range(12 if n < 8 else 6):
        w, h, u, u0 = _matrices(rng, n, levels=1 + trial % 3)
        assert rings._exhaustive_order(w, h, u, u0) == _lexsort_order(w, h, u, u0), trial
    # all alike (an NVSwitch server): the first order, settled by the bounds
    same = [[0.0 if a == b else 2e16 + 25e9 for b in range(n)] for a in range(n)]
    ones = [[1 << 20 if a == b else 2 for b in range(n)] for a in range(n)]
    units = [[0.0 if a == b else 6.0 for b in range(n)] for a in range(n)]
    assert rings._exhaustive_order(same, ones, units, units) == list(range(n))
    none = [[0.0] * n for _ in range(n)]
    assert rings._exhaustive_order(none, ones, units, units) is None


@pytest.mark.parametrize("n", [3, 4, 5])
def test_every_order_equals_the_pruned_search_on_many_matrices(n: int) -> None:
    """Property (issue 27): below ``EVERY_ORDER_MAX`` ranks the comparison of every order's
    key is the pruned search's answer, on 300 hop matrices with ties everywhere."""
    assert n <= rings.EVERY_ORDER_MAX
    rng = random.Random(100 + n)
    for trial in range(300):
        w, h, u, u0 = _matrices(rng, n, levels=1 + trial % 4)
        every = rings._exhaustive_order(w, h, u, u0)
        saved = rings.EVERY_ORDER_MAX
        try:
            rings.EVERY_ORDER_MAX = 2
            pruned = rings._exhaustive_order(w, h, u, u0)
        finally:
            rings.EVERY_ORDER_MAX = saved
        assert every == pruned, trial


def _no_end(*_: object) -> None:
    raise TimeoutError("progressive filling did not end (a frozen flow's entries kept live?)")


def test_plain_python_filling_equals_numpy_bit_for_bit() -> None:
    """The plain filling equals numpy's on random inputs, and ends: a filling that never
    freezes a flow would loop, so the test stops it after 20 s and fails (final26: no
    pytest-timeout here, and a hang would stall CI instead of failing it)."""
    old = signal.signal(signal.SIGALRM, _no_end)
    signal.setitimer(signal.ITIMER_REAL, 20.0)
    try:
        _filling_equals_numpy()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _filling_equals_numpy() -> None:
    rng = random.Random(7)
    for trial in range(300):
        n_flows = rng.randint(1, 12)
        n_res = rng.randint(1, 30)
        n_ent = rng.randint(0, 60)
        fi = sorted(rng.randrange(n_flows) for _ in range(n_ent))
        ei = [rng.randrange(n_res) for _ in range(n_ent)]
        # integer multiplicities and fractional P2P charges (perfmodel.comm.pcie_p2p)
        mult = [rng.choice([1.0, 2.0, 3.0, 1.25, 0.8, 1 / 3]) for _ in range(n_ent)]
        cap = [rng.choice([12.5e9, 25e9, 25e9, 50e9, 1e6, 0.5]) for _ in range(n_res)]
        ref = maxmin_rates(
            np.asarray(fi, dtype=np.int64),
            np.asarray(ei, dtype=np.int64),
            np.asarray(mult),
            np.asarray(cap),
            n_flows,
        ).tolist()
        assert maxmin_rates_small(fi, ei, mult, cap, n_flows) == ref, trial


def test_saturation_is_at_or_below_the_tolerance() -> None:
    """A resource saturates when what remains is at most its tolerance (``<=``): here the
    zero-capacity resource makes the fill step 0 and the other's capacity is exactly its own
    tolerance (1e-12 x max(1e-12, 1)), so both flows freeze at 0 (a strict ``<`` would leave
    the second at 1e-12; final26's probe)."""
    args = ([0, 1], [0, 1], [1.0, 1.0], [0.0, 1e-12], 2)
    assert maxmin_rates_small(*args) == [0.0, 0.0]
    assert maxmin_rates(*(np.asarray(a) for a in args[:4]), 2).tolist() == [0.0, 0.0]


def test_numpy_sum_is_numpys_pairwise_sum() -> None:
    rng = random.Random(3)
    for n in [*range(0, 140), 255, 256, 257, 1000, 4099]:
        xs = [rng.uniform(0.0, 1.0) * 10.0 ** rng.randint(-3, 12) for _ in range(n)]
        assert numpy_sum(xs) == float(np.sum(np.asarray(xs))), n
    assert numpy_sum([]) == 0.0 and numpy_sum([np.inf, 1.0]) == np.inf


SYSTEMS = [
    ("dgx-a100", 2, {}),  # NVSwitch servers on rails
    ("dgx-h100", 1, {}),
    ("dgx-h100", 2, {}),
    ("dgx1-v100", 2, {}),  # hybrid cube mesh, refused P2P pairs through the CPUs
    ("dgx-a100", 4, {"fabric_topology": "fat-tree"}),
    ("pcie-8xtitanx", 2, {"network": "10gbe"}),  # PCIe box, P2P charge, Ethernet sockets
    ("ibm-ac922-4xv100", 3, {"network": "eth-10g"}),
]


def _groups(topo):
    gs, gpn = topo.gpus, topo.gpus_per_node
    return [
        gs,
        gs[:gpn],
        gs[: gpn // 2],
        gs[1::gpn],
        tuple(g for i, g in enumerate(gs) if i % gpn in (0, gpn - 1)),
        (*gs[:gpn], *gs[gpn + 1 : gpn + 3]),
    ]


@pytest.mark.parametrize(("system", "nodes", "kw"), SYSTEMS)
def test_group_info_equals_the_numpy_analysis(system, nodes, kw, monkeypatch) -> None:
    topo = load_system(system, nodes=nodes, **kw)
    groups = [g for g in _groups(topo) if len(g) >= 2]
    plain = CommCostModel(topo)
    got = [plain.groups.build(tuple(g)) for g in groups]
    with monkeypatch.context() as m:  # numpy filling for every size, the lexsort search
        m.setattr(channels, "SMALL_ENTRIES", -1)
        m.setattr(rings, "_exhaustive_order", _lexsort_order)
        ref_model = CommCostModel(topo)
        ref = [ref_model.groups.build(tuple(g)) for g in groups]
        for a, b in zip(got, ref):
            for f in dataclasses.fields(a):
                x, y = getattr(a, f.name), getattr(b, f.name)
                if f.name == "channels":
                    x, y = list(x), list(y)
                assert x == y, (f.name, a.members)
        # the flows of a pipeline's sends, and rings running at once
        pairs = tuple(zip(topo.gpus[:-1], topo.gpus[1:]))
        assert CommCostModel(topo).transfers.terms(pairs) == plain.transfers.terms(pairs)
        halves = [topo.gpus[: len(topo.gpus) // 2], topo.gpus[len(topo.gpus) // 2 :]]
        want = CommCostModel(topo).others.concurrent_ring_bw(halves)
    assert plain.others.concurrent_ring_bw(halves) == want
