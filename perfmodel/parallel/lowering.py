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
  communication time that runs under a compute segment (at most the segment); overlapped
  tensor-parallel collectives by the SMs their kernels hold, with the pipelined reduce-scatters'
  last chunk exposed (``preset.tp_overlap``, :class:`~perfmodel.parallel.software.TPOverlap`).
* **The eager host leads the GPU**: each stage's first compute waits for the kernels the host
  must issue before the GPU can run without waiting (:func:`~perfmodel.parallel.host_lead.issue_lead`), and the step does not
  end before the host has issued its last kernel.
* **Precision and overlap** come from the step's :class:`~perfmodel.parallel.recipe.Recipe`.

This module holds the step's values (:class:`StepInputs`, :class:`LoweredStep`) and the chunks
and segments a stage's compute is cut into, with their tensor-parallel collectives (the expert
and context-parallel ones: :mod:`perfmodel.parallel.segment_comm`); around it: :mod:`perfmodel.parallel.partition` (units, pipeline stages,
runs of identical blocks), :mod:`perfmodel.parallel.stage_memory` (memory per stage),
:mod:`perfmodel.parallel.host_lead` (the eager host's issue lead). The emitters are
:mod:`perfmodel.parallel.lower_pipeline` (all-reduce, ZeRO/FSDP, TP, PP schedules, Krizhevsky's
hybrid) and :mod:`perfmodel.parallel.lower_dp_variants` (one function per other data-parallel
mode); :func:`perfmodel.parallel.lower_step.lower` dispatches to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from perfmodel.ops import ALLGATHER, REDUCESCATTER, CollectiveOp
from perfmodel.parallel import bucket_walk
from perfmodel.parallel.bucket_walk import bucket_ranges
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.expert import CPImpl
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.partition import (
    BlockRun,
    block_count,
    block_runs,
    copies_runs,
    take_layers,
    unit_bounds,
    unit_ids,
)
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import CPComm, ParallelismPlan
from perfmodel.parallel.recipe import Recipe, SelectiveRecompute, build_recipe
from perfmodel.parallel.segment_comm import (
    SegmentComm,
    SegmentCommContext,
    _dispatch_sync_stalls,
    _expert_context_overlapped,
    _expert_context_segment,
    _merged,
)
from perfmodel.parallel.software import SoftwarePreset
from perfmodel.parallel.taskgraph import COMM_EP, TaskGraph
from perfmodel.workload.layers import (
    LAYER_LINEAR,
    ROLE_EXPERT,
    LayerCost,
    StackedLayers,
    Workload,
    runs_isum,
    sum_pieces,
    whole_copies,
)
from perfmodel.workload.memory import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, Optimizer


@dataclass(frozen=True)
class Segment:
    """Consecutive layers of a chunk lowered as one task (times for one micro-batch); which
    layers is its chunk's to say (:meth:`Chunk.segment_ids`), so one segment may stand at
    several places of a chunk and in several chunks (:func:`build_chunk`'s shape memo,
    :func:`_shifted_chunk`)."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    tp_fwd_s: float
    tp_bwd_s: float
    params: int
    activation_bytes: float
    flop: float
    dp_params: int = 0  # parameters replicated over data parallelism (gradients all-reduced)
    ep_cp: tuple[SegmentComm, ...] = ()  # expert all-to-alls, exposed ring-attention exchange
    expert_params: int = 0  # routed experts' parameters among ``params``
    #: GPU idle after its MoE dispatchers' host synchronisations, per forward
    #: (:func:`~perfmodel.parallel.expert.dispatcher_sync_stall_s`)
    host_sync_s: float = 0.0
    # forward seconds of the layers whose output a tensor-parallel reduce-scatter follows (the
    # row-parallel GEMMs Transformer Engine's pipelined overlap runs on fewer SMs)
    tp_rs_fwd_s: float = 0.0
    #: ``ep_overlap``: the expert all-to-alls as a phase with no partner exposes them (in
    #: full, unscaled): Megatron-Core's combined 1F1B runs the warm-up forwards and cool-down
    #: backwards alone (:func:`perfmodel.parallel.expert.unpaired_phases`)
    ep_unpaired: tuple[SegmentComm, ...] = ()

    def ep_cp_s(self, phase: str) -> float:
        """Exposed expert/context-parallel time of ``phase`` (``"F"`` or ``"B"``)."""
        return sum(c.duration_s for c in self.ep_cp if c.phase == phase)

    def ep_cp_of(self, phase: str, paired: bool = True) -> list[SegmentComm]:
        """The exposed expert/context-parallel entries of ``phase``: with ``paired`` false
        (``ep_overlap``, a phase with no partner), the expert all-to-alls in full
        (:attr:`ep_unpaired`) in place of their overlapped share."""
        if paired or not self.ep_unpaired:
            return [c for c in self.ep_cp if c.phase == phase]
        return [c for c in self.ep_cp if c.phase == phase and c.kind is not COMM_EP] + [
            c for c in self.ep_unpaired if c.phase == phase
        ]


@dataclass(frozen=True)
class Chunk:
    """One model chunk (a stage's layers; with interleaving, one of its ``v`` chunks)."""

    segments: tuple[Segment, ...]
    out_bytes: float
    in_bytes: float
    blocks: int
    layers: tuple[LayerCost, ...] | StackedLayers = ()
    """The chunk's layers: a tuple, or a slice of a stacked workload's layers (reads as that
    tuple; :func:`~perfmodel.workload.layers.layer_runs`)."""
    values_of: Chunk | None = field(default=None, compare=False, repr=False)
    """A chunk whose segments are this chunk's (the same objects, at other layer ids): the
    one it was read off (:func:`_shifted_chunk`), itself built segment by segment; ``None``:
    none named. Outside equality and ``repr`` (what the chunk is stays its fields);
    ``lower_hidden``'s summary reads one for the other (:meth:`~perfmodel.parallel.
    lower_hidden.HiddenCollectives._hidden_op`). A chunk made from another with other
    segments must not keep it (none is: chunks are built here and in the screens)."""
    layer_ids: Sequence[int] = ()
    """The chunk's layer ids segment by segment in forward order, each segment's ascending
    (a ``range`` where they are consecutive, a tuple otherwise: equality compares them as
    given, and ``range(0, 3) != (0, 1, 2)``); ``()`` in the screens' chunks, which have none."""
    cuts: tuple[int, ...] = ()
    """Where each segment starts in :attr:`layer_ids`, then their end: segment ``k`` holds
    ``layer_ids[cuts[k] : cuts[k + 1]]`` (:meth:`segment_ids`); ``len(segments) + 1`` entries, or
    ``()`` with no ids. A chunk made from another with other segments replaces
    :attr:`layer_ids` and :attr:`cuts` too (the owner broadcasts read them)."""

    def segment_ids(self, k: int) -> Sequence[int]:
        """The layer ids of segment ``k`` (``segments[k]``), ascending."""
        return self.layer_ids[self.cuts[k] : self.cuts[k + 1]]

    @property
    def fwd_s(self) -> float:
        return sum(s.fwd_s + s.tp_fwd_s + s.ep_cp_s("F") + s.host_sync_s for s in self.segments)

    @property
    def bwd_s(self) -> float:
        return sum(s.bwd_s + s.recompute_s + s.tp_bwd_s + s.ep_cp_s("B") for s in self.segments)

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
    stage_layers
        Per pipeline stage, the layers of its model chunks (one sequence per chunk; a stacked
        workload's slices), for a per-kernel-class breakdown of a stage's compute
        (:func:`perfmodel.compute.model.kernel_class_seconds`); empty where not recorded.
    microbatches
        Micro-batches each stage runs per step.
    stage_devices
        The simulated GPU of each pipeline stage (index = stage), for reading the kernel
        classes of the stage whose GPU the breakdown reads (``StepReport.kernel_classes``);
        empty where the lowering has one stage.
    """

    graph: TaskGraph
    memory: tuple[PlanMemory, ...]
    samples_per_step: int
    model_flop_per_step: float
    num_gpus: int
    min_period_s: float = 0.0
    staleness: dict[int, float] = field(default_factory=dict)
    tokens_per_sample: int = 1
    stage_layers: tuple[tuple[Sequence[LayerCost], ...], ...] = ()
    microbatches: int = 1
    stage_devices: tuple[str, ...] = ()


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
    comm_groups: Mapping[str, Sequence[Sequence[str]]] | None = None,
    seg_memo: dict[tuple[object, ...], Any] | None = None,
    cp_impl: CPImpl = CPImpl.TE_P2P,
    tp_used: dict[tuple[CollectiveOp, float], float] | None = None,
) -> Chunk:
    """Times and sizes of one chunk, split into segments by gradient bucket or by block.

    ``grad_bytes`` is the bucket's bytes per gradient element (the recipe's
    ``grad_reduce_bytes``; default the precision's). ``selective_share(layer)`` is the fraction of
    a layer's forward that selective recomputation re-runs (the recipe's
    ``SelectiveRecompute.share``; default Korthikanti's attention core). With full recomputation the recomputed
    forward's tensor-parallel collectives are booked with the backward's (``tp_bwd_s``), not as
    compute; an attention that selective recomputation re-runs whole (share 1: Megatron-Core's
    checkpointed core attention) re-runs its context-parallel exchange in backward.

    ``comm_groups`` maps a :class:`~perfmodel.workload.layers.CommPoint` group other than
    ``"tp"`` (``"ep"``, ``"cp"``) to its groups, the representative's first and then the
    siblings that run the same collective at once (:mod:`perfmodel.parallel.expert`): expert
    all-to-alls are exposed in full, ring attention's exchange only beyond the attention it
    overlaps (``cp_impl``, the stack's context-parallel implementation:
    :func:`~perfmodel.parallel.expert.ring_exposed_s` for Transformer Engine's,
    :func:`~perfmodel.parallel.expert.torch_cp_exposed_s` for PyTorch's); both become
    :class:`SegmentComm` entries.

    ``seg_memo`` (one dict per lowering: the same ``costs``, workload and keyword arguments)
    keeps each segment's per-layer sums (:func:`_segment_sums`) for the other chunks: the
    stages of a transformer stack hold copies of the same blocks, so their segments are summed
    once (their tensor-parallel times are still asked of each chunk's own group).

    ``tp_used`` (an empty dict) receives the chunk's TP collectives' seconds by ``(op, bytes)``,
    its only input from ``tp_group`` (:func:`chunk_of_another_plan`).
    """
    # ascending consecutive ids (a partition's chunk): so are every segment's sorted ids, which
    # are consecutive positions of layer_ids (a block, a bucket or all of them)
    contiguous = bool(layer_ids) and list(layer_ids) == list(range(layer_ids[0], layer_ids[-1] + 1))
    layers = take_layers(workload.layers, layer_ids, contiguous)
    copies = _StackCopies.of(workload.layers)
    grad_b = costs.precision.grad_bytes if grad_bytes is None else grad_bytes
    share = selective_share or SelectiveRecompute.ATTENTION_CORE.share
    act_b = costs.precision.activation_bytes
    seg_memo = {} if seg_memo is None else seg_memo
    tp = tuple(tp_group)
    rerun = share if plan.recompute is RECOMPUTE_SELECTIVE else None
    key_args = (by_block, bucket_bytes, first_bucket_bytes, exclude_sharded, grad_b, rerun)
    chunk_key = _chunk_key(copies, layer_ids, contiguous, comm_groups, costs, key_args)
    # this chunk's TP group and algorithm; a refused shift's asks are of this chunk's own
    # collectives (the same key: the same block offset and length)
    tp_time: dict[tuple[CollectiveOp, float], float] = {} if tp_used is None else tp_used
    shifted = _shifted_chunk(
        seg_memo, chunk_key, layer_ids[0], layers, costs, tp, algorithm, tp_time
    )
    if shifted is not None:  # an earlier chunk's split and segments at shifted ids
        return shifted
    every, cuts = _segment_ids(
        workload, layer_ids, layers, copies, contiguous, by_block, bucket_bytes,
        first_bucket_bytes, exclude_sharded, grad_b,
    )  # fmt: skip
    segs: list[Segment] = []
    groups_of = {k: tuple(tuple(g) for g in v) for k, v in (comm_groups or {}).items()}
    ctx = SegmentCommContext(costs, groups_of, algorithm, plan, cp_impl, rerun, chunk_layers=layers)
    stalls = _dispatch_sync_stalls(layers, layer_ids, ctx)
    by_shape = _shape_memo(copies, contiguous, groups_of, stalls, costs)
    # with a shape memo the ids are consecutive (contiguous): the shape read inline
    c_start, c_end, c_p = (copies.start, copies.end, copies.p) if copies else (0, 0, 1)
    for a, b in pairwise(cuts):  # forward order of segments: ids every[a:b]
        shape = None
        if by_shape is not None and c_start <= every[a] and every[b - 1] < c_end:
            shape = ((every[a] - c_start) % c_p, b - a)  # copies.shape(every[a:b])
            seen = by_shape.get(shape)
            if seen is not None:
                segs.append(seen)
                continue
        ids = every[a:b]
        seg_layers = take_layers(workload.layers, ids, contiguous)
        sums = _shape_sums(seg_layers, costs, exclude_sharded, rerun, seg_memo, copies, shape)
        f, bi, bw, rc, params, act, flop, dp_params, expert, fwd_points, bwd_points, rs_f = sums

        def point_time(point: tuple[CollectiveOp, float, str]) -> float:
            op, nbytes, grp = point  # another group's collectives are SegmentComm entries
            return 0.0 if grp in groups_of else _tp_time(tp_time, costs, op, nbytes, tp, algorithm)

        # n copies of a block's collectives: n x their time (adding 0.0 changes no sum)
        tf = sum_pieces(fwd_points, point_time)
        tb = sum_pieces(bwd_points, point_time)
        rc, tb, extra, unpaired = _recomputed_and_expert_context(seg_layers, f, rc, tf, tb, ctx)
        stall = sum(stalls.get(i, 0.0) for i in ids) if stalls else 0.0
        segs.append(Segment(
            f, bi + bw, rc, tf, tb, params, act, flop, dp_params, extra, expert, stall, rs_f,
            unpaired,
        ))  # fmt: skip
        if shape is not None:
            by_shape[shape] = segs[-1]  # type: ignore[index]
    last = workload.layers[layer_ids[-1]]
    first = workload.layers[layer_ids[0]]
    out_bytes = _elements(last.output_shape) * act_b
    in_bytes = _elements(first.output_shape) * act_b
    kept = layers if isinstance(layers, StackedLayers) else tuple(layers)  # copies unmade
    chunk = Chunk(tuple(segs), out_bytes, in_bytes, block_count(layers), kept, None, every, cuts)
    if chunk_key is not None and by_shape is not None:
        seg_memo[chunk_key] = (chunk, tuple(tp_time.items()))
    return chunk


#: Chunks by what they depend on other than their tensor-parallel group (issue 27: a plan's
#: micro-batch probes, then its whole lowering; plans that differ in their data-parallel size
#: or placement only): ``(layer ids, *LoweringShortcuts._chunk_memo_key) -> (workload, price
#: table, chunk, its TP collectives' seconds by (op, bytes))``, the first two kept so that
#: the ids in the key stay theirs; the oldest dropped first beyond :data:`_CHUNKS_SIZE`.
_CHUNKS: dict[tuple[object, ...], tuple[object, object, Chunk, tuple[object, ...]]] = {}

#: Entries (chunks, not plans) :data:`_CHUNKS` keeps. One GPT-3 175B tp8 pp8 plan with its
#: micro-batch probes adds 16 (DDP) to 48 (interleaved Megatron-Core) entries, so 1,024 held
#: ~21 plans and a cluster-size sweep (hardware varied slowest: every plan of one size must
#: stay until the next size reads it) missed every time. 4,096 holds ~85-256 such plans at
#: ~21 KB an entry (measured by the wave-12 read lastrd12), ~90 MB at worst;
#: the same reason and size as :data:`~perfmodel.parallel.lower_shortcuts._SHARED_CHUNKS_SIZE`.
_CHUNKS_SIZE = 4096


def chunk_of_another_plan(
    key: tuple[object, ...], wl: object, costs: object, group: Sequence[str], alg: str
) -> Chunk | None:
    """The chunk :func:`keep_chunk` kept under ``key`` where ``group`` prices each of its
    tensor-parallel collectives at the seconds it was built with; else ``None``.

    Exact: :func:`build_chunk` reads its group only through those prices (the key names
    everything else it reads: ``LoweringShortcuts._chunk_memo_key``), so with the same
    prices it builds the same segments, sum for sum."""
    hit = _CHUNKS.get(key)
    if hit is None or hit[0] is not wl or hit[1] is not costs.price_table:  # type: ignore[attr-defined]
        return None
    tp = tuple(group)
    for (op, nbytes), t in hit[3]:  # type: ignore[misc]
        if costs.collective_time(op, nbytes, tp, alg) != t:  # type: ignore[attr-defined]
            return None
    return hit[2]


def keep_chunk(
    key: tuple[object, ...],
    wl: object,
    costs: object,
    chunk: Chunk,
    tp_used: dict[tuple[CollectiveOp, float], float],
) -> None:
    """Keep ``chunk`` for :func:`chunk_of_another_plan` (bounded, oldest first out)."""
    if len(_CHUNKS) >= _CHUNKS_SIZE:
        _CHUNKS.pop(next(iter(_CHUNKS)), None)
    _CHUNKS[key] = (wl, costs.price_table, chunk, tuple(tp_used.items()))  # type: ignore[attr-defined]


def _chunk_key(
    copies: _StackCopies | None,
    layer_ids: Sequence[int],
    contiguous: bool,
    comm_groups: Mapping[str, object] | None,
    costs: Costs,
    args: tuple[object, ...],
) -> tuple[object, ...] | None:
    """What a chunk of consecutive ids inside a stack's whole copies depends on beyond the
    lowering's arguments (:func:`_shifted_chunk`): the block, the offset of its first id in
    the block and its length, then ``args`` (the split's and sums' arguments); ``None``
    outside the copies or where :func:`_shape_memo` would refuse (expert or context groups, a
    cost model pricing copies apart; dispatcher stalls are refused when the chunk of that key
    is built)."""
    if (
        copies is None
        or not contiguous
        or comm_groups
        or not getattr(costs, "prices_by_cost_key", False)
        or layer_ids[0] < copies.start
        or layer_ids[-1] >= copies.end
    ):
        return None
    offset = (layer_ids[0] - copies.start) % copies.p
    return ("chunk", id(copies.block[0]), offset, len(layer_ids), *args)


def _shifted_chunk(
    seg_memo: Mapping[tuple[object, ...], Any],
    key: tuple[object, ...] | None,
    first_id: int,
    layers: Sequence[LayerCost],
    costs: Costs,
    tp: tuple[str, ...],
    algorithm: str,
    mine: dict[tuple[CollectiveOp, float], float] | None = None,
) -> Chunk | None:
    """The chunk of consecutive ids from ``first_id`` read off the chunk :func:`build_chunk`
    built earlier in this lowering under :func:`_chunk_key` ``key`` (``seg_memo[key]``: the
    chunk, its tensor-parallel times by (op, bytes)) where this chunk's group
    ``tp`` prices every one of those collectives at the same seconds; else ``None`` (no such
    chunk, or another time: built anew).

    Exact: the ids are a whole number of blocks from ``seen``'s (the same offset in the block),
    so :func:`_segment_groups` walks the same gradient bytes in the same order (a copy's bytes
    are its block layer's) and cuts at the same offsets; every segment has the shape of
    ``seen``'s segment at that place, whose :func:`_shape_sums` are the lowering's memo's
    tuple, and its tensor-parallel times the same sums of the same values; the first and last
    layers are copies of the same block layers (the same output shapes) and the blocks as
    many. So the chunk holds ``seen``'s segments (a segment holds no ids) at the same cuts of
    its own ids, as :func:`build_chunk` gives them through its shape memo (issue 27: the
    middle stages of a GPT-3 175B plan, ~40-190 bucket segments each, walked once per stage
    before, then copied under their ids). ``seen``'s ids are consecutive (:func:`_chunk_key`
    keys only a chunk of consecutive ids), so this chunk's are too: a ``range`` as long."""
    seen = None if key is None else seg_memo.get(key)
    if seen is None:
        return None
    chunk, tp_items = seen
    mine = {} if mine is None else mine  # filled with this group's times (the caller's)
    for (op, nbytes), t in tp_items:
        if _tp_time(mine, costs, op, nbytes, tp, algorithm) != t:
            return None
    kept = layers if isinstance(layers, StackedLayers) else tuple(layers)
    every = range(first_id, first_id + len(chunk.layer_ids))
    return replace(chunk, layers=kept, values_of=chunk, layer_ids=every)  # segments, cuts kept


def _shape_sums(
    seg_layers: Sequence[LayerCost],
    costs: Costs,
    exclude_sharded: bool,
    rerun: Callable[[LayerCost], float] | None,
    seg_memo: dict[tuple[object, ...], _SegmentSums],
    copies: _StackCopies | None,
    shape: tuple[int, int] | None,
) -> _SegmentSums:
    """:func:`_segment_sums` of a segment; one of a stack's copies (``shape`` given,
    :meth:`_StackCopies.shape`) is kept in ``seg_memo`` under its shape too, so the segments of
    that shape in the lowering's other chunks skip :func:`~perfmodel.parallel.partition.
    block_runs` (exact as the shape memo of :func:`build_chunk`: the same runs' keys, hence the
    memo's tuple); its runs are read off the block (:data:`SHAPE_RUNS`: a shape is given only
    where the costs ``prices_by_cost_key``, :func:`_shape_memo`'s condition, which
    :func:`~perfmodel.parallel.partition.copies_runs` needs)."""
    if shape is None or copies is None:
        return _segment_sums(seg_layers, costs, exclude_sharded, rerun, seg_memo)
    key = ("shape", id(copies.block[0]), *shape, exclude_sharded, rerun)
    hit = seg_memo.get(key)
    if hit is None:
        runs = copies_runs(copies.block, copies.keys, *shape) if SHAPE_RUNS else None
        hit = _segment_sums(seg_layers, costs, exclude_sharded, rerun, seg_memo, runs)
        seg_memo[key] = hit
    return hit


#: Whether :func:`_shape_sums` reads a shape's runs off the block
#: (:func:`~perfmodel.parallel.partition.copies_runs`); ``False``: ``block_runs`` of the
#: segment's layers (``tests/parallel/test_copies_runs.py`` compares both ways).
SHAPE_RUNS = True


def _recomputed_and_expert_context(
    seg_layers: Sequence[LayerCost],
    fwd_s: float,
    recompute_s: float,
    tp_fwd_s: float,
    tp_bwd_s: float,
    ctx: SegmentCommContext,
) -> tuple[float, float, tuple[SegmentComm, ...], tuple[SegmentComm, ...]]:
    """A segment's ``(recompute_s, tp_bwd_s, expert/context comms, unpaired expert comms)``
    (:func:`build_chunk`): its expert and context-parallel collectives
    (:func:`~perfmodel.parallel.segment_comm._expert_context_segment`, only with ``"ep"`` /
    ``"cp"`` groups); full recomputation re-runs the forward (``recompute_s = fwd_s``), its TP
    collectives (added to ``tp_bwd_s``) and its expert/context exchanges in backward;
    ``ep_overlap`` (never with full recomputation: :class:`~perfmodel.parallel.plan.
    ParallelismPlan` refuses it) keeps the expert collectives as issued (``unpaired``) and
    exposes each only beyond its transformer block's compute of the other phase, block by
    block (:func:`~perfmodel.parallel.segment_comm._expert_context_overlapped`: Megatron-Core's
    combined 1F1B pairs layers, not gradient buckets)."""
    plan = ctx.plan
    if plan.ep_overlap and ctx.groups_of:
        issued, overlapped = _expert_context_overlapped(seg_layers, ctx)
        unpaired = _merged([c for c in issued if c.kind is COMM_EP])
        return recompute_s, tp_bwd_s, _merged(overlapped), unpaired
    extra = _expert_context_segment(seg_layers, ctx) if ctx.groups_of else []
    if plan.recompute is RECOMPUTE_FULL:
        recompute_s = fwd_s
        tp_bwd_s += tp_fwd_s  # the recomputed forward re-runs its TP collectives
        extra += [replace(c, phase="B") for c in extra if c.phase == "F"]
    return recompute_s, tp_bwd_s, _merged(extra), ()


def _segment_ids(
    workload: Workload,
    layer_ids: Sequence[int],
    layers: Sequence[LayerCost],
    copies: _StackCopies | None,
    contiguous: bool,
    by_block: bool,
    bucket_bytes: float | None,
    first_bucket_bytes: float | None,
    exclude_sharded: bool,
    grad_b: float,
) -> tuple[Sequence[int], tuple[int, ...]]:
    """A chunk's layer ids segment by segment in forward order, each segment's sorted, and
    the segments' cuts in them (:attr:`Chunk.layer_ids`, :attr:`Chunk.cuts`):
    :func:`_segment_groups`, or for a bucketed chunk of consecutive ids the same buckets
    walked as id ranges (:func:`~perfmodel.parallel.bucket_walk.bucket_ranges`: a stack's
    repeating blocks walked once; ``bucket_walk.RANGES``), or for a chunk of consecutive ids
    split by block its units as ranges (:func:`~perfmodel.parallel.partition.unit_bounds`:
    the same ids, not listed and sorted). Consecutive ids stay the chunk's ``range``: the
    segments of a chunk cover it in order, so only their cuts are new."""
    if bucket_walk.RANGES and contiguous and not by_block and bucket_bytes is not None:
        if copies is not None:
            start, end = copies.start, copies.end
            block_b = [_grad_bytes(la, exclude_sharded, grad_b) for la in copies.block]
            source = copies.source
        else:
            start, end, block_b, source = 0, 0, [], workload.layers.__getitem__
        lo, hi = layer_ids[0], layer_ids[-1]
        ranges = bucket_ranges(
            lo,
            hi,
            first_bucket_bytes or bucket_bytes,
            bucket_bytes,
            block_b,
            start,
            end,
            lambda i: _grad_bytes(workload.layers[i], exclude_sharded, grad_b),
            lambda i: source(i).params,
        )  # backward order; a bucket ``(a, b)`` ends at position ``b - lo + 1``
        return range(lo, hi + 1), (0, *[b - lo + 1 for _, b in reversed(ranges)])
    if contiguous and by_block:  # _segment_groups' units, read as ranges
        return range(layer_ids[0], layer_ids[-1] + 1), (0, *[b for _, b in unit_bounds(layers)])
    groups = _segment_groups(
        workload, layer_ids, layers, copies, by_block, bucket_bytes, first_bucket_bytes,
        exclude_sharded, grad_b,
    )  # fmt: skip
    cuts = [0]
    for g in reversed(groups):
        cuts.append(cuts[-1] + len(g))
    if contiguous:  # the groups cover the ids in order
        return range(layer_ids[0], layer_ids[-1] + 1), tuple(cuts)
    return tuple(i for g in reversed(groups) for i in sorted(g)), tuple(cuts)


def _segment_groups(
    workload: Workload,
    layer_ids: Sequence[int],
    layers: Sequence[LayerCost],
    copies: _StackCopies | None,
    by_block: bool,
    bucket_bytes: float | None,
    first_bucket_bytes: float | None,
    exclude_sharded: bool,
    grad_b: float,
) -> list[list[int]]:
    """A chunk's layer ids split into segments, in backward order (reverse layers): one per
    block (``by_block``), one for the chunk (no buckets), or closed when the gradient bucket is
    full (the first bucket ``first_bucket_bytes``, then ``bucket_bytes``; PyTorch DDP's
    ``bucket_cap_mb`` and Megatron's buckets fill in backward order). A last bucket without
    parameters joins the one before it."""
    groups: list[list[int]] = []
    if by_block:
        for u in unit_ids(layers):
            groups.append([layer_ids[i] for i in u])
        groups.reverse()
        return [list(reversed(g)) for g in groups]
    if bucket_bytes is None:
        return [list(reversed(layer_ids))]
    cap = first_bucket_bytes or bucket_bytes
    acc = 0.0
    cur: list[int] = []
    # a gradient's bytes per block layer, read once: a copy's layer adds its block layer's
    # (the same product; an excluded layer adds 0.0, which leaves a non-negative sum as it is)
    start, end, p = (copies.start, copies.end, copies.p) if copies is not None else (0, 0, 1)
    block_b = (
        [] if copies is None else [_grad_bytes(la, exclude_sharded, grad_b) for la in copies.block]
    )
    for i in reversed(layer_ids):
        cur.append(i)
        if start <= i < end:
            acc += block_b[(i - start) % p]
        else:
            acc += _grad_bytes(workload.layers[i], exclude_sharded, grad_b)
        if acc >= cap:
            groups.append(cur)
            cur, acc, cap = [], 0.0, bucket_bytes
    if cur:
        source = copies.source if copies is not None else workload.layers.__getitem__
        if groups and sum(source(i).params for i in cur) == 0:
            groups[-1].extend(cur)
        else:
            groups.append(cur)
    return groups


def _grad_bytes(layer: LayerCost, exclude_sharded: bool, grad_b: float) -> float:
    """Gradient bytes ``layer`` adds to a data-parallel bucket (:func:`_segment_groups`):
    ``params x grad_b``, 0 for a layer whose parameters are sharded (``exclude_sharded`` and a
    collective of its own)."""
    if exclude_sharded and (layer.fwd_comm or layer.bwd_comm):
        return 0.0
    return layer.params * grad_b


def _shape_memo(
    copies: _StackCopies | None,
    contiguous: bool,
    groups_of: Mapping[str, object],
    stalls: Mapping[int, float],
    costs: Costs,
) -> dict[tuple[int, int], Segment] | None:
    """An empty memo of segments by shape (offset in the block, length) inside a stack's
    copies (:class:`_StackCopies`), or ``None`` where a segment depends on more than its
    shape: per layer id (dispatch stalls, expert or context groups) or per layer object (a cost
    model pricing copies apart)."""
    if (
        copies is not None
        and contiguous
        and not groups_of
        and not stalls
        and getattr(costs, "prices_by_cost_key", False)
    ):
        return {}
    return None


class _StackCopies:
    """The whole copies of a transformer stack's block in a workload's layers
    (:func:`~perfmodel.workload.layers.whole_copies`): ids ``start .. end - 1``, copy ``j``
    the block's ``p`` layers from ``start + j p``; read without making the copies.

    :func:`build_chunk` prices a segment of consecutive ids inside them once per *shape*
    (the offset of its first id in the block, its length) and puts that segment at the other
    places of that shape too (a segment holds no ids: :meth:`Chunk.segment_ids`). Exact:
    their layers are copies of the same block layers in the same order, with the block
    boundaries at the same places, so
    :func:`~perfmodel.parallel.partition.block_runs` reads the same runs, source ids and
    counts, :func:`_segment_sums` returns the memoised tuple of that key (the same floats),
    and the tensor-parallel times are the same sums of the same chunk-wide memo's values;
    nothing else in a segment depends on its ids where :func:`build_chunk` uses it (no
    dispatcher stalls, no expert or context groups, a cost model that prices a copy as its
    source: ``prices_by_cost_key``). Issue 27: the bucket segments of a GPT-3 175B stage
    repeat with every block (PyTorch DDP's 25 MiB buckets: ~190 segments per chunk, four
    shapes), and ``block_runs`` per segment made a new plan's chunks 5-8 ms of its 11-25 ms."""

    __slots__ = ("block", "end", "keys", "layers", "p", "start")

    #: The last layers :meth:`of` read and its answer (the layers kept, so their identity
    #: stays theirs): a lowering asks it of one workload's layers for every chunk.
    _last: tuple[Sequence[LayerCost], _StackCopies | None] | None = None

    def __init__(
        self, layers: Sequence[LayerCost], start: int, block: tuple[LayerCost, ...], copies: int
    ) -> None:
        self.layers, self.start, self.block, self.p = layers, start, block, len(block)
        self.end = start + copies * self.p
        self.keys = tuple(map(id, map(LayerCost.cost_source, block)))  # block_runs' unit key

    @classmethod
    def of(cls, layers: Sequence[LayerCost]) -> _StackCopies | None:
        last = cls._last
        if last is not None and last[0] is layers:
            return last[1]
        wc = whole_copies(layers)
        copies = None if wc is None or not wc[1] else cls(layers, wc[0], tuple(wc[1]), len(wc[2]))
        cls._last = (layers, copies)
        return copies

    def source(self, i: int) -> LayerCost:
        """A layer equal to layer ``i`` in every cost field (its block layer where ``i`` is a
        copy's; only the layer outside the copies is read)."""
        if self.start <= i < self.end:
            return self.block[(i - self.start) % self.p]
        return self.layers[i]

    def shape(self, ids: tuple[int, ...]) -> tuple[int, int] | None:
        """``(offset in the block, length)`` of consecutive ``ids`` inside the copies, else
        ``None``."""
        a, b = ids[0], ids[-1]
        if a < self.start or b >= self.end or b - a + 1 != len(ids):
            return None
        return (a - self.start) % self.p, len(ids)


#: Collectives of a segment in order, as runs: ``(points, n)`` is ``n`` copies of ``points``
#: back to back, each point ``(op, bytes, group)``.
_PointRuns = tuple[tuple[tuple[tuple[CollectiveOp, float, str], ...], int], ...]

_SegmentSums = tuple[
    float, float, float, float, int, float, float, int, int, _PointRuns, _PointRuns, float
]


def _segment_sums(
    layers: Sequence[LayerCost],
    costs: Costs,
    exclude_sharded: bool,
    share: Callable[[LayerCost], float] | None,
    memo: dict[tuple[object, ...], _SegmentSums],
    runs: list[BlockRun] | None = None,
) -> _SegmentSums:
    """A segment's per-layer sums, in layer order: forward, backward-input, backward-weight and
    selectively recomputed (``share`` given) seconds, parameters, activation bytes, FLOP,
    data-parallel parameters, routed experts' parameters, its forward and backward
    :class:`~perfmodel.workload.layers.CommPoint` s as ``(op, bytes, group)`` in runs
    (:data:`_PointRuns`: ``(points, n)``, a unit's points for ``n`` identical units, whose time
    :func:`build_chunk` sums once and multiplies), and the forward seconds of the layers whose
    output a tensor-parallel reduce-scatter follows (``Segment.tp_rs_fwd_s``).

    Summed by :func:`~perfmodel.parallel.partition.block_runs`: the layers of a run of ``n`` identical units (a transformer
    stack's blocks) are summed once and the unit's sums added as ``n x sum``; layers of single
    units are added one by one, in layer order, as before. Exactness: the integer sums are exact; the float sums are of
    non-negative terms (seconds, bytes, FLOP), whose computed sum in any order is within
    ``(k - 1) u`` relative of the exact one (``k`` terms, ``u = 2**-53``; Higham 2002, *Accuracy
    and Stability of Numerical Algorithms*, sec. 4.2), and ``n x s`` adds one rounding, so the
    two orders agree within ``2 k u``: 2.6e-13 relative for a 1,158-layer GPT-3, below the
    1e-12 the lowering promises (``tests/parallel/test_block_runs.py``). ``share`` must depend on
    a layer's cost fields and on whether its ``block`` is ``None`` only (as
    :meth:`~perfmodel.parallel.recipe.SelectiveRecompute.share` does): it is asked of the
    first unit of a run.

    Memoised in ``memo`` by the runs' source ids and copies (where ``costs`` prices by cost key,
    the segments of identical blocks on other stages sum the same values in the same order: the
    same floats), the flag, ``share`` and each unit's shares; ``memo`` must not outlive the
    layers (their ids) nor span two ``costs``. ``runs``: ``block_runs(layers, costs)`` where
    the caller has it (:func:`~perfmodel.parallel.partition.copies_runs`)."""
    runs = block_runs(layers, costs) if runs is None else runs  # given: the same runs
    shares = (
        tuple(tuple(share(la) for la in unit) for unit, _, _ in runs) if share is not None else ()
    )
    key = (exclude_sharded, share, shares, *((k, n) for _, k, n in runs))
    hit = memo.get(key)
    if hit is not None:
        return hit
    f = bi = bw = rc = rs_f = 0.0
    params = dp_params = expert = 0
    act = flop = 0.0
    fwd: list[tuple[tuple[tuple[CollectiveOp, float, str], ...], int]] = []
    bwd: list[tuple[tuple[tuple[CollectiveOp, float, str], ...], int]] = []
    layer_time, linear, expert_role = costs.layer_time, LAYER_LINEAR, ROLE_EXPERT
    for r, (unit, _, n) in enumerate(runs):
        if n == 1:  # a single unit: layer by layer into the totals, as before
            uf, ubi, ubw, urc, urs, uact, uflop = f, bi, bw, rc, rs_f, act, flop
        else:  # a run: the unit's sums, added n times below
            uf = ubi = ubw = urc = urs = 0.0
            uact = uflop = 0.0
        udp = uexpert = 0  # integers: exact in any order (expert_params' sum, inline)
        ufwd: list[tuple[CollectiveOp, float, str]] = []
        ubwd: list[tuple[CollectiveOp, float, str]] = []
        for j, layer in enumerate(unit):
            if not (exclude_sharded and (layer.fwd_comm or layer.bwd_comm)):
                udp += layer.params
            if layer.expert_role is expert_role:
                uexpert += layer.params
            lf, lbi, lbw = layer_time(layer)
            rs = lf if layer.kind is linear and _tp_reduce_scattered(layer) else 0.0
            uf += lf
            urs += rs
            ubi += lbi
            ubw += lbw
            uact += layer.activation_bytes
            uflop += layer.total_flop
            if shares:
                urc += lf * shares[r][j]
            params += n * layer.params
            if layer.fwd_comm:
                ufwd += [(cp.op, cp.message_bytes, cp.group) for cp in layer.fwd_comm]
            if layer.bwd_comm:
                ubwd += [(cp.op, cp.message_bytes, cp.group) for cp in layer.bwd_comm]
        if n == 1:
            f, bi, bw, rc, rs_f, act, flop = uf, ubi, ubw, urc, urs, uact, uflop
        else:
            f += n * uf
            rs_f += n * urs
            bi += n * ubi
            bw += n * ubw
            rc += n * urc
            act += n * uact
            flop += n * uflop
        dp_params += n * udp
        expert += n * uexpert
        _add_points(fwd, ufwd, n)
        _add_points(bwd, ubwd, n)
    out = memo[key] = (
        f,
        bi,
        bw,
        rc,
        params,
        act,
        flop,
        dp_params,
        expert,
        tuple(fwd),
        tuple(bwd),
        rs_f,
    )
    return out


def _tp_reduce_scattered(layer: LayerCost) -> bool:
    """Whether ``layer`` is a GEMM whose output a tensor-parallel reduce-scatter follows (the
    row-parallel linears of sequence parallelism: attention projection and second MLP matrix;
    not the embedding, whose reduce-scatter no GEMM overlaps)."""
    return layer.kind is LAYER_LINEAR and any(
        cp.op is REDUCESCATTER and cp.group == "tp" for cp in layer.fwd_comm
    )


def _add_points(
    runs: list[tuple[tuple[tuple[CollectiveOp, float, str], ...], int]],
    points: list[tuple[CollectiveOp, float, str]],
    n: int,
) -> None:
    """Append ``n`` copies of ``points`` to ``runs`` (:data:`_PointRuns`); single units' points
    join the run before them when that is single too (one sequential sum, as before)."""
    if not points:
        return
    if n == 1 and runs and runs[-1][1] == 1:
        runs[-1] = (runs[-1][0] + tuple(points), 1)
    else:
        runs.append((tuple(points), n))


def _tp_time(
    memo: dict[tuple[CollectiveOp, float], float],
    costs: Costs,
    op: CollectiveOp,
    nbytes: float,
    group: tuple[str, ...],
    algorithm: str,
) -> float:
    """``costs.collective_time(op, nbytes, group, algorithm)`` memoised by ``(op, nbytes)``
    in ``memo`` (one per group and algorithm: a chunk's tensor-parallel group)."""
    t = memo.get((op, nbytes))
    if t is None:
        t = memo[(op, nbytes)] = costs.collective_time(op, nbytes, group, algorithm)
    return t


def cp_gathered_kv_bytes(
    layers: Sequence[LayerCost], plan: ParallelismPlan, cp_impl: CPImpl = CPImpl.TE_P2P
) -> float:
    """Transient bytes of ``cp_comm=allgather`` and of PyTorch's all-gather rotater
    (``cp_impl`` ``torch`` or ``torch-compile``, :class:`~perfmodel.parallel.expert.CPImpl`):
    one layer's K and V gathered for the whole sequence (the largest ``"cp"`` all-gather
    output, ``cp x b x s/cp x kv_heads x (d + d_v) x act_bytes``, the repeated heads for
    PyTorch), live while that layer's attention runs; 0 for Transformer Engine's ring, whose in-flight chunk is not
    booked here."""
    if plan.cp <= 1 or (plan.cp_comm is not CPComm.ALLGATHER and not cp_impl.sdpa_ring):
        return 0.0
    return max(
        (
            c.message_bytes
            for la in layers
            for c in la.fwd_comm
            if c.group == "cp" and c.op is ALLGATHER
        ),
        default=0.0,
    )


def expert_params(layers: Sequence[LayerCost]) -> int:
    """Parameters of routed experts (``ExpertRole.EXPERT``) among ``layers``: their gradients
    and sharded state live on the expert data-parallel group, not the dense one. A stack's
    copies of a block are read as the block times the copies
    (:func:`~perfmodel.workload.layers.runs_isum`: integers, exact)."""
    return runs_isum(layers, lambda la: la.params if la.expert_role is ROLE_EXPERT else 0)


def ring_share(k: int, n: int) -> float:
    """Bytes per rank a ring collective over ``k`` ranks moves relative to one over ``n`` of the
    same buffer: ``((k - 1) / k) / ((n - 1) / n)`` (a ring all-reduce or reduce-scatter moves
    ``(m - 1) / m`` of the buffer per rank, Patarasuk & Yuan 2009); 1 at ``k = n``, 0 at
    ``k <= 1`` (nothing to reduce).

    >>> ring_share(4, 4), ring_share(1, 4), round(ring_share(8, 64), 4)  # (7/8) / (63/64)
    (1.0, 0.0, 0.8889)
    """
    if k == n:
        return 1.0
    if k <= 1:
        return 0.0
    return ((k - 1) / k) / ((n - 1) / n)


def expert_grad_share(plan: ParallelismPlan) -> float:
    """Gradient traffic of a routed-expert parameter relative to a dense one.

    Expert gradients are reduced over the expert data-parallel group of ``e`` ranks
    (:attr:`ParallelismPlan.expert_dp`), dense ones over the ``D = dp x cp`` replicas; a ring
    all-reduce or reduce-scatter moves ``(n - 1) / n`` of the buffer per rank (Patarasuk & Yuan
    2009), so the lowering reduces the expert gradients with the dense ones, their bytes scaled
    by ``((e - 1) / e) / ((D - 1) / D)`` (0 when ``ep`` spans every replica, as Megatron-Core then
    reduces no expert gradient). The expert group's own placement is not simulated separately.

    >>> expert_grad_share(ParallelismPlan(dp=16, ep=16)), expert_grad_share(ParallelismPlan(dp=8))
    (0.0, 1.0)
    >>> round(expert_grad_share(ParallelismPlan(dp=64, ep=8)), 4)  # (7/8) / (63/64)
    0.8889
    """
    d, e = plan.grad_replicas, plan.expert_dp
    if plan.ep == 1 or d < 2:
        return 1.0
    return ring_share(e, d)


# --------------------------------------------------------------------------- lowering


@dataclass(frozen=True)
class StepInputs:
    """Everything :func:`~perfmodel.parallel.lower_step.lower` needs besides the cost model."""

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
