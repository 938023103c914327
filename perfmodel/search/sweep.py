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

Errors per scenario (a plan that does not divide, an unknown GPU, a bug) become rows with
``status = "error"`` and the message; they never stop the sweep.
"""

from __future__ import annotations

import collections
import csv
import enum
import io
import itertools
import json
import math
import os
import stat
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from perfmodel._enum import parse_enum
from perfmodel._io import (
    atomic_write,
    check_output_path,
    decode_text,
    load_structured,
    os_error_message,
)
from perfmodel.errors import ConfigError, FileAccessError
from perfmodel.search._eval import Evaluator, KeyFunction, default_evaluator, default_key

#: Scenario keys that choose the hardware (:func:`perfmodel.api.topology_of`'s cache key and
#: the profile): :meth:`SweepSpec.points` ``(grouped=True)`` varies them slowest.
HARDWARE_KEYS = frozenset(
    {
        "system",
        "nodes",
        "network",
        "nics_per_node",
        "gpu",
        "gpus_per_node",
        "intra_node",
        "fabric_topology",
        "oversubscription",
        "nccl",
        "calibration",
    }
)

#: Report fields written as CSV columns (the scalar part of ``StepReport.to_dict()``).
REPORT_COLUMNS: tuple[str, ...] = (
    "iteration_time_s",
    "throughput_samples_per_s",
    "epoch_time_s",
    "speedup",
    "scaling_efficiency",
    "compute_time_s",
    "exposed_comm_time_s",
    "bubble_time_s",
    "memory_per_gpu_bytes",
    "fits_in_memory",
    "model_flops_per_gpu_per_s",
    "mfu",
    "printed_notes",  # the notes every view prints (a JSON list in a CSV cell; issue 28)
)
#: The prediction interval's fields a CSV row carries after :data:`REPORT_COLUMNS`
#: (``sweep --interval``, :func:`perfmodel.search._eval.interval_evaluator`; issue 26): empty
#: with ``--interval off`` or another evaluator.
INTERVAL_COLUMNS: tuple[str, ...] = (
    "iteration_time_s_low",
    "iteration_time_s_high",
    "throughput_samples_per_s_low",
    "throughput_samples_per_s_high",
    "interval_level",
    "interval_basis",
)
#: Every report column of a CSV row.
ROW_COLUMNS: tuple[str, ...] = (*REPORT_COLUMNS, *INTERVAL_COLUMNS)
_META_COLUMNS = ("key", "status", "error_type", "error", "elapsed_s")


class Backend(str, enum.Enum):
    """Where scenarios are evaluated."""

    SERIAL = "serial"  # in this process
    JOBLIB = "joblib"  # local worker processes (loky)
    DASK = "dask"  # a dask.distributed cluster (optional extra)

    @classmethod
    def parse(cls, text: str, *, where: str = "--backend") -> Backend:
        return parse_enum(cls, text, where=where)


class OutputFormat(str, enum.Enum):
    JSONL = "jsonl"
    CSV = "csv"

    @classmethod
    def for_path(cls, path: str | os.PathLike[str]) -> OutputFormat:
        suffix = Path(path).suffix.lower()
        if suffix in OUTPUT_SUFFIXES:
            return OUTPUT_SUFFIXES[suffix]
        raise ConfigError(
            f"output {path}: unsupported extension {suffix!r} (use .jsonl or .csv)",
            value=str(path),
            where="-o",
        )


#: Output file extensions and their formats.
OUTPUT_SUFFIXES = {
    ".jsonl": OutputFormat.JSONL,
    ".ndjson": OutputFormat.JSONL,
    ".csv": OutputFormat.CSV,
}


def _set_dotted(d: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.get(p)
        nxt = dict(nxt) if isinstance(nxt, Mapping) else {}
        cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


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

        return cls(
            dict(base), pairs(data.get("axes"), "axes"), pairs(data.get("zip"), "zip"), where
        )

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
            sc = json.loads(json.dumps(dict(self.base)))  # deep copy of plain data
            for k, v in axis_values.items():
                _set_dotted(sc, k, v)
            yield axis_values, sc

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
        row.update(status="error", error_type=type(exc).__name__, error=str(exc), report=None)
    row["elapsed_s"] = time.perf_counter() - t0
    row["axes"] = dict(axis_values)
    row["scenario"] = dict(scenario)
    return row


def _evaluate_chunk(
    evaluator: Evaluator, chunk: Sequence[tuple[str, dict[str, Any], dict[str, Any]]]
) -> list[dict[str, Any]]:
    return [evaluate_row(evaluator, k, a, s) for k, a, s in chunk]


class OutputLockedError(FileAccessError):
    """Another process holds the advisory lock of a sweep output (two sweeps writing one file)."""


def open_output(path: str | os.PathLike[str]) -> int:
    """Open a sweep output for reading and appending, and take its advisory lock.

    The path is checked first (:func:`perfmodel._io.check_output_path`: not a folder, device or
    FIFO, writable); the file is created empty if missing and never truncated here. The lock is
    ``fcntl.flock(LOCK_EX | LOCK_NB)`` on the open file (Linux and macOS; held until the
    descriptor is closed, also when the process is killed): a second sweep on the same file
    stops at once with :class:`OutputLockedError` instead of interleaving rows.

    Returns
    -------
    int
        The descriptor (``O_RDWR | O_APPEND``), locked.
    """
    p = check_output_path(path, where="-o", suffixes=tuple(OUTPUT_SUFFIXES))
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise FileAccessError(
            f"-o {p}: cannot open: {os_error_message(exc)}", value=str(p), where="-o"
        ) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # pragma: no cover - checked above; a race
            raise FileAccessError(f"-o {p}: not a regular file", value=str(p), where="-o")
        _lock(fd, p)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(fd: int, p: Path) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory lock
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise OutputLockedError(
            f"-o {p}: another perfmodel sweep is writing this file (advisory lock held); "
            "wait for it or write to another file",
            value=str(p),
            where="-o",
        ) from exc


def _read_fd(fd: int) -> bytes:
    chunks = []
    pos = 0
    while True:
        b = os.pread(fd, 1 << 20, pos)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        pos += len(b)


class _RowWriter:
    """Append complete lines to the output with one ``os.write`` each; fsync at most every second.

    ``fd`` is the locked descriptor of :func:`open_output` (closed by :meth:`close`).
    """

    def __init__(self, fd: int, path: Path, fmt: OutputFormat, axis_names: Sequence[str]) -> None:
        self.path = path
        self.fmt = fmt
        self.columns = (*_META_COLUMNS, *axis_names, *ROW_COLUMNS)
        self.fd = fd
        self.last_sync = time.monotonic()
        if fmt is OutputFormat.CSV and os.fstat(fd).st_size == 0:
            self._write(self._csv_line(self.columns))

    def _csv_line(self, values: Sequence[Any]) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        return buf.getvalue()

    def _write(self, text: str) -> None:
        data = text.encode()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        if time.monotonic() - self.last_sync > 1.0:
            os.fsync(self.fd)
            self.last_sync = time.monotonic()

    def write(self, row: Mapping[str, Any]) -> None:
        if self.fmt is OutputFormat.JSONL:
            line = json.dumps(row, default=_json_default, separators=(",", ":")) + "\n"
        else:
            report = row.get("report") or {}
            axes = row.get("axes") or {}
            values = []
            for c in self.columns:
                if c in _META_COLUMNS:
                    v = row.get(c)
                elif c in ROW_COLUMNS and c in report:
                    v = report.get(c)
                else:
                    v = axes.get(c)
                values.append(
                    ""
                    if v is None
                    else v
                    if isinstance(v, str | int | float | bool)
                    else json.dumps(v)
                )
            line = self._csv_line(values)
        self._write(line)

    def close(self) -> None:
        try:
            os.fsync(self.fd)
        finally:
            os.close(self.fd)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):  # pragma: no cover - json handles it
        return None
    return str(obj)


def read_done_keys(
    path: str | os.PathLike[str],
    *,
    retry_errors: bool = False,
    axis_names: Sequence[str] | None = None,
) -> tuple[set[str], int]:
    """Keys already in a results file, after cutting off a trailing partial line.

    The file is locked (:func:`open_output`) while it is read and repaired; see
    :func:`_scan_output` for how it is recognised as a sweep output before anything is cut.

    Parameters
    ----------
    path
        ``.jsonl`` or ``.csv`` results file (missing: nothing done).
    retry_errors
        Leave error rows out of the done set so they are evaluated again (their old rows stay).
    axis_names
        For CSV: the expected axis columns; a header that differs is a :class:`ConfigError`
        (the file belongs to another sweep).

    Returns
    -------
    (keys, repaired_bytes)
        ``repaired_bytes`` is how much of a partial last line was removed.
    """
    p = Path(path)
    if not p.exists():
        return set(), 0
    fd = open_output(p)
    try:
        keys, repaired, _ = _scan_output(fd, p, retry_errors=retry_errors, axis_names=axis_names)
    finally:
        os.close(fd)
    return keys, repaired


def _scan_output(
    fd: int,
    p: Path,
    *,
    retry_errors: bool,
    axis_names: Sequence[str] | None,
) -> tuple[set[str], int, int]:
    """Read the locked output ``fd``: recognise it as this sweep's output, then cut a torn last line.

    Nothing is modified unless the whole file is recognised first: every complete line must
    be UTF-8 and a result row (JSONL: a JSON object with ``key`` and ``status``; CSV: this
    sweep's header, then rows of its width), and a trailing partial line must be a prefix of
    what this writer writes (``{"key":`` or the header). A file that fails any of these is
    refused with a :class:`FileAccessError` and left byte-for-byte as it was.

    Returns
    -------
    (keys, repaired_bytes, error_rows)
    """
    fmt = OutputFormat.for_path(p)
    data = _read_fd(fd)
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    text = decode_text(data[:cut], p, where="-o")
    expected = [*_META_COLUMNS, *(axis_names or ()), *ROW_COLUMNS]

    def foreign(reason: str, line: int | None = None) -> FileAccessError:
        at = f"{p}:{line}" if line else str(p)
        return FileAccessError(
            f"-o {at}: {reason}; this is not an output of this sweep, so it is left as it is "
            "(write to another file)",
            value=str(p),
            where="-o",
        )

    keys: set[str] = set()
    n_err = 0
    lines = text.splitlines()
    if fmt is OutputFormat.JSONL:
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key, status = row["key"], row["status"]
                if not isinstance(key, str):
                    raise TypeError(f"key {key!r} is not text")
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise foreign(f"not a sweep result row ({exc})", i) from exc
            n_err += status == "error"
            if retry_errors and status == "error":
                continue
            keys.add(key)
        prefix = '{"key":'
        ok_tail = not tail or _is_prefix(tail, prefix.encode(), full_ok=True)
    else:
        rows = list(csv.reader(io.StringIO(text)))
        if rows:
            header = rows[0]
            if header[:2] != ["key", "status"]:
                raise foreign(f"not a sweep results CSV (header {header[:3]})", 1)
            if axis_names is not None and header != expected:
                raise foreign(
                    f"CSV header {header} differs from this sweep's columns {expected}", 1
                )
            for i, row in enumerate(rows[1:], 2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise foreign(f"row of {len(row)} fields under a header of {len(header)}", i)
                n_err += row[1] == "error"
                if retry_errors and row[1] == "error":
                    continue
                keys.add(row[0])
            ok_tail = True  # a torn row after a recognised header
        else:
            ok_tail = not tail or _is_prefix(tail, ",".join(expected).encode(), full_ok=False)
    if tail and not ok_tail:
        raise foreign("its only line is not a sweep row or header", 1)
    repaired = 0
    if tail:
        os.ftruncate(fd, cut)
        repaired = len(tail)
    return keys, repaired, n_err


def _is_prefix(tail: bytes, start: bytes, *, full_ok: bool) -> bool:
    """``tail`` is a torn start of a line beginning with ``start`` (or, ``full_ok``, longer)."""
    if len(tail) <= len(start):
        return start.startswith(tail)
    return full_ok and tail.startswith(start)


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


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _results_serial(
    evaluator: Evaluator, todo: Iterable[tuple[str, dict[str, Any], dict[str, Any]]]
) -> Iterator[list[dict[str, Any]]]:
    for k, a, s in todo:
        yield [evaluate_row(evaluator, k, a, s)]


def _results_joblib(
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


def _results_dask(
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


def _worker_count(
    jobs: int, backend: Backend, scheduler: str | None, progress: TextIO | None
) -> int:
    """:func:`cap_workers` for a local pool; a remote dask scheduler is not capped (its
    workers are elsewhere)."""
    if backend is Backend.SERIAL or scheduler is not None:
        return (os.cpu_count() or 1) if jobs == -1 else jobs
    return cap_workers(jobs, stream=progress)


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

    existed = out.exists()
    fd = open_output(out)
    try:
        done, repaired, n_err = _scan_output(fd, out, retry_errors=retry_errors, axis_names=names)
        if retry_errors and n_err:
            fd = _drop_error_rows(fd, out)
    except BaseException:
        os.close(fd)
        if not existed:
            out.unlink(missing_ok=True)
        raise
    if repaired and progress is not None:
        progress.write(f"sweep: cut a partial last line ({repaired} bytes) from {out}\n")
    n_jobs = _worker_count(jobs, be, scheduler, progress)
    n_points = len(points) if isinstance(points, SweepSpec) else len(pts)  # type: ignore[arg-type]
    state = _TodoState(done)
    todo = _stream_todo(pts, kf, state)
    if be is Backend.JOBLIB and n_jobs == 1:
        be = Backend.SERIAL
    size = chunk_size or max(1, min(256, n_points // (8 * max(n_jobs, 1)) or 1))
    writer = _RowWriter(fd, out, fmt, names)
    prog = _Progress(progress, n_points, 0)
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
        if be is Backend.SERIAL:
            results = _results_serial(ev, todo)
        elif be is Backend.JOBLIB:
            results = _results_joblib(ev, todo, n_jobs, size)
        else:
            results = _results_dask(ev, todo, n_jobs, size, scheduler)
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


def _drop_error_rows(fd: int, path: Path) -> int:
    """Rewrite the locked output without its error rows (before they are evaluated again).

    The new content is written beside the file and renamed over it (``os.replace``: a kill
    leaves the old or the new file, never a mix); the new file is opened and locked before the
    old descriptor (and its lock) is closed. Returns the new locked descriptor.
    """
    fmt = OutputFormat.for_path(path)
    lines = decode_text(_read_fd(fd), path, where="-o").splitlines(keepends=True)
    if fmt is OutputFormat.JSONL:
        keep = [ln for ln in lines if ln.strip() and json.loads(ln).get("status") != "error"]
    else:
        keep = lines[:1] + [
            ln for ln in lines[1:] if next(csv.reader([ln]), ["", ""])[1] != "error"
        ]
    if len(keep) == len(lines):
        return fd
    with atomic_write(path) as fh:
        fh.writelines(keep)
    try:
        new_fd = open_output(path)
    finally:
        os.close(fd)
    return new_fd


def _fallback_key(scenario: Mapping[str, Any]) -> str:
    from perfmodel.search._eval import canonical_key

    return canonical_key(scenario)


def load_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a ``.jsonl`` results file back into rows (CSV: dicts of strings)."""
    p = Path(path)
    fmt = OutputFormat.for_path(p)
    try:
        text = p.read_text()
    except FileNotFoundError as exc:
        raise ConfigError(f"file not found: {p}", value=str(p), where=str(p)) from exc
    if fmt is OutputFormat.JSONL:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return list(csv.DictReader(io.StringIO(text)))


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
