"""Executing a :class:`~perfmodel.parallel.taskgraph.TaskGraph`: SimPy and the analytic fast path.

Both executors apply the same rule: a task starts when its stream (a capacity-one FIFO resource
in program order, as a CUDA stream) is free and all its dependencies have finished.

* :func:`simulate` builds a **fresh** ``simpy.Environment`` per call, one process per stream.
  Communication tasks are either timed by their closed-form duration or, with a ``network``
  (``perfmodel.comm.FlowNetwork`` adapter, see :class:`FlowComm`), replayed as flows over the
  topology's directed links with max-min fair sharing, so concurrent collectives and transfers
  (including symmetric sibling groups) contend for links.
* :func:`evaluate` is the analytic fast path: one pass over the tasks in id order (ids are a
  topological order that respects program order), no events. With closed-form communication
  it returns exactly what :func:`simulate` returns; it is what plan search uses.

Results are deterministic: no randomness, ties broken by task id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from perfmodel.parallel.taskgraph import CommSpec, Task, TaskGraph


@dataclass(frozen=True)
class Timeline:
    """Start and end time (seconds) of every task of a graph."""

    graph: TaskGraph
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    fidelity: str = "analytic"

    @property
    def makespan_s(self) -> float:
        return max(self.end_s, default=0.0)

    def records(self) -> list[tuple[Task, float, float]]:
        return [(t, self.start_s[t.tid], self.end_s[t.tid]) for t in self.graph.tasks]


class CommRunner(Protocol):
    """Plays one communication task inside a SimPy environment."""

    def run(self, spec: CommSpec, duration_s: float) -> simpy.Event: ...


def evaluate(graph: TaskGraph) -> Timeline:
    """Analytic list schedule of ``graph`` (no SimPy): ``start = max(stream free, deps end)``.

    >>> from perfmodel.parallel.taskgraph import GraphBuilder, TaskKind
    >>> b = GraphBuilder()
    >>> a = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    >>> c = b.add(TaskKind.COLLECTIVE, "g0", "dp", 2.0, [a])
    >>> d = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [a])
    >>> evaluate(b.build()).end_s
    (1.0, 3.0, 2.0)
    """
    n = len(graph.tasks)
    start = [0.0] * n
    end = [0.0] * n
    free: dict[tuple[str, str], float] = {}
    free_get = free.get
    for t in graph.tasks:
        key = (t.device, t.stream)
        s = free_get(key, 0.0)
        for d in t.deps:
            e = end[d]
            if e > s:
                s = e
        tid = t.tid
        start[tid] = s
        e = s + t.duration_s
        end[tid] = e
        free[key] = e
    return Timeline(graph, tuple(start), tuple(end), "analytic")


def simulate(
    graph: TaskGraph,
    *,
    network_factory: Callable[[simpy.Environment], CommRunner] | None = None,
) -> Timeline:
    """Execute ``graph`` in a fresh SimPy environment.

    Parameters
    ----------
    network_factory
        Builds the communication runner for the new environment (e.g. a
        :class:`FlowComm` over ``perfmodel.comm.FlowNetwork``). ``None``: communication tasks
        take their closed-form ``duration_s``.
    """
    env = simpy.Environment()
    runner = network_factory(env) if network_factory is not None else None
    n = len(graph.tasks)
    done = [env.event() for _ in range(n)]
    start = [0.0] * n
    end = [0.0] * n

    def stream_proc(tids: list[int]) -> Any:
        for tid in tids:
            task = graph.tasks[tid]
            pending = [done[d] for d in task.deps if not done[d].processed]
            if len(pending) == 1:
                yield pending[0]
            elif pending:
                yield env.all_of(pending)
            start[tid] = env.now
            if runner is not None and task.comm is not None:
                yield runner.run(task.comm, task.duration_s)
            elif task.duration_s > 0:
                yield env.timeout(task.duration_s)
            end[tid] = env.now
            done[tid].succeed()

    for _, tids in sorted(graph.streams().items(), key=lambda kv: kv[1][0]):
        env.process(stream_proc(tids))
    env.run()
    missing = [t.tid for t in graph.tasks if not done[t.tid].processed]
    if missing:  # pragma: no cover - a lowering bug (cyclic wait)
        raise RuntimeError(f"simulation deadlocked; {len(missing)} tasks never ran")
    return Timeline(graph, tuple(start), tuple(end), "simulated")


class FlowComm:
    """Adapter: run :class:`CommSpec` tasks on ``perfmodel.comm``'s flow-level network.

    Each collective of the spec's group and of its ``siblings`` is started with
    ``perfmodel.comm.run_collective`` on one shared ``FlowNetwork``; the task finishes when the
    representative group's collective finishes (siblings keep loading the links meanwhile).
    Point-to-point specs (``sendrecv`` with a two-endpoint group) use ``FlowNetwork.send`` (the
    closed form's latency, counted once).

    Parameters
    ----------
    env, topology, link_params
        The environment of this simulation, the system and its link overrides.
    max_group
        Collectives over more ranks than this keep their closed-form duration (the analytic
        sharing factor already covers their siblings). Replaying them is cheap now (one flow
        per ring channel), but each sibling group needs its own ring analysis: for the
        128-rank data-parallel groups of Llama-3 405B on 16,384 H100 that is ~7 s CPU for an
        identical iteration time (9.8968 s either way).
    coarse
        ``True`` (default): each ring channel is one flow over all its links carrying the
        channel's bytes (``run_collective(..., coarse=True)``), so a collective costs a few
        flow events instead of ``2 (n - 1)`` steps x ``n`` hops x sub-chunks. Exact where the
        ring's links carry nothing else (it is the closed form), within 1% of the step-by-step
        replay under contention in the tests (docs/design.md, "Coarsening of the step
        simulation"). ``False``: the chunk-by-chunk replay, kept as the reference.
    chunks
        Sub-chunks per ring step of the chunk-by-chunk replay (``run_collective``'s).
    model
        The ``CommCostModel`` that timed the graph's tasks: its links and cached group
        analyses (ring channels) are reused instead of being rebuilt for this environment.
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Any,
        link_params: Any = None,
        *,
        max_group: int = 16,
        coarse: bool = True,
        chunks: int = 4,
        model: Any = None,
    ) -> None:
        from perfmodel import comm

        self.env = env
        self.max_group = max_group
        self.coarse = coarse
        self.chunks = chunks
        self.net = comm.FlowNetwork(env, topology, link_params=link_params, model=model)
        self._run_collective = comm.run_collective

    def run(self, spec: CommSpec, duration_s: float) -> simpy.Event:
        if spec.wait_s > 0:
            return self.env.process(self._after_wait(spec, duration_s))
        return self._start(spec, duration_s)

    def _after_wait(self, spec: CommSpec, duration_s: float) -> Any:
        yield self.env.timeout(spec.wait_s)
        yield self._start(spec, max(duration_s - spec.wait_s, 0.0))

    def _start(self, spec: CommSpec, duration_s: float) -> simpy.Event:
        from perfmodel.ops import CollectiveOp

        if spec.op is CollectiveOp.SENDRECV and len(spec.group) == 2:
            main = self.net.send(spec.group[0], spec.group[1], spec.message_bytes)
            for g in spec.siblings:
                self.net.send(g[0], g[1], spec.message_bytes)
            return main
        if len(spec.group) > self.max_group or not spec.message_bytes > 0:
            # a zero-byte collective (e.g. expert gradients with nothing to reduce) moves nothing
            return self.env.timeout(duration_s)
        run, kw = self._run_collective, {"coarse": self.coarse, "chunks": self.chunks}
        main = run(self.net, spec.op, spec.message_bytes, spec.group, spec.algorithm, **kw)
        for g in spec.siblings:
            run(self.net, spec.op, spec.message_bytes, g, spec.algorithm, **kw)
        return main
