"""Stage memory's speed doors (speed35e) against their direct paths, field for field:
``stage_memory.STATIC_PARTS`` (a stage's moment-free parts read off an earlier stage whose
chunks name the same shapes), ``stage_memory.LIVE_PEAK`` (the live sets' peak without the
zero terms) and ``schedule.LIVE_RUNS`` (moments without windows made run by run); the
moments' two-chunk unrolled output (``schedule._moments_out``); and ``moments_peak``'s
hoisted, unrolled sum against its formula."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from pipelined_lowerings import SMALL, lowering, torchtitan

from perfmodel.parallel import schedule, stage_memory
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.plan import PipelineSchedule
from perfmodel.parallel.schedule import ChunkState

SWITCHES = ((stage_memory, "STATIC_PARTS"), (stage_memory, "LIVE_PEAK"), (schedule, "LIVE_RUNS"))

#: 16 blocks over pp 4 x v 2: the middle chunks are read off one another (``values_of``)
DEEP = {**SMALL, "layers": 16}


def _lowering(kind: str) -> PipelineLowering:
    if kind == "megatron-core":
        return lowering(global_batch=64)
    if kind == "megatron-core-deep":
        return lowering(model_args=DEEP, global_batch=64, recompute="selective")
    if kind == "megatron-core-1f1b":
        return lowering(model_args=DEEP, schedule="1f1b", interleave=1, recompute="none")
    if kind == "megatron-v4":
        return lowering(model_args=DEEP, software="megatron", interleave=4, pp=2)
    if kind == "torchtitan":
        return torchtitan(global_batch=64)
    if kind == "torchtitan-deep":
        args = {**DEEP, "kv_heads": 4, "ffn_hidden": 2816, "vocab": 32000}
        return torchtitan(model_args=args, pp=4)
    if kind == "torchtitan-1f1b":
        return torchtitan(interleave=1, schedule="1f1b", global_batch=64)
    if kind == "zero3":  # sharded weights without pipelining: two units gathered
        return lowering(software="deepspeed-zero3", tp=1, pp=1, interleave=1, schedule="1f1b")
    assert kind == "fsdp"
    return lowering(model_args=DEEP, software="fsdp", tp=1, pp=4, interleave=1, schedule="1f1b")


def _memory(kind: str) -> tuple:
    schedule.chunk_moments.cache_clear()
    stage_memory._STATIC.state = ((), {})
    return _lowering(kind).memory()


KINDS = [
    "megatron-core",
    "megatron-core-deep",
    "megatron-core-1f1b",
    "megatron-v4",
    "torchtitan",
    "torchtitan-deep",
    "torchtitan-1f1b",
    "fsdp",
    "zero3",
]


@pytest.mark.parametrize("kind", KINDS)
def test_each_switch_gives_the_direct_memory(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every door off is the reference; each door on alone, and all on, give every stage's
    memory field for field (floats compared exactly)."""
    for mod, name in SWITCHES:
        monkeypatch.setattr(mod, name, False)
    want = _memory(kind)
    for mod, name in SWITCHES:
        monkeypatch.setattr(mod, name, True)
        assert _memory(kind) == want, name
        monkeypatch.setattr(mod, name, False)
    for mod, name in SWITCHES:
        monkeypatch.setattr(mod, name, True)
    assert _memory(kind) == want


