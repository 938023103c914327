"""Chunks kept across plans (issue 27, wave 12b: ``parallel/lowering.py`` ``_CHUNKS``,
``chunk_of_another_plan``, ``keep_chunk``; ``LoweringShortcuts._chunk_memo_key``): a plan that
differs from an earlier one in its data-parallel size only reads that plan's chunks, which
equal the chunks it builds from scratch field for field, and its report is the cold one;
plans that differ in what a chunk reads (the bucket layout, the micro-batch) or whose
tensor-parallel group prices a collective otherwise build their own."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import perfmodel.api as api
import perfmodel.parallel.lower_shortcuts as shortcuts
import perfmodel.parallel.lowering as lowering
import perfmodel.pipeline.inputs as inputs
from perfmodel.api import Scenario, predict, resolve
from perfmodel.ops import CollectiveOp
from perfmodel.parallel import costs
from perfmodel.pipeline.lower import build_step

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 32000}
BASE: dict[str, Any] = dict(
    system="dgx-a100",
    model="gpt",
    model_args=GPT,
    precision="bf16",
    optimizer="adam",
    fidelity="analytic",
    microbatch=1,
    tp=2,
    pp=2,
)


def _sc(**kw: Any) -> Scenario:
    d = {**BASE, **kw}
    d.setdefault("dp", 2)
    d["gpus"] = d["dp"] * d["tp"] * d["pp"]
    d["nodes"] = max(1, d["gpus"] // 8)
    d["global_batch"] = 8 * d["dp"] * d["microbatch"]
    return Scenario.from_dict(d)


def _lowered(sc: Scenario) -> tuple[Any, list[lowering.Chunk]]:
    """The pipeline lowering of ``sc``'s step (the last one built: the chosen micro-batch's)
    and the chunks it holds."""
    made: list[tuple[Any, Any]] = []
    real = shortcuts.LoweringShortcuts._build_chunks

    def record(self: Any) -> Any:
        made.append((self, real(self)))
        return made[-1][1]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(shortcuts.LoweringShortcuts, "_build_chunks", record)
        api._REPORTS.clear()
        build_step(sc, resolve(sc))
    return made[-1]


def _chunks(sc: Scenario) -> list[lowering.Chunk]:
    """The chunks of ``sc``'s lowering, as the pipeline lowering holds them."""
    return _lowered(sc)[1]


def _fresh_tables() -> None:
    """Empty the chunk memo and the shared price tables (a table an earlier test's clusters
    pushed out of the bounded shared list is made anew: another identity, no chunk read)."""
    inputs._system_costs.cache_clear()
    costs._SHARED_COMPUTE.clear()
    lowering._CHUNKS.clear()


def _cold(sc: Scenario) -> list[lowering.Chunk]:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(lowering, "_CHUNKS", {})
        return _chunks(sc)


@pytest.mark.parametrize("software", ["megatron-core", "pytorch-ddp", "fsdp", "megatron"])
def test_another_data_parallel_size_reads_the_chunks(software: str) -> None:
    _fresh_tables()
    first = _chunks(_sc(software=software, dp=2))  # (one replica reduces no gradients)
    second = _chunks(_sc(software=software, dp=4))
    assert all(a is b for a, b in zip(first, second, strict=True))  # read, not built
    assert second == _cold(_sc(software=software, dp=4))  # every field, exactly


def test_the_report_is_the_cold_one() -> None:
    _fresh_tables()
    predict(_sc(software="megatron-core", recompute="selective"), baseline=False)
    api._REPORTS.clear()
    warm = predict(_sc(software="megatron-core", recompute="selective", dp=4), baseline=False)
    lowering._CHUNKS.clear()
    api._REPORTS.clear()
    cold = predict(_sc(software="megatron-core", recompute="selective", dp=4), baseline=False)
    assert warm.to_dict() == cold.to_dict()


@pytest.mark.parametrize(
    "other",
    [
        dict(software="pytorch-ddp"),  # the same workload, another bucket layout
        dict(microbatch=2),  # another workload (micro-batch)
        dict(recompute="full"),  # the recomputed forward's collectives booked in backward
        dict(precision="fp16"),  # another price table
    ],
)
def test_what_a_chunk_reads_is_in_the_key(other: dict[str, Any]) -> None:
    _fresh_tables()
    first = _chunks(_sc(software="megatron-core"))
    second = _chunks(_sc(**{"software": "megatron-core", **other}))
    assert not any(a is b for a in first for b in second)
    assert second == _cold(_sc(**{"software": "megatron-core", **other}))


def test_a_group_pricing_a_collective_otherwise_builds_its_own() -> None:
    chunk = lowering.Chunk((), 0.0, 0.0, 0)
    table: dict[Any, Any] = {}
    wl = object()
    point = (CollectiveOp.ALLREDUCE, 1e6)

    class Priced:
        price_table = table

        def __init__(self, t: float) -> None:
            self.t = t

        def collective_time(self, *args: Any) -> float:
            return self.t

    key = ("test", id(wl))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(lowering, "_CHUNKS", {})
        lowering.keep_chunk(key, wl, Priced(2.0), chunk, {point: 2.0})
        assert lowering.chunk_of_another_plan(key, wl, Priced(2.0), ("a", "b"), "auto") is chunk
        assert lowering.chunk_of_another_plan(key, wl, Priced(2.5), ("a", "b"), "auto") is None
        assert lowering.chunk_of_another_plan(key, object(), Priced(2.0), ("a",), "x") is None
        other = Priced(2.0)
        other.price_table = {}  # type: ignore[misc]  # another table, the same ids in the key
        assert lowering.chunk_of_another_plan(key, wl, other, ("a", "b"), "auto") is None


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    class Table:
        def __init__(self) -> None:
            self.price_table: dict[Any, Any] = {}

    monkeypatch.setattr(lowering, "_CHUNKS", {})
    for i in range(lowering._CHUNKS_SIZE + 5):
        lowering.keep_chunk((i,), None, Table(), lowering.Chunk((), 0.0, 0.0, 0), {})
    assert len(lowering._CHUNKS) == lowering._CHUNKS_SIZE
    assert (0,) not in lowering._CHUNKS and (lowering._CHUNKS_SIZE + 4,) in lowering._CHUNKS


