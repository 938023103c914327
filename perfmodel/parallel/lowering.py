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
  must issue before the GPU can run without waiting (:func:`issue_lead`), and the step does not
  end before the host has issued its last kernel.
* **Precision and overlap** come from the step's :class:`~perfmodel.parallel.recipe.Recipe`.

This module holds the pieces (partition, chunks and segments, memory); the emitters are
:mod:`perfmodel.parallel.lower_pipeline` (all-reduce, ZeRO/FSDP, TP, PP schedules, Krizhevsky's
hybrid) and :mod:`perfmodel.parallel.lower_dp_variants` (one function per other data-parallel
mode); :func:`lower` dispatches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from perfmodel.errors import InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.expert import CPImpl
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import (
    CPComm,
    DPMode,
    Hybrid,
    MoEDispatcher,
    ParallelismPlan,
    Recompute,
)
from perfmodel.parallel.recipe import (
    AmpStyle,
    Recipe,
    SelectiveRecompute,
    build_recipe,
    default_recipe,
    fp8_saved_input_delta,
)
from perfmodel.parallel.software import SoftwarePreset
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskGraph, TaskKind
from perfmodel.workload.layers import (
    CommPoint,
    ExpertRole,
    LayerCost,
    LayerKind,
    StackedLayers,
    Workload,
    distinct_layers,
    layer_runs,
    runs_isum,
    sum_pieces,
)
from perfmodel.workload.memory import ModuleRecompute, Optimizer


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
    ep_cp: tuple[SegmentComm, ...] = ()  # expert all-to-alls, exposed ring-attention exchange
    expert_params: int = 0  # routed experts' parameters among ``params``
    #: GPU idle after its MoE dispatchers' host synchronisations, per forward
    #: (:func:`~perfmodel.parallel.expert.dispatcher_sync_stall_s`)
    host_sync_s: float = 0.0
    # forward seconds of the layers whose output a tensor-parallel reduce-scatter follows (the
    # row-parallel GEMMs Transformer Engine's pipelined overlap runs on fewer SMs)
    tp_rs_fwd_s: float = 0.0

    def ep_cp_s(self, phase: str) -> float:
        """Exposed expert/context-parallel time of ``phase`` (``"F"`` or ``"B"``)."""
        return sum(c.duration_s for c in self.ep_cp if c.phase == phase)


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


# --------------------------------------------------------------------------- partitioning


def _unit_spans(layers: Sequence[LayerCost]) -> list[tuple[int, int, bool]]:
    """Runs of consecutive layers with the same ``block`` as ``(start, end, has a block)``
    index ranges; a stack's whole copies (:func:`_pieces`) are one unit each, read from the
    stack's template (no copy is made)."""
    spans: list[tuple[int, int, bool]] = []
    i = 0
    start = 0
    prev: object = object()
    for piece, n in _pieces(layers):
        if n > 1:
            if i > start:
                spans.append((start, i, prev is not None))
            p = len(piece)
            spans += [(i + j * p, i + (j + 1) * p, True) for j in range(n)]
            i += n * p
            start, prev = i, object()
            continue
        for la in piece:
            b = la.block
            if i > start and b != prev:
                spans.append((start, i, prev is not None))
                start = i
            prev = b
            i += 1
    if i > start:
        spans.append((start, i, prev is not None))
    return spans


def _units(layers: Sequence[LayerCost]) -> list[list[int]]:
    """Runs of consecutive layers with the same ``block`` (``None`` runs are their own unit)."""
    return [list(range(a, b)) for a, b, _ in _unit_spans(layers)]


def _take(layers: Sequence[LayerCost], ids: Sequence[int], contiguous: bool) -> Sequence[LayerCost]:
    """``[layers[i] for i in ids]``; the slice of ``layers`` where ``ids`` are ``contiguous``
    (ascending consecutive indices: a :class:`~perfmodel.workload.layers.StackedLayers` slice
    keeps its copies unmade)."""
    if contiguous and ids:
        return layers[ids[0] : ids[-1] + 1]
    return [layers[i] for i in ids]


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
    spans = _unit_spans(workload.layers)
    units = [list(range(a, b)) for a, b, _ in spans]
    in_block = [has for _, _, has in spans]
    if k == 1:
        return [list(range(len(workload.layers)))]
    blocks = [u for u, has in zip(units, in_block, strict=True) if has]
    nb = len(blocks)
    if k > nb:
        raise InfeasiblePlanError(
            f"{where}: {k} pipeline chunks but model {workload.name} has only {nb} blocks to "
            f"split between; use at most {nb}",
            value=k,
            where=where,
        )
    block_costs = [round(sum(unit_cost[a:b]), 12) for a, b, has in spans if has]
    uniform = len(set(block_costs)) == 1 and nb > 1
    if uniform and not (allow_uneven and nb % k):
        per_stage = _uneven_ends(nb, k)
        if per_stage is not None:
            return _cut(units, in_block, per_stage)
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
        for u, has in zip(units, in_block, strict=True):
            if not has:
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


