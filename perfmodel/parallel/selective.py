"""Selective recomputation, per stack: which part of each layer's forward a ``recompute=selective``
step re-runs in backward (:class:`SelectiveRecompute`), and torchtitan's op-level checkpoint of a
block's matrix products (:func:`op_checkpoint`, :func:`mm_products`).

A software preset names its rule (:attr:`~perfmodel.parallel.software.SoftwarePreset.selective`);
the recipe (:mod:`perfmodel.parallel.recipe`), the lowering and the memory model read it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfmodel.dtypes import Precision
from perfmodel.workload.layers import (
    ExpertRole,
    LayerCost,
    LayerKind,
    Workload,
    feeds_gated_activation,
    layer_runs,
    runs_sum,
)
from perfmodel.workload.memory import Recompute, is_selectively_recomputed


class SelectiveRecompute(str, enum.Enum):
    """What ``recompute=selective`` re-runs in backward, per stack.

    ``attention-core``: the attention scores, softmax, dropout and context products (Korthikanti
    et al. 2022; Megatron-LM's ``--recompute-granularity selective``); nothing for fused
    attention (Megatron-LM's legacy ``ParallelAttention`` checkpoints only the unfused core:
    ``megatron/legacy/model/transformer.py`` at core_v0.8.0 calls ``core_attention_flash``
    outside the checkpoint). Megatron-Core checkpoints fused attention too: its presets use
    :class:`~perfmodel.workload.memory.ModuleRecompute` ``core_attn``.

    ``op``: torchtitan's default ``selective_ac_option = "op"`` (torchtitan 9dec370, Dec 2024,
    ``torchtitan/parallelisms/parallelize_llama.py``: ``_save_list`` and ``_custom_policy``).
    Each transformer block runs under a selective checkpoint whose policy, counting the block's
    ``aten.mm`` calls from 1 afresh on every forward, saves the output of every odd-numbered
    ``mm``, of SDPA (flash / memory-efficient) and of ``abs``/``max`` (FP8 scales; a few bytes),
    and re-runs everything else in backward. A Llama block calls ``wq, wk, wv, wo, w1, w3, w2``
    in that order (``Attention.forward``; ``FeedForward.forward`` is
    ``w2(silu(w1(x)) * w3(x))``), so ``wq, wv, w1, w2`` are saved and ``wk, wo, w3`` re-run
    (for Llama 3.1 8B 0.365 of the block's linear FLOP, 0.31 of its forward FLOP at sequence
    8192), with the norms, RoPE, SiLU, the gating product and the residual adds; SDPA is not
    re-run. Fused layers of the zoo stand for several ``mm`` calls (:func:`mm_products`); which
    ones a layer's are decides its share (:meth:`share_for`) and what the checkpoint keeps
    (:meth:`kept_bytes`). Unfused attention's ``bmm`` and routed experts' grouped GEMMs are not
    ``aten.mm``: re-run, nothing saved.
    """

    ATTENTION_CORE = "attention-core"
    OP = "op"

    @property
    def checkpoints_blocks(self) -> bool:
        """Whether the policy wraps each block in a checkpoint (``op``): memory is then the
        checkpoint's kept outputs (:meth:`kept_bytes`), not what each layer saves."""
        return self is SelectiveRecompute.OP

    def share(self, layer: LayerCost) -> float:
        """Fraction of ``layer``'s forward re-run in its backward, from ``layer`` alone: exact
        for ``attention-core``; for ``op`` the mean over a block's matrix products (half of
        them re-run) where the block is not known (:meth:`share_for` knows it).

        >>> from perfmodel.workload.layers import LayerCost, LayerKind
        >>> fc = LayerCost(name="fc", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
        ...                bwd_weight_flop=1.0, params=1, fwd_bytes=1.0, bwd_bytes=1.0,
        ...                activation_bytes=1.0, output_shape=(1,), block=0)
        >>> SelectiveRecompute.OP.share(fc), SelectiveRecompute.ATTENTION_CORE.share(fc)
        (0.5, 0.0)
        """
        if self is SelectiveRecompute.ATTENTION_CORE:
            return 1.0 if is_selectively_recomputed(layer) else 0.0
        if layer.block is None or layer.kind is LayerKind.ATTENTION:
            return 0.0
        if _is_mm(layer):
            return 0.5
        return 1.0

    def share_for(self, workload: Workload) -> Callable[[LayerCost], float]:
        """The per-layer share of ``workload``'s blocks (a function of a layer's cost fields and
        of whether it is in a block, as :func:`~perfmodel.parallel.lowering.build_chunk` needs):
        for ``op`` each layer's share of its block's ``mm`` calls that the policy re-runs
        (:func:`op_checkpoint`); for ``attention-core`` :meth:`share`. Kept on the workload
        (one function per workload: cost-model memos key on it)."""
        if self is SelectiveRecompute.ATTENTION_CORE:
            return SelectiveRecompute.ATTENTION_CORE.share
        memo = workload.__dict__.setdefault("_op_checkpoint_share", {})
        fn = memo.get("fn")
        if fn is None:
            plan = op_checkpoint(workload.layers, workload.precision.activation_bytes)
            shares, default = plan.share, self.share

            def fn(layer: LayerCost) -> float:
                if layer.block is None:
                    return 0.0
                got = shares.get(layer.cost_key())
                return default(layer) if got is None else got

            memo["fn"] = fn
        return fn

    def kept_bytes(self, layers: Sequence[LayerCost], precision: Precision) -> tuple[float, float]:
        """``(kept, working)`` activation bytes of one micro-batch of ``layers`` under ``op``
        checkpointing (``attention-core``: the plain selective count and no working set).

        ``kept``: each block's input (the checkpoint's argument, held from forward to backward,
        as :func:`~perfmodel.workload.memory.full_recompute_bytes` counts it), the outputs the
        policy saves (odd-numbered ``mm`` outputs, SDPA's output and its FP32 log-sum-exp) and
        every layer outside the blocks. ``working``: while a block's backward runs, its forward
        is re-run and what the cache did not hold is live again: the largest block's
        activations less its saved outputs.
        """
        from perfmodel.workload import memory as wmem

        if self is SelectiveRecompute.ATTENTION_CORE:
            return wmem.activation_bytes(layers, Recompute.SELECTIVE, precision=precision), 0.0
        a = precision.activation_bytes
        plan = op_checkpoint(layers, a)
        boundary, _ = wmem.full_recompute_bytes(layers, precision)
        saved = runs_sum(
            layers, lambda la: plan.saved.get(la.cost_key(), 0.0) if la.block is not None else 0.0
        )
        working = 0.0
        for block in transformer_blocks(layers):
            full = sum(la.activation_bytes for la in block)
            mine = sum(plan.saved.get(la.cost_key(), 0.0) for la in block)
            working = max(working, full - mine)
        return boundary + saved, max(working, 0.0)


