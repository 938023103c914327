"""A pipeline stage's memory at its schedule's peak moment (mem30b), hand-computed.

1. Each chunk's saved activations count with that chunk's own live micro-batches
   (:func:`perfmodel.parallel.schedule.chunk_moments`), not the chunks' mean times the
   stage's in-flight count: the last stage of an interleaved plan holds its LM head's saved
   tensors once per in-flight micro-batch of its last chunk (main20: 5/2 times here).
2. FSDP2 under ``torch.distributed.pipelining`` (torchtitan, ``Recipe.gather_per_step``): a
   chunk's weights stay gathered from its first forward to its last backward and its
   unsharded FP32 gradients from its first backward to its last (PyTorch v2.6
   ``PipelineScheduleMulti`` per-stage ``backward_counter``, ``backward_maybe_with_nosync``
   ``run_post_backward``); and every forward's output stays in ``output_chunks`` until the
   next step (before PyTorch PR #153383): the last stage keeps all micro-batches' logits.
3. torchtitan's loss parallel (TP > 1): three FP32 logits-sized tensors in the loss's backward.
"""

from __future__ import annotations

import pytest
from pipelined_lowerings import SMALL, lowering, torchtitan

import perfmodel.parallel.lower_pipeline as lower_pipeline
from perfmodel.dtypes import Precision
from perfmodel.parallel.lowering import _elements
from perfmodel.parallel.plan import PipelineSchedule
from perfmodel.parallel.schedule import chunk_moments, stage_ops
from perfmodel.parallel.stack_choices import CrossEntropy
from perfmodel.parallel.stage_memory import moments_peak, stage_memory
from perfmodel.workload.layers import LayerKind
from perfmodel.workload.memory import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION,
    LIBRARY_WORKSPACE_BYTES,
    full_recompute_bytes,
)


def test_last_interleaved_stage_moments_by_hand() -> None:
    """Stage 3 of pp 4 x v 2 with 16 micro-batches: 4 warm-up forwards of chunk 0, then a
    forward and a backward in turn: chunk 1's micro-batches 0-3 come and go one at a time
    beside chunk 0's four (4, 1), then chunk 0's fifth forward runs with none of chunk 1
    (5, 0). Never two of chunk 1."""
    ms = chunk_moments(PipelineSchedule.INTERLEAVED, 4, 16, 3, 2)
    lives = {tuple(c[0] for c in t) for t in ms}
    assert (4, 1) in lives and (5, 0) in lives
    assert max(sum(x) for x in lives) == 5
    assert max(x[1] for x in lives) == 1


def test_each_chunk_counts_its_own_in_flight() -> None:
    """Megatron-Core interleaved, full recomputation: the last stage's activations are
    ``max(4 k0 + k1, 5 k0) + w`` (``k_c`` the kept bytes of one micro-batch of chunk ``c``,
    ``w`` the largest recompute working set), where main20 counted ``5 (k0 + k1) / 2 + w``;
    the last chunk holds the LM head and loss, so ``k1 > k0``."""
    low = lowering()
    P = 4
    mine = [low.chunks[c * P + P - 1] for c in range(2)]
    parts = [full_recompute_bytes(c.layers, Precision.BF16) for c in mine]
    (k0, w0), (k1, w1) = parts
    assert k1 > k0
    want = max(4 * k0 + k1, 5 * k0) + max(w0, w1)
    got = low.memory()[P - 1].activations_bytes
    assert got == pytest.approx(want, rel=1e-12)
    assert got < 5 * (k0 + k1) / 2 + max(w0, w1)  # main20's mean