def _uneven_ends(nb: int, k: int) -> list[int] | None:
    """Blocks per chunk when ``k`` does not divide ``nb`` but ``ceil(nb / k) x k - nb == 2``:
    every chunk takes ``ceil(nb / k)`` blocks except the first and the last, one fewer each
    (Llama 3 405B's 126 layers on 16 stages, Dubey et al. 2024 sec. 3.3.2: "we remove one
    Transformer layer each from the first and the last stages"; Megatron-Core
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``); ``None``
    otherwise (``k`` divides, or another deficit: say which layers go where explicitly).

    >>> _uneven_ends(126, 16)[:3], _uneven_ends(126, 16)[-1], _uneven_ends(8, 4), _uneven_ends(24, 5)
    ([7, 8, 8], 7, None, None)
    """
    if k < 2 or nb % k == 0:
        return None
    per = -(-nb // k)
    short = per * k - nb
    if short != 2 or per < 2:
        return None
    return [per - 1] + [per] * (k - 2) + [per - 1]


def _cut(units: list[list[int]], in_block: list[bool], per_stage: list[int]) -> list[list[int]]:
    """Chunks of ``per_stage[i]`` blocks each; block-less units (``in_block`` false) join the
    neighbouring chunk (the first, or the previous block's), as in :func:`partition`."""
    owner: list[int] = [c for c, n in enumerate(per_stage) for _ in range(n)]
    out: list[list[int]] = [[] for _ in per_stage]
    seen = 0
    for u, has in zip(units, in_block, strict=True):
        if not has:
            out[0 if seen == 0 else owner[seen - 1]].extend(u)
        else:
            out[owner[seen]].extend(u)
            seen += 1
    return out


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
    comm_groups: Mapping[str, Sequence[Sequence[str]]] | None = None,
    seg_memo: dict[tuple[object, ...], _SegmentSums] | None = None,
    cp_impl: CPImpl = CPImpl.TE_P2P,
) -> Chunk:
    """Times and sizes of one chunk, split into segments by gradient bucket or by block.

    ``grad_bytes`` is the bucket's bytes per gradient element (the recipe's
    ``grad_reduce_bytes``; default the precision's). ``selective_share(layer)`` is the fraction of
    a layer's forward that selective recomputation re-runs (the recipe's
    ``SelectiveRecompute.share``; default Korthikanti's attention core). With full recomputation the recomputed
    forward's tensor-parallel collectives are booked with the backward's (``tp_bwd_s``), not as
    compute.

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
    """
    # ascending consecutive ids (a partition's chunk): so are every segment's sorted ids, which
    # are consecutive positions of layer_ids (a block, a bucket or all of them)
    contiguous = bool(layer_ids) and list(layer_ids) == list(range(layer_ids[0], layer_ids[-1] + 1))
    layers = _take(workload.layers, layer_ids, contiguous)
    grad_b = costs.precision.grad_bytes if grad_bytes is None else grad_bytes
    share = selective_share or SelectiveRecompute.ATTENTION_CORE.share
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
    groups_of = {k: tuple(tuple(g) for g in v) for k, v in (comm_groups or {}).items()}
    memo: dict[tuple[object, ...], float] = {}  # identical blocks: one closed form per collective
    stalls = _dispatch_sync_stalls(
        layers, layer_ids, costs, groups_of, algorithm, memo, plan.moe_dispatcher
    )
    tp_time: dict[tuple[CollectiveOp, float], float] = {}  # this chunk's TP group, algorithm
    selective = plan.recompute is Recompute.SELECTIVE
    if seg_memo is None:
        seg_memo = {}
    for g in reversed(groups):  # forward order of segments
        ids = tuple(sorted(g))
        seg_layers = _take(workload.layers, ids, contiguous)
        sums = _segment_sums(
            seg_layers, costs, exclude_sharded, share if selective else None, seg_memo
        )
        f, bi, bw, rc, params, act, flop, dp_params, expert, fwd_points, bwd_points, rs_f = sums

        def point_time(point: tuple[CollectiveOp, float, str]) -> float:
            op, nbytes, grp = point  # another group's collectives are SegmentComm entries
            return 0.0 if grp in groups_of else _tp_time(tp_time, costs, op, nbytes, tp, algorithm)

        # n copies of a block's collectives: n x their time (adding 0.0 changes no sum)
        tf = sum_pieces(fwd_points, point_time)
        tb = sum_pieces(bwd_points, point_time)
        extra: list[SegmentComm] = []
        if groups_of:
            for layer in seg_layers:
                lf, lbi, lbw = costs.layer_time(layer)
                extra += _expert_context_comm(
                    layer,
                    costs,
                    groups_of,
                    (lf, lbi + lbw),
                    algorithm,
                    memo,
                    plan.cp_comm,
                    plan.moe_dispatcher,
                    cp_impl,
                )
        if plan.recompute is Recompute.FULL:
            rc = f
            tb += tf  # the recomputed forward re-runs its TP collectives
            extra += [replace(c, phase="B") for c in extra if c.phase == "F"]
        if plan.ep_overlap:
            extra = _overlap_expert_comm(extra, f, bi + bw + rc, _overlap_slowdown(plan, costs))
        segs.append(
            Segment(
                ids,
                f,
                bi + bw,
                rc,
                tf,
                tb,
                params,
                act,
                flop,
                dp_params,
                _merged(extra),
                expert,
                sum(stalls.get(i, 0.0) for i in ids) if stalls else 0.0,
                rs_f,
            )
        )
    last = workload.layers[layer_ids[-1]]
    first = workload.layers[layer_ids[0]]
    out_bytes = _elements(last.output_shape) * act_b
    in_bytes = _elements(first.output_shape) * act_b
    kept = layers if isinstance(layers, StackedLayers) else tuple(layers)  # copies unmade
    return Chunk(tuple(segs), out_bytes, in_bytes, _block_count(layers), kept)