def _is_mm(layer: LayerCost) -> bool:
    """Whether ``layer`` runs ``aten.mm`` in PyTorch eager: a linear layer with weights, not a
    routed experts' grouped GEMM."""
    return layer.kind is LayerKind.LINEAR and layer.expert_role is not ExpertRole.EXPERT


def _elements(shape: Sequence[int]) -> float:
    n = 1.0
    for d in shape:
        n *= d
    return n


def mm_products(block: Sequence[LayerCost]) -> list[tuple[float, ...]]:
    """For each layer of one transformer block (forward order), the output widths of the
    ``aten.mm`` calls it stands for in a PyTorch eager model, in call order (empty: none).

    The zoo fuses some products into one layer; each is split back into the modules of the
    Llama reference model (torchtitan ``torchtitan/models/llama/model.py``, Dec 2024):

    * the query/key/value projection (the linear layer feeding the attention core, norms on
      ``q``/``k`` between them allowed) is ``wq, wk, wv``: widths ``q, kv, kv`` with ``q`` the
      attention's local heads times their query width (the attention's ``gemm.batch / b`` heads
      of ``gemm.k``) and ``kv = (n - q) / 2``;
    * a gated MLP's first layer (followed by an activation of half its width: SwiGLU) is
      ``w1, w3``: two halves;
    * any other linear layer is one ``mm``; routed experts (grouped GEMMs), ``bmm`` and the
      other kinds none.

    >>> from perfmodel.workload.zoo import build_model
    >>> w = build_model("llama", batch_size=1, hidden=64, layers=1, heads=4, kv_heads=2,
    ...                 ffn_hidden=128, vocab=100, seq_len=8)
    >>> block = [la for la in w.layers if la.block == 0]
    >>> [(la.name, p) for la, p in zip(block, mm_products(block)) if p]
    [('layer0.qkv', (64.0, 32.0, 32.0)), ('layer0.attn_out', (64.0,)), ('layer0.fc1', (128.0, 128.0)), ('layer0.fc2', (64.0,))]
    """
    out: list[tuple[float, ...]] = []
    for i, la in enumerate(block):
        if not _is_mm(la) or not la.output_shape:
            out.append(())
            continue
        n = float(la.output_shape[-1])
        # the next product (norms on q/k, RoPE and the eager K/V expansion may come between)
        nxt = next((x for x in block[i + 1 :] if x.gemm is not None), None)
        after = block[i + 1] if i + 1 < len(block) else None
        widths: tuple[float, ...] = (n,)
        if (
            nxt is not None
            and nxt.kind in (LayerKind.ATTENTION, LayerKind.MATMUL)
            and nxt.gemm is not None
            and nxt.output_shape
        ):
            q = nxt.gemm.batch / nxt.output_shape[0] * nxt.gemm.k
            kv = (n - q) / 2
            if 0 < q < n and kv > 0:
                widths = (q, kv, kv)
        elif feeds_gated_activation(la, after):
            widths = (n / 2, n / 2)
        out.append(widths)
    return out


