"""Sweeps: evaluate a grid of scenarios in parallel, stream results, resume after interruption.

A sweep file (TOML, YAML or JSON) holds a base scenario and the keys to vary::

    [base]                      # any perfmodel.api.Scenario keys
    system = "dgx1-v100"
    model = "resnet50"
    batch_per_gpu = 64

    [axes]                      # full grid (Cartesian product), in file order
    gpus = [1, 2, 4, 8]
    precision = ["fp32", "fp16"]
    "model_args.depth" = [50, 101]   # dotted keys reach into nested tables

    [zip]                       # optional: lists of equal length varied together (one axis)
    system = ["dgx1-v100", "dgx-a100"]
    network = ["ib-edr", "ib-hdr"]

Every scenario is keyed by :meth:`perfmodel.api.Scenario.content_hash` (``key_fn``). The output
(``.jsonl`` or ``.csv``) is appended one complete line per finished scenario with a single
``os.write`` on an ``O_APPEND`` descriptor, flushed to the kernel at once and ``fsync``-ed at
least every second and at the end. On start, an existing output is read back: its keys are
skipped (no recomputation), and a trailing partial line (a process killed mid-write) is cut off,
so the file never holds a half-written row. Ctrl-C stops the workers; every row already written
stays, and running the same command again finishes the rest.

An axis value that no grid point can run (an unknown system or model, a GPU count the
hardware does not have) is refused before the output is opened, naming the spec file and the
axis (:mod:`perfmodel.search.sweep_check`). Errors per scenario (a plan that does not divide,
out of memory, a bug) become rows with ``status = "error"`` and the message (naming the axis
whose value it refuses); they never stop the sweep.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from perfmodel._io import load_structured
from perfmodel.errors import ConfigError
from perfmodel.scenario import HARDWARE_FIELDS
from perfmodel.search._eval import Evaluator, KeyFunction, default_evaluator, default_key
from perfmodel.search.sweep_check import builds_scenarios, check_spec, set_dotted
from perfmodel.search.sweep_file import (
    INTERVAL_COLUMNS,
    REPORT_COLUMNS,
    ROW_COLUMNS,
    OutputFormat,
    RowWriter,
    drop_error_rows,
    load_results,
    open_output,
    read_done_keys,
    scan_output,
)
from perfmodel.search.sweep_workers import (
    Backend,
    evaluate_row,
    results_dask,
    results_joblib,
    results_serial,
    worker_count,
)

#: Scenario keys that choose the hardware (:func:`perfmodel.api.topology_of`'s cache key and
#: the profile): :meth:`SweepSpec.points` ``(grouped=True)`` varies them slowest.
HARDWARE_KEYS = frozenset({*HARDWARE_FIELDS, "calibration"})


@dataclass(frozen=True)
class SweepSpec:
    """A base scenario and the axes to vary.

    Attributes
    ----------
    base
        Scenario keys shared by every point.
    axes
        ``(dotted key, values)`` pairs; the grid is their Cartesian product in this order.
    zipped
        ``(dotted key, values)`` pairs of equal length varied together (one extra axis).
    source
        Where the spec came from (file path), for error messages.
    """

    base: Mapping[str, Any]
    axes: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    zipped: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    source: str = "<sweep>"

    def __post_init__(self) -> None:
        for name, values in (*self.axes, *self.zipped):
            if not name or not isinstance(name, str) or not all(name.split(".")):
                raise ConfigError(
                    f"{self.source}: bad axis name {name!r}", value=name, where=self.source
                )
            if len(values) == 0:
                raise ConfigError(
                    f"{self.source}: axis {name!r} has no values",
                    value=name,
                    where=f"{self.source}:{name}",
                )
        lengths = {len(v) for _, v in self.zipped}
        if len(lengths) > 1:
            raise ConfigError(
                f"{self.source}: [zip] lists must have equal lengths, got "
                + ", ".join(f"{k}={len(v)}" for k, v in self.zipped),
                value={k: len(v) for k, v in self.zipped},
                where=f"{self.source}:zip",
            )
        names = [n for n, _ in (*self.axes, *self.zipped)]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(
                f"{self.source}: key(s) {sorted(dup)} vary twice",
                value=sorted(dup),
                where=self.source,
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "<sweep>") -> SweepSpec:
        """Build from a mapping with ``base``, ``axes`` and optional ``zip`` tables."""
        unknown = set(data) - {"base", "axes", "zip"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown top-level key(s) {sorted(unknown)}; expected base, axes, zip",
                value=sorted(unknown),
                where=where,
            )
        base = data.get("base", {})
        if not isinstance(base, Mapping):
            raise ConfigError(f"{where}: [base] must be a table", value=base, where=f"{where}:base")

        def pairs(table: Any, name: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
            if table is None:
                return ()
            if not isinstance(table, Mapping):
                raise ConfigError(
                    f"{where}: [{name}] must be a table", value=table, where=f"{where}:{name}"
                )
            out = []
            for k, v in table.items():
                if not isinstance(v, list | tuple):
                    raise ConfigError(
                        f"{where}: {name}.{k} must be a list of values, got {v!r}",
                        value=v,
                        where=f"{where}:{name}.{k}",
                    )
                out.append((str(k), tuple(v)))
            return tuple(out)

        axes, zipped = pairs(data.get("axes"), "axes"), pairs(data.get("zip"), "zip")
        if not base and not axes and not zipped:  # an empty file or one of comments only
            raise ConfigError(
                f"{where}: the sweep names no scenario; give a [base] table and/or [axes] / "
                "[zip] lists",
                value=dict(data),
                where=where,
            )
        return cls(dict(base), axes, zipped, where)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SweepSpec:
        """Read a ``.toml``, ``.yaml`` or ``.json`` sweep file."""
        return cls.from_dict(load_structured(path), where=str(path))

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in (*self.axes, *self.zipped))

    def __len__(self) -> int:
        n = math.prod(len(v) for _, v in self.axes)
        if self.zipped:
            n *= len(self.zipped[0][1])
        return n

    def points(self, *, grouped: bool = False) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """Yield ``(axis values, scenario dict)`` for every grid point, lazily, in order.

        ``grouped``: the same points in the order of :meth:`grouped_axes` (the axes that name the
        hardware outermost), so that consecutive points, and the points of one task of a
        parallel sweep, share their system's topology and cost tables (issue 27: a grid whose
        innermost axis was ``nodes`` built a topology for nearly every point, its cache holding
        64). The axis values keep the file's key order."""
        names = [n for n, _ in self.axes]
        zip_rows: list[tuple[Any, ...]] = (
            list(zip(*(v for _, v in self.zipped))) if self.zipped else [()]
        )
        zip_names = [n for n, _ in self.zipped]
        # one coordinate per axis (file order), the zipped lists last as one more
        coords: list[Sequence[Any]] = [v for _, v in self.axes] + [range(len(zip_rows))]
        order = self.grouped_axes() if grouped else list(range(len(coords)))
        for combo in itertools.product(*(coords[i] for i in order)):
            at = dict(zip(order, combo))
            axis_values = {n: at[i] for i, n in enumerate(names)}
            axis_values.update(zip(zip_names, zip_rows[at[len(names)]]))
            yield axis_values, self.point(axis_values)

    def point(self, axis_values: Mapping[str, Any]) -> dict[str, Any]:
        """The scenario dict of the grid point with ``axis_values``: a deep copy of
        :attr:`base` with each (dotted) axis key set (:func:`set_dotted`)."""
        sc = json.loads(json.dumps(dict(self.base)))  # deep copy of plain data
        for k, v in axis_values.items():
            set_dotted(sc, k, v)
        return sc

    def grouped_axes(self) -> list[int]:
        """The axes (indices into :attr:`axes`; ``len(axes)`` is the zipped lists) from the
        outermost to the innermost of :meth:`points` ``(grouped=True)``: those naming a key of
        :data:`HARDWARE_KEYS` first, then the others, each in file order."""
        keys = [[n] for n, _ in self.axes] + [[n for n, _ in self.zipped]]

        def hardware(names: list[str]) -> bool:
            return any(n.split(".")[0] in HARDWARE_KEYS for n in names)

        return sorted(range(len(keys)), key=lambda i: not hardware(keys[i]))


