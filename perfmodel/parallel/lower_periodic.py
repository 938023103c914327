"""The periodic-schedule door of the lowering: how many micro-batches a short schedule lowers
(:meth:`PeriodicSchedules.periodic_count`), a schedule whose steady period
:func:`perfmodel.sim.engine.periodic_timeline` extends to the whole step
(:class:`~perfmodel.parallel.periodic.PeriodicGraph`). A door
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits beside
:class:`~perfmodel.parallel.lower_shortcuts.LoweringShortcuts` (moved out of that module,
issue 29, unchanged). The methods read the lowering's state (``self.plan``, ``self.P``,
``self.V``, ``self.m_step``, ``self.rc``, ``self.tp_stream``...), set by
``PipelineLowering.__init__``, and call its :meth:`issue_times`, :meth:`host_step_s` and
:meth:`chunk_sums` (:mod:`perfmodel.parallel.lower_hidden`). The tests compare the short
schedule's answer with the whole step's (``tests/sim/test_periodic.py``).
"""

from __future__ import annotations

from typing import Any

from perfmodel.parallel.periodic import WINDOW_BACK, short_limit, window_gap
from perfmodel.parallel.plan import PipelineSchedule
from perfmodel.parallel.schedule import warmup_forwards


class PeriodicSchedules:
    """Periodic schedules of a :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering`
    (see the module docstring)."""

    def periodic_count(self) -> int:
        """Micro-batches of the short schedule a
        :class:`~perfmodel.parallel.periodic.PeriodicGraph` tries first (0: lower the whole
        step). Only 1F1B (or one stage) and interleaved 1F1B, every micro-batch lowered alike
        (no ZeRO-2/3 or FSDP reductions and gathers per micro-batch: ``gather_every_mb``,
        ``reduce_every_mb``; pipelined FSDP2 gathers in the first micro-batch only and reduces
        after the last, as overlapped ZeRO-1, so it qualifies; no expert or context
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
        if not (one_f_one_b or u > 1) or self.owt or self.gather_every_mb:
            return 0
        if self.reduce_every_mb or plan.ep > 1 or plan.cp > 1:
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

    #: Whether :meth:`shared_sums` hands this lowering's chunk sums to its later lowerings
    #: (``False``: each sums the chunks itself; tests compare both ways).
    SHARE_SUMS = True

    def shared_sums(self) -> dict[int, Any] | None:
        """The memo of ``chunk_sums`` (``_sums``) for the lowerings of the same step that
        ``PipelineLowering.lower`` makes later (short schedules, the whole step, coarse or
        fine), or ``None`` (:attr:`SHARE_SUMS` off). ``chunk_rs_sum``'s memo is not shared:
        no case of ``tests/parallel/test_shared_sums.py`` summed a chunk there again.

        Exact: those lowerings take this lowering's chunk list itself (``chunks=``), and
        each entry is a sum over ``chunks[k].segments``' fields alone, in segment order,
        whatever the lowering's other settings: the same floats. Issue 27: a periodic
        step's short schedule summed its chunks again after :meth:`periodic_count` had
        (~0.7 M instructions on GPT-3 175B dp32 tp8 pp4, micro-batch size 1)."""
        low: Any = self
        return low._sums if self.SHARE_SUMS else None

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


__all__ = ["PeriodicSchedules"]
