"""A pipeline chunk that begins with a pre-norm block keeps the input it receives under full
recomputation (:func:`perfmodel.workload.memory.first_block_input_elements`): that input is
what the previous chunk sends, its :attr:`perfmodel.parallel.lowering.Chunk.out_bytes`. A
pre-activation ResNet's block (batch norm first) need not map its input shape to its output
(a stage's first block widens the channels, its last halves the spatial size): before mend33
the count took the block's output shape (resnet50v2 pp4 chunk 1 counted 12.25 MiB of a
49 MiB received tensor; resnet152v2 pp8 chunk 1, 24.5 of 12.25 MiB)."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.api import Scenario, resolve
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.pipeline.lower import _step_inputs
from perfmodel.workload.layers import layer_runs
from perfmodel.workload.memory import first_block_input_elements

MIB = 2**20


@pytest.mark.parametrize(("model", "pp"), [("resnet50v2", 4), ("resnet152v2", 8), ("gpt", 4)])
def test_received_input_is_previous_chunk_output(model: str, pp: int) -> None:
    """Every chunk after the first counts, as its received input, the previous chunk's output
    bytes (fp16: 2 bytes an element); resnet50v2 pp4 chunk 1 by hand: it begins at
    ``conv2_block3.preact_bn``, whose input is ``conv2_block2``'s output ``32 x 256 x 56 x
    56`` (49 MiB), not its own strided output ``32 x 256 x 28 x 28`` (12.25 MiB)."""
    sc = Scenario(system="dgx-a100", gpus=pp, model=model, global_batch=256, microbatch=32,
                  pp=pp, precision="fp16", software="megatron", recompute="full",
                  fidelity="analytic")  # fmt: skip
    inp, costs, _ = _step_inputs(sc, resolve(sc), None)
    chunks = PipelineLowering(inp, costs).chunks
    assert len(chunks) == pp
    for prev, chunk in itertools.pairwise(chunks):
        assert first_block_input_elements(layer_runs(chunk.layers)) * 2 == prev.out_bytes
    if model == "resnet50v2":
        assert chunks[1].layers[0].name == "conv2_block3.preact_bn"
        assert chunks[0].out_bytes == 32 * 256 * 56 * 56 * 2 == 49 * MIB
        out = next(la for la in chunks[1].layers if la.name == "conv2_block3.out")
        assert out.output_shape == (32, 256, 28, 28)  # what main counted: 12.25 MiB


def test_fsdp2_chunk_counts_its_received_input() -> None:
    """Under FSDP2 (torchtitan) each block opens with its unit's copy layer (``Net._fsdp_copy``,
    parameters only), the norm after it: a chunk after the first still keeps the input it
    receives (``torch.distributed.pipelining`` keeps each micro-batch's received buffer in
    ``fwd_cache`` until its backward). By hand, a Llama of h 4096 (8 blocks, 2 a chunk) at
    micro-batch 2 x seq 2048 in bf16 without TP: ``2 x 2048 x 4096 x 2`` bytes = 32 MiB per
    chunk and micro-batch (before session 20 the copy layer hid it: 0)."""
    from perfmodel.workload.layers import KernelClass
    from perfmodel.workload.memory import full_recompute_bytes

    args = {
        "hidden": 4096,
        "layers": 8,
        "heads": 32,
        "kv_heads": 8,
        "ffn_hidden": 14336,
        "seq_len": 2048,
        "vocab": 32000,
    }
    sc = Scenario(system="dgx-h100", gpus=8, model="llama", model_args=args, global_batch=32,
                  microbatch=2, pp=4, dp=2, precision="bf16", software="torchtitan",
                  recompute="full", fidelity="analytic")  # fmt: skip
    inp, costs, _ = _step_inputs(sc, resolve(sc), None)
    chunks = PipelineLowering(inp, costs).chunks
    assert len(chunks) == 4
    for prev, chunk in itertools.pairwise(chunks):
        assert chunk.layers[0].kernel_class is KernelClass.FSDP_COPY  # what hid the input
        got = first_block_input_elements(layer_runs(chunk.layers)) * 2
        assert got == prev.out_bytes == 2 * 2048 * 4096 * 2 == 32 * MIB
    # a middle chunk of n blocks keeps n block inputs: the received one and n - 1 between blocks
    mid = chunks[1]
    blocks = len({la.block for la in mid.layers if la.block is not None})
    kept, _ = full_recompute_bytes(mid.layers, costs.precision)
    assert kept == blocks * 32 * MIB