@dataclass(frozen=True)
class SweepSummary:
    """What a :func:`run_sweep` call did."""

    output: str
    total: int  # grid points
    unique: int  # distinct keys among them
    already_done: int  # found in the output and skipped
    evaluated: int  # evaluated and written by this call
    errors: int  # error rows written by this call
    interrupted: bool
    elapsed_s: float
    repaired_bytes: int = 0  # partial trailing line cut from the output on start
    key_errors: int = 0  # grid points whose key could not be computed (written as error rows)

    @property
    def remaining(self) -> int:
        return self.unique - self.already_done - self.evaluated

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "remaining": self.remaining}


class _Progress:
    """Progress on a stream: in-place on a terminal, a line every few seconds otherwise."""

    def __init__(self, stream: TextIO | None, total: int, done: int) -> None:
        self.stream = stream
        self.total = total
        self.start_done = done
        self.done = done
        self.errors = 0
        self.t0 = time.monotonic()
        self.last = 0.0
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())

    def update(self, n_rows: int, n_errors: int) -> None:
        self.done += n_rows
        self.errors += n_errors
        now = time.monotonic()
        if self.stream is None or now - self.last < (0.2 if self.tty else 5.0):
            return
        self.last = now
        self._emit(final=False)

    def _emit(self, *, final: bool) -> None:
        assert self.stream is not None
        el = time.monotonic() - self.t0
        rate = (self.done - self.start_done) / el if el > 0 else 0.0
        left = self.total - self.done
        eta = f", ETA {left / rate:.0f} s" if rate > 0 and left > 0 else ""
        msg = (
            f"sweep: {self.done}/{self.total} done ({self.errors} errors this run), "
            f"{rate:.1f} scenarios/s{eta}"
        )
        end = "\n" if (final or not self.tty) else ""
        self.stream.write(("\r" if self.tty else "") + msg + end)
        self.stream.flush()

    def finish(self) -> None:
        if self.stream is not None:
            self._emit(final=True)


