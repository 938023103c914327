"""A segment shape's runs read off the stack's block (issue 27: ``partition.copies_runs``,
switch ``lowering.SHAPE_RUNS``): equal to ``block_runs`` of the segment's own layers for every
offset and length inside the copies, and the chunks built both ways are equal, field for
field."""

from __future__ import annotations

from typing import Any

import fresh_chunks
import pytest

import perfmodel.parallel.lowering as lowering
from perfmodel.api import Scenario
from perfmodel.dtypes import Precision
from perfmodel.parallel.partition import block_runs, copies_runs
from perfmodel.parallel.selective import SelectiveRecompute
from perfmodel.workload.layers import LayerCost, LayerKind, StackedLayers
from perfmodel.workload.zoo import build_model


class _ByKey:
    """Prices a layer by its cost fields (``prices_by_cost_key``): seconds from its FLOP."""

    precision = Precision.FP32
    prices_by_cost_key = True

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        return layer.fwd_flop * 1e-12, layer.bwd_input_flop * 1e-12, layer.bwd_weight_flop * 3e-13


def _seen(runs: list[Any]) -> list[tuple[Any, ...]]:
    """What ``_segment_sums`` may read of runs: per unit the layers' cost keys and whether
    each is in a block, its source ids and its copies."""
    return [
        (tuple(la.cost_key() for la in u), tuple(la.block is None for la in u), k, n)
        for u, k, n in runs
    ]


def _twin_block() -> StackedLayers:
    """A block whose second half are copies of its first half (the same cost sources): a
    shape's first and last pieces can have equal keys and merge into one run."""
    a = LayerCost("layer1.a", LayerKind.LINEAR, 1.0, 2.0, 3.0, 3, 1.0, 1.0, 1.0, (2,), block=1)
    b = LayerCost("layer1.b", LayerKind.NORM, 0.5, 0.5, 0.0, 5, 1.0, 1.0, 1.0, (2,), block=1)
    block = (a, b, a.relabelled("layer1.c", 1), b.relabelled("layer1.d", 1))
    return StackedLayers.of((), block, 6, (), first=1, strip=7, block0=1)


WORKLOADS = {
    "gpt": lambda: build_model("gpt", batch_size=1, **fresh_chunks.GPT).layers,
    "llama": lambda: build_model("llama3_8b", batch_size=1, tp=2).layers,
    "twin": _twin_block,
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_copies_runs_equal_block_runs_of_every_shape(name: str) -> None:
    """Every offset in the block and every length up to three blocks and one layer inside the
    copies: the same runs (keys, copies, the layers' cost fields) as ``block_runs`` of the
    segment's layers, and the same ``_segment_sums`` (bit for bit) with a selective share."""
    layers = WORKLOADS[name]()
    copies = lowering._StackCopies.of(layers)
    assert copies is not None
    costs, p, merged = _ByKey(), copies.p, 0
    shares = (SelectiveRecompute.OP.share, SelectiveRecompute.ATTENTION_CORE.share)
    for offset in range(p):
        for length in range(1, 3 * p + 2):
            a = copies.start + offset
            if a + length > copies.end:
                continue
            seg = layers[a : a + length]
            want = block_runs(seg, costs)  # type: ignore[arg-type]
            got = copies_runs(copies.block, copies.keys, offset, length)
            assert _seen(got) == _seen(want), (offset, length)
            head = min(p - offset, length) if offset else 0
            whole, tail = divmod(length - head, p)
            merged += len(got) < (head > 0) + (whole > 0) + (tail > 0)
            for share in shares:  # ATTENTION_CORE reads the name's attn_dropout suffix
                memo: dict[Any, Any] = {}
                sums = lowering._segment_sums(seg, costs, False, share, memo, got)  # type: ignore[arg-type]
                assert sums == lowering._segment_sums(seg, costs, False, share, {})  # type: ignore[arg-type]
    assert (merged > 0) == (name == "twin")  # the merge branch is reached


GPT3 = {**fresh_chunks.BASE, **fresh_chunks.GPT3}
CASES = {
    "ddp-tp2-pp4": dict(software="pytorch-ddp", dp=2, tp=2, pp=4, nodes=2, gpus=16),
    "mcore-interleaved": dict(
        software="megatron-core", dp=2, tp=2, pp=2, schedule="interleaved", interleave=2
    ),
    "mcore-selective": dict(software="megatron-core", dp=2, tp=4, recompute="selective"),
    "fsdp-tp2-pp2": dict(software="fsdp", dp=2, tp=2, pp=2),
    # GPT-3 175B on 1,024 A100 (bench_speed's Megatron-Core plan 2 and a DDP one)
    "gpt3-mcore": dict(GPT3, software="megatron-core", dp=32, tp=4, pp=8, microbatch=8),
    "gpt3-ddp": dict(GPT3, software="pytorch-ddp", dp=64, tp=8, pp=2, microbatch=2),
}


def _chunks(sc: Scenario, monkeypatch: pytest.MonkeyPatch, on: bool) -> tuple[list[Any], int]:
    """The chunks of every lowering ``predict(sc)`` makes with :data:`lowering.SHAPE_RUNS`
    ``on`` (chunk memos empty), and how many times runs were read off the block."""
    read = [0]
    runs = lowering.copies_runs

    def count(*a: Any) -> Any:
        read[0] += 1
        return runs(*a)

    with monkeypatch.context() as m:
        m.setattr(lowering, "copies_runs", count)
        m.setattr(lowering, "SHAPE_RUNS", on)
        made = [low.chunks for low in fresh_chunks.lowerings(sc, m)]
    return made, read[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunks_equal_with_runs_read_off_the_block(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = Scenario.from_dict({**fresh_chunks.BASE, **CASES[name]})
    fast, n_fast = _chunks(sc, monkeypatch, True)
    slow, n_slow = _chunks(sc, monkeypatch, False)
    assert fast and fast == slow  # every segment's ids, seconds, bytes and FLOP, exactly
    assert n_fast > 0 == n_slow