@dataclass(frozen=True)
class OpCheckpoint:
    """torchtitan's op-level selective checkpoint of a workload's blocks (see
    :class:`SelectiveRecompute` ``op``), per layer by :meth:`LayerCost.cost_key`.

    Attributes
    ----------
    share
        Fraction of the layer's forward FLOP re-run in backward: the re-run (even-numbered)
        ``mm`` widths over all of the layer's (the ``mm`` calls of one layer share ``m`` and
        ``k``), 0 for SDPA, 1 for every other kind.
    saved
        Bytes of the layer's outputs the checkpoint keeps: the saved ``mm`` widths times the
        output's other dimensions at the activation element size; SDPA's output plus its FP32
        log-sum-exp (``b x heads x s``); 0 otherwise.
    """

    share: dict[tuple[object, ...], float]
    saved: dict[tuple[object, ...], float]


def transformer_blocks(layers: Sequence[LayerCost]) -> list[tuple[LayerCost, ...]]:
    """The distinct blocks of ``layers`` (a stack's copies once), each as its layers in order."""
    out: list[tuple[LayerCost, ...]] = []
    for piece, _ in layer_runs(layers):
        cur: list[LayerCost] = []
        for la in piece:
            if cur and la.block != cur[-1].block:
                if cur[-1].block is not None:
                    out.append(tuple(cur))
                cur = []
            cur.append(la)
        if cur and cur[-1].block is not None:
            out.append(tuple(cur))
    return out


def op_checkpoint(layers: Sequence[LayerCost], act_bytes: float) -> OpCheckpoint:
    """:class:`OpCheckpoint` of the blocks of ``layers`` (activations of ``act_bytes`` bytes per
    element): the ``mm`` calls of each block (:func:`mm_products`) numbered from 1 in forward
    order, the odd ones saved.

    Llama 3.1 8B (GQA 32/8 heads of 128, SwiGLU 14336): ``wq`` saved, ``wk`` re-run, ``wv``
    saved (the fused projection re-runs 1024 of its 6144 columns), ``wo`` re-run, ``w1`` saved,
    ``w3`` re-run, ``w2`` saved:

    >>> from perfmodel.workload.zoo import build_model
    >>> w = build_model("llama", batch_size=1, hidden=4096, layers=1, heads=32, kv_heads=8,
    ...                 ffn_hidden=14336, vocab=128256, seq_len=16)
    >>> plan = op_checkpoint(w.layers, 2)
    >>> {la.name: round(plan.share[la.cost_key()], 4) for la in w.layers if la.block == 0}
    ... # doctest: +NORMALIZE_WHITESPACE
    {'layer0.ln1': 1.0, 'layer0.qkv': 0.1667, 'layer0.rope': 1.0, 'layer0.repeat_kv': 1.0,
     'layer0.attention': 0.0, 'layer0.attn_out_copy': 1.0, 'layer0.attn_out': 1.0,
     'layer0.residual1': 1.0, 'layer0.ln2': 1.0, 'layer0.fc1': 0.5, 'layer0.swiglu': 1.0,
     'layer0.fc2': 0.0, 'layer0.residual2': 1.0}
    """
    share: dict[tuple[object, ...], float] = {}
    saved: dict[tuple[object, ...], float] = {}
    for block in transformer_blocks(layers):
        count = 0
        for la, widths in zip(block, mm_products(block), strict=True):
            key = la.cost_key()
            if widths:
                kept = rerun = 0.0
                for w in widths:
                    count += 1
                    if count % 2:
                        kept += w
                    else:
                        rerun += w
                total = kept + rerun
                share.setdefault(key, rerun / total)
                per_col = _elements(la.output_shape) / float(la.output_shape[-1])
                saved.setdefault(key, kept * per_col * act_bytes)
            elif la.kind is LayerKind.ATTENTION:
                share.setdefault(key, 0.0)
                lse = 4.0 * la.gemm.batch * la.gemm.m if la.gemm is not None else 0.0
                saved.setdefault(key, _elements(la.output_shape) * act_bytes + lse)
            else:
                share.setdefault(key, 1.0)
                saved.setdefault(key, 0.0)
    return OpCheckpoint(share, saved)


__all__ = [
    "OpCheckpoint",
    "SelectiveRecompute",
    "mm_products",
    "op_checkpoint",
    "transformer_blocks",
]
