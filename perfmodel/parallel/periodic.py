"""A pipeline step of identical micro-batches, lowered when (and only as far as) it is read.

A 1F1B step of ``m`` identical micro-batches has 4,000-18,000 tasks for GPT-3 175B on 1024 A100
(96 to 768 micro-batches per pipeline), but its list schedule is eventually periodic: once the
warm-up is over, every micro-batch's tasks start exactly one period ``lambda`` after the previous
micro-batch's (a max-plus linear system in its periodic regime, Baccelli et al., *Synchronization
and Linearity*, 1992, ch. 3). :class:`PeriodicGraph` holds the two ways to lower such a step:

* :meth:`PeriodicGraph.short`: the same step with a few micro-batches (``2 pp + 8``), from
  which :func:`perfmodel.sim.engine.evaluate` extends the periodic regime to ``m`` micro-batches
  after checking it (docs/design.md, "Coarsening"), so the analytic fast path's cost does not
  grow with the micro-batches;
* :attr:`PeriodicGraph.tasks` (and everything else a :class:`TaskGraph` has): the whole step,
  lowered on first read and kept. The SimPy simulation, traces, Gantt charts and any check
  that reads the tasks get exactly the graph the lowering always built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfmodel.parallel.taskgraph import Task, TaskGraph


class PeriodicGraph(TaskGraph):
    """A :class:`TaskGraph` lowered lazily, with its short schedules (see the module docstring).

    Parameters
    ----------
    full
        Lowers the whole step (called at most once).
    short
        ``short(k)`` lowers the same step with ``k`` micro-batches (same notes and devices).
    short_microbatches
        Micro-batches of the first short schedule to try (the check may ask for a longer one).
    microbatches
        The step's micro-batches ``m``.
    multiplicity
        As :attr:`TaskGraph.multiplicity`.
    """

    def __init__(
        self,
        full: Callable[[], TaskGraph],
        short: Callable[[int], TaskGraph],
        short_microbatches: int,
        microbatches: int,
        *,
        multiplicity: int = 1,
    ) -> None:
        object.__setattr__(self, "multiplicity", multiplicity)
        object.__setattr__(self, "short_microbatches", short_microbatches)
        object.__setattr__(self, "microbatches", microbatches)
        object.__setattr__(self, "_lower_full", full)
        object.__setattr__(self, "_lower_short", short)
        object.__setattr__(self, "_full", None)
        object.__setattr__(self, "_shorts", {})

    def full(self) -> TaskGraph:
        """The whole step's graph (lowered on the first call)."""
        g = self._full
        if g is None:
            g = self._lower_full()
            object.__setattr__(self, "_full", g)
        return g

    def short(self, microbatches: int) -> TaskGraph:
        """The step with ``microbatches`` micro-batches (lowered once per count)."""
        g = self._shorts.get(microbatches)
        if g is None:
            g = self._shorts[microbatches] = self._lower_short(microbatches)
        return g

    def _any(self) -> TaskGraph:
        """The whole graph if lowered, else a short one (the same devices and notes)."""
        if self._full is not None:
            return self._full
        if self._shorts:
            return next(iter(self._shorts.values()))
        return self.full()

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
