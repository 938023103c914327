"""Replayed operations (issue 27): an operation of the analytic graph that is not plain (not one
operation task: :meth:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts.plain_templates`)
but lowers alike for every micro-batch is lowered once through ``forward`` / ``backward`` while
its tasks are recorded, and then copied for the chunk's other micro-batches with their ids,
dependencies, labels and micro-batch filled in (:class:`OperationReplay`, a door
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits; called from
:meth:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts.run_plain_schedule`).

Megatron-Core's GPT-3 175B forwards, for one: the first segment's tensor-parallel all-reduce
outlasts its compute (a compute, a collective and its exposed tail as three tasks), the other
segments chain into one operation task (``coarse_runs``, ``op_task``): ~4 us of method calls per
operation, 3,072 operations in the interleaved pp 16 plan.

**Why the copy is the operation's lowering.** Where :meth:`OperationReplay.replayable` holds
(no ZeRO-3/FSDP gather per segment, not the first micro-batch's forward while overlapped
ZeRO-1/2 gathers are to come, no backward reducing its gradients bucket by bucket, no
activation offload, no expert or context exchange, no combined 1F1B), ``forward`` /
``backward`` take the same path for every micro-batch of a chunk while the stage still has
gathers to come (``gathers_left``) and for every one after: the decisions read the chunk, the
phase and that only (``coarsenable``, ``coarse_runs``, ``tp_overlapped``, ``op_task``'s test,
cached per chunk and phase), so one copy is kept per chunk, phase and gathers to come or not
(the prefetch anchors it appends to ``gather_hist`` copied too), and the first segment never
extends an earlier operation's task (``op_task`` chains segments of one operation only). Each emitted task's fields are then the chunk's, its label and micro-batch
the micro-batch's, and each dependency either a task of the operation itself (its id shifted)
or one of the operation's inputs (the stage's last compute and the chunk's input: ``f_out`` /
``f_done`` and ``b_out``); the recording refuses any other dependency, label or micro-batch
field, and is not taken where two inputs are equal (which one a dependency stands for would be
ambiguous). The operation's send is not copied: ``send`` emits it after the copy, folding it
where :meth:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts.fold_send` folds it, after
the operation's computes are counted (:meth:`compute_emitted`, their longest). The same tasks
in the same order and the same state: ``tests/parallel/test_plain_loop.py`` compares the
graph with the per-operation lowering's.

**Lines of operation tasks.** An operation of several operation tasks in a line (each waiting
on the one before only; pipelined FSDP2's forwards of a chunk while a later chunk's gathers are
to come, each segment's compute a prefetch anchor) is copied inline too (``INLINE_LINES``):
``run_plain_schedule`` emits its first task as a one-task copy and
:meth:`OperationReplay.line_rest` the rest, with ``GraphBuilder.add``'s fields, the folded send
moved to the last task and the anchors appended (the proof: :meth:`OperationReplay._single`).

**Inline gather chains.** The module also holds the ZeRO-3/FSDP loop: where every operation
of the step may be a gather chain (:meth:`OperationReplay.init_chain_ops`), ``run_schedule``'s
round robin runs as :meth:`OperationReplay.run_chain_schedule`, each operation ``forward`` /
``backward`` would lower as one gather chain emitted inline from a template kept per chunk,
phase, last micro-batch and first segment done (:meth:`OperationReplay._chain_template`),
again the same tasks and state as their calls.

Kept whole (issue 29): :meth:`OperationReplay.run_chain_schedule` (~190 lines, one loop)
emits a gather chain per iteration with its dependencies, its task, its folded send and the
lowering's state inline, as ``run_plain_schedule`` does plain operations: the per-operation
method it replaced (``chain_op``) and its attribute reads were ~1/4 of an operation's cost
(measured: :meth:`OperationReplay.run_chain_schedule`'s docstring).
"""

from __future__ import annotations

from typing import Any

from perfmodel.parallel.lower_shortcuts import Line, op_labels
from perfmodel.parallel.schedule import round_robin
from perfmodel.parallel.taskgraph import (
    _S_SEND,
    _S_SEND_S,
    CHAIN_MARK,
    SENT,
    TASK_COMPUTE,
    ChainTask,
    OpTask,
    OverTask,
    TaskKind,
    _ChainTaskTwin,
    _new_task,
    _OpTaskTwin,
    _OverTaskTwin,
    clean_two,
)

