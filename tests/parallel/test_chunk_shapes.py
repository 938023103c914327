"""A chunk's segments inside a stack's copies priced once per shape (issue 27 item 2:
``parallel/lowering.py`` ``_StackCopies``): every chunk equals the one priced segment by
segment, field for field (the same floats), and the shortcut does skip the per-segment runs."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import fresh_chunks
import pytest
from fresh_chunks import afresh

import perfmodel.parallel.lower_shortcuts as shortcuts
import perfmodel.parallel.lowering as lowering
from perfmodel.api import Scenario, resolve
from perfmodel.pipeline.lower import build_step

GPT = {**fresh_chunks.GPT, "layers": 12}
BASE: dict[str, Any] = {**fresh_chunks.BASE, "model_args": GPT}

CASES = {
    # 25 MiB buckets, a first bucket of its own size, gradient overlap
    "ddp": dict(software="pytorch-ddp", dp=8),
    "ddp-tp2-pp2": dict(software="pytorch-ddp", dp=2, tp=2, pp=2),
    "mcore-pp2": dict(software="megatron-core", dp=4, tp=1, pp=2),
    "mcore-interleaved": dict(
        software="megatron-core", dp=2, tp=2, pp=2, schedule="interleaved", interleave=2
    ),
    "mcore-selective-sp": dict(
        software="megatron-core", dp=2, tp=4, recompute="selective", sequence_parallel=True
    ),
    "mcore-full": dict(software="megatron-core", dp=4, tp=2, recompute="full"),
    # four stages: the middle stages' chunks read off the first one's (_shifted_chunk)
    "ddp-tp2-pp4": dict(software="pytorch-ddp", dp=2, tp=2, pp=4, nodes=2, gpus=16),
    "mcore-tp2-pp4": dict(software="megatron-core", dp=2, tp=2, pp=4, nodes=2, gpus=16),
    # one segment per block (ZeRO-3 units)
    "fsdp": dict(software="fsdp", dp=8),
    "fsdp-tp2-pp2": dict(software="fsdp", dp=2, tp=2, pp=2),
    "fsdp-tp2-pp4": dict(software="fsdp", dp=2, tp=2, pp=4, nodes=2, gpus=16),
    "deepspeed-zero2": dict(software="deepspeed-zero2", dp=8),
    # no buckets: one segment per chunk (the shortcut has nothing to share)
    "megatron": dict(software="megatron", dp=2, tp=2, pp=2),
    # a large model: the case (GPT-3 175B's 96 blocks, PyTorch DDP, 1024 A100)
    "gpt3-ddp": dict(
        model_args={"hidden": 12288, "heads": 96, "layers": 96, "seq_len": 2048},
        nodes=128,
        gpus=1024,
        software="pytorch-ddp",
        dp=64,
        tp=8,
        pp=2,
        microbatch=2,
        global_batch=1536,
        precision="fp16",
    ),
}


#: Cases whose segments repeat by shape (buckets that close at block ends, or a segment per
#: block), in one chunk or across a lowering's chunks (the sums are kept per shape for all of
#: them: the interleaved chunks' buckets); the others' buckets span blocks or each chunk is one
#: segment of its own shape.
SHARED = {
    "ddp",
    "ddp-tp2-pp2",
    "fsdp",
    "fsdp-tp2-pp2",
    "fsdp-tp2-pp4",
    "ddp-tp2-pp4",
    "mcore-tp2-pp4",
    "gpt3-ddp",
    "mcore-pp2",
    "mcore-full",
    "mcore-interleaved",
}


def _chunks(sc: Scenario, monkeypatch: pytest.MonkeyPatch, shapes: bool) -> tuple[list, int]:
    """The chunks the lowering builds, and how many segments it summed (``_segment_sums``)."""
    made: list[Any] = []
    summed = [0]
    build, sums = lowering.build_chunk, lowering._segment_sums

    def record(*a: Any, **kw: Any) -> Any:
        made.append(build(*a, **kw))
        return made[-1]

    def count(*a: Any, **kw: Any) -> Any:
        summed[0] += 1
        return sums(*a, **kw)

    with monkeypatch.context() as m:
        m.setattr(shortcuts, "build_chunk", record)
        m.setattr(lowering, "_segment_sums", count)
        afresh(m)
        if not shapes:
            m.setattr(lowering._StackCopies, "of", classmethod(lambda cls, layers: None))
        build_step(sc, resolve(sc))
    return made, summed[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunks_equal_the_segment_by_segment_ones(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    fast, n_fast = _chunks(sc, monkeypatch, True)
    slow, n_slow = _chunks(sc, monkeypatch, False)
    assert fast and fast == slow  # every segment's ids, seconds, bytes and FLOP, exactly
    if name in SHARED:
        assert n_fast < n_slow, "segments of one shape summed once"
    else:  # buckets that span blocks (no shape repeats) or one segment per chunk
        assert n_fast == n_slow


def test_shape_reads_consecutive_ids_inside_the_copies() -> None:
    from perfmodel.workload.zoo import build_model

    wl = build_model("gpt", batch_size=1, **GPT)
    copies = lowering._StackCopies.of(wl.layers)
    assert copies is not None
    p, a = copies.p, copies.start
    assert (copies.end - a) % p == 0 and (copies.end - a) // p >= GPT["layers"] - 2
    assert copies.shape((a, a + 1)) == (0, 2)
    assert copies.shape((a + p + 3, a + p + 4, a + p + 5)) == (3, 3)
    assert copies.shape((a + 1, a + 3)) is None  # not consecutive
    assert copies.shape((a - 1, a)) is None  # starts before the copies
    assert copies.shape((copies.end - 1, copies.end)) is None  # ends after them
    for i in (a, a + p + 2, copies.end - 1):
        assert copies.source(i).cost_key() == wl.layers[i].cost_key()
    assert copies.source(0) is wl.layers[0]


#: Cases with chunks inside the stack's copies at one offset: all but the first read off it.
SHIFTED = {"ddp-tp2-pp4": 1, "mcore-tp2-pp4": 1, "fsdp-tp2-pp4": 1, "mcore-interleaved": 1}


@pytest.mark.parametrize("name", sorted(SHIFTED))
def test_middle_chunks_are_read_off_the_first(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of the same offset in the block and length as an earlier chunk of the lowering
    holds that chunk's segments (the same objects) at shifted ids (``_shifted_chunk``), equal
    to the one built segment by segment (``test_chunks_equal_the_segment_by_segment_ones``)."""
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    read = [0]
    shifted = lowering._shifted_chunk

    def count(*a: Any, **kw: Any) -> Any:
        out = shifted(*a, **kw)
        read[0] += out is not None
        return out

    monkeypatch.setattr(lowering, "_shifted_chunk", count)
    made, _ = _chunks(sc, monkeypatch, True)
    assert read[0] == SHIFTED[name]
    # the chunk read off another has its own ids, a whole number of blocks away
    ids = [tuple(ch.segment_ids(k)) for ch in made for k in range(len(ch.segments))]
    assert len(set(ids)) == len(ids)
    off = [ch for ch in made if ch.values_of is not None]
    assert len(off) == read[0] and all(ch.segments is ch.values_of.segments for ch in off)
    assert all(ch.cuts is ch.values_of.cuts and ch.layer_ids[0] > 0 for ch in off)


