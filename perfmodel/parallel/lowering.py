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
  the critical path of the compute stream, as in Megatron-LM, and appear as exposed ``tp`` time.
* **Overlapped communication slows compute** by ``preset.overlap_compute_slowdown`` on every
  compute segment that is issued while a gradient bucket or a ZeRO gather is in flight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from perfmodel.errors import InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import DPMode, Hybrid, ParallelismPlan, PSHost, Recompute
from perfmodel.parallel.schedule import peak_in_flight, stage_ops
from perfmodel.parallel.software import SoftwarePreset
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskGraph, TaskKind
from perfmodel.workload.layers import LayerCost, LayerKind, Workload
from perfmodel.workload.memory import is_selectively_recomputed


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
    workload: Workload, k: int, unit_cost: Sequence[float], *, where: str = "pp"
) -> list[list[int]]:
    """Split the layers into ``k`` contiguous chunks, cutting only between blocks.

    Transformer-like models (all blocks equal) need ``k`` to divide the number of blocks
    (Megatron-LM's rule); the embedding goes with the first chunk and the head with the last.
    Other models get the contiguous partition minimising the largest chunk time.

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
    if uniform:
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
) -> Chunk:
    """Times and sizes of one chunk, split into segments by gradient bucket or by block."""
    layers = [workload.layers[i] for i in layer_ids]
    grad_b = costs.precision.grad_bytes
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
            if plan.recompute is Recompute.SELECTIVE and is_selectively_recomputed(layer):
                rc += lf
        if plan.recompute is Recompute.FULL:
            rc = f + tf
        segs.append(Segment(ids, f, bi + bw, rc, tf, tb, params, act, flop, dp_params))
    last = workload.layers[layer_ids[-1]]
    first = workload.layers[layer_ids[0]]
    out_bytes = _elements(last.output_shape) * act_b
    in_bytes = _elements(first.output_shape) * act_b
    blocks = len(
        {workload.layers[i].block for i in layer_ids if workload.layers[i].block is not None}
    )
    return Chunk(tuple(segs), out_bytes, in_bytes, blocks, tuple(layers))


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
    optimizer: str,
    in_flight: int,
    capacity_bytes: float,
    comm_buffer_bytes: float,
    replicas_on_gpu: int = 1,
    buffer_bytes: float = 0.0,
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
    """
    from perfmodel.workload import memory as wmem

    prec = costs.precision
    layers = [la for c in chunks for la in c.layers]
    params = float(sum(c.params for c in chunks))
    dp = plan.dp
    stage = plan.shard_stage
    weights, grads, state = wmem.sharded_param_state_bytes(
        params, prec, optimizer, zero_stage=stage, dp=dp
    )
    weights = (weights + buffer_bytes) * replicas_on_gpu
    grads *= replicas_on_gpu
    state *= replicas_on_gpu
    per_chunk = [
        wmem.activation_bytes(c.layers, plan.recompute.value, precision=prec) for c in chunks
    ]
    acts = in_flight * sum(per_chunk) / len(per_chunk)
    peak_layer = max(
        (2.0 * _elements(la.output_shape) * prec.activation_bytes for la in layers), default=0.0
    )
    ws = wmem.CUDA_CONTEXT_BYTES + wmem.LIBRARY_WORKSPACE_BYTES + peak_layer
    if stage >= 3:
        biggest = max(s.params for c in chunks for s in c.segments)
        ws += 2 * biggest * prec.param_bytes  # gathered unit + one prefetched
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
    optimizer: str
    capacity_bytes: float


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


