"""Gather chains of the lowering's hidden gathers, in the analytic list schedule's graph only:
doors :class:`~perfmodel.parallel.lower_hidden.HiddenCollectives` inherits and
:meth:`.HiddenCollectives.lower_gather_runs` calls.

An operation whose segments each wait for their parameter gather, every segment an operation
task (or a hidden gather run lowered as one), is one
:class:`~perfmodel.parallel.taskgraph.ChainTask` whose list schedule is the fine tasks'
recurrence (:meth:`GatherChains._chain_static`; ``perfmodel.sim.chains``; docs/design.md
"Gather chains"). The methods read the lowering's state and
:class:`~perfmodel.parallel.lower_hidden.HiddenCollectives`' per-plan memos
(``_fine_segments``, ``_run_sums``) through ``self``.
"""

from __future__ import annotations

from perfmodel.parallel.lowering import Chunk
from perfmodel.parallel.taskgraph import (
    CHAIN,
    SENT,
    ChainRun,
    ChainSegment,
    ChainStatic,
    CommSpec,
    Task,
    TaskKind,
    flat_rows,
)

#: An operation lowered as runs with hidden gathers (:meth:`.HiddenCollectives.gather_runs`):
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

#: What :meth:`.HiddenCollectives.lower_gather_runs` emits a gather chain from, the same for
#: every micro-batch of an operation of a (stage, chunk, pass) (made once per lowering:
#: :meth:`GatherChains._chain_static`): the :class:`ChainStatic`, the longest compute
#: (seconds), the offsets from the chain's id of its last two marks (the next gathers'
#: anchors: ``CHAIN + (n - 2) * SENT``, ``CHAIN + (n - 1) * SENT``) and of its last
#: reduction's end (``CHAIN + n * SENT``; 0: the operation does not reduce), and how many
#: items (segments and runs) it stands for.
ChainTemplate = tuple[ChainStatic, float, int, int, int, int]


def segment_then(
    op_tasks: bool, overlap: bool, c_s: float, tp_s: float, tail: float
) -> tuple[float] | None:
    """A gather plan segment's operation-task ``then_s`` (``None``: refused, a plain compute
    task), read by :meth:`.HiddenCollectives._fine_segments` and ``_chain_items``: with
    operation tasks on (``op_tasks``), one where
    :meth:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts.op_task` is exact: no TP
    collective (``(0.0,)``), one after the compute of ``c_s`` seconds (``overlap`` off:
    ``(tp_s,)``), or one beside it within it (``tp_s <= c_s``: its exposed ``tail``)."""
    if op_tasks and (tp_s <= 0 or not overlap or tp_s <= c_s):
        return (0.0 if tp_s <= 0 else tp_s if not overlap else tail,)
    return None


def _chain_segment(
    g_s: float,
    c_s: float,
    then: tuple[float, ...] | None,
    red_s: float,
    g_spec: CommSpec,
    r_spec: CommSpec | None,
) -> ChainSegment | None:
    """A segment's chain item: its gather, compute, operation task's ``then_s`` and reduction
    seconds and groups (``None`` where ``then`` is: its TP not in its task)."""
    if then is None:
        return None
    r_grp = r_spec.group if r_spec is not None else ()
    return ChainSegment(g_s, c_s, then, red_s, g_spec.group, r_grp)


def _row_segment(
    row: tuple[float, float, float, float, float, bool],
    spec: tuple[CommSpec, CommSpec | None, float],
    op_tasks: bool,
    overlap: bool,
) -> ChainSegment | None:
    """:func:`_chain_segment` of a gather plan's row and spec triple (:data:`GatherPlan`)."""
    (_, c_s, tp_s, g_s, red_s, _), (g_spec, r_spec, tail) = row, spec
    then = segment_then(op_tasks, overlap, c_s, tp_s, tail)
    return _chain_segment(g_s, c_s, then, red_s, g_spec, r_spec)


