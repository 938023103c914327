"""Every MoE decoder of the zoo carries the rotary position embedding its reference uses: the
queries' and keys' RoPE of standard attention (Mixtral, Qwen3-MoE, the generic ``moe``), and
multi-latent attention's decoupled RoPE on its rotary channels only (DeepSeek-V3)."""

from __future__ import annotations

import pytest

from perfmodel.workload import build_model
from perfmodel.workload.layers import KernelClass

SMALL = dict(layers=2, seq_len=64, vocab=1000)


@pytest.mark.parametrize("name", ["moe", "mixtral_8x7b", "mixtral_8x22b", "qwen3_30b_a3b"])
def test_standard_attention_moe_rotates_queries_and_keys(name: str) -> None:
    w = build_model(name, batch_size=2, **SMALL)
    ropes = [la for la in w.layers if la.name.endswith(".rope")]
    assert len(ropes) == 2 and all(la.kernel_class is KernelClass.ROPE for la in ropes)
    attn = next(la for la in w.layers if la.name.endswith(".attention"))
    g = attn.gemm
    assert g is not None
    heads, d = g.batch // 2, g.k
    two_kv = next(la for la in w.layers if la.name.endswith(".qkv")).output_shape[-1] // d - heads
    # 6 FLOP per rotated element of the queries (heads) and keys (kv_heads)
    assert ropes[0].fwd_flop == 6.0 * 2 * 64 * (heads + two_kv // 2) * d


def test_deepseek_mla_rotates_the_rope_channels_only() -> None:
    """DeepSeek-V3: 128 heads, qk_rope_head_dim 64: each head's 64 rotary query channels and the
    64 key channels all heads share."""
    w = build_model("deepseek_v3", batch_size=1, layers=4, seq_len=32)
    ropes = [la for la in w.layers if la.name.endswith(".mla_rope")]
    assert len(ropes) == 4
    assert ropes[0].fwd_flop == 6.0 * 32 * (128 + 1) * 64
    assert not any(la.name.endswith(".rope") for la in w.layers)


@pytest.mark.parametrize(
    ("name", "params"),
    [("mixtral_8x7b", 46_702_792_704), ("deepseek_v3", 671_026_404_352)],
)
def test_rope_adds_no_parameters(name: str, params: int) -> None:
    assert build_model(name, batch_size=1, seq_len=16).total_params == params
