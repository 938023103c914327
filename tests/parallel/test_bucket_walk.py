"""A chunk's gradient buckets as id ranges, a stack's repeating blocks walked once (issue 27,
wave 13: ``parallel/bucket_walk.py``): the same buckets as the layer-by-layer walk
(``lowering._segment_groups``) for any bytes, capacities and chunk bounds, and the same chunks,
field for field, over presets and plans (``bucket_walk.RANGES`` off vs on)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_chunk_shapes import BASE, CASES, _chunks

import perfmodel.parallel.bucket_walk as bucket_walk
from perfmodel.api import Scenario
from perfmodel.parallel.bucket_walk import bucket_ranges


def _walk(
    lo: int,
    hi: int,
    cap_first: float,
    cap_rest: float,
    block_b: list[float],
    start: int,
    end: int,
    bytes_of: Any,
    params_of: Any,
) -> list[tuple[int, int]]:
    """The rule of ``lowering._segment_groups``, layer by layer: backward order, a bucket
    closes when its bytes reach its capacity, a last bucket without parameters joins the one
    before it."""
    groups: list[list[int]] = []
    cap, acc, cur = cap_first, 0.0, []
    for i in range(hi, lo - 1, -1):
        cur.append(i)
        acc += block_b[(i - start) % len(block_b)] if start <= i < end else bytes_of(i)
        if acc >= cap:
            groups.append(cur)
            cur, acc, cap = [], 0.0, cap_rest
    if cur:
        if groups and sum(params_of(i) for i in cur) == 0:
            groups[-1].extend(cur)
        else:
            groups.append(cur)
    return [(min(g), max(g)) for g in groups]


BYTES = st.sampled_from([0.0, 0.0, 0.1, 1.0, 2.5, 3.3, 7.0, 1e9 / 3])


@settings(max_examples=400, deadline=None)
@given(
    block_b=st.lists(BYTES, min_size=1, max_size=7),
    start=st.integers(0, 4),
    copies=st.integers(0, 14),
    after=st.integers(0, 4),
    outside=st.lists(BYTES, min_size=8, max_size=8),
    bounds=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    caps=st.tuples(st.sampled_from([0.5, 1.0, 3.0, 4.0, 9.0, 20.0]), st.sampled_from([0, 1, 15.0])),
)
def test_ranges_equal_the_layer_by_layer_walk(
    block_b: list[float],
    start: int,
    copies: int,
    after: int,
    outside: list[float],
    bounds: tuple[float, float],
    caps: tuple[float, float],
) -> None:
    end = start + copies * len(block_b)
    total = end + after
    if total == 0:
        return
    lo = int(bounds[0] * (total - 1))
    hi = lo + int(bounds[1] * (total - 1 - lo))
    cap_rest, first = caps
    cap_first = {0: cap_rest, 1: 1.0}.get(first, first)  # type: ignore[call-overload]

    def bytes_of(i: int) -> float:
        return outside[i % len(outside)]

    def params_of(i: int) -> int:
        b = block_b[(i - start) % len(block_b)] if start <= i < end else bytes_of(i)
        return int(b > 0)

    args = (lo, hi, cap_first, cap_rest, block_b, start, end, bytes_of, params_of)
    assert bucket_ranges(*args) == _walk(*args)


def test_a_repeating_stretch_is_walked_once() -> None:
    """96 blocks of 4 layers (3 bytes a block), buckets of 4.5 bytes spanning blocks: the
    state where a block is entered repeats within a dozen blocks, so the walk reads those
    blocks' layers, not 384, and gives the same buckets as the layer-by-layer walk."""
    read: list[int] = []

    class Block(list):  # type: ignore[type-arg]
        def __getitem__(self, j: Any) -> Any:
            read.append(j)
            return super().__getitem__(j)

    args = (0, 385, 4.5, 4.5, Block([1.0, 0.0, 1.0, 1.0]), 1, 385, lambda i: 1.0, lambda i: 1)
    out = bucket_ranges(*args)
    assert 0 < len(read) <= 4 * 12  # at most 12 blocks' layers of 96
    assert out == _walk(*args)
    assert any(b - a + 1 > 4 for a, b in out)  # buckets across block boundaries


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunks_equal_with_ranges_off(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every preset's and plan's chunks (``test_chunk_shapes.CASES``: PyTorch DDP's 25 MiB
    buckets, Megatron-Core's, FSDP's blocks, GPT-3 175B on 1024 A100) equal with the ranges
    off, segment ids included (each chunk's ids and cuts)."""
    sc = Scenario.from_dict({**BASE, **CASES[name]})
    on, _ = _chunks(sc, monkeypatch, True)
    monkeypatch.setattr(bucket_walk, "RANGES", False)
    off, _ = _chunks(sc, monkeypatch, True)
    plain, _ = _chunks(sc, monkeypatch, False)  # no stack copies either
    monkeypatch.setattr(bucket_walk, "RANGES", True)
    no_copies, _ = _chunks(sc, monkeypatch, False)
    assert on and on == off == plain == no_copies
    assert all(c.cuts[0] == 0 and c.cuts[-1] == len(c.layer_ids) for c in on)
    assert [(c.layer_ids, c.cuts) for c in on] == [(c.layer_ids, c.cuts) for c in off]
