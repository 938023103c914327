"""Lowering of synchronous data / tensor / pipeline parallelism (and ZeRO, FSDP, Krizhevsky's
hybrid) to a task graph, one emitter per concern.

:class:`PipelineLowering` holds the state of one lowering (the task builder, the chunks, what each
stage last emitted) and emits the step in this order, each piece a small method:

1. :meth:`~PipelineLowering.host_step`: framework host time before compute;
2. :meth:`~PipelineLowering.run_schedule`: every stage's forward and backward operations in the
   pipeline schedule's order (:meth:`~PipelineLowering.forward`,
   :meth:`~PipelineLowering.backward`), each chunk's segments with their tensor-parallel
   collectives (:meth:`~PipelineLowering.segment`), parameter gathers
   (:meth:`~PipelineLowering.gather`), gradient buckets and pipeline sends
   (:meth:`~PipelineLowering.send`);
3. :meth:`~PipelineLowering.kernel_issue`: the eager host's issue of the step's kernels;
4. :meth:`~PipelineLowering.finish_stage`: gradient reduction that was not overlapped, the tied
   embedding's copy, the optimizer and ZeRO-1/2's parameter all-gather;
5. :meth:`~PipelineLowering.memory`: per-stage memory.

Every precision and overlap decision comes from the step's :class:`~perfmodel.parallel.recipe.Recipe`.

The class is read in seven modules, each a concept it inherits: this one (the state, the
schedule's forward and backward, segments, sends, the host and memory),
:mod:`~perfmodel.parallel.lower_data_parallel` (data-parallel collectives, gradient reduction,
parameter gathers, the optimizer tail), :mod:`~perfmodel.parallel.lower_expert_context` (expert
and context-parallel tasks and notes), and the speed doors
:mod:`~perfmodel.parallel.lower_shortcuts`, :mod:`~perfmodel.parallel.lower_periodic`,
:mod:`~perfmodel.parallel.lower_replay` and :mod:`~perfmodel.parallel.lower_hidden`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, partial

from perfmodel.ops import SENDRECV, CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.host_lead import issue_lead, issue_times
from perfmodel.parallel.lower_chains import GatherPlan
from perfmodel.parallel.lower_data_parallel import DataParallelEmitters
from perfmodel.parallel.lower_expert_context import ExpertContextEmitters
from perfmodel.parallel.lower_hidden import HiddenBackward, HiddenCollectives
from perfmodel.parallel.lower_periodic import PeriodicSchedules
from perfmodel.parallel.lower_replay import OperationReplay
from perfmodel.parallel.lower_shortcuts import CoarseRuns, LoweringShortcuts
from perfmodel.parallel.lowering import Chunk, LoweredStep, Segment, StepInputs, expert_grad_share
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.periodic import LazyGraph, PeriodicGraph
from perfmodel.parallel.plan import ParallelismPlan, PipelineSchedule
from perfmodel.parallel.recipe import Recipe, Sharding
from perfmodel.parallel.schedule import (
    check_interleaved,
    chunk_moments,
    round_robin,
    stage_ops,
    stage_peak_in_flight,
)
from perfmodel.parallel.software_preset import SoftwarePreset
from perfmodel.parallel.stage_memory import stage_buffer_bytes, stage_memory, tied_embedding_params
from perfmodel.parallel.stage_shift import StageShift
from perfmodel.parallel.taskgraph import (
    COMM_PP,
    SENT,
    TASK_COLLECTIVE,
    TASK_COMPUTE,
    TASK_HOST,
    TASK_SENDRECV,
    CommKind,
    CommSpec,
    GraphBuilder,
    TaskGraph,
)
from perfmodel.workload.layers import LayerCost


class PipelineLowering(
    LoweringShortcuts,
    PeriodicSchedules,
    OperationReplay,
    HiddenCollectives,
    DataParallelEmitters,
    ExpertContextEmitters,
):
    """One lowering of an ``allreduce``-mode plan (see the module docstring for the order)."""

    #: A short schedule's first-forward gathers lowered without chains (set by :meth:`graph`'s
    #: ``relower`` for :meth:`PeriodicGraph.fine_short`; read by ``lower_gather_runs``).
    fine_gathers = False

    def __init__(
        self,
        inp: StepInputs,
        costs: Costs,
        *,
        one_weird_trick: bool = False,
        microbatches: int | None = None,
        chunks: list[Chunk] | None = None,
        coarse: bool = False,
        hidden: bool = False,
    ) -> None:
        """``microbatches`` schedules that many micro-batches instead of the step's (a short
        schedule of :mod:`perfmodel.parallel.periodic`; notes, memory and FLOP keep the step's
        count); ``chunks`` reuses another lowering's chunks of the same inputs; ``coarse``
        lowers a chunk's segments as one compute task and one tensor-parallel collective where
        :meth:`coarsenable` allows (the graph the executors run; :meth:`lower` keeps the fine
        one for what shows tasks); ``hidden`` (with ``coarse``) also summarises the gradient
        reductions of a bucketed backward where :meth:`hidden_backward` allows (the graph the
        analytic list schedule runs, not the flow replay)."""
        self.inp, self.costs, self.owt = inp, costs, one_weird_trick
        self.coarse = coarse
        self.hidden = hidden and coarse
        self.coarsened = 0  # operations lowered coarse
        self.hidden_merged = 0  # backward operations whose reductions were summarised
        self._hidden_ops: dict[tuple[int, bool], HiddenBackward | None] = {}
        self._gather_ops: dict[tuple[int, str, bool, bool], GatherPlan | None] = {}
        self._rows: dict[tuple[object, ...], tuple] = {}  # lower_hidden's segment rows
        self._hidden_seen: dict[tuple[int, bool], tuple] = {}  # lower_hidden._hidden_op
        self._gather_seen: dict[tuple[int, str, bool, bool], tuple] = {}  # _gather_plan
        self._run_memo: dict[tuple[int, int, int, int], tuple] = {}  # lower_hidden._run_sums
        self._fine_memo: dict[tuple[int, int, int | None], list] = {}  # _fine_segments
        self._chain_memo: dict[tuple[int, int], tuple | bool] = {}  # _chain_static
        #: _chain_classes: by id of the rows, the rows kept and their classes
        self._chain_classes_memo: dict[int, tuple[object, tuple[list[int], list[int]]]] = {}
        self._chain_after_memo: dict[tuple[int, int], tuple | bool] = {}  # _chain_after
        self._sums: dict[int, tuple[float, float, float, float]] = {}
        self._rs_sums: dict[int, float] = {}  # chunk_rs_sum
        # (phase, compute, TP, reduce-scattered) seconds -> tp_overlapped's (a pure function)
        self._tp_over: dict[tuple[str, float, float, float], tuple[float, float, float]] = {}
        self._coarse_chunk: dict[tuple[int, str], bool] = {}  # (_values_key(chunk), phase): coarse?
        self._coarse_runs: dict[tuple[int, str], CoarseRuns | None] = {}  # coarse_runs
        plan, pl = inp.plan, inp.placement
        self.plan, self.preset, self.pl, self.wl = plan, inp.preset, pl, inp.workload
        self.P, self.V = plan.pp, plan.interleave
        self.K = self.P * self.V
        self.m_step = plan.num_microbatches(inp.batch_per_replica)  # the step's micro-batches
        self.m = self.m_step if microbatches is None else microbatches  # scheduled ones
        self.alg = self.preset.comm_algorithm
        rc = self.rc = inp.recipe_for(costs)
        self._data_parallel_policy(rc, plan)
        self.tp_stream = rc.tp_comm.stream
        # Megatron's scatter/gather optimisation sends 1/tp of the activation per rank; with
        # sequence parallelism the stage output is already split over the tp ranks
        self.p2p_split = pl.tp > 1 and not plan.sequence_parallel
        self.tp_overlap = rc.tp_comm.overlap
        self.chunks = self._build_chunks() if chunks is None else chunks
        # chunk k's one segment where forward() and backward() take their short path: one
        # segment without expert/context communication or host stalls, in a step without
        # parameter gathers (ZeRO-3/FSDP, overlapped ZeRO-1/2), activation offload or combined
        # 1F1B (Megatron's preset: one segment per chunk); else None
        self.plain_single: list[Segment | None] = [None] * len(self.chunks)
        self._issue: list[float] | None = None
        self.b = GraphBuilder()
        self.gpu = [pl.gpu(0, s, 0) for s in range(self.P)]
        self.dp_groups = [pl.dp_group(s, 0) for s in range(self.P)]
        self.dp_sibs = [tuple(pl.dp_group(s, t) for t in range(1, pl.tp)) for s in range(self.P)]
        self.comm_dur: dict[int, float] = {}  # collective task id -> duration (overlap slowdown)
        # (op, bytes, stage, group) -> the collective model's time with siblings (dp_collective)
        self._dp_time: dict[tuple[CollectiveOp, float, int, str], float] = {}
        self._dp_keys: dict[tuple[int, str], tuple[object, ...]] = {}  # _dp_keyed's keys
        self._dp_specs: dict[tuple[CollectiveOp, float, int, str, CommKind], CommSpec] = {}
        # (from stage, to stage, bytes per rank) -> (duration, CommSpec): the same transfer
        # recurs for every micro-batch, so its GPU pairs and closed-form time are computed once
        self.p2p_cache: dict[tuple[int, int, float], tuple[float, CommSpec]] = {}
        P = self.P
        self._ops: list[list[tuple[str, int, int]]] | None = None  # built when scheduled
        if plan.schedule is PipelineSchedule.INTERLEAVED and P > 1:
            check_interleaved(P, self.m)  # refused here, as when the orders were built here
        self.f_out: dict[tuple[int, int], int] = {}  # (mb, chunk) -> tid the next chunk waits on
        self.b_out: dict[tuple[int, int], int] = {}
        self.f_done: dict[tuple[int, int], int] = {}
        self.grad_comm: list[list[int]] = [[] for _ in range(P)]
        self.gather_hist: list[list[int]] = [[] for _ in range(P)]  # compute tids (prefetch)
        self.first_seg_done = [False] * P
        self.offload_stall = self._offload_stall()
        # chunks whose first micro-batch's parameters are still to be gathered (overlapped
        # ZeRO-1/2 gather): until then every segment's compute is a gather's prefetch anchor
        self.gathers_left = [self.V if self.gather_early else 0] * P
        # per stage, chunk c -> the tasks its gathers wait on under aligned_gather (chunks 0
        # and 1: the step's start)
        self.gather_launch: list[dict[int, list[int]]] = [{} for _ in range(P)]
        self.host_tid = -1
        self.last_compute = [-1] * P
        self.issue_tid = [-1] * P
        self.lead_tid = [-1] * P  # kernel issue lead (host_step), and its seconds
        self.lead_s = [0.0] * P
        self.tied = [0] * P  # a tied embedding's copy on the last stage (parameters)
        if P > 1:
            self.tied[P - 1] = tied_embedding_params(self.chunks[-1].layers)
        self.ep_cp_groups: dict[int, dict[str, tuple[tuple[str, ...], ...]]] = {}
        self.expert_share = expert_grad_share(plan)
        # stage -> ({layer id: owner rank}, {layer id: parameters}): owner-broadcast sync
        self._owners: dict[int, tuple[list[tuple[int, float]], tuple[int, ...]]] = {}
        self._unpaired: dict[int, frozenset[tuple[str, int, int]]] = {}
        # ep_overlap with pipelining: Megatron-Core's combined 1F1B sends a paired backward's
        # input gradient after the pair's layers (TransformerModelChunkSchedulePlan.run's
        # post_backward, Megatron-LM 4415119), so the lowering holds it until the partner
        # forward, the stage's next operation, is emitted: stage -> (to, bytes, mb, chunk)
        self.combined = plan.ep_overlap and self.m_step > 1
        self.held_bwd: dict[int, tuple[int, float, int, int]] = {}
        self.init_op_tasks()
        self._op_exit = tuple(st <= 0 for st in self.offload_stall)  # forward's _op_exit note
        if not (
            self.gather_every_mb or self.gather_early or self.combined or any(self.offload_stall)
        ):
            for i, ch in enumerate(self.chunks):
                if len(ch.segments) == 1:
                    seg = ch.segments[0]
                    if not (seg.ep_cp or seg.host_sync_s):
                        self.plain_single[i] = seg

    def _data_parallel_policy(self, rc: Recipe, plan: ParallelismPlan) -> None:
        """When the recipe ``rc`` gathers parameters and reduces gradients in the step of
        ``plan`` (set once, read by every emitter): ZeRO-3/FSDP lowers one segment per unit
        (``by_unit``) and gathers every unit in every micro-batch (``gather_every_mb``) unless
        pipelined FSDP2 gathers each unit once a step and reduces after the stage's last
        backward (:attr:`~perfmodel.parallel.recipe.Recipe.gather_per_step`); ZeRO-2 on reduces
        every micro-batch's gradients (``reduce_every_mb``); overlapped ZeRO-1/2 and pipelined
        FSDP2 gather in the first micro-batch's forward (``gather_early``), interleaved
        Megatron-Core one chunk ahead (``aligned_gather``: ``param_sync_func``), FSDP2 as each
        chunk's forward starts (its pre-forward hook). In the lowering's mixins "ZeRO-3/FSDP"
        gathers mean ``gather_every_mb``, and "overlapped ZeRO-1/2" or "Megatron-Core's first
        forward" gathers mean ``gather_early``, which pipelined FSDP2 takes too."""
        once = rc.gather_per_step
        stage = rc.sharding.stage
        self.by_unit = stage >= 3
        self.gather_every_mb = self.by_unit and not once
        self.reduce_every_mb = stage >= 2 and not once
        self.dp_on = plan.grad_replicas > 1
        self.overlap = rc.grad_comm.overlap and self.dp_on
        self.gather_early = self.dp_on and (once or (rc.param_gather.overlap and 1 <= stage <= 2))
        self.aligned_gather = self.gather_early and self.V > 1 and not once
        self.hsdp = rc.sharding is Sharding.HSDP and self.dp_on

    @cached_property
    def stage_shift(self) -> StageShift:
        """Which stages are earlier ones moved by whole servers, and the data-parallel keys
        and send times they share (:class:`~perfmodel.parallel.stage_shift.StageShift`)."""
        return StageShift(getattr(self.costs, "topology", None), self.pl)

    @property
    def ops(self) -> list[list[tuple[str, int, int]]]:
        """Every stage's operation order (:func:`~perfmodel.parallel.schedule.stage_ops`),
        built on first use: a step extended from a short schedule never runs the whole one."""
        if self._ops is None:
            plan, P = self.plan, self.P
            self._ops = [stage_ops(plan.schedule, P, self.m, s, self.V) for s in range(P)]
        return self._ops

    # ------------------------------------------------------------------ task helpers

    def slowed(self, dur: float, comm_s: float) -> float:
        """:func:`slowed` with this lowering's preset."""
        return slowed(self.preset, dur, comm_s)

    def send(
        self, s_from: int, s_to: int, nbytes: float, deps: list[int], stream: str, mb: int, k: int
    ) -> int:
        """Pipeline send of ``nbytes`` (one micro-batch's activation or its gradient) from stage
        ``s_from`` to ``s_to``, every TP rank sending its share."""
        dur, spec = self.p2p(s_from, s_to, nbytes)
        if self.op_tasks:
            folded, wait = self.fold_send(s_from, deps, stream, dur, spec)
            if folded:
                return deps[0] + SENT  # the send folded into its operation's task
            if wait >= 0:
                deps = [*deps, wait]
        label = f"send F{mb}" if stream == "send_fwd" else f"send B{mb}"
        # positional: label, microbatch, chunk, comm (one call per pipeline send)
        return self.b.add(TASK_SENDRECV, self.gpu[s_from], stream, dur, deps, label, mb, k, spec)

    def p2p(self, s_from: int, s_to: int, nbytes: float) -> tuple[float, CommSpec]:
        """Seconds and :class:`CommSpec` of :meth:`send`'s transfer of ``nbytes`` from stage
        ``s_from`` to ``s_to`` (each TP rank its share, or all of it with sequence
        parallelism), computed once per lowering (:attr:`p2p_cache`)."""
        pl = self.pl
        per_rank = nbytes / pl.tp if self.p2p_split else nbytes
        key = (s_from, s_to, per_rank)
        hit = self.p2p_cache.get(key)
        if hit is None:
            # rank t of one stage's tensor-parallel group with rank t of the other's (the
            # groups are strided slices of the placement: no rank computed per member), for
            # every replica d < max(1, gpus_per_node // tp), those that fit beside replica 0's
            # tp ranks on one server (a Costs without a topology: replica 0 alone): all of them
            # send at once, so on a server with fewer NICs than GPUs they share the NICs, and
            # where a stage boundary falls inside a server (an NVL72 rack's 72 GPUs in stages
            # of 16) another replica's pairs may cross servers where replica 0's do not; the
            # step waits for the slowest (pairs[0] the representative, the rest its siblings,
            # priced together by transfers_time as the data-parallel path prices dp_sibs)
            topo = getattr(self.costs, "topology", None)
            gpn = int(topo.gpus_per_node) if topo is not None else 1
            pairs: list[tuple[str, str]] = []
            for d in range(min(pl.dp, max(1, gpn // pl.tp))):
                pairs += zip(pl.tp_group(d, s_from), pl.tp_group(d, s_to), strict=True)
            spec = CommSpec(SENDRECV, per_rank, pairs[0], "auto", COMM_PP, tuple(pairs[1:]))
            transfers = getattr(getattr(self.costs, "comm", None), "transfers", None)
            dur = self.stage_shift.send_time(
                s_from,
                s_to,
                per_rank,
                partial(self.costs.transfers_time, pairs, per_rank),
                None if transfers is None else partial(transfers.by_shape, pairs),
            )
            hit = self.p2p_cache[key] = (dur, spec)
        return hit

    def segment(
        self,
        s: int,
        phase: str,
        mb: int,
        c: int,
        dur: float,
        deps: list[int],
        tp_s: float,
        rs_s: float = 0.0,
    ) -> list[int]:
        """One segment's compute (``phase`` "F" or "B") and its tensor-parallel collective.

        The collective follows the compute on the compute stream, or (recipe ``tp_comm``
        overlapped) runs beside it on its own stream, chunked under the GEMMs; ``rs_s``: the
        forward seconds of the GEMMs whose output is reduce-scattered (Segment.tp_rs_fwd_s).
        Returns the task ids the next segment waits on.
        """
        k = c * self.P + s
        add, gpu = self.b.add, self.gpu[s]
        label = f"{phase}{mb}.c{c}" if self.V > 1 else f"{phase}{mb}"
        tail = 0.0
        if tp_s > 0 and self.tp_overlap:
            key = (phase, dur, tp_s, rs_s)
            over = self._tp_over.get(key)
            if over is None:
                over = self._tp_over[key] = self.tp_overlapped(phase, dur, tp_s, rs_s)
            dur, tp_s, tail = over
        if self.op_tasks:
            op = self.op_task(s, (phase, mb, c), dur, deps, tp_s, tail, label)
            if op is not None:
                return op
        # positional: label, microbatch, chunk (one call per segment and micro-batch)
        tid = add(TASK_COMPUTE, gpu, "compute", dur, deps, label, mb, k)
        if self.op_tasks:
            self.compute_emitted(s, dur)
        if self.gather_every_mb or self.gathers_left[s] > 0:  # read by gather() only (its anchors)
            self.gather_hist[s].append(tid)
        if tp_s <= 0:
            return [tid]
        tp_deps = deps if self.tp_overlap else [tid]
        tp_tid = add(TASK_COLLECTIVE, gpu, self.tp_stream, tp_s, tp_deps, f"TP {phase}{mb}", mb, k)
        if not self.tp_overlap:
            return [tp_tid]
        if tail <= 0:
            return [tid, tp_tid]
        # the pipelined reduce-scatters' last chunks, after the GEMMs, on the compute stream
        tail_tid = add(
            TASK_COLLECTIVE, gpu, "compute", tail, [tid, tp_tid], f"TP tail {phase}{mb}", mb, k
        )
        return [tail_tid]

    def tp_overlapped(
        self, phase: str, dur: float, tp_s: float, rs_s: float = 0.0
    ) -> tuple[float, float, float]:
        """:func:`tp_overlapped` with this lowering's preset and its cost model's GPU's SM
        count (0 where the cost model has no GPU datasheet)."""
        spec = getattr(self.costs, "gpu_spec", None)
        return tp_overlapped(self.preset, getattr(spec, "sm_count", 0), phase, dur, tp_s, rs_s)

    def join(self, s: int, tids: list[int]) -> int:
        """One task id standing for ``tids`` (a zero-length task on the compute stream when a
        segment's TP collective ran beside its compute)."""
        if len(tids) == 1:
            return tids[0]
        return self.b.add(TASK_COMPUTE, self.gpu[s], "compute", 0.0, tids, label="join TP")

    # ------------------------------------------------------------------ the step

    def host_step_s(self) -> float:
        """Seconds of :meth:`host_step`'s task: :func:`host_step_s` of this lowering's
        preset, data-parallel degree and samples per replica."""
        return host_step_s(self.preset, self.plan.dp, self.inp.batch_per_replica)

    def host_step(self) -> None:
        """Host time on the critical path before compute (framework loop, batch split), then
        each eager stage's issue lead (:func:`~perfmodel.parallel.host_lead.issue_lead`): the
        kernels the host must issue before the GPU can run without waiting, which the first
        compute waits on."""
        host_s = self.host_step_s()
        if host_s > 0:
            self.host_tid = self.b.add(
                TASK_HOST, self.gpu[0], "host", host_s, label="host step / batch split"
            )
        self.last_compute = [self.host_tid] * self.P
        issue = self.issue_times()
        for s in range(self.P):
            if issue[s] <= 0:
                continue
            lead = min(self.issue_lead(s), issue[s])
            if lead > 0:
                pre = [self.host_tid] if self.host_tid >= 0 and s == 0 else []
                self.lead_s[s] = lead
                self.lead_tid[s] = self.b.add(
                    TASK_HOST,
                    self.gpu[s],
                    "host",
                    lead,
                    pre,
                    label="kernel issue lead (eager host ahead of the GPU)",
                )
                self.last_compute[s] = self.lead_tid[s]

    def issue_lead(self, s: int) -> float:
        """Stage ``s``'s issue lead over the step's operation order; a stage after the first
        of a pipeline takes an earlier stage's lead where the chunk of its first operation
        has that stage's :meth:`_values_key` and the operation's phase.

        Exact: :func:`~perfmodel.parallel.host_lead.issue_lead` of a stage ``s > 0`` of a
        pipeline stops before its second operation, so it reads the first operation's phase
        and its chunk's layers only: their host and GPU seconds (by cost source) in
        :func:`~perfmodel.parallel.partition.block_runs`' runs. A chunk read off another
        (:func:`~perfmodel.parallel.lowering._shifted_chunk`) holds the consecutive ids at the
        same offset in the same stack's block and of the same length, so its runs are the same
        units of the same block layers with the same counts, and the lead adds the same
        seconds in the same order."""
        ops = self.ops[s]
        share = self.rc.selective_recompute.share_for(self.wl)
        if self.BY_VALUES and s > 0 and ops:
            phase, _, c = ops[0]
            key = (self._values_key(self.chunks[c * self.P + s]), phase)
            hit = self._leads.get(key)
            if hit is None:
                hit = self._leads[key] = issue_lead(
                    self.costs, self.chunks, ops[:1], self.P, s, self.plan.recompute, share
                )
            return hit
        return issue_lead(self.costs, self.chunks, ops, self.P, s, self.plan.recompute, share)

    def forward(self, s: int, mb: int, c: int) -> None:
        """Forward of micro-batch ``mb`` through chunk ``c`` of stage ``s``; ZeRO-3/FSDP units
        (and, with Megatron-Core's ``overlap_param_gather``, the first micro-batch's buckets)
        wait for their parameter gather; the output is sent to the next stage."""
        k = c * self.P + s
        ch = self.chunks[k]
        deps = [self.last_compute[s]]
        if k > 0:
            deps.append(self.f_out[(mb, k - 1)])
        seg1 = self.plain_single[k]
        if seg1 is not None:  # what the general path below does for such a chunk, directly
            tids = self._single_op(s, "F", mb, c, deps, seg1.fwd_s, seg1.tp_fwd_s, seg1.tp_rs_fwd_s)
            self.first_seg_done[s] = True
            self._forward_end(s, mb, k, tids[0] if len(tids) == 1 else self.join(s, tids), ch)
            return
        tids: list[int] = []
        if self.coarsenable(s, "F", mb, ch):
            tid = self.plain_op(s, "F", mb, c, deps) if self.op_tasks else -1
            # what the rest below does for such an operation, directly, where no activation
            # offload wait follows the compute (_op_exit). The rest holds whenever plain_op
            # gave a task: no held backward send (operation tasks are off with combined
            # 1F1B), no overlapped ZeRO-1/2 gather to count or launch (those are for
            # micro-batch 0 of a chunk while gathers_left > 0, where plain_op refuses)
            if tid >= 0 and self._op_exit[0]:
                self.first_seg_done[s] = True
                self._forward_end(s, mb, k, tid, ch)
                return
            if tid >= 0:
                tids = [tid]
            else:
                f_s, tp_s = self.chunk_sums(k)[:2]
                rs_s = self.chunk_rs_sum(k)
                tids = self.segment(s, "F", mb, c, f_s, deps, tp_s, rs_s)
            self.first_seg_done[s] = True
        elif (runs := self.coarse_runs(s, "F", mb, ch)) is not None:
            tids = deps
            for run in runs:  # a refused segment as in the loop below (nothing else applies)
                if type(run) is tuple:
                    tids = self.segment(s, "F", mb, c, run[0], tids, run[1], run[4])
                else:
                    x: Segment = run  # type: ignore[assignment]
                    tids = self.segment(s, "F", mb, c, x.fwd_s, tids, x.tp_fwd_s, x.tp_rs_fwd_s)
            self.first_seg_done[s] = True
        elif (
            self.hidden
            and (self.gather_every_mb or (self.gather_early and mb == 0))
            and (plan := self.gather_runs(s, "F", mb, ch, False)) is not None
        ):
            tids = self.lower_gather_runs(s, "F", mb, c, ch, plan, deps)
        if self.aligned_gather and mb == 0 and c + 1 < self.V:
            self.gather_launch[s][c + 1] = list(deps[:1])  # chunk c + 1's: as chunk c starts
        after = self.gather_deps(s, c) if self.aligned_gather and mb == 0 else None
        for si, seg in enumerate(() if tids else ch.segments):
            sd = list(deps)
            dur = seg.fwd_s
            if self.gather_every_mb or (self.gather_early and mb == 0):
                ag = self.gather(s, ch, si, f"AG F{mb}.{k}.{si}", after)
                sd.append(ag)
                if self.first_seg_done[s]:  # the next unit's gather runs under this one
                    dur = self.slowed(dur, self.comm_dur[ag])
            tids = self.segment(s, "F", mb, c, dur, sd, seg.tp_fwd_s, seg.tp_rs_fwd_s)
            tids = self.expert_context(s, "F", mb, c, seg, tids)
            self.first_seg_done[s] = True
            deps = tids
        if self.gather_early and mb == 0:
            self.gathers_left[s] -= 1
        tids = self.offload_wait(s, "F", mb, c, tids)
        tid = self.join(s, tids)
        held = self.held_bwd.pop(s, None)
        if held is not None:  # ep_overlap: the paired backward's gradient leaves with the pair
            prv, nbytes, b_mb, b_k = held
            self.b_out[(b_mb, b_k)] = self.send(s, prv, nbytes, [tid], "send_bwd", b_mb, b_k)
        self._forward_end(s, mb, k, tid, ch)

    def _single_op(
        self,
        s: int,
        phase: str,
        mb: int,
        c: int,
        deps: list[int],
        dur: float,
        tp_s: float,
        rs_s: float = 0.0,
    ) -> list[int]:
        """Operation ``phase`` of micro-batch ``mb`` through chunk ``c`` of stage ``s``, a
        ``plain_single`` chunk (``forward`` / ``backward``'s short path), after ``deps``: one
        :meth:`plain_op` task where operation tasks are on and it gives one, else what
        :meth:`segment` emits for the chunk's segment (``dur``, ``tp_s`` and ``rs_s``
        seconds, as there). Returns the task ids the operation ends with."""
        tid = self.plain_op(s, phase, mb, c, deps) if self.op_tasks else -1
        return [tid] if tid >= 0 else self.segment(s, phase, mb, c, dur, deps, tp_s, rs_s)

    def _forward_end(self, s: int, mb: int, k: int, tid: int, ch: Chunk) -> None:
        """A forward that ends at task ``tid`` (its held backward send, if any, made):
        stage ``s``'s last compute, the forward's end, and its activation (``ch.out_bytes``)
        sent to the next stage unless it is the last chunk."""
        self.last_compute[s] = tid
        self.f_done[(mb, k)] = tid
        if k < self.K - 1:
            self.f_out[(mb, k)] = (
                self.send(s, (k + 1) % self.P, ch.out_bytes, [tid], "send_fwd", mb, k)
                if self.P > 1
                else tid
            )

    def _offload_stall(self) -> tuple[float, float]:
        """``(forward, backward)`` seconds a micro-batch waits for its activation offload
        copies (:attr:`Recipe.activation_offload_layers`, pipeline-free: one stage;
        :func:`~perfmodel.parallel.offload.offload_stalls_s` over the stack's blocks, their
        mean times standing for each): each block's saved activations
        (:func:`~perfmodel.parallel.stage_memory.offloaded_activation_bytes` of one block) over
        the host link of the stage's GPU while every GPU on its CPU copies at once."""
        from perfmodel.parallel.offload import offload_stalls_s
        from perfmodel.parallel.stage_memory import block_count, offloaded_activation_bytes
        from perfmodel.workload.layers import runs_sum

        n = self.rc.activation_offload_layers
        if not n or self.P != 1:
            return 0.0, 0.0
        layers = self.wl.layers
        total = block_count(layers)
        act_b = self.costs.precision.activation_bytes
        one = offloaded_activation_bytes(layers, 1, act_b, self.rc.fp8_saves_fp8_inputs)
        cpu = self.costs.cpu_of(self.gpu[0])
        pairs = [(g, cpu) for g in self.pl.gpus if self.costs.cpu_of(g) == cpu]
        link_s = self.costs.transfers_time(pairs, one)

        def block_s(part: slice) -> Callable[[LayerCost], float]:
            return lambda la: sum(self.costs.layer_time(la)[part]) if la.block is not None else 0.0

        # the mean block over every block of the stack (copies counted), as the bytes above
        fwd = runs_sum(layers, block_s(slice(0, 1))) / total
        bwd = runs_sum(layers, block_s(slice(1, 3))) / total
        return offload_stalls_s(total, n, fwd, bwd, link_s)

    def offload_wait(self, s: int, phase: str, mb: int, c: int, tids: list[int]) -> list[int]:
        """The compute stream's wait for the activation offload copies of micro-batch ``mb``
        in ``phase`` (:meth:`_offload_stall`), after the chunk's compute; none where the
        copies hide."""
        stall = self.offload_stall[0 if phase == "F" else 1]
        if stall <= 0:
            return tids
        tid = self.b.add(
            TASK_HOST,
            self.gpu[s],
            "d2h" if phase == "F" else "h2d",
            stall,
            [self.join(s, tids)],
            label=f"activation offload wait {phase}{mb}",
            microbatch=mb,
            chunk=c * self.P + s,
        )
        return [tid]

    def gather_deps(self, s: int, c: int) -> list[int]:
        """What chunk ``c``'s parameter all-gathers (all its buckets at once) wait on under an
        interleaved schedule with Megatron-Core's ``overlap_param_gather``: chunks 0 and 1 are
        launched at the start of the step's forward-backward, chunk ``c >= 2`` when the stage
        starts the first micro-batch of chunk ``c - 1``, a whole chunk round before it is
        needed (``forward_backward_pipelining_with_interleaving`` calls
        ``config.param_sync_func[c]``, each chunk's ``DistributedDataParallel.start_param_sync``
        over all its bucket groups, Megatron-LM core_v0.9.0 ``schedules.py`` and
        ``training.py``; ``--align-param-gather`` is on by default and NeMo 1.0's distributed
        Adam sets the same ``param_sync_func``). Megatron launches it ``rank`` virtual
        micro-batches earlier still on pipeline rank ``rank``; stage 0's launch point is taken
        for every stage (a later launch: the more conservative)."""
        if c < 2:
            return [self.host_tid] if self.host_tid >= 0 else []
        return [t for t in self.gather_launch[s].get(c, []) if t >= 0]

    def backward(self, s: int, mb: int, c: int) -> None:
        """Backward (with recomputation) of micro-batch ``mb`` through chunk ``c`` of stage
        ``s``, segment by segment in reverse; gradient buckets are reduced as they fill (last
        micro-batch, or every micro-batch from ZeRO-2 on); the input gradient is sent back."""
        P = self.P
        k = c * P + s
        ch = self.chunks[k]
        deps = [self.last_compute[s], self.f_done[(mb, k)]]
        if k < self.K - 1:
            deps.append(self.b_out[(mb, k + 1)])
        final_mb = mb == self.m - 1
        reduce_every_mb = self.reduce_every_mb
        seg1 = self.plain_single[k]
        if seg1 is not None:  # what the general path below does for such a chunk, directly
            tids = self._single_op(
                s, "B", mb, c, deps, seg1.bwd_s + seg1.recompute_s, seg1.tp_bwd_s
            )
            if self.dp_on and self.overlap and (final_mb or reduce_every_mb):
                self.reduce_gradients(s, seg1, tids, f"grad {k}.0")
            self._backward_end(s, mb, k, tids[0] if len(tids) == 1 else self.join(s, tids))
            return
        prev_grad = 0.0  # duration of the previous segment's gradient collective (in flight)
        tids: list[int] = []
        if self.coarsenable(s, "B", mb, ch):
            tid = self.plain_op(s, "B", mb, c, deps) if self.op_tasks else -1
            if tid >= 0 and self._op_exit[1]:  # what the rest below does for it, directly
                self._backward_end(s, mb, k, tid)
                return
            if tid >= 0:
                tids = [tid]
            else:
                b_s, tp_s = self.chunk_sums(k)[2:]
                tids = self.segment(s, "B", mb, c, b_s, deps, tp_s)
        elif (
            self.hidden
            and self.overlap
            and (final_mb or reduce_every_mb)
            and (hid := self.hidden_backward(s, mb, c, ch, final_mb)) is not None
        ):
            tids = self.lower_hidden_backward(s, mb, c, hid, deps)
        elif (
            self.hidden
            and self.gather_every_mb
            and (plan := self.gather_runs(s, "B", mb, ch, final_mb)) is not None
        ):
            tids = self.lower_gather_runs(s, "B", mb, c, ch, plan, deps)
        elif (runs := self.coarse_runs(s, "B", mb, ch)) is not None:
            tids = deps
            for run in reversed(runs):  # backward order; a refused segment as in the loop
                if type(run) is tuple:
                    tids = self.segment(s, "B", mb, c, run[2], tids, run[3])
                else:
                    x: Segment = run  # type: ignore[assignment]
                    tids = self.segment(s, "B", mb, c, x.bwd_s + x.recompute_s, tids, x.tp_bwd_s)
        for si, seg in enumerate(() if tids else reversed(ch.segments)):
            sd = list(deps)
            dur = seg.bwd_s + seg.recompute_s
            if self.gather_every_mb:
                ag = self.gather(s, ch, len(ch.segments) - 1 - si, f"AG B{mb}.{k}.{si}")
                sd.append(ag)
                dur = self.slowed(dur, self.comm_dur[ag] + prev_grad)
            elif self.overlap and final_mb and si > 0:
                dur = self.slowed(dur, prev_grad)
            tids = self.segment(s, "B", mb, c, dur, sd, seg.tp_bwd_s)
            tids = self.expert_context(s, "B", mb, c, seg, tids)
            deps = tids
            prev_grad = 0.0
            if self.dp_on and self.overlap and (final_mb or reduce_every_mb):
                prev_grad = self.reduce_gradients(s, seg, tids, f"grad {k}.{si}")
        tids = self.offload_wait(s, "B", mb, c, tids)
        tid = self.join(s, tids)
        if k > 0 and P > 1 and self.combined and ("B", mb, c) not in self.unpaired(s):
            self.last_compute[s] = tid
            # the gradient of the chunk's input, sent after the partner forward (forward())
            self.held_bwd[s] = ((k - 1) % P, self.chunks[k - 1].out_bytes, mb, k)
            return
        self._backward_end(s, mb, k, tid)

    def _backward_end(self, s: int, mb: int, k: int, tid: int) -> None:
        """A backward that ends at task ``tid`` with its input gradient not held (combined
        1F1B holds a paired one): stage ``s``'s last compute, and the gradient of chunk
        ``k``'s input (the previous chunk's output tensor, ``out_bytes``) sent to the
        previous stage unless ``k`` is the first chunk."""
        self.last_compute[s] = tid
        if k > 0:
            P = self.P
            nbytes = self.chunks[k - 1].out_bytes
            self.b_out[(mb, k)] = (
                self.send(s, (k - 1) % P, nbytes, [tid], "send_bwd", mb, k) if P > 1 else tid
            )

    def run_schedule(self) -> None:
        """Emit every stage's operations in a dependency-respecting global order (round robin
        over stages: an operation waits until the chunk it depends on has been emitted), each
        through :meth:`forward` / :meth:`backward`; with operation tasks, the speed door
        :meth:`run_plain_schedule` instead (the same round robin, written again with the plain,
        replayed and gather-chain operations inline: the same tasks). This loop is the
        reference ``tests/parallel/test_plain_loop.py`` compares that one with
        (``PLAIN_LOOP = False``), so keep the two apart."""
        if self.op_tasks and self.PLAIN_LOOP:
            self.run_plain_schedule()
            return
        P, K, ops = self.P, self.K, self.ops
        f_out, b_out, forward, backward = self.f_out, self.b_out, self.forward, self.backward
        pos = [0] * P
        for s, o, i, n in round_robin(ops, pos):
            while i < n:
                phase, mb, c = o[i]
                k = c * P + s
                if phase == "F":
                    if k > 0 and (mb, k - 1) not in f_out:
                        break
                    forward(s, mb, c)
                else:
                    if k < K - 1 and (mb, k + 1) not in b_out:
                        break
                    backward(s, mb, c)
                i += 1
            pos[s] = i

    def kernel_issue(self) -> None:
        """Eager stacks: each stage's host thread issues every kernel of the step in order,
        ahead of the GPU (asynchronous launches); the step cannot end before the last one is
        issued."""
        issue = self.issue_times()
        for s in range(self.P):
            if issue[s] > 0:
                pre = [self.host_tid] if self.host_tid >= 0 and s == 0 else []
                if self.lead_tid[s] >= 0:  # the lead is the issue's first part
                    pre = [self.lead_tid[s]]
                self.issue_tid[s] = self.b.add(
                    TASK_HOST,
                    self.gpu[s],
                    "host",
                    issue[s] - self.lead_s[s],
                    pre,
                    label="kernel issue (eager host)",
                )

    def issue_times(self) -> list[float]:
        """Each stage's host issue time of the step's kernels (``m_step`` micro-batches, also
        in a short schedule: see :meth:`periodic_count`); computed once per lowering."""
        if self._issue is None:
            self._issue = issue_times(
                self.costs,
                self.chunks,
                self.P,
                self.V,
                self.m_step,
                self.plan.recompute,
                self.rc.selective_recompute.share_for(self.wl),
            )
        return self._issue

    def notes(self) -> None:
        b = self.b
        if self.gather_every_mb:
            b.notes.append(
                "ZeRO-3/FSDP: one all-gather per block in forward and backward on its own stream, "
                "prefetch depth 1"
            )
        if self.gather_early and self.rc.gather_per_step:
            b.notes.append(
                "FSDP2 under torch.distributed.pipelining: each unit all-gathered once a step, "
                "in its chunk's first forward (reshard_after_forward off with pipelining), its "
                "gradients reduce-scattered after the stage's last backward"
            )
        elif self.gather_early:
            b.notes.append(
                "parameter all-gather of the previous step's update overlaps the first forward "
                "(one gather per bucket, as Megatron-Core overlap_param_gather)"
            )
        self.expert_context_notes()
        if self.K > 1:
            b.notes.append(
                f"pipeline: {self.P} stages x {self.V} chunks, {self.m_step} micro-batches, one task "
                "per micro-batch and chunk"
            )

    def memory(self) -> tuple[PlanMemory, ...]:
        """Per-stage memory: the schedule's peak in-flight micro-batches, the recipe's model
        state, the gradient buckets' buffers and the tied copy."""
        P, V, inp = self.P, self.V, self.inp
        buf = self.rc.bucket_bytes or 0.0
        gps = self.rc.gather_per_step  # stage_memory reads moments with chunks or FSDP2 windows
        mom = P > 1 and (V > 1 or gps)
        out = []
        for s in range(P):
            chunks = [self.chunks[c * P + s] for c in range(V)]
            out.append(
                stage_memory(
                    chunks,
                    plan=self.plan,
                    costs=self.costs,
                    optimizer=inp.optimizer,
                    in_flight=stage_peak_in_flight(self.plan.schedule, P, self.m, s, V),
                    capacity_bytes=inp.capacity_bytes,
                    comm_buffer_bytes=buf if self.dp_on else 0.0,
                    buffer_bytes=stage_buffer_bytes(
                        self.wl, [la for c in chunks for la in c.layers]
                    )
                    if self.wl.buffers
                    else 0.0,
                    recipe=self.rc,
                    tied_params=self.tied[s],
                    moments=chunk_moments(self.plan.schedule, P, self.m, s, V, gps)
                    if mom
                    else None,
                    microbatches=self.m,
                )
            )
        return tuple(out)

    def graph(self) -> TaskGraph:
        """The step's task graph (``self.m`` micro-batches), in the order of the module
        docstring; call once per lowering."""
        self.host_step()
        self.run_schedule()
        self.kernel_issue()
        self.tied_embedding()
        for s in range(self.P):
            self.finish_stage(s)
        self.notes()
        if self.owt:
            self.b.notes.append(
                "one-weird-trick: convolutions data parallel (their gradients all-reduced), "
                "fully-connected layers split by output features over all GPUs (no gradient "
                "all-reduce)"
            )
        return self.b.build(multiplicity=self.pl.dp * self.pl.tp)

    def lower(self) -> LoweredStep:
        """The whole step: its graph, memory and FLOP. The graph is a
        :class:`~perfmodel.parallel.periodic.PeriodicGraph` where :meth:`periodic_count`
        allows (lowered when first read), else, where a coarse lowering merged segments
        (:meth:`coarsenable`), a :class:`~perfmodel.parallel.periodic.LazyGraph` whose tasks
        are the fine graph (lowered when first read) and whose coarse graph the executors run;
        else the graph itself. The lazy lowerings are closures over this step's inputs, chunks,
        kernel issue times and chunk sums (:meth:`shared_sums`) only."""
        k = self.periodic_count()
        plan, pl = self.plan, self.pl
        mult = pl.dp * pl.tp
        inp, costs, owt, chunks, issue = self.inp, self.costs, self.owt, self.chunks, None
        m, coarse, hidden, sums = self.m, self.coarse, self.hidden, self.shared_sums()

        def relower(
            microbatches: int, coarse: bool, hidden: bool = False, fine: bool = False
        ) -> tuple[TaskGraph, bool]:
            """This step's graph with ``microbatches`` micro-batches (same chunks, notes, kernel
            issue and chunk sums), and whether a coarse lowering merged anything (``hidden``: also
            the analytic graph's summarised reductions; ``fine``: a short schedule's gathers
            without chains, :meth:`PeriodicGraph.fine_short`)."""
            low = PipelineLowering(
                inp,
                costs,
                one_weird_trick=owt,
                microbatches=microbatches,
                chunks=chunks,
                coarse=coarse,
                hidden=hidden,
            )
            low._issue = issue
            if sums is not None:
                low._sums = sums
            low.fine_gathers = fine
            return low.graph(), low.coarsened > 0 or low.hidden_merged > 0 or low.op_merged > 0

        graph: TaskGraph
        if k:
            issue = self.issue_times()
            graph = PeriodicGraph(
                lambda: relower(m, False)[0],
                lambda n: relower(n, coarse, hidden)[0],  # read by the analytic executor only
                k,
                m,
                multiplicity=mult,
                coarse=(lambda: relower(m, True)) if coarse else None,
                unit=self.period_unit,
                analytic=(lambda: relower(m, True, True)) if hidden else None,
                fine_short=lambda n: relower(n, coarse, hidden, fine=True)[0],
            )
        else:
            graph = self.graph()
            if self.hidden_merged or self.op_merged:  # the analytic graph; the replay's is
                # lowered when asked
                issue = self.issue_times()
                analytic_graph = graph
                graph = LazyGraph(
                    lambda: relower(m, False)[0],
                    lambda: relower(m, True),
                    multiplicity=mult,
                    analytic=lambda: (analytic_graph, True),
                )
            elif self.coarsened:
                issue = self.issue_times()
                coarse_graph = graph
                graph = LazyGraph(
                    lambda: relower(m, False)[0], lambda: (coarse_graph, True), multiplicity=mult
                )
        return LoweredStep(
            graph=graph,
            memory=self.memory(),
            samples_per_step=self.inp.batch_per_replica * plan.dp,
            # each of the dp x cp ranks of a tensor-parallel slot holds 1/cp of a replica's tokens
            model_flop_per_step=self.wl.total_flop * pl.tp * self.m_step * plan.grad_replicas,
            num_gpus=plan.num_gpus,
            stage_layers=tuple(
                tuple(c.layers for k, c in enumerate(self.chunks) if k % self.P == s)
                for s in range(self.P)
            ),
            microbatches=self.m_step,
            stage_devices=tuple(self.gpu),
        )


def lower_pipeline(
    inp: StepInputs,
    costs: Costs,
    *,
    one_weird_trick: bool = False,
    coarse: bool = True,
    hidden: bool = True,
) -> LoweredStep:
    """Lower an ``allreduce``-mode plan (see :class:`PipelineLowering`); ``coarse=False``: the
    executors run the fine graph too (one task pair per segment everywhere); ``hidden=False``:
    no analytic graph with summarised collectives (a step for the SimPy replay)."""
    return PipelineLowering(
        inp, costs, one_weird_trick=one_weird_trick, coarse=coarse, hidden=hidden
    ).lower()


# ---------------------------------------------------------------------- pure rules the lowering
# and the plan screen share (PipelineLowering.slowed, tp_overlapped, host_step_s wrap them)


def slowed(preset: SoftwarePreset, dur: float, comm_s: float) -> float:
    """Compute ``dur`` seconds stretched by ``preset``'s overlap slowdown for the ``comm_s``
    seconds of communication that run under it: ``dur + overlap_compute_slowdown x min(dur,
    comm_s)`` (``comm_s`` below 0 counts as 0; the constant's source:
    :attr:`~perfmodel.parallel.software_preset.SoftwarePreset.overlap_compute_slowdown`).

    >>> from dataclasses import replace
    >>> from perfmodel.parallel.software import get_preset
    >>> p = replace(get_preset("pytorch-ddp"), overlap_compute_slowdown=0.25)
    >>> slowed(p, 2.0, 1.0), slowed(p, 1.0, 4.0), slowed(p, 1.0, -1.0)
    (2.25, 1.25, 1.0)
    """
    return dur + preset.overlap_compute_slowdown * min(dur, max(comm_s, 0.0))


def tp_overlapped(
    preset: SoftwarePreset, sm_count: int, phase: str, dur: float, tp_s: float, rs_s: float = 0.0
) -> tuple[float, float, float]:
    """``(compute, overlapped TP, exposed TP tail)`` seconds of a segment (``phase`` "F" or
    "B") whose ``tp_s`` of tensor-parallel communication overlaps its ``dur`` of compute
    (recipe ``tp_comm`` overlapped) on a GPU of ``sm_count`` SMs (0: unknown). With
    ``preset``'s :class:`~perfmodel.parallel.software.TPOverlap` (TE userbuffers) and a known
    SM count: the tail share of the communication waits for the GEMMs, the compute is slowed by
    the SMs the communication kernels hold for the overlapped rest (at most the compute), and
    the ``rs_s`` forward seconds of the reduce-scattered GEMMs run on the SMs their pipelined
    overlap leaves them for their whole length
    (:meth:`~perfmodel.parallel.software.TPOverlap.margin_slowdown`); otherwise the compute is
    :func:`slowed` by all of it and nothing is exposed."""
    cfg = preset.tp_overlap
    if cfg is None or not sm_count:
        return slowed(preset, dur, tp_s), tp_s, 0.0
    tail = cfg.exposed(phase) * tp_s
    under = tp_s - tail
    margin = cfg.margin_slowdown(phase, sm_count) * min(max(rs_s, 0.0), dur)
    return dur + cfg.slowdown(phase, sm_count) * min(dur, under) + margin, under, tail


def host_step_s(preset: SoftwarePreset, dp: int, batch_per_replica: int) -> float:
    """Seconds of the host's work before a step's compute (framework loop, batch split; 0:
    none): ``preset.host_step_s``, plus ``host_split_per_sample_s x (dp - 1) x
    batch_per_replica`` where ``dp > 1`` replicas split the batch (the constants' sources:
    :class:`~perfmodel.parallel.software_preset.SoftwarePreset`).

    >>> from dataclasses import replace
    >>> from perfmodel.parallel.software import get_preset
    >>> p = replace(get_preset("pytorch-ddp"), host_step_s=0.5, host_split_per_sample_s=0.25)
    >>> host_step_s(p, 1, 8), host_step_s(p, 3, 2)
    (0.5, 1.5)
    """
    host_s = preset.host_step_s
    if dp > 1:
        host_s += preset.host_split_per_sample_s * (dp - 1) * batch_per_replica
    return host_s