class _TodoState:
    """What :func:`_stream_todo` has seen so far (read by :func:`run_sweep` as it goes)."""

    def __init__(self, done: set[str]) -> None:
        self.done = done
        self.seen: set[str] = set()
        self.total = 0  # grid points read
        self.already = 0  # distinct keys found in the output
        self.skipped = 0  # points skipped (done or duplicate) since the last progress update
        # key errors waiting to be written (a deque: joblib may read the points from its thread)
        self.error_rows: collections.deque[dict[str, Any]] = collections.deque()
        self.key_errors = 0  # key errors found


def _stream_todo(
    pts: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
    kf: KeyFunction,
    state: _TodoState,
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Yield ``(key, axis values, scenario)`` for every point still to evaluate, lazily.

    Keys are computed as the workers ask for points, so the first rows are written at once
    however large the grid; duplicates and points already in the output are skipped, and a
    point whose key cannot be computed becomes an error row in ``state.error_rows``.
    """
    for axis_values, sc in pts:
        state.total += 1
        key_error: Exception | None = None
        try:
            key = kf(sc)
        except Exception as exc:  # a bad scenario is an error row
            key, key_error = "invalid:" + _fallback_key(sc), exc
        if key in state.seen:
            state.skipped += 1
            continue
        state.seen.add(key)
        if key in state.done:
            state.already += 1
            state.skipped += 1
            continue
        if key_error is not None:
            row = {
                "key": key,
                "status": "error",
                "error_type": type(key_error).__name__,
                "error": str(key_error),
            }
            row.update(report=None, elapsed_s=0.0, axes=dict(axis_values), scenario=dict(sc))
            state.error_rows.append(row)
            state.key_errors += 1
            continue
        yield key, dict(axis_values), dict(sc)


def run_sweep(
    points: SweepSpec | Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]],
    output: str | os.PathLike[str],
    *,
    jobs: int = 1,
    backend: Backend | str = Backend.JOBLIB,
    scheduler: str | None = None,
    evaluator: Evaluator | None = None,
    key_fn: KeyFunction | None = None,
    progress: TextIO | None = sys.stderr,
    retry_errors: bool = False,
    chunk_size: int | None = None,
    axis_names: Sequence[str] | None = None,
) -> SweepSummary:
    """Evaluate every grid point not yet in ``output`` and append its row.

    Parameters
    ----------
    points
        A :class:`SweepSpec`, or ``(axis values, scenario dict)`` pairs.
    output
        ``.jsonl`` or ``.csv``; created, or resumed if it exists.
    jobs
        Worker processes (``joblib``/``dask``); ``-1`` is all cores (joblib).
    backend
        :class:`Backend` (``serial``, ``joblib``, ``dask``). ``jobs=1`` with ``joblib`` runs serially.
    scheduler
        ``dask.distributed`` scheduler address; ``None`` starts a local cluster of ``jobs`` workers.
    evaluator
        Scenario dict -> report dict (default: :func:`perfmodel.api.predict`).
    key_fn
        Scenario dict -> key (default: ``Scenario.content_hash``).
    progress
        Stream for progress lines (``None``: silent).
    retry_errors
        Evaluate again the scenarios whose earlier rows are errors.
    chunk_size
        Scenarios per task sent to a worker (default: ``len/(8 jobs)`` clipped to 1..256).
    axis_names
        Column names for CSV when ``points`` is not a :class:`SweepSpec` (default: the first
        point's axis keys).

    Returns
    -------
    SweepSummary
        Counts. ``KeyboardInterrupt`` (Ctrl-C) is caught: the rows written so far stay, the
        workers stop, and the summary has ``interrupted=True`` (the CLI exits 130).
    """
    t0 = time.monotonic()
    out = Path(output)
    fmt = OutputFormat.for_path(out)
    be = Backend.parse(backend) if isinstance(backend, str) else backend
    if not isinstance(jobs, int) or jobs == 0 or jobs < -1:
        raise ConfigError(
            f"--jobs must be a positive integer or -1, got {jobs!r}", value=jobs, where="--jobs"
        )
    ev = evaluator or default_evaluator
    kf = key_fn or default_key
    if isinstance(points, SweepSpec):
        names = list(points.axis_names)
        # hardware axes slowest: consecutive points (a worker's task) share topology and tables
        pts: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]] = points.points(grouped=True)
    else:
        pts = list(points)
        names = list(axis_names) if axis_names is not None else (list(pts[0][0]) if pts else [])
    if isinstance(points, SweepSpec) and builds_scenarios(evaluator):
        check_spec(points)  # bad axis values refused before the output is touched
    fd, done, repaired = _resume(out, retry_errors, names)
    if repaired and progress is not None:
        progress.write(f"sweep: cut a partial last line ({repaired} bytes) from {out}\n")
    n_jobs = worker_count(jobs, be, scheduler, progress)
    n_points = len(points) if isinstance(points, SweepSpec) else len(pts)  # type: ignore[arg-type]
    state = _TodoState(done)
    todo = _stream_todo(pts, kf, state)
    if be is Backend.JOBLIB and n_jobs == 1:
        be = Backend.SERIAL
    size = chunk_size or max(1, min(256, n_points // (8 * max(n_jobs, 1)) or 1))
    if be is Backend.SERIAL:
        results = results_serial(ev, todo)
    elif be is Backend.JOBLIB:
        results = results_joblib(ev, todo, n_jobs, size)
    else:
        results = results_dask(ev, todo, n_jobs, size, scheduler)
    writer = RowWriter(fd, out, fmt, names)
    prog = _Progress(progress, n_points, 0)
    evaluated, errors, interrupted = _write_rows(results, writer, state, prog)
    seen, already, total = state.seen, state.already, state.total
    summary = SweepSummary(
        output=str(out),
        total=total,
        unique=len(seen),
        already_done=already,
        evaluated=evaluated,
        errors=errors,
        interrupted=interrupted,
        elapsed_s=time.monotonic() - t0,
        repaired_bytes=repaired,
        key_errors=state.key_errors,
    )
    if interrupted and progress is not None:
        progress.write(
            f"sweep: interrupted; {already + evaluated} of {n_points} rows are in {out}. "
            "Run the same command again to finish the rest.\n"
        )
    return summary


def _resume(out: Path, retry_errors: bool, names: Sequence[str]) -> tuple[int, set[str], int]:
    """The output opened and locked for appending, the keys already in it and the bytes of a
    torn last line cut off; its error rows dropped first with ``retry_errors``. A file this
    call created is removed again when reading it fails."""
    existed = out.exists()
    fd = open_output(out)
    try:
        done, repaired, n_err = scan_output(fd, out, retry_errors=retry_errors, axis_names=names)
        if retry_errors and n_err:
            fd = drop_error_rows(fd, out)
    except BaseException:
        os.close(fd)
        if not existed:
            out.unlink(missing_ok=True)
        raise
    return fd, done, repaired


def _write_rows(
    results: Iterator[list[dict[str, Any]]], writer: RowWriter, state: _TodoState, prog: _Progress
) -> tuple[int, int, bool]:
    """Write every result row as it arrives, and the rows of scenarios that failed before
    evaluation (``state.error_rows``); ``(rows written, error rows, interrupted)``. Ctrl-C
    stops the loop; the writer is closed and the progress line finished either way."""
    evaluated = errors = 0
    interrupted = False

    def drain() -> None:
        nonlocal evaluated, errors
        n = 0
        while state.error_rows:
            writer.write(state.error_rows.popleft())
            n += 1
        evaluated += n
        errors += n
        skipped, state.skipped = state.skipped, 0
        prog.update(n + skipped, n)

    try:
        for rows in results:
            n_err = 0
            for row in rows:
                writer.write(row)
                evaluated += 1
                n_err += row["status"] == "error"
            errors += n_err
            prog.update(len(rows), n_err)
            drain()
        drain()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        writer.close()
        prog.finish()
    return evaluated, errors, interrupted


def _fallback_key(scenario: Mapping[str, Any]) -> str:
    from perfmodel.search._eval import canonical_key

    return canonical_key(scenario)


__all__ = [
    "INTERVAL_COLUMNS",
    "REPORT_COLUMNS",
    "ROW_COLUMNS",
    "Backend",
    "OutputFormat",
    "SweepSpec",
    "SweepSummary",
    "evaluate_row",
    "load_results",
    "read_done_keys",
    "run_sweep",
]