def _block_count(layers: Sequence[LayerCost]) -> int:
    """Distinct ``block`` indices (not ``None``) of ``layers``; a stack's whole copies are
    counted from their indices (:meth:`~perfmodel.workload.layers.StackedLayers.copy_blocks`),
    no copy made."""
    pieces = _pieces(layers)
    found = {la.block for piece, n in pieces if n == 1 for la in piece}
    if any(n > 1 for _, n in pieces):
        found.update(layers.copy_blocks())  # type: ignore[attr-defined]
    found.discard(None)
    return len(found)


#: A run of identical units (:func:`block_runs`): the first unit's layers, the identities of
#: their cost sources, and how many copies of that unit follow one another.
BlockRun = tuple[tuple[LayerCost, ...], tuple[int, ...], int]


def block_runs(layers: Sequence[LayerCost], costs: Costs) -> list[BlockRun]:
    """``layers`` as runs of identical units, in order: a unit is a run of consecutive layers
    with the same ``block`` (as :func:`partition` cuts), and consecutive units whose layers are
    copies of the same layers (:meth:`~perfmodel.workload.layers.LayerCost.cost_source`, one
    identity per layer) form one run ``(first unit's layers, their source ids, copies)``.

    A copy (:meth:`~perfmodel.workload.layers.LayerCost.relabelled`) shares every field of its
    source but ``name`` and ``block``, and a cost model that ``prices_by_cost_key`` charges it
    the source's times, so whatever is summed over a run's units is the first unit's sum times
    the copies. A cost model without that flag (one that may price a layer by its name) gets
    every unit as its own run (copies 1): nothing is merged. The whole copies of a
    :class:`~perfmodel.workload.layers.StackedLayers` are read as its template (no copy made,
    :func:`_pieces`), other layers one by one; the ids are valid while the layers live. The
    first stage of a 96-block GPT-3 is 4 runs (embedding, block 0, block 1 and its copies,
    the next block...) rather than 1,158 layers.
    """
    by_source = getattr(costs, "prices_by_cost_key", False)
    runs: list[list[object]] = []
    cur: list[LayerCost] = []
    prev: object = object()

    def source_ids(unit: Sequence[LayerCost]) -> tuple[int, ...]:
        if by_source:
            return tuple(id(la.cost_source()) for la in unit)
        return tuple(id(la) for la in unit)

    def add(unit: tuple[LayerCost, ...], key: tuple[int, ...], n: int) -> None:
        if by_source and runs and runs[-1][1] == key:
            runs[-1][2] += n  # type: ignore[operator]
        else:
            runs.append([unit, key, n])

    for piece, n in _pieces(layers, by_source):
        if n > 1:  # n whole copies of one block (_pieces): n units, one run
            if cur:
                add(tuple(cur), source_ids(cur), 1)
                cur = []
            add(piece, source_ids(piece), n)
            prev = object()
            continue
        for la in piece:
            b = la.block
            if cur and b != prev:
                add(tuple(cur), source_ids(cur), 1)
                cur = []
            cur.append(la)
            prev = b
    if cur:
        add(tuple(cur), source_ids(cur), 1)
    return [(u, k, n) for u, k, n in runs]  # type: ignore[misc]


