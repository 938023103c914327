"""Open-weight decoders that 2025-2026 machines are benchmarked with: gpt-oss, Llama 4, Grok-1
and DeepSeek-V3 with its multi-token-prediction module.

Each builder reproduces the parameter count of its published configuration exactly (tests in
``tests/workload/test_zoo_frontier.py``) from the blocks of :mod:`~perfmodel.workload.zoo.moe`
and :mod:`~perfmodel.workload.zoo.transformer` (routed experts ``moe_mlp``, the layer, the
embeddings and the head), adding what these models do differently:

* **gpt-oss** (OpenAI 2025, ``config.json`` of huggingface.co/openai/gpt-oss-120b and -20b; HF
  ``GptOssForCausalLM``): every layer a mixture of experts with biases on the router and on both
  expert matrices, attention with biases on Q/K/V/O and a learned *attention sink* per head (one
  logit added to each softmax denominator: ``heads`` parameters per layer, no FLOP that
  matters), and alternating attention: layer ``i`` even uses a sliding window of
  ``sliding_window`` keys, odd a full causal attention (HF ``layer_types``; Megatron-Bridge's
  gpt-oss bridge sets ``window_size = (sliding_window - 1, 0)``, ``window_attn_skip_freq = 2``).
  The clamped SwiGLU (``alpha 1.702, limit 7``) costs as the zoo's SwiGLU plus its clamps
  (:func:`_clamped_activation`: eager clamp and concatenation kernels under Megatron-Core). The
  experts'
  down-projection bias is weighted by the router probability, so no GEMM epilogue adds it: its
  own memory-bound kernels follow the grouped GEMM (:func:`_expert_bias`; Megatron-Core's eager
  FP32 ``_apply_bias`` moves 28 + 36 bytes per routed element).
* **Llama 4** (Meta 2025, ``config.json`` of huggingface.co/meta-llama/Llama-4-Scout-17B-16E and
  -Maverick-17B-128E, ``text_config``; HF ``Llama4TextModel``): a routed expert layer with one
  shared expert of the routed width (``Llama4TextMoe.shared_expert``) every
  ``moe_layer_step``-th layer (HF ``moe_layers = range(step - 1, layers, step)``), dense SwiGLU
  layers of ``ffn_hidden`` (``intermediate_size_mlp``) between them; rotary layers attend in
  chunks of ``attention_chunk`` positions, every ``nope_every``-th layer (HF ``no_rope_layers``)
  has no rotary embedding and attends to the whole causal context; Scout normalises queries and
  keys by their L2 norm (``use_qk_norm``; ``Llama4TextL2Norm`` has no weight).
* **Grok-1** (xAI 2024, github.com/xai-org/grok-1 @7050ed2 ``run.py`` and ``model.py``): RMSNorm
  before *and after* both the attention and the expert block (four per layer), 8 experts of
  gated-GELU width ``ffn_size(6144, 8) = 32768`` with 2 per token, word embedding tied to the
  output. The gated GELU costs as the zoo's SwiGLU; the attention-logit soft cap
  (``30 tanh(x / 30)``) runs inside the fused kernel and is not charged.
* **DeepSeek-V3** (``config.json`` of huggingface.co/deepseek-ai/DeepSeek-V3,
  ``num_nextn_predict_layers = 1``; DeepSeek-AI 2024, sec. 2.2): ``mtp_layers`` multi-token
  prediction modules after the main model, as Megatron-Core's ``MultiTokenPredictionLayer``
  trains them (Megatron-Bridge ``deepseek_v3`` recipes set ``mtp_num_layers = 1``): the next
  tokens' embedding (the main model's, shared), ``enorm`` and ``hnorm`` RMSNorms, the projection
  ``eh_proj`` of the concatenated ``2 h`` to ``h`` (no bias), one decoder layer like the main
  model's MoE layers, a final RMSNorm and the main model's output layer (shared) with its own
  cross-entropy. Shared weights are not counted again; the pipeline stage that holds the module
  keeps a copy of the word embedding synchronised with the first stage (Megatron-Core
  ``GPTModel`` builds the embedding on the MTP stage and all-reduces its gradient with the
  first), which the lowering charges through the tied-head rule
  (:func:`perfmodel.parallel.stage_memory.tied_embedding_params`).

Parameter counts are those of the trained model (what the optimizer holds): the HF checkpoint of
DeepSeek-V3 adds a duplicate of the embedding and of the head to its MTP layer (684.5B with
them). Active counts include the embedding and the head (the zoo's convention, as Mixtral's
12.9B); OpenAI's model card states gpt-oss's active parameters without the embedding (5.13B and
3.61B).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import perfmodel.workload.zoo.moe as _moe
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.workload._net import Net
from perfmodel.workload.kernels import Fusion, KernelIO, OpKernels
from perfmodel.workload.layers import CommPoint, ExpertRole, KernelClass
from perfmodel.workload.window import AttentionWindow, WindowKind
from perfmodel.workload.zoo._args import bound, table_signature
from perfmodel.workload.zoo.moe import MoeConfig, moe_mlp
from perfmodel.workload.zoo.transformer import (
    LayerParts,
    Section,
    TransformerConfig,
    _column_linear,
    block_norm,
    dense_mlp,
    layered_decoder,
    self_attention,
    transformer_layer,
)


def _last(net: Net, name: str) -> int:
    """Index of the last layer called ``name`` (the section just built)."""
    for i in range(len(net.layers) - 1, -1, -1):
        if net.layers[i].name == name:
            return i
    raise ValueError(f"no layer {name!r}")  # internal invariant


def _add_params(net: Net, name: str, extra: int) -> None:
    """Add ``extra`` parameters (biases, sinks) to the last layer called ``name``."""
    i = _last(net, name)
    net.layers[i] = net.layers[i].changed(params=net.layers[i].params + extra)


def _drop_params(net: Net, names: tuple[str, ...]) -> None:
    """Parameter-free copies of the last layers called ``names`` (a norm without weight)."""
    for i in range(len(net.layers) - 1, -1, -1):
        if net.layers[i].name in names:
            net.layers[i] = net.layers[i].changed(params=0)


def _window(size: int, kind: WindowKind, where: str) -> AttentionWindow:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"{where} must be an integer >= 1, got {size!r}", value=size, where=where)
    return AttentionWindow(kind, size)


#: Balanced routing without a capacity limit and fused attention: every builder's last
#: arguments.
_ROUTING_ARGS = {"load_imbalance": 1.0, "capacity_factor": 0.0, "flash_attention": True}
#: The model arguments of each builder in their order, with their defaults: gpt-oss-120b,
#: Llama 4 Scout (``expert_ffn_hidden`` is its ``intermediate_size``, ``ffn_hidden`` its
#: ``intermediate_size_mlp``) and Grok-1, from the configurations the module docstring names;
#: ``seq_len`` is the default sequence length of a training sample.
_GPT_OSS_ARGS = {
    "hidden": 2880, "layers": 36, "heads": 64, "kv_heads": 8, "head_dim": 64, "experts": 128,
    "top_k": 4, "expert_ffn_hidden": 2880, "sliding_window": 128, "seq_len": 4096,
    "vocab": 201088, **_ROUTING_ARGS,
}  # fmt: skip
_LLAMA4_ARGS = {
    "hidden": 5120, "layers": 48, "heads": 40, "kv_heads": 8, "head_dim": 128,
    "ffn_hidden": 16384, "experts": 16, "top_k": 1, "expert_ffn_hidden": 8192,
    "shared_experts": 1, "moe_layer_step": 1, "attention_chunk": 8192, "nope_every": 4,
    "qk_norm": True, "seq_len": 8192, "vocab": 202048, **_ROUTING_ARGS,
}  # fmt: skip
_GROK1_ARGS = {
    "hidden": 6144, "layers": 64, "heads": 48, "kv_heads": 8, "head_dim": 128, "experts": 8,
    "top_k": 2, "expert_ffn_hidden": 32768, "seq_len": 8192, "vocab": 131072, **_ROUTING_ARGS,
}  # fmt: skip


def _routed(net: Net, a: dict[str, Any], **fields: Any) -> MoeConfig:
    """The routed experts of model arguments ``a``, checked
    (:func:`~perfmodel.workload.zoo.moe.routed_experts`)."""
    names = ("experts", "top_k", "expert_ffn_hidden", "load_imbalance", "capacity_factor")
    return _moe.routed_experts(net, MoeConfig(**{k: a[k] for k in names}, **fields))


# ------------------------------------------------------------------------------- gpt-oss


def _gpt_oss_attention(
    net: Net, cfg: TransformerConfig, b: int, s: int, name: str, *, window: AttentionWindow | None
) -> None:
    """Biased grouped-query attention (optionally windowed) with one learned sink per head."""
    self_attention(net, cfg, b, s, name, window=window)
    sink = f"{name}.attention" if cfg.flash_attention else f"{name}.softmax"
    _add_params(net, sink, cfg.heads // net.tp)


#: The probability-weighted down-projection bias of Megatron-Core's ``TEGroupedMLP`` (Megatron-LM
#: 4415119, the commit Megatron-Bridge 26.04 pins, ``megatron/core/transformer/moe/experts.py``):
#: ``linear_fc2`` is built with ``skip_bias_add=True`` and ``_apply_bias`` adds the bias in eager
#: PyTorch after the grouped GEMM, ``torch.cat([t + b * p for t, b, p in zip(split(out),
#: biases, split(permuted_probs))]).to(out.dtype)`` (the fused op-fuser path needs
#: ``use_transformer_engine_op_fuser``, which the performance scripts turn off: Megatron-Bridge
#: 21d102f5 ``scripts/performance/utils/overrides.py`` ``_set_common_perf_overrides``).
#: ``permuted_probs`` are FP32
#: (:data:`~perfmodel.workload.zoo.moe.PROB_BYTES`), so ``b * p`` and the sum are FP32 tensors
#: of the routed rows: per element of the ``rows x h`` output the forward writes ``b * p``
#: (FP32), reads it with ``t`` and writes the FP32 sum, copies it in ``cat`` and casts it back;
#: the backward (autograd, PyTorch ``tools/autograd/derivatives.yaml``: ``to`` casts the
#: gradient to FP32, ``add`` casts it back for ``t``, ``mul`` multiplies by the other factor and
#: reduces to the broadcast shape for both ``b`` and ``p``) moves 36 bytes. The forward's ``mul``
#: and ``add`` and the backward's cast, two products and two reductions run once per local expert.
MEGATRON_EXPERT_BIAS_OPS = OpKernels(
    KernelClass.ELEMENTWISE,
    fwd=(
        KernelIO("bias_x_prob", write_f=1),
        KernelIO("add_bias", read_a=1, read_f=1, write_f=1),
        KernelIO("cat", read_f=1, write_f=1),
        KernelIO("to_act", read_f=1, write_a=1, cast=True),
    ),
    bwd=(
        KernelIO("grad_to_fp32", read_a=1, write_f=1, cast=True),
        KernelIO("grad_out_cast", read_f=1, write_a=1, cast=True),
        KernelIO("grad_bias_mul", read_f=1, write_f=1),
        KernelIO("grad_bias_sum", read_f=1),
        KernelIO("grad_prob_mul", read_f=1, write_f=1),
        KernelIO("grad_prob_sum", read_f=1),
    ),
    source="Megatron-LM 4415119 megatron/core/transformer/moe/experts.py TEGroupedMLP._apply_bias "
    "(eager, FP32 probabilities; op fuser off in Megatron-Bridge 21d102f5 scripts/performance/"
    "utils/overrides.py); PyTorch autograd derivatives of mul/add/cat/to",
)

#: The down-projection bias of an eager expert (HuggingFace ``GptOssExperts``: ``bmm(...) +
#: down_proj_bias[..., None, :]`` before the routing weights are applied): one add in the
#: activation dtype, and the bias gradient's reduction in backward.
EAGER_EXPERT_BIAS_OPS = OpKernels(
    KernelClass.ELEMENTWISE,
    fwd=(KernelIO("add_bias", read_a=1, write_a=1),),
    bwd=(KernelIO("grad_bias_sum", read_a=1),),
    source="HuggingFace transformers GptOssExperts.forward (training path): bias added after the "
    "down-projection bmm",
)


def _expert_bias(net: Net, name: str, rows: int, h: int, local: int, moe: MoeConfig) -> None:
    """The routed rows' down-projection bias as the stack adds it (Megatron-Core with TE:
    :data:`MEGATRON_EXPERT_BIAS_OPS`, per-expert launches; others: :data:`EAGER_EXPERT_BIAS_OPS`),
    placed right after ``{name}.experts_fc2`` as an expert layer (its rows are the routed
    rows the expert-parallel rank holds)."""
    te = net.kernels.fusion is Fusion.TE
    ops = MEGATRON_EXPERT_BIAS_OPS if te else EAGER_EXPERT_BIAS_OPS
    net.op_layer(f"{name}.experts_fc2_bias", ops, float(rows * h), output_shape=(rows, h))
    la = net.layers.pop()
    if te and local > 1:  # mul and add per expert forward; cast, 2 mul, 2 sums per expert backward
        la = la.changed(
            kernels=la.kernels + 2 * (local - 1), bwd_kernels=la.bwd_kernels + 5 * (local - 1)
        )
    la = la.changed(
        expert_role=ExpertRole.EXPERT,
        experts=moe.experts,
        top_k=moe.top_k,
        routing_groups=moe.routing_groups,
    )
    net.layers.insert(_last(net, f"{name}.experts_fc2") + 1, la)


def _clamped_activation(net: Net, name: str, rows: int, f: int) -> None:
    """The clamp of gpt-oss's expert activation input (``limit 7``: the gate half clamped
    above, the linear half on both sides) as the stack runs it, added to ``{name}.experts_swiglu``
    (so ``moe_act`` recomputation re-runs it) on the ``rows x 2 f`` fc1 output:

    * Megatron-Core with TE: ``weighted_bias_quick_geglu_impl`` (Megatron-LM 4415119
      ``megatron/core/fusions/fused_bias_geglu.py``; the bridge sets
      ``activation_func_clamp_value = 7.0``) clamps the two halves and ``torch.cat`` them in
      eager PyTorch before the fused weighted quick-GeGLU: forward, each element read and
      written by its clamp and again by the cat (4 elements); backward (autograd
      ``clamp_backward(grad, self, min, max)``, PyTorch ``tools/autograd/derivatives.yaml``)
      each clamp reads the gradient and its input and writes the gradient (3), and the two
      halves' gradients are concatenated into the fc1 output's (2). Both the fc1 output (kept by
      the clamps) and the clamped copy (kept by the fused activation) are saved: the copy is
      counted with ``experts_fc2``'s saved bytes, which ``moe_act``'s checkpoint of the whole
      activation frees;
    * eager (HuggingFace ``GptOssExperts``): the two clamps (2 forward, 3 backward, and the
      halves' gradients assembled, 2); the clamped halves are new tensors the eager
      activation reads instead of the fc1 output (no extra saved bytes counted);
    * ``torch.compile``: fused into the activation's kernel, nothing added.
    """
    fusion = net.kernels.fusion
    if fusion is Fusion.COMPILE:
        return
    te = fusion is Fusion.TE
    a, el = net.act_bytes, float(rows * 2 * f)
    fwd_el, fwd_k = (4.0, 3) if te else (2.0, 2)
    if te:
        i = _last(net, f"{name}.experts_fc2")
        la = net.layers[i]
        net.layers[i] = la.changed(activation_bytes=la.activation_bytes + el * a)
    i = _last(net, f"{name}.experts_swiglu")
    la = net.layers[i]
    bwd_k = la.kernels if la.bwd_kernels is None else la.bwd_kernels
    net.layers[i] = la.changed(
        fwd_bytes=la.fwd_bytes + fwd_el * el * a,
        bwd_bytes=la.bwd_bytes + 5.0 * el * a,
        kernels=la.kernels + fwd_k,
        bwd_kernels=bwd_k + 3,
    )


def _gpt_oss_experts(
    net: Net, cfg: TransformerConfig, b: int, s: int, name: str, *, moe: MoeConfig
) -> None:
    """:func:`~perfmodel.workload.zoo.moe.moe_mlp` with gpt-oss's biases: the router's (one per
    expert) and each expert's ``2 f`` (gate and up) and ``h`` (down) biases. The gate/up bias
    rides in the grouped GEMM's epilogue; the down bias is weighted by the router probability
    and added by its own kernels (:func:`_expert_bias`); the activation's input is clamped
    first (:func:`_clamped_activation`)."""
    moe_mlp(net, cfg, b, s, name, moe=moe)
    local = moe.experts // net.ep
    _add_params(net, f"{name}.router", moe.experts)
    _add_params(net, f"{name}.experts_fc1", local * 2 * moe.expert_ffn_hidden // net.etp)
    _add_params(net, f"{name}.experts_fc2", local * cfg.hidden)
    rows = int(net.layers[_last(net, f"{name}.experts_fc2")].output_shape[0])
    _clamped_activation(net, name, rows, moe.expert_ffn_hidden // net.etp)
    _expert_bias(net, name, rows, cfg.hidden, local, moe)


def gpt_oss(net: Net, **kwargs: Any) -> TransformerConfig:
    """gpt-oss (see the module docstring). Defaults are gpt-oss-120b (:data:`_GPT_OSS_ARGS`, with
    ``sliding_window=128``): 116,829,156,672 parameters, 5,711,982,912 active (4 of 128 experts;
    5,132,849,472 without the embedding).

    Parameters per layer: attention ``h (q + 2 kv d) + q h`` weights, ``q + 2 kv d + h`` biases
    and ``heads`` sinks (``q = heads d``); router ``h E + E``; experts ``E (3 h f + 2 f + h)``;
    two RMSNorms. Embedding and untied head ``vocab h`` each, final RMSNorm ``h``.
    """
    a = bound(gpt_oss, net, kwargs)
    cfg = _moe.decoder_config(net, a, ffn_hidden=a["expert_ffn_hidden"], bias=True)
    # Megatron-Bridge gpt_oss_bridge.py: load_balancing_type "none"
    m = _routed(net, a, aux_loss=False)
    window = _window(a["sliding_window"], WindowKind.SLIDING, "sliding_window")
    routed: Section = partial(_gpt_oss_experts, moe=m)

    def layer(i: int) -> LayerParts:
        return cfg, partial(_gpt_oss_attention, window=window if i % 2 == 0 else None), routed

    return layered_decoder(net, cfg, layer, tied=False)


# ------------------------------------------------------------------------------- Llama 4


def _l2_qk_attention(
    net: Net, cfg: TransformerConfig, b: int, s: int, name: str, *, window: AttentionWindow | None
) -> None:
    """Attention whose query/key norm (when ``cfg.qk_norm``) is a weightless L2 norm."""
    self_attention(net, cfg, b, s, name, window=window)
    if cfg.qk_norm:
        _drop_params(net, (f"{name}.q_norm", f"{name}.k_norm"))


def llama4(net: Net, **kwargs: Any) -> TransformerConfig:
    """Llama 4 text decoder (see the module docstring). Defaults are Llama 4 Scout
    (:data:`_LLAMA4_ARGS`: ``ffn_hidden=16384``, one shared expert, ``moe_layer_step=1``,
    ``attention_chunk=8192``, ``nope_every=4``, ``qk_norm=true``; 107,769,861,120 parameters,
    17,172,894,720 active); Maverick is ``experts=128, moe_layer_step=2, qk_norm=false``
    (400,711,848,960; 17,184,691,200 active).

    Layer ``i`` (from 0) routes its tokens when ``(i + 1) % moe_layer_step == 0``, else runs a
    dense SwiGLU of ``ffn_hidden``; it attends in chunks of ``attention_chunk`` unless
    ``(i + 1) % nope_every == 0`` (no rotary embedding, whole causal context).
    """
    a = bound(llama4, net, kwargs)
    cfg = _moe.decoder_config(
        net, a, ffn_hidden=a["ffn_hidden"], bias=False, qk_norm=bool(a["qk_norm"])
    )
    step = _moe._positive("moe_layer_step", a["moe_layer_step"])
    nope = _moe._positive("nope_every", a["nope_every"])
    m = _routed(net, a, shared_experts=a["shared_experts"])
    chunk = _window(a["attention_chunk"], WindowKind.CHUNKED, "attention_chunk")
    if m.shared_experts and m.expert_ffn_hidden % net.tp:
        raise InfeasiblePlanError(
            f"tp={net.tp} does not divide the shared expert's width {m.expert_ffn_hidden}",
            value=net.tp,
            where="tp",
        )
    routed: Section = partial(moe_mlp, moe=m)
    nope_cfg = replace(cfg, rope=False)

    def layer(i: int) -> LayerParts:
        rotary = (i + 1) % nope != 0
        attention: Section = partial(_l2_qk_attention, window=chunk if rotary else None)
        mlp = routed if (i + 1) % step == 0 else dense_mlp
        return (cfg if rotary else nope_cfg), attention, mlp

    return layered_decoder(net, cfg, layer, tied=False)


# -------------------------------------------------------------------------------- Grok-1


def _post_normed(section: Section, norm: str) -> Section:
    """``section`` followed by an RMSNorm of its output (Grok-1's sandwich norms)."""

    def run(net: Net, cfg: TransformerConfig, b: int, s: int, name: str) -> None:
        section(net, cfg, b, s, name)
        h = cfg.hidden
        block_norm(net, cfg, f"{name}.{norm}", (b, s, h), params=h, shard=net.seq_shard)

    return run


def grok1(net: Net, **kwargs: Any) -> TransformerConfig:
    """Grok-1 (see the module docstring; defaults :data:`_GROK1_ARGS`): 315,684,820,992 parameters
    (xAI's "314B"), 83,756,587,008 active (2 of 8 experts).

    Per layer: attention ``h (q + 2 kv d) + q h``, router ``h E``, experts ``3 E h f``, four
    RMSNorms ``h``; embedding ``vocab h`` (tied to the output), final RMSNorm ``h``.
    """
    a = bound(grok1, net, kwargs)
    cfg = _moe.decoder_config(net, a, ffn_hidden=a["expert_ffn_hidden"], bias=False)
    m = _routed(net, a)
    attention = _post_normed(self_attention, "post_attn_norm")
    routed = _post_normed(partial(moe_mlp, moe=m), "post_moe_norm")
    return layered_decoder(net, cfg, lambda i: (cfg, attention, routed), tied=True)


# --------------------------------------------------------------------- DeepSeek-V3 + MTP


def _mtp_module(
    net: Net,
    cfg: TransformerConfig,
    depth: int,
    *,
    attention: Section,
    mlp: Section,
) -> None:
    """One multi-token-prediction module (see the module docstring), depth ``depth`` (from 0).

    Layers: ``mtp<k>.embed`` (lookup in the shared word embedding: no parameters of its own),
    ``mtp<k>.enorm`` / ``hnorm`` (RMSNorm ``h`` each), ``mtp<k>.eh_proj`` (column-parallel
    ``2 h -> h`` on the concatenation), one decoder layer, ``mtp<k>.final_norm``,
    ``mtp<k>.lm_head`` (the shared output layer) and ``mtp<k>.loss``.
    """
    h = cfg.hidden
    b, s = net.batch_size, net.local_seq(cfg.seq_len)
    p = f"mtp{depth}"
    shard = net.seq_shard
    net.block = max(la.block for la in net.layers if la.block is not None)
    net.new_block()  # the module's inputs: a block of its own after the main model's
    el = b * s * h
    comm: tuple[CommPoint, ...] = ()
    if net.tp > 1:
        op = CollectiveOp.REDUCESCATTER if net.sp else CollectiveOp.ALLREDUCE
        comm = (net.comm(op, el),)
    net.embedding(f"{p}.embed", b, s, cfg.vocab, h, parallel=True, fwd_comm=comm)
    net.layers[-1] = net.layers[-1].changed(params=0)  # the main model's embedding
    block_norm(net, cfg, f"{p}.enorm", (b, s, h), params=h, shard=shard)
    block_norm(net, cfg, f"{p}.hnorm", (b, s, h), params=h, shard=shard)
    # column-parallel as Megatron-Core's eh_proj; the all-gather of its h/tp outputs back to
    # the hidden width (once per micro-batch, h elements per token) is not charged
    _column_linear(net, f"{p}.eh_proj", (b, s, 2 * h), h, bias=False, input_shard=shard)
    transformer_layer(net, cfg, b, s, f"{p}.layer", attention=attention, mlp=mlp)
    block_norm(net, cfg, f"{p}.final_norm", (b, s, h), params=h, shard=shard)
    _column_linear(net, f"{p}.lm_head", (b * s, h), cfg.vocab, bias=False)
    last = net.layers[-1]
    net.layers[-1] = last.changed(params=0, keep_16bit=True)
    loss_comm: tuple[CommPoint, ...] = ()
    if net.tp > 1:
        loss_comm = (net.comm(CollectiveOp.ALLREDUCE, 3 * b * s, element_bytes=4),)
    net.loss(f"{p}.loss", b * s, cfg.vocab // net.tp, fwd_comm=loss_comm)


def deepseek_v3(net: Net, *, mtp_layers: int = 0, **kwargs: Any) -> TransformerConfig:
    """DeepSeek-V3 (:func:`perfmodel.workload.zoo.moe.moe` with the zoo entry's shape) and
    ``mtp_layers`` multi-token-prediction modules (:func:`_mtp_module`; the published model and
    Megatron-Bridge's recipes have 1). Accepts every argument of
    :func:`~perfmodel.workload.zoo.moe.moe`.

    With ``mtp_layers=1`` the trained model has 682,636,472,320 parameters (671,026,404,352 +
    11,610,067,968: one MoE decoder layer, ``eh_proj`` ``2 h^2`` and three norms) and
    38,240,382,976 active.
    """
    depth = _moe._positive("mtp_layers", mtp_layers, 0)
    cfg = _moe.moe(net, **kwargs)
    if not depth:
        return cfg
    a = bound(_moe.moe, net, kwargs)
    # the MTP layer's routed experts: moe()'s (one MoE layer), checked by the same routed_experts
    m = _moe.routed_experts(net, _moe.moe_config(a))
    attention = _moe.latent_attention(cfg, **{k: a[k] for k in _moe.MLA_ARGS})
    mlp: Section = partial(moe_mlp, moe=m)
    for k in range(depth):
        _mtp_module(net, cfg, k, attention=attention, mlp=mlp)
    net.end_blocks()
    return cfg


table_signature(deepseek_v3, {"mtp_layers": 0, **_moe.MOE_DEFAULTS}, _moe.MOE_TYPES)
table_signature(gpt_oss, _GPT_OSS_ARGS)
table_signature(llama4, _LLAMA4_ARGS)
table_signature(grok1, _GROK1_ARGS)

__all__ = ["deepseek_v3", "gpt_oss", "grok1", "llama4"]
