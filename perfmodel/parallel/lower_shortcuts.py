"""The lowering's shortcuts: what makes a large step fast to lower, each a small door
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits and calls.

* **Shared chunks** (:meth:`LoweringShortcuts._build_chunks`): chunks that cannot depend on
  the topology are kept by what they depend on (:data:`_SHARED_CHUNKS`), so the same model,
  batch and software on another cluster size reads them (issue 27, sweeps).
* **Coarse segments** (:meth:`LoweringShortcuts.coarsenable`): a chunk's segments become one
  compute task and one collective where nothing inside them overlaps or is waited on.
* **Periodic schedules** (a door of its own, :mod:`perfmodel.parallel.lower_periodic`:
  :meth:`~perfmodel.parallel.lower_periodic.PeriodicSchedules.periodic_count`): a short
  schedule whose steady period :func:`perfmodel.sim.engine.periodic_timeline` extends to the
  whole step.
* **Hidden collectives** (:mod:`perfmodel.parallel.lower_hidden`, a door of its own:
  :meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.hidden_backward`,
  :meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.gather_runs`), in the analytic list
  schedule's graph only (:meth:`~perfmodel.parallel.periodic.LazyGraph.analytic`): a bucketed
  backward's gradient reductions as a lead and one reduction (max-plus), and runs of segments
  whose parameter gathers hide under the compute as two computes.
* **Operation tasks** (:meth:`LoweringShortcuts.op_task`, :meth:`LoweringShortcuts.plain_op`,
  :meth:`LoweringShortcuts.fold_send`), in the analytic list schedule's graph only (issue 27):
  an operation's chain of segments (each compute with its exposed tensor-parallel collective)
  as one :class:`~perfmodel.parallel.taskgraph.OpTask` whose pieces the list schedule adds in
  the same order, and the pipeline send after it folded into it where it provably starts when
  the task ends (dependencies ``tid + SENT``; a gather prefetched after its first compute
  waits on ``tid + HEAD``): one task per operation instead of three to five.

Each gives the answer the plain lowering gives (the tests compare them:
``tests/parallel/test_coarse_lowering.py``, ``tests/sim/test_periodic.py``,
``tests/test_shared_tables.py``, ``tests/parallel/test_hidden_collectives.py``,
``tests/sim/test_op_tasks.py``). The methods read the lowering's state (``self.plan``,
``self.P``, ``self.chunks``...), set by ``PipelineLowering.__init__``.

Kept whole (issue 29): :meth:`LoweringShortcuts.run_plain_schedule` (~165 lines, one loop)
emits a plain operation per iteration with its dependencies, its task, its folded send and the
lowering's state inline: each method call it would split into costs ~0.1-0.2 us of the ~0.75
us an operation takes (thousands per interleaved or pp 16 plan).
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import CPImpl
from perfmodel.parallel.lowering import (
    Chunk,
    Segment,
    build_chunk,
    chunk_of_another_plan,
    keep_chunk,
)
from perfmodel.parallel.partition import block_runs, partition, stated_partition
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.schedule import round_robin
from perfmodel.parallel.taskgraph import (
    _S_SEND,
    _S_SEND_S,
    _S_THEN,
    HEAD,
    SENT,
    ChainTask,
    CommSpec,
    OpTask,
    OverTask,
    TaskKind,
    _new_task,
    _OpTaskTwin,
)

#: Chunks of plans whose chunks cannot depend on the topology (:meth:`PipelineLowering.
#: _shared_chunks_key`): ``key -> (workload, price table, chunks)``, the first two kept so that
#: the ids in the key stay theirs; the oldest dropped first beyond :data:`_SHARED_CHUNKS_SIZE`
#: (a sweep varies its hardware slowest, so every model, batch and software combination of one
#: cluster size must stay until the next size reads it: 256 combinations and their
#: micro-batch probes made a 256-entry memo miss every time).
_SHARED_CHUNKS: dict[tuple[object, ...], tuple[object, object, tuple[Chunk, ...]]] = {}

_SHARED_CHUNKS_SIZE = 4096

#: Summed seconds of a run of segments lowered as one (:meth:`LoweringShortcuts.coarse_runs`):
#: forward, forward TP, backward with recomputation, backward TP, reduce-scattered forward.
CoarseRun = tuple[float, float, float, float, float]
#: A chunk's segments in forward order, runs summed (:meth:`LoweringShortcuts.coarse_runs`).
CoarseRuns = tuple[Segment | CoarseRun, ...]
#: Operation labels (``F3``, ``B3.c1``: what :meth:`~perfmodel.parallel.lower_pipeline.
#: PipelineLowering.segment` labels an operation's compute task) by phase and chunk (``-1``:
#: one chunk per stage), indexed by micro-batch; shared by every lowering (formatting one took
#: ~0.3 us, a fifth of :meth:`LoweringShortcuts.run_plain_schedule`'s cost per operation).
_OP_LABELS: dict[tuple[str, int], list[str]] = {}


def op_labels(phase: str, c: int, m: int) -> list[str]:
    """The labels of operation ``phase`` through chunk ``c`` (``-1``: the stage's only one) of
    micro-batches ``0 .. m - 1`` and perhaps more (:data:`_OP_LABELS`). A list in the table is
    never changed, only replaced by a longer one (twice as long at least), so a lowering in
    another thread keeps a correct list."""
    key = (phase, c)
    labels = _OP_LABELS.get(key)
    if labels is None or len(labels) < m:
        n = max(m, 2 * len(labels)) if labels else m
        fmt = f"{phase}{{}}.c{c}" if c >= 0 else f"{phase}{{}}"
        labels = _OP_LABELS[key] = [fmt.format(mb) for mb in range(n)]
    return labels


#: What :meth:`LoweringShortcuts.run_plain_schedule` emits for an operation of a chunk as one
#: task: the stage's GPU, the task's compute seconds and ``then_s``, whether the operation
#: sends, the send's ``(seconds, CommSpec)`` (``None``: no send, or one stage), the
#: operation's labels by micro-batch (:func:`op_labels`), the task's mutable twin and class,
#: its ``over`` (``None``: an :class:`OpTask`), the longest compute it counts
#: (``compute_emitted``; ``-1.0``: none), and the ``op_merged`` and ``coarsened`` it adds
#: (a folded send adds one more), and the operation's other tasks (:data:`Line`; ``None``:
#: one task, no anchor). A plain operation's (:meth:`LoweringShortcuts.plain_templates`):
#: ``_OpTaskTwin``, ``OpTask``, ``None``, its seconds, 1, 0 where the chunk is one plain
#: segment, else 1 (lowered coarse), and ``None``; a replayed operation of one task, or of
#: operation tasks in a line (``lower_replay.OperationReplay.single_template``): its
#: recording's.
PlainTemplate = tuple[
    str,
    float,
    tuple[float, ...],
    bool,
    "tuple[float, CommSpec] | None",
    list[str],
    type,
    type,
    "tuple[str, float] | None",
    float,
    int,
    int,
    "Line | None",
]
#: A recorded operation's operation tasks after its first, in a line (each waiting on the one
#: before only), as ``(seconds, then_s)``, and the prefetch anchors it appends to
#: ``gather_hist`` (offsets from its first task's id, ``HEAD``-encoded):
#: :meth:`lower_replay.OperationReplay.line_rest` emits them.
Line = tuple[tuple[tuple[float, tuple[float, ...]], ...], tuple[int, ...]]


_EP_CP, _HOST_SYNC = attrgetter("ep_cp"), attrgetter("host_sync_s")


def _ep_cp_or_sync(segs: tuple[Segment, ...]) -> bool:
    """Whether a segment of ``segs`` has expert or context-parallel exchanges or a host
    synchronisation: ``any(seg.ep_cp or seg.host_sync_s for seg in segs)``, each pass in C
    (the refusal of the lowering's shortcuts and of its hidden walks, read once per chunk
    values by :meth:`LoweringShortcuts._exchanges`)."""
    return any(map(_EP_CP, segs)) or any(map(_HOST_SYNC, segs))


class LoweringShortcuts:
    """Shared chunks, coarse segments and operation tasks of a
    :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (see the module docstring)."""

    # ------------------------------------------------------------------ shared chunks

    def _build_chunks(self) -> list[Chunk]:
        """The plan's ``pp x interleave`` chunks, segmented by gradient bucket (overlap) or by
        block (ZeRO-3/FSDP units); shared through :data:`_SHARED_CHUNKS` where they cannot
        depend on the topology (:meth:`_shared_chunks_key`)."""
        key = self._shared_chunks_key()
        if key is None:
            return self._make_chunks()
        table = self.costs.price_table  # type: ignore[attr-defined]
        hit = _SHARED_CHUNKS.get(key)
        if hit is not None and hit[0] is self.wl and hit[1] is table:
            return list(hit[2])
        chunks = self._make_chunks()
        if len(_SHARED_CHUNKS) >= _SHARED_CHUNKS_SIZE:
            _SHARED_CHUNKS.pop(next(iter(_SHARED_CHUNKS)))
        _SHARED_CHUNKS[key] = (self.wl, table, tuple(chunks))  # the ids' objects kept alive
        return chunks

    def _shared_chunks_key(self) -> tuple[object, ...] | None:
        """What the chunks of a plan without tensor, expert or context parallelism depend on,
        or ``None`` where they may depend on more (issue 27, sweeps: the same model, batch and
        software on another cluster size lowers the same chunks).

        :func:`~perfmodel.parallel.lowering.build_chunk` then prices no collective (a
        one-GPU tensor-parallel group costs 0, no expert or context group is asked), so a chunk
        is a function of the workload (by identity), the layer prices (the costs'
        :attr:`~perfmodel.parallel.costs.SystemCosts.price_table`, by identity: the same for
        every topology of the same GPU, parameters and precision), the chunk count and split
        rule, and the recipe and plan fields read below; not of the data-parallel size, the
        placement or the topology's links.

        Keep equal to :meth:`_chunk_memo_key` (the fields ``build_chunk`` reads: a field added
        to one belongs in the other), save for these differences: this key has the chunk count
        ``K`` and the preset's ``even_pipeline_split`` (it stands for the whole partition; the
        other key is prefixed by each chunk's layer ids) and refuses ``tp > 1`` (the other
        compares the TP collectives' prices instead); it leaves out the algorithm and the
        context-parallel implementation (with ``tp = ep = cp = 1`` no collective is priced, so
        neither is read, and a cluster size whose algorithm differs still hits) and has
        ``plan.ep_overlap and m_step > 1`` where the other is given the plan with that
        already applied. A ``tp = 1`` plan's chunks are kept in both memos (here as one list,
        in ``lowering._CHUNKS`` chunk by chunk)."""
        plan, rc = self.plan, self.rc
        table = getattr(self.costs, "price_table", None)
        if table is None or self.pl.tp != 1 or self.owt or plan.ep != 1 or plan.cp != 1:
            return None
        return (
            id(self.wl),
            id(table),
            type(self.costs),  # layer prices are read through the costs' class (as there)
            self.costs.precision,  # type: ignore[attr-defined]
            self.K,
            self.preset.even_pipeline_split,
            rc.pipeline_layout,
            rc.bucket_bytes if self.overlap else None,
            rc.first_bucket_bytes,
            self.by_unit,
            rc.grad_reduce_bytes,
            rc.selective_recompute,
            plan.recompute,
            plan.ep_overlap and self.m_step > 1,
            plan.cp_comm,
            plan.moe_dispatcher,
        )

    def _make_chunks(self) -> list[Chunk]:
        """:meth:`_build_chunks`, computed."""
        wl, pl, rc = self.wl, self.pl, self.rc
        costs, unit_cost = self.costs, []
        by_key: dict[int, float] = {}  # a layer's summed time, once per cost source
        layout = rc.pipeline_layout
        # the layer times balance the pipeline's chunks: one chunk (K = 1) holds every layer;
        # a stated layout (Megatron-Core pipeline_model_parallel_layout) cuts without them
        for unit, keys, n in block_runs(wl.layers, costs) if self.K > 1 and not layout else ():
            times = []  # a stack's block read once
            for layer, key in zip(unit, keys, strict=True):
                t = by_key.get(key)
                if t is None:
                    t = by_key[key] = sum(costs.layer_time(layer))
                times.append(t)
            unit_cost += times * n
        chunks: list[Chunk] = []
        if layout is not None:
            parts = stated_partition(wl, self.K, layout)
        else:
            parts = partition(
                wl, self.K, unit_cost, allow_uneven=not self.preset.even_pipeline_split
            )
        # ep_overlap pairs two micro-batches: with one there is nothing to overlap with
        plan = self.plan if self.m_step > 1 else dataclasses.replace(self.plan, ep_overlap=False)
        seg_memo: dict[tuple[object, ...], object] = {}  # identical blocks' segments: summed once
        share = rc.selective_recompute.share_for(wl)
        memo_key = self._chunk_memo_key(plan)
        bucket, cp_impl = rc.bucket_bytes if self.overlap else None, CPImpl.for_fusion(rc.fusion)
        for k, ids in enumerate(parts):
            s = k % self.P
            group = pl.dp_group(0, 0) if self.owt else pl.tp_group(0, s)
            key = None if memo_key is None else (tuple(ids), *memo_key)
            hit = None if key is None else chunk_of_another_plan(key, wl, costs, group, self.alg)
            if hit is not None:
                chunks.append(hit)
                continue
            tp_used: dict[tuple[CollectiveOp, float], float] = {}
            chunks.append(
                build_chunk(
                    wl,
                    ids,
                    self.costs,
                    plan,
                    group,
                    bucket_bytes=bucket,
                    first_bucket_bytes=rc.first_bucket_bytes,
                    by_block=self.by_unit,
                    algorithm=self.alg,
                    exclude_sharded=self.owt,
                    grad_bytes=rc.grad_reduce_bytes,
                    selective_share=share,
                    comm_groups=self.expert_context_groups(s),
                    seg_memo=seg_memo,  # type: ignore[arg-type]
                    cp_impl=cp_impl,
                    tp_used=tp_used,
                )
            )
            if key is not None:
                keep_chunk(key, wl, costs, chunks[-1], tp_used)
        return chunks

    def _chunk_memo_key(self, plan: ParallelismPlan) -> tuple[object, ...] | None:
        """What :func:`~perfmodel.parallel.lowering.build_chunk` reads of this lowering for
        any chunk, beyond the chunk's layer ids and its tensor-parallel group (:func:`~perfmodel.parallel.
        lowering.chunk_of_another_plan`); ``None`` where it may read more: expert or context
        groups (``ep`` / ``cp`` > 1: the chunk prices collectives over them), Krizhevsky's
        hybrid (its data-parallel group stands for the TP group and layers are excluded), or a
        cost model without a price table (layer prices then need not follow the table).

        Complete: ``build_chunk`` reads the workload's layers (the workload, by identity),
        layer prices (the costs' :attr:`~perfmodel.parallel.costs.SystemCosts.price_table` by
        identity, read through the costs' class, and its precision's activation bytes), the
        tensor-parallel group only through ``costs.collective_time`` of each ``(op, bytes)``
        (compared per entry), and the arguments below: the split (bucket bytes with overlap,
        first bucket, by block), the gradient bytes per element, the algorithm, selective
        recomputation's share (a function of the recipe's rule), and of ``plan`` its
        ``recompute``, ``ep_overlap`` (as passed: off with one micro-batch per step),
        ``moe_dispatcher`` and ``cp_comm``; with ``ep = cp = 1`` no other plan field
        (``SegmentCommContext`` reads the rest only for expert and context groups).

        Keep equal to :meth:`_shared_chunks_key` (a field ``build_chunk`` comes to read belongs
        in both); the differences and their reasons are listed there (the chunk count and
        even split there, the layer ids here; the algorithm and context-parallel
        implementation here only, since only here are collectives priced)."""
        table = getattr(self.costs, "price_table", None)
        if table is None or self.owt or plan.ep != 1 or plan.cp != 1:
            return None
        rc = self.rc
        return (
            id(self.wl),
            id(table),
            type(self.costs),
            self.costs.precision,  # type: ignore[attr-defined]
            rc.bucket_bytes if self.overlap else None,
            rc.first_bucket_bytes,
            self.by_unit,
            rc.grad_reduce_bytes,
            self.alg,
            rc.selective_recompute,
            CPImpl.for_fusion(rc.fusion),
            plan.recompute,
            plan.ep_overlap,
            plan.moe_dispatcher,
            plan.cp_comm,
        )

    # ------------------------------------------------------------------ coarse segments

    def coarsenable(self, s: int, phase: str, mb: int, ch: Chunk) -> bool:
        """Whether operation ``phase`` (``"F"``/``"B"``) of micro-batch ``mb`` through chunk
        ``ch`` of stage ``s`` is lowered coarse: one compute task of the segments' summed
        durations and one tensor-parallel collective of their summed time, instead of a
        compute task and a collective per segment.

        Exact (up to the summation order of the durations) where nothing inside the
        segment loop overlaps or is waited on: the fine tasks then form one chain on the compute
        stream (each segment's compute, then its collective: ``tp_comm`` not overlapped runs on
        the compute stream), consecutive in program order, each waiting on the one before; no
        other task depends on one inside the chain. Both executors (stream FIFO in program
        order) then run the chain back to back from the time its first task may start, ending
        at that time plus the summed durations, as the two coarse tasks do; the compute stream
        is busy over the same interval, compute seconds and exposed ``tp`` seconds (priority 0
        in :func:`perfmodel.report.step.task_class`) add up the same, and every other task sees
        the same end time. Refused (one pair per segment, as always) where the chain is broken:

        * a chunk of one segment (nothing to merge), or no coarse lowering asked for;
        * tensor-parallel communication on its own stream (``tp_comm`` overlapped: each
          segment's collective starts with its compute and the next segment waits for both)
          that outlasts its segment's compute: the segment then takes the collective's time,
          not the compute's, and its exposed ``tp`` seconds yield to other communication in the
          breakdown depending on when they fall. Where every collective fits under its
          segment's compute, the segments run back to back on the compute stream (as above)
          with each collective hidden under its own compute, and the coarse collective (the
          summed time) under the coarse compute: the same end, nothing exposed either way;
        * ZeRO-3/FSDP: a parameter gather per segment, which slows the compute under it;
        * an overlapped ZeRO-1/2 parameter gather (``overlap_param_gather``) still to come on
          this stage: the first micro-batch's forward waits on one per bucket, and each gather
          is prefetched after the compute two segments back (:meth:`gather`);
        * expert or context parallelism (all-to-alls and ring exchanges after a segment) and
          MoE dispatchers' host synchronisations;
        * a backward that reduces gradients bucket by bucket (overlapped reduction: the last
          micro-batch, or every one from ZeRO-2 on), which slow the next segment's compute.
        """
        if self.gathers_left[s] > 0:
            return False
        if phase == "B" and self.overlap and (mb == self.m - 1 or self.reduce_every_mb):
            return False
        ok = self._coarse_of(ch, phase)  # the rest: the chunk's values and phase only
        if ok:
            self.coarsened += 1
        return ok

    def _coarse_of(self, ch: Chunk, phase: str) -> bool:
        """:meth:`_chunk_coarsenable`, kept per (:meth:`_values_key`, phase): chunks read off
        one chunk decide alike."""
        key = (self._values_key(ch), phase)
        ok = self._coarse_chunk.get(key)
        if ok is None:
            ok = self._coarse_chunk[key] = self._chunk_coarsenable(ch, phase)
        return ok

    def _chunk_coarsenable(self, ch: Chunk, phase: str) -> bool:
        """The part of :meth:`coarsenable` that depends on the chunk and phase only."""
        if not self.coarse or len(ch.segments) < 2 or self.gather_every_mb:
            return False
        if self.tp_stream != "compute":
            fwd = phase == "F"
            for seg in ch.segments:
                tp_s = seg.tp_fwd_s if fwd else seg.tp_bwd_s
                if tp_s > 0 and not (
                    self.tp_overlap and tp_s <= (seg.fwd_s if fwd else seg.bwd_s + seg.recompute_s)
                ):
                    return False
        return not self._exchanges(ch)

    def _exchanges(self, ch: Chunk) -> bool:
        """Whether a segment of ``ch`` has expert or context-parallel exchanges or a MoE host
        synchronisation (``_ep_cp_or_sync``): the refusal of :meth:`_chunk_coarsenable`,
        :meth:`_chunk_runs`, the replays and the hidden walks, read once per
        :meth:`_values_key` (``_xchg``). Exact: those fields of a chunk read off another are
        that chunk's (:meth:`_values_key`'s argument). A Megatron-Core chunk meets all four;
        a pass over a GPT-3 175B pp2 chunk's ~150 segments is ~0.12 M instructions."""
        key = self._values_key(ch)
        hit = self._xchg.get(key)
        if hit is None:
            hit = self._xchg[key] = _ep_cp_or_sync(ch.segments)
        return hit

    def coarse_runs(self, s: int, phase: str, mb: int, ch: Chunk) -> CoarseRuns | None:
        """Where :meth:`coarsenable` refuses a chunk only because some segments' overlapped
        tensor-parallel collectives outlast their compute: the chunk's segments in forward
        order as runs, each run of two or more consecutive segments whose collectives fit
        under their compute summed as one (:data:`CoarseRun`: forward, forward TP, backward
        with recomputation, backward TP, reduce-scattered forward seconds), every other segment
        as itself; ``None`` where that merges nothing or any other refusal holds.

        Exact as :meth:`coarsenable` is, run by run: the fine tasks of a run form one chain on
        the compute stream (each collective beside its compute and ending within it, the
        exposed tail after it), and a refused segment between two runs is lowered as before,
        waiting on the run before it, which ends at the same time either way; so every task
        outside the runs sees the same end times, and the compute stream is busy over the same
        intervals (Megatron-Core's embedding segment, whose TP all-reduce outlasts its
        compute, left every stage-0 forward of GPT-3 175B fine: 145 segments x 3 tasks per
        micro-batch)."""
        if len(ch.segments) < 3 or self.tp_stream == "compute" or self.gathers_left[s] > 0:
            return None  # the cheap refusals first (called for every refused operation)
        if phase == "B" and self.overlap and (mb == self.m - 1 or self.reduce_every_mb):
            return None
        key = (id(ch), phase)
        if key in self._coarse_runs:
            runs = self._coarse_runs[key]
        else:
            runs = self._coarse_runs[key] = self._chunk_runs(ch, phase)
        if runs is not None:
            self.coarsened += 1
        return runs

    def _chunk_runs(self, ch: Chunk, phase: str) -> CoarseRuns | None:
        """The part of :meth:`coarse_runs` that depends on the chunk and phase only."""
        segs = ch.segments
        if not self.coarse or len(segs) < 3 or self.gather_every_mb or self.tp_stream == "compute":
            return None  # too few to split, or coarsenable's own refusals
        if self._exchanges(ch):
            return None
        fwd = phase == "F"
        out: list[Segment | CoarseRun] = []
        run: list[Segment] = []

        def close() -> None:
            if len(run) >= 2:  # summed in forward order, as chunk_sums
                out.append(
                    (
                        sum(x.fwd_s for x in run),
                        sum(x.tp_fwd_s for x in run),
                        sum(x.bwd_s + x.recompute_s for x in run),
                        sum(x.tp_bwd_s for x in run),
                        sum(x.tp_rs_fwd_s for x in run),
                    )
                )
            else:
                out.extend(run)
            run.clear()

        for seg in segs:
            tp_s = seg.tp_fwd_s if fwd else seg.tp_bwd_s
            if tp_s > 0 and not (
                self.tp_overlap and tp_s <= (seg.fwd_s if fwd else seg.bwd_s + seg.recompute_s)
            ):
                close()
                out.append(seg)
            else:
                run.append(seg)
        close()
        return tuple(out) if any(type(x) is tuple for x in out) else None

    # ------------------------------------------------------------------ operation tasks

    #: Whether analytic graphs get operation tasks and folded sends (tests compare both ways).
    OP_TASKS = True

    #: Whether the segments of an operation extend one operation task while Megatron-Core's
    #: aligned parameter gathers are still to come (:meth:`op_task`; tests compare both ways).
    ALIGNED_CHAINS = True

    def init_op_tasks(self) -> None:
        """State of :meth:`op_task` and :meth:`fold_send`: on in the analytic list schedule's
        graph only (``hidden``; not with Megatron-Core's combined 1F1B, whose held backward
        sends leave after another operation); and the memos keyed by :meth:`_values_key`."""
        self.op_tasks = self.OP_TASKS and self.hidden and not self.combined
        self.op_merged = 0  # operation tasks and folded sends made
        # per stage and send stream (0: send_fwd, 1: send_bwd): the longest compute task
        # emitted since that stream's last send, the last send's seconds, and whether every
        # send so far started when its operation ended (folded or not)
        self._cs_max = [[0.0, 0.0] for _ in range(self.P)]
        self._send_prev = [[0.0, 0.0] for _ in range(self.P)]
        self._send_exact = [[True, True] for _ in range(self.P)]
        self._send_last = [[-1, -1] for _ in range(self.P)]  # the last folded send's task
        # per chunk: its _values_key; (_values_key, phase) -> _plain_op_times, and a later
        # stage's issue_lead (chunks read off one chunk share them)
        self._vkeys = [self._values_key(ch) for ch in self.chunks]
        self._op_times: dict[tuple[int, str], tuple[float, tuple[float]] | bool] = {}
        self._leads: dict[tuple[int, str], float] = {}
        self._xchg: dict[int, bool] = {}  # _values_key -> _exchanges
        # (task id, operation, stage) of the last operation task op_task emitted
        self._op_chain: tuple[int, tuple[str, int, int], int] | None = None

    def compute_emitted(self, s: int, dur: float) -> None:
        """A compute task of ``dur`` seconds was emitted on stage ``s``'s compute stream (read by
        :meth:`fold_send`). Mirrored inline in :meth:`run_plain_schedule` and
        ``OperationReplay.run_chain_schedule``; ``tests/parallel/test_plain_loop.py``
        compares."""
        m = self._cs_max[s]
        if dur > m[0]:
            m[0] = dur
        if dur > m[1]:
            m[1] = dur

    def op_task(
        self,
        s: int,
        op: tuple[str, int, int],
        dur: float,
        deps: list[int],
        tp_s: float,
        tail: float,
        label: str,
    ) -> list[int] | None:
        """Lower a segment of operation ``op`` (phase, micro-batch, chunk) on stage ``s`` as
        one task of the analytic graph: ``dur`` seconds of compute, then ``tail`` seconds of
        exposed tensor-parallel communication on the compute stream
        (:attr:`~perfmodel.parallel.taskgraph.Task.then_s`), where that is exact; the next
        segments of the same operation extend it (``then_s`` gets their compute and tail).
        Returns what the next segment waits on (``[tid]``), or ``None`` where refused.

        A segment is its compute task, then its TP collective (``tp_s`` seconds): on the
        compute stream right after the compute (``tp_comm`` not overlapped; ``tail`` is then
        ``tp_s``), or beside it on its own stream, then its exposed ``tail`` on the compute
        stream after both. Exact where the collective beside the compute ends within it
        (``tp_s <= dur``): it starts with the compute (both wait on the same tasks, and every
        earlier collective of its stream ended before those: the tasks after it waited on it),
        so the tail starts when the compute ends (without a tail, the join of the two is the
        compute's end), and the collective ran inside the compute's interval, where the
        breakdown counts compute (priority 0); nothing waits on it but the tail or the join.
        A chain of such segments (each waiting on the one before only, consecutive on the
        compute stream, one operation) runs back to back, so the task ends where the chain
        ended, its durations added in the same order (bit for bit), and the breakdown reads
        each piece where it ran (:func:`perfmodel.report.step_breakdown.breakdown`). A
        parameter gather prefetched after a segment's compute (ZeRO-3/FSDP, Megatron-Core's
        first overlapped gathers) waits on ``tid + HEAD``, the end of the task's first
        compute, bit for bit the compute task's end (such segments are not chained: their
        gathers enter the chain). Megatron-Core's interleaved ``overlap_param_gather``
        launches each chunk's gathers at once after :meth:`gather_deps` (``after``) and
        reads no anchor, so while they are still to come (``gathers_left``) the other
        operations' segments chain as usual (GPT-3 175B, Megatron-Core, dp4 tp16 pp16
        interleaved: 1,712 forward segments of 272 operations were a task each). Refused
        where the collective outlasts the compute (its exposed part yields to other
        communication)."""
        # read by gather() (its anchors); aligned launches (gather_deps) read none
        anchor = self.gather_every_mb or (
            self.gathers_left[s] > 0 and not (self.aligned_gather and self.ALIGNED_CHAINS)
        )
        if tp_s > 0:
            if not self.tp_overlap:
                tail = tp_s
            elif not tp_s <= dur:  # an OverTask where exact (OperationReplay.over_op)
                return self.over_op(s, op, dur, deps, tp_s, tail, label)
        b = self.b
        prev = self._op_chain
        if (
            prev is not None
            and not anchor
            and prev[1] == op
            and prev[2] == s
            and len(deps) == 1
            and deps[0] == prev[0] == len(b.tasks) - 1
        ):
            task = b.tasks[prev[0]]
            _S_THEN(task, (*task.then_s, dur, tail))
            self.compute_emitted(s, dur)
            self.op_merged += 1
            return [prev[0]]
        k = op[2] * self.P + s
        tid = b.add(
            TaskKind.COMPUTE, self.gpu[s], "compute", dur, deps, label, op[1], k, None, (tail,)
        )
        if anchor:  # a gather prefetched after this compute waits on its end
            self.gather_hist[s].append(tid + HEAD)
        self._op_chain = (tid, op, s)
        self.compute_emitted(s, dur)
        self.op_merged += 1
        return [tid]

    def plain_op(self, s: int, phase: str, mb: int, c: int, deps: list[int]) -> int:
        """Operation ``phase`` of micro-batch ``mb`` through chunk ``c`` of stage ``s`` as one
        operation task, where the chunk is one segment (``plain_single``) or lowered coarse
        (:meth:`coarsenable`, asked by the caller): what :meth:`segment` and :meth:`op_task`
        emit for it, with its durations computed once per chunk and phase. Returns the task's
        id, or ``-1`` where :meth:`op_task` would refuse (the caller lowers it as before). Its
        task and counters (:meth:`compute_emitted`, ``op_merged``) are mirrored inline in
        :meth:`run_plain_schedule`; ``tests/parallel/test_plain_loop.py`` compares."""
        k = c * self.P + s
        hit = self._op_times.get((self._vkeys[k], phase))
        if hit is None:
            hit = self._shared_op_times(k, phase)
        if hit is False or self.gather_every_mb or self.gathers_left[s] > 0:
            return -1
        dur, then = hit
        b = self.b
        label = f"{phase}{mb}.c{c}" if self.V > 1 else f"{phase}{mb}"
        tid = b.add(TaskKind.COMPUTE, self.gpu[s], "compute", dur, deps, label, mb, k, None, then)
        self._op_chain = (tid, (phase, mb, c), s)
        self.compute_emitted(s, dur)
        self.op_merged += 1
        return tid

    def _lone_segment(self, k: int) -> Segment | None:
        """Chunk ``k``'s one segment where an operation through it, once no parameter gather
        is to come on its stage, lowers as :meth:`plain_op` lowers a ``plain_single`` chunk's:
        ``plain_single`` itself, or the same segment in a step with Megatron-Core's overlapped
        ZeRO-1/2 gathers (the first micro-batch waits on them; every later operation is the
        segment loop's one :meth:`segment` and :meth:`op_task` task, the same task); else
        ``None``."""
        seg1 = self.plain_single[k]
        if seg1 is not None or not self.gather_early:
            return seg1
        segs = self.chunks[k].segments
        if len(segs) != 1 or segs[0].ep_cp or segs[0].host_sync_s:
            return None
        if self.gather_every_mb or self.combined or any(self.offload_stall):
            return None
        return segs[0]

    #: Whether a chunk read off an earlier one (:attr:`~perfmodel.parallel.lowering.Chunk.
    #: values_of`) takes that chunk's per-chunk decisions (:meth:`_values_key`); ``False``:
    #: coarse-or-not, plain-operation seconds and later stages' issue leads decided per chunk
    #: (tests compare both ways; lower_hidden's hidden summary reads ``values_of`` either way).
    BY_VALUES = True

    def _values_key(self, ch: Chunk) -> int:
        """The identity the per-chunk memos of :meth:`coarsenable`, :meth:`plain_op`,
        :meth:`_exchanges` and the lowering's later-stage issue leads (``PipelineLowering.issue_lead``, exact by its own
        argument: the same block layers at the same offset and length) key ``ch`` by: the
        chunk it was read off (``values_of``), else ``ch`` itself.

        Exact: ``values_of``'s segments are ``ch``'s (the same objects, at other layer ids:
        :func:`~perfmodel.parallel.lowering._shifted_chunk`), and :meth:`_chunk_coarsenable`,
        :meth:`_plain_op_times` and :meth:`_exchanges` read only their fields (durations, TP seconds,
        expert/context entries, host stalls), their count and this lowering's settings: the
        same comparisons and the same sums in the same order, so the same answers. The
        object keyed is alive while the chunk is (it holds it), so its ``id`` is not reused
        within the lowering."""
        src = ch.values_of if self.BY_VALUES else None
        return id(ch if src is None else src)

    def _shared_op_times(self, k: int, phase: str) -> tuple[float, tuple[float]] | bool:
        """:meth:`_plain_op_times` of chunk ``k``, computed once per :meth:`_values_key` (the
        one memo of plain-operation seconds, ``_op_times``; :meth:`plain_op` reads it first)."""
        key = (self._vkeys[k], phase)
        hit = self._op_times.get(key)
        if hit is None:
            hit = self._op_times[key] = self._plain_op_times(k, phase)
        return hit

    def _plain_op_times(self, k: int, phase: str) -> tuple[float, tuple[float]] | bool:
        """``(compute, (tail,))`` seconds of :meth:`plain_op`'s task for chunk ``k`` and
        ``phase`` (the segment's or the chunk's summed durations after the TP overlap's
        adjustment, as :meth:`segment` computes them), or ``False`` where :meth:`op_task`
        refuses (an overlapped collective longer than its compute)."""
        seg1 = self._lone_segment(k)
        fwd = phase == "F"
        if seg1 is not None:
            dur = seg1.fwd_s if fwd else seg1.bwd_s + seg1.recompute_s
            tp_s = seg1.tp_fwd_s if fwd else seg1.tp_bwd_s
            rs_s = seg1.tp_rs_fwd_s if fwd else 0.0
        else:
            sums = self.chunk_sums(k)
            dur, tp_s = sums[:2] if fwd else sums[2:]
            rs_s = self.chunk_rs_sum(k) if fwd else 0.0
        tail = 0.0
        if tp_s > 0:
            if not self.tp_overlap:
                tail = tp_s
            else:
                tkey = (phase, dur, tp_s, rs_s)
                over = self._tp_over.get(tkey)
                if over is None:
                    over = self._tp_over[tkey] = self.tp_overlapped(phase, dur, tp_s, rs_s)
                dur, under, tail = over
                if not under <= dur:
                    return False
        return dur, (tail,)

    def fold_send(
        self, s: int, deps: list[int], stream: str, dur: float, spec: CommSpec
    ) -> tuple[bool, int]:
        """Fold the pipeline send of ``dur`` seconds that stage ``s`` issues on ``stream``
        after ``deps`` (one task ``x``) into ``x`` (:attr:`~perfmodel.parallel.taskgraph.Task.
        send_s`), where it starts exactly when ``x`` ends: the stream's previous send ended by
        then. Returns ``(folded, wait)``: where not folded, the send is a task as before, which
        must also wait on ``wait`` (``x' + SENT``: the stream's previous send, folded into
        ``x'``, occupies the stream until then; ``-1``: nothing more).

        Why that holds: ``x`` is a compute-stream task, the last of its operation, and the
        stream's sends follow the stage's operations in program order. By induction every
        send so far started when its task ended (at ``e``); the stream's previous one ended at
        ``e + d``, and some compute task of at least ``d`` seconds was emitted on the stage
        since (:meth:`compute_emitted`): it started after ``e`` (the compute stream runs in
        program order, behind the previous send's task) and ``x`` ends no earlier than it, so
        by monotone rounding ``x`` ends no earlier than ``e + d``. A task that waits on the
        send lists ``x + SENT`` and the list schedule reads ``end[x] + send_s``: the send's
        end, bit for bit. Where the test fails (or ``x`` is not one compute task) the send is
        a task, waiting on the previous send as the stream made it wait, and so is every later
        send on that stream (tasks occupy the stream themselves).

        The rule is mirrored inline in :meth:`run_plain_schedule` and
        ``OperationReplay.run_chain_schedule`` (decided before the task is made);
        ``tests/parallel/test_plain_loop.py`` compares."""
        i = 0 if stream == "send_fwd" else 1
        exact = self._send_exact[s]
        if not exact[i]:
            return False, -1
        ok = self._cs_max[s][i] >= self._send_prev[s][i]
        task = self.b.tasks[deps[0]] if len(deps) == 1 else None
        if type(task) is not OpTask and type(task) is not ChainTask:
            # a send is folded into an operation task (or gather chain) only; an OverTask
            # stands for one once a later segment extended it (else for a TP tail)
            if type(task) is not OverTask or len(task.then_s) < 2:  # type: ignore[union-attr]
                task = None
        self._send_prev[s][i] = dur
        self._cs_max[s][i] = 0.0
        last = self._send_last[s]
        if not (ok and task is not None and task.send is None):
            exact[i] = False
            return False, (last[i] + SENT if last[i] >= 0 else -1)
        _S_SEND_S(task, dur)
        _S_SEND(task, spec)
        last[i] = task.tid
        self.op_merged += 1
        return True, -1

    # ------------------------------------------------------------------ plain operation loop

    #: Whether :meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.run_schedule` emits
    #: plain, replayed and gather-chain operations inline (:meth:`run_plain_schedule`); ``False``:
    #: its reference loop sends every operation through ``forward`` / ``backward`` (tests
    #: compare both ways).
    PLAIN_LOOP = True

    def plain_templates(self, phase: str) -> list[PlainTemplate | None]:
        """Per chunk ``k``, what :meth:`run_plain_schedule` needs to emit operation ``phase``
        of chunk ``k`` as :meth:`plain_op` and :meth:`fold_send` would (:data:`PlainTemplate`),
        or ``None`` where the operation is never plain: the chunk is neither one plain segment
        (``plain_single``) nor lowered coarse (:meth:`coarsenable`'s chunk part), or
        :meth:`op_task` refuses it (an overlapped collective outlasting its compute), or an
        activation offload wait follows its compute. What depends on the micro-batch (a
        parameter gather still to come, a backward that reduces gradients) is
        :meth:`run_plain_schedule`'s to check."""
        fwd = phase == "F"
        out: list[PlainTemplate | None] = []
        for k, ch in enumerate(self.chunks):
            single = self._lone_segment(k) is not None
            if not single:
                ok = self._coarse_of(ch, phase)
                if not ok or not self._op_exit[0 if fwd else 1]:
                    out.append(None)
                    continue
            hit = self._shared_op_times(k, phase)
            if hit is False or self.gather_every_mb:
                out.append(None)
                continue
            dur, then = hit  # type: ignore[misc]
            if dur < 0 or dur != dur:  # b.add raises on it: the general path does
                out.append(None)
                continue
            s = k % self.P
            sends = k < self.K - 1 if fwd else k > 0
            send = self.op_send(k, fwd)
            labels = op_labels(phase, k // self.P if self.V > 1 else -1, self.m)
            dur = float(dur)
            out.append(
                (self.gpu[s], dur, then, sends, send, labels, _OpTaskTwin, OpTask, None, dur, 1,
                 0 if single else 1, None)
            )  # fmt: skip
        return out

    def run_plain_schedule(self) -> None:
        """``run_schedule``'s round robin with operation tasks (its speed door, written apart
        from its reference loop): each plain operation (:meth:`plain_templates`) emitted here
        as ``forward`` / ``backward``, :meth:`plain_op`, ``send`` and :meth:`fold_send` emit
        it, from its chunk's template, the replayable ones copied, ZeRO-3/FSDP's gather chains
        by ``run_chain_schedule`` (``lower_replay``), the others through ``forward`` /
        ``backward``. The same tasks in the same order and the same state after each operation
        (``tests/parallel/test_plain_loop.py`` compares with ``run_schedule``'s own loop), for
        ~1/3 of the calls' cost (issue 27)."""
        if self.init_chain_ops():  # type: ignore[attr-defined]
            # ZeRO-3/FSDP: none plain (plain_templates refuses it) nor replayed (init_replay)
            self.run_chain_schedule()  # type: ignore[attr-defined]
            return
        P, K, ops = self.P, self.K, self.ops
        f_out, b_out, f_done = self.f_out, self.b_out, self.f_done
        forward, backward = self.forward, self.backward
        last, gathers_left, first_done = self.last_compute, self.gathers_left, self.first_seg_done
        tf, tb = self.plain_templates("F"), self.plain_templates("B")
        replay = self.init_replay()  # type: ignore[attr-defined]
        cs_max, prev_s, exact_s, last_s = (
            self._cs_max, self._send_prev, self._send_exact, self._send_last,
        )  # fmt: skip
        b = self.b
        tasks, dset = b.tasks, b._device_set
        # a backward that reduces its gradients bucket by bucket is never plain
        final_b = self.m - 1 if self.overlap else -1
        every_b = self.overlap and self.reduce_every_mb
        merged = coarse = 0
        new, compute = _new_task, TaskKind.COMPUTE
        # single_template's answers (init_replay set them; read only where replay holds)
        singles = self._single_tpl  # type: ignore[attr-defined]
        pos = [0] * P
        # (micro-batch, chunk) keys of f_out / b_out / f_done, one tuple each: a lookup with
        # the stored key object skips the tuple comparison
        keys = [[(mb, k) for k in range(K)] for mb in range(self.m)]
        for s, o, i, n in round_robin(ops, pos):
            # the stage's fold state (lists changed in place, by forward / backward too)
            cs, ex, prev, fold = cs_max[s], exact_s[s], prev_s[s], last_s[s]
            while i < n:
                phase, mb, c = o[i]
                k = c * P + s
                if phase == "F":
                    fwd, j = True, 0  # j: the send stream (fold_send's i)
                    if k > 0:
                        d = f_out.get(keys[mb][k - 1])
                        if d is None:
                            break
                    t = tf[k]
                else:
                    fwd, j = False, 1
                    if k < K - 1:
                        d = b_out.get(keys[mb][k + 1])
                        if d is None:
                            break
                    t = None if every_b or mb == final_b else tb[k]
                if t is None or gathers_left[s] > 0:  # not plain: the general path
                    if replay and self.replayable(s, fwd, mb, k):  # type: ignore[attr-defined]
                        # a copy of a recorded operation of one task: inline below, as
                        # replay_op's general copy emits it (single_template)
                        rk = (k, fwd, gathers_left[s] > 0)
                        t = singles.get(rk)
                        if t is None:
                            t = self.single_template(rk)  # type: ignore[attr-defined]
                        if not t:
                            self.replay_op(s, fwd, mb, c)  # type: ignore[attr-defined]
                            i += 1
                            continue
                    else:
                        if fwd:
                            forward(s, mb, c)
                        else:
                            backward(s, mb, c)
                        i += 1
                        continue
                gpu, dur, then, sends, send, labels, twin, cls, over, cmax, m_add, c_add, line = t
                key = keys[mb][k]
                # the operation's dependencies, cleaned as GraphBuilder.add cleans them
                a = last[s]
                if not fwd:
                    f = f_done[key]
                    if k < K - 1:
                        if a < 0 or f < 0 or d < 0:
                            deps = tuple(sorted({y for y in (a, f, d) if y >= 0}))
                        else:  # sorted({a, f, d}), by hand (two compares):
                            # d (b_out[(mb, k + 1)], a backward after that forward, or
                            # its send) always comes after f (f_done[(mb, k)]), so after
                            # a swap with d, a <= the old f < the new f
                            if a > f:
                                a, f = f, a
                            if f > d:
                                f, d = d, f
                                assert a < f, "b_out precedes its forward's f_done"
                            if a == f:
                                deps = (a,) if f == d else (a, d)
                            else:
                                deps = (a, f) if f == d else (a, f, d)
                        a = -2  # done
                    else:
                        d = f
                if a == -2:
                    pass
                elif fwd and k == 0:
                    deps = (a,) if a >= 0 else ()
                elif a < 0:  # clean_two(a, d), inline
                    deps = (d,) if d >= 0 else ()
                elif d < 0 or d == a:
                    deps = (a,)
                else:
                    deps = (a, d) if a < d else (d, a)
                tid = len(tasks)
                if cmax > cs[0]:  # compute_emitted
                    cs[0] = cmax
                if cmax > cs[1]:
                    cs[1] = cmax
                # fold_send, decided before the task is made (it reads the state above)
                send_s, spec, wait = 0.0, None, -3  # -3: no send task
                if send is not None:
                    if ex[j]:
                        ok = cs[j] >= prev[j]
                        prev[j] = send[0]
                        cs[j] = 0.0
                        if ok:
                            send_s, spec = send
                            fold[j] = tid
                        else:
                            ex[j] = False
                            x = fold[j]
                            wait = x + SENT if x >= 0 else -1
                    else:
                        wait = -1
                # plain_op's OpTask (GraphBuilder.add's twin and values), or the copy's
                task = new(twin)
                if over is not None:
                    task.over = over
                task.then_s = then
                task.send_s = send_s
                task.send = spec
                task.tid = tid
                task.kind = compute
                task.device = gpu
                task.stream = "compute"
                task.duration_s = dur
                task.deps = deps
                task.label = labels[mb]
                task.microbatch = mb
                task.chunk = k
                task.comm = None
                task.__class__ = cls
                tasks.append(task)
                if gpu not in dset:
                    dset.add(gpu)
                    b.devices.append(gpu)
                if line is not None:  # a copy of several tasks: the rest, the send on the last
                    tid = self.line_rest(s, j, task, line)  # type: ignore[attr-defined]
                last[s] = tid
                out = tid
                merged += m_add
                coarse += c_add
                if spec is not None:
                    out = tid + SENT
                    merged += 1
                elif wait != -3:
                    out = self._send_task(fwd, tid, wait, mb, k, send, gpu)  # type: ignore[arg-type]
                if fwd:
                    first_done[s] = True
                    f_done[key] = tid
                    if sends:
                        f_out[key] = out
                elif sends:
                    b_out[key] = out
                i += 1
            pos[s] = i
        self.op_merged += merged
        self.coarsened += coarse

    def op_send(self, k: int, fwd: bool) -> tuple[float, CommSpec] | None:
        """``(seconds, CommSpec)`` of the pipeline send ``send`` emits after the operation
        through chunk ``k`` (``fwd``: its activation to the next stage's chunk ``k + 1``;
        else its input gradient, chunk ``k - 1``'s output size, to the previous stage), priced
        once per lowering (``p2p``); ``None`` where the operation sends nothing (the last
        chunk's forward, the first chunk's backward) or the pipeline is one stage. The
        templates of the inline loops (:meth:`plain_templates`, ``OperationReplay._single`` and
        ``_chain_template``) keep it."""
        P = self.P
        if P == 1 or not (k < self.K - 1 if fwd else k > 0):
            return None
        if fwd:
            return self.p2p(k % P, (k + 1) % P, self.chunks[k].out_bytes)
        return self.p2p(k % P, (k - 1) % P, self.chunks[k - 1].out_bytes)

    def _send_task(
        self, fwd: bool, tid: int, wait: int, mb: int, k: int, send: tuple, gpu: str
    ) -> int:
        """The send task :meth:`send` emits where :meth:`fold_send` did not fold the send of
        ``send = (seconds, CommSpec)`` after task ``tid`` (``fwd``: the activation, else the
        input gradient), waiting also on ``wait`` (the stream's last folded send; ``-1``:
        none); returns its id."""
        stream, label = ("send_fwd", f"send F{mb}") if fwd else ("send_bwd", f"send B{mb}")
        deps = [tid, wait] if wait >= 0 else [tid]
        dur, spec = send
        return self.b.add(TaskKind.SENDRECV, gpu, stream, dur, deps, label, mb, k, spec)


__all__ = ["LoweringShortcuts"]
