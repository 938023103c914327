"""A segment's expert- and context-parallel communication (:class:`SegmentComm`), per layer and
phase: the MoE token dispatcher's collectives (all-to-all, DeepEP / Hybrid-EP deduplicated rows
and their kernel floor, Megatron-Core's all-gather dispatcher, Hybrid-EP's routing-map gather),
the GPU idle after a dispatch's host synchronisation, ``ep_overlap``'s exposed share, and ring
attention's key/value exchange beyond the attention it overlaps.

:func:`perfmodel.parallel.lowering.build_chunk` calls these for each segment of a chunk that
has ``"ep"`` or ``"cp"`` groups, in one :class:`SegmentCommContext` it builds per chunk (the
cost model, groups, algorithm, plan and the memo of collective times); the formulas and their
sources are in :mod:`perfmodel.parallel.expert`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from perfmodel.ops import ALLGATHER, ALLTOALL, REDUCESCATTER, CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.expert import (
    CPImpl,
    RingSteps,
    cp_exposed_s,
    dispatch_share,
    dispatcher_sync_stall_s,
    ep_overlap_exposed_s,
    flex_fabric,
    flex_kernel_floor_s,
    flex_units_hit,
    overlap_compute_slowdown,
    routing_map_gather_bytes,
    torch_cp_exposed_s,
)
from perfmodel.parallel.plan import (
    DISPATCHER_ALLGATHER,
    DISPATCHER_ALLTOALL,
    CPComm,
    ParallelismPlan,
)
from perfmodel.parallel.taskgraph import COMM_CP, COMM_EP, CommKind
from perfmodel.workload.layers import (
    LAYER_ATTENTION,
    ROLE_COMBINE,
    ROLE_DISPATCH,
    CommPoint,
    LayerCost,
    distinct_layers,
)


@dataclass(frozen=True)
class SegmentComm:
    """Expert- or context-parallel communication of a segment in one phase (``"F"`` or
    ``"B"``), summed over its layers: ``op`` moving ``message_bytes`` on the segment's
    ``kind`` group, exposed for ``duration_s`` on the compute stream out of ``full_s`` of
    transfers (ring attention hides the rest under the attention kernels)."""

    kind: CommKind
    phase: str
    op: CollectiveOp
    message_bytes: float
    duration_s: float
    full_s: float = 0.0


@dataclass(frozen=True, eq=False)
class SegmentCommContext:
    """What a chunk's expert and context collectives are priced in, the same for every segment
    of one :func:`~perfmodel.parallel.lowering.build_chunk`: the cost model, the ``"ep"`` /
    ``"cp"`` groups (the representative's first, then the siblings running the same collective
    at once), the collective algorithm, the plan (its ``cp_comm``, ``moe_dispatcher``,
    ``recompute`` and ``ep_overlap``), the stack's context-parallel implementation, the share
    of a layer's forward that selective recomputation re-runs (``None`` without selective
    recomputation) and the memo of collective times it fills (identical blocks: one closed form
    per collective)."""

    costs: Costs
    groups_of: Mapping[str, tuple[tuple[str, ...], ...]]
    algorithm: str
    plan: ParallelismPlan
    cp_impl: CPImpl = CPImpl.TE_P2P
    selective_share: Callable[[LayerCost], float] | None = None
    memo: dict[tuple[object, ...], float] = field(default_factory=dict)
    #: The chunk's layers (whole transformer blocks: pipeline partitioning cuts between
    #: blocks), whose per-block sums ``ep_overlap`` reads (:func:`_block_overlap_shares`; the
    #: lowering always passes them).
    chunk_layers: Sequence[LayerCost] = ()
    #: ``ep_overlap``: each block's exposed share of its forward and backward expert
    #: collectives, filled from :attr:`chunk_layers` on first use
    block_shares: dict[int, tuple[float, float]] = field(default_factory=dict)

    def collective_s(self, op: CollectiveOp, nbytes: float, group: str) -> float:
        """Seconds of ``op`` moving ``nbytes`` on every ``group`` group at once
        (:meth:`~perfmodel.parallel.costs.Costs.concurrent_time`), asked once per chunk."""
        key = (op, nbytes, group)
        t = self.memo.get(key)
        if t is None:
            t = self.memo[key] = self.costs.concurrent_time(
                op, nbytes, self.groups_of[group], self.algorithm
            )
        return t


def _expert_context_segment(
    seg_layers: Sequence[LayerCost], ctx: SegmentCommContext
) -> list[SegmentComm]:
    """A segment's expert all-to-alls and context-parallel exchanges
    (:func:`_expert_context_comm` per layer); a checkpointed attention core (selective
    recomputation re-running it whole) re-runs its forward ring exchange in backward."""
    extra: list[SegmentComm] = []
    for layer in seg_layers:
        extra += _layer_expert_context(layer, ctx)
    return extra


def _layer_expert_context(layer: LayerCost, ctx: SegmentCommContext) -> list[SegmentComm]:
    """One layer's entries of :func:`_expert_context_segment`."""
    share = ctx.selective_share
    lf, lbi, lbw = ctx.costs.layer_time(layer)
    got = _expert_context_comm(layer, (lf, lbi + lbw), ctx)
    if share is not None and layer.kind is LAYER_ATTENTION and share(layer) >= 1.0:
        # a checkpointed attention core re-runs its forward, ring exchange too
        got += [replace(c, phase="B") for c in got if c.phase == "F"]
    return got


