"""Lowering a plan to a :class:`~perfmodel.parallel.taskgraph.TaskGraph`.

What is simulated (speed rules, see ``docs/predict.md``):

* **One representative per symmetric group.** Data-parallel replica 0 and tensor-parallel rank 0
  of every pipeline stage are simulated; other replicas and TP ranks do the same work at the same
  time. Their communication is not ignored: collectives name their *sibling* groups (the same
  collective run by the other TP ranks' DP groups, the other TP ranks' pipeline sends) so that
  shared links (NICs, PCIe switches) slow everyone, in the flow simulation and in the analytic
  sharing factor.
* **Coarsening.** A model chunk (the layers of one pipeline stage, or of one interleaved chunk)
  is one task per micro-batch and phase. It is split into *segments* only where overlap inside it
  matters: gradient buckets during the last micro-batch's backward (DDP/Horovod overlap) and
  ZeRO-3/FSDP units (parameter all-gather prefetch).
* **TP collectives** (Megatron all-reduce / sequence-parallel all-gather + reduce-scatter) are on
  the critical path of the compute stream, as in Megatron-LM, and appear as exposed ``tp`` time,
  unless the recipe overlaps them (Megatron-Core ``tp_comm_overlap``: a ``tp`` stream beside the
  GEMMs).
* **Overlapped communication slows compute** by ``preset.overlap_compute_slowdown`` times the
  communication time that runs under a compute segment (at most the segment).
* **Precision and overlap** come from the step's :class:`~perfmodel.parallel.recipe.Recipe`.

This module holds the pieces (partition, chunks and segments, memory); the emitters are
:mod:`perfmodel.parallel.lower_pipeline` (all-reduce, ZeRO/FSDP, TP, PP schedules, Krizhevsky's
hybrid) and :mod:`perfmodel.parallel.lower_dp_variants` (one function per other data-parallel
mode); :func:`lower` dispatches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from perfmodel.errors import InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import DPMode, Hybrid, ParallelismPlan, Recompute
from perfmodel.parallel.recipe import Recipe, build_recipe, default_recipe
from perfmodel.parallel.software import SoftwarePreset
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskGraph, TaskKind
from perfmodel.workload.layers import LayerCost, LayerKind, Workload
from perfmodel.workload.memory import Optimizer, is_selectively_recomputed


@dataclass(frozen=True)
class Segment:
    """Consecutive layers of a chunk lowered as one task (times for one micro-batch)."""

    layers: tuple[int, ...]
    fwd_s: float
    bwd_s: float
    recompute_s: float
    tp_fwd_s: float
    tp_bwd_s: float
    params: int
    activation_bytes: float
    flop: float
    dp_params: int = 0  # parameters replicated over data parallelism (gradients all-reduced)


@dataclass(frozen=True)
class Chunk:
    """One model chunk (a stage's layers; with interleaving, one of its ``v`` chunks)."""

    segments: tuple[Segment, ...]
    out_bytes: float
    in_bytes: float
    blocks: int
    layers: tuple[LayerCost, ...] = ()

    @property
    def fwd_s(self) -> float:
        return sum(s.fwd_s + s.tp_fwd_s for s in self.segments)

    @property
    def bwd_s(self) -> float:
        return sum(s.bwd_s + s.recompute_s + s.tp_bwd_s for s in self.segments)

    @property
    def params(self) -> int:
        return sum(s.params for s in self.segments)

    @property
    def activation_bytes(self) -> float:
        return sum(s.activation_bytes for s in self.segments)


@dataclass(frozen=True)
class LoweredStep:
    """The task graph of one training step plus what reports need.

    Attributes
    ----------
    graph
        Tasks of the simulated representatives.
    memory
        Per-GPU memory of each pipeline stage (the worst decides ``fits``).
    samples_per_step
        Global samples per step (all replicas).
    model_flop_per_step
        Model FLOP of one step over all GPUs (forward + backward, no recomputation).
    num_gpus
        GPUs the plan occupies.
    min_period_s
        Lower bound on the step period from a shared server (asynchronous SGD parameter server
        capacity); 0 when none.
    staleness
        Asynchronous SGD: distribution ``{staleness: probability}``; empty otherwise.
    tokens_per_sample
        Tokens in one sample (the workload's sequence length; 1 for non-sequence models).
    """

    graph: TaskGraph
    memory: tuple[PlanMemory, ...]
    samples_per_step: int
    model_flop_per_step: float
    num_gpus: int
    min_period_s: float = 0.0
    staleness: dict[int, float] = field(default_factory=dict)
    tokens_per_sample: int = 1


# --------------------------------------------------------------------------- partitioning


def _units(layers: Sequence[LayerCost]) -> list[list[int]]:
    """Runs of consecutive layers with the same ``block`` (``None`` runs are their own unit)."""
    units: list[list[int]] = []
    prev: object = object()
    for i, layer in enumerate(layers):
        if units and layer.block == prev:
            units[-1].append(i)
        else:
            units.append([i])
        prev = layer.block
    return units


def partition(
    workload: Workload,
    k: int,
    unit_cost: Sequence[float],
    *,
    where: str = "pp",
    allow_uneven: bool = False,
) -> list[list[int]]:
    """Split the layers into ``k`` contiguous chunks, cutting only between blocks.

    Transformer-like models (all blocks equal) need ``k`` to divide the number of blocks
    (Megatron-LM's rule); the embedding goes with the first chunk and the head with the last.
    Other models, and equal blocks that ``k`` does not divide when ``allow_uneven`` (torchtitan
    splits as evenly as it can), get the contiguous partition minimising the largest chunk time.

    Raises
    ------
    InfeasiblePlanError
        If ``k`` exceeds the blocks, or does not divide equal blocks; the message lists what fits.
    """
    units = _units(workload.layers)
    if k == 1:
        return [list(range(len(workload.layers)))]
    blocks = [u for u in units if workload.layers[u[0]].block is not None]
    nb = len(blocks)
    if k > nb:
        raise InfeasiblePlanError(
            f"{where}: {k} pipeline chunks but model {workload.name} has only {nb} blocks to "
            f"split between; use at most {nb}",
            value=k,
            where=where,
        )
    block_costs = [round(sum(unit_cost[i] for i in u), 12) for u in blocks]
    uniform = len(set(block_costs)) == 1 and nb > 1
    if uniform and not (allow_uneven and nb % k):
        if nb % k:
            fits = [d for d in range(1, nb + 1) if nb % d == 0]
            raise InfeasiblePlanError(
                f"{where}: {k} pipeline chunks do not divide the {nb} layers of "
                f"{workload.name}; chunk counts that divide: {fits}",
                value=k,
                where=where,
            )
        per = nb // k
        out: list[list[int]] = [[] for _ in range(k)]
        seen = 0
        for u in units:
            if workload.layers[u[0]].block is None:
                # embedding-like layers join the neighbouring chunk (first, or the previous block's)
                out[0 if seen == 0 else (seen - 1) // per].extend(u)
            else:
                out[seen // per].extend(u)
                seen += 1
        return out
    # balanced contiguous partition over units (binary search on the bottleneck)
    costs = [sum(unit_cost[i] for i in u) for u in units]

    def split(limit: float) -> list[list[int]] | None:
        parts: list[list[int]] = [[]]
        acc = 0.0
        for u, c in zip(units, costs, strict=True):
            if parts[-1] and acc + c > limit:
                parts.append([])
                acc = 0.0
            parts[-1].extend(u)
            acc += c
        return parts if len(parts) <= k else None

    lo, hi = max(costs), sum(costs)
    for _ in range(60):
        mid = (lo + hi) / 2
        if split(mid) is None:
            lo = mid
        else:
            hi = mid
    parts = split(hi)
    assert parts is not None
    # make exactly k non-empty chunks by splitting the largest multi-unit chunks
    while len(parts) < k:
        idx = max(
            (i for i, p in enumerate(parts) if len(_units_in(p, units)) > 1),
            key=lambda i: sum(unit_cost[j] for j in parts[i]),
        )
        us = _units_in(parts[idx], units)
        half = len(us) // 2
        a = [j for u in us[:half] for j in u]
        b = [j for u in us[half:] for j in u]
        parts[idx : idx + 1] = [a, b]
    return parts


def _units_in(part: list[int], units: list[list[int]]) -> list[list[int]]:
    s = set(part)
    return [u for u in units if u[0] in s]


# --------------------------------------------------------------------------- chunk costs


def _elements(shape: Sequence[int]) -> float:
    return float(math.prod(shape)) if shape else 0.0


def build_chunk(
    workload: Workload,
    layer_ids: Sequence[int],
    costs: Costs,
    plan: ParallelismPlan,
    tp_group: Sequence[str],
    *,
    bucket_bytes: float | None,
    first_bucket_bytes: float | None,
    by_block: bool,
    algorithm: str = "auto",
    exclude_sharded: bool = False,
    grad_bytes: float | None = None,
    selective_share: Callable[[LayerCost], float] | None = None,
) -> Chunk:
    """Times and sizes of one chunk, split into segments by gradient bucket or by block.

    ``grad_bytes`` is the bucket's bytes per gradient element (the recipe's
    ``grad_reduce_bytes``; default the precision's). ``selective_share(layer)`` is the fraction of
    a layer's forward that selective recomputation re-runs (the recipe's
    ``SelectiveRecompute.share``; default Korthikanti's attention core). With full recomputation the recomputed
    forward's tensor-parallel collectives are booked with the backward's (``tp_bwd_s``), not as
    compute.
    """
    layers = [workload.layers[i] for i in layer_ids]
    grad_b = costs.precision.grad_bytes if grad_bytes is None else grad_bytes
    share = selective_share or _attention_core_share
    act_b = costs.precision.activation_bytes
    # segments in backward order (reverse layers), closed when the bucket is full
    groups: list[list[int]] = []
    if by_block:
        for u in _units(layers):
            groups.append([layer_ids[i] for i in u])
        groups.reverse()
        groups = [list(reversed(g)) for g in groups]
    elif bucket_bytes is None:
        groups = [list(reversed(layer_ids))]
    else:
        cap = first_bucket_bytes or bucket_bytes
        acc = 0.0
        cur: list[int] = []
        for i in reversed(layer_ids):
            cur.append(i)
            layer_i = workload.layers[i]
            if not (exclude_sharded and (layer_i.fwd_comm or layer_i.bwd_comm)):
                acc += layer_i.params * grad_b
            if acc >= cap:
                groups.append(cur)
                cur, acc, cap = [], 0.0, bucket_bytes
        if cur:
            if groups and sum(workload.layers[i].params for i in cur) == 0:
                groups[-1].extend(cur)
            else:
                groups.append(cur)
    segs: list[Segment] = []
    tp = tuple(tp_group)
    for g in reversed(groups):  # forward order of segments
        ids = tuple(sorted(g))
        f = bi = bw = rc = tf = tb = 0.0
        params = dp_params = 0
        act = flop = 0.0
        for i in ids:
            layer = workload.layers[i]
            if not (exclude_sharded and (layer.fwd_comm or layer.bwd_comm)):
                dp_params += layer.params
            lf, lbi, lbw = costs.layer_time(layer)
            f += lf
            bi += lbi
            bw += lbw
            params += layer.params
            act += layer.activation_bytes
            flop += layer.total_flop
            for cp in layer.fwd_comm:
                tf += costs.collective_time(cp.op, cp.message_bytes, tp, algorithm)
            for cp in layer.bwd_comm:
                tb += costs.collective_time(cp.op, cp.message_bytes, tp, algorithm)
            if plan.recompute is Recompute.SELECTIVE:
                rc += lf * share(layer)
        if plan.recompute is Recompute.FULL:
            rc = f
            tb += tf  # the recomputed forward re-runs its TP collectives
        segs.append(Segment(ids, f, bi + bw, rc, tf, tb, params, act, flop, dp_params))
    last = workload.layers[layer_ids[-1]]
    first = workload.layers[layer_ids[0]]
    out_bytes = _elements(last.output_shape) * act_b
    in_bytes = _elements(first.output_shape) * act_b
    blocks = len(
        {workload.layers[i].block for i in layer_ids if workload.layers[i].block is not None}
    )
    return Chunk(tuple(segs), out_bytes, in_bytes, blocks, tuple(layers))


def tied_embedding_params(layers: Sequence[LayerCost]) -> int:
    """Parameters of an output layer whose weight is tied to the input word embedding.

    The zoo's language-model heads (``lm_head``) count no weight of their own when tied
    (``perfmodel.workload.zoo.transformer._lm_head_and_loss``): their GEMM is ``gemm.k x gemm.n``
    larger than their ``params``. With pipelining the last stage keeps its own copy of that
    matrix, kept in sync by an all-reduce of its gradient with the first stage (Megatron-LM
    ``_allreduce_embedding_grads``; Narayanan et al. SC21). 0 when untied.
    """
    for la in layers:
        if la.name.endswith("lm_head") and la.gemm is not None:
            full = la.gemm.k * la.gemm.n
            if la.params < full:
                return int(full)
    return 0


# --------------------------------------------------------------------------- memory


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
) -> PlanMemory:
    """Per-GPU memory of one pipeline stage, a sum of parts.

    The pieces are ``perfmodel.workload.memory``'s (ZeRO bytes per parameter, activations per
    recomputation setting, CUDA context + library workspace + fragmentation), composed here with
    the plan: ``in_flight`` is the schedule's peak number of live (micro-batch, chunk) activation
    sets (:func:`perfmodel.parallel.schedule.peak_in_flight`), each the mean over the stage's
    chunks; ZeRO stage 1/2/3 (and FSDP) shard optimizer state (with FP32 master weights),
    gradients and weights over ``dp``; with Crossbow every learner keeps its own model state.
    ``buffer_bytes`` are the stage's non-trainable buffers (batch-norm running statistics, see
    :func:`stage_buffer_bytes`); they count with the weights, as in
    :func:`perfmodel.workload.memory.memory_breakdown`, and are never sharded.

    Model-state bytes are the ``recipe``'s (:meth:`Recipe.model_state_bytes`; ``None``: the
    recipe of the plain half-model stack, :func:`default_recipe`). With full recomputation each
    in-flight micro-batch keeps its block inputs, and one recompute working set (the largest
    block's activations) is live at a time for the whole stage. ``tied_params`` are the last
    pipeline stage's copy of a tied word embedding (:func:`tied_embedding_params`), held like its
    own weights.
    """
    from perfmodel.workload import memory as wmem

    prec = costs.precision
    rc = recipe or default_recipe(plan, prec, optimizer)
    layers = [la for c in chunks for la in c.layers]
    params = float(sum(c.params for c in chunks)) + tied_params
    stage = rc.sharding.stage
    weights, grads, state = rc.model_state_bytes(params, plan.dp)
    weights = (weights + buffer_bytes) * replicas_on_gpu
    grads *= replicas_on_gpu
    state *= replicas_on_gpu
    if plan.recompute is Recompute.FULL:
        parts = [wmem.full_recompute_bytes(c.layers, prec) for c in chunks]
        acts = in_flight * sum(k for k, _ in parts) / len(parts) + max(w for _, w in parts)
    else:
        per_chunk = [
            wmem.activation_bytes(c.layers, plan.recompute, precision=prec) for c in chunks
        ]
        acts = in_flight * sum(per_chunk) / len(per_chunk)
    peak_layer = max(
        (2.0 * _elements(la.output_shape) * prec.activation_bytes for la in layers), default=0.0
    )
    ws = wmem.CUDA_CONTEXT_BYTES + wmem.LIBRARY_WORKSPACE_BYTES + peak_layer
    if stage >= 3:
        biggest = max(s.params for c in chunks for s in c.segments)
        ws += 2 * biggest * rc.gather_bytes  # gathered unit + one prefetched
    subtotal = weights + grads + state + acts + ws + comm_buffer_bytes
    ws += wmem.FRAGMENTATION * subtotal
    return PlanMemory(
        weights_bytes=weights,
        grads_bytes=grads,
        optimizer_bytes=state,
        activations_bytes=acts,
        workspace_bytes=ws,
        comm_buffers_bytes=comm_buffer_bytes,
        capacity_bytes=capacity_bytes,
    )


# --------------------------------------------------------------------------- lowering


@dataclass(frozen=True)
class StepInputs:
    """Everything :func:`lower` needs besides the cost model."""

    plan: ParallelismPlan
    preset: SoftwarePreset
    placement: Placement
    workload: Workload  # one micro-batch, one TP rank
    batch_per_replica: int
    optimizer: Optimizer
    capacity_bytes: float
    recipe: Recipe | None = None  # None: build_recipe(preset, precision, optimizer, plan)

    def recipe_for(self, costs: Costs) -> Recipe:
        """The training recipe of this step (built from the preset when not given)."""
        if self.recipe is not None:
            return self.recipe
        return build_recipe(self.preset, costs.precision, self.optimizer, self.plan)


def step_kernels(layer: LayerCost) -> int:
    """Kernel launches of one layer in one forward + backward pass.

    ``kernels + bwd_kernels`` (the per-layer counts of the H100 PyTorch traces, see
    :class:`~perfmodel.workload.layers.LayerCost`); a hand-built layer without ``bwd_kernels``
    counts its backward as ``2 x kernels`` (input and weight gradient), the compute model's
    legacy rule. At least one forward kernel per layer.

    >>> from perfmodel.workload.layers import LayerCost, LayerKind
    >>> base = dict(name="fc", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
    ...             bwd_weight_flop=1.0, params=1, fwd_bytes=1.0, bwd_bytes=1.0,
    ...             activation_bytes=1.0, output_shape=(1,))
    >>> step_kernels(LayerCost(**base, kernels=2, bwd_kernels=3)), step_kernels(LayerCost(**base))
    (5, 3)
    """
    fwd = max(1, int(layer.kernels))
    bwd = 2 * fwd if layer.bwd_kernels is None else max(0, int(layer.bwd_kernels))
    return fwd + bwd


def lower(inp: StepInputs, costs: Costs) -> LoweredStep:
    """Lower one training step; dispatches on the plan's data-parallel mode and hybrid."""
    plan = inp.plan
    if plan.hybrid is Hybrid.ONE_WEIRD_TRICK:
        return _lower_pipeline(inp, costs, one_weird_trick=True)
    mode = plan.dp_mode if plan.dp > 1 else DPMode.ALLREDUCE
    if mode is not DPMode.ALLREDUCE and (plan.tp > 1 or plan.pp > 1):
        raise InfeasiblePlanError(
            f"data-parallel mode {mode.value} is modelled for pure data parallelism; got "
            f"tp={plan.tp}, pp={plan.pp} (use tp=1,pp=1 or mode=allreduce)",
            value=mode.value,
            where="dp_mode",
        )
    if mode is DPMode.ALLREDUCE:
        return _lower_pipeline(inp, costs)
    return _lower_dp_variant(inp, costs, mode)


def _attention_core_share(layer: LayerCost) -> float:
    """Selective recomputation of the attention core (Korthikanti et al. 2022): 1 or 0."""
    return 1.0 if is_selectively_recomputed(layer) else 0.0


def _issue_times(
    costs: Costs,
    chunks: Sequence[Chunk],
    P: int,
    V: int,
    m: int,
    recompute: Recompute,
    selective_share: Callable[[LayerCost], float] = _attention_core_share,
) -> list[float]:
    """Host issue time of one step per pipeline stage (``m`` micro-batches of its chunks'
    forward, backward and re-computed forward kernels); zeros when the cost model has no host
    model or the stack is graph-mode."""
    host_of = getattr(costs, "layer_host_time", None)
    out = [0.0] * P
    if host_of is None:
        return out
    for k, ch in enumerate(chunks):
        t = 0.0
        for layer in ch.layers:
            f, b = host_of(layer)
            t += f + b
            if recompute is Recompute.FULL and layer.block is not None:
                t += f
            elif recompute is Recompute.SELECTIVE:
                t += f * selective_share(layer)
        out[k % P] += m * t
    return out


def _flop_of(w: Workload) -> float:
    return sum(layer.total_flop for layer in w.layers)


def _lower_pipeline(inp: StepInputs, costs: Costs, *, one_weird_trick: bool = False) -> LoweredStep:
    """``allreduce``-mode plans: :class:`perfmodel.parallel.lower_pipeline.PipelineLowering`
    (imported here: it builds on this module's chunks and memory)."""
    from perfmodel.parallel.lower_pipeline import lower_pipeline

    return lower_pipeline(inp, costs, one_weird_trick=one_weird_trick)


def _embedding_grad_allreduce(
    b: GraphBuilder,
    costs: Costs,
    pl: Placement,
    rc: Recipe,
    params: int,
    last_compute: list[int],
    grad_comm: list[list[int]],
) -> None:
    """All-reduce of a tied word embedding's gradient between the first and the last pipeline
    stage (each TP rank with its own shard; Megatron-LM ``_allreduce_embedding_grads``), after
    both stages' backward; both stages' optimizers wait for it."""
    P = len(last_compute)
    groups = [(pl.gpu(0, 0, t), pl.gpu(0, P - 1, t)) for t in range(pl.tp)]
    nbytes = params * rc.grad_reduce_bytes
    dur = costs.concurrent_time(CollectiveOp.ALLREDUCE, nbytes, groups)
    spec = CommSpec(
        CollectiveOp.ALLREDUCE, nbytes, groups[0], "auto", CommKind.PP, tuple(groups[1:])
    )
    tid = b.add(
        TaskKind.COLLECTIVE,
        pl.gpu(0, P - 1, 0),
        "dp",
        dur,
        [last_compute[0], last_compute[P - 1]],
        label="embedding grad all-reduce",
        comm=spec,
    )
    grad_comm[0].append(tid)
    grad_comm[P - 1].append(tid)
    b.notes.append(
        f"tied word embedding: the last stage holds a copy ({params} parameters); its gradient is "
        "all-reduced with the first stage after backward"
    )


def _single_chunk(inp: StepInputs, costs: Costs) -> Chunk:
    w = inp.workload
    return build_chunk(
        w,
        list(range(len(w.layers))),
        costs,
        inp.plan,
        (inp.placement.gpus[0],),
        bucket_bytes=None,
        first_bucket_bytes=None,
        by_block=False,
    )


def _lower_dp_variant(inp: StepInputs, costs: Costs, mode: DPMode) -> LoweredStep:
    """Parameter server, CPU/GPU merge, async, local SGD and Crossbow (tp = pp = 1):
    :mod:`perfmodel.parallel.lower_dp_variants`, one emitter per mode."""
    from perfmodel.parallel.lower_dp_variants import lower_dp_variant

    return lower_dp_variant(inp, costs, mode)


def _memory_bandwidth_Bps(costs: Costs) -> float:
    """GPU memory bandwidth (bytes/s) when the cost model knows it, else 0."""
    spec = getattr(costs, "gpu_spec", None)
    return float(getattr(spec, "memory_bandwidth_Bps", 0.0) or 0.0)
