"""The models 2026 machines are benchmarked with (issue 25 item 7): exact total and active
parameter counts against their published configurations (hand-computed here from the config
values), sliding-window and chunked attention FLOP, the layer patterns (alternating windows,
interleaved dense/MoE layers, sandwich norms), DeepSeek-V3's multi-token-prediction module, and
bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.compute.model import attention_shape
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.workload import LayerKind, build_model, get_model_info
from perfmodel.workload._net import Net, RankLayout
from perfmodel.workload.window import AttentionWindow, WindowKind
from perfmodel.workload.zoo.moe import routing_sampling_load


def _swiglu(h: int, f: int) -> int:
    return 3 * h * f


def _attn(h: int, heads: int, kv: int, d: int) -> int:
    return h * (heads * d + 2 * kv * d) + heads * d * h


# --------------------------------------------------------------------------------- gpt-oss
# config.json of huggingface.co/openai/gpt-oss-120b / -20b: hidden_size 2880, head_dim 64,
# num_attention_heads 64, num_key_value_heads 8, intermediate_size 2880, num_local_experts
# 128 / 32, experts_per_token 4, num_hidden_layers 36 / 24, vocab_size 201088,
# attention_bias true, tie_word_embeddings false, sliding_window 128 (even layers)
GPT_OSS = {
    "gpt_oss_120b": (36, 128, 116_829_156_672, 5_711_982_912),
    "gpt_oss_20b": (24, 32, 20_914_757_184, 4_187_440_704),
}


def _gpt_oss(layers: int, experts: int, k: int = 4) -> tuple[int, int]:
    h, heads, kv, d, f, v = 2880, 64, 8, 64, 2880, 201088
    attn = _attn(h, heads, kv, d) + (heads * d + 2 * kv * d + h) + heads  # biases, sinks
    expert = 3 * h * f + 2 * f + h  # gate/up and down weights with their biases
    common = attn + (h * experts + experts) + 2 * h  # biased router, two RMSNorms
    ends = 2 * v * h + h
    return (
        layers * (common + experts * expert) + ends,
        layers * (common + k * expert) + ends,
    )


@pytest.mark.parametrize("name", sorted(GPT_OSS))
def test_gpt_oss_counts(name: str) -> None:
    layers, experts, total, active = GPT_OSS[name]
    assert _gpt_oss(layers, experts) == (total, active)
    w = build_model(name, batch_size=1, seq_len=256)
    assert (w.total_params, w.active_params_total) == (total, active)
    # OpenAI's model card states the active parameters without the embedding: 5.13B / 3.61B
    assert (
        round((active - 201088 * 2880) / 1e9, 2)
        == {"gpt_oss_120b": 5.13, "gpt_oss_20b": 3.61}[name]
    )


def test_gpt_oss_alternates_sliding_and_full_attention() -> None:
    s = 4096
    w = build_model("gpt_oss_20b", batch_size=2, seq_len=s, precision="bf16")
    att = {la.name: la for la in w.layers if la.kind is LayerKind.ATTENTION}
    full, slid = att["layer1.attention"], att["layer0.attention"]
    b, heads, d = 2, 64, 64
    assert full.fwd_flop == pytest.approx(2 * b * s * s * heads * 2 * d * 0.5)
    # sliding window of 128: every query sees 128 keys, the first 128 fewer
    assert slid.fwd_flop == pytest.approx(2 * b * heads * 2 * d * (s * 128 - 128**2 / 2))
    assert [att[f"layer{i}.attention"].fwd_flop == slid.fwd_flop for i in range(4)] == [
        True,
        False,
        True,
        False,
    ]
    assert slid.activation_bytes == full.activation_bytes  # same Q, K, V and log-sum-exp
    assert slid.params == full.params == heads  # one sink per head
    shape = attention_shape(slid)
    assert (shape.seq, shape.causal) == (128, True)
    # the window layers state their window; the full ones do not
    assert (slid.sliding_window, full.sliding_window) == (128, 0)


def test_gpt_oss_expert_down_bias_is_its_own_kernels() -> None:
    """Megatron-Core adds the probability-weighted down-projection bias in eager PyTorch after
    the grouped GEMM (``TEGroupedMLP._apply_bias``, FP32 probabilities): 28 bytes per element of
    the routed rows forward, 36 backward, per-expert launches; eager stacks one bf16 add."""
    from perfmodel.workload.kernels import Fusion, KernelRecipe

    b, s, ep = 2, 256, 8  # gpt-oss-20b: 32 experts top-4, hidden 2880; 4 local experts
    te = build_model(
        "gpt_oss_20b",
        batch_size=b,
        seq_len=s,
        ep=ep,
        precision="bf16",
        kernels=KernelRecipe(fusion=Fusion.TE),
    )
    names = [la.name for la in te.layers]
    i = names.index("layer0.experts_fc2")
    assert names[i + 1] == "layer0.experts_fc2_bias"  # between the GEMM and the combine
    bias = te.layers[i + 1]
    # balanced routing: every rank gets tokens x top_k routed rows on average, the busiest
    # a little more (the sampling noise of 8 ranks' 512 tokens to 4 of 32 experts)
    rows = math.ceil(b * s * 4 * routing_sampling_load(32, 4, ep, b * s * 4))
    assert bias.output_shape == (rows, 2880)
    el = rows * 2880
    assert bias.fwd_bytes == pytest.approx(28 * el)  # b*p 4 + add 2+4+4 + cat 4+4 + to 4+2
    assert bias.bwd_bytes == pytest.approx(36 * el)  # casts 6+6, two products 8+8, two sums 4+4
    assert (bias.kernels, bias.bwd_kernels) == (4 + 2 * 3, 6 + 5 * 3)
    assert bias.expert_role is not None and bias.params == 0
    eager = build_model("gpt_oss_20b", batch_size=b, seq_len=s, ep=ep, precision="bf16")
    e = next(la for la in eager.layers if la.name == "layer0.experts_fc2_bias")
    assert (e.fwd_bytes, e.bwd_bytes) == (pytest.approx(4 * el), pytest.approx(2 * el))


def test_gpt_oss_clamped_activation_kernels() -> None:
    """The clamp of the expert activation's input (limit 7): under Megatron-Core two eager
    clamps and a cat (4 elements forward, 5 backward per element of the rows x 2f fc1 output),
    the clamped copy saved beside the fc1 output (counted with experts_fc2, which moe_act
    frees); torch.compile fuses it away."""
    from perfmodel.workload.kernels import Fusion, KernelRecipe

    b, s, ep, f = 2, 256, 8, 2880
    ws = {
        fu: build_model(
            "gpt_oss_20b",
            batch_size=b,
            seq_len=s,
            ep=ep,
            precision="bf16",
            kernels=KernelRecipe(fusion=fu),
        )
        for fu in (Fusion.TE, Fusion.COMPILE, Fusion.EAGER)
    }
    lay = {fu: {la.name: la for la in w.layers} for fu, w in ws.items()}
    rows = math.ceil(b * s * 4 * routing_sampling_load(32, 4, ep, b * s * 4))  # busiest rank
    el = rows * 2 * f  # the fc1 output
    te, co, ea = (
        lay[fu]["layer0.experts_swiglu"] for fu in (Fusion.TE, Fusion.COMPILE, Fusion.EAGER)
    )
    assert co.fwd_bytes == pytest.approx(3 * rows * f * 2)  # the zoo's SwiGLU, nothing added
    assert te.fwd_bytes - co.fwd_bytes == pytest.approx(4 * el * 2)
    assert te.bwd_bytes - co.bwd_bytes == pytest.approx(5 * el * 2)
    assert ea.fwd_bytes - co.fwd_bytes == pytest.approx(2 * el * 2)
    assert te.kernels - co.kernels == 3
    fc2 = {fu: lay[fu]["layer0.experts_fc2"].activation_bytes for fu in lay}
    assert fc2[Fusion.TE] - fc2[Fusion.COMPILE] == pytest.approx(el * 2)
    assert fc2[Fusion.EAGER] == fc2[Fusion.COMPILE]


# --------------------------------------------------------------------------------- Llama 4
# text_config of config.json of huggingface.co/meta-llama/Llama-4-Scout-17B-16E and
# Llama-4-Maverick-17B-128E: hidden_size 5120, num_hidden_layers 48, num_attention_heads 40,
# num_key_value_heads 8, head_dim 128, intermediate_size 8192 (experts and the shared expert),
# intermediate_size_mlp 16384 (dense layers), num_experts_per_tok 1, vocab_size 202048,
# attention_chunk_size 8192, untied; Scout 16 experts in every layer, Maverick 128 experts in
# every second layer (interleave_moe_layer_step 2)
LLAMA4 = {
    "llama4_scout": (16, 1, 107_769_861_120, 17_172_894_720),
    "llama4_maverick": (128, 2, 400_711_848_960, 17_184_691_200),
}


@pytest.mark.parametrize("name", sorted(LLAMA4))
def test_llama4_counts(name: str) -> None:
    experts, step, total, active = LLAMA4[name]
    h, n, v = 5120, 48, 202048
    attn = _attn(h, 40, 8, 128) + 2 * h  # weightless L2 qk-norm; two RMSNorms
    moe_common = attn + h * experts + _swiglu(h, 8192)  # router, shared expert
    dense = attn + _swiglu(h, 16384)
    n_moe = n // step
    ends = 2 * v * h + h
    exp_total = n_moe * (moe_common + experts * _swiglu(h, 8192)) + (n - n_moe) * dense + ends
    exp_active = n_moe * (moe_common + _swiglu(h, 8192)) + (n - n_moe) * dense + ends
    assert (exp_total, exp_active) == (total, active)
    w = build_model(name, batch_size=1, seq_len=256)
    assert (w.total_params, w.active_params_total) == (total, active)


def test_llama4_maverick_interleaves_dense_and_moe_layers() -> None:
    w = build_model("llama4_maverick", batch_size=1, seq_len=128, layers=4)
    moe_blocks = sorted({la.block for la in w.layers if la.experts})
    assert moe_blocks == [1, 3]  # HF moe_layers = range(step - 1, layers, step)
    fc1 = {la.name: la.gemm.n for la in w.layers if la.name.endswith(".fc1")}
    assert fc1 == {"layer0.fc1": 2 * 16384, "layer2.fc1": 2 * 16384}
    shared = [la for la in w.layers if la.name.endswith("shared_fc1")]
    assert [la.gemm.n for la in shared] == [2 * 8192, 2 * 8192]


def test_llama4_chunked_attention_on_rotary_layers_only() -> None:
    s = 16384  # two chunks of 8192
    w = build_model("llama4_scout", batch_size=1, seq_len=s, layers=4, precision="bf16")
    att = [la for la in w.layers if la.kind is LayerKind.ATTENTION]
    full = 2 * s * s * 40 * 2 * 128 * 0.5
    # layers 0-2 rotary and chunked (two causal chunks: half the causal FLOP); layer 3 NoPE
    assert [a.fwd_flop / full for a in att] == [0.5, 0.5, 0.5, 1.0]
    assert attention_shape(att[0]).seq == 8192 and attention_shape(att[0]).causal
    assert not any(a.sliding_window or attention_shape(a).sliding for a in att)  # chunks
    rope = [la.name for la in w.layers if la.name.endswith(".rope")]
    assert rope == ["layer0.rope", "layer1.rope", "layer2.rope"]
    # at the chunk length or below, chunking changes nothing
    short = build_model("llama4_scout", batch_size=1, seq_len=8192, layers=4, precision="bf16")
    flops = {la.fwd_flop for la in short.layers if la.kind is LayerKind.ATTENTION}
    assert flops == {2 * 8192**2 * 40 * 2 * 128 * 0.5}


# ---------------------------------------------------------------------------------- Grok-1


def test_grok1_counts_and_sandwich_norms() -> None:
    """github.com/xai-org/grok-1 run.py: emb_size 48 x 128, widening_factor 8 (ffn_size
    int(8 x 6144) x 2 // 3 = 32768), key_size 128, 48 query / 8 KV heads, 64 layers, 8 experts,
    2 selected, vocab 128 x 1024; model.py: four RMSNorms per layer, tied InOutEmbed."""
    h, f, v = 6144, 32768, 131072
    common = _attn(h, 48, 8, 128) + h * 8 + 4 * h
    total = 64 * (common + 8 * _swiglu(h, f)) + v * h + h
    active = 64 * (common + 2 * _swiglu(h, f)) + v * h + h
    assert (total, active) == (315_684_820_992, 83_756_587_008)
    w = build_model("grok_1", batch_size=1, seq_len=128)
    assert (w.total_params, w.active_params_total) == (total, active)
    norms = [la.name for la in w.layers if la.block == 0 and la.kind is LayerKind.NORM]
    assert norms == [
        "layer0.ln1",
        "layer0.post_attn_norm",
        "layer0.ln2",
        "layer0.post_moe_norm",
    ]


# ------------------------------------------------------------------------------ Qwen3 dense
# config.json of huggingface.co/Qwen/Qwen3-*: (hidden_size, num_hidden_layers,
# num_attention_heads, intermediate_size, tie_word_embeddings); 8 KV heads of head_dim 128,
# q/k RMSNorm, vocab 151936
QWEN3_DENSE = {
    "qwen3_0_6b": ((1024, 28, 16, 3072, True), 596_049_920),
    "qwen3_1_7b": ((2048, 28, 16, 6144, True), 1_720_574_976),
    "qwen3_4b": ((2560, 36, 32, 9728, True), 4_022_468_096),
    "qwen3_8b": ((4096, 36, 32, 12288, False), 8_190_735_360),
    "qwen3_14b": ((5120, 40, 40, 17408, False), 14_768_307_200),
    "qwen3_32b": ((5120, 64, 64, 25600, False), 32_762_123_264),
}


@pytest.mark.parametrize("name", sorted(QWEN3_DENSE))
def test_qwen3_dense_counts(name: str) -> None:
    (h, n, heads, f, tied), total = QWEN3_DENSE[name]
    layer = _attn(h, heads, 8, 128) + 2 * 128 + _swiglu(h, f) + 2 * h
    assert n * layer + (1 if tied else 2) * 151936 * h + h == total
    assert build_model(name, batch_size=1, seq_len=128).total_params == total


def test_aliases() -> None:
    assert get_model_info("Llama-4-Scout-17B-16E").name == "llama4_scout"
    assert get_model_info("gpt-oss-120b").name == "gpt_oss_120b"
    assert get_model_info("Grok-1").name == "grok_1"
    assert get_model_info("Qwen3-0.6B").name == "qwen3_0_6b"


# ------------------------------------------------------------------- DeepSeek-V3 with MTP


def test_deepseek_v3_mtp_module() -> None:
    """One MTP module (num_nextn_predict_layers 1): a MoE decoder layer like the main model's,
    eh_proj 2h x h, enorm/hnorm/final norm; embedding and output layer shared."""
    h, v, s = 7168, 129280, 256
    base = build_model("deepseek_v3", batch_size=1, seq_len=s)
    mtp = build_model("deepseek_v3", batch_size=1, seq_len=s, mtp_layers=1)
    moe_layer = sum(la.params for la in base.layers if la.block == 60)  # a MoE layer
    assert mtp.total_params - base.total_params == moe_layer + 2 * h * h + 3 * h
    assert mtp.total_params == 682_636_472_320
    assert mtp.buffers - base.buffers == 256  # the MTP layer's expert-bias buffer
    names = [la.name for la in mtp.layers]
    assert names.index("loss") < names.index("mtp0.embed") < names.index("mtp0.loss")
    head = next(la for la in mtp.layers if la.name == "mtp0.lm_head")
    assert head.params == 0 and head.fwd_flop == pytest.approx(2 * s * h * v)
    assert next(la for la in mtp.layers if la.name == "mtp0.embed").params == 0
    blocks = sorted({la.block for la in mtp.layers if la.block is not None})
    assert blocks == list(range(63))  # 61 layers, the MTP inputs, the MTP layer
    assert mtp.total_flop > base.total_flop * 1.01


def test_deepseek_v3_accepts_moe_arguments() -> None:
    info = get_model_info("deepseek_v3")
    args = info.arguments()
    assert args["mtp_layers"] == 0 and args["hidden"] == 7168 and "load_imbalance" in args
    with pytest.raises(ConfigError, match="mtp_layers"):
        build_model("deepseek_v3", batch_size=1, seq_len=64, mtp_layers=-1)


# ------------------------------------------------------------------------ attention windows


@settings(max_examples=60, deadline=None)
@given(
    seq=st.integers(1, 1 << 16),
    size=st.integers(1, 1 << 16),
    kind=st.sampled_from(list(WindowKind)),
)
def test_window_fraction_is_a_share_of_the_causal_half(
    seq: int, size: int, kind: WindowKind
) -> None:
    w = AttentionWindow(kind, size)
    f = w.pairs_fraction(seq)
    assert 0.0 < f <= 0.5
    if size >= seq:
        assert f == 0.5
    # a wider window never computes fewer pairs
    assert AttentionWindow(kind, size + 1).pairs_fraction(seq) >= f - 1e-15


def test_window_golden_fractions() -> None:
    assert AttentionWindow(WindowKind.SLIDING, 1024).pairs_fraction(4096) == pytest.approx(
        (4096 * 1024 - 1024**2 / 2) / 4096**2
    )
    # 3 chunks of 1000 and a remainder of 100 over 3100 positions
    assert AttentionWindow("chunked", 1000).pairs_fraction(3100) == pytest.approx(
        (3 * 1000**2 / 2 + 100**2 / 2) / 3100**2
    )


def test_window_refusals() -> None:
    with pytest.raises(ConfigError, match="window size"):
        AttentionWindow(WindowKind.SLIDING, 0)
    with pytest.raises(ConfigError, match="sliding_window"):
        build_model("gpt_oss_20b", batch_size=1, seq_len=64, sliding_window=0)
    net = Net(1, Precision.BF16)
    with pytest.raises(ConfigError, match="causal"):
        net.attention("a", 1, 256, 8, 8, 64, False, window=AttentionWindow("sliding", 64))
    cp = Net(1, Precision.BF16, RankLayout(cp=2))
    with pytest.raises(InfeasiblePlanError, match="cp=2"):
        cp.attention("a", 1, 256, 8, 8, 64, True, window=AttentionWindow("sliding", 64))
    # a window as long as the whole sequence is no window, context parallel or not
    cp.attention("a", 1, 256, 8, 8, 64, True, window=AttentionWindow("sliding", 512))


def test_tensor_parallel_shards_keep_the_whole_counts() -> None:
    whole = build_model("gpt_oss_20b", batch_size=1, seq_len=256)
    tp = build_model("gpt_oss_20b", batch_size=1, seq_len=256, tp=4, sequence_parallel=True)
    assert tp.total_params == whole.total_params
    att = next(la for la in tp.layers if la.name == "layer0.attention")
    assert att.params == 64 // 4  # sinks of this rank's heads
    ep = build_model("gpt_oss_20b", batch_size=1, seq_len=256, ep=8)
    fc1 = next(la for la in ep.layers if la.name == "layer0.experts_fc1")
    assert fc1.params == 4 * (2880 * 2 * 2880 + 2 * 2880)  # 32 / 8 experts with biases
