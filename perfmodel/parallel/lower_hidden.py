"""The lowering's hidden collectives, in the analytic list schedule's graph only
(:meth:`~perfmodel.parallel.periodic.LazyGraph.analytic`): doors
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits and calls.

* **Hidden reductions** (:meth:`HiddenCollectives.hidden_backward`): a bucketed backward's
  gradient reductions as a lead and one reduction (max-plus, :func:`_lead`).
* **Hidden gathers** (:meth:`HiddenCollectives.gather_runs`): runs of segments whose parameter
  gathers hide under the compute as two computes; where the TP collectives follow their
  computes on the compute stream, the run's start, TP and computes as one operation task
  whose computes' ends later gathers wait on (:meth:`HiddenCollectives._run_task`,
  :func:`~perfmodel.parallel.taskgraph.piece_end`; ``tests/sim/test_run_tasks.py``).
* **Gather chains** (:class:`~perfmodel.parallel.lower_chains.GatherChains`, inherited): an
  operation of such segments, each an operation task or a run, as one chain task.

Each gives the answer the plain lowering gives (``tests/parallel/test_hidden_collectives.py``
compares them). The methods read the lowering's state (``self.plan``, ``self.P``,
``self.chunks``...), set by ``PipelineLowering.__init__``, and a chunk's expert/context
refusal through ``self._exchanges`` (:meth:`.LoweringShortcuts._exchanges`); the other
shortcuts are in :mod:`perfmodel.parallel.lower_shortcuts`.
"""

from __future__ import annotations

from perfmodel.ops import ALLGATHER
from perfmodel.parallel import periodic
from perfmodel.parallel.lower_chains import (
    GatherChains,
    GatherPlan,
    segment_then,
)
from perfmodel.parallel.lowering import Chunk, Segment
from perfmodel.parallel.recipe import ParamSync
from perfmodel.parallel.taskgraph import (
    COMM_ZERO,
    HEAD,
    TASK_COLLECTIVE,
    TASK_COMPUTE,
    CommSpec,
    piece_end,
)

#: A bucketed backward with its gradient reductions summarised
#: (:meth:`HiddenCollectives.hidden_backward`): compute seconds, TP seconds, the lead's seconds
#: (``kappa``), the reductions' summed seconds (fusion waits included) and bytes.
HiddenBackward = tuple[float, float, float, float, float]