@pytest.mark.parametrize("kind", ["megatron-core-deep", "torchtitan-deep"])
def test_stages_of_one_shape_share_their_parts(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The middle stages' chunks are read off one chunk shape, so their parts are made once:
    the first stage (embedding), the middle ones and the last (head and loss)."""
    made = []
    direct = stage_memory._static_parts

    def counted(*args: object) -> stage_memory._Static:
        made.append(args)
        return direct(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(stage_memory, "_static_parts", counted)
    low = _lowering(kind)
    stage_memory._STATIC.state = ((), {})
    assert len(low.memory()) == 4
    assert len(made) == 3


def test_live_runs_equal_the_walk() -> None:
    """``_moments_live`` against the walk without windows: every stage of p 1-8, m 1-24,
    v 1-4, three schedules, and long steps (whole periods skipped)."""
    cases = [
        (sched, p, m, stage, v)
        for sched in PipelineSchedule
        for p in range(1, 9)
        for v in range(1, 5)
        for m in [*range(1, 25), 4 * p + 1, 40 * p]
        for stage in range(p)
    ]
    checked = 0
    for sched, p, m, stage, v in cases:
        if sched is PipelineSchedule.INTERLEAVED and p > 1 and m % p:
            continue
        want = schedule._moments_walk(sched, p, m, stage, v, False)
        assert schedule._moments_live(sched, p, m, stage, v) == want, (sched, p, m, stage, v)
        checked += 1
    assert checked > 4_000


def test_two_chunk_output_is_the_general_one() -> None:
    """The unrolled two-chunk states equal the per-chunk comprehension, with and without
    windows."""
    live = {(3, 1): None, (2, 0): None}
    assert schedule._moments_out(live, False) == tuple(
        tuple((x, False, False, 0) for x in key) for key in live
    )
    flags = ((True, False), (True, True))
    win = {((3, 1), flags): (5, 2), ((2, 0), flags): (6, 4)}
    assert schedule._moments_out(win, True) == (
        ((3, True, False, 5), (1, True, True, 2)),
        ((2, True, False, 6), (0, True, True, 4)),
    )


def _peak_by_the_formula(
    moments: Sequence[tuple[ChunkState, ...]], m: int, working: float, sizes: Sequence[object]
) -> tuple[float, float]:
    """``moments_peak`` as written before its invariants were hoisted (main23): the reference;
    ``sizes``: its ``per_mb, outs, gat, red, recv``."""
    per_mb, outs, gat, red, recv = sizes
    best = (-1.0, 0.0, 0.0)
    for t in moments:
        acts, held = working, 0.0
        for (live, gathered, grads, done), a, o, g, r, (ri, rg) in zip(
            t, per_mb, outs, gat, red, recv, strict=True
        ):
            acts += live * a + done * o
            acts += (m - live + done - live) * ri + m * rg
            held += (g if gathered else 0.0) + (r if grads else 0.0)
        if acts + held > best[0]:
            best = (acts + held, acts, held)
    return best[1], best[2]


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_moments_peak_is_the_formula_bit_for_bit(chunks: int) -> None:
    """The hoisted and (two chunks) unrolled sum against the plain formula: 400 random steps
    of random moments and sizes, compared exactly."""
    rng = random.Random(35 + chunks)

    def size() -> float:
        return rng.choice([0.0, rng.uniform(0, 1e9), float(rng.randint(0, 10**9)) / 3.0])

    for _ in range(400):
        m = rng.choice([0, rng.randint(1, 64)])
        moments = [
            tuple(
                (rng.randint(0, 40), rng.random() < 0.5, rng.random() < 0.5, rng.randint(0, 64))
                for _ in range(chunks)
            )
            for _ in range(rng.randint(0, 12))
        ]
        sizes = [[size() for _ in range(chunks)] for _ in range(4)]
        recv = [(size(), size()) for _ in range(chunks)]
        working = size()
        got = stage_memory.moments_peak(moments, m, working, *sizes, recv)
        assert got == _peak_by_the_formula(moments, m, working, (*sizes, recv))


def test_held_parts_key_the_static_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo's key holds the stage's tied copy, buffers and replicas (``held``): the same
    chunks, plan and recipe asked again with other replicas on the GPU or other buffers get
    their own parts, as the direct path gives them (dropping ``held`` from the key would hand
    back the first call's)."""
    low = _lowering("megatron-core-deep")
    chunks = [low.chunks[c * low.P + 1] for c in range(low.V)]
    common = dict(
        plan=low.plan,
        costs=low.costs,
        optimizer=low.inp.optimizer,
        in_flight=2,
        capacity_bytes=low.inp.capacity_bytes,
        comm_buffer_bytes=0.0,
        recipe=low.rc,
    )
    asks = [dict(replicas_on_gpu=1), dict(replicas_on_gpu=2), dict(buffer_bytes=3e8)]

    def answers(on: bool) -> list:
        monkeypatch.setattr(stage_memory, "STATIC_PARTS", on)
        stage_memory._STATIC.state = ((), {})
        return [stage_memory.stage_memory(chunks, **common, **a) for a in asks]

    direct, kept = answers(False), answers(True)
    assert kept == direct
    assert len({m.total_bytes for m in direct}) == 3  # each ask changes the memory