#: A recorded operation (:meth:`OperationReplay._record`): its tasks as ``(kind, device,
#: stream, seconds, dependencies, label, micro-batch field, chunk, comm, then_s, over)`` (a
#: dependency ``(True, i, code)``: the operation's ``i``-th task plus ``code`` (``SENT`` /
#: ``HEAD`` encodings), ``(False, j, 0)``: input ``j``, ``(None, d, 0)``: ``d`` itself; a label
#: ``0`` the operation's, ``1`` ``TP <op>``, ``2`` ``TP tail <op>``, else itself; micro-batch
#: field ``None``: the operation's), the task the next operation and the send wait on, the
#: longest compute counted, the operation-task and coarse counts it adds, and the prefetch
#: anchors it appends to ``gather_hist`` (its tasks' indices plus their encodings), and the
#: operation as one task that ``run_plain_schedule`` copies inline (:data:`Single`; ``None``:
#: only the general copy).
Recorded = tuple[
    tuple[tuple[Any, ...], ...], int, float | None, int, int, tuple[int, ...], "Single | None"
]
#: A recorded operation of one operation task on the compute stream waiting on every input
#: (:meth:`OperationReplay._single`), copied inline by ``run_plain_schedule`` from
#: :meth:`OperationReplay.single_template` (else by :meth:`OperationReplay.replay_op`'s general
#: copy, the same task): the task's mutable twin and class, GPU, seconds, ``then_s``, ``over``,
#: chunk field, the longest compute counted, the send's ``(seconds, CommSpec)`` (``None``:
#: none, or one stage), and the operation's other operation tasks in a line with the prefetch
#: anchors it appends (:data:`~perfmodel.parallel.lower_shortcuts.Line`; ``None``: neither).
Single = tuple[type, type, str, float, tuple[float, ...], Any, int, float | None, Any, Line | None]