#: The moments of stage 1 of pp 2 x v 2 with 2 micro-batches, written out by hand from the
#: operation order F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0 (warm-up (v - 1) p = 2 forwards):
#: per chunk (live sets, weights gathered, gradients unsharded, forwards run), at the warm-up's
#: last forward (F1c0 holds all F0c0 does, and more), every later forward and each chunk's
#: first backward (B0c1, B0c0). Chunk 1's windows close with its last
#: backward (B1c1), before chunk 0's gradients appear (B0c0); its micro-batch 0 is released
#: (B0c1) before micro-batch 1 is saved (F1c1: one live, two run), so F1c1 holds what B0c1
#: does and one forward more (kept, where B0c1 first appeared); B1c1 holds what F1c1 does.
#: B1c0 holds one live set less than B0c0 but is the cool-down run's end (B0c0 B1c0, chunk 0's):
#: a finished backward keeps its input's ``.grad`` beside one more idle receive buffer, so the
#: run may grow (final20e).
HAND = (
    ((2, True, False, 2), (0, False, False, 0)),
    ((2, True, False, 2), (1, True, False, 1)),
    ((2, True, False, 2), (1, True, True, 2)),
    ((2, True, True, 2), (0, False, False, 2)),
    ((1, True, True, 2), (0, False, False, 2)),
)


def _every_moment(schedule: PipelineSchedule, p: int, m: int, stage: int, v: int) -> list:
    """Every operation's state, straight from :func:`stage_ops` (the reference)."""
    ops = stage_ops(schedule, p, m, stage, v)
    fb = {c: [i for i, o in enumerate(ops) if o[2] == c] for c in range(v)}
    bs = {c: [i for i in fb[c] if ops[i][0] == "B"] for c in range(v)}
    out, live, done = [], [0] * v, [0] * v
    for i, (ph, _, c) in enumerate(ops):
        if ph == "F":
            live[c] += 1
            done[c] += 1
        out.append(tuple(
            (live[k], fb[k][0] <= i <= bs[k][-1], bs[k][0] <= i <= bs[k][-1], done[k])
            for k in range(v)
        ))  # fmt: skip
        if ph == "B":
            live[c] -= 1
    return out


@pytest.mark.parametrize(
    ("schedule", "p", "m", "v"),
    [(PipelineSchedule.INTERLEAVED, 4, 8, 2), (PipelineSchedule.INTERLEAVED, 4, 12, 3),
     (PipelineSchedule.INTERLEAVED, 4, 16, 2), (PipelineSchedule.INTERLEAVED, 2, 20, 4),
     (PipelineSchedule.INTERLEAVED, 4, 40, 2), (PipelineSchedule.INTERLEAVED, 3, 36, 3),
     (PipelineSchedule.ONE_F_ONE_B, 4, 40, 1), (PipelineSchedule.ONE_F_ONE_B, 1, 9, 1),
     (PipelineSchedule.ONE_F_ONE_B, 4, 6, 1), (PipelineSchedule.GPIPE, 3, 4, 1)],
)  # fmt: skip
def test_kept_moments_cover_every_moment(schedule, p: int, m: int, v: int) -> None:
    """Every operation's state is held, chunk by chunk, by one of the kept moments (so the
    peak of any sum that grows with each field is among them; the receive buffers' trade, which
    does not, is ``test_kept_moments_hold_the_peak_of_one_block_chunks``'s), and every kept
    moment is an operation's state;
    the longer steps skip whole periods of the alternation (``chunk_moments``)."""
    for stage in range(p):
        every = _every_moment(schedule, p, m, stage, v)
        kept = chunk_moments(schedule, p, m, stage, v)
        assert set(kept) <= set(every)
        for t in every:
            assert any(all(a >= b for x, y in zip(k, t) for a, b in zip(x, y)) for k in kept)
        # live counts only (a step of 16 micro-batches is read off a shorter one's)
        lives = {tuple(c[0] for c in t) for t in chunk_moments(schedule, p, m, stage, v, False)}
        every_live = {tuple(c[0] for c in t) for t in every}
        assert lives <= every_live
        assert all(any(all(a >= b for a, b in zip(k, t)) for k in lives) for t in every_live)


def test_moments_written_out() -> None:
    assert chunk_moments(PipelineSchedule.INTERLEAVED, 2, 2, 1, 2) == HAND