class GatherChains:
    """Gather chains of a :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (see
    the module docstring)."""

    #: Whether an operation whose every segment waits for its gather outside any run, each an
    #: operation task, is one gather chain (:meth:`_chain_static`; tests compare both ways).
    CHAINS = True

    #: Whether :meth:`_chain_items` reads each segment's seconds, groups and operation task
    #: off the plan's rows and specs directly instead of through
    #: :meth:`.HiddenCollectives._fine_segments` (the same values, without the fine loop's labels,
    #: which a chain never reads; tests compare both ways).
    CHAIN_DIRECT = True

    #: Whether a chain whose segments repeat a few row classes (:meth:`_chain_classes`) gives
    #: :class:`ChainStatic` its ``flat`` rows as those classes' rows indexed, instead of one
    #: row built per item: the same floats in the same places (a class's items are one object);
    #: tests compare both ways.
    SHARED_FLAT = True

    #: Whether :meth:`_chain_classes` keeps a gather plan's classes of segments per rows
    #: object, for every plan that shares those rows (tests compare with the classes found
    #: per plan).
    SHARED_CLASSES = True

    #: Whether an operation whose chain :meth:`_chain_static` refuses for its first segments
    #: only is those segments then a chain (:meth:`_chain_after`; tests compare both ways).
    CHAINS_AFTER = True

    def _emit_chain(
        self, s: int, phase: str, mb: int, c: int, chain: ChainTemplate, deps: list[int]
    ) -> list[int]:
        """:meth:`.HiddenCollectives.lower_gather_runs`' gather chain of template ``chain`` on stage
        ``s`` after ``deps``, anchored on the stage's gather history; returns ``[its id]``
        (the operation's last task ids, as the fine loop returns them)."""
        static, c_max, two, one, red, n_items = chain
        hist = self.gather_hist[s]
        a0 = hist[-2] if len(hist) >= 2 else -1
        a1 = hist[-1] if hist else -1
        label = f"{phase}{mb}.c{c}" if self.V > 1 else f"{phase}{mb}"
        k = c * self.P + s
        tid = self.b.add_chain(self.gpu[s], deps, label, mb, k, (static, a0, a1))
        busy = self._cs_max[s]  # compute_emitted's, for the segments' computes
        if c_max > busy[0]:
            busy[0] = c_max
        if c_max > busy[1]:
            busy[1] = c_max
        # the next gathers read the last two anchors only (hist[-2], hist[-1])
        hist.append(tid + two)
        hist.append(tid + one)
        self.first_seg_done[s] = True
        if red:  # the last reduction's end (in order on their stream)
            self.grad_comm[s].append(tid + red)
        self.op_merged += n_items
        return [tid]

    def _chain_after(
        self, plan: GatherPlan, k: int, ch: Chunk, phase: str
    ) -> tuple[int, ChainTemplate] | None:
        """Where :meth:`_chain_static` refuses ``plan``'s chain on chunk ``k`` for segments
        whose TP collective is not in their task (:func:`segment_then`; a GPT's first
        stage: its embedding's TP beside the compute outlasts it), all of them before the
        last three segments or more, and ``plan`` has no runs: ``p``, the segments
        :meth:`.HiddenCollectives.lower_gather_runs` emits as the fine loop does, up to the last
        refused one, and the template of the chain of segments ``p ..`` (a plan of those rows and
        specs, kept with it); else ``None``. Computed once per lowering (:attr:`CHAINS_AFTER`).

        Exact: the chain stands for the fine tasks of segments ``p ..``
        (:meth:`_chain_static`'s argument), which the fine loop emits right after segment
        ``p - 1``'s, nothing between: their first compute waits on segment ``p - 1``'s
        output and its gather, as the chain's first compute waits on the chain's
        dependencies (those outputs) and its first gather; their first two gathers wait on
        ``hist[-2]`` then ``hist[-1]`` as the fine loop leaves them (the caller requires it
        to keep the history, as a chain does), the chain's anchors; the streams' free times
        are the fine tasks' before them."""
        key = (id(plan), k)
        hit = self._chain_after_memo.get(key)
        if hit is None:
            rows, runs, op, specs = plan
            hit = False
            p = self._last_refused(rows, specs) + 1 if not runs else 0
            if p and len(rows) - p >= 3:
                rest = (rows[p:], runs, op, specs[p:])
                # kept with the hit: _chain_classes and _fine_segments (CHAIN_DIRECT off) key
                # their memos by id(rest) and id(rows[p:]), which must stay theirs
                tpl = self._chain_items(rest, k, ch, phase)
                hit = (p, tpl, rest) if tpl is not None else False
            self._chain_after_memo[key] = hit
        return (hit[0], hit[1]) if hit else None

    def _last_refused(
        self,
        rows: tuple[tuple[float, float, float, float, float, bool], ...],
        specs: tuple[tuple[CommSpec, CommSpec | None, float], ...],
    ) -> int:
        """The last segment of a gather plan without runs whose TP collective is not in its
        task (:func:`segment_then` refuses it), ``-1`` where none: asked once per class of
        :meth:`_chain_classes` (a class's segments share their row and spec triple, all
        ``segment_then`` reads), the class's last segment found in C."""
        firsts, index = self._chain_classes(rows, specs)
        ot, ov, n = self.op_tasks, self.tp_overlap, len(index)
        back = index[::-1]
        return max(
            (n - 1 - back.index(j) for j, i in enumerate(firsts)
             if segment_then(ot, ov, rows[i][1], rows[i][2], specs[i][2]) is None),
            default=-1,
        )  # fmt: skip

    def _chain_static(
        self, plan: GatherPlan, k: int, ch: Chunk, phase: str
    ) -> ChainTemplate | None:
        """Where :meth:`.HiddenCollectives.lower_gather_runs` lowers an operation of ``plan`` on
        chunk ``k`` (``ch``, phase ``phase``) as segments outside runs, each a gather, an operation
        task (``then``, :meth:`.HiddenCollectives._fine_segments`) and, ``reducing``, a gradient
        reduction, and hidden gather runs, each lowered by :meth:`.HiddenCollectives._lower_run` as
        two gathers, one run task (:meth:`.HiddenCollectives._run_task`) and, ``reducing``, a lead
        and a summary reduction: its :data:`ChainTemplate` (the same for every micro-batch: computed
        once per lowering), else ``None`` (a segment whose TP is not in its task, or
        a run not lowered as one task: TP beside the compute; gathers and reductions on one
        stream, whose free times ``_chain`` tracks apart: a stream-sharing recipe gets the fine
        tasks).

        Exact: those fine tasks are consecutive in the graph, each segment's gather waiting on
        the anchor before it (the first two on the stage's last two computes, ``a0`` and
        ``a1``; then on the first compute two segments back), its compute on the previous
        compute (the operation's dependencies for the first) and its gather, its reduction on
        its compute; nothing outside waits on any of them but the next gathers (on the last
        two computes' first compute: marks ``n - 2`` and ``n - 1``), the optimizer (on every
        reduction: their ends rise in program order on one stream, so the last one's, mark
        ``n``) and the operation's successors (on its last task). The list schedule of the
        chain (``perfmodel.sim.engine`` ``_chain``) is theirs, with the same additions in the
        same order, so every time is bit for bit the fine tasks'; the breakdown reads each
        gather, compute, TP piece and reduction where it ran, with the fine tasks' classes
        (``perfmodel.report.step_breakdown``). An FSDP step of GPT-3 175B on 1024 A100 (dp8
        tp16 pp8, micro-batch 1, interleaved) is gather-bound (8.7 ms gathers against 3.2 ms
        forward segments): 94,106 tasks before, one per operation and send now.

        A run is the same argument over its fine tasks (``perfmodel.sim.engine``
        ``_chain_runs``): its first gather waits on the anchor two back, its second on the
        anchor one back (both on the gather stream, in that order), its run task on the
        previous task and its first gather, the next gathers on the run task's pieces 2 and 4
        (two marks: :func:`~perfmodel.parallel.taskgraph.piece_end` of the fine graph), its
        lead on the run task's start (on the device's ``grad-lead`` stream), its summary
        reduction on its lead (on the reduction stream, in program order with the segments'
        reductions: the last one's end is still the largest). The pp 16 FSDP plans of the
        benchmark (dp2 tp32 pp16 and dp4 tp16 pp16 interleaved, micro-batch 8): 12,530 and
        12,434 tasks before, 3,122 now.

        Megatron-Core's first forward with overlapped ZeRO-1/2 gathers
        (:meth:`.HiddenCollectives.gather_runs`' other case, 1F1B) is the same recurrence on the
        same gather history without reductions, and takes a chain too, in a periodic extension's
        short schedule as well (:meth:`.HiddenCollectives.lower_gather_runs`; not where that
        schedule is lowered fine for the periodicity check, ``fine_gathers``)."""
        key = (id(plan), k)
        hit = self._chain_memo.get(key)
        if hit is None:
            hit = self._chain_memo[key] = self._chain_items(plan, k, ch, phase) or False
        return hit or None

    def _chain_items(self, plan: GatherPlan, k: int, ch: Chunk, phase: str) -> ChainTemplate | None:
        """:meth:`_chain_static` computed: its items (segments outside the runs, then runs, in
        operation order), longest compute and mark offsets, or ``None`` where refused."""
        rows, runs, _, specs = plan
        starts = {i0: i1 for i0, i1 in runs}
        if runs and not (self.tp_stream == "compute" and self.RUN_TASKS):
            return None  # a run not lowered as one operation task
        # a segment's (gather s, gather spec, compute s, then, reduction s, reduction spec):
        # _fine_segments' entries but for the labels and TP seconds (issue 27: a new
        # Megatron-Core plan's first forward made two label strings per bucket segment that
        # no chain reads, ~0.15 ms of a GPT-3 175B pp8 plan)
        fine = None if self.CHAIN_DIRECT else self._fine_segments(plan, k)
        op_tasks, overlap = self.op_tasks, self.tp_overlap
        classes = None if runs or fine is not None else self._chain_classes(rows, specs)
        if classes is None:
            reducing = any(r[4] for r in rows)
        else:  # a segment repeats its class's first segment's row
            reducing = any(rows[i][4] for i in classes[0])
        s = k % self.P
        gpu = self.gpu[s]
        g_stream, grad_stream = self.rc.param_gather.stream, self.rc.grad_comm.stream
        if g_stream == grad_stream:
            return None  # _chain tracks the gather and the reduction stream's free times apart
        segs = ch.segments if phase == "F" else tuple(reversed(ch.segments))
        items: list[ChainSegment | ChainRun] = []
        uniq = items  # each item object once (the groups below)
        flat = None  # ChainStatic works it out where not given
        c_max = 0.0
        marks = 0
        i = 0
        n = len(rows)
        if classes is not None:  # segments only: each class's item made once, then shared
            uniq = []
            for i in classes[0]:
                item = _row_segment(rows[i], specs[i], op_tasks, overlap)
                if item is None:
                    return None  # its TP not in its task
                uniq.append(item)
                if item.compute_s > c_max:  # over every segment the same: a repeat is never larger
                    c_max = item.compute_s
            items = [uniq[j] for j in classes[1]]
            marks = i = n
            if self.SHARED_FLAT:  # the few items' rows, indexed (ChainStatic.flat_given)
                uflat = flat_rows(uniq)
                flat = None if uflat is None else tuple([uflat[j] for j in classes[1]])
        while i < n:
            i1 = starts.get(i)
            if i1 is None:  # a segment: its gather, operation task and reduction
                if fine is None:  # _fine_segments' values, read here
                    item = _row_segment(rows[i], specs[i], op_tasks, overlap)
                else:
                    g_s, g_spec, c_s, then, _, _, red_s, r_spec, _, _ = fine[i]
                    item = _chain_segment(g_s, c_s, then, red_s, g_spec, r_spec)
                if item is None:
                    return None  # its TP not in its task
                items.append(item)
                if item.compute_s > c_max:  # max(c_max, c_s): the first of equal values kept
                    c_max = item.compute_s
                marks += 1
                i += 1
                continue
            # a run (_lower_run): its two gathers, run task (_run_task) and summary reduction
            if fine is None:
                g_s, g_spec = rows[i][3], specs[i][0]
                g1_s, g1_spec = rows[i + 1][3], specs[i + 1][0]
            else:
                g_s, g_spec = fine[i][0], fine[i][1]
                g1_s, g1_spec = fine[i + 1][0], fine[i + 1][1]
            *_, then_r, _, _, (lead_s, red_r, spec) = self._run_sums(plan, s, i, i1, segs)
            r_grp = spec.group if reducing else ()
            items.append(ChainRun(g_s, 0.0, then_r, red_r, g_spec.group, r_grp, g1_s,
                                  g1_spec.group, lead_s))  # fmt: skip
            c_max = max(c_max, max(then_r))
            marks += 2
            i = i1 + 1
        g_spec, r_spec = specs[0][0], specs[0][1]
        g_proto = Task(-1, TaskKind.COLLECTIVE, gpu, g_stream, 0.0, comm=g_spec)
        r_proto = Task(-1, TaskKind.COLLECTIVE, gpu, grad_stream, 0.0, comm=r_spec)
        lead = Task(-1, TaskKind.COMPUTE, gpu, "grad-lead", 0.0) if runs else None
        # every device of the groups, each distinct group read once (the segments share
        # one gather and one reduction group: a data-parallel group of 64 read ~600 times)
        groups = {id(g): g for it in uniq for g in (it.gather_group, it.reduce_group)}
        groups.update((id(it.gather1_group), it.gather1_group) for it in uniq
                      if type(it) is ChainRun)  # fmt: skip
        members = frozenset().union(*groups.values())
        static = ChainStatic(tuple(items), g_stream, grad_stream, reducing, g_proto, r_proto,
                             members, lead, flat)  # fmt: skip
        # marks >= 2 (three segments at least; a run gives two marks, a segment one)
        red = CHAIN + marks * SENT if reducing else 0
        two, one = CHAIN + (marks - 2) * SENT, CHAIN + (marks - 1) * SENT
        return static, c_max, two, one, red, len(items)

    def _chain_classes(
        self,
        rows: tuple[tuple[float, float, float, float, float, bool], ...],
        specs: tuple[tuple[CommSpec, CommSpec | None, float], ...],
    ) -> tuple[list[int], list[int]]:
        """A gather plan's segments grouped by their row and spec triple objects (one row key
        of :meth:`.HiddenCollectives._gather_walk`'s memo: a stack's bucket segments repeat with
        every block): the first segment of each class in order, and per segment its class's index.
        Kept per ``rows`` object (:attr:`SHARED_CLASSES`; else found per plan).

        The row object alone is read: in a walked plan a segment's row and spec triple are one
        entry of the walk's memo, each made afresh by :meth:`.HiddenCollectives._gather_row`, so
        two segments share their row exactly where they share their triple (issue 27: a key
        of both ids cost a tuple and its hash a segment, ~0.3 M instructions on a GPT-3 175B
        first stage of ~145 segments).

        Exact for every plan holding ``rows``: :meth:`.HiddenCollectives._gather_walk` makes each
        plan's rows tuple afresh, and only :meth:`.HiddenCollectives._gathers_like` shares it, with
        a spec triple per distinct triple object of the walked plan (made afresh each, so
        one-to-one): two segments share their triple there exactly where they shared it in the
        walked plan, and their row in both (:meth:`_chain_after`'s tails are slices of both).
        The memo keeps ``rows`` with its classes, so its id is not reused while the entry stands
        (a plan's tail that :meth:`_chain_after` made is one)."""
        kept = self._chain_classes_memo.get(id(rows)) if self.SHARED_CLASSES else None
        if kept is not None:  # the entry keeps rows: its id is not reused while it stands
            return kept[1]
        seen: dict[int, int] = {}
        firsts: list[int] = []
        index: list[int] = []
        for i, key in enumerate(map(id, rows)):  # a row's triple is one with it (above)
            j = seen.get(key)
            if j is None:
                j = seen[key] = len(firsts)
                firsts.append(i)
            index.append(j)
        classes = (firsts, index)
        self._chain_classes_memo[id(rows)] = (rows, classes)
        return classes


__all__ = ["ChainTemplate", "GatherChains", "GatherPlan"]
