"""Memory of one pipeline stage (:func:`stage_memory`): weights, gradients, optimizer state,
activations of the micro-batches in flight, workspace, communication buffers and non-trainable
buffers, each as the step's recipe keeps them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from perfmodel._memo import keep
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.expert import CPImpl
from perfmodel.parallel.lowering import Chunk, _elements, cp_gathered_kv_bytes, expert_params
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.plan import (
    ParallelismPlan,
    Recompute,
)
from perfmodel.parallel.recipe import (
    Recipe,
    default_recipe,
    fp8_saved_input_delta,
)
from perfmodel.parallel.schedule import ChunkState
from perfmodel.workload.layers import (
    LayerCost,
    LayerKind,
    Workload,
    distinct_layers,
    layer_runs,
    runs_sum,
)
from perfmodel.workload.memory import FRAGMENTATION, ModuleRecompute, Optimizer


def tied_embedding_params(layers: Sequence[LayerCost]) -> int:
    """Parameters of an output layer whose weight is tied to the input word embedding.

    The zoo's language-model heads (``lm_head``) count no weight of their own when tied
    (``perfmodel.workload.zoo.transformer._lm_head_and_loss``): their GEMM is ``gemm.k x gemm.n``
    larger than their ``params``. With pipelining the last stage keeps its own copy of that
    matrix, kept in sync by an all-reduce of its gradient with the first stage (Megatron-LM
    ``_allreduce_embedding_grads``; Narayanan et al. SC21). 0 when untied.

    A stack's copies of a block (:func:`~perfmodel.workload.layers.layer_runs`) are read as
    their block: a copy's name is its block's with another ``layer<i>.`` prefix, and whether a
    name ends with ``lm_head`` (no digit, no dot) does not depend on that prefix.
    """
    for la in distinct_layers(layers):
        if la.name.endswith("lm_head") and la.gemm is not None:
            full = la.gemm.k * la.gemm.n
            if la.params < full:
                return int(full)
    return 0


def stage_buffer_bytes(workload: Workload, layers: Sequence[LayerCost]) -> float:
    """Bytes of non-trainable buffers held by a stage made of ``layers``.

    ``Workload.buffers`` (FP32 batch-norm running mean and variance, 4 bytes each) is split over
    the normalisation layers in proportion to their parameters: a batch norm over ``C`` channels
    has ``2 C`` parameters and ``2 C`` buffers, so the share is exact for batch-norm networks;
    layer norms (no buffers) belong to workloads whose ``buffers`` is 0.
    """
    if not workload.buffers:
        return 0.0
    total = sum(la.params for la in workload.layers if la.kind is LayerKind.NORM)
    if total <= 0:
        return 0.0
    mine = sum(la.params for la in layers if la.kind is LayerKind.NORM)
    return 4.0 * workload.buffers * mine / total


def block_count(layers: Sequence[LayerCost]) -> int:
    """Transformer blocks of ``layers`` (a stack's copies counted), e.g. 32 for Llama-3-8B."""
    return sum(
        n * len({la.block for la in p if la.block is not None}) for p, n in layer_runs(layers)
    )


def offloaded_activation_bytes(
    layers: Sequence[LayerCost], blocks: int, act_bytes: float, fp8_inputs: bool = False
) -> float:
    """Saved-activation bytes of one micro-batch that activation CPU offloading keeps in host
    memory: those of ``blocks`` of the ``layers``' transformer blocks, each block the mean of
    the stack's (exact where the blocks are alike).

    Transformer Engine's ``get_cpu_offload_context`` (v2.10-v2.12 ``transformer_engine/pytorch/
    cpu_offload.py``, ``_init_offload_synchronization_dicts``; Megatron-Core passes
    ``cpu_offloading_num_layers`` to it, ``megatron/core/transformer/transformer_block.py``)
    offloads layers ``0 .. n - 1`` and times each copy back so that the saved activations
    peak at ``(num_layers - n) x T`` for layers of ``T`` bytes each: the offloaded blocks'
    activations leave the GPU's peak; the rest of the step (embedding, loss, workspace) stays.
    ``fp8_inputs``: the blocks' linear layers save FP8 inputs (:func:`fp8_saved_input_delta`).
    The copies run on their own stream beside compute; what they do not hide is charged in
    time (:func:`perfmodel.parallel.offload.offload_stalls_s`).

    >>> from perfmodel.workload.zoo import build_model
    >>> w = build_model("llama", batch_size=1, hidden=64, layers=4, heads=4, kv_heads=2,
    ...                 ffn_hidden=128, vocab=100, seq_len=8, precision="bf16")
    >>> one = sum(la.activation_bytes for la in w.layers if la.block == 0)
    >>> offloaded_activation_bytes(w.layers, 3, 2) == 3 * one
    True

    Raises
    ------
    ConfigError
        ``blocks`` not fewer than the stack's blocks (Megatron-Core refuses
        ``cpu_offloading_num_layers >= num_layers``).
    """
    if blocks <= 0:
        return 0.0
    total = block_count(layers)
    if blocks >= total:
        raise ConfigError(
            f"activation_offload_layers={blocks} must be fewer than the model's {total} "
            "transformer blocks (Megatron-Core: CPU offloading only for layers less than "
            "num_layers)",
            value=blocks,
            where="--software-option activation_offload_layers",
        )
    kept = float(runs_sum(layers, lambda la: la.activation_bytes if la.block is not None else 0.0))
    if fp8_inputs:
        kept += fp8_saved_input_delta(layers, act_bytes)
    return kept * blocks / total


def stage_memory(
    chunks: Sequence[Chunk],
    *,
    plan: ParallelismPlan,
    costs: Costs,
    optimizer: Optimizer,
    in_flight: int,
    capacity_bytes: float,
    comm_buffer_bytes: float,
    replicas_on_gpu: int = 1,
    buffer_bytes: float = 0.0,
    recipe: Recipe | None = None,
    tied_params: float = 0.0,
    moments: Sequence[tuple[ChunkState, ...]] | None = None,
    microbatches: int | None = None,
) -> PlanMemory:
    """Per-GPU memory of one pipeline stage, a sum of parts.

    The pieces are ``perfmodel.workload.memory``'s (ZeRO bytes per parameter, activations per
    recomputation setting, CUDA context + library workspace + fragmentation), composed here with
    the plan: ``in_flight`` is the schedule's peak number of live (micro-batch, chunk) activation
    sets (:func:`perfmodel.parallel.schedule.peak_in_flight`), each the mean over the stage's
    chunks; ZeRO stage 1/2/3 (and FSDP) shard optimizer state (with its master weights),
    gradients and weights over ``dp``; with Crossbow every learner keeps its own model state.
    ``buffer_bytes`` are the stage's non-trainable buffers (batch-norm running statistics, see
    :func:`stage_buffer_bytes`); they count with the weights, as in
    :func:`perfmodel.workload.memory.memory_breakdown`, and are never sharded.

    Model-state bytes are the ``recipe``'s (:meth:`Recipe.model_state_bytes`; ``None``: the
    recipe of the plain half-model stack, :func:`default_recipe`). With full recomputation each
    in-flight micro-batch keeps its block inputs, and one recompute working set (the largest
    block's activations) is live at a time for the whole stage; with torchtitan's op-level
    selective checkpointing (:meth:`SelectiveRecompute.kept_bytes`) each also keeps the outputs
    the policy saves, and the working set is what the cache does not hold. With activation CPU
    offloading (:attr:`Recipe.activation_offload_layers`, no recomputation) the offloaded
    blocks' saved activations are not held (:func:`offloaded_activation_bytes`). The optimizer
    state is the recipe's dtype (:attr:`Recipe.optimizer_dtype`) and its master copy the
    stack's rule (:class:`~perfmodel.parallel.stack_choices.MasterCopy`). ``tied_params`` are
    the last pipeline stage's copy of a tied word embedding (:func:`tied_embedding_params`),
    held like its own weights.

    Workspace: the CUDA context and library workspaces, the largest transient (a layer's output
    with its gradient, or the loss's backward per the recipe's
    :class:`~perfmodel.parallel.recipe.CrossEntropy`), context parallelism's gathered K/V and,
    sharded (ZeRO-3/FSDP), the gathered weights: two units (the one computing and the one
    prefetched) or, FSDP2 pipelined by ``torch.distributed.pipelining``, the whole stage's
    weights and its unsharded gradients (``PipelineStage.backward_maybe_with_nosync`` turns
    ``set_reshard_after_backward`` and ``set_requires_gradient_sync`` off for every backward but
    the last, PyTorch 2.5-2.6 ``torch/distributed/pipelining/stage.py``; FSDP2's
    ``FSDPParam.to_accumulated_grad_if_needed`` keeps the accumulated gradient in
    ``reduce_dtype``); then fragmentation over the total.

    ``moments`` (:func:`~perfmodel.parallel.schedule.chunk_moments`, pipelined callers) with
    several chunks or :attr:`Recipe.gather_per_step`: their peak of each chunk's activations at
    its own live count (and FSDP2's windows, kept outputs and receive buffers: one per the step's
    ``microbatches``, required there, :func:`_moment_peak`) replaces ``in_flight`` x the mean.
    """
    prec = costs.precision
    rc = recipe or default_recipe(plan, prec, optimizer)
    st = _STATIC.of(chunks, (plan, rc, prec), (tied_params, buffer_bytes, replicas_on_gpu))
    gathered = None  # the peak moment's gathered weights and gradients (pipelined FSDP2)
    if moments is not None:  # the callers pass them for several chunks or FSDP2 windows
        acts, gathered = _moment_peak(st, moments, rc, microbatches)
    else:
        acts = in_flight * sum(st.kept) / len(st.kept) + st.working
        acts += in_flight * sum(st.ce_parts) / len(chunks)
    ws = st.ws if gathered is None or not rc.gather_per_step else st.ws_base + gathered
    weights = st.weights
    subtotal = weights + st.grads + st.state + acts + ws + comm_buffer_bytes
    ws += FRAGMENTATION * subtotal
    return PlanMemory(
        weights_bytes=weights,
        grads_bytes=st.grads,
        optimizer_bytes=st.state,
        activations_bytes=acts,
        workspace_bytes=ws,
        comm_buffers_bytes=comm_buffer_bytes,
        capacity_bytes=capacity_bytes,
    )


class _Static(NamedTuple):
    """What :func:`stage_memory` reads off a stage's chunks and recipe alone, before the
    schedule's moments (:func:`_static_parts`); bytes."""

    weights: float
    grads: float
    state: float
    kept: list[float]
    working: float
    ce_parts: list[float]
    ws_base: float
    """Context, library workspace, the largest transient and context parallelism's K/V."""
    ws: float
    """``ws_base`` plus the sharded weights' workspace where no moment says what is gathered."""
    per_mb: list[float]
    """Per chunk, ``kept + ce_parts``: one micro-batch's saved activations."""
    outs: list[float]
    """Pipelined FSDP2 (else empty, as ``gat``, ``red`` and ``recv``): per chunk, one
    micro-batch's output (:func:`chunk_output_bytes`)."""
    gat: list[float]
    """Per chunk, its gathered weights (the last chunk's with the tied copy)."""
    red: list[float]
    """Per chunk, its unsharded gradients (the last chunk's with the tied copy)."""
    recv: list[tuple[float, float]]


def _static_parts(
    chunks: Sequence[Chunk],
    plan: ParallelismPlan,
    rc: Recipe,
    prec: Precision,
    held: tuple[float, float, int],
) -> _Static:
    """:func:`stage_memory`'s parts that the schedule's moments do not change: model state,
    per-chunk activations of one micro-batch, workspace and (pipelined FSDP2) the chunks'
    outputs and receive buffers (:func:`_moment_peak`); ``held``: the stage's
    ``(tied_params, buffer_bytes, replicas_on_gpu)``."""
    from perfmodel.workload import memory as wmem

    tied_params, buffer_bytes, replicas_on_gpu = held

    # a stack's copies of a block read as the block (their shapes and collectives are its)
    layers = [la for c in chunks for la in distinct_layers(c.layers)]
    params = float(sum(c.params for c in chunks)) + tied_params
    expert = float(sum(expert_params(c.layers) for c in chunks))
    weights, grads, state = rc.model_state_bytes(params - expert, plan.grad_replicas)
    if expert:  # routed experts: sharded over the expert data-parallel group (HSDP: its share)
        ew, eg, es = rc.expert_state_bytes(expert, plan)
        weights, grads, state = weights + ew, grads + eg, state + es
    # FP8 weight caches (Transformer Engine keeps each FP8 weight and its transpose)
    stored = float(rc.param_bytes) if rc.fp8_params else 0.0
    weights += sum(
        wmem.fp8_weight_cache_bytes(c.layers, rc.fp8, replaces_bytes=stored) for c in chunks
    )
    weights = (weights + buffer_bytes) * replicas_on_gpu
    grads *= replicas_on_gpu
    state *= replicas_on_gpu
    kept, working = _activation_parts(chunks, plan, rc, prec)
    act_b = prec.activation_bytes
    ce = rc.cross_entropy
    ce_parts = [ce.saved_delta_bytes(c.layers, act_b) for c in chunks]
    # the largest of the same products over the distinct shapes (a stack repeats a few); a loss
    # that writes the logits' gradient in place makes no pair of the LM head's output size
    shapes = {
        la.output_shape for la in layers if not (ce.logits_in_place and la.name.endswith("lm_head"))
    }
    peak_layer = max((2.0 * _elements(shape) * act_b for shape in shapes), default=0.0)
    # the loss's backward transient and the largest layer pair come at different moments
    peak_layer = max(peak_layer, rc.cross_entropy.transient_bytes(layers))
    ws = wmem.CUDA_CONTEXT_BYTES + wmem.LIBRARY_WORKSPACE_BYTES + peak_layer
    ws += cp_gathered_kv_bytes(layers, plan, CPImpl.for_fusion(rc.fusion))
    base = ws
    if rc.gather_per_step:
        # FSDP2 under torch.distributed.pipelining: every backward but the step's last runs
        # with reshard_after_backward and requires_gradient_sync off, so the stage's weights
        # stay gathered and its gradients accumulate unsharded, upcast to reduce_dtype (the
        # whole stage's where no moment says which chunk's: :func:`_moment_peak`)
        ws += params * (rc.gather_bytes + rc.grad_reduce_bytes)
    elif rc.sharding.stage >= 3:
        biggest = max(s.params for c in chunks for s in c.segments)
        ws += 2 * biggest * rc.gather_bytes  # gathered unit + one prefetched
    per_mb = [k + e for k, e in zip(kept, ce_parts, strict=True)]
    outs: list[float] = []
    gat: list[float] = []
    red: list[float] = []
    recv: list[tuple[float, float]] = []
    if rc.gather_per_step:
        outs = [chunk_output_bytes(c, act_b) for c in chunks]
        recv = [receive_buffer_bytes(c, act_b, o) for c, o in zip(chunks, outs, strict=True)]
        per_chunk = [float(c.params) for c in chunks]
        per_chunk[-1] += tied_params
        gat = [p * rc.gather_bytes for p in per_chunk]
        red = [p * rc.grad_reduce_bytes for p in per_chunk]
    return _Static(
        weights, grads, state, kept, working, ce_parts, base, ws, per_mb, outs, gat, red, recv
    )


class _StaticMemo:
    """The door of :data:`STATIC_PARTS`: :func:`_static_parts` kept for the stages of one
    lowering whose chunks are read off the same chunks.

    Exact: a chunk's :attr:`~perfmodel.parallel.lowering.Chunk.values_of` (or the chunk
    itself) names its shape: a chunk read off another (:func:`~perfmodel.parallel.lowering.
    _shifted_chunk`) holds the same offset in the stack's block and as many layers, so its
    segments are the other's (at other layer ids) and its layers are
    copies of the other's (equal in every field but ``name`` and ``block``), in the same
    :func:`~perfmodel.workload.layers.layer_runs` pieces. :func:`_static_parts` reads a
    layer's name only through its last part (``lm_head``, a module's part name: the same in
    every copy) or its first (``layer<i>``, to group one block's layers) and its block only
    by equality between layers of one chunk (the same grouping in a copy); so two stages
    whose chunks name the same shapes, in order, under the same plan, recipe and precision,
    with the same tied copy, buffers and replicas, get the same floats, summed in the same
    order. Kept: the one context (plan, recipe, precision) last asked, read and replaced as
    one object with its entries (a thread never reads another context's), and the named
    chunks with each entry (so their ids stay theirs), at most :attr:`SIZE` entries.
    """

    #: Entries kept (stage shapes of one context: a pipeline has at most three distinct ones,
    #: first, middle and last, per chunk count, so 64 covers any plan's and a few relowerings).
    SIZE = 64

    def __init__(self) -> None:
        self.state: tuple[tuple[object, ...], dict[tuple[object, ...], tuple[_Static, tuple]]]
        self.state = ((), {})

    def of(
        self,
        chunks: Sequence[Chunk],
        context: tuple[ParallelismPlan, Recipe, Precision],
        held: tuple[float, float, int],
    ) -> _Static:
        """:func:`_static_parts` of ``chunks`` under ``context`` (plan, recipe, precision)
        with ``held`` (tied copy, buffers, replicas), kept (:data:`STATIC_PARTS`)."""
        plan, rc, prec = context
        if not STATIC_PARTS:
            return _static_parts(chunks, plan, rc, prec, held)
        ctx, entries = self.state
        if len(ctx) != 3 or ctx[0] is not plan or ctx[1] is not rc or ctx[2] is not prec:
            entries = {}
            self.state = (context, entries)
        shapes = tuple([c.values_of or c for c in chunks])
        key = (*map(id, shapes), held)
        hit = entries.get(key)
        if hit is None:
            hit = (_static_parts(chunks, plan, rc, prec, held), shapes)
            keep(entries, key, hit, self.SIZE)
        return hit[0]


#: Whether :func:`stage_memory` reads a stage's moment-free parts off an earlier stage whose
#: chunks name the same shapes (:class:`_StaticMemo`); ``False``: computed for every stage
#: (the reference; tests compare both ways).
STATIC_PARTS = True

_STATIC = _StaticMemo()


def _activation_parts(
    chunks: Sequence[Chunk],
    plan: ParallelismPlan,
    rc: Recipe,
    prec: Precision,
) -> tuple[list[float], float]:
    """Saved activations of one micro-batch of each of the stage's chunks (bytes), as the
    plan's recomputation keeps them: Megatron-Core's ``recompute_modules`` (what each module
    frees), full or op-level selective checkpointing (the kept inputs), or the layers' saved
    tensors (less what CPU offloading moves out); and the working set live once for the stage
    (the largest chunk's recompute working set; 0 without recomputation).
    """
    from perfmodel.workload import memory as wmem

    policy = rc.selective_recompute
    op_sac = plan.recompute is Recompute.SELECTIVE and policy.checkpoints_blocks
    modules = plan.recompute is Recompute.SELECTIVE and isinstance(policy, ModuleRecompute)
    if modules:  # Megatron-Core recompute_modules: what each module frees
        assert isinstance(policy, ModuleRecompute)
        parts = [policy.kept_bytes(c.layers, prec) for c in chunks]
        if rc.fp8_saves_fp8_inputs:  # FP8 inputs of the linears whose inputs stay kept

            def freed(la: LayerCost) -> bool:  # a linear's saved input (MLA: attention only)
                return policy.dropped_bytes(la, mla=False) >= la.activation_bytes > 0

            parts = [
                (k + fp8_saved_input_delta(c.layers, prec.activation_bytes, freed), w)
                for c, (k, w) in zip(chunks, parts, strict=True)
            ]
        return [k for k, _ in parts], max(w for _, w in parts)
    if plan.recompute is Recompute.FULL or op_sac:
        parts = [
            rc.selective_recompute.kept_bytes(c.layers, prec)
            if op_sac
            else wmem.full_recompute_bytes(c.layers, prec)
            for c in chunks
        ]
        return [k for k, _ in parts], max(w for _, w in parts)
    per_chunk = [
        wmem.activation_bytes(c.layers, plan.recompute, precision=prec)
        + (
            fp8_saved_input_delta(c.layers, prec.activation_bytes)
            if rc.fp8_saves_fp8_inputs
            else 0.0
        )
        for c in chunks
    ]
    if rc.activation_offload_layers:  # pp = 1 (build_recipe checks): one chunk
        per_chunk = [
            a
            - offloaded_activation_bytes(
                c.layers,
                rc.activation_offload_layers,
                prec.activation_bytes,
                rc.fp8_saves_fp8_inputs,
            )
            for a, c in zip(per_chunk, chunks, strict=True)
        ]
    return per_chunk, 0.0


def chunk_output_bytes(chunk: Chunk, act_bytes: float) -> float:
    """Bytes of one micro-batch's output of ``chunk`` as its pipeline stage returns it: the
    last layer's output at ``act_bytes`` per element, or, for the model's last chunk, the LM
    head's logits (the loss is computed outside the stage's module: ``torch.distributed.
    pipelining`` applies the schedule's ``loss_fn`` to the stage's output, torchtitan 9dec370
    ``train.py``)."""
    layers = chunk.layers
    if not len(layers):
        return 0.0
    last = layers[-1]
    if last.kind is LayerKind.LOSS and len(layers) > 1:
        last = layers[-2]
    return _elements(last.output_shape) * act_bytes


def receive_buffer_bytes(chunk: Chunk, act_bytes: float, output: float) -> tuple[float, float]:
    """``(input, gradient)``: bytes of one micro-batch's forward receive buffer of ``chunk`` and
    of its gradient receive buffer under ``torch.distributed.pipelining``.

    ``PipelineStage._prepare_forward_infra`` makes, once (the schedule's first ``step()``),
    one receive buffer per micro-batch of the step for every stage but the model's first
    (``for chunk_id in range(num_microbatches): ... _make_tensor_from_meta(inp, self.device)``,
    ``args_recv_info[chunk_id]``), and ``_prepare_backward_infra`` one gradient receive buffer
    per micro-batch for every stage but the last (``self.grad_recv_info[mb_index] =
    self._create_grad_recv_info(...)``, each ``_make_tensor_from_meta(self.get_outputs_meta()[
    idx])``); neither is ever freed (PyTorch ``torch/distributed/pipelining/stage.py`` as
    stored here, 0138610, newer than the 1963fc8 of 2024-12-23 the torchtitan rows ran, which
    could not be read here: the loops are taken as unchanged since). The input is
    the chunk's first block's input (:func:`~perfmodel.workload.memory.
    first_block_input_elements`: 0 for the model's first chunk, which starts with the
    embedding), the gradient the chunk's output (:func:`chunk_output_bytes`; 0 for the model's
    last chunk, the one with the loss), both at ``act_bytes`` per element; ``output``: the
    chunk's :func:`chunk_output_bytes`, which the caller computes once per stage.
    """
    from perfmodel.workload.memory import first_block_input_elements

    inp = first_block_input_elements(layer_runs(chunk.layers)) * act_bytes
    layers = chunk.layers
    last = bool(len(layers)) and layers[-1].kind is LayerKind.LOSS
    return float(inp), 0.0 if last else output


def _moment_peak(
    st: _Static,
    moments: Sequence[tuple[ChunkState, ...]],
    rc: Recipe,
    m: int | None,
) -> tuple[float, float]:
    """The stage's activations and, under pipelined FSDP2, its gathered weights with its
    unsharded gradients (bytes) at the schedule moment where their sum peaks.

    Every chunk's saved activations count with that chunk's own live micro-batches:
    ``sum_c n_c(t) (kept_c + ce_c) + working`` at moment ``t``
    (:func:`~perfmodel.parallel.schedule.chunk_moments`). ``torch.distributed.pipelining``
    keeps each (chunk, micro-batch)'s inputs and output in ``fwd_cache`` until that
    micro-batch's backward of that chunk (PyTorch 1963fc8, 2024-12-23, the 2.6
    development line: ``torch/distributed/pipelining/stage.py`` ``forward_one_chunk`` /
    ``backward_one_chunk``); Megatron-Core's
    interleaved schedule does the same per model chunk (Megatron-LM 4415119 ``megatron/core/
    pipeline_parallel/schedules.py`` ``forward_backward_pipelining_with_interleaving``:
    ``forward_step_helper_postprocess`` L1262-1264 appends to ``output_tensors[
    model_chunk_id]``, ``backward_step_helper_preprocess`` L1311-1325 pops that chunk's
    ``input_tensors`` and ``output_tensors``). So the last stage of an interleaved plan
    holds its LM head's saved tensors once per in-flight micro-batch of its last chunk, not
    the chunks' mean times the stage's in-flight count.

    Under ``torch.distributed.pipelining`` with FSDP2 (:attr:`Recipe.gather_per_step`),
    ``PipelineScheduleMulti`` runs each stage's backward with ``last_backward`` set by that
    stage's own backward counter, and ``PipelineStage.backward_maybe_with_nosync`` calls the
    FSDP post-backward (``reshard`` and the gradients' reduce-scatter) only then (PyTorch
    1963fc8 ``torch/distributed/pipelining/schedules.py`` ``PipelineScheduleMulti.
    _step_microbatches`` ``backward_counter``; ``stage.py`` ``backward_maybe_with_nosync``
    ``run_post_backward``): a chunk's weights stay gathered from its first forward
    (``reshard_after_forward`` off with PP, torchtitan 9dec370 ``torchtitan/parallelisms/
    parallelize_llama.py`` L326-329, as at 820504e) to its last
    backward, ``params_c x gather_bytes``, and its unsharded gradients (``reduce_dtype``)
    from its first backward to its last, ``params_c x grad_reduce_bytes``; the tied copy
    (``tied_params``) is the last chunk's. And before PyTorch PR #153383 (May 2025, after
    the torch 1963fc8 the torchtitan rows ran) ``forward_one_chunk`` appended
    every micro-batch's output to ``output_chunks`` on every stage, cleared at the next
    ``step()``: ``done_c(t) x`` :func:`chunk_output_bytes` more, the last stage's the LM
    head's logits.

    The same stacks hold every chunk's receive buffers (:func:`receive_buffer_bytes`) for all
    ``m`` micro-batches of the step (the most forwards run at any moment: every forward is
    one, :func:`~perfmodel.parallel.schedule.chunk_moments` with windows):
    ``(m - n_c(t)) x in_c`` of the forward ones beyond the
    in-flight micro-batches' inputs (those are the saved activations' block inputs, counted
    above) and ``m x grad_c``; and each finished backward leaves its input's gradient in the
    buffer's ``.grad`` (``_backward.py`` ``stage_backward`` runs ``torch.autograd.backward``
    and reads ``val.grad``, at 060ca5d, of the 2024 line, with no ``val.grad = None`` after it,
    which later PyTorch adds; ``stage.py`` ``clear_runtime_states`` sets ``a.buffer.grad =
    None`` only at the next ``step()``): ``(done_c(t) - n_c(t)) x in_c`` more. A finished
    backward thus trades its saved set (``kept_c + ce_c``, which holds its input) for two
    input-sized tensors, so a stage's memory can grow along the cool-down's backwards (a chunk
    of one block under full recomputation: ``kept_c + ce_c < 2 in_c``):
    :func:`~perfmodel.parallel.schedule.chunk_moments` keeps the ends of the cool-down's runs
    of one chunk's backwards too (final20e's brute force over every operation's state).

    ``act_b``: bytes per activation element (the outputs'); ``m``: the step's micro-batches
    (read under FSDP2 only, where ``None`` is refused: no default count is right). Returns
    ``(activations, gathered)``, the first with the kept outputs and the receive buffers
    (:func:`moments_peak`).
    """
    if not rc.gather_per_step:
        if LIVE_PEAK:
            return _live_peak(moments, st.working, st.per_mb), 0.0
        n = len(st.per_mb)
        zeros = [0.0] * n
        return moments_peak(
            moments, 0, st.working, st.per_mb, zeros, zeros, zeros, [(0.0, 0.0)] * n
        )
    if m is None:
        raise TypeError("stage_memory: pipelined FSDP2 moments need the step's microbatches")
    return moments_peak(moments, m, st.working, st.per_mb, st.outs, st.gat, st.red, st.recv)


#: Whether :func:`_moment_peak` without pipelined FSDP2 sums only the live sets
#: (:func:`_live_peak`) instead of :func:`moments_peak`'s every term; tests compare both.
LIVE_PEAK = True


def _live_peak(
    moments: Sequence[tuple[ChunkState, ...]], working: float, per_mb: Sequence[float]
) -> float:
    """:func:`moments_peak`'s activations where only the live sets weigh (``m = 0``, every
    chunk's output, gathered weights, gradients and receive buffers 0): ``working +
    sum_c n_c a_c`` at the moment where it is the largest; ``held`` is then 0.

    Bit for bit :func:`moments_peak`'s: its other terms are products with ``0.0`` (``+0.0``
    or ``-0.0``), and adding them to ``n_c a_c`` or to the running sum (never ``-0.0``: it
    starts at ``working >= 0``) leaves either as it is; its moment of the largest
    ``acts + 0.0`` is the first of the largest ``acts``."""
    best, out = -1.0, 0.0
    if len(per_mb) == 2:  # two chunks (interleaving's usual count): the same sum, unrolled
        a0, a1 = per_mb
        for s0, s1 in moments:
            acts = working + s0[0] * a0 + s1[0] * a1
            if acts > best:
                best = out = acts
        return out
    for t in moments:
        acts = working
        for state, a in zip(t, per_mb, strict=True):
            acts += state[0] * a
        if acts > best:
            best = out = acts
    return out


def moments_peak(
    moments: Sequence[tuple[ChunkState, ...]],
    m: int,
    working: float,
    per_mb: Sequence[float],
    outs: Sequence[float],
    gat: Sequence[float],
    red: Sequence[float],
    recv: Sequence[tuple[float, float]],
) -> tuple[float, float]:
    """``(activations, held)`` (bytes) at the moment of ``moments`` where their sum is the
    largest (the first such), :func:`_moment_peak`'s sum: at a moment of per-chunk states
    ``(n_c, gathered_c, grads_c, done_c)``, activations ``working + sum_c n_c a_c + done_c o_c
    + (m - n_c + done_c - n_c) ri_c + m rg_c`` and held ``sum_c [gathered_c] g_c + [grads_c]
    r_c``, for ``a = per_mb``, ``o = outs``, ``g = gat``, ``r = red``, ``(ri, rg) = recv``, per
    chunk."""
    # per chunk the loop's invariants, the same floats: m rg, and the held sum of each
    # (gathered, grads) pair, [gathered][grads]
    per_chunk = [
        (a, o, ri, m * rg, ((0.0 + 0.0, 0.0 + r), (g + 0.0, g + r)))
        for a, o, g, r, (ri, rg) in zip(per_mb, outs, gat, red, recv, strict=True)
    ]
    best, out = -1.0, (0.0, 0.0)
    if len(per_chunk) == 2:  # two chunks (interleaving's usual count): the same sums, unrolled
        (a0, o0, ri0, mrg0, h0), (a1, o1, ri1, mrg1, h1) = per_chunk
        for (l0, g0, r0, d0), (l1, g1, r1, d1) in moments:
            acts = working + (l0 * a0 + d0 * o0)
            acts += (m - l0 + d0 - l0) * ri0 + mrg0
            acts += l1 * a1 + d1 * o1
            acts += (m - l1 + d1 - l1) * ri1 + mrg1
            held = 0.0 + h0[g0][r0] + h1[g1][r1]
            if acts + held > best:
                best, out = acts + held, (acts, held)
        return out
    for t in moments:
        acts = working
        held = 0.0
        for (live, gathered, grads, done), (a, o, ri, mrg, h) in zip(t, per_chunk, strict=True):
            acts += live * a + done * o
            acts += (m - live + done - live) * ri + mrg  # receive buffers, kept .grad
            held += h[gathered][grads]
        if acts + held > best:
            best, out = acts + held, (acts, held)
    return out
