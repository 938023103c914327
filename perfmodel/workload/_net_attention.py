"""Layer primitives of transformers beyond the GEMM (:class:`AttentionLayers`, a part of
:class:`~perfmodel.workload._net.Net`): fused and unfused attention with its windows and
context-parallel exchange, routed experts' grouped GEMMs and embeddings. The conventions
(FLOP, bytes, saved activations, kernels) are :mod:`perfmodel.workload._net`'s; the methods
use its helpers (``self._add``, ``self._kernel``, ``self._gemm_layer``, ...).

Kept whole (issue 29): :meth:`AttentionLayers.attention` (~150 lines, 60 of them the
docstring stating each kernel's FLOP and bytes) prices one attention in one formula set.
"""

from __future__ import annotations

from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.workload._net_shapes import Shape, _sliding_keys, _window_gemm
from perfmodel.workload.kernels import (
    FP32_BYTES,
    Fusion,
)
from perfmodel.workload.layers import (
    CommPoint,
    GemmShape,
    LayerCost,
    LayerKind,
)
from perfmodel.workload.window import AttentionWindow


class AttentionLayers:
    """The attention, expert and embedding layers :class:`~perfmodel.workload._net.Net`
    appends."""

    def attention(
        self,
        name: str,
        b: int,
        s: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        causal: bool,
        *,
        v_head_dim: int | None = None,
        window: AttentionWindow | None = None,
    ) -> Shape:
        """Fused attention kernel (FlashAttention, Dao et al. 2022) for ``heads`` local heads.

        FLOP forward ``2 b s^2 heads (d + d_v)`` (``QK^T`` over the query/key width ``d`` and
        ``PV`` over the value width ``d_v``, default ``d``: ``4 b s^2 heads d``), halved when
        ``causal`` (the kernel skips masked tiles); backward ``2.5x`` forward (FlashAttention
        recomputes ``P``: 5 GEMMs against 2). Saves ``Q, K, V`` and the fp32 log-sum-exp (``O``
        is kept by the output projection that consumes it); no ``s x s`` matrix. Multi-head
        latent attention (DeepSeek-V2/V3) has ``d = 192`` (128 + 64 rotary) and ``d_v = 128``.

        Context parallelism (``cp > 1``, ``s`` the local ``seq_len / cp`` queries): ring
        attention (Liu et al. 2023, arXiv:2310.01889; Megatron-Core/Transformer Engine
        ``cp_comm_type="p2p"``, torchtitan's ``context_parallel`` ring): the ``s`` local queries
        meet all ``cp s`` keys, FLOP ``2 b s (cp s) heads (d + d_v)``, halved when causal (the
        ``2 cp``-chunk load balancing gives every rank the same half), i.e. ``1/cp`` of the whole
        sequence's attention. The local ``K, V`` chunk travels ``cp - 1`` steps around the ring in
        forward (an all-gather of ``cp`` chunks, ``CommPoint`` group ``"cp"``) and ``K, V`` plus
        their gradients in backward (all-gather + reduce-scatter); the lowering overlaps them
        with the attention kernel (:func:`perfmodel.parallel.expert.ring_exposed_s`).

        The ``cp`` steps each launch the fused kernel on one pair of chunks: step 0 the causal
        ``s x s`` block of the local queries and keys, the others a full (unmasked) ``s x s/2``
        block (load balancing keeps half of the received keys or half of the local queries;
        torch ``_templated_ring_attention`` with ``_is_causal_behavior``, Transformer Engine
        ``AttnFuncWithCPAndKVP2P``'s ``"diagonal"`` then ``"lower-triangle"``/``"upper-triangle"``
        sections), each step the same FLOP (``s^2/2`` score pairs). The layer carries step 0's
        block, ``GemmShape(s, s, d, b heads)``, and ``ring_steps = cp``
        (:attr:`~perfmodel.workload.layers.LayerCost.ring_steps`): the compute model prices the
        causal step and the ``cp - 1`` unmasked ones each at its own efficiency
        (:meth:`perfmodel.compute.model.ComputeModel.attention`); ``cp`` times the kernels of
        one call. Without the causal mask every step is an unmasked ``s x s`` block. Each step's
        partial output is merged into an FP32 accumulator by its log-sum-exp (torch
        ``_SDPAMerger`` with ``convert_to_f32``, TE ``flash_attn_fwd_out_correction``) and in
        backward each step's ``dQ, dK, dV`` are summed in FP32 accumulators (torch
        ``_templated_ring_attention_backward``'s ``accum_dtype``, TE's FP32 ``dq``/``dkv``):
        a memory-bound ``<name>_cp_merge`` layer after the attention moving, per element of
        ``O`` (forward) and of ``Q, K, V`` (backward), ``2`` bytes of the step's BF16 result and
        ``4 + 4`` of the accumulator per step plus a final ``4 + 2`` cast:
        ``(10 cp + 6)`` bytes, one kernel per step and one cast: the fused minimum, what
        Transformer Engine's merge kernels and a ``torch.compile``-d ring (inductor fuses the
        merge's pointwise chain) move.

        PyTorch's ``context_parallel`` (stacks that are not Transformer Engine's,
        :class:`perfmodel.parallel.expert.CPImpl` ``torch``) exchanges SDPA's inputs, K and V
        already repeated to all ``heads`` (torchtitan's ``repeat_kv`` precedes SDPA): the
        all-gather and the backward's accumulators are ``heads / kv_heads`` times larger, and
        the backward passes each step's FP32 dK/dV to the next rank (``CommPoint``
        ``SENDRECV`` of ``cp`` chunks at 4 bytes; ``convert_to_f32``). Eager (unfused) it runs
        the merge as ATen operators (torch ``_SDPAMerger._merge_one``: the FP32 upcast 2 + 4,
        ``out - block_out`` 4 + 4 + 4, the sigmoid-weighted product 4 + 4, ``out - ...``
        4 + 4 + 4: 38 bytes per element and step, 6 kernels) and accumulates the gradients
        with ``+=`` (2 + 4 + 4) and the send buffer's ``torch.cat`` (4 + 4) and the K/V ``cat``
        (2 + 2): 10 bytes per query element and 22 per key/value element per step.

        Local windows (``window``, :class:`~perfmodel.workload.window.AttentionWindow`; causal
        only, and only where the window is shorter than the sequence): sliding-window and
        chunked attention compute :meth:`~perfmodel.workload.window.AttentionWindow.pairs_fraction`
        of the ``s x s`` scores instead of half, ``fwd = 2 b s^2 heads (d + d_v) x fraction``,
        and keep the same ``Q, K, V`` and log-sum-exp. The efficiency model sees the kernel as
        causal blocks of ``span = min(w, s)`` queries: ``GemmShape(span, span, d, b heads
        ceil(s / span))`` for chunks (each chunk an independent causal attention), and
        ``GemmShape(span, 2 span, d, ...)`` for a sliding window (a block of ``w`` queries
        sweeps the ``2 w`` keys from ``w`` before its first query to its last, half of them
        masked, as the diagonal of a causal kernel), so the attention tables are read at key
        length ``span`` with the causal mask; a sliding window states its span on the layer
        (:attr:`~perfmodel.workload.layers.LayerCost.sliding_window`), which, not the block's
        shape, tells the compute model to price it as a window. With context parallelism a limiting window is not
        modelled (:class:`InfeasiblePlanError`; ring attention would skip most ring steps).
        """
        a = self.act_bytes
        dv = head_dim if v_head_dim is None else v_head_dim
        frac = 0.5 if causal else 1.0
        cp = self.cp
        local = self._window(window, s, causal)
        if local is not None:
            frac = local.pairs_fraction(s)
        fwd = 2.0 * b * s * (s * cp) * heads * (head_dim + dv) * frac
        q_el = b * s * heads * head_dim
        k_el = b * s * kv_heads * head_dim
        v_el = b * s * kv_heads * dv
        o_el = b * s * heads * dv
        io = (q_el + k_el + v_el + o_el) * a
        fwd_comm: tuple[CommPoint, ...] = ()
        bwd_comm: tuple[CommPoint, ...] = ()
        if local is not None:
            gemm = _window_gemm(local, s, head_dim, b * heads)
        else:  # the whole attention, or one ring step's block (see the docstring)
            gemm = GemmShape(m=s, n=s, k=head_dim, batch=b * heads)
        torch_cp = cp > 1 and self.kernels.fusion is not Fusion.TE
        # the keys and values the context-parallel exchange moves: PyTorch's SDPA inputs are
        # already repeated to every query head
        kx_el = b * s * heads * head_dim if torch_cp else k_el
        vx_el = b * s * heads * dv if torch_cp else v_el
        if cp > 1:
            ring = float(cp * (kx_el + vx_el) * a)  # all cp chunks of K and V (all-gather output)
            fwd_comm = (CommPoint(CollectiveOp.ALLGATHER, ring, "cp"),)
            if torch_cp:  # K/V gathered again; cp permutes of the FP32 dK/dV chunk
                grads = float(cp * (kx_el + vx_el) * FP32_BYTES)
                bwd_comm = (
                    CommPoint(CollectiveOp.ALLGATHER, ring, "cp"),
                    CommPoint(CollectiveOp.SENDRECV, grads, "cp"),
                )
            else:
                bwd_comm = (
                    CommPoint(CollectiveOp.ALLGATHER, ring, "cp"),
                    CommPoint(CollectiveOp.REDUCESCATTER, ring, "cp"),
                )
        self._kernel(
            name,
            LayerKind.ATTENTION,
            fwd_flop=fwd,
            bwd_flop=2.5 * fwd,
            fwd_bytes=io + b * heads * s * 4,
            bwd_bytes=2 * io + b * heads * s * 4,
            activation_bytes=(q_el + k_el + v_el) * a + b * heads * s * 4,
            output_shape=(b, s, heads * dv),
            gemm=gemm,
            fwd_comm=fwd_comm,
            bwd_comm=bwd_comm,
            # trace (SDPA flash, GPT-2): 2 forward, 6 backward (dO.O preprocessing, the
            # main kernel, dQ accumulator conversion, layout copies); once per ring step
            kernels=2 * cp,
            bwd_kernels=6 * cp,
            ring_steps=cp,
            sliding_window=_sliding_keys(local, s),
        )
        if cp > 1:
            # bytes per element: cp merges and a final cast (see the docstring)
            eager = torch_cp and self.kernels.fusion is Fusion.EAGER
            per_f = (38.0 if eager else 10.0) * cp + 6.0
            per_q = 10.0 * cp + 6.0
            per_kv = (22.0 if eager else 10.0) * cp + 6.0
            steps = 6 if eager else 1  # kernels per step
            self._kernel(
                f"{name}_cp_merge",
                LayerKind.ELEMENTWISE,
                fwd_flop=5.0 * cp * o_el,
                bwd_flop=1.0 * cp * (q_el + kx_el + vx_el),
                fwd_bytes=per_f * o_el,
                bwd_bytes=per_q * q_el + per_kv * (kx_el + vx_el),
                output_shape=(b, s, heads * dv),
                kernels=steps * cp + 1,
                bwd_kernels=steps * cp + 1,
            )
        return (b, s, heads * dv)

    def _window(
        self, window: AttentionWindow | None, s: int, causal: bool
    ) -> AttentionWindow | None:
        """``window`` where it limits an attention over ``s`` local queries (else ``None``);
        refused without the causal mask or under context parallelism."""
        if window is None or not window.limits(s * self.cp):
            return None
        if not causal:
            raise ConfigError(
                f"a {window.label()} attention window needs the causal mask",
                value=window.size,
                where="attention window",
            )
        if self.cp > 1:
            raise InfeasiblePlanError(
                f"cp={self.cp}: context parallelism with {window.label()} attention (shorter "
                f"than the {s * self.cp}-token sequence) is not modelled; use cp=1",
                value=self.cp,
                where="cp",
            )
        return window

    def grouped_linear(
        self,
        name: str,
        rows: int,
        in_features: int,
        out_features: int,
        *,
        groups: int,
        parallel: str | None = None,
        fwd_comm: tuple[CommPoint, ...] = (),
        bwd_comm: tuple[CommPoint, ...] = (),
        casts_input: bool = False,
        shard: int | None = None,
        **marks: object,
    ) -> Shape:
        """Grouped GEMM of ``groups`` weight matrices ``in x out`` (no bias) over ``rows`` rows
        in all: the routed experts of a mixture-of-experts layer, ``rows = tokens x top_k``
        (Megatron-Core ``TEGroupedMLP``). ``parallel`` shards each matrix as :meth:`linear`.

        FLOP ``2 rows n k`` per pass (exact, whatever the routing); the GEMM shape for the
        efficiency model is ``groups`` GEMMs of ``ceil(rows / groups)`` rows (balanced routing).
        Parameters ``groups k n``: every expert's weights are held and read. ``marks`` (the
        :class:`LayerCost` fields ``expert_role``, ``experts``, ``top_k``) are stored on the layer.
        ``shard`` is the tensor-parallel degree of the matrices (default ``tp``; expert tensor
        parallelism ``etp`` for routed experts).

        >>> from perfmodel.dtypes import Precision
        >>> from perfmodel.workload._net import Net
        >>> net = Net(1, Precision.BF16)
        >>> _ = net.embedding("e", 1, 4, 10, 8)
        >>> net.grouped_linear("x", 6, 8, 16, groups=4)
        (6, 16)
        >>> la = net.layers[-1]
        >>> la.fwd_flop, la.params, la.gemm.m  # 2 x 6 x 16 x 8; 4 x 8 x 16; ceil(6 / 4)
        (1536.0, 512, 2)
        """
        tp = self.tp if shard is None else shard
        if parallel == "column":
            k, n = in_features, out_features // tp
        elif parallel == "row":
            k, n = in_features // tp, out_features
        else:
            k, n = in_features, out_features
        gemm = GemmShape(m=-(-rows // groups), n=n, k=k, batch=groups)
        flop = 2.0 * rows * n * k
        dgrad = self._needs_dgrad()
        x_el, y_el = rows * k, rows * n
        self._gemm_layer(
            name,
            LayerKind.LINEAR,
            gemm,
            params=groups * k * n,
            x_el=x_el,
            y_el=y_el,
            bias=False,
            dgrad=dgrad,
            activation_bytes=x_el * self.act_bytes,
            output_shape=(rows, n),
            fwd_comm=fwd_comm,
            bwd_comm=bwd_comm,
            bwd_kernels=2 if dgrad else 1,
            casts_input=casts_input,
            **marks,
        )
        self.layers[-1] = self.layers[-1].changed(
            fwd_flop=flop,
            bwd_input_flop=flop if dgrad else 0.0,
            bwd_weight_flop=flop,
        )
        return (rows, n)

    def embedding(
        self,
        name: str,
        b: int,
        s: int,
        num: int,
        dim: int,
        *,
        parallel: bool = False,
        fwd_comm: tuple[CommPoint, ...] = (),
        indices: int | None = None,
    ) -> Shape:
        """Lookup table of ``num x dim``; forward gathers ``b s`` rows, backward scatter-adds into
        the dense gradient (written whole). ``parallel``: vocabulary split over ``tp``
        (Megatron ``VocabParallelEmbedding``; an all-reduce sums the partial lookups).

        ``indices``: distinct index entries looked up (default ``b s``; learned positions use
        ``s``, broadcast over the batch). PyTorch's ``embedding_dense_backward`` takes a direct
        path for at most 3072 indices and otherwise sorts them (``aten/src/ATen/native/cuda/
        Embedding.cu``): 2 backward kernels against 32 in the GPT-2 trace (8192 indices).
        """
        rows = num // self.tp if parallel else num
        params = rows * dim
        a, p = self.act_bytes, self.param_bytes
        el = b * s * dim
        self._first_weight_layer = False  # token ids need no gradient; later layers do
        self._add(
            LayerCost.built(
                name=name,
                kind=LayerKind.EMBEDDING,
                fwd_flop=0.0,
                bwd_input_flop=0.0,
                bwd_weight_flop=float(el),
                params=params,
                fwd_bytes=el * (a + p) + b * s * 8,
                bwd_bytes=el * a + params * p,
                activation_bytes=b * s * 8.0,  # int64 indices
                output_shape=(b, s, dim),
                fwd_comm=fwd_comm,
                block=self.block,
                bwd_kernels=2 if (b * s if indices is None else indices) <= 3072 else 32,
            )
        )
        return (b, s, dim)


__all__ = ["AttentionLayers"]
