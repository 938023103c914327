"""Mixture-of-experts decoders: Mixtral, DeepSeek-V3 and the generic ``moe`` family.

A MoE decoder is a Llama-style decoder (RMSNorm, rotary positions, SwiGLU, no biases, untied
head; :mod:`perfmodel.workload.zoo.transformer`) whose feed-forward block is, in the layers the
configuration names, a routed mixture of experts (Shazeer et al. 2017; Fedus et al. 2022;
Jiang et al. 2024, Mixtral; DeepSeek-AI 2024, DeepSeek-V3):

``router`` (``h x experts`` gate, every token) -> ``router_probs`` (softmax or sigmoid and
top-k) -> ``permute`` (the ``tokens x top_k`` routed rows gathered in expert order) ->
``experts_fc1`` / ``experts_swiglu`` / ``experts_fc2`` (grouped GEMMs over all experts) ->
``unpermute`` (scatter back and the probability-weighted sum; Megatron-Core weights the rows in the
experts' activation instead, :func:`probs_in_activation`), plus ``shared_experts`` dense
SwiGLU experts every token visits (DeepSeekMoE).

Parameters count every expert (memory, gradients and data-parallel traffic are for the total);
FLOP and bytes count the ``top_k`` experts each token visits (the active FLOP of model FLOP/s and
MFU). :attr:`Workload.active_params_total` and :attr:`Workload.all_experts_flop` give the other
views. The layers carry :class:`~perfmodel.workload.layers.ExpertRole` marks (``experts``,
``top_k``) so an expert-parallel lowering can shard the expert weights and turn ``permute`` and
``unpermute`` into the dispatch and combine all-to-alls. With ``ep = 1`` the experts are
replicated on every data-parallel rank and sharded by ``tp`` like a dense MLP (Megatron-Core's
expert tensor parallelism equal to ``tp``; the ``permute``/``unpermute`` layers carry the
tensor-parallel all-gather/reduce-scatter (sequence parallelism) or all-reduce of the tokens,
as Megatron-Core's all-gather token dispatcher does over the tensor-parallel group). With
``Net.ep > 1`` a rank holds ``experts / ep`` experts, each split over ``Net.etp`` ranks, and
``permute``/``unpermute`` also carry the expert-parallel all-to-all of the routed rows
(``CommPoint`` group ``"ep"``, Megatron-Core's ``MoEAlltoAllTokenDispatcher``).

Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank > 0``): ``q_down`` (``h x
q_lora_rank``, replicated), RMSNorm, ``q_up`` (``q_lora_rank x heads (d + d_rope)``, column
parallel); ``kv_down`` (``h x (kv_lora_rank + d_rope)``, replicated; the rotary key part is
shared by all heads), RMSNorm, ``kv_up`` (``kv_lora_rank x heads (d + d_v)``, column parallel);
fused attention with query/key width ``d + d_rope`` and value width ``d_v``; output projection
``heads d_v x h`` (row parallel), as Megatron-Core's ``MLASelfAttention``. The decoupled rotary
embedding (DeepSeek-V2 sec. 2.1.3) rotates only the ``d_rope`` channels: each head's query part
and the one key part all heads share (``mla_rope``, before the key part is expanded to the
heads: Megatron-Core ``MLASelfAttention.get_query_key_value_tensors`` at 4415119, HF
``DeepseekV3Attention``).

Positions: every MoE decoder of the zoo uses rotary embeddings (HF ``config.json``
``rope_theta``: Mixtral 8x7B and 8x22B 1e6, Qwen3-30B-A3B and Qwen3-235B-A22B 1e6, DeepSeek-V3
1e4 with YaRN ``rope_scaling``), on the queries and keys of standard attention (``rope``, as
:func:`~perfmodel.workload.zoo.transformer.llama`) or on MLA's rotary part (``mla_rope``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from perfmodel._ints import divisors
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.order_stats import expected_max_std_normal
from perfmodel.workload._net import Net, Shape, numel
from perfmodel.workload.kernels import Fusion, op_kernels
from perfmodel.workload.layers import CommPoint, ExpertRole
from perfmodel.workload.zoo._args import bound, table_signature
from perfmodel.workload.zoo.transformer import (
    LayerParts,
    Section,
    TransformerConfig,
    _col_comms,
    _row_comms,
    _row_linear,
    dense_mlp,
    layered_decoder,
    rotary_decoder_config,
    self_attention,
)


@dataclass(frozen=True)
class MoeConfig:
    """Routed experts of a MoE decoder, checked on construction (:meth:`__post_init__`): the
    model arguments' defaults and checks, stated once for :func:`moe` and the
    :mod:`~perfmodel.workload.zoo.frontier` builders.

    Attributes
    ----------
    experts
        Routed experts per MoE layer (Megatron ``--num-experts``).
    top_k
        Experts each token is routed to (``--moe-router-topk``).
    expert_ffn_hidden
        SwiGLU width of one expert (``--moe-ffn-hidden-size``; HF ``moe_intermediate_size``).
    shared_experts
        Experts every token visits, as one dense SwiGLU MLP of ``shared_experts x
        expert_ffn_hidden`` (DeepSeekMoE; HF ``n_shared_experts``).
    moe_layer_freq
        Every ``moe_layer_freq``-th layer is a MoE layer (HF ``moe_layer_freq``; Megatron's
        integer ``--moe-layer-freq``).
    first_dense_layers
        The first layers keep a dense MLP of ``ffn_hidden`` (HF ``first_k_dense_replace``).
        Layer ``i`` is a MoE layer when ``i >= first_dense_layers`` and
        ``i % moe_layer_freq == 0`` (HF ``DeepseekV3DecoderLayer``).
    routing_groups
        Group-limited routing ``(groups, groups per token)``: a token's experts lie in
        ``groups per token`` of ``groups`` equal expert groups (DeepSeek-V3 node-limited routing,
        HF ``n_group`` / ``topk_group``; Megatron-Core ``--moe-router-num-groups`` /
        ``--moe-router-group-topk``); ``(0, 0)``: unlimited. Decides how many servers a token's
        rows reach (:func:`perfmodel.parallel.expert.dispatch_share`), not the FLOP.
    aux_loss
        The router adds a load-balancing loss (Megatron ``moe_router_load_balancing_type``
        ``aux_loss`` / ``seq_aux_loss`` / ``global_aux_loss`` with ``moe_aux_loss_coeff > 0``:
        Qwen3 ``aux_loss`` 1e-3, DeepSeek-V3 ``seq_aux_loss`` 1e-4, Kimi K2 ``seq_aux_loss``
        1e-3, Megatron-Bridge 21d102f ``src/megatron/bridge/models/*/*_bridge.py``; gpt-oss
        ``none``): its kernels run beside the router under Megatron-Core
        (:data:`~perfmodel.workload.kernels.OPS` ``moe_aux_loss``).
    expert_bias
        The router keeps a per-expert score-correction bias for load balancing without an
        auxiliary loss (DeepSeek-V3; Megatron ``--moe-router-enable-expert-bias``): a buffer of
        ``experts`` numbers per MoE layer, updated outside the optimizer, not a trained
        parameter.
    """

    experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_experts: int = 0
    moe_layer_freq: int = 1
    first_dense_layers: int = 0
    expert_bias: bool = False
    load_imbalance: float = 1.0
    capacity_factor: float = 0.0
    routing_groups: tuple[int, int] = (0, 0)
    aux_loss: bool = True

    def __post_init__(self) -> None:
        """Check the model arguments as given (CLI text parsed here) and keep them typed:
        counts are integers (``experts=8.7`` refused, not truncated), ``top_k <= experts``
        (named before the routing groups, which could not hold them either), factors real
        numbers, ``routing_groups`` as :func:`_routing_groups` allows."""
        experts, top_k = _positive("experts", self.experts), _positive("top_k", self.top_k)
        if top_k > experts:
            raise ConfigError(
                f"top_k={top_k} exceeds experts={experts}", value=top_k, where="top_k"
            )
        groups, picked = self.routing_groups
        checked = {
            "experts": experts,
            "top_k": top_k,
            "expert_ffn_hidden": _positive("expert_ffn_hidden", self.expert_ffn_hidden),
            "shared_experts": _positive("shared_experts", self.shared_experts, 0),
            "moe_layer_freq": _positive("moe_layer_freq", self.moe_layer_freq),
            "first_dense_layers": _positive("first_dense_layers", self.first_dense_layers, 0),
            "expert_bias": bool(self.expert_bias),
            "load_imbalance": _factor("load_imbalance", self.load_imbalance, 1.0),
            "capacity_factor": _factor("capacity_factor", self.capacity_factor, 0.0),
            "routing_groups": _routing_groups(
                experts,
                top_k,
                _positive("router_groups", groups, 0),
                _positive("router_group_topk", picked, 0),
            ),
            "aux_loss": bool(self.aux_loss),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def busiest_rank_load(self, ep: int, mean_rows: float) -> float:
        """Routed rows of the busiest of ``ep`` expert-parallel ranks over the mean, for one
        micro-batch of one layer whose ranks receive ``mean_rows`` routed rows on average.

        ``load_imbalance x`` :func:`routing_sampling_load` (the expected maximum of the
        per-rank counts that balanced routing of a finite number of tokens draws), capped at
        ``capacity_factor`` when tokens beyond capacity are dropped. Each layer's combine
        all-to-all waits for every rank of the group, so the layer runs at the busiest rank's
        pace (Lepikhin et al. 2021, GShard sec. 2.2; Hwang et al. 2023, Tutel sec. 2.2).

        Defaults: ``load_imbalance = 1.0`` (the balanced routing that the auxiliary
        load-balancing loss, Fedus et al. 2022, and DeepSeek-V3's bias-based balancing,
        DeepSeek-AI 2024 sec. 2.1.2, train towards, and that Megatron-Core's
        ``moe_router_force_load_balancing`` benchmarks force; no measured skew of the expected
        per-rank load of a named run is transcribed, so none is assumed: set
        ``load_imbalance`` from a profile) and ``capacity_factor = 0``: dropless, Megatron-Core's
        default (``--moe-expert-capacity-factor`` None, ``megatron/training/arguments.py``
        core_r0.12).
        """
        load = self.load_imbalance * routing_sampling_load(
            self.experts, self.top_k, ep, mean_rows, self.routing_groups
        )
        if self.capacity_factor > 0:
            return min(load, self.capacity_factor)
        return load

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (from 0) has routed experts."""
        return index >= self.first_dense_layers and index % self.moe_layer_freq == 0


@dataclass(frozen=True)
class MlaConfig:
    """Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2 sec. 2.1): compressed
    query (``q_lora_rank``, 0 = none) and key/value (``kv_lora_rank``) projections, a decoupled
    rotary key/query part of ``qk_rope_head_dim`` channels, value heads of ``v_head_dim``."""

    kv_lora_rank: int
    q_lora_rank: int
    qk_rope_head_dim: int
    v_head_dim: int


def _mark(net: Net, role: ExpertRole, moe: MoeConfig | None = None, **fields: object) -> None:
    """Mark the last layer with its MoE role (and the expert counts and routing groups that the
    expert layers and the dispatch/combine layers carry)."""
    if moe is not None:
        fields.update(experts=moe.experts, top_k=moe.top_k, routing_groups=moe.routing_groups)
    net.layers[-1] = net.layers[-1].changed(expert_role=role, **fields)


def _chunk_sort_map(net: Net) -> None:
    """The last layer (a chunk sort's copy) with its map kernel first
    (:data:`CHUNK_SORT_MAP_KERNELS`), one kernel in backward."""
    net.layers[-1] = net.layers[-1].changed(kernels=1 + CHUNK_SORT_MAP_KERNELS, bwd_kernels=1)


def moe_mlp(net: Net, cfg: TransformerConfig, b: int, s: int, name: str, *, moe: MoeConfig) -> None:
    """Routed-expert feed-forward block (see the module docstring) on a ``(b, s, h)`` input."""
    h, tp, ep, etp = cfg.hidden, net.tp, net.ep, net.etp
    a = net.act_bytes
    tokens = b * s
    # rows this rank's experts process: the tp group's routed tokens split over tp / etp ranks
    # (all of them when etp = tp); the busiest expert-parallel rank gets busiest_rank_load x
    # the mean
    rows = -(-tokens * moe.top_k * etp // tp)
    if ep > 1:
        rows = math.ceil(rows * moe.busiest_rank_load(ep, rows))
    f_l = moe.expert_ffn_hidden // etp
    # the router scores the tokens this rank holds (1/tp of the sequence under sequence
    # parallelism, before the dispatcher gathers them)
    local = tokens // net.seq_shard
    net.linear(f"{name}.router", (local, h), moe.experts, bias=False, casts_input=True)
    _mark(net, ExpertRole.ROUTER)
    net.softmax(f"{name}.router_probs", (local, moe.experts))
    _mark(net, ExpertRole.ROUTER)
    if moe.expert_bias:
        net.buffers += moe.experts
    scores = (local, moe.experts)
    aux = op_kernels("moe_aux_loss", net.kernels.fusion) if moe.aux_loss else None
    if aux is not None:
        net.op_layer(f"{name}.router_aux_loss", aux, float(numel(scores)), output_shape=scores)
        _mark(net, ExpertRole.ROUTER)
    # Megatron-Core's all-to-all dispatcher (the recipe's moe_sort_chunks marks it): the token
    # counts are reduced, all-gathered over the group and copied to the host before the sync
    nccl_a2a = bool(net.kernels.moe_sort_chunks) and ep > 1
    pre = op_kernels("moe_alltoall_preprocess", net.kernels.fusion) if nccl_a2a else None
    if pre is not None:
        counts = CommPoint(CollectiveOp.ALLGATHER, float(ep * moe.experts * COUNT_BYTES), "ep")
        net.op_layer(f"{name}.dispatch_preprocess", pre, float(numel(scores)), output_shape=scores)
        _mark(net, ExpertRole.ROUTER, fwd_comm=(counts,))
    fc, bc = _col_comms(net, tokens * h) if etp == tp else ((), ())
    shard = net.seq_shard if etp == tp else 1
    a2a = _dispatch_alltoall(net, rows * h // shard)
    if pre is not None:  # the routed rows' FP32 probabilities travel in an all-to-all of their own
        a2a += (CommPoint(CollectiveOp.ALLTOALL, float(rows // shard * PROB_BYTES), "ep"),)
    net.elementwise(f"{name}.permute", (rows, h), "copy", inputs=1, bwd_elements=2)
    fc, bc = fc + a2a, bc + a2a
    # Transformer Engine's fused permutation builds its row map first (PERMUTE_MAP_KERNELS)
    maps = {"kernels": 1 + PERMUTE_MAP_KERNELS, "bwd_kernels": 1} if nccl_a2a else {}
    _mark(net, ExpertRole.DISPATCH, moe, fwd_comm=fc, bwd_comm=bc, router_tokens=local, **maps)
    # Megatron-Core's copies of the routed rows around the experts (KernelRecipe): regrouped
    # by local expert after the dispatch, padded to the quantized GEMM's alignment
    sort = net.kernels.moe_sort_chunks and ep > 1 and moe.experts // ep > 1
    pad = net.kernels.moe_quant_padding
    if sort:
        net.elementwise(f"{name}.sort_chunks", (rows, h), "copy", inputs=1, bwd_elements=2)
        _chunk_sort_map(net)
    if pad:
        net.elementwise(f"{name}.quant_pad", (rows, h), "copy", inputs=1, bwd_elements=2)
    net.grouped_linear(
        f"{name}.experts_fc1",
        rows,
        h,
        2 * moe.expert_ffn_hidden,
        groups=moe.experts // ep,
        parallel="column",
        casts_input=True,
        shard=etp,
        expert_role=ExpertRole.EXPERT,
        experts=moe.experts,
        top_k=moe.top_k,
    )
    # Megatron-Core (>= 0.13) scales each routed row by its probability inside the experts'
    # activation, so the activation also keeps the FP32 probabilities (4 B per routed row)
    probs_in_act = probs_in_activation(net)
    net.elementwise(
        f"{name}.experts_swiglu",
        (rows, f_l),
        "swiglu",
        saved_bytes=2.0 * rows * f_l * a + (PROB_BYTES * rows if probs_in_act else 0.0),
        inputs=2,
    )
    _mark(net, ExpertRole.EXPERT, moe)
    net.grouped_linear(
        f"{name}.experts_fc2",
        rows,
        moe.expert_ffn_hidden,
        h,
        groups=moe.experts // ep,
        parallel="row",
        shard=etp,
        expert_role=ExpertRole.EXPERT,
        experts=moe.experts,
        top_k=moe.top_k,
    )
    # un-permutation: with the weighted sum here, the probabilities' gradient needs the expert
    # outputs; with the probabilities applied in the activation it is a plain scatter-add
    if pad:
        net.elementwise(f"{name}.quant_unpad", (rows, h), "copy", inputs=1, bwd_elements=2)
    if sort:
        net.elementwise(f"{name}.unsort_chunks", (rows, h), "copy", inputs=1, bwd_elements=2)
        _chunk_sort_map(net)
    fr, br = _row_comms(net, tokens * h) if etp == tp else ((), ())
    a2a = a2a[:1]  # the combine returns the rows only (the probabilities were applied)
    fr, br = fr + a2a, br + a2a
    if probs_in_act:
        net.elementwise(f"{name}.unpermute", (rows, h), "copy", inputs=1, bwd_elements=2)
    else:
        net.elementwise(
            f"{name}.unpermute", (rows, h), "scale", inputs=2, saved_bytes=float(rows * h * a)
        )
    _mark(net, ExpertRole.COMBINE, moe, fwd_comm=fr, bwd_comm=br)
    if moe.shared_experts:
        width = moe.shared_experts * moe.expert_ffn_hidden
        dense_mlp(net, cfg, b, s, name, width=width, prefix="shared_fc")
        net.unsave(-3)  # shared_fc1's input is the router's, kept once


def _hypergeometric_moments(pool: int, marked: int, draws: int) -> tuple[float, float]:
    """Mean and variance of how many of ``draws`` distinct picks from ``pool`` items land on
    ``marked`` of them (hypergeometric: ``k m / P`` and ``k (m/P)(1 - m/P)(P - k)/(P - 1)``)."""
    if pool <= 1:
        return float(min(marked, draws)), 0.0
    q = marked / pool
    return draws * q, draws * q * (1.0 - q) * (pool - draws) / (pool - 1)


def rank_hit_moments(
    experts: int, top_k: int, ranks: int, routing_groups: tuple[int, int] = (0, 0)
) -> tuple[float, float]:
    """Mean and variance of how many of one token's ``top_k`` routed rows land on one of
    ``ranks`` expert-parallel ranks, each holding ``experts / ranks`` consecutive experts
    (Megatron-Core ``local_expert_indices``), under uniform random routing.

    Uniform routing picks the ``top_k`` experts as a uniform draw without replacement: what
    Megatron-Core's benchmark mode ``moe_router_force_load_balancing`` does (the router's
    logits replaced by i.i.d. normal draws, ``RandomSTE`` in ``megatron/core/transformer/moe/
    moe_utils.py`` at Megatron-LM 4415119, set by every Megatron-Bridge 26.04 MoE performance
    recipe), and the best that balanced-in-expectation routing of independent tokens can do.
    A rank's count is hypergeometric: ``c`` of the ``P`` reachable experts are the rank's,
    ``mean = k c / P``, ``var = k (c/P)(1 - c/P)(P - k)/(P - 1)``. With group-limited routing
    ``(G, g)`` (DeepSeek-V3 sec. 2.1.2; i.i.d. logits pick the ``g`` groups uniformly) the
    token first picks ``g`` of ``G`` groups, ``P = g E / G``, and ``c`` is the rank's experts
    inside the picked groups (mixing over how many of its groups were picked: ranks nested in
    groups, or groups in ranks; other splits are treated as unlimited routing)::

        E[X] = sum_c p_c mean_c,    Var[X] = sum_c p_c (var_c + mean_c^2) - E[X]^2

    >>> m, v = rank_hit_moments(128, 8, 16)   # Qwen3-30B-A3B over 16 ranks: 8 * 1/16 ...
    >>> round(m, 4), round(v, 4)              # ... and 8 (1/16)(15/16)(120/127)
    (0.5, 0.4429)
    >>> m, v = rank_hit_moments(256, 8, 32, (8, 4))  # DeepSeek-V3, node-limited, EP 32
    >>> round(m, 4), round(v, 4)
    (0.25, 0.284)
    """
    block = experts // max(ranks, 1)
    groups, picked = routing_groups
    cases: list[tuple[float, int]] = []  # (probability, the rank's experts in the pool)
    pool = experts
    if groups and experts % groups == 0 and ranks >= groups and ranks % groups == 0:
        pool = picked * experts // groups
        cases = [(picked / groups, block), (1.0 - picked / groups, 0)]
    elif groups and experts % groups == 0 and groups % ranks == 0:
        pool = picked * experts // groups
        own = groups // ranks
        total = math.comb(groups, picked)
        for j in range(0, min(own, picked) + 1):
            p_j = math.comb(own, j) * math.comb(groups - own, picked - j) / total
            cases.append((p_j, j * experts // groups))
    else:
        cases = [(1.0, block)]
    mean = second = 0.0
    for p, c in cases:
        if p <= 0:
            continue
        m_c, v_c = _hypergeometric_moments(pool, c, top_k)
        mean += p * m_c
        second += p * (v_c + m_c * m_c)
    return mean, max(second - mean * mean, 0.0)


def routing_sampling_load(
    experts: int,
    top_k: int,
    ranks: int,
    mean_rows: float,
    routing_groups: tuple[int, int] = (0, 0),
) -> float:
    """Expected routed rows of the busiest of ``ranks`` expert-parallel ranks over the mean,
    for one layer of one micro-batch routed uniformly at random (:func:`rank_hit_moments`).

    The group routes ``N = mean_rows / E[X]`` tokens, each independently; a rank's rows are
    the sum of ``N`` per-token counts, normal for large ``N`` with standard deviation
    ``sigma = sqrt(N Var[X])``. The ranks' rows always add up to ``N top_k`` (every token sends
    exactly ``top_k`` rows), so the per-rank counts are exchangeable with correlation
    ``-1/(n - 1)``: the deviations of ``n`` i.i.d. normals of variance ``sigma^2 n/(n - 1)``
    from their mean, whose expected maximum is that of the i.i.d. draws::

        load = 1 + sigma / mean_rows x E[max of n std normals] x sqrt(n / (n - 1))

    with Blom's approximation of the expected maximum (:func:`expected_max_std_normal`). Pure
    sampling statistics: nothing is fitted; 1 with one rank or no rows.

    >>> round(routing_sampling_load(128, 8, 16, 32768), 4)   # Qwen3-30B on 16 H100, 4096 tokens
    1.0095
    >>> round(routing_sampling_load(8, 2, 4, 1024), 4)        # 8 experts, top-2, 4 ranks
    1.0304
    """
    if ranks <= 1 or mean_rows <= 0:
        return 1.0
    mean, var = rank_hit_moments(experts, top_k, ranks, routing_groups)
    if mean <= 0 or var <= 0:
        return 1.0
    tokens = mean_rows / mean
    sigma = math.sqrt(tokens * var)
    spread = expected_max_std_normal(ranks) * math.sqrt(ranks / (ranks - 1))
    return 1.0 + sigma / mean_rows * spread


#: Bytes of one routed row's router probability as the experts' activation keeps it (FP32:
#: Megatron-Core's router returns FP32 probabilities, ``moe_router_dtype`` or the probs'
#: upcast in ``TEGroupedMLP.forward``, ``megatron/core/transformer/moe/experts.py`` at 4415119).
PROB_BYTES = 4

#: Kernels of Transformer Engine's fused permutation that build its index map before the copy
#: (``moe_permute_fusion=True``; Megatron-Core's all-to-all dispatcher calls ``permute`` and
#: ``sort_chunks_by_idxs`` with ``fused=self.config.moe_permute_fusion``, token_dispatcher.py at
#: Megatron-LM d98e8a6): ``moe_permute_with_probs`` (mask map) runs ``make_row_id_map``, three
#: Triton kernels (``_row_id_map_pass_1/2/3_kernel``), before ``_permute_kernel``; each chunk
#: sort runs ``make_chunk_sort_map`` (one kernel) before ``_sort_chunks_by_map_kernel``.
#: The backward passes reuse the saved maps: one kernel each (``transformer_engine/pytorch/
#: permutation.py`` ``_moe_permute_mask_map`` / ``_moe_chunk_sort`` and ``triton/permutation.py``,
#: TE v2.9-v2.14).
PERMUTE_MAP_KERNELS = 3
CHUNK_SORT_MAP_KERNELS = 1

#: Bytes of one expert's token count as Megatron-Core's all-to-all dispatcher all-gathers it
#: (``routing_map.sum(dim=0).long()``: int64, ``MoEAlltoAllTokenDispatcher.preprocess``,
#: ``megatron/core/transformer/moe/token_dispatcher.py`` at Megatron-LM 4415119).
COUNT_BYTES = 8


def probs_in_activation(net: Net) -> bool:
    """Whether the routed rows are weighted by their router probabilities inside the experts'
    activation (so ``unpermute`` saves nothing) rather than in the un-permutation's weighted sum.

    Megatron-Core with Transformer Engine (:attr:`~perfmodel.workload.kernels.Fusion.TE`):
    since "perf(MoE): Memory efficient token permutation" (Megatron-LM 2659630, 2025-04, in
    core_v0.13.0; Megatron-Bridge 26.04 pins Megatron-LM 4415119) ``TEGroupedMLP`` multiplies
    the activation output by ``permuted_probs`` (``bias_act_func``, the weighted SwiGLU of
    ``megatron/core/transformer/moe/experts.py``) and the dispatchers' ``unpermute`` runs without
    ``probs`` (``token_dispatcher.py`` ``token_unpermutation`` and
    ``get_restored_hidden_states_by_experts``), a scatter-add that keeps only its index map.
    Megatron-Core before 0.13, HuggingFace's Mixtral and the other stacks weight the sum in the
    un-permutation, whose backward needs the expert outputs (the zoo's default).
    """
    return net.kernels.fusion is Fusion.TE


def _dispatch_alltoall(net: Net, elements: float) -> tuple[CommPoint, ...]:
    """The expert-parallel all-to-all of ``elements`` routed activations (Megatron-Core
    ``MoEAlltoAllTokenDispatcher``: dispatch in forward, combine's gradient in backward, and the
    reverse for combine), ``CommPoint`` group ``"ep"``; none without expert parallelism."""
    if net.ep == 1:
        return ()
    return (CommPoint(CollectiveOp.ALLTOALL, float(elements) * net.act_bytes, "ep"),)


def _replicated_up(net: Net, name: str, x: Shape, out: int) -> None:
    """Column-parallel up-projection of a replicated (compressed) input: the input gradient
    is all-reduced over ``tp`` in backward (Megatron ``ColumnParallelLinear``'s ``f``)."""
    bwd = (net.comm(CollectiveOp.ALLREDUCE, numel(x)),) if net.tp > 1 else ()
    net.linear(name, x, out, bias=False, parallel="column", bwd_comm=bwd)


def mla_attention(
    net: Net, cfg: TransformerConfig, b: int, s: int, name: str, *, mla: MlaConfig
) -> None:
    """Multi-head latent attention (see the module docstring) on a ``(b, s, h)`` input."""
    h, tp = cfg.hidden, net.tp
    heads_l = cfg.heads // tp
    d, r, dv = cfg.head_dim, mla.qk_rope_head_dim, mla.v_head_dim
    x: Shape = (b, s, h)
    fc, bc = _col_comms(net, numel(x))
    down = {"bias": False, "input_shard": net.seq_shard, "casts_input": True}
    if mla.q_lora_rank:
        net.linear(f"{name}.q_down", x, mla.q_lora_rank, fwd_comm=fc, bwd_comm=bc, **down)
        net.norm(f"{name}.q_norm", (b, s, mla.q_lora_rank), params=mla.q_lora_rank, rms=True)
        _replicated_up(net, f"{name}.q_up", (b, s, mla.q_lora_rank), cfg.heads * (d + r))
    else:
        net.linear(
            f"{name}.q",
            x,
            cfg.heads * (d + r),
            parallel="column",
            fwd_comm=fc,
            bwd_comm=bc,
            **down,
        )
    # same input as the query projection: kept once
    net.linear(f"{name}.kv_down", x, mla.kv_lora_rank + r, saves_input=False, **down)
    net.norm(f"{name}.kv_norm", (b, s, mla.kv_lora_rank), params=mla.kv_lora_rank, rms=True)
    _replicated_up(net, f"{name}.kv_up", (b, s, mla.kv_lora_rank), cfg.heads * (d + dv))
    if cfg.rope:  # the rotary channels: each local head's query part and the shared key part
        rope = op_kernels("rope", net.kernels.fusion)
        assert rope is not None
        rot_el = float(b * s * (heads_l + 1) * r)
        net.op_layer(f"{name}.mla_rope", rope, rot_el, output_shape=(b, s, heads_l, r),
                     flop=(6.0 * rot_el, 6.0 * rot_el), tensors=2)  # fmt: skip
    net.attention(f"{name}.attention", b, s, heads_l, heads_l, d + r, cfg.causal, v_head_dim=dv)
    _row_linear(net, f"{name}.attn_out", (b, s, heads_l * dv * tp), h, bias=False)


def _factor(name: str, value: object, minimum: float) -> float:
    """A model argument that is a real number ``>= minimum`` (CLI text parsed here)."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}={value!r} is not a number", value=value, where=name) from exc
    if not v >= minimum or v != v or v == float("inf"):
        raise ConfigError(
            f"{name} must be a number >= {minimum}, got {value}", value=value, where=name
        )
    return v


def _positive(name: str, value: int, minimum: int = 1) -> int:
    """``value`` as an integer ``>= minimum``; a fraction (``experts=8.7``) or a bool is refused,
    not truncated."""
    integral = isinstance(value, int | float) and not isinstance(value, bool)
    if not integral or value != int(value) or int(value) < minimum:
        raise ConfigError(
            f"{name} must be an integer >= {minimum}, got {value}", value=value, where=name
        )
    return int(value)


def _routing_groups(experts: int, top_k: int, groups: int, picked: int) -> tuple[int, int]:
    """``(groups, picked)`` checked: 0 and 0 (no limit), or ``groups`` dividing the experts,
    ``1 <= picked <= groups`` and the ``picked`` groups holding at least ``top_k`` experts."""
    if groups == 0 and picked == 0:
        return (0, 0)
    if groups < 1 or experts % groups or not 1 <= picked <= groups:
        raise ConfigError(
            f"router_groups={groups} must divide experts={experts} and router_group_topk="
            f"{picked} lie in 1..router_groups",
            value=(groups, picked),
            where="router_groups",
        )
    if picked * (experts // groups) < top_k:
        raise ConfigError(
            f"router_group_topk={picked} groups of {experts // groups} experts cannot hold "
            f"top_k={top_k} experts",
            value=picked,
            where="router_group_topk",
        )
    return (groups, picked)


def routed_experts(net: Net, m: MoeConfig) -> MoeConfig:
    """The routed experts ``m`` of a MoE decoder, checked against the rank's parallelism:
    ``Net.etp`` dividing ``expert_ffn_hidden`` and ``Net.ep`` dividing ``experts``. The one
    check of :func:`moe` and of the :mod:`~perfmodel.workload.zoo.frontier` builders (the
    arguments themselves are checked by :class:`MoeConfig`).

    Raises
    ------
    InfeasiblePlanError
        ``tp``/``etp`` or ``ep`` that does not divide the experts' width or count.
    """
    if m.expert_ffn_hidden % net.etp:
        name = "tp" if net.etp == net.tp else "etp"
        raise InfeasiblePlanError(
            f"{name}={net.etp} does not divide expert_ffn_hidden={m.expert_ffn_hidden}",
            value=net.etp,
            where=name,
        )
    if m.experts % net.ep:
        fits = divisors(m.experts)
        raise InfeasiblePlanError(
            f"ep={net.ep} must divide experts={m.experts}; ep values that do: {fits}",
            value=net.ep,
            where="ep",
        )
    return m


def latent_attention(
    cfg: TransformerConfig,
    *,
    kv_lora_rank: int,
    q_lora_rank: int,
    qk_rope_head_dim: int,
    v_head_dim: int | None,
) -> Section:
    """The attention section of a :func:`moe` decoder from its model arguments: multi-head
    latent attention (:func:`mla_attention` with a checked :class:`MlaConfig`; ``v_head_dim``
    defaults to ``cfg.head_dim``) when ``kv_lora_rank > 0``, else standard attention."""
    if int(kv_lora_rank) <= 0:
        return self_attention
    mla = MlaConfig(
        kv_lora_rank=int(kv_lora_rank),
        q_lora_rank=_positive("q_lora_rank", q_lora_rank, 0),
        qk_rope_head_dim=_positive("qk_rope_head_dim", qk_rope_head_dim, 0),
        v_head_dim=_positive("v_head_dim", cfg.head_dim if v_head_dim is None else v_head_dim),
    )
    return partial(mla_attention, mla=mla)


#: The model arguments of :func:`moe` in their order, with their defaults: Mixtral 8x7B
#: (``config.json`` of huggingface.co/mistralai/Mixtral-8x7B-v0.1: ``hidden_size``,
#: ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
#: ``intermediate_size``, ``num_local_experts``, ``num_experts_per_tok``, ``vocab_size``), no
#: shared experts, no latent attention, balanced dropless routing with the auxiliary loss.
MOE_DEFAULTS: dict[str, Any] = {
    "hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "head_dim": None, "qk_norm": False,
    "ffn_hidden": 14336, "experts": 8, "top_k": 2, "expert_ffn_hidden": None,
    "shared_experts": 0, "moe_layer_freq": 1, "first_dense_layers": 0, "expert_bias": False,
    "load_imbalance": 1.0, "capacity_factor": 0.0, "router_groups": 0, "router_group_topk": 0,
    "aux_loss": True, "kv_lora_rank": 0, "q_lora_rank": 0, "qk_rope_head_dim": 0,
    "v_head_dim": None, "seq_len": 4096, "vocab": 32000, "tied_embeddings": False,
    "flash_attention": True,
}  # fmt: skip
#: The types of the arguments of :data:`MOE_DEFAULTS` that also take ``None`` (``None``:
#: ``heads`` KV heads, heads ``hidden / heads`` wide, experts ``ffn_hidden`` wide, values
#: ``head_dim`` wide); the others are their defaults' types.
MOE_TYPES = {k: "int | None" for k in ("kv_heads", "head_dim", "expert_ffn_hidden", "v_head_dim")}

#: The model arguments that are :class:`MoeConfig` fields of the same name, as every MoE layer
#: of :func:`moe` has them (``moe_layer_freq`` and ``first_dense_layers`` say which layers).
ROUTED_ARGS = (
    "experts", "top_k", "shared_experts", "expert_bias", "load_imbalance", "capacity_factor",
    "aux_loss",
)  # fmt: skip

#: The model arguments of :func:`latent_attention`.
MLA_ARGS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")


def decoder_config(net: Net, a: Mapping[str, Any], **fields: Any) -> TransformerConfig:
    """:func:`~perfmodel.workload.zoo.transformer.rotary_decoder_config` of a MoE builder's model
    arguments ``a``: the sizes named as the arguments, ``kv_heads`` (default ``heads``),
    ``head_size`` from ``head_dim``, and ``fields``. The configuration of :func:`moe` and the
    :mod:`~perfmodel.workload.zoo.frontier` builders."""
    shape = {k: a[k] for k in ("hidden", "layers", "heads", "seq_len", "vocab", "flash_attention")}
    kv_heads = a["kv_heads"] or a["heads"]
    return rotary_decoder_config(net, **shape, kv_heads=kv_heads, head_size=a["head_dim"], **fields)


def moe_config(a: Mapping[str, Any], **fields: Any) -> MoeConfig:
    """The :class:`MoeConfig` of :func:`moe`'s model arguments ``a`` (:data:`ROUTED_ARGS`,
    ``expert_ffn_hidden`` defaulting to ``ffn_hidden``, the router groups) and ``fields``."""
    width = a["ffn_hidden"] if a["expert_ffn_hidden"] is None else a["expert_ffn_hidden"]
    groups = (a["router_groups"], a["router_group_topk"])
    return MoeConfig(
        **{k: a[k] for k in ROUTED_ARGS}, expert_ffn_hidden=width, routing_groups=groups, **fields
    )


def moe(net: Net, **kwargs: Any) -> TransformerConfig:
    """Mixture-of-experts decoder (see the module docstring). Defaults are Mixtral 8x7B
    (46,702,792,704 parameters, 12,879,925,248 active).

    Parameters
    ----------
    kv_heads, head_dim, qk_norm
        As :func:`~perfmodel.workload.zoo.transformer.gpt` (``head_dim`` is the non-rotary
        query/key width under MLA; ``kv_heads`` is ``heads`` under MLA, and ``qk_norm`` applies
        to standard attention only).
    ffn_hidden
        SwiGLU width of the dense layers (``first_dense_layers`` and those ``moe_layer_freq``
        skips).
    experts, top_k, expert_ffn_hidden, shared_experts, moe_layer_freq, first_dense_layers, expert_bias
        :class:`MoeConfig`; ``expert_ffn_hidden`` defaults to ``ffn_hidden``.
    load_imbalance, capacity_factor
        Busiest expert-parallel rank's routed rows over the mean, and the capacity factor
        beyond which tokens are dropped (0: dropless); see :meth:`MoeConfig.busiest_rank_load`.
    router_groups, router_group_topk
        Group-limited routing (:attr:`MoeConfig.routing_groups`; both 0: unlimited).
    aux_loss
        The router's load-balancing loss (:attr:`MoeConfig.aux_loss`).
    kv_lora_rank, q_lora_rank, qk_rope_head_dim, v_head_dim
        Multi-head latent attention when ``kv_lora_rank > 0`` (:class:`MlaConfig`;
        ``v_head_dim`` defaults to ``head_dim``).
    """
    a = bound(moe, net, kwargs)
    if int(a["kv_lora_rank"]) > 0:
        a["kv_heads"] = a["heads"]  # MLA expands the latent to every head
        if not a["flash_attention"]:
            raise ConfigError(
                "flash_attention=false is not modelled for multi-head latent attention",
                value=a["flash_attention"],
                where="flash_attention",
            )
    cfg = decoder_config(net, a, ffn_hidden=a["ffn_hidden"], bias=False, qk_norm=bool(a["qk_norm"]))
    m = routed_experts(
        net,
        moe_config(
            a, moe_layer_freq=a["moe_layer_freq"], first_dense_layers=a["first_dense_layers"]
        ),
    )
    attention: Section = latent_attention(cfg, **{k: a[k] for k in MLA_ARGS})
    routed: Section = partial(moe_mlp, moe=m)

    def layer(i: int) -> LayerParts:
        return cfg, attention, routed if m.is_moe_layer(i) else dense_mlp

    return layered_decoder(net, cfg, layer, tied=a["tied_embeddings"])


table_signature(moe, MOE_DEFAULTS, MOE_TYPES)

__all__ = [
    "COUNT_BYTES",
    "MLA_ARGS",
    "MOE_DEFAULTS",
    "MOE_TYPES",
    "PROB_BYTES",
    "ROUTED_ARGS",
    "MlaConfig",
    "MoeConfig",
    "decoder_config",
    "latent_attention",
    "mla_attention",
    "moe",
    "moe_config",
    "moe_mlp",
    "probs_in_activation",
    "rank_hit_moments",
    "routed_experts",
    "routing_sampling_load",
]