def test_shifted_chunk_refused_where_a_tp_time_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another tensor-parallel group pricing one of the collectives at other seconds: built
    anew (``None``); the same seconds: the chunk's segments at shifted ids."""
    sc = Scenario.from_dict({**BASE, **CASES["ddp-tp2-pp4"]})
    made, _ = _chunks(sc, monkeypatch, True)
    first = made[1]
    b = made[2].layer_ids[0]

    class Priced:
        def __init__(self, t: float) -> None:
            self.t = t

        def collective_time(self, *args: Any) -> float:
            return self.t

    point = (lowering.CollectiveOp.ALLREDUCE, 1e6)
    memo = {("chunk",): (first, ((point, 2.0),))}
    assert lowering._shifted_chunk(memo, ("chunk",), b, (), Priced(2.5), ("g0", "g1"), "x") is None
    assert lowering._shifted_chunk(memo, None, b, (), Priced(2.0), ("g0", "g1"), "x") is None
    same = lowering._shifted_chunk(memo, ("chunk",), b, (), Priced(2.0), ("g0", "g1"), "x")
    assert same is not None and same.segment_ids(0)[0] == b and same.segments is first.segments
    assert same.layer_ids == range(b, b + len(first.layer_ids)) and same.cuts == first.cuts


def _chunk_calls(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The arguments of every ``build_chunk`` call of ``CASES[case]``'s step, lowered with
    empty chunk memos (each chunk built, none read off another plan's)."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    build = lowering.build_chunk

    def record(*a: Any, **kw: Any) -> Any:
        calls.append((a, kw))
        return build(*a, **kw)

    sc = Scenario.from_dict({**BASE, **CASES[case]})
    with monkeypatch.context() as m:
        m.setattr(shortcuts, "build_chunk", record)
        afresh(m)
        build_step(sc, resolve(sc))
    return calls


def test_a_chunk_at_another_block_offset_is_built_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_chunk_key`` holds the offset of a chunk's first id in the block: a chunk of the same
    length one id further (another offset: its segments start at other layers of the block)
    is not read off the memo's chunk but built, equal to the one built with a fresh memo; a
    whole block further it is read off (the same key)."""
    build = lowering.build_chunk
    (wl, ids, *rest), kw = _chunk_calls(monkeypatch, "fsdp-tp2-pp4")[
        1
    ]  # a middle stage's chunk, inside the stack's copies
    copies = lowering._StackCopies.of(wl.layers)
    assert copies is not None and copies.start < ids[0] and ids[-1] + copies.p < copies.end
    read = [0]
    shifted = lowering._shifted_chunk

    def count(*a: Any, **k: Any) -> Any:
        out = shifted(*a, **k)
        read[0] += out is not None
        return out

    monkeypatch.setattr(lowering, "_shifted_chunk", count)

    def chunk(first: int, memo: dict) -> Any:
        return build(wl, range(first, first + len(ids)), *rest, **{**kw, "seg_memo": memo})

    memo: dict = {}
    chunk(ids[0], memo)
    moved = chunk(ids[0] + 1, memo)
    assert read[0] == 0 and moved == chunk(ids[0] + 1, {})
    assert moved.segment_ids(0)[0] == ids[0] + 1
    assert chunk(ids[0] + copies.p, memo) == chunk(ids[0] + copies.p, {}) and read[0] == 1


def test_one_segment_stands_at_every_place_of_its_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the stack's copies a chunk holds one segment object per shape: ``build_chunk``'s
    shape memo puts the segment it priced at each later place of that shape (a segment holds
    no ids: ``Chunk.segment_ids``), not a copy of it."""
    (wl, ids, *rest), kw = _chunk_calls(monkeypatch, "ddp")[0]
    copies = lowering._StackCopies.of(wl.layers)
    assert copies is not None
    ch = lowering.build_chunk(wl, ids, *rest, **{**kw, "seg_memo": {}})
    places: dict[tuple[int, int], list[int]] = {}
    for k, seg in enumerate(ch.segments):
        shape = copies.shape(tuple(ch.segment_ids(k)))
        if shape is not None:
            places.setdefault(shape, []).append(id(seg))
    assert sum(map(len, places.values())) > 2 * len(places)  # shapes repeat
    assert all(len(set(objs)) == 1 for objs in places.values())


def test_a_segment_crossing_the_copies_end_is_priced_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk ending at the final norm, split into 1 MiB buckets: its last segment (the last
    block's ``fc2`` .. ``residual2``, then ``final_ln``) starts inside the stack's copies and
    ends after them, at the (offset in the block, length) of the earlier segments ``fc2`` ..
    the next block's ``ln1``. ``final_ln`` moves other bytes in backward than a block's
    ``ln1``, so only the shape's upper bound (``ids[-1] < c_end`` in :func:`build_chunk`)
    keeps the crossing segment from taking their numbers: the chunk equals the one built
    without the shape memo."""
    build = lowering.build_chunk
    (wl, _, *rest), kw = _chunk_calls(monkeypatch, "ddp")[0]
    copies = lowering._StackCopies.of(wl.layers)
    assert copies is not None and wl.layers[copies.end].name == "final_ln"
    ids = range(0, copies.end + 1)  # up to the final norm
    kw = {**kw, "bucket_bytes": 2.0**20, "first_bucket_bytes": 2.0**20}

    def chunk() -> Any:
        return build(wl, ids, *rest, **{**kw, "seg_memo": {}})

    fast = chunk()
    n = len(fast.segments)
    last = fast.segment_ids(n - 1)
    assert last[0] < copies.end <= last[-1]  # the segment crossing the copies' end
    shape = ((last[0] - copies.start) % copies.p, len(last))
    inside = [copies.shape(tuple(fast.segment_ids(k))) for k in range(n - 1)]
    assert shape in inside  # the same shape occurs inside the copies, earlier
    assert wl.layers[last[-1]].cost_key() != wl.layers[last[-1] - copies.p].cost_key()
    with monkeypatch.context() as m:
        m.setattr(lowering._StackCopies, "of", classmethod(lambda cls, layers: None))
        slow = chunk()
    assert fast == slow
    # the numbers of the earlier segment of that shape differ from the crossing one's
    assert fast.segments[inside.index(shape)] != fast.segments[-1]


def test_block_units_read_as_ranges_are_the_listed_units() -> None:
    """A chunk of consecutive ids split by block (ZeRO-3/FSDP units): ``_segment_ids`` reads
    the units as id ranges (``partition.unit_bounds``), the same tuples as the listed and
    sorted units of ``_segment_groups``, for chunks cut at blocks and elsewhere, inside and
    around the stack's copies."""
    from perfmodel.workload.zoo import build_model

    wl = build_model("gpt", batch_size=1, **GPT)
    copies = lowering._StackCopies.of(wl.layers)
    assert copies is not None
    p, n = copies.p, len(wl.layers)
    cuts = [(0, n), (0, copies.start + p), (copies.start + p, copies.start + 3 * p)]
    cuts += [(copies.start + 2, copies.end + 1), (1, 3), (copies.end - 1, n)]
    for lo, hi in cuts:
        ids = list(range(lo, hi))
        layers = wl.layers[lo:hi]
        args = (None, None, False, 2.0)
        every, cuts = lowering._segment_ids(wl, ids, layers, copies, True, True, *args)
        ranges = [tuple(every[a:b]) for a, b in pairwise(cuts)]
        groups = lowering._segment_groups(wl, ids, layers, copies, True, *args)
        assert ranges == [tuple(sorted(g)) for g in reversed(groups)]
        assert len(ranges) > 1 or hi - lo < p


def test_block_units_of_non_consecutive_ids_are_listed() -> None:
    """A chunk split by block whose ids are not consecutive (``contiguous`` False: the ids a
    placement or layout hands a stage out of order) is not read as ranges from its first id:
    ``_segment_ids`` lists and sorts ``_segment_groups``' units, whose ids are the chunk's own
    (the ``contiguous`` guard of the ranges path; dropping it makes ranges from ``lo``)."""
    from perfmodel.workload.zoo import build_model

    wl = build_model("gpt", batch_size=1, **GPT)
    copies = lowering._StackCopies.of(wl.layers)
    assert copies is not None
    lo = copies.start
    ids = [i for i in range(lo, lo + 3 * copies.p) if (i - lo) % 3 != 1]  # a gap every third
    layers = [wl.layers[i] for i in ids]
    args = (None, None, False, 2.0)
    every, cuts = lowering._segment_ids(wl, ids, layers, copies, False, True, *args)
    got = [every[a:b] for a, b in pairwise(cuts)]
    groups = lowering._segment_groups(wl, ids, layers, copies, True, *args)
    assert got == [tuple(sorted(g)) for g in reversed(groups)]
    assert sorted(i for seg in got for i in seg) == ids  # every id its own, none invented
