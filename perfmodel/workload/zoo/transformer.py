"""Transformer models of the zoo: GPT (Megatron layout), GPT-2, BERT, ViT and Llama-style decoders.

One transformer layer is one block. With ``tp > 1`` the layers are Megatron-LM shards (Shoeybi et
al. 2019): QKV and the first MLP linear are column-parallel, the attention output projection and
the second MLP linear row-parallel. Without sequence parallelism the row-parallel layers all-reduce
their output in forward (``g``) and the column-parallel layers all-reduce their input gradient in
backward (``f``). With sequence parallelism (Korthikanti et al. 2022) those become an all-gather
before the column-parallel layer (reduce-scatter in backward) and a reduce-scatter after the
row-parallel layer (all-gather in backward), and norms/dropouts hold ``1/tp`` of the sequence.

Activation accounting per layer reproduces Korthikanti et al. 2022: ``s b h (34 + 5 a s / h)``
bytes at 16-bit without parallelism, ``s b h (10 + 24/t + 5 a s/(h t))`` with tensor parallelism
and ``s b h (34/t + 5 a s/(h t))`` with sequence parallelism (unfused attention, dropout on).
Fused attention (``flash_attention=True``) removes the ``5 a s / h`` term.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfmodel._enum import parse_enum, snake, squash
from perfmodel._ints import divisors
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.workload._net import Net, Shape, numel
from perfmodel.workload.kernels import (
    APEX_MIXED_RMS_NORM,
    FLASH_ATTN_ROTARY,
    OPS,
    Fusion,
    op_kernels,
    repeat_kv_kernels,
)
from perfmodel.workload.layers import CommPoint, GemmShape, KernelClass, LayerCost, LayerKind
from perfmodel.workload.window import AttentionWindow
from perfmodel.workload.zoo._args import bound, variant_signature


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a transformer stack (after argument validation)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    seq_len: int
    vocab: int
    causal: bool = True
    pre_norm: bool = True
    rms_norm: bool = False
    gated_mlp: bool = False  # SwiGLU (Shazeer 2020): gate and up projections, silu(gate) * up
    squared_relu: bool = False  # ungated MLP with relu(x)^2 (So et al. 2021, Nemotron-4)
    bias: bool = True
    dropout: bool = True
    flash_attention: bool = False
    head_size: int | None = None
    """Channels per attention head when ``heads x head_size`` differs from ``hidden`` (Qwen3,
    Megatron ``--kv-channels``); ``None``: ``hidden // heads``."""
    qk_norm: bool = False
    """Norm of each query and key head over its ``head_dim`` channels before attention (Qwen3,
    OLMo 2; Megatron ``--qk-layernorm``): ``head_dim`` weights each (``2 head_dim`` for
    LayerNorm)."""
    attn_bias: bool | None = None
    """Biases on the attention's QKV and output projections when they differ from ``bias``
    (InternLM-7B: ``MHA.Wqkv`` and ``out_proj`` with biases, the MLP without, InternLM
    ``fa7337b`` ``internlm/model/multi_head_attention.py`` lines 78-97 and
    ``modeling_internlm.py`` ``bias=False`` for ``FeedForward``); ``None``: ``bias``."""
    rope: bool = False
    """Rotary position embedding (Su et al. 2021) applied to the queries and keys of every
    layer: memory-bound kernels of their own (:data:`perfmodel.workload.kernels.OPS` ``rope``)."""

    @property
    def head_dim(self) -> int:
        """Channels per attention head (Megatron ``kv_channels``)."""
        return self.head_size if self.head_size is not None else self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """Width of the query projection and of the attention output: ``heads x head_dim``."""
        return self.heads * self.head_dim


def check_config(cfg: TransformerConfig, tp: int) -> None:
    """Raise :class:`ConfigError` naming the argument for shapes Megatron cannot shard
    (:class:`InfeasiblePlanError`, a ConfigError, when the tensor-parallel degree is the problem)."""
    for name in ("hidden", "layers", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab"):
        v = getattr(cfg, name)
        if int(v) < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v}", value=v, where=name)
    if cfg.head_size is not None and int(cfg.head_size) < 1:
        raise ConfigError(
            f"head_dim must be a positive integer, got {cfg.head_size}",
            value=cfg.head_size,
            where="head_dim",
        )
    if cfg.head_size is None and cfg.hidden % cfg.heads:
        raise ConfigError(
            f"heads={cfg.heads} does not divide hidden={cfg.hidden}", value=cfg.heads, where="heads"
        )
    if cfg.heads % cfg.kv_heads:
        raise ConfigError(
            f"kv_heads={cfg.kv_heads} does not divide heads={cfg.heads}",
            value=cfg.kv_heads,
            where="kv_heads",
        )
    for name in ("heads", "kv_heads", "ffn_hidden"):
        size = int(getattr(cfg, name))
        if size % tp:
            fits = divisors(size)
            raise InfeasiblePlanError(
                f"tp={tp} does not divide {name}={size}; tp values that fit: {fits}",
                value=tp,
                where="tp",
            )


def rotary_decoder_config(net: Net, **fields: Any) -> TransformerConfig:
    """The shape today's decoders share, Llama's (Touvron et al. 2023): pre-norm RMSNorm, gated
    (SwiGLU) MLP, rotary positions, no dropout; with ``fields`` (sizes, ``bias``, ...), checked
    against the rank's tensor parallelism (:func:`check_config`). The configuration of
    :func:`perfmodel.workload.zoo.moe.moe` and the :mod:`~perfmodel.workload.zoo.frontier`
    builders."""
    cfg = TransformerConfig(rms_norm=True, gated_mlp=True, dropout=False, rope=True, **fields)
    check_config(cfg, net.tp)
    return cfg


