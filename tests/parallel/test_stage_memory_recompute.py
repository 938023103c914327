"""Full recomputation on a pipeline stage keeps the input each chunk receives (session 18,
recompute22).

Megatron-Core (core_v0.9.0 ``megatron/core/transformer/transformer_block.py``,
``TransformerBlock.forward`` and ``_checkpointed_forward``): a stage without the embedding
takes ``hidden_states = self.input_tensor`` (the tensor ``p2p_communication`` received) and,
with ``recompute_granularity='full'``, checkpoints groups of ``recompute_num_layers`` layers
from layer 0, each ``tensor_parallel.checkpoint`` saving its input (``CheckpointFunction``,
``ctx.save_for_backward(*args)``); ``schedules.py`` appends that received tensor to
``input_tensors`` (per model chunk when interleaved) and pops it only at the micro-batch's
backward. So per (micro-batch, chunk) in flight a stage holds one input per block, the first
block's included: the received tensor, held once (the checkpoint and the schedule share it).
main18 counted the block inputs only after the first (the layer before the first block was
not in the chunk), one ``2 s b h`` (``s/t`` with sequence parallelism) per set in flight less.
The stage's sum by hand: ``tests/parallel/test_recipe.py``,
``test_middle_stage_keeps_its_received_input``.
"""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, resolve
from perfmodel.dtypes import Precision
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.pipeline.lower import _step_inputs
from perfmodel.workload.memory import full_recompute_bytes


@pytest.mark.parametrize("sp", [False, True])
def test_each_chunk_keeps_what_the_previous_one_sends(sp: bool) -> None:
    """Interleaved Megatron-Core (pp 4 x v 2, tp 2): every chunk after the model's first keeps
    one input per block, each the size of what the lowering sends it (the previous chunk's
    ``out_bytes``: ``s/t x b x h`` under sequence parallelism), plus its layers outside
    blocks (the last chunk's norm, head and loss)."""
    sc = Scenario(
        system="dgx-h100", gpus=8, model="gpt",
        model_args={"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024},
        global_batch=32, microbatch=2, tp=2, pp=4, interleave=2, schedule="interleaved",
        sequence_parallel=sp, precision="bf16", optimizer="adam", software="megatron-core",
        recompute="full", fidelity="analytic",
    )  # fmt: skip
    r = resolve(sc)
    inp, costs, _ = _step_inputs(sc, r, None)
    chunks = PipelineLowering(inp, costs).chunks
    assert len(chunks) == 8
    sent = 2 * 1024 * 1024 * 2 / (2 if sp else 1)  # s b h x 2 bytes, / t with SP
    for k in range(1, len(chunks)):
        c = chunks[k]
        assert chunks[k - 1].out_bytes == sent
        kept, _ = full_recompute_bytes(c.layers, Precision.BF16)
        outside = sum(la.activation_bytes for la in c.layers if la.block is None)
        assert c.blocks == 1
        assert kept == pytest.approx(outside + c.blocks * sent, rel=1e-12)
