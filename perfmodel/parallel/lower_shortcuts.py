"""The lowering's shortcuts: what makes a large step fast to lower, each a small door
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits and calls.

* **Shared chunks** (:meth:`LoweringShortcuts._build_chunks`): chunks that cannot depend on
  the topology are kept by what they depend on (:data:`_SHARED_CHUNKS`), so the same model,
  batch and software on another cluster size reads them (issue 27, sweeps).
* **Coarse segments** (:meth:`LoweringShortcuts.coarsenable`): a chunk's segments become one
  compute task and one collective where nothing inside them overlaps or is waited on.
* **Periodic schedules** (:meth:`LoweringShortcuts.periodic_count`): a short schedule whose
  steady period :func:`perfmodel.sim.engine.periodic_timeline` extends to the whole step.
* **Hidden collectives** (:meth:`LoweringShortcuts.hidden_backward`,
  :meth:`LoweringShortcuts.gather_runs`), in the analytic list schedule's graph only
  (:meth:`~perfmodel.parallel.periodic.LazyGraph.analytic`): a bucketed backward's gradient
  reductions as a lead and one reduction (max-plus), and runs of segments whose parameter
  gathers hide under the compute as two computes.
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
``tests/sim/test_op_tasks.py``). The methods
read the lowering's state (``self.plan``, ``self.P``, ``self.chunks``...), set by
``PipelineLowering.__init__``.
"""

from __future__ import annotations

