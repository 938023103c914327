"""Layers as units and stages: a unit is a run of consecutive layers with the same ``block`` (a
transformer block, or one layer outside the blocks); :func:`partition` cuts a workload's units
into pipeline stages, :func:`block_runs` reads a stage's units as runs of identical copies (a
stack's blocks priced once).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby, pairwise
from operator import attrgetter

from perfmodel._ints import divisors
from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.pp_layout import PipelineLayout, layout_chunks
from perfmodel.workload.layers import (
    LayerCost,
    Workload,
    layer_runs,
)


def _unit_spans(layers: Sequence[LayerCost]) -> list[tuple[int, int, bool]]:
    """Runs of consecutive layers with the same ``block`` as ``(start, end, has a block)``
    index ranges; a stack's whole copies (:func:`layer_pieces`) are one unit each, read from the
    stack's template (no copy is made)."""
    return [
        (a + j * p, a + (j + 1) * p, has) for a, p, n, has in _unit_runs(layers) for j in range(n)
    ]


def _unit_runs(layers: Sequence[LayerCost]) -> list[tuple[int, int, int, bool]]:
    """:func:`_unit_spans` as runs ``(start, layers per unit, units, has a block)``: a stack's
    ``n`` whole copies of a ``p``-layer block (:func:`layer_pieces`) are one run of ``n`` units
    from ``start``, every other unit a run of one."""
    runs: list[tuple[int, int, int, bool]] = []
    i = 0
    start = 0
    prev: object = object()
    for piece, n in layer_pieces(layers):
        if n > 1:
            if i > start:
                runs.append((start, i - start, 1, prev is not None))
            p = len(piece)
            runs.append((i, p, n, True))
            i += n * p
            start, prev = i, object()
            continue
        for la in piece:
            b = la.block
            if i > start and b != prev:
                runs.append((start, i - start, 1, prev is not None))
                start = i
            prev = b
            i += 1
    if i > start:
        runs.append((start, i - start, 1, prev is not None))
    return runs


def unit_ids(layers: Sequence[LayerCost]) -> list[list[int]]:
    """Runs of consecutive layers with the same ``block`` (``None`` runs are their own unit)."""
    return [list(range(a, b)) for a, b, _ in _unit_spans(layers)]


def unit_bounds(layers: Sequence[LayerCost]) -> list[tuple[int, int]]:
    """:func:`unit_ids` as ``(first, end)`` index ranges (``range(first, end)`` each)."""
    return [(a, b) for a, b, _ in _unit_spans(layers)]


def take_layers(
    layers: Sequence[LayerCost], ids: Sequence[int], contiguous: bool
) -> Sequence[LayerCost]:
    """``[layers[i] for i in ids]``; the slice of ``layers`` where ``ids`` are ``contiguous``
    (ascending consecutive indices: a :class:`~perfmodel.workload.layers.StackedLayers` slice
    keeps its copies unmade)."""
    if contiguous and ids:
        return layers[ids[0] : ids[-1] + 1]
    return [layers[i] for i in ids]