class OperationReplay:
    """Recorded and replayed operations of a
    :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (see the module docstring)."""

    #: Whether the plain loop replays recorded operations (tests compare both ways).
    REPLAY = True
    #: Whether ``run_plain_schedule`` emits copies of one task inline (:meth:`single_template`;
    #: ``False``: through :meth:`replay_op`; tests compare both ways).
    INLINE_SINGLES = True
    #: Whether those inline copies also take recorded operations of several operation tasks
    #: in a line, or appending prefetch anchors (:meth:`_single`; tests compare both ways).
    INLINE_LINES = True
    #: Whether a segment whose overlapped TP collective outlasts its compute is one
    #: :class:`~perfmodel.parallel.taskgraph.OverTask` (:meth:`over_op`; tests compare both
    #: ways).
    OVER_TASKS = True

    def init_replay(self) -> bool:
        """Start a schedule's replays; returns whether any operation of the step may be
        replayed (what :meth:`replayable` needs of the whole step)."""
        low: Any = self
        low._replays = {}  # (chunk, forward) -> Recorded, or False: never
        low._single_tpl = {}  # the same keys -> single_template's PlainTemplate, or False
        # per chunk: no expert or context exchange, no MoE host synchronisation
        low._replay_chunk = [not low._exchanges(ch) for ch in low.chunks]
        return (
            self.REPLAY
            and low.op_tasks
            and not (low.gather_every_mb or low.combined or any(low.offload_stall))
        )

    def replayable(self, s: int, fwd: bool, mb: int, k: int) -> bool:
        """Whether operation (``fwd``: forward, else backward) of micro-batch ``mb`` through
        chunk ``k`` of stage ``s`` lowers as every other micro-batch's does (the module
        docstring), given :meth:`init_replay`."""
        low: Any = self
        if mb == 0 and low.gathers_left[s] > 0:  # the first micro-batch's parameter gathers
            return False
        if not fwd and low.overlap and (mb == low.m - 1 or low.reduce_every_mb):
            return False
        return low._replay_chunk[k]

    def single_template(self, key: tuple[int, bool, bool]) -> Any:
        """The :data:`~perfmodel.parallel.lower_shortcuts.PlainTemplate` with which
        ``run_plain_schedule`` emits inline what :meth:`replay_op` emits for the recorded
        operation ``key`` (chunk, forward, gathers to come) where it is one task
        (:data:`Single`: the same task, dependencies, fold and state), kept in
        ``_single_tpl``; ``False`` where it is not (no copy of one task, or
        :attr:`INLINE_SINGLES` off: :meth:`replay_op` copies it), ``None`` while the operation
        is not recorded yet (:meth:`replay_op` records it).

        The two emissions differ only in where the code runs: the loop cleans the operation's
        inputs (in :meth:`_inputs`'s order) as ``GraphBuilder.add`` cleans the general copy's
        dependencies, its fold test and counters read the recorded longest compute (``cmax``),
        operation-task and coarse counts (``compute_emitted``'s and ``fold_send``'s, as the
        general copy's ``send`` reads them), and the task gets the recording's twin, class,
        ``over``, seconds and ``then_s``. Saves the method calls of each copy
        (Megatron-Core's GPT-3 175B dp2 tp32 pp16 short schedule: 608 copies; its
        ``run_schedule`` 4.13-4.37 against 4.30-5.01 ms, docs/design.md "One-task copies in
        the plain loop")."""
        low: Any = self
        rec = low._replays.get(key)
        if rec is None:
            return None
        single = rec[6] if rec is not False and self.INLINE_SINGLES else None
        k, fwd, _ = key
        if single is None or single[6] != k:  # a copy's chunk field is its chunk's (checked)
            low._single_tpl[key] = False
            return False
        twin, cls, gpu, dur, then, over, _, cmax, send, line = single
        _, _, _, merged, coarse, _, _ = rec
        sends = k < low.K - 1 if fwd else k > 0
        labels = op_labels("F" if fwd else "B", k // low.P if low.V > 1 else -1, low.m)
        out = (gpu, dur, then, sends, send, labels, twin, cls, over,
               -1.0 if cmax is None else cmax, merged, coarse, line)  # fmt: skip
        low._single_tpl[key] = out
        return out

    def _inputs(self, s: int, fwd: bool, mb: int, k: int) -> tuple[int, ...]:
        """The operation's inputs, in ``forward`` / ``backward``'s order."""
        low: Any = self
        if fwd:
            return (
                (low.last_compute[s], low.f_out[(mb, k - 1)]) if k > 0 else (low.last_compute[s],)
            )
        if k < low.K - 1:
            return (low.last_compute[s], low.f_done[(mb, k)], low.b_out[(mb, k + 1)])
        return (low.last_compute[s], low.f_done[(mb, k)])

    def replay_op(self, s: int, fwd: bool, mb: int, c: int) -> None:
        """Lower operation (``fwd``: forward, else backward) of micro-batch ``mb`` through chunk
        ``c`` of stage ``s``, :meth:`replayable`: a copy of the chunk's recorded operation, or
        ``forward`` / ``backward`` (recorded where it may be)."""
        low: Any = self
        P = low.P
        k = c * P + s
        key = (k, fwd, low.gathers_left[s] > 0)
        rec = low._replays.get(key)
        ext = self._inputs(s, fwd, mb, k)
        if rec is None:
            if min(ext) < 0 or len(set(ext)) < len(ext):  # ambiguous: record a later one
                (low.forward if fwd else low.backward)(s, mb, c)
            else:
                low._replays[key] = self._record(s, fwd, mb, c, k, ext)
            return
        if rec is False:
            (low.forward if fwd else low.backward)(s, mb, c)
            return
        tpl, x, cmax, merged, coarse, anchors, _ = rec
        b = low.b
        base = len(b.tasks)
        add = b.add
        ph = "F" if fwd else "B"
        labels = None
        for kind, dev, stream, dur, deps, lab, mbf, chunk, comm, then, over in tpl:
            raw = [
                base + i + code if internal else (ext[i] if internal is False else i)
                for internal, i, code in deps
            ]
            if lab == 0:
                if labels is None:
                    labels = op_labels(ph, c if low.V > 1 else -1, low.m)
                lab = labels[mb]
            elif lab == 1:
                lab = f"TP {ph}{mb}"
            elif lab == 2:
                lab = f"TP tail {ph}{mb}"
            add(
                kind,
                dev,
                stream,
                dur,
                raw,
                lab,
                mb if mbf is None else mbf,
                chunk,
                comm,
                then,
                over,
            )
        if anchors:
            low.gather_hist[s].extend(base + i for i in anchors)
        if cmax is not None:
            low.compute_emitted(s, cmax)
        low.op_merged += merged
        low.coarsened += coarse
        tid = base + x
        low.last_compute[s] = tid
        if fwd:
            low.first_seg_done[s] = True
            low.f_done[(mb, k)] = tid
            if k < low.K - 1:
                low.f_out[(mb, k)] = (
                    low.send(s, (k + 1) % P, low.chunks[k].out_bytes, [tid], "send_fwd", mb, k)
                    if P > 1
                    else tid
                )
        elif k > 0:
            low.b_out[(mb, k)] = (
                low.send(s, (k - 1) % P, low.chunks[k - 1].out_bytes, [tid], "send_bwd", mb, k)
                if P > 1
                else tid
            )

    def _record(
        self, s: int, fwd: bool, mb: int, c: int, k: int, ext: tuple[int, ...]
    ) -> Recorded | bool:
        """Lower the operation through ``forward`` / ``backward`` while recording what it
        emits (:data:`Recorded`), or ``False`` where a copy could not be made of it (a
        dependency, label or micro-batch field the module docstring does not allow)."""
        low: Any = self
        b = low.b
        start = len(b.tasks)
        calls: list[list[Any]] = []
        durs: list[float] = []
        add, emitted = b.add, low.compute_emitted

        def spy_add(*a: Any, **kw: Any) -> int:
            deps = a[4] if len(a) > 4 else kw.get("deps", ())
            calls.append(list(deps) if deps else [])
            return add(*a, **kw)

        def spy_emitted(s_: int, dur: float) -> None:
            durs.append(dur)
            emitted(s_, dur)

        m0, c0, h0 = low.op_merged, low.coarsened, len(low.gather_hist[s])
        b.add, low.compute_emitted = spy_add, spy_emitted
        try:
            (low.forward if fwd else low.backward)(s, mb, c)
        finally:
            del b.add, low.compute_emitted
        tasks = b.tasks
        if len(tasks) - start != len(calls):
            return False  # something emitted without GraphBuilder.add
        P, sends = low.P, (k < low.K - 1 if fwd else k > 0)
        out = (low.f_out if fwd else low.b_out).get((mb, k)) if sends else None
        x = low.last_compute[s]
        fold = 0
        n = len(calls)
        if sends and P > 1:
            if out >= SENT:
                fold = 1
                if out - SENT != x:
                    return False
            else:  # the last task is the send: send() makes it again
                n -= 1
                if out != start + n or tasks[out].kind is not TaskKind.SENDRECV:
                    return False
                if tasks[out].deps[0] != x:
                    return False
        if not start <= x < start + n or (fwd and not low.first_seg_done[s]):
            return False
        ph = "F" if fwd else "B"
        own = {
            (f"{ph}{mb}.c{c}" if low.V > 1 else f"{ph}{mb}"): 0,
            f"TP {ph}{mb}": 1,
            f"TP tail {ph}{mb}": 2,
        }
        tpl = []
        for i in range(n):
            t = tasks[start + i]
            deps = []
            for d in calls[i]:
                if d is None or d < 0:
                    deps.append((None, d, 0))
                    continue
                base = d % SENT
                if start <= base < start + n:
                    deps.append((True, base - start, d - base))
                elif d in ext:
                    deps.append((False, ext.index(d), 0))
                else:
                    return False
            lab: Any = own.get(t.label, t.label)
            if type(lab) is str and str(mb) in lab:
                return False
            if t.microbatch not in (mb, -1):
                return False
            mbf = None if t.microbatch == mb else -1
            cls = type(t)
            then = t.then_s if cls is OpTask or cls is OverTask else None
            dur = t.duration_s
            tpl.append(
                (
                    t.kind,
                    t.device,
                    t.stream,
                    dur,
                    tuple(deps),
                    lab,
                    mbf,
                    t.chunk,
                    t.comm,
                    then,
                    t.over,
                )
            )
        anchors = tuple(a - start for a in low.gather_hist[s][h0:])
        if any(not 0 <= a % SENT < n for a in anchors):
            return False
        cmax = max(durs) if durs else None
        merged = low.op_merged - m0 - fold
        single = self._single(fwd, k, tpl, x - start, cmax, anchors, len(ext))
        return tuple(tpl), x - start, cmax, merged, low.coarsened - c0, anchors, single

    def _single(
        self,
        fwd: bool,
        k: int,
        tpl: list[tuple[Any, ...]],
        x: int,
        cmax: float | None,
        anchors: tuple[int, ...],
        n_ext: int,
    ) -> Single | None:
        """:data:`Single` of a recorded operation (``tpl``, the task the next operation waits
        on ``x``) where it is one operation task (or :class:`~perfmodel.parallel.taskgraph.
        OverTask`) on the compute stream, labelled as the operation, of the operation's
        micro-batch, waiting on each of its ``n_ext`` inputs once and (but with
        :attr:`INLINE_LINES`, below) appending no anchor; else ``None``. Megatron-Core's GPT-3
        175B forwards whose first segment's TP all-reduce outlasts its compute (one
        ``OverTask`` extended by the other segments: 608 of the 1,248 operations of the dp2
        tp32 pp16 plan's short schedule).

        With :attr:`INLINE_LINES`, also where that task is followed by operation tasks in a
        line (each waiting on the one before only, the same fields but seconds and
        ``then_s``, the last the one ``x`` names), or the operation appends prefetch anchors
        (its tasks' ends, ``tid + HEAD``): pipelined FSDP2's forwards of a chunk while a later
        chunk's gathers are still to come (``op_task`` keeps each segment's compute apart as an
        anchor), 224 of the 3,072 operations of GPT-3 175B dp4 tp16 pp16 interleaved, three
        or four tasks each. The line's tasks are :data:`~perfmodel.parallel.lower_shortcuts.
        Line`; ``run_plain_schedule`` emits the first as a one-task copy and
        :meth:`line_rest` the rest with the general copy's fields (each waits on
        the one before: ``GraphBuilder.add`` cleans one id to itself), the send folded into the
        last (``fold_send`` reads its task ``x``; the longest compute counted before the fold,
        as here) and the anchors appended: the same tasks and state."""
        low: Any = self
        n = len(tpl)
        if x != n - 1 or ((n > 1 or anchors) and not self.INLINE_LINES):
            return None
        kind, dev, stream, dur, deps, lab, mbf, chunk, comm, then, over = tpl[0]
        if kind is not TASK_COMPUTE or stream != "compute" or comm is not None or then is None:
            return None
        if lab != 0 or mbf is not None or deps != tuple((False, j, 0) for j in range(n_ext)):
            return None
        if n > 1 and over is not None:  # a line starts with an operation task
            return None
        rest = []
        for i, (kind_i, dev_i, stream_i, dur_i, deps_i, lab_i, mbf_i, chunk_i, comm_i, then_i,
                over_i) in enumerate(tpl[1:]):  # fmt: skip
            if (kind_i is not TASK_COMPUTE or dev_i != dev or stream_i != "compute" or comm_i
                    is not None or then_i is None or over_i is not None
                    or lab_i != 0 or mbf_i is not None or chunk_i != k
                    or deps_i != ((True, i, 0),)):  # fmt: skip
                return None
            rest.append((dur_i, then_i))
        # fold_send folds into an OverTask only once a later segment extended it; one of one
        # piece refused the recorded operation's send, so its stream's sends are tasks since
        # (``_send_exact`` never returns to True) and no copy of it reaches a fold
        twin, cls = (_OpTaskTwin, OpTask) if over is None else (_OverTaskTwin, OverTask)
        line = (tuple(rest), anchors) if n > 1 or anchors else None
        return twin, cls, dev, dur, then, over, chunk, cmax, low.op_send(k, fwd), line

    def line_rest(self, s: int, j: int, first: OpTask, line: Line) -> int:
        """After ``first``, the first task of a copied operation that ``run_plain_schedule``
        emitted on stage ``s``, the operation's other tasks of ``line`` (:data:`Line`, from
        :meth:`single_template`) as ``replay_op``'s general copy emits
        them (``GraphBuilder.add``'s fields: each waits on the one before, the first's label,
        micro-batch and chunk), the send folded into ``first`` moved to the last (which
        ``fold_send`` folds it into: the loop decided the fold before the tasks were made, and
        ``replay_op`` counts the operation's computes, their longest, before its send
        either way), and the prefetch anchors appended; returns the last task's id (what the
        next operation and an unfolded send wait on). ``j``: the send's stream (0 forward)."""
        low: Any = self
        tasks, x = low.b.tasks, first.tid
        dev, label, mb, k = first.device, first.label, first.microbatch, first.chunk
        for dur, then in line[0]:  # GraphBuilder.add's stores (its one-id deps: (x,))
            task = _new_task(_OpTaskTwin)
            task.then_s = then
            task.send_s = 0.0
            task.send = None
            task.tid = x + 1
            task.kind = TASK_COMPUTE
            task.device = dev
            task.stream = "compute"
            task.duration_s = dur  # a recorded task's: a float
            task.deps = (x,)
            task.label = label
            task.microbatch = mb
            task.chunk = k
            task.comm = None
            task.__class__ = OpTask
            tasks.append(task)
            x += 1
        if first.send is not None and x != first.tid:
            last = tasks[x]
            _S_SEND_S(last, first.send_s)
            _S_SEND(last, first.send)
            _S_SEND_S(first, 0.0)
            _S_SEND(first, None)
            low._send_last[s][j] = x
        if line[1]:
            low.gather_hist[s].extend(first.tid + a for a in line[1])
        return x

    # ------------------------------------------------------------------ exposed TP tails

    def over_op(
        self,
        s: int,
        op: tuple[str, int, int],
        dur: float,
        deps: list[int],
        tp_s: float,
        tail: float,
        label: str,
    ) -> list[int] | None:
        """A segment of operation ``op`` (phase, micro-batch, chunk) on stage ``s`` whose TP
        collective runs beside its compute and outlasts it (``tp_s > dur``, ``tail > 0``), as
        one :class:`~perfmodel.parallel.taskgraph.OverTask` (``over``: the collective's stream
        and seconds, ``then_s``: ``(tail,)``), which the operation's later segments extend as
        ``op_task`` extends an operation task; ``None`` (lowered as the three tasks
        ``segment`` makes) where a parameter gather may wait on the compute (ZeRO-3/FSDP, or
        overlapped ZeRO-1/2 gathers still to come on the stage: ``segment`` records the
        compute's id for them), there is no tail (a join follows) or the collective runs on
        the compute stream itself.

        Why it is those tasks' schedule, bit for bit: ``segment`` emits the compute ``C``
        (dependencies ``deps``), the collective ``T`` on the TP stream (the same ``deps``)
        and the tail (on the compute stream, waiting on ``C`` and ``T``) as three consecutive
        tasks, and returns the tail alone, so nothing but the tail waits on ``C`` or ``T``, and
        no task runs on either stream between them in program order. With ``D`` the
        dependencies' latest end, the list schedule gives ``C`` ``[s, s + dur]`` with ``s =
        max(compute free, D)``, ``T`` ``[sT, sT + tp_s]`` with ``sT = max(TP stream free, D)``,
        and the tail ``[a, a + tail]`` with ``a = max(s + dur, sT + tp_s)`` (the compute
        stream is free at ``s + dur``); the next segment of the operation waits on the tail
        alone and starts at its end. ``sim.engine._over`` computes the same maxima and sums in
        the same order (max is exact, the sums are the same floating-point operations), sets
        the TP stream free at ``sT + tp_s`` at the same point of program order, and keeps
        ``sT`` (``Timeline.overs``) for the readers of the pieces (the breakdown, the
        periodicity check), which rebuild each piece's interval from it."""
        low: Any = self
        if not self.OVER_TASKS or tail <= 0 or low.gather_every_mb or low.gathers_left[s] > 0:
            return None
        if low.tp_stream == "compute":
            return None
        k = op[2] * low.P + s
        tid = low.b.add_over(low.gpu[s], dur, deps, label, op[1], k, (tail,), (low.tp_stream, tp_s))
        low._op_chain = (tid, op, s)
        low.compute_emitted(s, dur)
        low.op_merged += 1
        return [tid]

    # ------------------------------------------------------------------ gather chains inline

    def init_chain_ops(self) -> bool:
        """Start a schedule's inline gather chains (:meth:`run_chain_schedule`); returns whether
        any operation of the step may take one: ZeRO-3/FSDP's analytic graph with operation
        tasks and gather chains, no HSDP, no activation offload, no combined 1F1B (nor
        ZeRO-1/2's overlapped gathers, which ZeRO-3 excludes)."""
        low: Any = self
        low.chains_inline = 0  # operations run_chain_schedule emitted as gather chains
        return bool(
            low.op_tasks
            and low.gather_every_mb
            and low.hidden
            and low.CHAINS
            and not (low.hsdp or low.combined or low.gather_early or any(low.offload_stall))
        )

    def _chain_template(self, s: int, fwd: bool, mb: int, final: bool, k: int) -> tuple | bool:
        """What ``forward`` / ``backward`` emit for an operation of chunk ``k`` (``fwd``;
        micro-batch ``mb``, the first of its key; ``final``: the last micro-batch's backward) on
        stage ``s`` in the stage's present
        state (its first segment done or not; no gathers to come): the gather chain's
        template (:meth:`~perfmodel.parallel.lower_chains.GatherChains._chain_static`),
        whether :meth:`gather_runs` counts it merged, the GPU, labels and the send's
        arguments; ``False`` where they take another path (the same decisions, in order)."""
        low: Any = self
        ch = low.chunks[k]
        if low.plain_single[k] is not None:
            return False
        phase = "F" if fwd else "B"
        # coarsenable (refuses ZeRO-3 in its chunk part: no counter moves; the method itself,
        # so that a replacement is honoured) and coarse_runs (forward: before gather_runs;
        # backward after it), without its counter where it refuses
        if low.coarsenable(s, phase, mb, ch):
            return False
        if fwd and not (len(ch.segments) < 3 or low.tp_stream == "compute"):
            rkey = (id(ch), phase)  # coarse_runs' chunk part (its memo, kept as it keeps it)
            if rkey not in low._coarse_runs:
                low._coarse_runs[rkey] = low._chunk_runs(ch, phase)
            if low._coarse_runs[rkey] is not None:
                return False  # lowered as coarse runs
        reducing = not fwd and low.dp_on and low.overlap and (final or low.reduce_every_mb)
        first = low.first_seg_done[s]
        key = (id(ch), phase, reducing, first)
        plan = low._gather_ops.get(key, False)
        if plan is False:
            plan = low._gather_ops[key] = low._gather_plan(s, ch, phase, reducing, first)
        if plan is None:
            return False
        chain = low._chain_static(plan, k, ch, phase)
        if chain is None:
            return False
        sends = k < low.K - 1 if fwd else k > 0
        labels = op_labels(phase, k // low.P if low.V > 1 else -1, low.m)
        return chain, 1 if plan[1] else 0, low.gpu[s], labels, sends, low.op_send(k, fwd)

    def run_chain_schedule(self) -> None:
        """``run_plain_schedule``'s round robin where every operation may be a gather chain
        (:meth:`init_chain_ops`; ZeRO-3/FSDP, so no operation is plain nor replayed): each
        operation ``forward`` / ``backward`` would lower as one gather chain is emitted here
        from its template (:meth:`_chain_template`, kept per chunk, phase, last micro-batch
        and first segment done: every decision on their path reads those only), without
        their calls: the :class:`~perfmodel.parallel.taskgraph.ChainTask`
        ``GraphBuilder.add_chain`` makes (its dependencies cleaned as it cleans them), the
        stage state ``lower_gather_runs`` leaves, and the send as ``send`` and ``fold_send``
        emit it (the fold decided before the task is made, its ``send_s`` and ``send``
        stored with it, as the plain loop does); any other operation through ``forward`` /
        ``backward``. The same tasks in the same order and the same state after each
        operation (``tests/parallel/test_plain_loop.py`` compares with ``run_schedule``'s own
        loop). Written as one loop with the state in locals (wave 14): the per-operation
        method call, its ~20 attribute reads and its template key's tuple were ~1/4 of the
        ~2.6 us an operation cost (``run_schedule`` 16.2 -> 12.2 ms over the 6,144 chains of
        the gather-bound FSDP plan of GPT-3 175B on 1024 A100, dp8 tp16 pp8 mb1 interleaved;
        min of 7, alternated with the per-operation method, commit 04e6ed3)."""
        low: Any = self
        P, K, ops = low.P, low.K, low.ops
        f_out, b_out, f_done = low.f_out, low.b_out, low.f_done
        last, first_done, hists, grad_comm = (
            low.last_compute, low.first_seg_done, low.gather_hist, low.grad_comm,
        )  # fmt: skip
        cs_max, prev_s, exact_s, last_s = (
            low._cs_max, low._send_prev, low._send_exact, low._send_last,
        )  # fmt: skip
        b = low.b
        tasks, dset = b.tasks, b._device_set
        # the last micro-batch's backward has a template of its own only where it alone
        # reduces its gradients: _chain_template reads ``final`` for that (``reducing``) and
        # for coarsenable's refusal, which refuses every operation of a ZeRO-3 step anyway
        # (and ZeRO-3 reduces every micro-batch's: never here; the chains of the last
        # micro-batch share the others' template, equal field for field, since wave 14)
        reduces_last = low.dp_on and low.overlap and not low.reduce_every_mb
        final_mb = low.m - 1 if reduces_last else -1
        # per (chunk, forward, last micro-batch, first segment done): the flattened template
        # (None: not made yet; False: another path)
        tpls: list[Any] = [None] * (8 * K)
        template = self._chain_template
        new, twin, mark, compute = _new_task, _ChainTaskTwin, CHAIN_MARK, TASK_COMPUTE
        hidden = merged = inline = 0
        pos = [0] * P
        for s, o, i, n in round_robin(ops, pos):
            while i < n:
                phase, mb, c = o[i]
                k = c * P + s
                fwd = phase == "F"
                if fwd:
                    if k > 0:
                        d = f_out.get((mb, k - 1))
                        if d is None:
                            break
                    final = False
                else:
                    if k < K - 1:
                        d = b_out.get((mb, k + 1))
                        if d is None:
                            break
                    final = mb == final_mb
                first = first_done[s]
                j = 8 * k + 4 * fwd + 2 * final + first
                t = tpls[j]
                if t is None:
                    hit = template(s, fwd, mb, final, k)
                    t = tpls[j] = False if hit is False else (*hit[0], *hit[1:])
                if t is False:  # another path: forward / backward
                    (low.forward if fwd else low.backward)(s, mb, c)
                    i += 1
                    continue
                static, c_max, two, one, red, n_items, n_hid, gpu, labels, sends, send = t
                a = last[s]
                if fwd or k == K - 1:  # [last, input] (k > 0) or [last], cleaned as
                    # add_chain cleans them; the last chunk's backward: [last, its forward]
                    if not fwd:
                        d = f_done[(mb, k)]
                    if fwd and k == 0:
                        deps: tuple[int, ...] = (a,) if a >= 0 else ()
                    else:
                        deps = clean_two(a, d)
                else:  # sorted({a, f, d}), by hand as run_plain_schedule
                    # sorts them: none is negative (this stage ran the forward, so ``last``
                    # is set; the forward and the later chunk's backward ended), and d (the
                    # later backward's output) comes after f (this forward's end)
                    f = f_done[(mb, k)]
                    assert a >= 0 and f >= 0 and d >= 0, "a backward before its forward"
                    if a > f:
                        a, f = f, a
                    if f > d:
                        f, d = d, f
                        assert a < f, "b_out precedes its forward's f_done"
                    if a == f:  # one micro-batch a step: the forward was the last task
                        deps = (a,) if f == d else (a, d)
                    else:
                        deps = (a, f) if f == d else (a, f, d)
                tid = len(tasks)
                # add_chain's check (the template's own tasks are earlier by make), each
                # of at most three dependencies read without a list
                assert not deps or (
                    deps[0] % SENT < tid
                    and deps[-1] % SENT < tid
                    and (len(deps) < 3 or deps[1] % SENT < tid)
                ), "dependencies must precede the task"
                hidden += n_hid
                merged += n_items
                inline += 1
                hist = hists[s]
                a0 = hist[-2] if len(hist) >= 2 else -1
                a1 = hist[-1] if hist else -1
                busy = cs_max[s]  # compute_emitted's, for the segments' computes
                if c_max > busy[0]:
                    busy[0] = c_max
                if c_max > busy[1]:
                    busy[1] = c_max
                send_s, spec, wait = 0.0, None, -3  # fold_send's (-3: no send task)
                if send is not None:
                    js = 0 if fwd else 1
                    exact = exact_s[s]
                    if exact[js]:
                        prev = prev_s[s]
                        ok = busy[js] >= prev[js]
                        prev[js] = send[0]
                        busy[js] = 0.0
                        if ok:
                            send_s, spec = send
                            last_s[s][js] = tid
                            merged += 1
                        else:
                            exact[js] = False
                            x = last_s[s][js]
                            wait = x + SENT if x >= 0 else -1
                    else:
                        wait = -1
                task = new(twin)  # add_chain's stores, then the frozen class
                task.then_s = mark
                task.send_s = send_s
                task.send = spec
                task.chain = (static, a0, a1)
                task.tid = tid
                task.kind = compute
                task.device = gpu
                task.stream = "compute"
                task.duration_s = 0.0
                task.deps = deps
                task.label = labels[mb]
                task.microbatch = mb
                task.chunk = k
                task.comm = None
                task.__class__ = ChainTask  # type: ignore[assignment]
                tasks.append(task)
                if gpu not in dset:
                    dset.add(gpu)
                    b.devices.append(gpu)
                hist.append(tid + two)
                hist.append(tid + one)
                first_done[s] = True
                if red:
                    grad_comm[s].append(tid + red)
                last[s] = tid
                out = tid
                if spec is not None:
                    out = tid + SENT
                elif wait != -3:
                    out = low._send_task(fwd, tid, wait, mb, k, send, gpu)
                if fwd:
                    f_done[(mb, k)] = tid
                    if sends:
                        f_out[(mb, k)] = out
                elif sends:
                    b_out[(mb, k)] = out
                i += 1
            pos[s] = i
        low.hidden_merged += hidden
        low.op_merged += merged
        low.chains_inline += inline


__all__ = ["OperationReplay"]