@pytest.mark.parametrize("model", ["llama", "gpt"])
def test_fsdp2_pipelined_windows_and_kept_outputs(model: str) -> None:
    """torchtitan, FSDP2 4 x pp 2 x v 2, 2 micro-batches per step: the last stage's
    activations plus gathered weights and FP32 gradients are the largest over :data:`HAND`'s
    moments of ``sum_c live_c k_c + done_c o_c + w + gathered_c P_c a + grads_c P_c r``
    (``o_c`` the chunk's output: chunk 1's the LM head's bf16 logits). GPT ties its word
    embedding: the last chunk holds the tied copy too (``P_1`` + ``tied``)."""
    low = torchtitan() if model == "llama" else torchtitan(model="gpt", model_args=SMALL)
    assert (low.tied[1] > 0) is (model == "gpt")
    rc = low.rc
    assert rc.gather_per_step and rc.cross_entropy is CrossEntropy.EAGER_FP32
    mine = [low.chunks[c * 2 + 1] for c in range(2)]
    parts = [full_recompute_bytes(c.layers, Precision.BF16) for c in mine]
    k = [p[0] for p in parts]
    w = max(p[1] for p in parts)
    head = next(la for la in mine[1].layers if la.name.endswith("lm_head"))
    out = [_elements(mine[0].layers[-1].output_shape) * 2, _elements(head.output_shape) * 2]
    vocab = 32000 if model == "llama" else 50257
    assert out[1] == 2 * 1024 * vocab * 2  # mb 2 x seq 1024 x vocab, bf16
    params = [float(c.params) for c in mine]
    params[1] += low.tied[1]

    # receive buffers (mem30c): 2 micro-batches' inputs of each chunk (mb 2 x seq 1024 x
    # hidden 1024, bf16: 4 MiB) and chunk 0's 2 gradient buffers of its output; the in-flight
    # inputs are in k, each finished backward's input gradient stays in .grad
    ri, rg = 4 * 2**20, [out[0], 0.0]
    assert out[0] == ri

    def at(t: tuple) -> tuple[float, float]:
        acts = w + sum(s[0] * k[c] + s[3] * out[c] for c, s in enumerate(t))
        acts += sum((2 - s[0] + s[3] - s[0]) * ri + 2 * rg[c] for c, s in enumerate(t))
        held = sum(
            (params[c] * rc.gather_bytes if s[1] else 0.0)
            + (params[c] * rc.grad_reduce_bytes if s[2] else 0.0)
            for c, s in enumerate(t)
        )
        return acts, held

    acts, held = max((at(t) for t in HAND), key=sum)
    mem = low.memory()[1]
    assert mem.activations_bytes == pytest.approx(acts, rel=1e-12)
    # the workspace: context, library, the largest transient (the loss's two FP32 tensors
    # or a layer's output with its gradient), the held weights and gradients; fragmentation
    layers = [la for c in mine for la in c.layers]
    pair = max(
        max(2.0 * _elements(la.output_shape) * 2 for la in layers),
        CrossEntropy.EAGER_FP32.transient_bytes(layers),
    )
    ws = CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES + pair + held
    state = mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes + mem.comm_buffers_bytes
    ws += FRAGMENTATION * (state + acts + ws)
    assert mem.workspace_bytes == pytest.approx(ws, rel=1e-12)
    # main20 held both chunks' weights and gradients: 2 sum P (a + r) at every moment
    assert held < sum(params) * (rc.gather_bytes + rc.grad_reduce_bytes)


def test_fsdp2_one_f_one_b_last_stage_keeps_every_output() -> None:
    """torchtitan 1F1B, pp 2, 4 micro-batches: the last stage runs F B F B ..., one set in
    flight, and at its last backward holds all 4 micro-batches' logits (``output_chunks``),
    so its activations are ``k + w + 4 o`` (main20: ``k + w``), and (mem30c) the 3 receive
    buffers of the micro-batches not in flight and the 3 finished backwards' input gradients
    (``.grad``), 4 MiB each (:mod:`tests.parallel.test_stage_receive_buffers`)."""
    low = torchtitan(interleave=1, schedule="1f1b", global_batch=32)
    assert low.m == 4
    last = low.chunks[-1]
    k, w = full_recompute_bytes(last.layers, Precision.BF16)
    head = next(la for la in last.layers if la.name.endswith("lm_head"))
    o = _elements(head.output_shape) * 2
    want = k + w + 4 * o + 6 * 4 * 2**20
    assert low.memory()[1].activations_bytes == pytest.approx(want, rel=1e-12)


