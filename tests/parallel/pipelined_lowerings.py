"""Small pipelined lowerings the stage-memory tests share (``test_stage_memory_schedule``,
``test_stage_receive_buffers``, ``test_schedule_moments_jumps``): a GPT under Megatron-Core,
interleaved, and a Llama under torchtitan's pipelined FSDP2."""

from __future__ import annotations

from perfmodel.api import Scenario, resolve
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.pipeline.lower import _step_inputs

SMALL = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024}


def lowering(**kw: object) -> PipelineLowering:
    """A small GPT under Megatron-Core on 8 H100: tp 2 x pp 4 interleaved (v 2), full
    recomputation, 16 micro-batches; ``kw`` overrides any scenario field."""
    base: dict = dict(system="dgx-h100", gpus=8, model="gpt", model_args=SMALL, global_batch=32,
                      microbatch=2, tp=2, pp=4, interleave=2, schedule="interleaved",
                      precision="bf16", optimizer="adam", software="megatron-core",
                      recompute="full", fidelity="analytic")  # fmt: skip
    base.update(kw)
    sc = Scenario(**base)
    inp, costs, _ = _step_inputs(sc, resolve(sc), None)
    return PipelineLowering(inp, costs)


def torchtitan(**kw: object) -> PipelineLowering:
    """A small Llama under torchtitan on 8 GPUs: FSDP2 4 x pp 2 (v 2), 2 micro-batches."""
    args = {**SMALL, "kv_heads": 4, "ffn_hidden": 2816, "vocab": 32000}
    base: dict = dict(model="llama", model_args=args, software="torchtitan", tp=1, pp=2,
                      global_batch=16, microbatch=2)  # fmt: skip
    return lowering(**{**base, **kw})
