"""``partition`` over a stack's runs of copies (issue 27): the block costs of a run of identical
copies are summed once where the copies' costs are the same floats, and equal blocks are cut
as layer ranges. The chunks (and the errors) must be those of the unit-by-unit partition it
replaced (kept below as the reference), over zoo models, chunk counts and cost lists, including
cost lists that price one copy apart (the shortcut must not apply there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace

import pytest

from perfmodel._ints import divisors
from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel import partition as part_mod
from perfmodel.parallel.partition import (
    _block_costs,
    _unit_runs,
    _unit_spans,
    block_runs,
    layer_pieces,
    partition,
)
from perfmodel.workload import build_model
from perfmodel.workload.layers import LayerCost, Workload


def _reference(
    workload: Workload,
    k: int,
    unit_cost: Sequence[float],
    *,
    where: str = "pp",
    allow_uneven: bool = False,
) -> list[list[int]]:
    """The partition of main f05dc9f, unit by unit: the block sums one by one here for every
    cost list, and the equal-block path and errors; where those sums are not all equal,
    ``partition``'s balanced path (the same code in both) with its block sums replaced by
    these, so a ``_block_costs`` that repeats a value wrongly cannot steer it."""
    spans = _unit_spans(workload.layers)
    units = [list(range(a, b)) for a, b, _ in spans]
    in_block = [has for _, _, has in spans]
    if k == 1:
        return [list(range(len(workload.layers)))]
    nb = sum(in_block)
    if k > nb:
        raise InfeasiblePlanError(f"{where}: {k} > {nb}", value=k, where=where)
    block_costs = [round(sum(unit_cost[a:b]), 12) for a, b, has in spans if has]
    uniform = len(set(block_costs)) == 1 and nb > 1
    if uniform and not (allow_uneven and nb % k):
        per_stage = part_mod._uneven_ends(nb, k)
        if per_stage is None:
            if nb % k:
                raise InfeasiblePlanError(f"{divisors(nb)}", value=k, where=where)
            per_stage = [nb // k] * k
        owner = [c for c, n in enumerate(per_stage) for _ in range(n)]
        out: list[list[int]] = [[] for _ in per_stage]
        seen = 0
        for u, has in zip(units, in_block, strict=True):
            if not has:
                out[0 if seen == 0 else owner[seen - 1]].extend(u)
            else:
                out[owner[seen]].extend(u)
                seen += 1
        return out
    with pytest.MonkeyPatch.context() as m:  # these sums, not _block_costs's
        m.setattr(part_mod, "_block_costs", lambda runs, costs: block_costs)
        return partition(workload, k, unit_cost, where=where, allow_uneven=allow_uneven)


def _models() -> list[Workload]:
    gpt = build_model("gpt", hidden=256, layers=12, heads=8, seq_len=128, vocab=1000, batch_size=2)
    odd = build_model("gpt", hidden=256, layers=14, heads=8, seq_len=128, vocab=1000, batch_size=2)
    flat = replace(gpt, layers=tuple(replace(la) for la in gpt.layers))  # no stack: runs of 1
    return [gpt, odd, flat]


def _costs(wl: Workload) -> list[float]:
    """Per-layer costs that copies share (a function of the layer's cost fields)."""
    return [1e-6 * la.params + 1e-12 * la.fwd_flop + 1e-9 for la in wl.layers]


def _outcome(f, *args, **kw):  # type: ignore[no-untyped-def]
    try:
        return f(*args, **kw)
    except InfeasiblePlanError as e:
        return ("infeasible", e.value)


@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("model", range(3))
def test_partition_same_chunks_as_unit_by_unit(model: int, uneven: bool) -> None:
    wl = _models()[model]
    base = _costs(wl)
    runs = _unit_runs(wl.layers)
    stacked = [r for r in runs if r[2] > 1]
    variants = [base, tuple(base), [1.0] * len(base)]
    if stacked:  # one copy priced apart: the run is summed copy by copy, not uniform
        a, p, n, _ = stacked[0]
        apart = list(base)
        apart[a + (n - 1) * p + 1] *= 1.5
        variants.append(apart)
    nb = sum(n for _, _, n, has in runs if has)
    for costs in variants:
        for k in range(1, nb + 2):
            got = _outcome(partition, wl, k, costs, allow_uneven=uneven)
            want = _outcome(_reference, wl, k, costs, allow_uneven=uneven)
            assert got == want, (model, k, uneven)


def test_block_costs_shortcut_applies_and_refuses() -> None:
    wl = _models()[0]
    runs = _unit_runs(wl.layers)
    spans = [(a, b) for a, b, has in _unit_spans(wl.layers) if has]
    base = _costs(wl)

    def one_by_one(c: Sequence[float]) -> list[float]:
        return [round(sum(c[a:b]), 12) for a, b in spans]

    got = _block_costs(runs, base)
    assert got == one_by_one(base)
    a, p, n, _ = next(r for r in runs if r[2] > 1)
    # the run's values are one object repeated where the copies' floats are equal
    assert all(x is got[-1] for x in got[-n:])
    apart = list(base)
    apart[a + p + 2] += 1e-3  # the second copy priced apart: its own sum
    got2 = _block_costs(runs, apart)
    assert got2 == one_by_one(apart)
    assert len(set(got2[-n:])) == 2
    # a NaN is not repeated: each copy keeps its own (not uniform, as unit by unit)
    nan = [math.nan] * len(base)
    got3 = _block_costs(runs, nan)
    assert len(set(got3)) == len(got3)


def test_equal_blocks_cut_as_ranges_golden() -> None:
    """12 blocks over 4 chunks: the embedding's 3 layers join the first chunk, the head's 3
    the last; each chunk is 3 blocks of 13 layers."""
    wl = _models()[0]
    parts = partition(wl, 4, _costs(wl))
    assert [(p[0], p[-1] + 1) for p in parts] == [(0, 42), (42, 81), (81, 120), (120, 162)]
    assert all(p == list(range(p[0], p[-1] + 1)) for p in parts)


def _block_runs_reference(layers: Sequence[LayerCost], by_source: bool) -> list[object]:
    """``block_runs`` of main f05dc9f, layer by layer."""
    runs: list[list[object]] = []
    cur: list[LayerCost] = []
    prev: object = object()

    def ids(unit: Sequence[LayerCost]) -> tuple[int, ...]:
        return tuple(id(la.cost_source() if by_source else la) for la in unit)

    def add(unit: tuple[LayerCost, ...], key: tuple[int, ...], n: int) -> None:
        if by_source and runs and runs[-1][1] == key:
            runs[-1][2] += n  # type: ignore[operator]
        else:
            runs.append([unit, key, n])

    for piece, n in layer_pieces(layers, by_source):
        if n > 1:
            if cur:
                add(tuple(cur), ids(cur), 1)
                cur = []
            add(piece, ids(piece), n)
            prev = object()
            continue
        for la in piece:
            if cur and la.block != prev:
                add(tuple(cur), ids(cur), 1)
                cur = []
            cur.append(la)
            prev = la.block
    if cur:
        add(tuple(cur), ids(cur), 1)
    return [tuple(r) for r in runs]


@pytest.mark.parametrize("by_source", [False, True])
def test_block_runs_same_runs_as_layer_by_layer(by_source: bool) -> None:
    """Whole models and slices cut anywhere (partial copies at both ends, head and tail)."""
    costs = SimpleNamespace(prices_by_cost_key=by_source)
    for wl in _models():
        n = len(wl.layers)
        cuts = [(0, n), (0, 5), (2, 40), (3, 16), (16, 29), (20, n), (45, 150), (n - 4, n)]
        for lo, hi in cuts:
            layers = wl.layers[lo:hi]
            got = [tuple(r) for r in block_runs(layers, costs)]  # type: ignore[arg-type]
            assert got == _block_runs_reference(layers, by_source), (lo, hi)
