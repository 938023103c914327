"""A 4-layer Llama on 8 H100 under Megatron-Core: the scenario that the memory-option tests
(activation offload, TE cross entropy) perturb one option of."""

from __future__ import annotations

from perfmodel.api import Scenario

LLAMA = {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn_hidden": 2816,
         "vocab": 32000, "seq_len": 2048}  # fmt: skip


def scenario(**kw: object) -> Scenario:
    """The tiny Llama scenario with ``kw`` replacing its fields."""
    base = dict(system="dgx-h100", model="llama", model_args=LLAMA, global_batch=16,
                microbatch=2, precision="bf16", software="megatron-core", optimizer="adamw",
                fidelity="analytic")  # fmt: skip
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]