def _pieces(
    layers: Sequence[LayerCost], whole_copies: bool = True
) -> list[tuple[tuple[LayerCost, ...], int]]:
    """:func:`~perfmodel.workload.layers.layer_runs` of ``layers``, in which each ``n > 1``
    piece is ``n`` whole units (:meth:`~perfmodel.workload.layers.StackedLayers.of` checks
    it); with ``whole_copies`` false (a cost model that may price copies apart) the layers one
    by one as one piece."""
    pieces = layer_runs(layers)
    if not whole_copies and any(n > 1 for _, n in pieces):
        return [(tuple(layers), 1)]
    return pieces


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
) -> _SegmentSums:
    """A segment's per-layer sums, in layer order: forward, backward-input, backward-weight and
    selectively recomputed (``share`` given) seconds, parameters, activation bytes, FLOP,
    data-parallel parameters, routed experts' parameters, its forward and backward
    :class:`~perfmodel.workload.layers.CommPoint` s as ``(op, bytes, group)`` in runs
    (:data:`_PointRuns`: ``(points, n)``, a unit's points for ``n`` identical units, whose time
    :func:`build_chunk` sums once and multiplies), and the forward seconds of the layers whose
    output a tensor-parallel reduce-scatter follows (``Segment.tp_rs_fwd_s``).

    Summed by :func:`block_runs`: the layers of a run of ``n`` identical units (a transformer
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
    layers (their ids) nor span two ``costs``."""
    runs = block_runs(layers, costs)
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
    for r, (unit, _, n) in enumerate(runs):
        uf = ubi = ubw = urc = urs = 0.0
        uact = uflop = 0.0
        udp = 0
        ufwd: list[tuple[CollectiveOp, float, str]] = []
        ubwd: list[tuple[CollectiveOp, float, str]] = []
        for j, layer in enumerate(unit):
            if not (exclude_sharded and (layer.fwd_comm or layer.bwd_comm)):
                udp += layer.params
            lf, lbi, lbw = costs.layer_time(layer)
            rs = lf if _tp_reduce_scattered(layer) else 0.0
            if n == 1:  # layer by layer into the totals, as before
                f += lf
                rs_f += rs
                bi += lbi
                bw += lbw
                act += layer.activation_bytes
                flop += layer.total_flop
                if shares:
                    rc += lf * shares[r][j]
            else:
                uf += lf
                urs += rs
                ubi += lbi
                ubw += lbw
                uact += layer.activation_bytes
                uflop += layer.total_flop
                if shares:
                    urc += lf * shares[r][j]
            params += n * layer.params
            ufwd += [(cp.op, cp.message_bytes, cp.group) for cp in layer.fwd_comm]
            ubwd += [(cp.op, cp.message_bytes, cp.group) for cp in layer.bwd_comm]
        if n > 1:
            f += n * uf
            rs_f += n * urs
            bi += n * ubi
            bw += n * ubw
            rc += n * urc
            act += n * uact
            flop += n * uflop
        dp_params += n * udp
        expert += n * expert_params(unit)
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
    return layer.kind is LayerKind.LINEAR and any(
        cp.op is CollectiveOp.REDUCESCATTER and cp.group == "tp" for cp in layer.fwd_comm
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


def _expert_context_comm(
    layer: LayerCost,
    costs: Costs,
    groups_of: Mapping[str, tuple[tuple[str, ...], ...]],
    compute_s: tuple[float, float],
    algorithm: str,
    memo: dict[tuple[object, ...], float],
    cp_comm: CPComm = CPComm.RING,
    dispatcher: MoEDispatcher = MoEDispatcher.ALLTOALL,
    cp_impl: CPImpl = CPImpl.TE_P2P,
) -> list[SegmentComm]:
    """A layer's expert (``"ep"``) and context (``"cp"``) collectives, per phase: the token
    dispatcher's collectives exposed in full (:func:`_dispatcher_point`); the key/value exchange
    beyond the layer's own compute for ring attention, in full for ``cp_comm=allgather``
    (:func:`perfmodel.parallel.expert.cp_exposed_s`; PyTorch's ring, ``cp_impl`` ``torch``:
    the all-gather beyond the first step and the FP32 dK/dV permutes beyond each next step,
    :func:`perfmodel.parallel.expert.torch_cp_exposed_s`), its bytes scaled to the exposed
    share (what the flow simulation replays)."""
    from perfmodel.parallel.expert import cp_exposed_s, torch_cp_exposed_s

    out: list[SegmentComm] = []
    for phase, points, busy in (
        ("F", layer.fwd_comm, compute_s[0]),
        ("B", layer.bwd_comm, compute_s[1]),
    ):
        ring: list[tuple[CollectiveOp, float, float]] = []
        for cp in points:
            groups = groups_of.get(cp.group)
            if groups is None:
                continue
            op, nbytes, floor = cp.op, cp.message_bytes, 0.0
            if cp.group == "ep":
                op, nbytes = _dispatcher_point(layer, cp, phase, dispatcher, groups[0], costs)
                floor = _flex_kernel_floor(layer, cp, phase, dispatcher, groups[0], costs, memo)
            key = (op, nbytes, cp.group)
            t = memo.get(key)
            if t is None:
                t = memo[key] = costs.concurrent_time(op, nbytes, groups, algorithm)
            t = max(t, floor)
            if cp.group == "cp":
                ring.append((op, nbytes, t))
            else:
                out.append(SegmentComm(CommKind.EP, phase, op, nbytes, t, t))
        if ring:
            full = sum(t for _, _, t in ring)
            size = len(groups_of["cp"][0])
            if cp_impl is CPImpl.TORCH and cp_comm is CPComm.RING:
                gather = sum(t for o, _, t in ring if o is CollectiveOp.ALLGATHER)
                exposed = torch_cp_exposed_s(gather, full - gather, busy, size)
            else:
                exposed = cp_exposed_s(full, busy, size, cp_comm)
            share = exposed / full if full > 0 else 0.0
            out += [
                SegmentComm(CommKind.CP, phase, op, nbytes * share, t * share, t)
                for op, nbytes, t in ring
            ]
    return out


def _dispatch_sync_stalls(
    layers: Sequence[LayerCost],
    layer_ids: Sequence[int],
    costs: Costs,
    groups_of: Mapping[str, tuple[tuple[str, ...], ...]],
    algorithm: str,
    memo: dict[tuple[object, ...], float],
    dispatcher: MoEDispatcher,
) -> dict[int, float]:
    """GPU idle after each MoE dispatch layer's host synchronisation in one forward of a chunk
    (layer id -> seconds; empty without routed experts or a host model): the run from the
    dispatch to the next one (or the chunk's end), each layer's host issue time against its
    GPU time, the dispatcher's exposed collectives included
    (:func:`perfmodel.parallel.expert.dispatcher_sync_stall_s`)."""
    from perfmodel.parallel.expert import dispatcher_sync_stall_s

    host_of = getattr(costs, "layer_host_time", None)
    if host_of is None or not any(
        la.expert_role is ExpertRole.DISPATCH for la in distinct_layers(layers)
    ):
        return {}
    out: dict[int, float] = {}
    per: dict[object, tuple[float, float]] = {}  # a block's copies: one lookup per layer object
    run: list[tuple[float, float]] = []
    owner = -1
    for lid, la in zip(layer_ids, layers, strict=True):
        if la.expert_role is ExpertRole.DISPATCH:
            if owner >= 0:
                out[owner] = dispatcher_sync_stall_s(run)
            owner, run = lid, []
        if owner < 0:
            continue
        hg = per.get(la.cost_key())
        if hg is None:
            g = costs.layer_time(la)[0]
            if la.expert_role in (ExpertRole.DISPATCH, ExpertRole.COMBINE) and groups_of:
                g += sum(
                    c.duration_s
                    for c in _expert_context_comm(
                        la, costs, groups_of, (g, 0.0), algorithm, memo, dispatcher=dispatcher
                    )
                    if c.phase == "F"
                )
            hg = per[la.cost_key()] = (host_of(la)[0], g)
        run.append(hg)
    if owner >= 0:
        out[owner] = dispatcher_sync_stall_s(run)
    return {k: v for k, v in out.items() if v > 0}


def _dispatcher_point(
    layer: LayerCost,
    point: CommPoint,
    phase: str,
    dispatcher: MoEDispatcher,
    group: Sequence[str],
    costs: Costs,
) -> tuple[CollectiveOp, float]:
    """The collective and bytes that ``dispatcher`` runs for a dispatch/combine layer's
    all-to-all ``point`` of ``tokens x top_k`` routed rows on the expert-parallel ``group``.

    ``alltoall``: the point as built. ``deepep`` / ``hybridep``: the all-to-all of the
    deduplicated rows, ``message x dispatch_share`` (:func:`perfmodel.parallel.expert.dispatch_share`;
    the servers the group spans come from the topology, one server without it). ``allgather``:
    the dispatch all-gathers the ``tokens`` of every rank of the group (output ``ep x message /
    top_k``) and the combine reduce-scatters them (Megatron-Core ``MoEAllGatherTokenDispatcher``);
    in backward the two swap. A layer without expert counts keeps its point.
    """
    from perfmodel.parallel.expert import dispatch_share

    if (
        dispatcher is MoEDispatcher.ALLTOALL
        or not layer.top_k
        or point.op is not (CollectiveOp.ALLTOALL)
    ):
        return point.op, point.message_bytes
    n = len(group)
    if dispatcher is MoEDispatcher.ALLGATHER:
        gather = (layer.expert_role is ExpertRole.DISPATCH) == (phase == "F")
        op = CollectiveOp.ALLGATHER if gather else CollectiveOp.REDUCESCATTER
        return op, point.message_bytes / layer.top_k * n
    topo = getattr(costs, "topology", None)
    servers = len({topo.server_of(g) for g in group}) if topo is not None else 1
    share = dispatch_share(dispatcher, layer.experts, layer.top_k, n, servers, layer.routing_groups)
    return point.op, point.message_bytes * share


def _flex_kernel_floor(
    layer: LayerCost,
    point: CommPoint,
    phase: str,
    dispatcher: MoEDispatcher,
    group: Sequence[str],
    costs: Costs,
    memo: dict[tuple[object, ...], float],
) -> float:
    """The flex dispatcher's kernel time from its published bandwidth
    (:func:`perfmodel.parallel.expert.flex_kernel_floor_s`) for a dispatch/combine layer's
    all-to-all ``point``: the dispatch layer's forward and the combine layer's backward run the
    dispatch kernel, the other two the combine kernel; the point's ``tokens x top_k`` rows are
    ``tokens`` once per server (``rdma``) or rank (``nvlink``) hit. 0 for the NCCL dispatchers,
    layers without expert counts and a cost model without a topology."""
    from perfmodel.parallel.expert import flex_fabric, flex_kernel_floor_s, flex_units_hit

    topo = getattr(costs, "topology", None)
    if (
        not dispatcher.deduplicates
        or topo is None
        or not layer.top_k
        or not layer.experts
        or point.op is not CollectiveOp.ALLTOALL
    ):
        return 0.0
    combine = (layer.expert_role is ExpertRole.COMBINE) == (phase == "F")
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


def _overlap_slowdown(plan: ParallelismPlan, costs: Costs) -> float:
    """Compute slowdown beside the plan's dispatcher kernels
    (:func:`perfmodel.parallel.expert.overlap_compute_slowdown`; the GPU's SM count from the
    compute model, the house estimate without one)."""
    from perfmodel.parallel.expert import overlap_compute_slowdown

    compute = getattr(costs, "compute", None)
    sm_count = compute.params.sm_count if compute is not None else 0
    return overlap_compute_slowdown(plan.moe_dispatcher, sm_count)


def _overlap_expert_comm(
    comms: Sequence[SegmentComm], fwd_s: float, bwd_s: float, slowdown: float = 0.0
) -> list[SegmentComm]:
    """``ep_overlap``: a segment's expert all-to-alls of each phase exposed only beyond its
    compute of the other phase, plus that compute's slowdown while they share the SMs
    (:func:`perfmodel.parallel.expert.ep_overlap_exposed_s`), the exposed share scaling the
    duration and the replayed bytes; the transfers (``full_s``) are unchanged."""
    from perfmodel.parallel.expert import ep_overlap_exposed_s

    out = [c for c in comms if c.kind is not CommKind.EP]
    for phase, other in (("F", bwd_s), ("B", fwd_s)):
        ep = [c for c in comms if c.kind is CommKind.EP and c.phase == phase]
        full = sum(c.duration_s for c in ep)
        if full <= 0:
            out += ep
            continue
        share = ep_overlap_exposed_s(full, other, slowdown) / full
        out += [
            replace(c, message_bytes=c.message_bytes * share, duration_s=c.duration_s * share)
            for c in ep
        ]
    return out


def cp_gathered_kv_bytes(
    layers: Sequence[LayerCost], plan: ParallelismPlan, cp_impl: CPImpl = CPImpl.TE_P2P
) -> float:
    """Transient bytes of ``cp_comm=allgather`` and of PyTorch's all-gather rotater
    (``cp_impl`` ``torch``, :class:`~perfmodel.parallel.expert.CPImpl`): one layer's K and V
    gathered for the whole sequence (the largest ``"cp"`` all-gather output, ``cp x b x s/cp x
    kv_heads x (d + d_v) x act_bytes``, the repeated heads for PyTorch), live while that
    layer's attention runs; 0 for Transformer Engine's ring, whose in-flight chunk is not
    booked here."""
    if plan.cp <= 1 or (plan.cp_comm is not CPComm.ALLGATHER and cp_impl is not CPImpl.TORCH):
        return 0.0
    return max(
        (
            c.message_bytes
            for la in layers
            for c in la.fwd_comm
            if c.group == "cp" and c.op is CollectiveOp.ALLGATHER
        ),
        default=0.0,
    )


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


def expert_params(layers: Sequence[LayerCost]) -> int:
    """Parameters of routed experts (``ExpertRole.EXPERT``) among ``layers``: their gradients
    and sharded state live on the expert data-parallel group, not the dense one. A stack's
    copies of a block are read as the block times the copies
    (:func:`~perfmodel.workload.layers.runs_isum`: integers, exact)."""
    return runs_isum(layers, lambda la: la.params if la.expert_role is ExpertRole.EXPERT else 0)


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
    return ((e - 1) / e) / ((d - 1) / d)


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
    block's activations) is live at a time for the whole stage; with torchtitan's op-level
    selective checkpointing (:meth:`SelectiveRecompute.kept_bytes`) each also keeps the outputs
    the policy saves, and the working set is what the cache does not hold. ``tied_params`` are the last
    pipeline stage's copy of a tied word embedding (:func:`tied_embedding_params`), held like its
    own weights.

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
    """
    from perfmodel.workload import memory as wmem

    prec = costs.precision
    rc = recipe or default_recipe(plan, prec, optimizer)
    # a stack's copies of a block read as the block (their shapes and collectives are its)
    layers = [la for c in chunks for la in distinct_layers(c.layers)]
    params = float(sum(c.params for c in chunks)) + tied_params
    stage = rc.sharding.stage
    expert = float(sum(expert_params(c.layers) for c in chunks))
    weights, grads, state = rc.model_state_bytes(params - expert, plan.grad_replicas)
    if expert:  # routed experts: sharded over the expert data-parallel group
        ew, eg, es = rc.model_state_bytes(expert, plan.expert_dp)
        weights, grads, state = weights + ew, grads + eg, state + es
    # FP8 weight caches (Transformer Engine keeps each FP8 weight and its transpose)
    stored = float(rc.param_bytes) if rc.fp8_params else 0.0
    weights += sum(
        wmem.fp8_weight_cache_bytes(c.layers, rc.fp8, replaces_bytes=stored) for c in chunks
    )
    weights = (weights + buffer_bytes) * replicas_on_gpu
    grads *= replicas_on_gpu
    state *= replicas_on_gpu
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
        acts = in_flight * sum(k for k, _ in parts) / len(parts) + max(w for _, w in parts)
    elif plan.recompute is Recompute.FULL or op_sac:
        parts = [
            rc.selective_recompute.kept_bytes(c.layers, prec)
            if op_sac
            else wmem.full_recompute_bytes(c.layers, prec)
            for c in chunks
        ]
        acts = in_flight * sum(k for k, _ in parts) / len(parts) + max(w for _, w in parts)
    else:
        per_chunk = [
            wmem.activation_bytes(c.layers, plan.recompute, precision=prec)
            + (
                fp8_saved_input_delta(c.layers, prec.activation_bytes)
                if rc.fp8_saves_fp8_inputs
                else 0.0
            )
            for c in chunks
        ]
        acts = in_flight * sum(per_chunk) / len(per_chunk)
    act_b = prec.activation_bytes
    # the largest of the same products over the distinct shapes (a stack repeats a few)
    peak_layer = max(
        (2.0 * _elements(shape) * act_b for shape in {la.output_shape for la in layers}),
        default=0.0,
    )
    # the loss's backward transient and the largest layer pair come at different moments
    peak_layer = max(peak_layer, rc.cross_entropy.transient_bytes(layers))
    ws = wmem.CUDA_CONTEXT_BYTES + wmem.LIBRARY_WORKSPACE_BYTES + peak_layer
    ws += cp_gathered_kv_bytes(layers, plan, CPImpl.for_fusion(rc.fusion))
    if stage >= 3 and plan.pp > 1 and rc.amp is AmpStyle.FSDP_POLICY:
        # FSDP2 under torch.distributed.pipelining: every backward but the step's last runs
        # with reshard_after_backward and requires_gradient_sync off, so the stage's weights
        # stay gathered and its gradients accumulate unsharded, upcast to reduce_dtype
        ws += params * (rc.gather_bytes + rc.grad_reduce_bytes)
    elif stage >= 3:
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


def lower(inp: StepInputs, costs: Costs, *, coarse: bool = True) -> LoweredStep:
    """Lower one training step; dispatches on the plan's data-parallel mode and hybrid.
    ``coarse=False``: the executors run the fine pipeline graph (one task pair per segment;
    :meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.coarsenable`)."""
    plan = inp.plan
    if plan.hybrid is Hybrid.ONE_WEIRD_TRICK:
        return _lower_pipeline(inp, costs, one_weird_trick=True, coarse=coarse)
    mode = plan.dp_mode if plan.dp > 1 else DPMode.ALLREDUCE
    if mode is not DPMode.ALLREDUCE and (plan.tp > 1 or plan.pp > 1):
        raise InfeasiblePlanError(
            f"data-parallel mode {mode.value} is modelled for pure data parallelism; got "
            f"tp={plan.tp}, pp={plan.pp} (use tp=1,pp=1 or mode=allreduce)",
            value=mode.value,
            where="dp_mode",
        )
    if mode is DPMode.ALLREDUCE:
        return _lower_pipeline(inp, costs, coarse=coarse)
    return _lower_dp_variant(inp, costs, mode)


def _issue_times(
    costs: Costs,
    chunks: Sequence[Chunk],
    P: int,
    V: int,
    m: int,
    recompute: Recompute,
    selective_share: Callable[[LayerCost], float] = SelectiveRecompute.ATTENTION_CORE.share,
) -> list[float]:
    """Host issue time of one step per pipeline stage (``m`` micro-batches of its chunks'
    forward, backward and re-computed forward kernels); zeros when the cost model has no host
    model or the stack is graph-mode. A run of identical units (:func:`block_runs`) is priced
    once and counted ``n`` times (within 1e-12 relative of the layer-by-layer sum: see
    :func:`_segment_sums`)."""
    host_of = getattr(costs, "layer_host_time", None)
    out = [0.0] * P
    if host_of is None:
        return out
    memo: dict[tuple[object, ...], float] = {}  # identical chunks (a stack's stages) once
    for k, ch in enumerate(chunks):
        runs = block_runs(ch.layers, costs)
        key: tuple[object, ...] = tuple((rk, n) for _, rk, n in runs)
        if recompute is Recompute.FULL:
            key += tuple(tuple(la.block is None for la in unit) for unit, _, _ in runs)
        elif recompute is Recompute.SELECTIVE:
            key += tuple(tuple(selective_share(la) for la in unit) for unit, _, _ in runs)
        t = memo.get(key)
        if t is None:
            t = 0.0
            for unit, _, n in runs:  # a run of n > 1 identical units: n x one unit's time
                u = t if n == 1 else 0.0
                for layer in unit:
                    f, b = host_of(layer)
                    u += f + b
                    if recompute is Recompute.FULL and layer.block is not None:
                        u += f
                    elif recompute is Recompute.SELECTIVE:
                        u += f * selective_share(layer)
                t = u if n == 1 else t + n * u
            memo[key] = t
        out[k % P] += m * t
    return out


def issue_lead(
    costs: Costs,
    chunks: Sequence[Chunk],
    ops: Sequence[tuple[str, int, int]],
    P: int,
    s: int,
    recompute: Recompute,
    selective_share: Callable[[LayerCost], float] = SelectiveRecompute.ATTENTION_CORE.share,
) -> float:
    """Seconds the eager host must issue before stage ``s``'s GPU can run its step without
    waiting for a kernel that is not issued yet (0 without a host model or in graph mode).

    The host issues the kernels in program order while the GPU runs them, each no earlier than
    its launch: a two-machine flow shop in a fixed order. Layer ``i`` (host ``h_i``, GPU ``g_i``
    seconds, backward with its recomputed forward) is issued by ``H_i = h_1 + ... + h_i``; the
    GPU, having run ``G_{i-1} = g_1 + ... + g_{i-1}``, never waits if it starts
    ``D = max_i (H_i - G_{i-1})`` after the host (Johnson 1954, the two-stage production
    schedule, for a given order). While the host is slower than the GPU (the first forward's
    small kernels) this is the idle start of the step seen in eager traces; once the GPU is
    slower the host runs ahead. ``ops`` is the stage's operation order
    (:func:`~perfmodel.parallel.schedule.stage_ops`); a run of ``n`` identical units adds
    ``(n - 1) max(0, h - g)`` to its unit's lead. With pipelining, the sequence stops before
    the first operation after the first that waits for another stage (any operation of a later
    stage, a backward or a later chunk's forward on the first one): while the GPU waits there
    the host runs ahead, so later operations need no lead of their own.
    """
    host_of = getattr(costs, "layer_host_time", None)
    if host_of is None:
        return 0.0
    memo: dict[tuple[int, str], tuple[float, float, float]] = {}

    def op_lead(k: int, phase: str) -> tuple[float, float, float]:
        hit = memo.get((k, phase))
        if hit is not None:
            return hit
        runs = block_runs(chunks[k].layers, costs)
        H = G = lead = 0.0
        for unit, _, n in runs if phase == "F" else reversed(runs):
            uh = ug = ulead = 0.0
            for layer in unit if phase == "F" else reversed(unit):
                fh, bh = host_of(layer)
                f, bi, bw = costs.layer_time(layer)
                if phase == "F":
                    h, g = fh, f
                else:
                    if recompute is Recompute.FULL:
                        r = 1.0 if layer.block is not None else 0.0
                    elif recompute is Recompute.SELECTIVE:
                        r = selective_share(layer)
                    else:
                        r = 0.0
                    h, g = bh + r * fh, bi + bw + r * f
                ulead = max(ulead, uh + h - ug)
                uh += h
                ug += g
            lead = max(lead, H - G + ulead + max(0.0, (n - 1) * (uh - ug)))
            H += n * uh
            G += n * ug
        memo[(k, phase)] = (H, G, lead)
        return H, G, lead

    H = G = lead = 0.0
    for i, (phase, _, c) in enumerate(ops):
        if P > 1 and i > 0 and (s > 0 or phase == "B" or c > 0):
            break
        h, g, op = op_lead(c * P + s, phase)
        if h <= 0.0:
            continue
        lead = max(lead, H - G + op)
        H += h
        G += g
    return max(lead, 0.0)


def _lower_pipeline(
    inp: StepInputs, costs: Costs, *, one_weird_trick: bool = False, coarse: bool = True
) -> LoweredStep:
    """``allreduce``-mode plans: :class:`perfmodel.parallel.lower_pipeline.PipelineLowering`
    (imported here: it builds on this module's chunks and memory)."""
    from perfmodel.parallel.lower_pipeline import lower_pipeline

    return lower_pipeline(inp, costs, one_weird_trick=one_weird_trick, coarse=coarse)


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
