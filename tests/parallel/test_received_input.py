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