def block_norm(
    net: Net,
    cfg: TransformerConfig,
    name: str,
    x: Shape,
    *,
    params: int,
    shard: int = 1,
    accumulate: bool = False,
) -> None:
    """The norm of a transformer layer (and the final norm) as the stack runs it.

    LayerNorm is one native kernel in every stack (``native_layer_norm``; TE's and inductor's
    are the same traffic): :meth:`Net.norm`. RMSNorm in PyTorch eager is the written-out
    ``x * rsqrt(x.pow(2).mean(-1) + eps)`` of torchtitan's ``RMSNorm`` (eight kernels forward,
    fourteen backward, :data:`perfmodel.workload.kernels.OPS` ``rms_norm``); compiled or under
    Transformer Engine it is one fused kernel like LayerNorm; a recipe with
    ``apex_rms_norm`` runs InternLM's July 2023 norm
    (:data:`~perfmodel.workload.kernels.APEX_MIXED_RMS_NORM`). ``accumulate``: the norm's input
    also feeds the residual skip, whose gradient is summed with the norm's (one add kernel,
    ``3 el`` elements).
    """
    apex = cfg.rms_norm and net.kernels.apex_rms_norm
    if not (cfg.rms_norm and net.kernels.fusion is Fusion.EAGER) and not apex:
        net.norm(name, x, params=params, shard=shard, rms=cfg.rms_norm, accumulate=accumulate)
        return
    el = numel(x) / shard
    a = net.act_bytes
    net.op_layer(
        name,
        APEX_MIXED_RMS_NORM if apex else OPS["rms_norm"][Fusion.EAGER],
        el,
        output_shape=tuple(x),
        flop=(4.0 * el, 8.0 * el),
        saved_bytes=el * a,
        kind=LayerKind.NORM,
        params=params,
        extra_bwd_bytes=3.0 * el * a if accumulate else 0.0,
        extra_bwd_kernels=1 if accumulate else 0,
    )


def _col_comms(net: Net, el: float) -> tuple[tuple[CommPoint, ...], tuple[CommPoint, ...]]:
    """Collectives around a column-parallel linear whose (full) input has ``el`` elements."""
    if net.tp == 1:
        return (), ()
    if net.sp:
        return (net.comm(CollectiveOp.ALLGATHER, el),), (net.comm(CollectiveOp.REDUCESCATTER, el),)
    return (), (net.comm(CollectiveOp.ALLREDUCE, el),)


def _row_comms(net: Net, el: float) -> tuple[tuple[CommPoint, ...], tuple[CommPoint, ...]]:
    """Collectives after a row-parallel linear whose (full) output has ``el`` elements."""
    if net.tp == 1:
        return (), ()
    if net.sp:
        return (net.comm(CollectiveOp.REDUCESCATTER, el),), (net.comm(CollectiveOp.ALLGATHER, el),)
    return (net.comm(CollectiveOp.ALLREDUCE, el),), ()


def _column_linear(
    net: Net,
    name: str,
    x: Shape,
    out: int,
    *,
    bias: bool,
    input_shard: int = 1,
) -> Shape:
    """Column-parallel linear (with the collectives on its full input ``x``).

    Its input is a norm's output (FP32 under autocast), hence ``casts_input``."""
    fc, bc = _col_comms(net, numel(x))
    return net.linear(
        name,
        x,
        out,
        bias=bias,
        parallel="column",
        fwd_comm=fc,
        bwd_comm=bc,
        input_shard=input_shard,
        casts_input=True,
    )


def _row_linear(net: Net, name: str, x: Shape, out: int, *, bias: bool) -> Shape:
    """Row-parallel linear (with the collectives on its full ``(..., out)`` output)."""
    fr, br = _row_comms(net, numel(x[:-1]) * out)
    return net.linear(name, x, out, bias=bias, parallel="row", fwd_comm=fr, bwd_comm=br)


def _stack(net: Net, cfg: TransformerConfig, b: int, s: int) -> None:
    """``cfg.layers`` transformer layers, one block each; later layers belong to no block.

    Layer ``i >= 2`` is a copy of layer 1 renamed and re-indexed: ``transformer_layer`` depends
    on the network only through ``tp``, sequence parallelism and whether a weight layer came
    before (true from layer 1 on), so the copy is the layer it would build. The copies are
    kept as layer 1 and a count (:meth:`Net.repeat_block`; the workload's layers are then a
    :class:`~perfmodel.workload.layers.StackedLayers`, which makes a copy when it is read), so
    a 96-layer GPT-3 builds in the time of two layers and its readers can cost one block.
    Where a weight layer came before layer 0 too (an embedding: every zoo decoder and
    encoder), layer 1 is layer 0's copy by the same argument (:meth:`Net.copy_block`), and only
    layer 0 is built.
    """
    copy_first = net.after_weights  # layer 1 is layer 0's copy
    start, buffers = len(net.layers), net.buffers
    for i in range(min(cfg.layers, 2)):
        first, first_buffers = start, buffers
        start, buffers = len(net.layers), net.buffers
        if i == 1 and copy_first:
            net.copy_block(first, first_buffers, "layer1")
        else:
            transformer_layer(net, cfg, b, s, f"layer{i}")
    if cfg.layers > 2:
        net.repeat_block(start, cfg.layers - 2, 2)
        net.buffers += (net.buffers - buffers) * (cfg.layers - 2)
    net.end_blocks()