import dataclasses

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import CPImpl
from perfmodel.parallel.lowering import Chunk, Segment, build_chunk
from perfmodel.parallel.partition import block_runs, partition
from perfmodel.parallel.periodic import WINDOW_BACK, short_limit, window_gap
from perfmodel.parallel.plan import PipelineSchedule
from perfmodel.parallel.recipe import ParamSync
from perfmodel.parallel.schedule import warmup_forwards
from perfmodel.parallel.taskgraph import (
    _S_SEND,
    _S_SEND_S,
    _S_THEN,
    HEAD,
    SENT,
    CommKind,
    CommSpec,
    OpTask,
    TaskKind,
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
#: A bucketed backward with its gradient reductions summarised
#: (:meth:`LoweringShortcuts.hidden_backward`): compute seconds, TP seconds, the lead's seconds
#: (``kappa``), the reductions' summed seconds (fusion waits included) and bytes.
HiddenBackward = tuple[float, float, float, float, float]


#: An operation lowered as runs with hidden gathers (:meth:`LoweringShortcuts.gather_runs`):
#: per segment in operation order ``(compute before the TP overlap's adjustment, compute, TP
#: seconds, gather seconds, reduction seconds, may join a run)``, the runs ``(i0, i1)`` (none:
#: every segment as the fine loop lowers it), the gradient reduction's operation and per
#: segment the gather's and the reduction's :class:`CommSpec` and its overlapped TP
#: collective's exposed tail (seconds).
GatherPlan = tuple[
    tuple[tuple[float, float, float, float, float, bool], ...],
    tuple[tuple[int, int], ...],
    object,
    tuple[tuple[CommSpec, CommSpec | None, float], ...],
]


def _lead(on_stream: list[float], red: list[float]) -> tuple[float, float]:
    """``(kappa, sum R)`` of :meth:`LoweringShortcuts.hidden_backward`: segments of
    ``on_stream`` seconds back to back from ``a`` (``f_j = a + F_j``), reductions of ``red``
    seconds each after its segment and the one before, one at a time; the last ends at
    ``max(r_p + sum R, a + max_j (F_j + R_j + ... + R_n))``, so ``kappa = max_j (F_j + R_j + ...
    + R_n) - sum R`` (``0 <= kappa <= sum on_stream``)."""
    suffix = 0.0
    tails = [0.0] * len(red)
    for j in range(len(red) - 1, -1, -1):
        suffix += red[j]
        tails[j] = suffix
    f = best = 0.0
    for j, d in enumerate(on_stream):
        f += d
        best = max(best, f + tails[j])
    # clamped to [0, sum D]: the difference rounds to an ulp of sum R beyond either bound
    return min(max(0.0, best - suffix), f), suffix


class LoweringShortcuts:
    """Shared chunks, coarse segments and periodic schedules of a
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
        placement or the topology's links."""
        plan, rc = self.plan, self.rc
        table = getattr(self.costs, "price_table", None)
        if table is None or self.pl.tp != 1 or self.owt or plan.ep != 1 or plan.cp != 1:
            return None
        return (
            id(self.wl),
            id(table),
            self.costs.precision,  # type: ignore[attr-defined]
            self.K,
            self.preset.even_pipeline_split,
            rc.bucket_bytes if self.overlap else None,
            rc.first_bucket_bytes,
            self.zero3,
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
        # the layer times balance the pipeline's chunks: one chunk (K = 1) holds every layer
        for unit, keys, n in block_runs(wl.layers, costs) if self.K > 1 else ():
            times = []  # a stack's block read once
            for layer, key in zip(unit, keys, strict=True):
                t = by_key.get(key)
                if t is None:
                    t = by_key[key] = sum(costs.layer_time(layer))
                times.append(t)
            unit_cost += times * n
        chunks: list[Chunk] = []
        parts = partition(wl, self.K, unit_cost, allow_uneven=not self.preset.even_pipeline_split)
        # ep_overlap pairs two micro-batches: with one there is nothing to overlap with
        plan = self.plan if self.m_step > 1 else dataclasses.replace(self.plan, ep_overlap=False)
        seg_memo: dict[tuple[object, ...], object] = {}  # identical blocks' segments: summed once
        share = rc.selective_recompute.share_for(wl)
        for k, ids in enumerate(parts):
            s = k % self.P
            groups = self.expert_context_groups(s)
            chunks.append(
                build_chunk(
                    wl,
                    ids,
                    self.costs,
                    plan,
                    pl.dp_group(0, 0) if self.owt else pl.tp_group(0, s),
                    bucket_bytes=rc.bucket_bytes if self.overlap else None,
                    first_bucket_bytes=rc.first_bucket_bytes,
                    by_block=self.zero3,
                    algorithm=self.alg,
                    exclude_sharded=self.owt,
                    grad_bytes=rc.grad_reduce_bytes,
                    selective_share=share,
                    comm_groups=groups,
                    seg_memo=seg_memo,  # type: ignore[arg-type]
                    cp_impl=CPImpl.for_fusion(rc.fusion),
                )
            )
        return chunks

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
        key = (id(ch), phase)  # the rest depends on the chunk and phase only: decided once
        ok = self._coarse_chunk.get(key)
        if ok is None:
            ok = self._coarse_chunk[key] = self._chunk_coarsenable(ch, phase)
        if ok:
            self.coarsened += 1
        return ok

    def _chunk_coarsenable(self, ch: Chunk, phase: str) -> bool:
        """The part of :meth:`coarsenable` that depends on the chunk and phase only."""
        if not self.coarse or len(ch.segments) < 2 or self.zero3:
            return False
        if self.tp_stream != "compute":
            fwd = phase == "F"
            for seg in ch.segments:
                tp_s = seg.tp_fwd_s if fwd else seg.tp_bwd_s
                if tp_s > 0 and not (
                    self.tp_overlap and tp_s <= (seg.fwd_s if fwd else seg.bwd_s + seg.recompute_s)
                ):
                    return False
        return not any(seg.ep_cp or seg.host_sync_s for seg in ch.segments)

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
        if not self.coarse or len(segs) < 3 or self.zero3 or self.tp_stream == "compute":
            return None  # too few to split, or coarsenable's own refusals
        if any(seg.ep_cp or seg.host_sync_s for seg in segs):
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

    def init_op_tasks(self) -> None:
        """State of :meth:`op_task` and :meth:`fold_send`: on in the analytic list schedule's
        graph only (``hidden``; not with Megatron-Core's combined 1F1B, whose held backward
        sends leave after another operation)."""
        self.op_tasks = self.OP_TASKS and self.hidden and not self.combined
        self.op_merged = 0  # operation tasks and folded sends made
        # per stage and send stream (0: send_fwd, 1: send_bwd): the longest compute task
        # emitted since that stream's last send, the last send's seconds, and whether every
        # send so far started when its operation ended (folded or not)
        self._cs_max = [[0.0, 0.0] for _ in range(self.P)]
        self._send_prev = [[0.0, 0.0] for _ in range(self.P)]
        self._send_exact = [[True, True] for _ in range(self.P)]
        self._send_last = [[-1, -1] for _ in range(self.P)]  # the last folded send's task
        self._plain_ops: dict[tuple[int, str], tuple[float, tuple[float]] | bool] = {}
        # (task id, operation, stage) of the last operation task op_task emitted
        self._op_chain: tuple[int, tuple[str, int, int], int] | None = None

    def compute_emitted(self, s: int, dur: float) -> None:
        """A compute task of ``dur`` seconds was emitted on stage ``s``'s compute stream (read by
        :meth:`fold_send`)."""
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
        gathers enter the chain). Refused where the collective outlasts the compute (its
        exposed part yields to other communication)."""
        anchor = self.zero3 or self.gathers_left[s] > 0  # read by gather() (its anchors)
        if tp_s > 0:
            if not self.tp_overlap:
                tail = tp_s
            elif not tp_s <= dur:
                return None
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
        id, or ``-1`` where :meth:`op_task` would refuse (the caller lowers it as before)."""
        k = c * self.P + s
        key = (k, phase)
        hit = self._plain_ops.get(key)
        if hit is None:
            hit = self._plain_ops[key] = self._plain_op_times(k, phase)
        if hit is False or self.zero3 or self.gathers_left[s] > 0:
            return -1
        dur, then = hit
        b = self.b
        label = f"{phase}{mb}.c{c}" if self.V > 1 else f"{phase}{mb}"
        tid = b.add(TaskKind.COMPUTE, self.gpu[s], "compute", dur, deps, label, mb, k, None, then)
        self._op_chain = (tid, (phase, mb, c), s)
        self.compute_emitted(s, dur)
        self.op_merged += 1
        return tid

    def _plain_op_times(self, k: int, phase: str) -> tuple[float, tuple[float]] | bool:
        """``(compute, (tail,))`` seconds of :meth:`plain_op`'s task for chunk ``k`` and
        ``phase`` (the segment's or the chunk's summed durations after the TP overlap's
        adjustment, as :meth:`segment` computes them), or ``False`` where :meth:`op_task`
        refuses (an overlapped collective longer than its compute)."""
        seg1 = self.plain_single[k]
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
        send on that stream (tasks occupy the stream themselves)."""
        i = 0 if stream == "send_fwd" else 1
        exact = self._send_exact[s]
        if not exact[i]:
            return False, -1
        ok = self._cs_max[s][i] >= self._send_prev[s][i]
        task = self.b.tasks[deps[0]] if len(deps) == 1 else None
        if type(task) is not OpTask:  # a send is folded into an operation task only
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

    # ------------------------------------------------------------------ hidden reductions

    def hidden_backward(
        self, s: int, mb: int, c: int, ch: Chunk, final_mb: bool
    ) -> HiddenBackward | None:
        """Where the analytic graph (``hidden``) may lower a backward that reduces its
        gradients bucket by bucket (overlapped reduction: the last micro-batch, or every one
        from ZeRO-2 on; PyTorch DDP's 25 MiB buckets, Megatron-Core's) as one compute task, one
        tensor-parallel collective and one reduction: the summed durations
        (:data:`HiddenBackward`), else ``None`` (lowered segment by segment).

        The fine tasks: in backward order, segment ``j``'s compute (``D_j`` on the compute
        stream: its slowed seconds plus its TP collective there, or alone where the TP
        collective runs beside it and fits under it) and, after it, its reduction of ``R_j``
        seconds on the gradient stream. Nothing on the compute stream waits for a reduction
        (the slowdown it causes is a fixed function of its duration,
        :meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.slowed`), so the segments
        run back to back from the operation's start ``a``: segment ``j`` ends at
        ``f_j = a + F_j`` (``F_j = D_0 + ... + D_j``). The reductions run one at a time in
        program order, ``r_j = max(r_{j-1}, f_j) + R_j``, so (max-plus) the last ends at
        ``r = max(r_p + sum R, a + max_j (F_j + R_j + ... + R_n))`` with ``r_p`` the end of
        the stream's previous task. The summary emits a zero-length compute task at ``a``, the
        compute (``sum D`` split into its compute and TP tasks as :meth:`coarsenable`'s), a
        *lead* of ``kappa = max_j (F_j + R_j + ... + R_n) - sum R`` seconds on a stream of its
        own from ``a``, and one reduction of ``sum R`` seconds after the lead on the gradient
        stream: it ends at ``max(r_p, a + kappa) + sum R = r``. ``0 <= kappa <= sum D``, so the
        lead lies under the busy compute stream. The breakdown (:mod:`perfmodel.report.
        step_breakdown`) is the same: until ``f_n`` the compute stream is busy (priority 0);
        after it every remaining reduction starts as the previous ends, so the gradient stream
        is busy from ``f_n`` (or ``r_p``) to ``r``, as the summary's reduction is. Every task
        after the operation (the next segment, the optimizer, the next reduction on the
        stream) sees the same end times, up to the summation order of the durations.

        Refused where that chain does not hold or the executor is not the list schedule: the
        SimPy replay runs :meth:`~perfmodel.parallel.periodic.LazyGraph.coarse` (reductions
        contend by their bytes and start times); ZeRO-3/FSDP (a gather per segment the compute
        waits for), HSDP (two collectives per bucket), an overlapped parameter gather still
        to come on the stage, expert or context parallelism and MoE host synchronisations, a
        TP collective on its own stream that follows its compute, outlasts it or leaves a
        tail, and a chunk of one segment."""
        if not self.hidden or self.zero3 or self.hsdp or not (self.dp_on and self.overlap):
            return None
        if not (final_mb or self.reduce_every_mb) or self.gathers_left[s] > 0:
            return None
        key = (id(ch), final_mb)
        if key in self._hidden_ops:
            hit = self._hidden_ops[key]
        else:
            hit = self._hidden_ops[key] = self._hidden_op(s, ch, final_mb)
        if hit is not None:
            self.hidden_merged += 1
        return hit

    def _hidden_op(self, s: int, ch: Chunk, final_mb: bool) -> HiddenBackward | None:
        """The part of :meth:`hidden_backward` that depends on the chunk (hence the stage) and
        whether it is the last micro-batch: the fine loop's durations, summed."""
        segs = ch.segments
        if len(segs) < 2 or any(seg.ep_cp or seg.host_sync_s for seg in segs):
            return None
        on_compute = self.tp_stream == "compute"
        if self.tp_overlap and on_compute:
            return None  # an "overlapped" collective queued behind its compute: not modelled
        op = self._grad_op()
        wait = self.preset.fusion_cycle_s / 2
        grad_b = self.rc.grad_reduce_bytes
        comp = tp_total = nbytes_total = 0.0
        on_stream: list[float] = []  # D_j, backward order
        red: list[float] = []  # R_j
        prev = 0.0
        for si, seg in enumerate(reversed(segs)):  # as the fine loop of backward()
            dur = seg.bwd_s + seg.recompute_s
            if final_mb and si > 0:
                dur = self.slowed(dur, prev)
            tp_s = seg.tp_bwd_s
            d = dur
            if tp_s > 0:
                if self.tp_overlap:
                    dur, tp_s, tail = self.tp_overlapped("B", dur, tp_s)
                    if tail > 0 or tp_s > dur:
                        return None
                    d = dur
                elif on_compute:
                    d = dur + tp_s
                else:
                    return None  # after its compute on a stream of its own: exposed as "tp"
            comp += dur
            if tp_s > 0:
                tp_total += tp_s
            on_stream.append(d)
            nbytes = self.reduced_params(seg.params, seg.expert_params) * grad_b
            nbytes_total += nbytes
            prev = self.dp_time(s, op, nbytes) + wait
            red.append(prev)
        lead, total = _lead(on_stream, red)
        return (comp, tp_total, lead, total, nbytes_total)

    def lower_hidden_backward(
        self, s: int, mb: int, c: int, hid: HiddenBackward, deps: list[int]
    ) -> list[int]:
        """Emit :meth:`hidden_backward`'s tasks after ``deps``; returns the task ids the
        operation's end waits on (as :meth:`segment`'s)."""
        from perfmodel.parallel.taskgraph import TaskKind

        comp_s, tp_s, lead_s, red_s, nbytes = hid
        k = c * self.P + s
        add, gpu = self.b.add, self.gpu[s]
        label = f"B{mb}.c{c}" if self.V > 1 else f"B{mb}"
        # positional: label, microbatch, chunk
        a = add(TaskKind.COMPUTE, gpu, "compute", 0.0, deps, label, mb, k)  # starts at a
        tid = add(TaskKind.COMPUTE, gpu, "compute", comp_s, [a], label, mb, k)
        out = [tid]
        if tp_s > 0:
            if self.tp_overlap:  # beside the compute, within it
                out.append(
                    add(TaskKind.COLLECTIVE, gpu, self.tp_stream, tp_s, [a], f"TP B{mb}", mb, k)
                )
            else:  # after it on the compute stream
                out = [
                    add(TaskKind.COLLECTIVE, gpu, self.tp_stream, tp_s, [tid], f"TP B{mb}", mb, k)
                ]
        lead = add(TaskKind.COMPUTE, gpu, "grad-lead", lead_s, [a], f"grad lead {k}", mb, k)
        spec = self.dp_spec(s, self._grad_op(), nbytes)
        g = add(TaskKind.COLLECTIVE, gpu, self.rc.grad_comm.stream, red_s, [lead],
                f"grad {k} (summarised)", -1, -1, spec)  # fmt: skip
        self.comm_dur[g] = red_s
        self.grad_comm[s].append(g)
        return out

    # ------------------------------------------------------------------ hidden gathers

    def gather_runs(
        self, s: int, phase: str, mb: int, ch: Chunk, final_mb: bool
    ) -> GatherPlan | None:
        """Where the analytic graph (``hidden``) may lower an operation whose segments each
        wait for a parameter gather (ZeRO-3/FSDP in forward and backward; Megatron-Core's
        ``overlap_param_gather`` in the first micro-batch's forward, one chunk per stage) as
        runs of segments with their gathers hidden: :data:`GatherPlan`, else ``None``.

        Gathers run one at a time on their stream, gather ``i`` once the compute of segment
        ``i - 2`` has ended (prefetch depth 1, :meth:`~perfmodel.parallel.lower_pipeline.
        PipelineLowering.gather`), ``g_i = max(g_{i-1}, e_{i-2}) + G_i``; segment ``i`` starts
        at ``max(f_{i-1}, g_i)`` (``e``: its compute's end, ``f``: its end, its TP collective
        included). In a run ``i0 .. i1`` of segments with ``G_i <= C_{i-1}`` for ``i > i0``
        (``C``: the compute's seconds, slowed as the fine loop slows it, which depends on
        durations only), by induction ``g_i <= e_{i-1}`` for ``i > i0`` (``g_{i0 + 1} <= s_{i0}
        + G``, both its inputs ended by the run's start ``s_{i0}``; then ``g_i = e_{i-2} + G_i
        <= e_{i-2} + C_{i-1} <= e_{i-1}``, so gathers ``i0 + 2 ..`` run under the busy compute
        stream): no segment after ``i0`` waits for its gather, the
        run's computes and TP collectives run back to back from ``s_{i0}``, and the next gather
        after the run starts at ``e_{i1 - 1}`` (its stream is free by then), the one after
        it at ``e_{i1}`` at the earliest. The run is lowered as gathers ``i0`` and
        ``i0 + 1`` (the latter may start before the run, as soon as its anchor, the compute
        before ``i0``, ends: it is kept, and ends within compute ``i0``); the TP seconds
        of segments ``i0 .. i1 - 2`` (on the compute stream; beside the compute where they
        overlap); one compute of segments ``i0 .. i1 - 1``, ending at ``e_{i1 - 1}``; segment
        ``i1 - 1``'s TP; segment ``i1``'s compute, ending at ``e_{i1}``; its TP: the two
        computes are the prefetch anchors of the next gathers, as ``e_{i1 - 1}`` and ``e_{i1}``
        are in the fine graph, and every task after the run sees the same end times. The
        compute stream is busy over the same interval with the same compute and TP seconds
        (priority 0 in the breakdown), under which the dropped gathers ran. A backward's
        gradient reductions are summarised run by run as in :meth:`hidden_backward`.
        Runs shorter than three segments stay fine, as do the refusals of
        :meth:`hidden_backward` (HSDP, expert or context parallelism, TP collectives that
        leave their compute) and owner broadcasts or interleaved launches of the gathers."""
        if not self.hidden or self.hsdp:
            return None
        if not (self.zero3 or (phase == "F" and self.gather_early and mb == 0)):
            return None
        if not self.zero3 and (
            self.aligned_gather or self.rc.param_sync is ParamSync.OWNER_BROADCAST
        ):
            return None
        reducing = (
            phase == "B" and self.dp_on and self.overlap and (final_mb or self.reduce_every_mb)
        )
        first = self.first_seg_done[s]
        key = (id(ch), phase, reducing, final_mb, first)
        if key in self._gather_ops:
            hit = self._gather_ops[key]
        else:
            hit = self._gather_ops[key] = self._gather_plan(s, ch, phase, reducing, final_mb, first)
        if hit is not None and hit[1]:
            self.hidden_merged += 1
        return hit

    def _gather_plan(
        self, s: int, ch: Chunk, phase: str, reducing: bool, final_mb: bool, first: bool
    ) -> GatherPlan | None:
        """The part of :meth:`gather_runs` that depends on the chunk, the phase and the
        stage's state: per segment (operation order) its compute before and after the TP
        overlap's adjustment, TP seconds and reduction, and the runs."""
        segs = ch.segments if phase == "F" else tuple(reversed(ch.segments))
        if len(segs) < 3 or any(seg.ep_cp or seg.host_sync_s for seg in segs):
            return None
        on_compute = self.tp_stream == "compute"
        if self.tp_overlap and on_compute:
            return None
        fwd = phase == "F"
        wait = self.preset.fusion_cycle_s / 2
        gb, grad_b = self.rc.gather_bytes, self.rc.grad_reduce_bytes
        op = self._grad_op()
        rows: list[tuple[float, float, float, float, float, bool]] = []
        specs: list[tuple[CommSpec, CommSpec | None, float]] = []
        prev = 0.0
        for si, seg in enumerate(segs):
            g = self.dp_time(s, CollectiveOp.ALLGATHER, seg.params * gb) + wait
            g_spec = self.dp_spec(s, CollectiveOp.ALLGATHER, seg.params * gb, CommKind.ZERO)
            if fwd:
                dur = self.slowed(seg.fwd_s, g) if (first or si > 0) else seg.fwd_s
                tp_s, rs_s = seg.tp_fwd_s, seg.tp_rs_fwd_s
            else:  # ZeRO-3/FSDP: the gather and the previous segment's reduction under it
                dur = self.slowed(seg.bwd_s + seg.recompute_s, g + prev)
                tp_s, rs_s = seg.tp_bwd_s, 0.0
            raw, c_s, ok, tail = dur, dur, True, 0.0
            if tp_s > 0:
                if self.tp_overlap:
                    c_s, tp_s, tail = self.tp_overlapped(phase, dur, tp_s, rs_s)
                    ok = tail <= 0 and tp_s <= c_s
                elif not on_compute:
                    ok = False
            prev = 0.0
            red = 0.0
            r_spec = None
            if reducing:
                nbytes = self.reduced_params(seg.params, seg.expert_params) * grad_b
                red = prev = self.dp_time(s, op, nbytes) + wait
                r_spec = self.dp_spec(s, op, nbytes)
            rows.append((raw, c_s, max(tp_s, 0.0), g, red, ok))
            specs.append((g_spec, r_spec, tail))
        runs: list[tuple[int, int]] = []
        i0 = 0
        n = len(rows)
        for i in range(1, n + 1):
            if i < n and rows[i][5] and rows[i - 1][5] and rows[i][3] <= rows[i - 1][1]:
                continue  # segment i joins the run (its gather fits under the compute before)
            if i - i0 >= 3:
                runs.append((i0, i - 1))
            i0 = i
        # without runs the plan still lowers the operation, segment by segment as the fine
        # loop does, from these durations (gather_runs does not count it as merged)
        return tuple(rows), tuple(runs), op, tuple(specs)

    def lower_gather_runs(
        self, s: int, phase: str, mb: int, c: int, ch: Chunk, plan: GatherPlan, deps: list[int]
    ) -> list[int]:
        """Emit :meth:`gather_runs`' operation after ``deps``: segments outside the runs as
        the fine loop of ``forward`` / ``backward`` emits them (with the durations it
        computes), each run as that method describes; returns the ids the operation's end
        waits on."""
        from perfmodel.parallel.taskgraph import TaskKind

        rows, runs, op, specs = plan
        P = self.P
        k = c * P + s
        fwd = phase == "F"
        segs = ch.segments if fwd else tuple(reversed(ch.segments))
        add, gpu = self.b.add, self.gpu[s]
        hist = self.gather_hist[s]
        keep_hist = self.zero3 or self.gathers_left[s] > 0
        label = f"{phase}{mb}.c{c}" if self.V > 1 else f"{phase}{mb}"
        tp_label = f"TP {phase}{mb}"
        on_compute = self.tp_stream == "compute"
        reducing = any(r[4] for r in rows)
        grad_stream = self.rc.grad_comm.stream
        starts = {i0: i1 for i0, i1 in runs}
        tids = deps
        si = 0
        n = len(segs)
        overlap = self.tp_overlap
        g_stream = self.rc.param_gather.stream
        comm_dur = self.comm_dur
        while si < n:
            seg = segs[si]
            i1 = starts.get(si)
            if i1 is None:  # as the fine loop: gather(), segment(), reduce_gradients()
                _, c_s, tp_s, g_s, red_s, _ = rows[si]  # c_s, tp_s: after the TP overlap's
                g_spec, r_spec, tail = specs[si]
                ag = add(TaskKind.COLLECTIVE, gpu, g_stream, g_s, hist[-2:-1],
                         f"AG {phase}{mb}.{k}.{si}", -1, -1, g_spec)  # fmt: skip
                comm_dur[ag] = g_s
                sd = [*tids, ag]
                one = self.op_tasks and (tp_s <= 0 or not overlap or tp_s <= c_s)
                # one operation task where op_task's argument holds, its compute's end the anchor
                then = (0.0 if tp_s <= 0 else tp_s if not overlap else tail,) if one else None
                tid = add(TaskKind.COMPUTE, gpu, "compute", c_s, sd, label, mb, k, None, then)
                if one:
                    self.compute_emitted(s, c_s)
                    self.op_merged += 1
                if keep_hist:
                    hist.append(tid + HEAD if one else tid)
                if one or tp_s <= 0:
                    tids = [tid]
                elif not overlap:  # after the compute
                    tids = [add(TaskKind.COLLECTIVE, gpu, self.tp_stream, tp_s, [tid],
                                tp_label, mb, k)]  # fmt: skip
                else:  # beside it, from the same dependencies; the exposed tail after both
                    tp_tid = add(TaskKind.COLLECTIVE, gpu, self.tp_stream, tp_s, sd, tp_label,
                                 mb, k)  # fmt: skip
                    tids = [tid, tp_tid]
                    if tail > 0:
                        tids = [add(TaskKind.COLLECTIVE, gpu, "compute", tail, tids,
                                    f"TP tail {phase}{mb}", mb, k)]  # fmt: skip
                self.first_seg_done[s] = True
                if reducing:
                    g = add(TaskKind.COLLECTIVE, gpu, grad_stream, red_s, tids,
                            f"grad {k}.{si}", -1, -1, r_spec)  # fmt: skip
                    comm_dur[g] = red_s
                    self.grad_comm[s].append(g)
                si += 1
                continue
            ag = self.gather(s, seg, f"AG {phase}{mb}.{k}.{si}")
            sd = [*tids, ag]
            run = rows[si : i1 + 1]
            # the next gather may start before the run does (its anchor, the compute two
            # back, may have ended long before): as the fine loop emits it; it ends within
            # the run's first compute
            # (the fine loop emits it after compute i0 joined the anchors: its anchor, two
            # computes back, is the last anchor now)
            self.gather(s, segs[si + 1], f"AG {phase}{mb}.{k}.{si + 1}", hist[-1:])
            head = sd
            if reducing:  # the run's start, for the reductions' lead
                z = add(TaskKind.COMPUTE, gpu, "compute", 0.0, sd, label, mb, k)
                head = [z]
            tp_pre = sum(r[2] for r in run[:-2])
            comp_a = sum(r[1] for r in run[:-1])
            if on_compute:
                prev = head
                if tp_pre > 0:
                    prev = [add(TaskKind.COLLECTIVE, gpu, "compute", tp_pre, head, tp_label, mb, k)]
                a = add(TaskKind.COMPUTE, gpu, "compute", comp_a, prev, label, mb, k)
                prev = [a]
                if run[-2][2] > 0:
                    prev = [
                        add(TaskKind.COLLECTIVE, gpu, "compute", run[-2][2], prev, tp_label, mb, k)
                    ]
                b = add(TaskKind.COMPUTE, gpu, "compute", run[-1][1], prev, label, mb, k)
                out = [b]
                if run[-1][2] > 0:
                    out = [
                        add(TaskKind.COLLECTIVE, gpu, "compute", run[-1][2], [b], tp_label, mb, k)
                    ]
                ends = [r[1] + r[2] for r in run]
            else:  # TP beside the compute, each within it
                a = add(TaskKind.COMPUTE, gpu, "compute", comp_a, head, label, mb, k)
                b = add(TaskKind.COMPUTE, gpu, "compute", run[-1][1], [a], label, mb, k)
                out = [b]
                tp_all = sum(r[2] for r in run)
                if tp_all > 0:
                    out.append(
                        add(TaskKind.COLLECTIVE, gpu, self.tp_stream, tp_all, head, tp_label, mb, k)
                    )
                ends = [r[1] for r in run]
            if keep_hist:  # the next gathers' prefetch anchors: e_{i1 - 1}, e_{i1}
                hist.append(a)
                hist.append(b)
            self.first_seg_done[s] = True
            if reducing:
                self._summary_reduction(s, k, mb, head, ends, [r[4] for r in run],
                                        segs[si : i1 + 1], op, grad_stream)  # fmt: skip
            tids = out
            si = i1 + 1
        return tids

    def _summary_reduction(
        self,
        s: int,
        k: int,
        mb: int,
        head: list[int],
        on_stream: list[float],
        red: list[float],
        segs: tuple[Segment, ...],
        op: object,
        stream: str,
    ) -> None:
        """The lead and the one reduction standing for a run's gradient reductions
        (:meth:`hidden_backward`'s construction), the run starting when ``head`` ends."""
        from perfmodel.parallel.taskgraph import TaskKind

        lead_s, red_s = _lead(on_stream, red)
        grad_b = self.rc.grad_reduce_bytes
        nbytes = sum(self.reduced_params(x.params, x.expert_params) * grad_b for x in segs)
        gpu = self.gpu[s]
        lead = self.b.add(TaskKind.COMPUTE, gpu, "grad-lead", lead_s, head, f"grad lead {k}", mb, k)
        spec = self.dp_spec(s, op, nbytes)  # type: ignore[arg-type]
        g = self.b.add(TaskKind.COLLECTIVE, gpu, stream, red_s, [lead],
                       f"grad {k} (summarised)", -1, -1, spec)  # fmt: skip
        self.comm_dur[g] = red_s
        self.grad_comm[s].append(g)

    def chunk_sums(self, k: int) -> tuple[float, float, float, float]:
        """Chunk ``k``'s summed forward, forward TP, backward (with recomputation) and backward
        TP seconds over its segments (one micro-batch), computed once."""
        hit = self._sums.get(k)
        if hit is None:
            segs = self.chunks[k].segments
            hit = self._sums[k] = (
                sum(x.fwd_s for x in segs),
                sum(x.tp_fwd_s for x in segs),
                sum(x.bwd_s + x.recompute_s for x in segs),
                sum(x.tp_bwd_s for x in segs),
            )
        return hit

    def chunk_rs_sum(self, k: int) -> float:
        """Chunk ``k``'s summed reduce-scattered forward seconds over its segments
        (:attr:`~perfmodel.parallel.lowering.Segment.tp_rs_fwd_s`, the same sum every coarse
        forward read), computed once."""
        hit = self._rs_sums.get(k)
        if hit is None:
            hit = self._rs_sums[k] = sum(x.tp_rs_fwd_s for x in self.chunks[k].segments)
        return hit

    # ------------------------------------------------------------------ periodic schedules

    def periodic_count(self) -> int:
        """Micro-batches of the short schedule a
        :class:`~perfmodel.parallel.periodic.PeriodicGraph` tries first (0: lower the whole
        step). Only 1F1B (or one stage) and interleaved 1F1B, every micro-batch lowered alike
        (no ZeRO-2/3 or FSDP reductions and gathers per micro-batch, no expert or context
        parallelism), and a short schedule of at most 3/4 of the step's micro-batches; the
        check itself is :func:`perfmodel.sim.engine.evaluate`'s (it may ask for a longer one,
        as long as it stays under 3/4 of the step's).

        The count is the fewest the check can pass on, in units (:attr:`period_unit`):
        warm-up units ``0 .. j0`` (1F1B: ``j0 = pp``, the first micro-batch whose
        predecessor on every stream is a steady operation; interleaved: the rounds stage 0's
        ``2 (pp - 1) + (v - 1) pp`` warm-up forwards reach into, 2, or 1 for pp 2), then
        shifted copies ``j0 + 1 .. n - tail`` (:attr:`_tail`) around the window's unit
        ``mid = n - tail - 3``, which the check needs at least ``pp + 2`` (interleaved: 4)
        units after ``j0``: ``2 pp + 7`` micro-batches for 1F1B, 12 rounds of ``pp``
        interleaved (11 for pp 2, whose warm-up stays in the first round; before:
        ``2 pp + 8``, and 10 rounds, which the check always refused, the eager host's
        bound below making up for it). An eager host's kernel-issue task keeps the step's
        length in a short schedule (:meth:`kernel_issue`): the check then needs it over
        before the window, so the schedule is made long enough for that
        (:meth:`_issue_over_count`), or not offered when it would not be short (docs/design.md,
        "How short", for the scenarios this was checked on)."""
        P, plan, u = self.P, self.plan, self.period_unit
        one_f_one_b = plan.schedule is PipelineSchedule.ONE_F_ONE_B or (
            P == 1 and plan.schedule is not PipelineSchedule.GPIPE
        )
        if not (one_f_one_b or u > 1) or self.owt or self.zero3:
            return 0
        if self.rc.sharding.stage >= 2 or plan.ep > 1 or plan.cp > 1:
            return 0
        # j0, the gap (pp + 2; interleaved 4), the tail and the window's 3: the docstring
        j0 = P if u == 1 else -(-warmup_forwards(P, 0, self.V) // (P * self.V))
        base = u * (j0 + window_gap(u, P) + self._tail + WINDOW_BACK)
        limit = short_limit(self.m_step)
        issue = max(self.issue_times())
        if issue > 0:
            # an eager host issues the step's kernels in one task per stage, from the start
            # (stage 0's after the host step): the check takes the period after it ends
            base = self._issue_over_count(base, self.host_step_s() + issue, limit)
        return base if base <= limit else 0

    def _issue_over_count(self, base: int, issue_end_s: float, limit: int) -> int:
        """The fewest micro-batches (whole units, at least ``base``; above ``limit`` where
        none up to it will do) of a short schedule in whose list schedule every stage's
        kernel-issue task (ending by ``issue_end_s``) ends before the window
        :func:`perfmodel.sim.engine.periodic_timeline` takes the period in.

        That window starts one period before unit ``mid = n - tail - 3`` of the ``n``
        units starts (``j1 = n - tail`` the last unit the check finds periodic, :attr:`_tail`),
        i.e. when unit ``mid - 1`` starts: with stage 0's forward of its first micro-batch
        (chunk 0; the lowering emits it before any other task of that micro-batch). A compute
        stream runs its operations one at a time in the schedule's order
        (:func:`~perfmodel.parallel.schedule.stage_ops`), after the host step, so that forward
        starts no earlier than the host step plus :meth:`_stage0_busy_before`, a lower bound
        (every task is at least its segments' summed compute, plus their tensor-parallel
        collectives where those run on the compute stream). The count is the first ``n``
        whose bound reaches ``issue_end_s`` (the host step plus the longest stage's issue: the
        other stages' tasks start at 0). Before, the bound added the issue's length in
        micro-batches to ``base`` (``ceil(issue / compute per micro-batch) + base``), as if
        the warm-up and the checked micro-batches ran after the issue rather than beside it:
        plan dp32 tp8 pp4 mb1 of GPT-3 175B on 1024 A100, 21 -> 15 micro-batches."""
        u, tail = self.period_unit, self._tail
        n = -(-base // u)  # whole units
        while n * u <= limit:
            # the window starts with unit mid - 1 = n - tail - WINDOW_BACK - 1
            if self._stage0_busy_before((n - tail - WINDOW_BACK - 1) * u * self.V) >= issue_end_s:
                break
            n += 1
        return n * u

    def _stage0_busy_before(self, x: int) -> float:
        """A lower bound on when stage 0's forward of virtual micro-batch ``x`` (1F1B: micro-
        batch ``x``; interleaved: the ``x``-th forward, ``x`` a multiple of ``pp v``, so chunk 0)
        starts after the host step, seconds: the summed compute-stream time of the operations
        before it on stage 0 in a schedule that reaches it in its steady part: ``x`` forwards
        and, after stage 0's ``w`` warm-up forwards (``pp - 1``; interleaved ``2 (pp - 1) +
        (v - 1) pp``), one backward per forward (the steady part alternates forward and
        backward), virtual backward ``b`` running chunk ``v - 1 - (b // pp) % v``. For 1F1B
        also each later stage's compute-stream time up to its backward ``x - pp``, which stage
        0's backward ``x - pp``, just before this forward, waits for through the pipeline's
        backward sends (the largest of these sums)."""
        if x <= 0:
            return 0.0
        P, V = self.P, self.V
        on_stream = self.tp_stream == "compute"
        fwd, bwd = [], []
        for c in range(V):
            f, tf, b, tb = self.chunk_sums(c * P)
            fwd.append(f + tf if on_stream else f)
            bwd.append(b + tb if on_stream else b)
        if self.period_unit == 1:  # 1F1B (one chunk per stage)
            busy = x * fwd[0] + max(0, x - (P - 1)) * bwd[0]
            # 1F1B: the backward i = x - pp that stage 0 runs just before this forward waits
            # for stage s's backward i (pipeline sends), after stage s's forwards 0 .. i + pp -
            # s - 1 and backwards 0 .. i on its compute stream, for every stage s
            i = x - P
            if i >= 0:
                for s in range(1, P):
                    f, tf, b, tb = self.chunk_sums(s)
                    fs, bs = (f + tf, b + tb) if on_stream else (f, b)
                    busy = max(busy, (i + P - s) * fs + (i + 1) * bs)
            return busy
        w = warmup_forwards(P, 0, V)
        busy = (x // (P * V)) * P * sum(fwd)  # x is whole rounds of pp micro-batches
        nb = max(0, x - w)
        busy += (nb // (P * V)) * P * sum(bwd)
        for b in range(nb - nb % (P * V), nb):
            busy += bwd[V - 1 - (b // P) % V]
        return busy

    @property
    def _tail(self) -> int:
        """Units at the end of a short schedule that are not shifted copies of the one before
        (:meth:`periodic_count`): 2 for 1F1B (the last micro-batch reduces the gradients), 3
        for interleaved 1F1B (its cool-down, ``2 (pp - 1) + (v - 1) pp`` backwards on stage 0,
        reaches back beyond the last round), as the check finds on every case of
        docs/design.md's "How short"."""
        return 2 if self.period_unit == 1 else 3

    @property
    def period_unit(self) -> int:
        """Micro-batches per period of a :class:`~perfmodel.parallel.periodic.PeriodicGraph`
        (:attr:`~perfmodel.parallel.periodic.PeriodicGraph.unit`): ``pp`` for interleaved
        1F1B (its operation orders repeat with micro-batch ``j`` becoming ``j + pp``), else 1."""
        interleaved = self.plan.schedule is PipelineSchedule.INTERLEAVED and self.P > 1
        return self.P if interleaved else 1


__all__ = ["LoweringShortcuts"]