def cp_pass_exposed_s(
    ring: Sequence[tuple[CollectiveOp, float]],
    busy_s: float,
    cp: int,
    first_over_rest: float,
    cp_comm: CPComm,
    cp_impl: CPImpl,
    *,
    backward: bool,
) -> float:
    """Exposed seconds of one pass's context-parallel exchange of a ring attention layer:
    ``ring`` its ``"cp"`` collectives ``(op, seconds)`` in order, beside ``busy_s`` of the
    layer's compute in that pass, split into ``cp`` ring steps with the causal one
    ``first_over_rest`` times a half block's
    (:meth:`~perfmodel.parallel.expert.RingSteps.split`; the cost model's
    ``ring_step_ratio``). PyTorch's ring (``cp_impl`` ``torch`` / ``torch-compile`` under
    ``cp_comm=ring``): :func:`~perfmodel.parallel.expert.torch_cp_exposed_s` of the
    all-gathers and the rest; otherwise Transformer Engine's
    (:func:`~perfmodel.parallel.expert.cp_exposed_s`, its backward with ``backward``). The
    lowering (:func:`_expert_context_comm`) and the search screen
    (:class:`perfmodel.search.screen.PlanScreen`) both price the exchange here.

    >>> from perfmodel.parallel.plan import CPComm
    >>> kv = [(CollectiveOp.ALLGATHER, 6.0)]  # cp 4: 2 s per transfer beside 1.5 s steps
    >>> cp_pass_exposed_s(kv, 6.0, 4, 1.0, CPComm.RING, CPImpl.TE_P2P, backward=False)
    1.5
    >>> cp_pass_exposed_s(kv, 6.0, 4, 1.0, CPComm.ALLGATHER, CPImpl.TE_P2P, backward=False)
    6.0
    """
    full = sum(t for _, t in ring)
    steps = RingSteps.split(busy_s, cp, first_over_rest)
    if cp_impl.sdpa_ring and cp_comm is CPComm.RING:
        gather = sum(t for o, t in ring if o is ALLGATHER)
        traced = cp_impl is CPImpl.TORCH_COMPILE
        return torch_cp_exposed_s(gather, full - gather, steps, traced=traced)
    return cp_exposed_s(full, steps, cp_comm, backward=backward)


