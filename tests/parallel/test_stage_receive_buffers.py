"""``torch.distributed.pipelining``'s per-micro-batch receive buffers in a pipelined FSDP2
stage's memory (mem30c, :func:`perfmodel.parallel.stage_memory.receive_buffer_bytes`),
hand-computed.

``PipelineStage._prepare_forward_infra`` allocates a forward receive buffer for every
micro-batch of the step on every stage but the first, ``_prepare_backward_infra`` a gradient
receive buffer for every micro-batch on every stage but the last; neither is freed, and each
finished backward leaves its input's gradient in the buffer's ``.grad`` until the next step.
A chunk at a moment with ``n`` micro-batches in flight and ``d`` forwards run holds
``(m - n) + (d - n)`` input-sized tensors beyond its in-flight inputs (counted in its saved
activations) and ``m`` output-sized ones.
"""

from __future__ import annotations

import pytest
from pipelined_lowerings import torchtitan

from perfmodel.dtypes import Precision
from perfmodel.parallel.lowering import _elements
from perfmodel.parallel.stage_memory import chunk_output_bytes, receive_buffer_bytes
from perfmodel.workload.memory import full_recompute_bytes

MIB4 = 2 * 1024 * 1024 * 2  # mb 2 x seq 1024 x hidden 1024, bf16: 4 MiB


def test_buffer_sizes_by_hand() -> None:
    """pp 2, 1F1B: the first stage receives no input (the embedding opens it) and a 4 MiB
    gradient a micro-batch; the last receives a 4 MiB input and no gradient (its output is
    the loss's)."""
    low = torchtitan(interleave=1, schedule="1f1b", global_batch=32)
    first, last = low.chunks
    assert receive_buffer_bytes(first, 2, chunk_output_bytes(first, 2)) == (0.0, MIB4)
    assert receive_buffer_bytes(last, 2, chunk_output_bytes(last, 2)) == (MIB4, 0.0)


def test_one_f_one_b_first_stage_by_hand() -> None:
    """pp 2, 1F1B, 4 micro-batches: stage 0 runs F F B F B F B B; its peak holds 2 sets in
    flight with 4 forwards run (F3): ``2 k + w + 4 o`` (``output_chunks``) and the 4
    gradient receive buffers, ``4 x 4 MiB`` (no input buffers, no input gradients)."""
    low = torchtitan(interleave=1, schedule="1f1b", global_batch=32)
    assert low.m == 4
    first = low.chunks[0]
    k, w = full_recompute_bytes(first.layers, Precision.BF16)
    o = _elements(first.layers[-1].output_shape) * 2
    assert o == MIB4
    want = 2 * k + w + 4 * o + 4 * MIB4
    assert low.memory()[0].activations_bytes == pytest.approx(want, rel=1e-12)