def _lead(on_stream: list[float], red: list[float]) -> tuple[float, float]:
    """``(kappa, sum R)`` of :meth:`HiddenCollectives.hidden_backward`: segments of
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
    for d, tail in zip(on_stream, tails, strict=True):
        f += d
        x = f + tail
        if x > best:  # max(best, x): the first of equal values kept, no builtin call
            best = x
    # clamped to [0, sum D]: the difference rounds to an ulp of sum R beyond either bound
    return min(max(0.0, best - suffix), f), suffix


#: A segment of a :data:`GatherPlan` outside its runs, as :meth:`HiddenCollectives.
#: lower_gather_runs` emits it: gather seconds and :class:`CommSpec`, compute seconds, the
#: operation task's ``then_s`` (``None``: a plain compute task), TP seconds and exposed tail,
#: reduction seconds and :class:`CommSpec`, the gather's label after its phase and micro-batch,
#: the reduction's label.
FineSegment = tuple[
    float, CommSpec, float, tuple[float] | None, float, float, float, CommSpec | None, str, str
]


class HiddenCollectives(GatherChains):
    """Hidden gradient reductions and parameter gathers of a
    :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (see the module docstring);
    their gather chains are :class:`~perfmodel.parallel.lower_chains.GatherChains`'."""

    #: Whether a hidden gather run with its TP on the compute stream is one operation task
    #: (:meth:`_run_task`) where operation tasks are on (tests compare both ways).
    RUN_TASKS = True

    #: Whether a chunk read off an earlier one takes the earlier chunk's hidden-reduction
    #: summary where its stage prices every row alike (:meth:`_hidden_op`; tests compare both
    #: ways).
    SAME_ROWS = True

    #: Whether a chunk read off an earlier one takes the earlier chunk's gather plan rows where
    #: its stage prices every data-parallel collective of that plan alike
    #: (:meth:`_gathers_like`; tests compare both ways).
    SAME_GATHERS = True

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
        if (
            not self.hidden
            or self.gather_every_mb
            or self.hsdp
            or not (self.dp_on and self.overlap)
        ):
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
        whether it is the last micro-batch: the fine loop's durations, summed.

        Each segment's durations (:meth:`_hidden_row`) are a function of the stage, the
        segment's fields it reads and the reduction before it (the slowdown's input in the
        last micro-batch), so they are kept per lowering by those values (``_rows``): the
        bucket segments of a stack repeat with every block (Megatron-Core's and PyTorch DDP's
        buckets of a GPT-3 175B stage: ~40-190 segments, a few distinct), and the same
        floats are summed in the same order.

        A chunk read off an earlier one (:attr:`~perfmodel.parallel.lowering.Chunk.values_of`:
        the same segments at other layer ids; the middle stages of a
        pipeline) takes the summary of the
        first of its class summed (``_hidden_seen``: stage ``s0``, the reduced byte counts its
        rows priced, the summary) where its stage prices each of those reductions as ``s0``
        does (:meth:`_same_rows`), instead of walking its segments. Exact by induction over
        the loop: a row (:meth:`_hidden_row`) reads the stage only through :meth:`dp_time` of
        its reduced bytes, the rest a function of the segment's fields and the reduction
        before; both walks read the same fields in the same order, the first reduction before
        is ``None`` in both, and where the rows so far are equal so is the next row's input
        (the reduction before), hence its row (its reduction's seconds compared), so every sum
        adds the same floats in the same order and the refusal (an empty row, whatever the
        stage) falls at the same segment; where a reduction differs the walk is done in full."""
        cls = (id(ch.values_of or ch), final_mb)
        seen = self._hidden_seen.get(cls)
        if seen is not None and self.SAME_ROWS and self._same_rows(s, seen[0], seen[1]):
            return seen[2]  # type: ignore[no-any-return]
        sizes: dict[float, None] = {}
        out = self._hidden_walk(s, ch, final_mb, sizes)
        if seen is None:
            self._hidden_seen[cls] = (s, tuple(sizes), out)
        return out

    def _same_rows(self, s: int, s0: int, sizes: tuple[float, ...]) -> bool:
        """Whether stage ``s`` prices the reduction of each byte count of ``sizes``
        (:meth:`_hidden_walk`'s) as stage ``s0`` does (:meth:`dp_time`)."""
        op, dp_time = self._grad_op(), self.dp_time
        return all(dp_time(s, op, b) == dp_time(s0, op, b) for b in sizes)

    def _hidden_walk(
        self, s: int, ch: Chunk, final_mb: bool, sizes: dict[float, None]
    ) -> HiddenBackward | None:
        """:meth:`_hidden_op`'s walk over ``ch``'s segments; the reduced byte counts of the
        rows it meets are keys of ``sizes``, in that order."""
        segs = ch.segments
        if len(segs) < 2 or self._exchanges(ch):
            return None
        if self.tp_overlap and self.tp_stream == "compute":
            return None  # an "overlapped" collective queued behind its compute: not modelled
        rows = self._rows
        met: dict[tuple[object, ...], tuple] = {}  # this walk's rows: one hash a segment
        comp = tp_total = nbytes_total = 0.0
        on_stream: list[float] = []  # D_j, backward order
        red: list[float] = []  # R_j
        prev: float | None = None  # the reduction before (None: the compute is not slowed)
        for seg in reversed(segs):  # as the fine loop of backward()
            key = ("hidden", s, seg.bwd_s, seg.recompute_s, seg.tp_bwd_s, seg.params,
                   seg.expert_params, prev)  # fmt: skip
            row = met.get(key)
            if row is None:
                row = rows.get(key)
                if row is None:
                    row = rows[key] = self._hidden_row(s, seg, prev)
                met[key] = row
                if row:
                    sizes[row[3]] = None
            if not row:
                return None
            dur, tp_s, d, nbytes, r = row
            comp += dur
            if tp_s > 0:
                tp_total += tp_s
            on_stream.append(d)
            nbytes_total += nbytes
            red.append(r)
            if final_mb:
                prev = r
        lead, total = _lead(on_stream, red)
        return (comp, tp_total, lead, total, nbytes_total)

    def _hidden_row(
        self, s: int, seg: Segment, prev: float | None
    ) -> tuple[float, float, float, float, float] | tuple[()]:
        """One segment of :meth:`_hidden_op` on stage ``s``, after a reduction of ``prev``
        seconds that slows its compute (``None``: none): ``(compute, TP seconds, seconds on
        the compute stream, reduced bytes, reduction seconds with the fusion wait)``, or
        ``()`` where its TP collective refuses the summary."""
        dur = seg.bwd_s + seg.recompute_s
        if prev is not None:
            dur = self.slowed(dur, prev)
        tp_s = seg.tp_bwd_s
        d = dur
        if tp_s > 0:
            if self.tp_overlap:
                dur, tp_s, tail = self.tp_overlapped("B", dur, tp_s)
                if tail > 0 or tp_s > dur:
                    return ()
                d = dur
            elif self.tp_stream == "compute":
                d = dur + tp_s
            else:
                return ()  # after its compute on a stream of its own: exposed as "tp"
        nbytes = self.reduced_params(seg.params, seg.expert_params) * self.rc.grad_reduce_bytes
        r = self.dp_time(s, self._grad_op(), nbytes) + self.preset.fusion_wait_s
        return (dur, tp_s, d, nbytes, r)

    def lower_hidden_backward(
        self, s: int, mb: int, c: int, hid: HiddenBackward, deps: list[int]
    ) -> list[int]:
        """Emit :meth:`hidden_backward`'s tasks after ``deps``; returns the task ids the
        operation's end waits on (as :meth:`segment`'s)."""

        comp_s, tp_s, lead_s, red_s, nbytes = hid
        k = c * self.P + s
        add, gpu = self.b.add, self.gpu[s]
        label = f"B{mb}.c{c}" if self.V > 1 else f"B{mb}"
        # positional: label, microbatch, chunk
        a = add(TASK_COMPUTE, gpu, "compute", 0.0, deps, label, mb, k)  # starts at a
        tid = add(TASK_COMPUTE, gpu, "compute", comp_s, [a], label, mb, k)
        out = [tid]
        if tp_s > 0:
            if self.tp_overlap:  # beside the compute, within it
                out.append(add(TASK_COLLECTIVE, gpu, self.tp_stream, tp_s, [a], f"TP B{mb}", mb, k))
            else:  # after it on the compute stream
                out = [add(TASK_COLLECTIVE, gpu, self.tp_stream, tp_s, [tid], f"TP B{mb}", mb, k)]
        lead = add(TASK_COMPUTE, gpu, "grad-lead", lead_s, [a], f"grad lead {k}", mb, k)
        spec = self.dp_spec(s, self._grad_op(), nbytes)
        g = add(TASK_COLLECTIVE, gpu, self.rc.grad_comm.stream, red_s, [lead],
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
        if not (self.gather_every_mb or (phase == "F" and self.gather_early and mb == 0)):
            return None
        if not self.gather_every_mb and (
            self.aligned_gather or self.rc.param_sync is ParamSync.OWNER_BROADCAST
        ):
            return None
        reducing = (
            phase == "B" and self.dp_on and self.overlap and (final_mb or self.reduce_every_mb)
        )
        first = self.first_seg_done[s]
        key = (id(ch), phase, reducing, first)  # the last micro-batch's: through ``reducing``
        if key in self._gather_ops:
            hit = self._gather_ops[key]
        else:
            hit = self._gather_ops[key] = self._gather_plan(s, ch, phase, reducing, first)
        if hit is not None and hit[1]:
            self.hidden_merged += 1
        return hit

    def _gather_plan(
        self, s: int, ch: Chunk, phase: str, reducing: bool, first: bool
    ) -> GatherPlan | None:
        """The part of :meth:`gather_runs` that depends on the chunk, the phase and the
        stage's state (whether the operation reduces, whether the stage's first segment is
        done; the last micro-batch matters only through ``reducing``): per segment (operation
        order) its compute before and after the TP overlap's adjustment, TP seconds and
        reduction, and the runs. A chunk read off an earlier one of the same phase and stage
        state takes that plan's rows where :meth:`_gathers_like` allows (``_gather_seen``)."""
        cls = (id(ch.values_of or ch), phase, reducing, first)
        seen = self._gather_seen.get(cls)
        if seen is not None and self.SAME_GATHERS:
            like = self._gathers_like(s, *seen)
            if like is not None:
                return like
        plan = self._gather_walk(s, ch, phase, reducing, first)
        if seen is None and plan is not None:
            self._gather_seen[cls] = (s, plan)
        return plan

    def _gathers_like(self, s: int, s0: int, plan: GatherPlan) -> GatherPlan | None:
        """Stage ``s``'s :meth:`_gather_walk` of a chunk whose class stage ``s0`` walked into
        ``plan`` (the same segments at other layer ids:
        :attr:`~perfmodel.parallel.lowering.Chunk.values_of`; the same phase, reduction and
        first-segment state), where stage ``s`` prices each collective of ``plan``'s specs as
        ``s0`` did (:meth:`dp_time`); else ``None`` (walked in full).

        Exact: :meth:`_gather_row` reads the stage only through :meth:`dp_time` and
        :meth:`dp_spec` of its gather's and its reduction's bytes, which ``plan``'s specs hold
        (every distinct one compared here); the rest is a function of the segment's fields,
        the lowering's settings and the reduction before. By induction over the walk every
        row's input and so its row is ``s0``'s, hence the runs; the specs are the ones
        :meth:`_gather_row` asks :meth:`dp_spec` for on stage ``s`` (the same operation, bytes
        and kind over the stage's group), with the same TP tails, in the same places."""
        rows, runs, op, specs = plan
        mine: dict[int, tuple[CommSpec, CommSpec | None, float]] = {}
        dp_time, dp_spec = self.dp_time, self.dp_spec
        for t in specs:  # segments with one row key share one spec triple
            if id(t) in mine:
                continue
            g, r, tail = t
            for x in (g,) if r is None else (g, r):
                if dp_time(s, x.op, x.message_bytes) != dp_time(s0, x.op, x.message_bytes):
                    return None
            mine[id(t)] = (
                dp_spec(s, g.op, g.message_bytes, g.kind),
                None if r is None else dp_spec(s, r.op, r.message_bytes, r.kind),
                tail,
            )
        return rows, runs, op, tuple([mine[id(t)] for t in specs])

    def _gather_walk(
        self, s: int, ch: Chunk, phase: str, reducing: bool, first: bool
    ) -> GatherPlan | None:
        """:meth:`_gather_plan`'s walk over ``ch``'s segments on stage ``s``."""
        segs = ch.segments if phase == "F" else tuple(reversed(ch.segments))
        if len(segs) < 3 or self._exchanges(ch):
            return None
        on_compute = self.tp_stream == "compute"
        if self.tp_overlap and on_compute:
            return None
        fwd = phase == "F"
        rows: list[tuple[float, float, float, float, float, bool]] = []
        specs: list[tuple[CommSpec, CommSpec | None, float]] = []
        memo = self._rows
        prev = 0.0
        for si, seg in enumerate(segs):
            slow = first or si > 0  # forward: the gather slows the compute
            if fwd:
                key = ("F", s, seg.params, seg.fwd_s, seg.tp_fwd_s, seg.tp_rs_fwd_s, slow,
                       reducing)  # fmt: skip
            else:
                key = ("B", s, seg.params, seg.bwd_s, seg.recompute_s, seg.tp_bwd_s,
                       seg.expert_params, prev, reducing)  # fmt: skip
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = self._gather_row(s, seg, phase, slow, prev, reducing)
            row, spec, prev = hit
            rows.append(row)
            specs.append(spec)
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
        return tuple(rows), tuple(runs), self._grad_op(), tuple(specs)

    def _gather_row(
        self, s: int, seg: Segment, phase: str, slow: bool, prev: float, reducing: bool
    ) -> tuple[
        tuple[float, float, float, float, float, bool],
        tuple[CommSpec, CommSpec | None, float],
        float,
    ]:
        """One segment of :meth:`_gather_plan` on stage ``s`` (``phase``; forward: ``slow``,
        whether its gather slows its compute; backward: ``prev``, the previous segment's
        reduction that does too): its row, its specs and its reduction's seconds (0 without
        one), a function of those values and the segment's fields it reads, so kept per
        lowering by them (``_rows``: a stack's segments repeat with every block)."""
        wait = self.preset.fusion_wait_s
        gather_bytes = seg.params * self.rc.gather_bytes  # parameters x bytes per parameter
        g = self.dp_time(s, ALLGATHER, gather_bytes) + wait
        g_spec = self.dp_spec(s, ALLGATHER, gather_bytes, COMM_ZERO)
        if phase == "F":
            dur = self.slowed(seg.fwd_s, g) if slow else seg.fwd_s
            tp_s, rs_s = seg.tp_fwd_s, seg.tp_rs_fwd_s
        else:  # ZeRO-3/FSDP: the gather and the previous segment's reduction under it
            dur = self.slowed(seg.bwd_s + seg.recompute_s, g + prev)
            tp_s, rs_s = seg.tp_bwd_s, 0.0
        raw, c_s, ok, tail = dur, dur, True, 0.0
        if tp_s > 0:
            if self.tp_overlap:
                c_s, tp_s, tail = self.tp_overlapped(phase, dur, tp_s, rs_s)
                ok = tail <= 0 and tp_s <= c_s
            elif self.tp_stream != "compute":
                ok = False
        red = 0.0
        r_spec = None
        if reducing:
            op = self._grad_op()
            nbytes = self.reduced_params(seg.params, seg.expert_params) * self.rc.grad_reduce_bytes
            red = self.dp_time(s, op, nbytes) + wait
            r_spec = self.dp_spec(s, op, nbytes)
        return (raw, c_s, max(tp_s, 0.0), g, red, ok), (g_spec, r_spec, tail), red

    def lower_gather_runs(
        self, s: int, phase: str, mb: int, c: int, ch: Chunk, plan: GatherPlan, deps: list[int]
    ) -> list[int]:
        """Emit :meth:`gather_runs`' operation after ``deps``: segments outside the runs as
        the fine loop of ``forward`` / ``backward`` emits them (with the durations it
        computes), each run as that method describes; returns the ids the operation's end
        waits on."""

        k = c * self.P + s
        hist = self.gather_hist[s]
        keep_hist = self.gather_every_mb or self.gathers_left[s] > 0
        rows, runs, _, _ = plan
        # ZeRO-3/FSDP, and Megatron-Core's first forward with overlapped ZeRO-1/2 gathers
        # (gather_runs' other case: not aligned_gather, no owner broadcasts, no reduction in
        # forward): the same recurrence, anchored on the same gather history; in a periodic
        # extension's short schedule (m < m_step) too, unless lowered fine for its check
        # (periodic.PERIODIC_CHAINS, fine_gathers: PeriodicGraph.fine_short)
        chain, stop = None, len(ch.segments)  # the segments emitted below: 0 .. stop - 1
        may_chain = self.gather_every_mb or self.m == self.m_step or periodic.PERIODIC_CHAINS
        if self.CHAINS and self.op_tasks and may_chain and not self.fine_gathers:
            chain = self._chain_static(plan, k, ch, phase)
            if chain is not None:  # one gather chain (_chain_static's template)
                return self._emit_chain(s, phase, mb, c, chain, deps)
            if keep_hist and self.CHAINS_AFTER:
                after = self._chain_after(plan, k, ch, phase)
                if after is not None:  # the refused segments below, then the chain
                    stop, chain = after
        segs = ch.segments if phase == "F" else tuple(reversed(ch.segments))
        add, gpu = self.b.add, self.gpu[s]
        label = f"{phase}{mb}.c{c}" if self.V > 1 else f"{phase}{mb}"
        ag_label = f"AG {phase}{mb}"
        reducing = any(r[4] for r in rows)
        grad_stream, g_stream = self.rc.grad_comm.stream, self.rc.param_gather.stream
        fine = self._fine_segments(plan, k, None if chain is None else stop)
        starts = {i0: i1 for i0, i1 in runs}
        tids = deps
        si = 0
        comm_dur = self.comm_dur
        busy = self._cs_max[s] if self.op_tasks else None  # compute_emitted's, inline
        merged = 0
        while si < stop:
            i1 = starts.get(si)
            if i1 is None:  # as the fine loop: gather(), segment(), reduce_gradients()
                g_s, g_spec, c_s, then, tp_s, tail, red_s, r_spec, ag_suffix, g_label = fine[si]
                ag = add(TASK_COLLECTIVE, gpu, g_stream, g_s, hist[-2:-1],
                         ag_label + ag_suffix, -1, -1, g_spec)  # fmt: skip
                comm_dur[ag] = g_s
                sd = [*tids, ag]
                tid = add(TASK_COMPUTE, gpu, "compute", c_s, sd, label, mb, k, None, then)
                if then is not None:  # one operation task, its compute's end the anchor
                    if c_s > busy[0]:  # type: ignore[index]
                        busy[0] = c_s  # type: ignore[index]
                    if c_s > busy[1]:  # type: ignore[index]
                        busy[1] = c_s  # type: ignore[index]
                    merged += 1
                    if keep_hist:
                        hist.append(tid + HEAD)
                    tids = [tid]
                else:
                    if keep_hist:
                        hist.append(tid)
                    tids = self._fine_tp(s, phase, mb, k, tid, sd, tp_s, tail)
                self.first_seg_done[s] = True
                if reducing:
                    g = add(TASK_COLLECTIVE, gpu, grad_stream, red_s, tids, g_label, -1, -1,
                            r_spec)  # fmt: skip
                    comm_dur[g] = red_s
                    self.grad_comm[s].append(g)
                si += 1
                continue
            tids = self._lower_run(s, phase, mb, k, segs, plan, si, i1, tids, label, reducing,
                                   fine)  # fmt: skip
            si = i1 + 1
        self.op_merged += merged
        if chain is not None:  # the chain of the segments after them (_chain_after)
            return self._emit_chain(s, phase, mb, c, chain, tids)
        return tids

    def _fine_segments(
        self, plan: GatherPlan, k: int, stop: int | None = None
    ) -> list[FineSegment]:
        """Per segment of ``plan`` (operation order) on chunk ``k``, what
        :meth:`lower_gather_runs` emits for it outside a run (:data:`FineSegment`), the same
        for every micro-batch: computed once per lowering (``stop``: the first ``stop``
        segments only, those before a chain, :meth:`_chain_after`). An operation task
        (``then``) where
        :meth:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts.op_task`'s argument
        holds: no TP collective, one after the compute, or one beside it within it."""
        key = (id(plan), k, stop)
        hit = self._fine_memo.get(key)
        if hit is None:
            rows, _, _, specs = plan
            overlap = self.tp_overlap
            hit = self._fine_memo[key] = []
            for si, ((_, c_s, tp_s, g_s, red_s, _), (g_spec, r_spec, tail)) in enumerate(
                zip(rows[:stop], specs[:stop], strict=True)
            ):
                then = segment_then(self.op_tasks, overlap, c_s, tp_s, tail)
                hit.append((g_s, g_spec, c_s, then, tp_s, tail, red_s, r_spec, f".{k}.{si}",
                            f"grad {k}.{si}"))  # fmt: skip
        return hit

    def _fine_tp(
        self, s: int, phase: str, mb: int, k: int, tid: int, deps: list[int], tp_s: float,
        tail: float,
    ) -> list[int]:  # fmt: skip
        """A fine segment's TP collective where it is not in its operation task (as
        :meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.segment` emits it) after
        compute ``tid`` (which waited on ``deps``); returns the ids the next segment waits on."""
        if tp_s <= 0:
            return [tid]
        add, gpu, label = self.b.add, self.gpu[s], f"TP {phase}{mb}"
        if not self.tp_overlap:  # after the compute
            return [add(TASK_COLLECTIVE, gpu, self.tp_stream, tp_s, [tid], label, mb, k)]
        # beside it, from the same dependencies; the exposed tail after both
        tids = [tid, add(TASK_COLLECTIVE, gpu, self.tp_stream, tp_s, deps, label, mb, k)]
        if tail > 0:
            tids = [add(TASK_COLLECTIVE, gpu, "compute", tail, tids, f"TP tail {phase}{mb}",
                        mb, k)]  # fmt: skip
        return tids

    def _lower_run(
        self,
        s: int,
        phase: str,
        mb: int,
        k: int,
        segs: tuple[Segment, ...],
        plan: GatherPlan,
        i0: int,
        i1: int,
        deps: list[int],
        label: str,
        reducing: bool,
        fine: list[FineSegment],
    ) -> list[int]:
        """Emit run ``i0 .. i1`` of ``plan`` (:meth:`gather_runs`) after ``deps``: its two
        gathers, its computes and TP collectives (one operation task where they all run on the
        compute stream: :meth:`_run_task`), and its summary reduction; returns the ids the next
        segment waits on. The gathers are :meth:`~perfmodel.parallel.lower_data_parallel.
        DataParallelEmitters.gather`'s (prefetched after the compute two back; HSDP and owner
        broadcasts take no runs), from ``fine`` (:meth:`_fine_segments`: the same seconds,
        fusion wait included, spec and label, computed once per lowering)."""
        add, gpu, hist = self.b.add, self.gpu[s], self.gather_hist[s]
        g_stream, comm_dur = self.rc.param_gather.stream, self.comm_dur
        g_s, g_spec, *_, ag_suffix, _ = fine[i0]
        ag = add(TASK_COLLECTIVE, gpu, g_stream, g_s, hist[-2:-1], f"AG {phase}{mb}" + ag_suffix,
                 -1, -1, g_spec)  # fmt: skip
        comm_dur[ag] = g_s
        sd = [*deps, ag]
        # the next gather may start before the run does (its anchor, the compute two back,
        # may have ended long before): as the fine loop emits it; it ends within the run's
        # first compute (the fine loop emits it after compute i0 joined the anchors: its
        # anchor, two computes back, is the last anchor now)
        g_s, g_spec, *_, ag_suffix, _ = fine[i0 + 1]
        nxt = add(TASK_COLLECTIVE, gpu, g_stream, g_s, hist[-1:], f"AG {phase}{mb}" + ag_suffix,
                  -1, -1, g_spec)  # fmt: skip
        comm_dur[nxt] = g_s
        tp_pre, comp_a, then, ends_c, ends_b, summary = self._run_sums(plan, s, i0, i1, segs)
        on_compute = self.tp_stream == "compute"
        head, ends = sd, ends_c if on_compute else ends_b
        if on_compute and self.op_tasks and self.RUN_TASKS:
            t, a, b = self._run_task(s, mb, k, sd, label, then)
            head, out = [t + HEAD], [t]  # its start (after no compute): the lead's
        else:
            _, _, tp_mid, b_s, tp_last = then
            tp_label = f"TP {phase}{mb}"
            if reducing:  # the run's start, for the reductions' lead
                head = [add(TASK_COMPUTE, gpu, "compute", 0.0, sd, label, mb, k)]
            if on_compute:  # each TP collective after its compute, on the compute stream
                prev = head
                if tp_pre > 0:
                    prev = [add(TASK_COLLECTIVE, gpu, "compute", tp_pre, head, tp_label, mb, k)]
                a = add(TASK_COMPUTE, gpu, "compute", comp_a, prev, label, mb, k)
                prev = [a]
                if tp_mid > 0:
                    prev = [add(TASK_COLLECTIVE, gpu, "compute", tp_mid, prev, tp_label, mb, k)]
                b = add(TASK_COMPUTE, gpu, "compute", b_s, prev, label, mb, k)
                out = [b]
                if tp_last > 0:
                    out = [add(TASK_COLLECTIVE, gpu, "compute", tp_last, [b], tp_label, mb, k)]
            else:  # TP beside the compute, each within it
                a = add(TASK_COMPUTE, gpu, "compute", comp_a, head, label, mb, k)
                b = add(TASK_COMPUTE, gpu, "compute", b_s, [a], label, mb, k)
                out = [b]
                tp_all = sum(r[2] for r in plan[0][i0 : i1 + 1])
                if tp_all > 0:
                    out.append(add(TASK_COLLECTIVE, gpu, self.tp_stream, tp_all, head,
                                   tp_label, mb, k))  # fmt: skip
        # the next gathers' anchors: e_{i1 - 1}, e_{i1}
        if self.gather_every_mb or self.gathers_left[s] > 0:
            hist.append(a)
            hist.append(b)
        self.first_seg_done[s] = True
        if reducing:
            self._summary_reduction(s, k, mb, head, ends, summary, self.rc.grad_comm.stream)
        return out

    def _run_task(
        self,
        s: int,
        mb: int,
        k: int,
        deps: list[int],
        label: str,
        then: tuple[float, float, float, float, float],
    ) -> tuple[int, int, int]:
        """A run of :meth:`lower_gather_runs` whose TP collectives follow their computes on the
        compute stream, as one operation task (:class:`~perfmodel.parallel.taskgraph.OpTask`,
        :meth:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts.op_task`) of no compute
        and then ``then`` (:meth:`_run_sums`): the run's zero-length start, the TP seconds of
        segments ``i0 .. i1 - 2``, compute ``a`` (segments ``i0 .. i1 - 1``), segment
        ``i1 - 1``'s TP, compute ``b`` (segment ``i1``), its TP, all after ``deps``. Those
        were one task each, back to back on the compute stream in this order, each waiting on
        the one before only (or, the first, on ``deps``), so the task starts where the first
        did and the list schedule adds the same seconds in the same order (``x + 0.0 == x``
        where a piece is absent): every piece ends bit for bit where its task ended, and the
        breakdown reads each piece where it ran. Returns ``(task, a, b)``: the task's id and
        the dependencies on the ends of ``a`` and ``b``
        (:func:`~perfmodel.parallel.taskgraph.piece_end`), the next gathers' anchors."""
        tid = self.b.add(TASK_COMPUTE, self.gpu[s], "compute", 0.0, deps, label, mb, k, None, then)
        # it occupies the compute stream at least its longest piece (monotone rounding): a
        # compute that long, for fold_send's test
        self.compute_emitted(s, max(then))
        self.op_merged += 1
        return tid, piece_end(tid, 2), piece_end(tid, 4)

    def _run_sums(
        self, plan: GatherPlan, s: int, i0: int, i1: int, segs: tuple[Segment, ...]
    ) -> tuple[
        float,
        float,
        tuple[float, float, float, float, float],
        list[float],
        list[float],
        tuple[float, float, CommSpec],
    ]:
        """What :meth:`_lower_run` sums over run ``i0 .. i1`` of ``plan`` on stage ``s``
        (the same for every micro-batch: computed once per lowering, in the same order): the
        TP seconds of segments ``i0 .. i1 - 2``, the compute of ``i0 .. i1 - 1``, the
        compute-stream pieces of :meth:`_run_task`, each segment's compute-stream seconds with
        its TP there and without, and the summary reduction's ``(lead, reduction seconds,
        CommSpec)`` (:meth:`_summary_reduction`, its lead from those seconds)."""
        # ``id(plan)`` is safe: ``_gather_ops`` holds every plan for the whole lowering, so no
        # id is reused; ``segs`` is the plan's chunk's segments in the plan's phase order (its
        # key holds both), so the plan and the run's bounds fix everything summed here
        key = (id(plan), s, i0, i1)
        hit = self._run_memo.get(key)
        if hit is None:
            rows, _, op, _ = plan
            run = rows[i0 : i1 + 1]
            on_stream = [r[1] + r[2] for r in run]
            on_beside = [r[1] for r in run]
            lead_s, red_s = _lead(
                on_stream if self.tp_stream == "compute" else on_beside, [r[4] for r in run]
            )
            grad_b = self.rc.grad_reduce_bytes
            nbytes = sum(
                self.reduced_params(x.params, x.expert_params) * grad_b for x in segs[i0 : i1 + 1]
            )
            tp_pre = sum(r[2] for r in run[:-2])
            comp_a = sum(r[1] for r in run[:-1])
            hit = self._run_memo[key] = (
                tp_pre,
                comp_a,
                (tp_pre, comp_a, run[-2][2], run[-1][1], run[-1][2]),
                on_stream,
                on_beside,
                (lead_s, red_s, self.dp_spec(s, op, nbytes)),  # type: ignore[arg-type]
            )
        return hit

    def _summary_reduction(
        self,
        s: int,
        k: int,
        mb: int,
        head: list[int],
        on_stream: list[float],
        summary: tuple[float, float, CommSpec],
        stream: str,
    ) -> None:
        """The lead and the one reduction standing for a run's gradient reductions
        (:meth:`hidden_backward`'s construction over the run's ``on_stream`` seconds, made by
        :meth:`_run_sums`: ``summary``, the lead's and the reduction's seconds and its
        :class:`CommSpec`), the run starting when ``head`` ends."""
        lead_s, red_s, spec = summary
        gpu = self.gpu[s]
        lead = self.b.add(TASK_COMPUTE, gpu, "grad-lead", lead_s, head, f"grad lead {k}", mb, k)
        g = self.b.add(TASK_COLLECTIVE, gpu, stream, red_s, [lead],
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


__all__ = ["GatherPlan", "HiddenBackward", "HiddenCollectives"]