def _expert_context_comm(
    layer: LayerCost, compute_s: tuple[float, float], ctx: SegmentCommContext
) -> list[SegmentComm]:
    """A layer's expert (``"ep"``) and context (``"cp"``) collectives, per phase, beside its
    forward and backward ``compute_s``: the token
    dispatcher's collectives exposed in full (:func:`_dispatcher_point`); the key/value exchange
    beyond the ring step each transfer runs beside, in full for ``cp_comm=allgather``
    (:func:`perfmodel.parallel.expert.cp_exposed_s`: Transformer Engine's forward from the
    causal diagonal first, its backward ending on it; PyTorch's ring, ``cp_impl`` ``torch``:
    the all-gather beyond the causal first step and the FP32 dK/dV permutes beyond each next
    step, ``torch-compile``: all of them, waited for where the traced graph issues them,
    :func:`perfmodel.parallel.expert.torch_cp_exposed_s`), its bytes scaled to the exposed
    share (what the flow simulation replays). The pass's attention time is split into its
    steps by the cost model's ``ring_step_ratio`` where it has one
    (:meth:`perfmodel.parallel.costs.SystemCosts.ring_step_ratio`; equal steps otherwise),
    one :class:`~perfmodel.parallel.expert.RingSteps` per pass."""
    cp_comm, cp_impl = ctx.plan.cp_comm, ctx.cp_impl
    ratio_of = getattr(ctx.costs, "ring_step_ratio", None)
    ratio = (1.0, 1.0) if ratio_of is None or not layer.ring_steps > 1 else ratio_of(layer)
    out: list[SegmentComm] = []
    for phase, points, busy in (
        ("F", layer.fwd_comm, compute_s[0]),
        ("B", layer.bwd_comm, compute_s[1]),
    ):
        ring: list[tuple[CollectiveOp, float, float]] = []
        for cp in points:
            groups = ctx.groups_of.get(cp.group)
            if groups is None:
                continue
            op, nbytes, floor = cp.op, cp.message_bytes, 0.0
            if cp.group == "ep":
                op, nbytes = _dispatcher_point(layer, cp, phase, groups[0], ctx)
                floor = _flex_kernel_floor(layer, cp, phase, groups[0], ctx)
            t = max(ctx.collective_s(op, nbytes, cp.group), floor)
            if cp.group == "cp":
                ring.append((op, nbytes, t))
            else:
                out.append(SegmentComm(COMM_EP, phase, op, nbytes, t, t))
        if phase == "F":
            out += _routing_map_gather(layer, ctx)
        if ring:
            full = sum(t for _, _, t in ring)
            size = len(ctx.groups_of["cp"][0])
            backward = phase == "B"
            exposed = cp_pass_exposed_s(
                [(o, t) for o, _, t in ring], busy, size, ratio[backward], cp_comm, cp_impl,
                backward=backward,
            )  # fmt: skip
            share = exposed / full if full > 0 else 0.0
            out += [
                SegmentComm(COMM_CP, phase, op, nbytes * share, t * share, t)
                for op, nbytes, t in ring
            ]
    return out


def _dispatch_sync_stalls(
    layers: Sequence[LayerCost], layer_ids: Sequence[int], ctx: SegmentCommContext
) -> dict[int, float]:
    """GPU idle after each MoE dispatch layer's host synchronisation in one forward of a chunk
    (layer id -> seconds; empty without routed experts or a host model): the run from the
    dispatch to the next one (or the chunk's end), each layer's host issue time against its
    GPU time, the dispatcher's exposed collectives included
    (:func:`perfmodel.parallel.expert.dispatcher_sync_stall_s`). The all-gather dispatcher
    waits *after* its gather (``MoEAllGatherTokenDispatcher``: ``local_map.sum(0).cpu()`` once
    the tokens are gathered, Megatron-LM 4415119), so its dispatch collective is not in the run;
    the others wait before the tokens move, so theirs is."""
    costs, dispatcher = ctx.costs, ctx.plan.moe_dispatcher
    host_of = getattr(costs, "layer_host_time", None)
    if host_of is None or not any(
        la.expert_role is ROLE_DISPATCH for la in distinct_layers(layers)
    ):
        return {}
    out: dict[int, float] = {}
    per: dict[object, tuple[float, float]] = {}  # a block's copies: one lookup per layer object
    run: list[tuple[float, float]] = []
    owner = -1
    for lid, la in zip(layer_ids, layers, strict=True):
        if la.expert_role is ROLE_DISPATCH:
            if owner >= 0:
                out[owner] = dispatcher_sync_stall_s(run)
            owner, run = lid, []
        if owner < 0:
            continue
        hg = per.get(la.cost_key())
        if hg is None:
            g = costs.layer_time(la)[0]
            moves = la.expert_role is ROLE_COMBINE or (
                la.expert_role is ROLE_DISPATCH and dispatcher is not DISPATCHER_ALLGATHER
            )
            if moves and ctx.groups_of:
                g += sum(
                    c.duration_s for c in _expert_context_comm(la, (g, 0.0), ctx) if c.phase == "F"
                )
            hg = per[la.cost_key()] = (host_of(la)[0], g)
        run.append(hg)
    if owner >= 0:
        out[owner] = dispatcher_sync_stall_s(run)
    return {k: v for k, v in out.items() if v > 0}


