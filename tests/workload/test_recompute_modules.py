"""Megatron-Core's selective ``recompute_modules`` (``Scenario.recompute_modules``): parsing at the
edge and what each module re-runs and frees (golden counts on a small multi-latent-attention
MoE). The DeepSeek-V3 row that runs with them: ``tests/validation/test_moe_cp_validation.py``."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError
from perfmodel.workload import build_model
from perfmodel.workload.memory import ModuleRecompute, RecomputeModule

# 4 tokens, h 64, 4 heads, MLA: q/k width 16 + 8 rope, v 16; dense first layer (ffn 96),
# then a MoE layer of 4 experts (width 32), top-2
MLA = dict(batch_size=1, seq_len=4, hidden=64, layers=2, heads=4, vocab=100, ffn_hidden=96,
           experts=4, top_k=2, expert_ffn_hidden=32, first_dense_layers=1, kv_lora_rank=16,
           q_lora_rank=24, qk_rope_head_dim=8, head_dim=16, v_head_dim=16,
           precision="bf16")  # fmt: skip


def test_parse_modules_at_the_edge() -> None:
    assert RecomputeModule.parse_list("mla_up_proj, mlp") == {
        RecomputeModule.MLA_UP_PROJ,
        RecomputeModule.MLP,
    }
    assert RecomputeModule.parse_list(["moe_act"]) == {RecomputeModule.MOE_ACT}
    with pytest.raises(ConfigError, match="not modelled"):
        RecomputeModule.parse_list("layernorm")
    with pytest.raises(ConfigError, match="bogus"):
        RecomputeModule.parse_list("bogus")
    with pytest.raises(ConfigError, match="needs recompute=selective"):
        predict(
            Scenario(system="dgx-h100", model="llama", batch_per_gpu=1, recompute_modules="mlp")
        )


def test_modules_rerun_and_free_golden() -> None:
    w = build_model("moe", **MLA)
    by = {la.name: la for la in w.layers}
    att = by["layer1.attention"]
    # the fused attention keeps Q, K (4 heads x 24) and V (4 x 16) in bf16 and its FP32 lse
    assert att.activation_bytes == 4 * 4 * (24 + 24 + 16) * 2 + 4 * 4 * 4
    up = ModuleRecompute(frozenset({RecomputeModule.MLA_UP_PROJ}))
    assert up.dropped_bytes(att, mla=True) == 4 * 4 * (24 + 24 + 16) * 2  # the lse stays
    assert up.dropped_bytes(att, mla=False) == 0.0
    assert (up.share(by["layer1.q_up"]), up.share(by["layer1.kv_up"])) == (1.0, 1.0)
    assert up.share(att) == 0.0
    mlp = ModuleRecompute(frozenset({RecomputeModule.MLP}))
    # the dense MLP keeps its input (fc1's) and frees the activation's and fc2's saved bytes
    assert mlp.dropped_bytes(by["layer0.fc1"], mla=True) == 0.0
    assert mlp.dropped_bytes(by["layer0.swiglu"], mla=True) == 2 * 4 * 96 * 2
    assert mlp.dropped_bytes(by["layer0.fc2"], mla=True) == 4 * 96 * 2
    assert mlp.share(by["layer1.experts_fc1"]) == 0.0  # routed experts are not the dense MLP
    act = ModuleRecompute(frozenset({RecomputeModule.MOE_ACT}))
    assert act.dropped_bytes(by["layer1.experts_fc2"], mla=True) == 8 * 32 * 2  # 8 routed rows
    assert act.share(by["layer1.experts_swiglu"]) == 1.0
    kept, working = up.kept_bytes(w.layers, w.precision)
    assert kept == sum(la.activation_bytes for la in w.layers) - 2 * 4 * 4 * 64 * 2
    assert working == 4 * 4 * 64 * 2  # one block's freed Q, K, V live again in its backward