def _issue_times(
    costs: Costs, chunks: Sequence[Chunk], P: int, V: int, m: int, recompute: Recompute
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
            if (recompute is Recompute.FULL and layer.block is not None) or (
                recompute is Recompute.SELECTIVE and is_selectively_recomputed(layer)
            ):
                t += f
        out[k % P] += m * t
    return out


def _flop_of(w: Workload) -> float:
    return sum(layer.total_flop for layer in w.layers)


def _lower_pipeline(inp: StepInputs, costs: Costs, *, one_weird_trick: bool = False) -> LoweredStep:
    plan, preset, pl, wl = inp.plan, inp.preset, inp.placement, inp.workload
    P, V = plan.pp, plan.interleave
    K = P * V
    m = plan.num_microbatches(inp.batch_per_replica)
    alg = preset.comm_algorithm
    zero3 = plan.shard_stage >= 3
    dp_on = plan.dp > 1
    overlap = preset.overlap_grad_comm and dp_on
    slow = 1.0 + preset.overlap_compute_slowdown

    unit_cost = [sum(costs.layer_time(layer)) for layer in wl.layers]
    parts = partition(wl, K, unit_cost)
    chunks: list[Chunk] = []
    for k, ids in enumerate(parts):
        s = k % P
        chunks.append(
            build_chunk(
                wl,
                ids,
                costs,
                plan,
                pl.dp_group(0, 0) if one_weird_trick else pl.tp_group(0, s),
                bucket_bytes=preset.bucket_bytes if overlap else None,
                first_bucket_bytes=preset.first_bucket_bytes,
                by_block=zero3,
                algorithm=alg,
                exclude_sharded=one_weird_trick,
            )
        )

    b = GraphBuilder()
    gpu = [pl.gpu(0, s, 0) for s in range(P)]
    host_tid = -1
    host_s = preset.host_step_s
    if plan.dp > 1:
        host_s += preset.host_split_per_sample_s * (plan.dp - 1) * inp.batch_per_replica
    if host_s > 0:
        host_tid = b.add(TaskKind.HOST, gpu[0], "host", host_s, label="host step / batch split")

    prec = costs.precision
    dp_groups = [pl.dp_group(s, 0) for s in range(P)]
    dp_sibs = [tuple(pl.dp_group(s, t) for t in range(1, pl.tp)) for s in range(P)]

    def dp_coll(
        s: int,
        op: CollectiveOp,
        nbytes: float,
        deps: list[int],
        label: str,
        kind: CommKind = CommKind.DP,
    ) -> int:
        groups = [dp_groups[s], *dp_sibs[s]]
        dur = costs.concurrent_time(op, nbytes, groups, alg) + preset.fusion_cycle_s / 2
        spec = CommSpec(op, nbytes, dp_groups[s], alg, kind, dp_sibs[s], preset.fusion_cycle_s / 2)
        return b.add(TaskKind.COLLECTIVE, gpu[s], "dp", dur, deps, label=label, comm=spec)

    # (from stage, to stage, bytes per rank) -> (duration, CommSpec): the same transfer recurs for
    # every micro-batch, so its GPU pairs and closed-form time are computed once
    p2p_cache: dict[tuple[int, int, float], tuple[float, CommSpec]] = {}

    def p2p(
        s_from: int,
        s_to: int,
        nbytes: float,
        deps: list[int],
        stream: str,
        label: str,
        mb: int,
        ch: int,
    ) -> int:
        per_rank = nbytes / pl.tp if pl.tp > 1 else nbytes  # Megatron scatter/gather optimisation
        key = (s_from, s_to, per_rank)
        hit = p2p_cache.get(key)
        if hit is None:
            pairs = [(pl.gpu(0, s_from, t), pl.gpu(0, s_to, t)) for t in range(pl.tp)]
            spec = CommSpec(
                CollectiveOp.SENDRECV, per_rank, pairs[0], "auto", CommKind.PP, tuple(pairs[1:])
            )
            hit = p2p_cache[key] = (costs.transfers_time(pairs, per_rank), spec)
        dur, spec = hit
        return b.add(
            TaskKind.SENDRECV,
            gpu[s_from],
            stream,
            dur,
            deps,
            label=label,
            microbatch=mb,
            chunk=ch,
            comm=spec,
        )

    ops = [stage_ops(plan.schedule, P, m, s, V) for s in range(P)]
    pos = [0] * P
    f_out: dict[tuple[int, int], int] = {}  # (mb, global chunk) -> tid the next chunk waits on
    b_out: dict[tuple[int, int], int] = {}
    f_done: dict[tuple[int, int], int] = {}
    last_compute = [host_tid] * P
    grad_comm: list[list[int]] = [[] for _ in range(P)]
    gather_hist: list[list[int]] = [[] for _ in range(P)]  # compute tids for ZeRO-3 prefetch window
    first_seg_done = [False] * P

    def gathers_for(s: int, seg: Segment, label: str) -> int:
        hist = gather_hist[s]
        dep = [hist[-2]] if len(hist) >= 2 else []
        nbytes = seg.params * prec.param_bytes
        return dp_coll(s, CollectiveOp.ALLGATHER, nbytes, dep, label, CommKind.ZERO)

    def segment_tasks(
        s: int, phase: str, mb: int, c: int, dur: float, deps: list[int], tp_s: float
    ) -> int:
        """One segment's compute (``phase`` "F" or "B") and its tensor-parallel collective.

        Returns the task id the next segment waits on.
        """
        k = c * P + s
        tid = b.add(
            TaskKind.COMPUTE,
            gpu[s],
            "compute",
            dur,
            deps,
            label=f"{phase}{mb}" + (f".c{c}" if V > 1 else ""),
            microbatch=mb,
            chunk=k,
        )
        gather_hist[s].append(tid)
        if tp_s > 0:
            tid = b.add(
                TaskKind.COLLECTIVE,
                gpu[s],
                "compute",
                tp_s,
                [tid],
                label=f"TP {phase}{mb}",
                microbatch=mb,
                chunk=k,
            )
        return tid

    def emit(s: int, phase: str, mb: int, c: int) -> None:
        k = c * P + s
        ch = chunks[k]
        if phase == "F":
            deps = [last_compute[s]]
            if k > 0:
                deps.append(f_out[(mb, k - 1)])
            tid = -1
            for si, seg in enumerate(ch.segments):
                sd = list(deps)
                dur = seg.fwd_s
                if zero3:
                    sd.append(gathers_for(s, seg, f"AG F{mb}.{k}.{si}"))
                    if first_seg_done[s]:
                        dur *= slow
                tid = segment_tasks(s, "F", mb, c, dur, sd, seg.tp_fwd_s)
                first_seg_done[s] = True
                deps = [tid]
            last_compute[s] = tid
            f_done[(mb, k)] = tid
            if k < K - 1:
                nxt = (k + 1) % P
                f_out[(mb, k)] = (
                    p2p(s, nxt, ch.out_bytes, [tid], "send_fwd", f"send F{mb}", mb, k)
                    if P > 1
                    else tid
                )
            return
        # backward
        deps = [last_compute[s], f_done[(mb, k)]]
        if k < K - 1:
            deps.append(b_out[(mb, k + 1)])
        final_mb = mb == m - 1
        tid = -1
        segs = list(reversed(ch.segments))
        reduce_every_mb = plan.shard_stage >= 2
        for si, seg in enumerate(segs):
            sd = list(deps)
            dur = seg.bwd_s + seg.recompute_s
            if zero3:
                sd.append(gathers_for(s, seg, f"AG B{mb}.{k}.{si}"))
                dur *= slow
            elif overlap and final_mb and si > 0:
                dur *= slow
            tid = segment_tasks(s, "B", mb, c, dur, sd, seg.tp_bwd_s)
            deps = [tid]
            if dp_on and overlap and (final_mb or reduce_every_mb):
                op = CollectiveOp.REDUCESCATTER if plan.shard_stage >= 1 else CollectiveOp.ALLREDUCE
                grad_comm[s].append(
                    dp_coll(s, op, seg.params * prec.grad_bytes, [tid], f"grad {k}.{si}")
                )
        last_compute[s] = tid
        if k > 0:
            prv = (k - 1) % P
            b_out[(mb, k)] = (
                p2p(s, prv, ch.in_bytes, [tid], "send_bwd", f"send B{mb}", mb, k) if P > 1 else tid
            )

    # emit operations in a dependency-respecting global order (round robin over stages)
    remaining = sum(len(o) for o in ops)
    while remaining:
        progressed = False
        for s in range(P):
            while pos[s] < len(ops[s]):
                phase, mb, c = ops[s][pos[s]]
                k = c * P + s
                if phase == "F" and k > 0 and (mb, k - 1) not in f_out:
                    break
                if phase == "B" and k < K - 1 and (mb, k + 1) not in b_out:
                    break
                emit(s, phase, mb, c)
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover - schedule bug
            raise RuntimeError("pipeline schedule deadlocked during lowering")

    # eager stacks: each stage's host thread issues every kernel of the step in order, ahead of
    # the GPU (asynchronous launches); the step cannot end before the last one is issued
    issue = _issue_times(costs, chunks, P, V, m, plan.recompute)
    issue_tid = [-1] * P
    for s in range(P):
        if issue[s] > 0:
            pre = [host_tid] if host_tid >= 0 and s == 0 else []
            issue_tid[s] = b.add(
                TaskKind.HOST, gpu[s], "host", issue[s], pre, label="kernel issue (eager host)"
            )

    # gradient reduction without overlap: one collective of all the stage's gradients
    for s in range(P):
        stage_params = sum(chunks[c * P + s].params for c in range(V))
        if dp_on and not overlap:
            op = CollectiveOp.REDUCESCATTER if plan.shard_stage >= 1 else CollectiveOp.ALLREDUCE
            grad_comm[s].append(
                dp_coll(s, op, stage_params * prec.grad_bytes, [last_compute[s]], "grad all")
            )
        opt_params = stage_params / (plan.dp if plan.shard_stage >= 1 else 1)
        t_opt = b.add(
            TaskKind.OPTIMIZER,
            gpu[s],
            "compute",
            costs.optimizer_time(opt_params, inp.optimizer),
            [last_compute[s], *grad_comm[s], *([issue_tid[s]] if issue_tid[s] >= 0 else [])],
            label="optimizer",
        )
        if dp_on and 1 <= plan.shard_stage <= 2:
            dp_coll(
                s,
                CollectiveOp.ALLGATHER,
                stage_params * prec.param_bytes,
                [t_opt],
                "param all-gather",
                CommKind.ZERO,
            )

    if zero3:
        b.notes.append(
            "ZeRO-3/FSDP: one all-gather per block in forward and backward, prefetch depth 1"
        )
    if K > 1:
        b.notes.append(
            f"pipeline: {P} stages x {V} chunks, {m} micro-batches, one task per micro-batch and chunk"
        )
    in_flight = [peak_in_flight(ops[s]) for s in range(P)]
    buf = preset.bucket_bytes or 0.0
    mem = tuple(
        stage_memory(
            [chunks[c * P + s] for c in range(V)],
            plan=plan,
            costs=costs,
            optimizer=inp.optimizer,
            in_flight=in_flight[s],
            capacity_bytes=inp.capacity_bytes,
            comm_buffer_bytes=buf if dp_on else 0.0,
            buffer_bytes=stage_buffer_bytes(
                wl, [la for c in range(V) for la in chunks[c * P + s].layers]
            ),
        )
        for s in range(P)
    )
    flop = _flop_of(wl) * pl.tp * m * plan.dp
    if one_weird_trick:
        b.notes.append(
            "one-weird-trick: convolutions data parallel (their gradients all-reduced), "
            "fully-connected layers split by output features over all GPUs (no gradient all-reduce)"
        )
    return LoweredStep(
        graph=b.build(multiplicity=plan.dp * pl.tp),
        memory=mem,
        samples_per_step=inp.batch_per_replica * plan.dp,
        model_flop_per_step=flop,
        num_gpus=plan.num_gpus,
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
    """Parameter server, CPU/GPU merge, async, local SGD and Crossbow (tp = pp = 1)."""
    plan, preset, pl = inp.plan, inp.preset, inp.placement
    m = plan.num_microbatches(inp.batch_per_replica)
    ch = _single_chunk(inp, costs)
    prec = costs.precision
    n = plan.dp
    gpus = pl.dp_group(0, 0)
    g0 = gpus[0]
    params = ch.params
    grad_bytes = params * prec.grad_bytes
    param_bytes = params * prec.param_bytes
    alg = preset.comm_algorithm
    b = GraphBuilder()
    slow = 1.0 + preset.overlap_compute_slowdown
    min_period = 0.0
    staleness: dict[int, float] = {}
    replicas_on_gpu = 1
    deps: list[int] = []
    if preset.host_step_s > 0:
        deps = [b.add(TaskKind.HOST, g0, "host", preset.host_step_s, label="host step")]

    def compute_step(pre: list[int], slowed: bool = False) -> int:
        last = pre
        tid = -1
        for mb in range(m):
            tid = b.add(
                TaskKind.COMPUTE,
                g0,
                "compute",
                ch.fwd_s * (slow if slowed else 1),
                last,
                label=f"F{mb}",
                microbatch=mb,
                chunk=0,
            )
            tid = b.add(
                TaskKind.COMPUTE,
                g0,
                "compute",
                ch.bwd_s * (slow if slowed else 1),
                [tid],
                label=f"B{mb}",
                microbatch=mb,
                chunk=0,
            )
            last = [tid]
        return tid

    if mode is DPMode.CPU_MERGE:
        cpu_pairs = [(costs.cpu_of(g), g) for g in gpus]
        up = [(g, c) for c, g in cpu_pairs]
        t_pull = costs.transfers_time(cpu_pairs, param_bytes)
        pull = b.add(
            TaskKind.HOST,
            g0,
            "h2d",
            t_pull,
            deps,
            label="pull weights from CPU",
            comm=CommSpec(
                CollectiveOp.SENDRECV,
                param_bytes,
                cpu_pairs[0],
                kind=CommKind.HOST,
                siblings=tuple(cpu_pairs[1:]),
            ),
        )
        last = compute_step([pull])
        push = b.add(
            TaskKind.HOST,
            g0,
            "d2h",
            costs.transfers_time(up, grad_bytes),
            [last],
            label="push grads to CPU",
            comm=CommSpec(
                CollectiveOp.SENDRECV, grad_bytes, up[0], kind=CommKind.HOST, siblings=tuple(up[1:])
            ),
        )
        # CPU sums n gradient copies and applies the update: reads n + 1 copies, writes one
        reduce = costs.host_reduce_time((n + 2) * grad_bytes)
        b.add(TaskKind.HOST, costs.cpu_of(g0), "host", reduce, [push], label="CPU merge + update")
        b.notes.append(
            "cpu-merge: weights live on the host; every step each GPU pulls weights and pushes gradients over its PCIe path"
        )
    elif mode is DPMode.GPU_MERGE:
        others = gpus
        bc = b.add(
            TaskKind.COLLECTIVE,
            g0,
            "comm",
            costs.collective_time(CollectiveOp.BROADCAST, param_bytes, others, alg),
            deps,
            label="replicate (broadcast params)",
            comm=CommSpec(CollectiveOp.BROADCAST, param_bytes, others, alg, CommKind.DP),
        )
        kernels = sum(step_kernels(layer) for layer in inp.workload.layers)
        disp = n * kernels * preset.dispatch_per_op_s * m
        host = b.add(
            TaskKind.HOST, g0, "host", disp, [bc], label="GIL-serialised dispatch of replicas"
        )
        last = compute_step([bc])
        red = b.add(
            TaskKind.COLLECTIVE,
            g0,
            "comm",
            costs.collective_time(CollectiveOp.REDUCE, grad_bytes, others, alg),
            [last, host],
            label="reduce grads to GPU0",
            comm=CommSpec(CollectiveOp.REDUCE, grad_bytes, others, alg, CommKind.DP),
        )
        b.add(
            TaskKind.OPTIMIZER,
            g0,
            "compute",
            costs.optimizer_time(params, inp.optimizer),
            [red],
            label="optimizer (GPU0)",
        )
        b.notes.append(
            "gpu-merge (nn.DataParallel): broadcast from GPU0, reduce to GPU0, serialised Python dispatch of all replicas"
        )
    elif mode in (DPMode.PARAMETER_SERVER, DPMode.ASYNC):
        shards = plan.ps_shards
        if plan.ps_host is PSHost.CPU:
            servers = sorted({costs.cpu_of(g) for g in gpus})
        else:
            servers = list(gpus)
        servers = [servers[i % len(servers)] for i in range(shards)]
        per_shard = grad_bytes / shards
        if mode is DPMode.PARAMETER_SERVER:
            push_pairs = [(g, sv) for g in gpus for sv in servers if g != sv]
            pull_pairs = [(sv, g) for g in gpus for sv in servers if g != sv]
        else:  # asynchronous: a worker's own push, others spread over the step (see min_period)
            push_pairs = [(g0, sv) for sv in servers if sv != g0]
            pull_pairs = [(sv, g0) for sv in servers if sv != g0]
        pull = b.add(
            TaskKind.SENDRECV,
            g0,
            "comm",
            costs.transfers_time(pull_pairs, per_shard),
            deps,
            label="pull params",
            comm=None,
        )
        last = compute_step([pull])
        push = b.add(
            TaskKind.SENDRECV,
            g0,
            "comm",
            costs.transfers_time(push_pairs, per_shard),
            [last],
            label="push grads",
            comm=None,
        )
        if plan.ps_host is PSHost.CPU:
            upd = (
                costs.host_reduce_time((n + 2) * per_shard)
                if mode is DPMode.PARAMETER_SERVER
                else costs.host_reduce_time(3 * per_shard)
            )
        else:
            upd = costs.optimizer_time(params / shards, inp.optimizer)
        b.add(
            TaskKind.HOST if plan.ps_host is PSHost.CPU else TaskKind.OPTIMIZER,
            servers[0],
            "server",
            upd,
            [push],
            label="server update",
        )
        if mode is DPMode.ASYNC:
            all_push = [(g, sv) for g in gpus for sv in servers if g != sv]
            # the servers' links must carry every worker's push and pull once per worker step
            min_period = 2 * costs.transfers_time(all_push, per_shard)
            staleness = {n - 1: 1.0}
            b.notes.append(
                "async SGD: identical workers in steady state apply gradients round-robin, so each "
                f"gradient is {n - 1} updates stale (a point distribution; jitter would spread it)"
            )
    elif mode is DPMode.LOCAL_SGD:
        last = compute_step(deps)
        opt = b.add(
            TaskKind.OPTIMIZER,
            g0,
            "compute",
            costs.optimizer_time(params, inp.optimizer),
            [last],
            label="optimizer",
        )
        t_ar = costs.collective_time(CollectiveOp.ALLREDUCE, param_bytes, gpus, alg)
        b.add(
            TaskKind.COLLECTIVE,
            g0,
            "dp",
            t_ar / plan.sync_period,
            [opt],
            label=f"model average / {plan.sync_period}",
            comm=None,
        )
        b.notes.append(
            f"local SGD: model all-reduce every {plan.sync_period} steps, amortised per step"
        )
    elif mode is DPMode.CROSSBOW:
        replicas_on_gpu = plan.learners_per_gpu
        # learners_per_gpu learners of batch b share the GPU; their kernels run concurrently,
        # which the workload models as one batch learners*b (built so by perfmodel.api)
        last = compute_step(deps, slowed=n > 1)
        # intra-GPU averaging: read every learner's model, write the average (memory bound)
        bw = _memory_bandwidth_Bps(costs)
        t_local = (replicas_on_gpu + 1) * param_bytes / bw if bw > 0 else 0.0
        avg = b.add(
            TaskKind.COMPUTE, g0, "compute", t_local, [last], label="intra-GPU model average"
        )
        # synchronous model averaging across GPUs overlaps the next iteration (Crossbow SMA): the
        # all-reduce of the previous step's model difference runs beside this step's compute
        ar = costs.collective_time(CollectiveOp.ALLREDUCE, param_bytes, gpus, alg)
        b.add(
            TaskKind.COLLECTIVE,
            g0,
            "dp",
            ar,
            deps,
            label="SMA all-reduce (previous step)",
            comm=CommSpec(CollectiveOp.ALLREDUCE, param_bytes, gpus, alg, CommKind.DP),
        )
        b.add(
            TaskKind.OPTIMIZER,
            g0,
            "compute",
            costs.optimizer_time(params * replicas_on_gpu, inp.optimizer),
            [avg],
            label="learner updates",
        )
    else:  # pragma: no cover
        raise AssertionError(mode)

    flop = _flop_of(inp.workload) * m * n
    # gradient accumulation holds one micro-batch's activations at a time
    mem = stage_memory(
        [ch],
        plan=plan,
        costs=costs,
        optimizer=inp.optimizer,
        in_flight=1,
        capacity_bytes=inp.capacity_bytes,
        comm_buffer_bytes=0.0,
        replicas_on_gpu=replicas_on_gpu,
        buffer_bytes=stage_buffer_bytes(inp.workload, ch.layers),
    )
    return LoweredStep(
        graph=b.build(multiplicity=n),
        memory=(mem,),
        samples_per_step=inp.batch_per_replica * n,
        model_flop_per_step=flop,
        num_gpus=n,
        min_period_s=min_period,
        staleness=staleness,
    )


def _memory_bandwidth_Bps(costs: Costs) -> float:
    """GPU memory bandwidth (bytes/s) when the cost model knows it, else 0."""
    spec = getattr(costs, "gpu_spec", None)
    return float(getattr(spec, "memory_bandwidth_Bps", 0.0) or 0.0)