def _check_positions(seq_len: int, max_positions: int) -> None:
    """ConfigError when the sequence is longer than the position table."""
    if seq_len > max_positions:
        raise ConfigError(
            f"seq_len={seq_len} exceeds max_positions={max_positions}",
            value=seq_len,
            where="seq_len",
        )


#: A section of a transformer layer (the attention or the MLP between its norm and its residual
#: add): ``section(net, cfg, b, s, name)`` appends its layers on a ``(b, s, hidden)`` input.
Section = Callable[[Net, TransformerConfig, int, int, str], None]


def self_attention(
    net: Net,
    cfg: TransformerConfig,
    b: int,
    s: int,
    name: str,
    *,
    window: AttentionWindow | None = None,
) -> None:
    """Multi-head (grouped-query when ``kv_heads < heads``) self-attention: fused QKV
    projection, attention (fused or unfused), output projection.

    ``window``: a sliding-window or chunked causal attention
    (:class:`~perfmodel.workload.window.AttentionWindow`, :meth:`Net.attention`) for the fused
    kernel; the unfused path computes and masks the whole ``s x s`` score matrix, as eager
    attention with a mask does."""
    h, tp = cfg.hidden, net.tp
    d = cfg.head_dim
    heads_l, kv_l = cfg.heads // tp, cfg.kv_heads // tp
    a = net.act_bytes
    x: Shape = (b, s, h)
    attn_bias = cfg.bias if cfg.attn_bias is None else cfg.attn_bias
    _column_linear(
        net,
        f"{name}.qkv",
        x,
        cfg.q_width + 2 * cfg.kv_heads * d,
        bias=attn_bias,
        input_shard=net.seq_shard,
    )
    if cfg.qk_norm:  # on the full sequence (after the sequence-parallel all-gather)
        for nm, n_heads in (("q_norm", heads_l), ("k_norm", kv_l)):
            net.norm(
                f"{name}.{nm}",
                (b, s * n_heads, d),
                params=d if cfg.rms_norm else 2 * d,
                rms=cfg.rms_norm,
            )
    fusion = net.kernels.fusion
    if cfg.rope:  # on the queries and keys of this rank (after any all-gather)
        rope = FLASH_ATTN_ROTARY if net.kernels.fused_rope else op_kernels("rope", fusion)
        assert rope is not None
        qk_el = float(b * s * (heads_l + kv_l) * d)
        net.op_layer(f"{name}.rope", rope, qk_el, output_shape=(b, s, heads_l, d),
                     flop=(6.0 * qk_el, 6.0 * qk_el), tensors=2)  # fmt: skip
    sdpa = cfg.flash_attention and fusion is not Fusion.TE  # PyTorch SDPA (eager, compile)
    if sdpa and kv_l < heads_l:  # repeat_kv materialises the grouped keys and values
        kv_el = float(2 * b * s * kv_l * d)
        net.op_layer(f"{name}.repeat_kv", repeat_kv_kernels(heads_l // kv_l), kv_el,
                     output_shape=(b, s, heads_l, d), tensors=2)  # fmt: skip
    if cfg.flash_attention:
        net.attention(f"{name}.attention", b, s, heads_l, kv_l, d, cfg.causal, window=window)
        copy = op_kernels("attn_out_copy", fusion)
        if sdpa and copy is not None:
            net.op_layer(f"{name}.attn_out_copy", copy, float(b * s * heads_l * d),
                         output_shape=(b, s, heads_l * d))  # fmt: skip
    else:
        q_el = b * s * heads_l * d
        kv_el = b * s * kv_l * d
        scores = (b * heads_l, s, s)
        net.matmul(f"{name}.scores", b * heads_l, s, s, d, saved_bytes=(q_el + kv_el) * a)
        net.softmax(f"{name}.softmax", scores, recomputable=True)
        if cfg.dropout:
            net.dropout(f"{name}.attn_dropout", scores, recomputable=True)
        net.matmul(
            f"{name}.context",
            b * heads_l,
            s,
            d,
            s,
            saved_bytes=(b * heads_l * s * s + kv_el) * a,
            recomputable_bytes=float(b * heads_l * s * s * a),
        )
    _row_linear(net, f"{name}.attn_out", (b, s, heads_l * d * tp), h, bias=attn_bias)


def dense_mlp(
    net: Net,
    cfg: TransformerConfig,
    b: int,
    s: int,
    name: str,
    *,
    width: int | None = None,
    prefix: str = "fc",
) -> None:
    """Feed-forward block of width ``width`` (default ``cfg.ffn_hidden``): ``fc1``, GELU,
    squared ReLU or SwiGLU (``fc1`` then holds the gate and up matrices), ``fc2``."""
    h, tp = cfg.hidden, net.tp
    ffn = cfg.ffn_hidden if width is None else width
    f_l = ffn // tp
    a = net.act_bytes
    x: Shape = (b, s, h)
    cols = 2 * ffn if cfg.gated_mlp else ffn
    _column_linear(net, f"{name}.{prefix}1", x, cols, bias=cfg.bias, input_shard=net.seq_shard)
    if cfg.gated_mlp:
        el = float(b * s * f_l)
        net.op_layer(
            f"{name}.{'swiglu' if prefix == 'fc' else prefix + '_swiglu'}",
            OPS["swiglu"][net.kernels.fusion],
            el,
            output_shape=(b, s, f_l),
            flop=(5.0 * el, 10.0 * el),
            saved_bytes=2.0 * el * a,
            kind=LayerKind.ACTIVATION,
        )
    else:
        act = "relu2" if cfg.squared_relu else "gelu"
        net.elementwise(
            f"{name}.{act if prefix == 'fc' else prefix + '_' + act}",
            (b, s, f_l),
            act,
            saved_bytes=float(b * s * f_l * a),
        )
    _row_linear(net, f"{name}.{prefix}2", (b, s, ffn), h, bias=cfg.bias)


def transformer_layer(
    net: Net,
    cfg: TransformerConfig,
    b: int,
    s: int,
    name: str,
    *,
    attention: Section = self_attention,
    mlp: Section = dense_mlp,
) -> None:
    """Append one transformer layer (one block) on a ``(b, s, hidden)`` input: norms, the
    ``attention`` and ``mlp`` sections, dropouts and residual adds."""
    net.new_block()
    h = cfg.hidden
    shard = net.seq_shard
    x: Shape = (b, s, h)
    norm_params = h if cfg.rms_norm else 2 * h

    def norm(nm: str) -> None:
        # pre-norm: the norm's input is the residual stream, which also feeds the skip
        block_norm(net, cfg, nm, x, params=norm_params, shard=shard, accumulate=cfg.pre_norm)

    # bias-dropout-add: one kernel under Transformer Engine (Megatron-Core
    # bias_dropout_add_fusion) and under torch.compile (inductor fuses the mask, the scale and
    # the add); PyTorch eager runs dropout and the add apart
    fused_dropout = cfg.dropout and net.kernels.fusion is not Fusion.EAGER

    def residual(nm: str) -> None:
        # backward: the gradient passes to the skip unchanged and to the branch (one copy,
        # a dtype cast under autocast); the accumulation at the fork is charged to the norm
        el = (b * s // shard) * h
        if fused_dropout:  # reads branch, skip (and the mask it writes); its backward masks
            a = net.act_bytes
            net._kernel(
                nm,
                LayerKind.ELEMENTWISE,
                fwd_flop=3.0 * el,
                bwd_flop=1.0 * el,
                fwd_bytes=el * (3 * a + 1.0),
                bwd_bytes=el * (2 * a + 1.0),
                activation_bytes=el * 1.0,
                output_shape=(b, s // shard, h),
                kernel_class=KernelClass.RESIDUAL,
                autocast_fp32=True,
            )
            return
        net.elementwise(
            nm,
            (b, s // shard, h),
            "add",
            inputs=2,
            bwd_elements=2 if cfg.pre_norm else None,
            autocast_fp32=True,
        )
        net.layers[-1] = net.layers[-1].changed(kernel_class=KernelClass.RESIDUAL)

    for i, (section, dropout) in enumerate(
        ((attention, "attn_out_dropout"), (mlp, "mlp_dropout")), start=1
    ):
        if cfg.pre_norm:
            norm(f"{name}.ln{i}")
        section(net, cfg, b, s, name)
        if cfg.dropout and not fused_dropout:
            net.dropout(f"{name}.{dropout}", x, shard=shard)
        residual(f"{name}.residual{i}")
        if not cfg.pre_norm:
            norm(f"{name}.ln{i}")


def _embeddings(
    net: Net, cfg: TransformerConfig, b: int, s: int, *, positions: int, token_types: int = 0
) -> None:
    """Word (vocabulary-parallel), learned position and token-type embeddings."""
    h = cfg.hidden
    el = b * s * h
    comm: tuple[CommPoint, ...] = ()
    if net.tp > 1:
        op = CollectiveOp.REDUCESCATTER if net.sp else CollectiveOp.ALLREDUCE
        comm = (net.comm(op, el),)
    net.embedding("embed.tokens", b, s, cfg.vocab, h, parallel=True, fwd_comm=comm)
    if positions:
        net.embedding("embed.positions", b, s, positions, h, indices=s)
    if token_types:
        net.embedding("embed.token_types", b, s, token_types, h)


def scatter_embedding_output(net: Net, b: int, s: int, h: int) -> None:
    """Give the embedding section's last layer the output a rank holds, ``(b, s / seq_shard,
    h)``: under sequence parallelism Megatron-Core scatters the embeddings over the
    tensor-parallel ranks before the first block (``LanguageModelEmbedding.forward``: the word
    embedding's reduce-scatter when there is no position or token-type table, else
    ``tensor_parallel.scatter_to_sequence_parallel_region`` after the sum, then a clone that
    frees the full tensor and the dropout on the ``s / t`` rows; NVIDIA/Megatron-LM
    ``megatron/core/models/common/embeddings/language_model_embedding.py``, commit
    d98e8a64). The first block's input, which full recomputation keeps per micro-batch
    (:func:`perfmodel.workload.memory.full_recompute_bytes` reads it from this shape), is then
    ``s b h / t`` elements as every later block's; without sequence parallelism nothing
    changes."""
    if net.seq_shard > 1:
        net.layers[-1] = net.layers[-1].changed(output_shape=(b, s // net.seq_shard, h))


def _lm_head_and_loss(
    net: Net,
    cfg: TransformerConfig,
    rows: int,
    *,
    tied: bool,
    bias: bool = False,
    name: str = "lm_head",
) -> None:
    """Vocabulary-parallel output layer (weights tied to the word embedding when ``tied``) and
    the vocabulary-parallel softmax cross-entropy (three all-reduces of one fp32 per row:
    max, sum of exponentials, target logit; Megatron ``vocab_parallel_cross_entropy``)."""
    _column_linear(net, name, (rows, cfg.hidden), cfg.vocab, bias=bias)  # after the final norm
    last = net.layers[-1]  # FP8 recipes keep the LM head in 16 bit (LayerCost.keep_16bit)
    net.layers[-1] = last = last.changed(keep_16bit=True)
    if tied:
        net.layers[-1] = last.changed(params=last.params - (last.gemm.k * last.gemm.n))
    comm: tuple[CommPoint, ...] = ()
    if net.tp > 1:
        comm = (net.comm(CollectiveOp.ALLREDUCE, 3 * rows, element_bytes=4),)  # fp32
    net.loss("loss", rows, cfg.vocab // net.tp, fwd_comm=comm)


class Mlp(str, enum.Enum):
    """Feed-forward block of a decoder layer."""

    GELU = "gelu"  # two matrices, h -> ffn -> h (GPT-2, Megatron default)
    SWIGLU = "swiglu"  # gated, three matrices: silu(x W_gate) * (x W_up) W_down (Shazeer 2020)
    RELU2 = "relu2"  # two matrices, relu(x W_1)^2 W_2 (So et al. 2021, Primer; Nemotron-4)


class Norm(str, enum.Enum):
    """Normalisation layer: LayerNorm (``2h`` parameters) or RMSNorm (``h``, Zhang & Sennrich 2019)."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Position(str, enum.Enum):
    """Position encoding: a learned table (``max_positions x h`` parameters) or rotary (no
    parameters, Su et al. 2021)."""

    LEARNED = "learned"
    ROPE = "rope"


def swiglu_ffn_hidden(hidden: int) -> int:
    """Megatron-LM's default feed-forward width with ``--swiglu`` when none is given:
    ``int((4 h 2/3) / 64) 64`` (two thirds of ``4 h``, three matrices keep about the parameters of
    a ``4 h`` GELU MLP, rounded down to a multiple of 64; ``megatron/training/arguments.py``,
    ``validate_args``, Megatron-LM core_r0.9 onwards).

    >>> swiglu_ffn_hidden(4096)  # 10922.67 -> 170 x 64
    10880
    """
    return int((4 * hidden * 2 / 3) / 64) * 64


def gpt(
    net: Net,
    *,
    hidden: int = 768,
    layers: int = 12,
    heads: int = 12,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    qk_norm: bool = False,
    ffn_hidden: int | None = None,
    mlp: str = "gelu",
    norm: str = "layernorm",
    bias: bool = True,
    attn_bias: bool | None = None,
    position: str = "learned",
    seq_len: int = 1024,
    vocab: int = 50257,
    max_positions: int | None = None,
    tied_embeddings: bool = True,
    flash_attention: bool = True,
    dropout: bool = True,
) -> TransformerConfig:
    """Decoder-only transformer. Defaults: GPT in the Megatron-LM/GPT-2 layout (learned
    positions, pre-LayerNorm, GELU MLP of ``4 hidden``, biases, final LayerNorm, LM head tied to
    the word embedding). The arguments describe today's decoders as Megatron-LM does
    (``--group-query-attention --num-query-groups``, ``--kv-channels``, ``--swiglu``,
    ``--normalization RMSNorm``, ``--disable-bias-linear``, ``--position-embedding-type rope``,
    ``--untie-embeddings-and-output-weights``).

    Parameters
    ----------
    kv_heads
        Key/value heads of grouped-query attention (Ainslie et al. 2023); default ``heads``
        (multi-head attention). Must divide ``heads``.
    head_dim
        Channels per head; default ``hidden // heads``. ``heads x head_dim`` may differ from
        ``hidden`` (Qwen3-32B: 64 x 128 = 8192 on hidden 5120).
    qk_norm
        Norm each query and key head before attention (Qwen3; Megatron ``--qk-layernorm``).
    ffn_hidden
        Feed-forward width; default ``4 hidden`` (``gelu``) or :func:`swiglu_ffn_hidden`
        (``swiglu``), Megatron-LM's defaults.
    mlp
        ``gelu`` or ``relu2`` (squared ReLU; two matrices) or ``swiglu`` (gated: three
        matrices ``h x ffn``; Megatron ``--squared-relu`` and ``--swiglu``).
    norm
        ``layernorm`` or ``rmsnorm`` (both the per-layer and the final norm).
    bias
        Biases on the linear layers (``False``: Megatron ``--disable-bias-linear``).
    position
        ``learned`` (a table of ``max_positions`` rows, default ``seq_len``; GPT-2: 1024) or
        ``rope`` (rotary: no parameters; ``max_positions`` is then ignored).
    tied_embeddings
        The LM head shares the word embedding's weights.

    Parameters per layer: ``h (q + 2 kv_heads d) + q h`` (attention, ``q = heads d``),
    ``2 h ffn`` or ``3 h ffn`` (MLP), two norms, plus biases; the embedding is ``vocab h``, the
    untied head another ``vocab h``.
    """
    mlp_kind = parse_enum(Mlp, mlp, where="mlp", normalize=snake)
    norm_kind = parse_enum(Norm, norm, where="norm", normalize=squash)
    pos_kind = parse_enum(Position, position, where="position", normalize=snake)
    gated = mlp_kind is Mlp.SWIGLU
    rms = norm_kind is Norm.RMSNORM
    if ffn_hidden is None:
        ffn_hidden = swiglu_ffn_hidden(hidden) if gated else 4 * hidden
    cfg = TransformerConfig(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads or heads,
        ffn_hidden=ffn_hidden,
        seq_len=seq_len,
        vocab=vocab,
        rms_norm=rms,
        gated_mlp=gated,
        squared_relu=mlp_kind is Mlp.RELU2,
        bias=bool(bias),
        attn_bias=None if attn_bias is None else bool(attn_bias),
        dropout=dropout,
        flash_attention=flash_attention,
        head_size=head_dim,
        qk_norm=bool(qk_norm),
        rope=pos_kind is Position.ROPE,
    )
    check_config(cfg, net.tp)
    positions = 0
    if pos_kind is Position.LEARNED:
        positions = max_positions or seq_len
        _check_positions(seq_len, positions)
    b, s = net.batch_size, net.local_seq(seq_len)
    _embeddings(net, cfg, b, s, positions=positions)
    if dropout:
        net.dropout("embed.dropout", (b, s, hidden), shard=net.seq_shard)
    scatter_embedding_output(net, b, s, hidden)
    _stack(net, cfg, b, s)
    decoder_head(net, cfg, b, s, tied=tied_embeddings)
    return cfg


def decoder_head(net: Net, cfg: TransformerConfig, b: int, s: int, *, tied: bool) -> None:
    """Final norm (``final_norm`` RMSNorm or ``final_ln`` LayerNorm), LM head and loss of a
    decoder."""
    h = cfg.hidden
    block_norm(
        net,
        cfg,
        "final_norm" if cfg.rms_norm else "final_ln",
        (b, s, h),
        params=h if cfg.rms_norm else 2 * h,
        shard=net.seq_shard,
    )
    _lm_head_and_loss(net, cfg, b * s, tied=tied)


#: One decoder layer's parts: its config, attention section and MLP section.
LayerParts = tuple[TransformerConfig, Section, Section]


def layered_decoder(
    net: Net, cfg: TransformerConfig, layer: Callable[[int], LayerParts], *, tied: bool
) -> TransformerConfig:
    """A decoder without a position table (rotary positions or none): the word embedding,
    ``cfg.layers`` transformer layers, layer ``i`` built from ``layer(i)`` (the layers of a MoE,
    windowed or no-rotary-every-k model differ), then :func:`decoder_head` with the LM head
    ``tied`` to the embedding or not. The skeleton of :func:`perfmodel.workload.zoo.moe.moe` and
    the :mod:`~perfmodel.workload.zoo.frontier` builders. Returns ``cfg``."""
    b, s = net.batch_size, net.local_seq(cfg.seq_len)
    _embeddings(net, cfg, b, s, positions=0)
    scatter_embedding_output(net, b, s, cfg.hidden)
    for i in range(cfg.layers):
        layer_cfg, attention, mlp = layer(i)
        transformer_layer(net, layer_cfg, b, s, f"layer{i}", attention=attention, mlp=mlp)
    net.end_blocks()
    decoder_head(net, cfg, b, s, tied=tied)
    return cfg


def llama(net: Net, **kwargs: Any) -> TransformerConfig:
    """Llama-style decoder (Touvron et al. 2023): :func:`gpt` with RMSNorm, rotary positions
    (no parameters), grouped-query attention with ``kv_heads`` (default ``heads``), SwiGLU MLP of
    width ``ffn_hidden``, no biases (``attn_bias``: on the QKV and output projections, as
    InternLM-7B), no dropout, untied LM head (:data:`_LLAMA_PINNED`). Takes :func:`gpt`'s
    arguments :data:`_LLAMA_ARGS`; defaults are Llama-2-7B (:data:`_LLAMA_DEFAULTS`,
    6,738,415,616 parameters)."""
    return gpt(net, **bound(llama, net, kwargs), **_LLAMA_PINNED)


#: :func:`gpt`'s arguments :func:`llama` takes, in their order, and their Llama-2-7B defaults
#: (``config.json`` of huggingface.co/meta-llama/Llama-2-7b-hf: ``hidden_size``,
#: ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
#: ``max_position_embeddings``, ``vocab_size``, ``tie_word_embeddings``, ``attention_bias``).
_LLAMA_ARGS = (
    "hidden", "layers", "heads", "kv_heads", "head_dim", "qk_norm", "ffn_hidden", "seq_len",
    "vocab", "tied_embeddings", "flash_attention", "attn_bias",
)  # fmt: skip
_LLAMA_DEFAULTS = {
    "hidden": 4096, "layers": 32, "heads": 32, "ffn_hidden": 11008, "seq_len": 4096,
    "vocab": 32000, "tied_embeddings": False, "attn_bias": False,
}  # fmt: skip
#: :func:`gpt`'s arguments a Llama decoder pins.
_LLAMA_PINNED = {
    "mlp": Mlp.SWIGLU, "norm": Norm.RMSNORM, "bias": False, "position": Position.ROPE,
    "dropout": False,
}  # fmt: skip
variant_signature(llama, gpt, _LLAMA_ARGS, _LLAMA_DEFAULTS)


def bert(
    net: Net,
    *,
    hidden: int = 1024,
    layers: int = 24,
    heads: int = 16,
    ffn_hidden: int | None = None,
    seq_len: int = 512,
    vocab: int = 30522,
    max_positions: int = 512,
    head: str = "pretraining",
    flash_attention: bool = False,
    mlm_positions: int | None = None,
) -> TransformerConfig:
    """BERT encoder (Devlin et al. 2019) in the HuggingFace/Google layout: word, position and
    token-type embeddings with LayerNorm, post-LayerNorm layers, GELU MLP, pooler (dense + tanh
    on the first token).

    ``head``: ``"pretraining"`` (masked-LM transform dense + GELU + LayerNorm, decoder tied to
    the word embedding with its own bias, next-sentence dense h->2), ``"squad"`` (span head
    h->2 on every token; no pooler), or ``"none"`` (encoder + pooler: BERT-Large has
    335,141,888 parameters, BERT-Base 109,482,240, as ``transformers.BertModel``).

    ``mlm_positions``: the masked-LM head runs on this many positions per sequence, gathered
    first (``index_select`` of the masked rows), instead of every token: NVIDIA
    DeepLearningExamples' PyTorch BERT from a9e2c1d5 (2022-03, "dense sequence output",
    ``BertPreTrainingHeads`` with ``sequence_output_is_dense``, the default unless
    ``--no_dense_sequence_output``); its pre-training scripts mask at most
    ``--max_predictions_per_seq`` 20 positions of 128 (phase 1) and 80 of 512 (phase 2).
    ``None``: every position (HuggingFace, Google BERT, DeepLearningExamples before a9e2c1d5).
    """
    cfg = TransformerConfig(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=ffn_hidden or 4 * hidden,
        seq_len=seq_len,
        vocab=vocab,
        causal=False,
        pre_norm=False,
        flash_attention=flash_attention,
    )
    check_config(cfg, net.tp)
    if head not in ("pretraining", "squad", "none"):
        raise ConfigError(
            f"unknown BERT head {head!r}; expected pretraining, squad or none",
            value=head,
            where="head",
        )
    _check_positions(seq_len, max_positions)
    if mlm_positions is not None and not 1 <= int(mlm_positions) <= seq_len:
        raise ConfigError(
            f"mlm_positions {mlm_positions!r}: the masked-LM head predicts 1 to seq_len "
            f"({seq_len}) positions per sequence",
            value=mlm_positions,
            where="mlm_positions",
        )
    b, s = net.batch_size, seq_len
    _embeddings(net, cfg, b, s, positions=max_positions, token_types=2)
    net.norm("embed.ln", (b, s, hidden), params=2 * hidden)
    net.dropout("embed.dropout", (b, s, hidden))
    _stack(net, cfg, b, s)
    if head != "squad":
        p = net.linear("pooler", (b, hidden), hidden)
        net.act("pooler.tanh", p, "tanh", saves=True)
    if head == "pretraining":
        p = s
        if mlm_positions is not None:  # dense sequence output: gather the masked rows
            p = int(mlm_positions)
            # index_select reads and writes b p h; its backward zero-fills the b s h gradient
            # and scatters the b p h rows into it (index_add_)
            net.elementwise("mlm.gather", (b, p, hidden), "copy", bwd_elements=s / p + 2)
            net.layers[-1] = net.layers[-1].changed(kernel_class=KernelClass.COPY)
        t = net.linear("mlm.transform", (b, p, hidden), hidden)
        net.elementwise("mlm.gelu", t, "gelu", saved_bytes=float(b * p * hidden * net.act_bytes))
        net.norm("mlm.ln", t, params=2 * hidden)
        _lm_head_and_loss(net, cfg, b * p, tied=True, bias=True, name="mlm.decoder")
        net.linear("nsp", (b, hidden), 2)
        net.loss("nsp.loss", b, 2)
    elif head == "squad":
        net.linear("qa_outputs", (b, s, hidden), 2)
        net.loss("span_loss", 2 * b, s)
    return cfg


def vit(
    net: Net,
    *,
    image_size: int = 224,
    patch: int = 16,
    hidden: int = 768,
    layers: int = 12,
    heads: int = 12,
    ffn_hidden: int | None = None,
    num_classes: int = 1000,
    flash_attention: bool = False,
) -> TransformerConfig:
    """Vision Transformer (Dosovitskiy et al. 2021) as ``torchvision.models.vit_b_16``: patch
    embedding convolution, class token, learned positions, pre-LayerNorm encoder, head on the
    class token. ViT-B/16 has 86,567,656 parameters at 1000 classes."""
    if image_size < patch or image_size % patch:
        raise ConfigError(
            f"image_size={image_size} must be a positive multiple of the patch size {patch}",
            value=image_size,
            where="image_size",
        )
    n_patches = (image_size // patch) ** 2
    s = n_patches + 1
    cfg = TransformerConfig(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=ffn_hidden or 4 * hidden,
        seq_len=s,
        vocab=1,
        causal=False,
        flash_attention=flash_attention,
    )
    check_config(cfg, net.tp)
    b = net.batch_size
    net.conv("patch_embed", (b, 3, image_size, image_size), hidden, patch, patch, bias=True)
    a = net.act_bytes
    net.other(
        LayerCost.built(
            name="cls_token+pos_embedding",
            kind=LayerKind.ELEMENTWISE,
            fwd_flop=float(b * s * hidden),
            bwd_input_flop=0.0,
            bwd_weight_flop=float(b * s * hidden),
            params=hidden + s * hidden,
            fwd_bytes=3.0 * b * s * hidden * a,
            bwd_bytes=2.0 * b * s * hidden * a,
            activation_bytes=0.0,
            output_shape=(b, s, hidden),
        )
    )
    net.dropout("embed.dropout", (b, s, hidden))
    _stack(net, cfg, b, s)
    net.norm("final_ln", (b, s, hidden), params=2 * hidden)
    logits = net.linear("head", (b, hidden), num_classes)
    net.loss("loss", b, logits[-1])
    return cfg


def _zipf_coverage(lo: int, hi: int, vocab: int) -> float:
    """Share of running text covered by word ranks ``lo < rank <= hi`` under Zipf's law with
    exponent 1: ``(H(hi) - H(lo)) / H(vocab)``, ``H`` the harmonic number (``ln n + 0.5772``).

    The 19,997 most frequent of 267,735 words cover about 80% of the tokens:
    (ln 19997 + 0.5772) / (ln 267735 + 0.5772) = 10.481 / 13.075:

    >>> round(_zipf_coverage(0, 19997, 267735), 3)
    0.802
    """

    def harmonic(n: int) -> float:
        return 0.0 if n <= 0 else math.log(n) + 0.5772156649

    return (harmonic(hi) - harmonic(lo)) / harmonic(vocab)


def transformer_xl(
    net: Net,
    *,
    hidden: int = 512,
    layers: int = 16,
    heads: int = 8,
    ffn_hidden: int = 2048,
    seq_len: int = 192,
    mem_len: int = 192,
    vocab: int = 267735,
    cutoffs: list[int] | None = None,
) -> TransformerConfig:
    """Transformer-XL (Dai et al. 2019) as NVIDIA DeepLearningExamples trains it on WikiText-103
    (``wt103_base.yaml``: 16 layers, d_model 512, 8 heads of 64, d_inner 2048, tgt_len and
    mem_len 192, adaptive input/softmax with cutoffs 19997/39997/199997, ``div_val`` 1, tied
    weights): about 192M parameters.

    Per layer: QKV over the ``seq_len + mem_len`` keys (the memory is detached but still
    projected), a position projection ``r_net``, the content (AC) and position (BD) score
    products, the relative shift, softmax, the context product, output projection, post
    LayerNorm, ReLU feed-forward. The adaptive softmax computes head logits (19997 words + 3
    cluster logits) for every token and each tail cluster only for the tokens whose target lies
    in it; the token shares of the clusters are estimated with Zipf's law (exponent 1), not
    measured. Tensor parallelism is not supported for this model.
    """
    if net.tp > 1:
        raise ConfigError("transformer_xl does not support tp > 1", value=net.tp, where="tp")
    cuts = list(cutoffs) if cutoffs is not None else [19997, 39997, 199997]
    if sorted(cuts) != cuts or not cuts or cuts[-1] >= vocab or cuts[0] < 1:
        raise ConfigError(
            f"cutoffs must increase and stay below vocab={vocab}, got {cuts}",
            value=cuts,
            where="cutoffs",
        )
    cfg = TransformerConfig(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=ffn_hidden,
        seq_len=seq_len,
        vocab=vocab,
        pre_norm=False,
    )
    check_config(cfg, 1)
    if mem_len < 0:
        raise ConfigError(f"mem_len must be >= 0, got {mem_len}", value=mem_len, where="mem_len")
    b, s, h, d = net.batch_size, seq_len, hidden, hidden // heads
    klen = s + mem_len
    a = net.act_bytes
    net.embedding("word_emb", b, s, vocab, h)
    net.elementwise("word_emb.scale", (b, s, h), "scale")
    net.dropout("emb.dropout", (b, s, h))
    net.other(LayerCost.parameters_only("r_w_bias+r_r_bias", 2 * heads * d, (heads, d)))
    for i in range(layers):
        n = f"layer{i}"
        net.new_block()
        net.linear(f"{n}.qkv", (b, klen, h), 3 * h, bias=False)
        net.linear(f"{n}.r_net", (klen, h), h, bias=False)
        q_el, k_el = b * s * h, b * klen * h
        net.matmul(f"{n}.scores_ac", b * heads, s, klen, d, saved_bytes=(q_el + k_el) * a)
        net.matmul(f"{n}.scores_bd", b * heads, s, klen, d, saved_bytes=(q_el + klen * h) * a)
        scores = (b * heads, s, klen)
        net.elementwise(f"{n}.rel_shift", scores, "add", inputs=2)
        net.softmax(f"{n}.softmax", scores, recomputable=True)
        net.matmul(
            f"{n}.context",
            b * heads,
            s,
            d,
            klen,
            saved_bytes=(b * heads * s * klen + k_el) * a,
            recomputable_bytes=float(b * heads * s * klen * a),
        )
        net.linear(f"{n}.o_net", (b, s, h), h, bias=False)
        net.dropout(f"{n}.attn_dropout", (b, s, h))
        net.elementwise(f"{n}.residual1", (b, s, h), "add", inputs=2)
        net.norm(f"{n}.ln1", (b, s, h), params=2 * h)
        net.linear(f"{n}.ff1", (b, s, h), ffn_hidden)
        net.act(f"{n}.relu", (b, s, ffn_hidden), "relu")
        net.dropout(f"{n}.ff_dropout", (b, s, ffn_hidden))
        net.linear(f"{n}.ff2", (b, s, ffn_hidden), h)
        net.dropout(f"{n}.ff2_dropout", (b, s, h))
        net.elementwise(f"{n}.residual2", (b, s, h), "add", inputs=2)
        net.norm(f"{n}.ln2", (b, s, h), params=2 * h)
    net.end_blocks()
    net.dropout("out.dropout", (b, s, h))
    tokens = b * s
    ends = [0, *cuts, vocab]
    head = cuts[0] + len(cuts)
    net.linear("crit.head", (tokens, h), head)
    last = net.layers[-1]  # word weights tied to the embedding: cluster weights and biases own
    net.layers[-1] = last.changed(params=cuts[0] + len(cuts) * (h + 1))
    net.loss("crit.head_log_softmax", tokens, head)
    for c in range(1, len(ends) - 1):
        lo, hi = ends[c], ends[c + 1]
        rows = max(1, round(tokens * _zipf_coverage(lo, hi, vocab)))
        net.linear(f"crit.tail{c}", (rows, h), hi - lo)
        tail = net.layers[-1]
        net.layers[-1] = tail.changed(params=hi - lo)  # tied weight: only the bias is new
        net.loss(f"crit.tail{c}_log_softmax", rows, hi - lo)
    return cfg


__all__ = [
    "GemmShape",
    "Mlp",
    "Norm",
    "Position",
    "Section",
    "TransformerConfig",
    "bert",
    "block_norm",
    "decoder_head",
    "dense_mlp",
    "gpt",
    "llama",
    "rotary_decoder_config",
    "self_attention",
    "swiglu_ffn_hidden",
    "transformer_layer",
    "transformer_xl",
    "vit",
]
