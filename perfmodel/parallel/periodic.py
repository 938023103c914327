"""A pipeline step of identical micro-batches, lowered when (and only as far as) it is read.

A 1F1B step (plain or interleaved) of ``m`` identical micro-batches has 4,000-18,000 tasks for
GPT-3 175B on 1024 A100 (96 to 768 micro-batches per pipeline), but its list schedule is
eventually periodic: once the warm-up is over, every micro-batch's tasks (interleaved: every
round of ``pp`` micro-batches') start exactly one period ``lambda`` after the previous one's (a
max-plus linear system in its periodic regime, Baccelli et al., *Synchronization and
Linearity*, 1992, ch. 3). :class:`PeriodicGraph` holds the two ways to lower such a step:

* :meth:`PeriodicGraph.short`: the same step with a few micro-batches (``2 pp + 7``;
  interleaved: 12 rounds of ``pp``, 11 for pp 2; more for an eager host:
  :meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.periodic_count`), from which
  :func:`perfmodel.sim.engine.evaluate` extends the periodic regime to ``m`` micro-batches after checking it (docs/design.md, "The analytic
  executor's periodic extension"), so the analytic fast path's cost does not grow with the
  micro-batches;
* :attr:`PeriodicGraph.tasks` (and everything else a :class:`TaskGraph` has): the whole step,
  lowered on first read and kept. Traces, Gantt charts and any check that reads the tasks get
  exactly the graph the lowering always built.

:class:`LazyGraph` (the base) also holds a *coarse* graph of the same step, which the executors
run instead of the whole one: where nothing inside a chunk's segments can overlap with anything,
one compute task and one tensor-parallel collective per chunk and micro-batch instead of one
pair per segment (:meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.coarsenable`;
docs/design.md, "Stacks of segments as one task"). Its schedule equals the whole graph's up to
the summation order of the durations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfmodel._memo import made_once
from perfmodel.parallel.taskgraph import Task, TaskGraph

WINDOW_BACK = 3
"""Units from the periodicity check's window unit ``mid`` to the last of the run of shifted
copies ``j1`` (``mid = j1 - WINDOW_BACK``: the window reaches one period before ``mid`` and two
after it; :func:`perfmodel.sim.engine.periodic_timeline`), read by the check and by
:meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.periodic_count`."""


#: Issue 27: a short schedule keeps Megatron-Core's (and pipelined FSDP2's) first-forward
#: gather chains (``lower_hidden.lower_gather_runs``), which
#: :func:`perfmodel.sim.engine.periodic_timeline` accepts where the fine short schedule would give
#: the same decision and numbers, else it checks that one (:meth:`PeriodicGraph.fine_short`);
#: ``False``: every short schedule lowered fine, the direct path
#: (``tests/sim/test_periodic_chains.py`` compares the two).
PERIODIC_CHAINS = True


def window_gap(unit: int, pp: int) -> int:
    """Units the check needs from the warm-up's last unit ``j0`` to ``mid``: ``pp + 2`` for
    1F1B (``unit`` 1: the steady iterations around ``mid`` span ``pp`` micro-batches), 4 for
    interleaved 1F1B (units of ``pp`` micro-batches: steady blocks of three units)."""
    return pp + 2 if unit == 1 else 4


def short_limit(microbatches: int) -> int:
    """The most micro-batches a short schedule may have: 3/4 of the step's (beyond that the
    whole step costs little more)."""
    return 3 * microbatches // 4


class LazyGraph(TaskGraph):
    """A :class:`TaskGraph` whose tasks are lowered when first read, with a coarser graph of the
    same schedule for the executors (see the module docstring).

    Parameters
    ----------
    full
        Lowers the whole step, one task per segment (called at most once): what
        :attr:`tasks` returns, so traces, Gantt charts, Chakra export and any check that reads
        the tasks see the graph the lowering always built.
    coarse
        Lowers the coarse graph :func:`perfmodel.sim.engine.evaluate` and
        :func:`~perfmodel.sim.engine.simulate` execute (called at most once) and says whether
        it merged anything (if not, it is the whole graph too); ``None``: the whole one.
    multiplicity
        As :attr:`TaskGraph.multiplicity`.
    analytic
        Lowers the graph :func:`perfmodel.sim.engine.evaluate` (the analytic list schedule)
        executes instead of the coarse one (called at most once), and says whether it merged
        anything: the coarse graph with, in addition, the gradient reductions of a bucketed
        backward summarised (:meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.
        hidden_backward`), exact for the list schedule but not for the flow replay, whose
        collectives contend by their bytes and start times; ``None``: the coarse one.
    """

    def __init__(
        self,
        full: Callable[[], TaskGraph],
        coarse: Callable[[], tuple[TaskGraph, bool]] | None = None,
        *,
        multiplicity: int = 1,
        analytic: Callable[[], tuple[TaskGraph, bool]] | None = None,
    ) -> None:
        object.__setattr__(self, "multiplicity", multiplicity)
        object.__setattr__(self, "_lower_full", full)
        object.__setattr__(self, "_lower_coarse", coarse)
        object.__setattr__(self, "_lower_analytic", analytic)
        # each lowered once (made_once): the whole graph; the coarse and the analytic graphs,
        # each with whether it merged anything
        object.__setattr__(self, "_full", None)
        object.__setattr__(self, "_coarse", None)
        object.__setattr__(self, "_analytic", None)
        object.__setattr__(self, "_shorts", {})

    def full(self) -> TaskGraph:
        """The whole step's graph (lowered on the first call)."""
        return made_once(self, "_full", self._lower_full)

    def coarse(self) -> TaskGraph:
        """The whole step's coarse graph (lowered on the first call; :meth:`full` without a
        coarse lowering)."""
        if self._lower_coarse is None:
            return self.full()
        g, merged = made_once(self, "_coarse", self._lower_coarse)
        if not merged and self._full is None:  # nothing merged: the whole graph itself
            object.__setattr__(self, "_full", g)
        return g

    @property
    def merged(self) -> bool:
        """Whether the coarse graph differs from the whole one (lowers it if needed)."""
        if self._lower_coarse is None:
            return False
        self.coarse()
        return self._coarse[1]  # type: ignore[no-any-return]

    def analytic(self) -> TaskGraph:
        """The graph the analytic list schedule runs (lowered on the first call): the
        ``analytic`` lowering where one was given, else :meth:`coarse`."""
        if self._lower_analytic is None:
            return self.coarse()
        return made_once(self, "_analytic", self._lower_analytic)[0]  # type: ignore[no-any-return]

    @property
    def analytic_merged(self) -> bool:
        """Whether :meth:`analytic` differs from the whole graph (lowers it if needed)."""
        if self._lower_analytic is None:
            return self.merged
        self.analytic()
        return self._analytic[1]  # type: ignore[no-any-return]

    def _any(self) -> TaskGraph:
        """A graph already lowered (the same devices and notes), else the coarse one."""
        if self._full is not None:
            return self._full
        if self._coarse is not None:
            return self._coarse[0]  # type: ignore[no-any-return]
        if self._analytic is not None:
            return self._analytic[0]  # type: ignore[no-any-return]
        if self._shorts:
            return next(iter(self._shorts.values()))
        return self.coarse()

    @property
    def tasks(self) -> tuple[Task, ...]:  # type: ignore[override]
        return self.full().tasks

    @property
    def devices(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._any().devices

    @property
    def notes(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._any().notes

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the whole graph (the lowering closures do not pickle)."""
        g = self.full()
        return (TaskGraph, (g.tasks, g.devices, g.multiplicity, g.notes))


class PeriodicGraph(LazyGraph):
    """A :class:`LazyGraph` with short schedules (see the module docstring).

    Parameters
    ----------
    full, coarse, multiplicity, analytic
        As :class:`LazyGraph`.
    short
        ``short(k)`` lowers the same step with ``k`` micro-batches (same notes and devices;
        coarse where the step's coarse graph is).
    short_microbatches
        Micro-batches of the first short schedule to try (the check may ask for a longer one).
    microbatches
        The step's micro-batches ``m``.
    unit
        Micro-batches per period of the steady regime: 1 for 1F1B, ``pp`` for interleaved
        1F1B (each round runs ``pp`` micro-batches through every chunk; the operation order
        repeats with micro-batch ``j`` becoming ``j + pp``). ``short_microbatches`` and
        ``microbatches`` are multiples of it.
    fine_short
        ``fine_short(k)``: ``short(k)`` lowered without gather chains (:meth:`fine_short`;
        default ``short`` itself, for a lowering that makes none).
    """

    def __init__(
        self,
        full: Callable[[], TaskGraph],
        short: Callable[[int], TaskGraph],
        short_microbatches: int,
        microbatches: int,
        *,
        multiplicity: int = 1,
        coarse: Callable[[], tuple[TaskGraph, bool]] | None = None,
        unit: int = 1,
        analytic: Callable[[], tuple[TaskGraph, bool]] | None = None,
        fine_short: Callable[[int], TaskGraph] | None = None,
    ) -> None:
        super().__init__(full, coarse, multiplicity=multiplicity, analytic=analytic)
        assert not (short_microbatches % unit or microbatches % unit), "whole units only"
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "short_microbatches", short_microbatches)
        object.__setattr__(self, "microbatches", microbatches)
        object.__setattr__(self, "_lower_short", short)
        object.__setattr__(self, "_lower_fine", short if fine_short is None else fine_short)
        object.__setattr__(self, "_fine_shorts", {})  # fine_short's, by count

    def short(self, microbatches: int) -> TaskGraph:
        """The step with ``microbatches`` micro-batches (lowered once per count)."""
        g = self._shorts.get(microbatches)
        if g is None:
            g = self._shorts[microbatches] = self._lower_short(microbatches)
        return g

    def fine_short(self, microbatches: int) -> TaskGraph:
        """:meth:`short` lowered without gather chains (lowered once per count): the schedule
        the periodicity check reads where a chain might hide a fine task's decision
        (:func:`perfmodel.sim.engine.periodic_timeline`)."""
        g = self._fine_shorts.get(microbatches)
        if g is None:
            g = self._fine_shorts[microbatches] = self._lower_fine(microbatches)
        return g
