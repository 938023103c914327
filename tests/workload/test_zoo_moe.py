"""Mixture-of-experts zoo models: exact total and active parameter counts against the reference
configurations, active FLOP (top_k experts per token), expert-role marks, bad input, and a MoE
model predicting on one GPU and under data/tensor/pipeline parallelism (experts replicated)."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.workload import ExpertRole, build_model


def _swiglu(h: int, f: int) -> int:
    return 3 * h * f


def _mixtral(h: int, n: int, heads: int, kv: int, f: int, e: int, k: int, v: int) -> tuple:
    """(total, active) by hand: GQA attention, router h x e, e SwiGLU experts, 2 RMSNorms per
    layer; embedding, final norm, untied head."""
    d = h // heads
    attn = h * (h + 2 * kv * d) + h * h
    common = attn + h * e + 2 * h
    ends = 2 * v * h + h
    return n * (common + e * _swiglu(h, f)) + ends, n * (common + k * _swiglu(h, f)) + ends


# config.json of huggingface.co/mistralai/Mixtral-8x7B-v0.1 and Mixtral-8x22B-v0.1
# (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# intermediate_size, num_local_experts, num_experts_per_tok, vocab_size)
MIXTRAL = {
    "mixtral_8x7b": ((4096, 32, 32, 8, 14336, 8, 2, 32000), 46_702_792_704, 12_879_925_248),
    "mixtral_8x22b": ((6144, 56, 48, 8, 16384, 8, 2, 32768), 140_630_071_296, 39_161_468_928),
}


@pytest.mark.parametrize("name", sorted(MIXTRAL))
def test_mixtral_total_and_active_counts(name: str) -> None:
    shape, total, active = MIXTRAL[name]
    assert _mixtral(*shape) == (total, active)
    w = build_model(name, batch_size=1, seq_len=64)
    assert w.total_params == total
    assert w.active_params_total == active
    assert w.is_moe


def test_deepseek_v3_counts() -> None:
    """config.json of huggingface.co/deepseek-ai/DeepSeek-V3: hidden 7168, 61 layers, 128 heads,
    q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128, dense intermediate
    18432 in the first 3 layers, 256 routed experts of 2048 + 1 shared, 8 per token, vocab
    129280, untied. The MTP module (about 14 B in the checkpoint) is not counted."""
    h, heads, d, r, dv, ql, kvl = 7168, 128, 128, 64, 128, 1536, 512
    attn = h * ql + ql + ql * heads * (d + r) + h * (kvl + r) + kvl + kvl * heads * (d + dv)
    attn += heads * dv * h
    assert attn == 187_107_328
    dense_layer = attn + 2 * h + _swiglu(h, 18432)
    expert = _swiglu(h, 2048)
    moe_common = attn + 2 * h + 256 * h + expert  # router + shared expert
    ends = 2 * 129280 * h + h
    total = 3 * dense_layer + 58 * (moe_common + 256 * expert) + ends
    active = 3 * dense_layer + 58 * (moe_common + 8 * expert) + ends
    assert (total, active) == (671_026_404_352, 37_552_282_624)
    w = build_model("deepseek_v3", batch_size=1, seq_len=64)
    assert w.total_params == total
    assert w.active_params_total == active
    assert w.buffers == 58 * 256  # expert score-correction biases: buffers, not trained
    moe_layers = {la.block for la in w.layers if la.experts}
    assert moe_layers == set(range(3, 61))


def test_active_flop_is_top_k_experts() -> None:
    b, s, h, f, e, k = 2, 64, 4096, 14336, 8, 2
    w = build_model("mixtral_8x7b", batch_size=b, seq_len=s, layers=1, vocab=1000)
    by = {la.name: la for la in w.layers}
    fc1, fc2 = by["layer0.experts_fc1"], by["layer0.experts_fc2"]
    assert fc1.fwd_flop == 2 * b * s * k * h * 2 * f  # routed rows x gate+up
    assert fc2.fwd_flop == 2 * b * s * k * f * h
    assert fc1.params == e * h * 2 * f and fc1.active_params == k * h * 2 * f
    assert (fc1.gemm.m, fc1.gemm.batch) == (b * s * k // e, e)
    assert (fc1.experts, fc1.top_k, fc1.expert_role) == (e, k, ExpertRole.EXPERT)
    assert by["layer0.router"].expert_role is ExpertRole.ROUTER
    assert by["layer0.router"].gemm.n == e
    assert by["layer0.permute"].expert_role is ExpertRole.DISPATCH
    assert by["layer0.unpermute"].expert_role is ExpertRole.COMBINE
    expert_flop = sum(la.total_flop for la in w.layers if la.expert_role is ExpertRole.EXPERT)
    assert w.all_experts_flop == pytest.approx(w.total_flop + expert_flop * (e / k - 1))


def test_generic_moe_layer_pattern_and_shared_experts() -> None:
    w = build_model(
        "moe",
        batch_size=1,
        hidden=256,
        layers=6,
        heads=4,
        kv_heads=2,
        ffn_hidden=1024,
        experts=16,
        top_k=4,
        expert_ffn_hidden=128,
        shared_experts=2,
        moe_layer_freq=2,
        first_dense_layers=1,
        seq_len=32,
        vocab=100,
    )
    assert sorted({la.block for la in w.layers if la.experts}) == [2, 4]  # i >= 1, i % 2 == 0
    shared = next(la for la in w.layers if la.name == "layer2.shared_fc1")
    assert shared.gemm.n == 2 * 2 * 128 and shared.experts == 0  # dense, every token
    assert next(la for la in w.layers if la.name == "layer1.fc1").gemm.n == 2 * 1024


@pytest.mark.parametrize(
    ("kw", "where"),
    [
        ({"top_k": 9}, "top_k"),
        ({"experts": 0}, "experts"),
        ({"moe_layer_freq": 0}, "moe_layer_freq"),
        ({"expert_ffn_hidden": 100, "tp": 8}, "tp"),
        ({"kv_lora_rank": 64, "flash_attention": False}, "flash_attention"),
    ],
)
def test_bad_moe_arguments(kw: dict, where: str) -> None:
    tp = kw.pop("tp", 1)
    with pytest.raises(ConfigError) as info:
        build_model("moe", batch_size=1, seq_len=32, layers=1, tp=tp, **kw)
    assert info.value.where == where


def test_tensor_parallel_shards_experts_and_keeps_whole_model_counts() -> None:
    w = build_model("mixtral_8x7b", batch_size=1, seq_len=64, tp=2, sequence_parallel=True)
    assert w.total_params == 46_702_792_704 and w.active_params_total == 12_879_925_248
    fc1 = next(la for la in w.layers if la.name == "layer0.experts_fc1")
    assert fc1.params == 8 * 4096 * 14336  # 2 x 14336 / 2 columns per expert
    permute = next(la for la in w.layers if la.name == "layer0.permute")
    assert permute.fwd_comm and permute.fwd_comm[0].message_bytes == 64 * 4096 * 4  # fp32 acts


def test_model_show_prints_total_and_active(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "show", "mixtral-8x7b", "--model-arg", "seq_len=64"]) == 0
    out = capsys.readouterr().out
    assert "46.7 B parameters in total, 12.9 B active per token" in out


_SMALL = {
    "hidden": 256,
    "layers": 4,
    "heads": 4,
    "kv_heads": 4,
    "ffn_hidden": 512,
    "experts": 4,
    "top_k": 2,
    "seq_len": 128,
    "vocab": 1000,
}


@pytest.mark.parametrize(
    "plan",
    [
        {"gpus": 1},
        {"gpus": 4},
        {"gpus": 4, "tp": 2, "sequence_parallel": True},
        {"gpus": 4, "pp": 2, "microbatch": 1},
    ],
)
def test_moe_predicts_with_replicated_experts(plan: dict) -> None:
    sc = Scenario(
        system="dgx-h100",
        model="moe",
        model_args=_SMALL,
        precision="bf16",
        optimizer="adam",
        global_batch=8,
        fidelity="analytic",
        **plan,
    )
    rep = predict(sc, baseline=False)
    w = build_model("moe", batch_size=8, precision="bf16", **_SMALL)
    # model FLOP/s count the active FLOP: top_k experts per token, never all of them (all
    # experts would be 1.7x more here); rel 1e-3: with tp the lowering counts the per-rank
    # FLOP of tp-replicated layers (norms, router) tp times, as for dense models
    done = rep.model_flops_per_gpu_per_s * rep.iteration_time_s * rep.num_gpus
    assert done == pytest.approx(w.total_flop, rel=1e-3)
    assert w.all_experts_flop > 1.6 * w.total_flop


# config.json of huggingface.co/Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B (hidden_size,
# num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, num_experts,
# num_experts_per_tok, moe_intermediate_size; vocab 151936, untied, q/k RMSNorm, every layer MoE)
QWEN3 = {
    "qwen3_30b_a3b": ((2048, 48, 32, 4, 128, 128, 8, 768), 30_532_122_624, 3_353_032_704),
    "qwen3_235b_a22b": ((4096, 94, 64, 4, 128, 128, 8, 1536), 235_093_634_560, 22_190_763_520),
}


@pytest.mark.parametrize("name", sorted(QWEN3))
def test_qwen3_moe_counts(name: str) -> None:
    (h, n, heads, kv, d, e, k, f), total, active = QWEN3[name]
    attn = h * (heads * d + 2 * kv * d) + heads * d * h + 2 * d  # q/k norms: d weights each
    common = attn + 2 * h + e * h
    ends = 2 * 151936 * h + h
    assert n * (common + e * _swiglu(h, f)) + ends == total
    assert n * (common + k * _swiglu(h, f)) + ends == active
    w = build_model(name, batch_size=1, seq_len=64)
    assert (w.total_params, w.active_params_total) == (total, active)
    q_norm = next(la for la in w.layers if la.name == "layer0.q_norm")
    assert q_norm.params == d and q_norm.fwd_bytes > 0


def test_megatron_core_weights_rows_in_the_activation_not_the_unpermute() -> None:
    """Megatron-Core (Transformer Engine kernels) multiplies each routed row by its probability
    in the experts' activation, so the un-permutation is a plain scatter-add that saves nothing
    and the activation keeps the FP32 probabilities; the eager/HF form weights the sum in the
    un-permutation, which saves the expert outputs (rows x h x 2 B) for the probabilities'
    gradient. Hand count: b s = 64 tokens, top_k = 2 -> 128 routed rows, h = 256, f = 512."""
    from perfmodel.workload.kernels import Fusion, KernelRecipe
    from perfmodel.workload.zoo.moe import PROB_BYTES

    rows, h, f = 64 * 2, 256, 512
    kw = dict(batch_size=1, seq_len=64, hidden=h, layers=1, heads=4, kv_heads=2,
              ffn_hidden=f, experts=8, top_k=2, vocab=1000, precision="bf16")  # fmt: skip
    eager = {la.name: la for la in build_model("moe", **kw).layers}
    te = {
        la.name: la
        for la in build_model("moe", kernels=KernelRecipe(fusion=Fusion.TE), **kw).layers
    }
    assert eager["layer0.unpermute"].activation_bytes == rows * h * 2
    assert te["layer0.unpermute"].activation_bytes == 0
    assert eager["layer0.experts_swiglu"].activation_bytes == 2 * rows * f * 2
    assert te["layer0.experts_swiglu"].activation_bytes == 2 * rows * f * 2 + PROB_BYTES * rows
    assert te["layer0.unpermute"].fwd_flop == 0  # no weighting left in the scatter


@pytest.mark.parametrize(
    ("software", "dispatcher", "precision", "ep", "sort", "pad"),
    [
        ("megatron-core", "alltoall", "fp8", 8, True, True),  # regrouped and padded
        ("megatron-core", "alltoall", "bf16", 8, True, False),  # no quantized GEMM: no pad
        ("megatron-core", "alltoall", "fp8", 1, False, True),  # one rank: nothing to regroup
        ("megatron-core", "hybridep", "fp8", 8, False, False),  # Hybrid-EP pads in its permute
        ("megatron-core", "deepep", "fp8", 8, False, False),  # DeepEP's permute aligns
        ("megatron-core", "allgather", "fp8", 8, False, True),
        ("torchtitan", "alltoall", "fp8", 8, False, False),  # not Megatron-Core's dispatcher
    ],
)
def test_megatron_core_copies_routed_rows_around_the_experts(
    software: str, dispatcher: str, precision: str, ep: int, sort: bool, pad: bool
) -> None:
    """Megatron-Core 4415119: the all-to-all dispatcher regroups the received rows by local
    expert (``sort_chunks_by_idxs``) and back; ``TEGroupedMLP`` pads each expert's rows for the
    FP8 GEMMs and unpads (``Fp8Padding``/``Fp8Unpadding``) unless Hybrid-EP or DeepEP aligned
    them. Each is a copy of the routed rows: rows x hidden x 2 B read and written in forward,
    their gradient's in backward (the ``permute`` layer's bytes)."""
    from perfmodel.api import resolve
    from perfmodel.pipeline.lower import step_workload

    args = {"hidden": 512, "layers": 2, "heads": 8, "kv_heads": 2, "ffn_hidden": 256,
            "experts": 16, "top_k": 4, "seq_len": 1024, "vocab": 4096}  # fmt: skip
    sc = Scenario(system="dgx-h100", nodes=1, gpus=8, model="moe", model_args=args,
                  precision=precision, global_batch=8, ep=ep, moe_dispatcher=dispatcher,
                  software=software, fidelity="analytic")  # fmt: skip
    r = resolve(sc)
    w, _ = step_workload(sc, r, None)
    names = [la.name.split(".")[-1] for la in w.layers]
    assert ("sort_chunks" in names, "unsort_chunks" in names) == (sort, sort)
    assert ("quant_pad" in names, "quant_unpad" in names) == (pad, pad)
    permute = next(la for la in w.layers if la.name.endswith(".permute"))
    for la in w.layers:
        if la.name.split(".")[-1] in ("sort_chunks", "unsort_chunks", "quant_pad", "quant_unpad"):
            assert la.fwd_bytes == permute.fwd_bytes == 2 * permute.output_shape[0] * 512 * 2
            assert la.bwd_bytes == la.fwd_bytes
            assert la.activation_bytes == 0
    order = [n for n in names[: names.index("experts_fc1") + 1] if n != "fp8_cast"]
    if sort and pad:  # regrouped after the dispatch, padded before the first grouped GEMM
        assert order[-3:] == ["sort_chunks", "quant_pad", "experts_fc1"]


@pytest.mark.parametrize(
    ("software", "dispatcher", "aux_loss", "aux", "pre"),
    [
        ("megatron-core", "alltoall", True, True, True),
        ("megatron-core", "alltoall", False, False, True),  # gpt-oss: no load-balancing loss
        ("megatron-core", "hybridep", True, True, False),  # Hybrid-EP preprocesses in its kernel
        ("torchtitan", "alltoall", True, False, False),  # not Megatron-Core's router
    ],
)
def test_megatron_core_router_and_dispatcher_bookkeeping(
    software: str, dispatcher: str, aux_loss: bool, aux: bool, pre: bool
) -> None:
    """Megatron-LM 4415119 with the fused router: the load-balancing loss launches 5 kernels in
    forward and 5 in backward beside the router (scores, tokens per expert, the fused loss, the
    logging tracker; the loss scaler, the two fused backwards, the logits' gradient sum); the
    all-to-all dispatcher's preprocess launches 7 reductions and 5 copies to the host before its
    sync and all-gathers the int64 token counts over the group (ep x experts x 8 B), and sends
    each routed row's FP32 probability in an all-to-all of its own (rows x 4 B)."""
    from perfmodel.api import resolve
    from perfmodel.ops import CollectiveOp
    from perfmodel.pipeline.lower import step_workload

    ep = 8
    args = {"hidden": 512, "layers": 2, "heads": 8, "kv_heads": 2, "ffn_hidden": 256,
            "experts": 16, "top_k": 4, "seq_len": 1024, "vocab": 4096,
            "aux_loss": aux_loss}  # fmt: skip
    sc = Scenario(system="dgx-h100", nodes=1, gpus=8, model="moe", model_args=args,
                  precision="bf16", global_batch=8, ep=ep, moe_dispatcher=dispatcher,
                  software=software, fidelity="analytic")  # fmt: skip
    w, _ = step_workload(sc, resolve(sc), None)
    by = {la.name: la for la in w.layers}
    assert ("layer0.router_aux_loss" in by) is aux
    assert ("layer0.dispatch_preprocess" in by) is pre
    names = [la.name for la in w.layers]
    if aux:
        la = by["layer0.router_aux_loss"]
        assert (la.kernels, la.bwd_kernels) == (5, 5)
        assert la.expert_role is ExpertRole.ROUTER and la.params == 0
        el = 1024 * 16  # the local tokens' scores
        assert la.fwd_bytes == pytest.approx(el * (2 + 5 + 1 + 4))  # bf16 logits in, FP32 out
        assert names.index("layer0.router_aux_loss") == names.index("layer0.router_probs") + 1
    dispatch = by["layer0.permute"]
    if pre:
        la = by["layer0.dispatch_preprocess"]
        assert (la.kernels, la.bwd_kernels) == (12, 0)
        (counts,) = la.fwd_comm
        assert (counts.op, counts.group, counts.message_bytes) == (
            CollectiveOp.ALLGATHER,
            "ep",
            ep * 16 * 8,
        )
        assert names.index("layer0.dispatch_preprocess") < names.index("layer0.permute")
        rows, probs = dispatch.fwd_comm
        assert probs.op is rows.op is CollectiveOp.ALLTOALL
        assert probs.message_bytes == dispatch.output_shape[0] * 4
        assert rows.message_bytes == dispatch.output_shape[0] * 512 * 2
        (back,) = by["layer0.unpermute"].fwd_comm  # the combine returns the rows alone
        assert back == rows
    else:
        assert len(dispatch.fwd_comm) == 1


def test_routing_sampling_load_hand_counted_and_monotone() -> None:
    """The busiest rank's load under uniform top-k routing: by hand for 8 experts, top-2, 4 ranks
    of 2 experts and 512 routed rows per rank (1,024 tokens): per token the rank's hits are
    hypergeometric, mean 1/2, variance 2 (1/4)(3/4)(6/7) = 9/28; sigma = sqrt(1024 x 9/28);
    Blom's E[max of 4] = Phi^-1(3.625/4.25) and the fixed total's sqrt(4/3)."""
    from statistics import NormalDist

    from perfmodel.workload.zoo.moe import rank_hit_moments, routing_sampling_load

    assert rank_hit_moments(8, 2, 4) == pytest.approx((0.5, 9 / 28))
    sigma = (1024 * 9 / 28) ** 0.5
    want = 1 + sigma / 512 * NormalDist().inv_cdf(3.625 / 4.25) * (4 / 3) ** 0.5
    assert routing_sampling_load(8, 2, 4, 512) == pytest.approx(want)
    # one rank, no rows: nothing to wait for; the load falls with the rows (sqrt) and grows
    # with the ranks
    assert routing_sampling_load(8, 2, 1, 512) == 1.0 == routing_sampling_load(8, 2, 4, 0)
    loads = [routing_sampling_load(128, 8, 16, r) for r in (1024, 4096, 16384, 65536)]
    assert all(a > b > 1 for a, b in itertools.pairwise(loads))
    excess = [x - 1 for x in loads]
    assert excess[0] / excess[1] == pytest.approx(2.0)  # 4x the rows: half the excess
    assert routing_sampling_load(128, 8, 32, 4096) > routing_sampling_load(128, 8, 8, 4096)
    # every expert on its own rank and top_k = experts: every token hits every rank
    assert routing_sampling_load(8, 8, 8, 512) == 1.0


def test_routing_sampling_load_matches_a_simulated_router() -> None:
    """A Monte Carlo of Megatron-Core's forced-balance router (i.i.d. normal logits, top-k;
    group-limited: the top groups by their two best scores, DeepSeek-V3's rule) against the
    closed form: the expected busiest rank within 1.5% of its excess over the mean."""
    import numpy as np

    from perfmodel.workload.zoo.moe import routing_sampling_load

    rng = np.random.default_rng(7)

    def simulate(experts: int, top_k: int, ranks: int, tokens: int, groups=(0, 0)) -> float:
        out = []
        for _ in range(300):
            logits = rng.standard_normal((tokens, experts))
            if groups[0]:
                g, picked = groups
                per = logits.reshape(tokens, g, experts // g)
                score = np.sort(per, axis=2)[:, :, -2:].sum(2)
                top = np.argsort(-score, axis=1)[:, :picked]
                mask = np.full((tokens, g), -np.inf)
                np.put_along_axis(mask, top, 0.0, axis=1)
                logits = (per + mask[:, :, None]).reshape(tokens, experts)
            chosen = np.argpartition(-logits, top_k, axis=1)[:, :top_k]
            counts = np.bincount((chosen // (experts // ranks)).ravel(), minlength=ranks)
            out.append(counts.max() / counts.mean())
        return float(np.mean(out))

    for experts, top_k, ranks, tokens, groups in (
        (16, 4, 4, 2048, (0, 0)),
        (32, 8, 8, 1024, (4, 2)),
    ):
        mean_rows = tokens * top_k / ranks
        model = routing_sampling_load(experts, top_k, ranks, mean_rows, groups)
        sim = simulate(experts, top_k, ranks, tokens, groups)
        assert model - 1 == pytest.approx(sim - 1, rel=0.15)
