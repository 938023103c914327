"""MoE model shapes the parallel tests share (one home: three test files wrote them out)."""

from __future__ import annotations

#: A two-layer MoE GPT small enough for a SimPy step in a test: 8 experts, top-2.
SMALL_MOE = {
    "hidden": 256,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "ffn_hidden": 512,
    "experts": 8,
    "top_k": 2,
    "seq_len": 512,
    "vocab": 1024,
}

#: Mixtral 8x7B (config.json of huggingface.co/mistralai/Mixtral-8x7B-v0.1): 32 layers of 8 SwiGLU
#: experts of 3 x 4096 x 14336 weights: 45,097,156,608 expert parameters.
MIXTRAL_EXPERTS = 32 * 8 * 3 * 4096 * 14336