def test_every_argument_a_chunk_reads_changes_the_key() -> None:
    """``_chunk_memo_key`` of a lowering against the same lowering with one thing
    ``build_chunk`` reads changed (the split, the gradient bytes, the algorithm, the
    recomputation, the plan fields): never the same key."""
    import dataclasses
    import types

    from perfmodel.parallel.plan import MoEDispatcher, Recompute
    from perfmodel.parallel.selective import SelectiveRecompute

    low, _ = _lowered(_sc(software="pytorch-ddp"))
    plan, rc = low.plan, low.rc
    base = low._chunk_memo_key(plan)
    assert base is not None and base == low._chunk_memo_key(plan)
    keys = []
    for rc_change in (
        dict(bucket_bytes=rc.bucket_bytes * 2),
        dict(first_bucket_bytes=(rc.first_bucket_bytes or 1.0) * 3),
        dict(grad_reduce_bytes=rc.grad_reduce_bytes * 2),
        dict(selective_recompute=SelectiveRecompute.OP
             if rc.selective_recompute is not SelectiveRecompute.OP
             else SelectiveRecompute.ATTENTION_CORE),
    ):  # fmt: skip
        low.rc = dataclasses.replace(rc, **rc_change)
        keys.append(low._chunk_memo_key(plan))
    low.rc = rc
    for plan_change in (
        dict(recompute=Recompute.FULL),
        dict(ep_overlap=True),
        dict(moe_dispatcher=MoEDispatcher.ALLGATHER),
    ):
        # the plan's fields with one changed (validation aside: ep_overlap needs ep > 1)
        like = types.SimpleNamespace(**{**dataclasses.asdict(plan), **plan_change})
        keys.append(low._chunk_memo_key(like))
    for attr, value in (("by_unit", not low.by_unit), ("alg", "ring"), ("overlap", False)):
        old = getattr(low, attr)
        setattr(low, attr, value)
        keys.append(low._chunk_memo_key(plan))
        setattr(low, attr, old)
    assert all(k is not None and k != base for k in keys)
    assert len(set(keys)) == len(keys)
    # expert or context groups: the chunk prices collectives over them; not kept
    for groups in (dict(ep=2), dict(cp=2)):
        like = types.SimpleNamespace(**{**dataclasses.asdict(plan), **groups})
        assert low._chunk_memo_key(like) is None


@pytest.mark.parametrize("software", ["pytorch-ddp", "megatron-core", "fsdp"])
def test_a_tensor_parallel_group_across_servers_is_priced_anew(software: str) -> None:
    """The TP-price check on a real plan (mend12c): tp8 pp4 on four DGX A100, the default
    placement (each TP group inside a server), then ``dp,pp,tp`` (TP groups across servers:
    the same chunk keys, slower TP collectives). The second report is the cold one; with the
    check skipped on :func:`~perfmodel.parallel.lowering.build_chunk`'s shifted path (its
    ``tp_time`` not passed) it reads the first placement's segments and the pytorch-ddp and
    megatron-core cases fail (this small GPT's fsdp case does not; the brief's larger probe's
    fsdp iteration went 0.1312 -> 0.1290 s)."""
    gpt16 = {**GPT, "layers": 16}
    kw = dict(model_args=gpt16, software=software, tp=8, pp=4, dp=1)

    def sc(placement: str | None) -> Scenario:
        d: dict[str, Any] = {**BASE, **kw, "gpus": 32, "nodes": 4, "global_batch": 8}
        if placement is not None:
            d["placement"] = placement
        return Scenario.from_dict(d)

    _fresh_tables()
    predict(sc(None), baseline=False)
    api._REPORTS.clear()
    warm = predict(sc("dp,pp,tp"), baseline=False)
    lowering._CHUNKS.clear()
    api._REPORTS.clear()
    cold = predict(sc("dp,pp,tp"), baseline=False)
    assert warm.to_dict() == cold.to_dict()


def test_the_shared_key_names_the_costs_class() -> None:
    """``_shared_chunks_key`` keys what ``_chunk_memo_key`` keys (mend12c): a cost model of
    another class reading the same price table (its layer prices read through its class) is
    another key in both."""
    low, _ = _lowered(_sc(software="pytorch-ddp", tp=1, pp=2))
    shared, memo = low._shared_chunks_key(), low._chunk_memo_key(low.plan)
    assert shared is not None and memo is not None
    costs = low.costs
    other = copy.copy(costs)
    other.__class__ = type("OtherCosts", (type(costs),), {})
    low.costs = other
    try:
        assert low.costs.price_table is costs.price_table
        assert low._shared_chunks_key() != shared and low._chunk_memo_key(low.plan) != memo
    finally:
        low.costs = costs