def _routing_map_gather(layer: LayerCost, ctx: SegmentCommContext) -> list[SegmentComm]:
    """The forward routing-map all-gather of a dispatch layer whose dispatcher runs one
    before its tokens move (:func:`perfmodel.parallel.expert.routing_map_gather_bytes`: Hybrid-EP),
    exposed in full on the expert-parallel group; the map's rows are the tokens the rank's
    router scores (:attr:`LayerCost.router_tokens`, whatever the load). Empty for other
    layers and dispatchers."""
    groups = ctx.groups_of.get("ep")
    if layer.expert_role is not ROLE_DISPATCH or not groups or not layer.router_tokens:
        return []
    nbytes = routing_map_gather_bytes(
        ctx.plan.moe_dispatcher, layer.router_tokens, layer.experts, len(groups[0])
    )
    if nbytes <= 0:
        return []
    t = ctx.collective_s(ALLGATHER, nbytes, "ep")
    return [SegmentComm(COMM_EP, "F", ALLGATHER, nbytes, t, t)]


def _dispatcher_point(
    layer: LayerCost, point: CommPoint, phase: str, group: Sequence[str], ctx: SegmentCommContext
) -> tuple[CollectiveOp, float]:
    """The collective and bytes that the plan's dispatcher runs for a dispatch/combine layer's
    all-to-all ``point`` of ``tokens x top_k`` routed rows on the expert-parallel ``group``.

    ``alltoall``: the point as built. ``deepep`` / ``hybridep``: the all-to-all of the
    deduplicated rows, ``message x dispatch_share`` (:func:`perfmodel.parallel.expert.dispatch_share`;
    the servers the group spans come from the topology, one server without it). ``allgather``:
    the dispatch all-gathers the ``tokens`` of every rank of the group (output ``ep x message /
    top_k``) and the combine reduce-scatters them (Megatron-Core ``MoEAllGatherTokenDispatcher``);
    in backward the two swap. A layer without expert counts keeps its point.
    """
    dispatcher = ctx.plan.moe_dispatcher
    if dispatcher is DISPATCHER_ALLTOALL or not layer.top_k or point.op is not ALLTOALL:
        return point.op, point.message_bytes
    n = len(group)
    if dispatcher is DISPATCHER_ALLGATHER:
        gather = (layer.expert_role is ROLE_DISPATCH) == (phase == "F")
        op = ALLGATHER if gather else REDUCESCATTER
        return op, point.message_bytes / layer.top_k * n
    topo = getattr(ctx.costs, "topology", None)
    servers = len({topo.server_of(g) for g in group}) if topo is not None else 1
    share = dispatch_share(dispatcher, layer.experts, layer.top_k, n, servers, layer.routing_groups)
    return point.op, point.message_bytes * share


def _flex_kernel_floor(
    layer: LayerCost, point: CommPoint, phase: str, group: Sequence[str], ctx: SegmentCommContext
) -> float:
    """The flex dispatcher's kernel time from its published bandwidth
    (:func:`perfmodel.parallel.expert.flex_kernel_floor_s`) for a dispatch/combine layer's
    all-to-all ``point``: the dispatch layer's forward and the combine layer's backward run the
    dispatch kernel, the other two the combine kernel; the point's ``tokens x top_k`` rows are
    ``tokens`` once per server (``rdma``) or rank (``nvlink``) hit. 0 for the NCCL dispatchers,
    layers without expert counts and a cost model without a topology."""
    dispatcher, memo = ctx.plan.moe_dispatcher, ctx.memo
    topo = getattr(ctx.costs, "topology", None)
    if (
        not dispatcher.deduplicates
        or topo is None
        or not layer.top_k
        or not layer.experts
        or point.op is not ALLTOALL
    ):
        return 0.0
    combine = (layer.expert_role is ROLE_COMBINE) == (phase == "F")
    key = ("flex-floor", dispatcher, tuple(group), point.message_bytes, combine, layer.top_k,
           layer.experts, layer.routing_groups)  # fmt: skip
    hit = memo.get(key)
    if hit is not None:
        return hit
    fabric, line = flex_fabric(topo, group)
    servers = len({topo.server_of(g) for g in group})
    units = servers if servers > 1 else len(group)
    hits = flex_units_hit(layer.experts, layer.top_k, units, layer.routing_groups)
    floor = flex_kernel_floor_s(
        dispatcher, fabric, len(group), point.message_bytes / layer.top_k, hits, line, combine
    )
    memo[key] = floor
    return floor