def test_loss_parallel_under_tp() -> None:
    """torchtitan with tp 2 computes the loss with loss parallel: its backward transient is
    three FP32 logits-sized (vocabulary-sharded) tensors, ``eager-fp32``'s two."""
    tp2 = torchtitan(tp=2, gpus=8)
    tp1 = torchtitan()
    assert tp2.rc.cross_entropy is CrossEntropy.LOSS_PARALLEL
    assert tp1.rc.cross_entropy is CrossEntropy.EAGER_FP32
    layers = tp2.chunks[-1].layers
    loss = sum(la.activation_bytes for la in layers if la.kind is LayerKind.LOSS)
    assert loss > 0
    assert CrossEntropy.LOSS_PARALLEL.transient_bytes(layers) == 3 * loss
    assert CrossEntropy.EAGER_FP32.transient_bytes(layers) == 2 * loss
    assert CrossEntropy.TE_FUSED.for_tp(8) is CrossEntropy.TE_FUSED


@pytest.mark.parametrize(
    ("schedule", "p", "m", "v"),
    [(PipelineSchedule.GPIPE, 3, 22, 1), (PipelineSchedule.ONE_F_ONE_B, 4, 9, 1),
     (PipelineSchedule.ONE_F_ONE_B, 5, 3, 1), (PipelineSchedule.INTERLEAVED, 4, 8, 2),
     (PipelineSchedule.INTERLEAVED, 2, 6, 3), (PipelineSchedule.INTERLEAVED, 3, 12, 4)],
)  # fmt: skip
def test_kept_moments_hold_the_peak_of_one_block_chunks(schedule, p: int, m: int, v: int) -> None:
    """A chunk of one block under full recomputation saves less than two inputs, so a finished
    backward (its saved set traded for a kept ``.grad`` and an idle receive buffer) can leave
    the stage fuller: the peak of the memory sum (:func:`~perfmodel.parallel.stage_memory.
    moments_peak`, the one stage memory takes) over the kept moments equals its peak over
    every operation's state for saved sets of 0.3-4 inputs, so that a chunk's memory may grow or
    fall along its run of backwards and a run's first or last one hold the peak (final20e: up
    to 42% under, GPipe p3 m22, before the cool-down's run ends were kept; final21a: with
    saved sets under two inputs only, dropping the runs' first backwards passed)."""
    import random

    rng = random.Random(20)
    for stage in range(p):
        every = _every_moment(schedule, p, m, stage, v)
        kept = chunk_moments(schedule, p, m, stage, v)
        for _ in range(20):
            ri = [rng.uniform(0.1, 1.0) for _ in range(v)]
            a = [x * rng.uniform(0.3, 4.0) for x in ri]
            sizes = (
                a,
                [rng.uniform(0, 1) for _ in range(v)],
                [rng.uniform(0, 5) for _ in range(v)],
                [rng.uniform(0, 5) for _ in range(v)],
                list(zip(ri, [rng.uniform(0, 1) for _ in range(v)], strict=True)),
            )
            assert sum(moments_peak(kept, m, 0.0, *sizes)) == pytest.approx(
                sum(moments_peak(every, m, 0.0, *sizes)), rel=1e-12
            )


def test_fsdp2_moments_without_the_step_micro_batches_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pipelined FSDP2's receive buffers and kept ``.grad`` count the step's micro-batches, so a
    caller that gives moments but no ``microbatches`` is refused (rev33: a default of 0 silently
    dropped 25 MiB on this stage), where the lowering's own call passes them."""
    low = torchtitan()
    low.memory()  # passes the step's micro-batches

    def forgetful(chunks, **kw):  # type: ignore[no-untyped-def]
        kw.pop("microbatches")
        return stage_memory(chunks, **kw)

    monkeypatch.setattr(lower_pipeline, "stage_memory", forgetful)
    with pytest.raises(TypeError, match="microbatches"):
        low.memory()
