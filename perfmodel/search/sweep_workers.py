"""Where a sweep's scenarios are evaluated (:class:`Backend`): in this process, in local joblib
workers that end with the sweep, or on a dask cluster; one row per scenario
(:func:`evaluate_row`), an error row for a failed task. The sweep itself is
:mod:`perfmodel.search.sweep`.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from perfmodel._enum import ParsedEnum
from perfmodel.errors import ConfigError
from perfmodel.search._eval import Evaluator
from perfmodel.search.sweep_check import row_error


class Backend(str, ParsedEnum, where="--backend"):
    """Where scenarios are evaluated."""

    SERIAL = "serial"  # in this process
    JOBLIB = "joblib"  # local worker processes (loky)
    DASK = "dask"  # a dask.distributed cluster (optional extra)


def evaluate_row(
    evaluator: Evaluator, key: str, axis_values: Mapping[str, Any], scenario: Mapping[str, Any]
) -> dict[str, Any]:
    """Evaluate one scenario into a result row; an ``Exception`` becomes an error row.

    ``KeyboardInterrupt`` and ``SystemExit`` propagate (they are not scenario errors).
    """
    t0 = time.perf_counter()
    row: dict[str, Any] = {"key": key, "status": "ok", "error_type": None, "error": None}
    try:
        report = evaluator(scenario)
        row["report"] = dict(report)
    except Exception as exc:  # recorded per scenario, by design
        error = row_error(exc, axis_values)  # naming a spec's axis value as the spec's
        row.update(status="error", error_type=type(exc).__name__, error=error, report=None)
    row["elapsed_s"] = time.perf_counter() - t0
    row["axes"] = dict(axis_values)
    row["scenario"] = dict(scenario)
    return row


def _evaluate_chunk(
    evaluator: Evaluator, chunk: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]
) -> list[dict[str, Any]]:
    return [evaluate_row(evaluator, k, a, s) for k, a, s in chunk]


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def results_serial(
    evaluator: Evaluator, todo: Iterable[tuple[str, dict[str, Any], dict[str, Any]]]
) -> Iterator[list[dict[str, Any]]]:
    for k, a, s in todo:
        yield [evaluate_row(evaluator, k, a, s)]


def results_joblib(
    evaluator: Evaluator,
    todo: Iterable[tuple[str, dict[str, Any], dict[str, Any]]],
    jobs: int,
    chunk: int,
) -> Iterator[list[dict[str, Any]]]:
    from joblib import Parallel, delayed, parallel_config

    # every worker watches this process and exits when it is gone (killed with SIGKILL, say):
    # the worker processes then end, and with them loky's resource trackers, which unlink the
    # semaphores they registered in /dev/shm
    with parallel_config(backend="loky", initializer=_watch_parent, initargs=(os.getpid(),)):
        par = Parallel(n_jobs=jobs, return_as="generator_unordered", batch_size=1)
        yield from par(delayed(_evaluate_chunk)(evaluator, list(c)) for c in _chunks(todo, chunk))


#: Seconds between a worker's checks that the sweep process is still alive.
_PARENT_POLL_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    """Worker initializer: a daemon thread that ends the worker (``os._exit``) once
    ``parent_pid`` is no longer its parent (the sweep died; the worker was re-parented).

    ``os.getppid`` polling works on every POSIX system, unlike Linux's ``PR_SET_PDEATHSIG``.
    """
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    if os.getppid() == parent_pid:
        threading.Thread(target=watch, name="perfmodel-parent-watch", daemon=True).start()


def results_dask(
    evaluator: Evaluator,
    todo: Sequence[tuple[str, dict[str, Any], dict[str, Any]]],
    jobs: int,
    chunk: int,
    scheduler: str | None,
) -> Iterator[list[dict[str, Any]]]:
    """Chunks as ``dask.distributed`` tasks, yielded as they complete.

    A worker that dies mid-task (killed, out of memory) loses nothing: the scheduler runs its
    tasks again on another worker, and the client writes each chunk's rows once, when its result
    arrives. A chunk that keeps killing workers (``distributed.scheduler.allowed-failures``,
    default 3, exceeded: ``KilledWorker``) becomes error rows, which ``--retry-errors`` evaluates
    again.
    """
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise ConfigError(
            "--backend dask needs the optional dask extra: pip install 'perfmodel[dask]'",
            value="dask",
            where="--backend",
        ) from exc
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True)
        client = Client(cluster)
    try:
        chunks = {
            client.submit(_evaluate_chunk, evaluator, list(c), pure=False): list(c)
            for c in _chunks(todo, chunk)
        }
        for fut in as_completed(list(chunks)):
            try:
                rows = fut.result()
            except Exception as exc:  # the task itself failed (KilledWorker), not a scenario
                rows = [_task_error_row(exc, k, a, s) for k, a, s in chunks[fut]]
            yield rows
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def cap_workers(jobs: int, *, stream: TextIO | None, label: str = "sweep") -> int:
    """Local worker processes for ``--jobs``: ``-1`` is every CPU, and more than the CPU count
    is capped at it (more processes than cores only add start-up time and memory), with a
    message on ``stream``."""
    cpus = os.cpu_count() or 1
    if jobs == -1:
        return cpus
    if jobs > cpus:
        if stream is not None:
            stream.write(f"{label}: --jobs {jobs} capped at the {cpus} CPUs of this machine\n")
        return cpus
    return jobs


def worker_count(
    jobs: int, backend: Backend, scheduler: str | None, progress: TextIO | None
) -> int:
    """:func:`cap_workers` for a local pool; a remote dask scheduler is not capped (its
    workers are elsewhere)."""
    if backend is Backend.SERIAL or scheduler is not None:
        return (os.cpu_count() or 1) if jobs == -1 else jobs
    return cap_workers(jobs, stream=progress)


def _task_error_row(
    exc: BaseException, key: str, axis_values: Mapping[str, Any], scenario: Mapping[str, Any]
) -> dict[str, Any]:
    """An error row for a scenario whose task failed as a whole (its worker died)."""
    return {
        "key": key,
        "status": "error",
        "error_type": type(exc).__name__,
        "error": str(exc),
        "report": None,
        "elapsed_s": 0.0,
        "axes": dict(axis_values),
        "scenario": dict(scenario),
    }


__all__ = ["Backend", "cap_workers", "evaluate_row"]