def _overlap_slowdown(ctx: SegmentCommContext) -> float:
    """Compute slowdown beside the plan's dispatcher kernels
    (:func:`perfmodel.parallel.expert.overlap_compute_slowdown`; the GPU's SM count from the
    compute model, the house estimate without one)."""
    compute = getattr(ctx.costs, "compute", None)
    sm_count = compute.params.sm_count if compute is not None else 0
    return overlap_compute_slowdown(ctx.plan.moe_dispatcher, sm_count)


def _exposed_shares(
    ep_f: float, ep_b: float, fwd_s: float, bwd_s: float, slowdown: float
) -> tuple[float, float]:
    """The exposed shares ``(forward, backward)`` of one transformer block's expert
    all-to-alls (``ep_f`` / ``ep_b`` seconds) beside the partner micro-batch's compute of the
    same block in the other phase (``bwd_s`` / ``fwd_s``):
    :func:`perfmodel.parallel.expert.ep_overlap_exposed_s` over the all-to-alls; 1 for a phase
    without any (nothing to scale)."""
    share_f = ep_overlap_exposed_s(ep_f, bwd_s, slowdown) / ep_f if ep_f > 0 else 1.0
    share_b = ep_overlap_exposed_s(ep_b, fwd_s, slowdown) / ep_b if ep_b > 0 else 1.0
    return share_f, share_b


def _scaled(c: SegmentComm, share: float) -> SegmentComm:
    """``c`` exposed for ``share`` of its duration, replaying that share of its bytes."""
    return replace(c, message_bytes=c.message_bytes * share, duration_s=c.duration_s * share)


def _layer_overlap_sums(
    layer: LayerCost, ctx: SegmentCommContext
) -> tuple[float, float, float, float]:
    """``(forward all-to-alls, backward all-to-alls, forward compute, backward compute)``
    seconds of one layer for :func:`_block_overlap_shares`: the expert (``"ep"``) entries of
    :func:`_expert_context_comm` per phase, the layer's forward, and its backward with the
    forward share selective recomputation re-runs (as :func:`~perfmodel.parallel.lowering.
    _segment_sums` charges it; ``ep_overlap`` excludes full recomputation)."""
    lf, lbi, lbw = ctx.costs.layer_time(layer)
    ep_f = ep_b = 0.0
    for c in _expert_context_comm(layer, (lf, lbi + lbw), ctx):
        if c.kind is COMM_EP:
            if c.phase == "F":
                ep_f += c.duration_s
            else:
                ep_b += c.duration_s
    rerun = ctx.selective_share
    return ep_f, ep_b, lf, lbi + lbw + (lf * rerun(layer) if rerun is not None else 0.0)


def _block_overlap_shares(
    layers: Sequence[LayerCost], ctx: SegmentCommContext
) -> dict[int, tuple[float, float]]:
    """Each transformer block's (``LayerCost.block``) exposed shares of its forward and
    backward expert all-to-alls under ``ep_overlap`` (:func:`_exposed_shares` of the block's
    sums over ``layers``, :func:`_layer_overlap_sums`); layers outside a block (embedding,
    head: Megatron-Core's pre- and post-process, run outside the layer pairs) are left out."""
    sums: dict[int, list[float]] = {}
    for la in layers:
        if la.block is None:
            continue
        acc = sums.setdefault(la.block, [0.0, 0.0, 0.0, 0.0])
        for k, v in enumerate(_layer_overlap_sums(la, ctx)):
            acc[k] += v
    slowdown = _overlap_slowdown(ctx)
    return {
        blk: _exposed_shares(ep_f, ep_b, cf, cb, slowdown)
        for blk, (ep_f, ep_b, cf, cb) in sums.items()
    }