def partition(
    workload: Workload,
    k: int,
    unit_cost: Sequence[float],
    *,
    where: str = "pp",
    allow_uneven: bool = False,
) -> list[list[int]]:
    """Split the layers into ``k`` contiguous chunks, cutting only between blocks.

    Transformer-like models (all blocks equal) need ``k`` to divide the number of blocks
    (Megatron-LM's rule); the embedding goes with the first chunk and the head with the last.
    Other models, and equal blocks that ``k`` does not divide when ``allow_uneven`` (torchtitan
    splits as evenly as it can), get the contiguous partition minimising the largest chunk time.

    Raises
    ------
    InfeasiblePlanError
        If ``k`` exceeds the blocks, or does not divide equal blocks; the message lists what fits.
    """
    runs = _unit_runs(workload.layers)
    if k == 1:
        return [list(range(len(workload.layers)))]
    nb = sum(n for _, _, n, has in runs if has)
    if k > nb:
        raise InfeasiblePlanError(
            f"{where}: {k} pipeline chunks but model {workload.name} has only {nb} blocks to "
            f"split between; use at most {nb}",
            value=k,
            where=where,
        )
    block_costs = _block_costs(runs, unit_cost)
    uniform = len(set(block_costs)) == 1 and nb > 1
    if uniform and not (allow_uneven and nb % k):
        per_stage = _uneven_ends(nb, k)
        if per_stage is None:
            if nb % k:
                fits = divisors(nb)
                raise InfeasiblePlanError(
                    f"{where}: {k} pipeline chunks do not divide the {nb} layers of "
                    f"{workload.name}; chunk counts that divide: {fits}",
                    value=k,
                    where=where,
                )
            per_stage = [nb // k] * k
        return _cut_runs(runs, per_stage, len(workload.layers))
    spans = _unit_spans(workload.layers)
    units = [list(range(a, b)) for a, b, _ in spans]
    # balanced contiguous partition over units (binary search on the bottleneck)
    costs = [sum(unit_cost[i] for i in u) for u in units]

    def split(limit: float) -> list[list[int]] | None:
        parts: list[list[int]] = [[]]
        acc = 0.0
        for u, c in zip(units, costs, strict=True):
            if parts[-1] and acc + c > limit:
                parts.append([])
                acc = 0.0
            parts[-1].extend(u)
            acc += c
        return parts if len(parts) <= k else None

    lo, hi = max(costs), sum(costs)
    for _ in range(60):
        mid = (lo + hi) / 2
        if split(mid) is None:
            lo = mid
        else:
            hi = mid
    parts = split(hi)
    assert parts is not None
    # make exactly k non-empty chunks by splitting the largest multi-unit chunks
    while len(parts) < k:
        idx = max(
            (i for i, p in enumerate(parts) if len(_units_in(p, units)) > 1),
            key=lambda i: sum(unit_cost[j] for j in parts[i]),
        )
        us = _units_in(parts[idx], units)
        half = len(us) // 2
        a = [j for u in us[:half] for j in u]
        b = [j for u in us[half:] for j in u]
        parts[idx : idx + 1] = [a, b]
    return parts


def stated_partition(workload: Workload, k: int, layout: PipelineLayout) -> list[list[int]]:
    """The ``k`` chunks a stated ``layout`` gives ``workload``'s layers
    (:func:`~perfmodel.parallel.pp_layout.layout_chunks` over :func:`partition`'s units), in
    place of :func:`partition`'s time-balanced cut."""
    return layout_chunks(layout, workload, _unit_spans(workload.layers), k)


def _uneven_ends(nb: int, k: int) -> list[int] | None:
    """Blocks per chunk when ``k`` does not divide ``nb`` but ``ceil(nb / k) x k - nb == 2``:
    every chunk takes ``ceil(nb / k)`` blocks except the first and the last, one fewer each
    (Llama 3 405B's 126 layers on 16 stages, Dubey et al. 2024 sec. 3.3.2: "we remove one
    Transformer layer each from the first and the last stages"; Megatron-Core
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``); ``None``
    otherwise (``k`` divides, or another deficit: say which layers go where explicitly).

    >>> _uneven_ends(126, 16)[:3], _uneven_ends(126, 16)[-1], _uneven_ends(8, 4), _uneven_ends(24, 5)
    ([7, 8, 8], 7, None, None)
    """
    if k < 2 or nb % k == 0:
        return None
    per = -(-nb // k)
    short = per * k - nb
    if short != 2 or per < 2:
        return None
    return [per - 1] + [per] * (k - 2) + [per - 1]


def _block_costs(runs: list[tuple[int, int, int, bool]], unit_cost: Sequence[float]) -> list[float]:
    """``round(sum(unit_cost[a:b]), 12)`` of every block unit ``a:b`` of :func:`_unit_runs`'s
    ``runs``, in order; a run of ``n`` copies whose ``n`` slices of ``unit_cost`` are the first
    copy's floats (compared: a cost list that prices copies apart is summed copy by copy) is
    summed once and its value repeated.

    Exact: ``sum`` is a function of the list it reads (on Python >= 3.12 a compensated sum,
    not a plain left-to-right one, but the same result for the same floats in the same
    order), so equal slices give the same sum and the same ``round``, and each repeated value
    is what the copy's own sum gives, bit for bit (issue 27: 96 sums of GPT-3's identical
    blocks, ~75 us a plan)."""
    costs = unit_cost if isinstance(unit_cost, list) else list(unit_cost)
    out: list[float] = []
    for a, p, n, has in runs:
        if not has:
            continue
        first = costs[a : a + p]
        value = round(sum(first), 12)
        # a NaN is not repeated: each copy's own NaN keeps ``partition``'s set of costs
        if n > 1 and value == value and costs[a : a + n * p] == first * n:
            out += [value] * n
        else:
            out += [round(sum(costs[a + j * p : a + (j + 1) * p]), 12) for j in range(n)]
    return out


def _cut_runs(
    runs: list[tuple[int, int, int, bool]], per_stage: list[int], n_layers: int
) -> list[list[int]]:
    """The layers of :func:`_unit_runs`'s ``runs`` in chunks of ``per_stage[i]`` blocks (each
    at least one) in order; block-less units join the neighbouring chunk (the first, or the
    previous block's).

    Each unit goes in order to a chunk that never decreases (a block to its own, a
    block-less unit to the first chunk before any block, else to the previous block's), so
    chunk ``c`` is the consecutive layers from where its first block starts (``0`` for the
    first chunk: the block-less units before it join it) up to where chunk ``c + 1``'s first
    block starts (the last chunk: to the last layer); made as ranges, not unit by unit
    (issue 27: ~0.1 ms of a GPT-3 175B plan's ~1,158 layers)."""
    starts: list[int] = []  # each block's first layer
    for a, p, n, has in runs:
        if has:
            starts += range(a, a + n * p, p)
    bounds = [0]
    seen = 0
    for m in per_stage[:-1]:
        seen += m
        bounds.append(starts[seen])
    bounds.append(n_layers)
    return [list(range(lo, hi)) for lo, hi in pairwise(bounds)]


def _units_in(part: list[int], units: list[list[int]]) -> list[list[int]]:
    s = set(part)
    return [u for u in units if u[0] in s]


def block_count(layers: Sequence[LayerCost]) -> int:
    """Distinct ``block`` indices (not ``None``) of ``layers``; a stack's whole copies are
    counted from their indices (:meth:`~perfmodel.workload.layers.StackedLayers.copy_blocks`),
    no copy made."""
    pieces = layer_pieces(layers)
    found = {la.block for piece, n in pieces if n == 1 for la in piece}
    if any(n > 1 for _, n in pieces):
        found.update(layers.copy_blocks())  # type: ignore[attr-defined]
    found.discard(None)
    return len(found)


#: A run of identical units (:func:`block_runs`): the first unit's layers, the identities of
#: their cost sources, and how many copies of that unit follow one another.
BlockRun = tuple[tuple[LayerCost, ...], tuple[int, ...], int]


#: A layer's ``block`` (the unit key of :func:`block_runs`, read in C by ``groupby``).
_block_of = attrgetter("block")


def block_runs(layers: Sequence[LayerCost], costs: Costs) -> list[BlockRun]:
    """``layers`` as runs of identical units, in order: a unit is a run of consecutive layers
    with the same ``block`` (as :func:`partition` cuts), and consecutive units whose layers are
    copies of the same layers (:meth:`~perfmodel.workload.layers.LayerCost.cost_source`, one
    identity per layer) form one run ``(first unit's layers, their source ids, copies)``.

    A copy (:meth:`~perfmodel.workload.layers.LayerCost.relabelled`) shares every field of its
    source but ``name`` and ``block``, and a cost model that ``prices_by_cost_key`` charges it
    the source's times, so whatever is summed over a run's units is the first unit's sum times
    the copies. A cost model without that flag (one that may price a layer by its name) gets
    every unit as its own run (copies 1): nothing is merged. The whole copies of a
    :class:`~perfmodel.workload.layers.StackedLayers` are read as its template (no copy made,
    :func:`layer_pieces`), other layers one by one; the ids are valid while the layers live. The
    first stage of a 96-block GPT-3 is 4 runs (embedding, block 0, block 1 and its copies,
    the next block...) rather than 1,158 layers.
    """
    by_source = getattr(costs, "prices_by_cost_key", False)
    runs: list[list[object]] = []
    cur: list[LayerCost] = []
    prev: object = object()
    source = LayerCost.cost_source

    def source_ids(unit: Sequence[LayerCost]) -> tuple[int, ...]:
        if by_source:
            return tuple(map(id, map(source, unit)))
        return tuple(map(id, unit))

    def add(unit: tuple[LayerCost, ...], key: tuple[int, ...], n: int) -> None:
        if by_source and runs and runs[-1][1] == key:
            runs[-1][2] += n  # type: ignore[operator]
        else:
            runs.append([unit, key, n])

    for piece, n in layer_pieces(layers, by_source):
        if n > 1:  # n whole copies of one block (layer_pieces): n units, one run
            if cur:
                add(tuple(cur), source_ids(cur), 1)
                cur = []
            add(piece, source_ids(piece), n)
            prev = object()
            continue
        # consecutive layers of one block (groupby compares as ``==``); a unit goes on across
        # pieces where the next piece starts with the block the last one ended with
        for b, same in groupby(piece, _block_of):
            if cur and b != prev:
                add(tuple(cur), source_ids(cur), 1)
                cur = []
            cur += same
            prev = b
    if cur:
        add(tuple(cur), source_ids(cur), 1)
    return [(u, k, n) for u, k, n in runs]  # type: ignore[misc]


def copies_runs(
    block: tuple[LayerCost, ...], keys: tuple[int, ...], offset: int, length: int
) -> list[BlockRun]:
    """:func:`block_runs` of ``length`` consecutive layers inside a stack's whole copies of
    ``block`` from ``offset`` in a copy (a segment's shape), read off ``block`` (``keys``: its
    layers' cost sources' ids) without reading a copy's layers: the rest of the first copy
    from ``offset``, the whole copies, the start of the last copy, consecutive equal keys
    merged.

    Exact, for a cost model that ``prices_by_cost_key`` (:func:`block_runs` merges nothing
    else): in a :class:`~perfmodel.workload.layers.StackedLayers` each copy is one unit (its
    layers share one ``block``, another than the layers beside it), so ``block_runs``' units
    are these copy pieces, in order; a copy's layer's cost source is its block layer's, so
    each unit's key is the slice of ``keys`` at the same positions; it merges consecutive equal
    keys as here. Its unit layers are the copies' (two or more whole copies: ``block``), here
    ``block``'s: equal in every field but ``name`` and ``block`` (neither ``None``), and a
    copy's name is its block layer's with the shared ``layerK.`` prefix replaced
    (:meth:`~perfmodel.workload.layers.StackedLayers.of` checks it); that is all
    :func:`~perfmodel.parallel.lowering._segment_sums` reads of them (``layer_time`` by cost
    source, ``share`` by cost fields, whether ``block`` is ``None`` and, for selective
    recomputation, whether the name ends in the dot-free ``attn_dropout``). Issue 27: a new
    plan's first segment of each shape read its copies' layers here (~50 k instructions a
    shape, ~13 shapes a plan)."""
    p = len(block)
    head = min(p - offset, length) if offset else 0
    whole, tail = divmod(length - head, p)
    pieces = [(block[offset : offset + head], keys[offset : offset + head], 1)] if head else []
    if whole:
        pieces.append((block, keys, whole))
    if tail:
        pieces.append((block[:tail], keys[:tail], 1))
    runs: list[BlockRun] = []
    for unit, key, n in pieces:
        if runs and runs[-1][1] == key:
            runs[-1] = (runs[-1][0], key, runs[-1][2] + n)
        else:
            runs.append((unit, key, n))
    return runs


def layer_pieces(
    layers: Sequence[LayerCost], whole_copies: bool = True
) -> list[tuple[tuple[LayerCost, ...], int]]:
    """:func:`~perfmodel.workload.layers.layer_runs` of ``layers``, in which each ``n > 1``
    piece is ``n`` whole units (:meth:`~perfmodel.workload.layers.StackedLayers.of` checks
    it); with ``whole_copies`` false (a cost model that may price copies apart) the layers one
    by one as one piece."""
    pieces = layer_runs(layers)
    if not whole_copies and any(n > 1 for _, n in pieces):
        return [(tuple(layers), 1)]
    return pieces