def _expert_context_overlapped(
    seg_layers: Sequence[LayerCost], ctx: SegmentCommContext
) -> tuple[list[SegmentComm], list[SegmentComm]]:
    """``ep_overlap``: a segment's expert and context collectives as issued
    (:func:`_expert_context_segment`) and with each expert all-to-all exposed only by its
    transformer block's share (:func:`_block_overlap_shares`, the whole block's sums from
    :attr:`SegmentCommContext.chunk_layers`, kept in :attr:`SegmentCommContext.block_shares`).

    Megatron-Core's combined 1F1B overlaps layer by layer (Megatron-LM 4415119,
    ``megatron/core/models/common/model_chunk_schedule_plan.py``):
    ``TransformerModelChunkSchedulePlan.run`` (lines 520-559) runs
    ``min(f_num_layers, b_num_layers)`` pairs of the forward micro-batch's layer ``i``
    (``get_layer(i)``) with the backward micro-batch's next layer in backward order
    (``pop_layer()``: layer ``L - 1 - i``), then the remaining layers alone, and the pre- and
    post-process (embedding, output layer) outside the pairs; ``TransformerLayerSchedulePlan.
    run`` (lines 229-297) overlaps one pair's all-to-alls with the other's compute
    (``comm_stream: combine_bwd | dispatch_fwd->dispatch_bwd | combine_fwd``, ``comp_stream:
    attn_fwd | mlp_bwd->mlp_bwd_dw->mlp_fwd | attn_bwd``); a dense layer's dispatch and
    combine are ``NoopScheduleNode`` s (lines 162-167). So one layer's spare compute cannot
    hide another pair's all-to-alls: the exposure is taken per block and summed, whatever the
    gradient buckets that group the blocks' layers into segments (a bucket may split a block:
    its share is the whole block's).

    Approximations kept: a block's all-to-alls of one phase hide under the *same* block's
    compute of the other phase (:func:`_exposed_shares`), where Megatron-Core pairs forward
    layer ``i`` with backward layer ``L - 1 - i`` of the backward micro-batch's chunk (another
    model chunk with interleaving): the same wherever those blocks cost alike (a stack of
    identical MoE blocks, e.g. Qwen3-235B-A22B's 94), not for a chunk that mixes dense and MoE
    blocks (DeepSeek-V3's first three dense layers pair with MoE layers there, and their
    compute hides nothing here); the pair's three stages are taken as one, each phase's
    all-to-alls against the other phase's whole compute of the block."""
    shares = ctx.block_shares
    if not shares:
        shares.update(_block_overlap_shares(ctx.chunk_layers, ctx))
    extra: list[SegmentComm] = []
    out: list[SegmentComm] = []
    ep_f: list[SegmentComm] = []
    ep_b: list[SegmentComm] = []
    for layer in seg_layers:
        got = _layer_expert_context(layer, ctx)
        extra += got
        if not any(c.kind is COMM_EP for c in got):
            out += got
            continue
        if layer.block is not None and layer.block in shares:
            share_f, share_b = shares[layer.block]
        else:  # an expert layer outside any block: a unit of its own
            f, b, cf, cb = _layer_overlap_sums(layer, ctx)
            share_f, share_b = _exposed_shares(f, b, cf, cb, _overlap_slowdown(ctx))
        for c in got:
            if c.kind is not COMM_EP:
                out.append(c)
            elif c.phase == "F":
                ep_f.append(_scaled(c, share_f))
            else:
                ep_b.append(_scaled(c, share_b))
    return extra, out + ep_f + ep_b


def _merged(comms: Sequence[SegmentComm]) -> tuple[SegmentComm, ...]:
    """One entry per (kind, phase, op): a segment's collectives of one kind run back to back
    on the compute stream, so their sum is what the step waits for."""
    acc: dict[tuple[CommKind, str, CollectiveOp], list[float]] = {}
    for c in comms:
        a = acc.setdefault((c.kind, c.phase, c.op), [0.0, 0.0, 0.0])
        a[0] += c.message_bytes
        a[1] += c.duration_s
        a[2] += c.full_s
    return tuple(SegmentComm(k, ph, op, b, t, f) for (k, ph, op), (b, t, f) in acc.items())
