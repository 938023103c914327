"""A sweep's output file (``.jsonl`` or ``.csv``): its columns, the locked descriptor rows are
appended to one complete line at a time, and reading it back on resume (the keys already done,
a torn last line cut off, error rows dropped for a retry). The sweep itself is
:mod:`perfmodel.search.sweep`.
"""

from __future__ import annotations

import csv
import enum
import io
import json
import math
import os
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfmodel._io import (
    atomic_write,
    check_output_path,
    decode_text,
    os_error_message,
)
from perfmodel.errors import ConfigError, FileAccessError

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
#: with ``--interval off`` or another evaluator. The epoch (run-time) range the JSONL row has
#: and the interval's warning are columns too (audit15 item 16: the CSV dropped them).
INTERVAL_COLUMNS: tuple[str, ...] = (
    "iteration_time_s_low",
    "iteration_time_s_high",
    "throughput_samples_per_s_low",
    "throughput_samples_per_s_high",
    "epoch_time_s_low",
    "epoch_time_s_high",
    "interval_level",
    "interval_basis",
    "interval_warning",
)


#: Every report column of a CSV row.
ROW_COLUMNS: tuple[str, ...] = (*REPORT_COLUMNS, *INTERVAL_COLUMNS)


_META_COLUMNS = ("key", "status", "error_type", "error", "elapsed_s")


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


class OutputLockedError(FileAccessError):
    """Another process holds the advisory lock of a sweep output (two sweeps writing one file)."""


def open_output(path: str | os.PathLike[str]) -> int:
    """Open a sweep output for reading and appending, and take its advisory lock.

    The path is checked first (:func:`perfmodel._io.check_output_path`: not a folder, device or
    FIFO, writable); the file is created empty if missing and never truncated here. The lock is
    ``fcntl.flock(LOCK_EX | LOCK_NB)`` on the open file (Linux and macOS; held until the
    descriptor is closed, also when the process is killed): a second sweep on the same file
    stops with :class:`OutputLockedError` instead of interleaving rows, after a grace of
    :data:`LOCK_GRACE_S` (a child process forked by the sweep that held the file, e.g. a dask
    nanny restarting a killed worker, shares the open file and its lock from ``fork`` until its
    ``exec`` closes the ``O_CLOEXEC`` descriptor: Linux ``flock(2)``, locks belong to the open
    file description; ``multiprocessing`` "spawn" is ``fork`` + ``exec`` on POSIX).

    Returns
    -------
    int
        The descriptor (``O_RDWR | O_APPEND``), locked.
    """
    p = check_output_path(path, where="-o", suffixes=tuple(OUTPUT_SUFFIXES))
    try:
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


#: Seconds a sweep retries a held output lock before :class:`OutputLockedError` (every
#: :data:`_LOCK_RETRY_S`): long enough for a forked child to reach ``exec`` on a loaded machine,
#: short against any real sweep holding the file.
LOCK_GRACE_S = 2.0
_LOCK_RETRY_S = 0.05


def _lock(fd: int, p: Path, grace_s: float = LOCK_GRACE_S) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory lock
        return
    deadline = time.monotonic() + grace_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError as exc:
            if time.monotonic() < deadline:
                time.sleep(_LOCK_RETRY_S)
                continue
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


class RowWriter:
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
    :func:`scan_output` for how it is recognised as a sweep output before anything is cut.

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
        keys, repaired, _ = scan_output(fd, p, retry_errors=retry_errors, axis_names=axis_names)
    finally:
        os.close(fd)
    return keys, repaired


def scan_output(
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
                raise foreign(_header_difference(header, expected), 1)
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


def _header_difference(header: Sequence[str], expected: Sequence[str]) -> str:
    """What a CSV header differs in from this sweep's columns (``expected``), for
    :func:`scan_output`'s refusal: the columns it lacks and those it has that this sweep does
    not write, else the order; a file whose missing columns are all report columns
    (:data:`ROW_COLUMNS`) was written by another perfmodel version (a CSV written before
    session 14 lacks ``epoch_time_s_low``/``_high`` and ``interval_warning``), and its rows
    cannot be resumed under this header."""
    missing = [c for c in expected if c not in header]
    extra = [c for c in header if c not in expected]
    parts = []
    if missing:
        parts.append(f"lacks column(s) {', '.join(missing)}")
    if extra:
        parts.append(f"has column(s) {', '.join(extra)} this sweep does not write")
    if not parts:
        parts.append(f"orders its columns {list(header)}, this sweep {list(expected)}")
    what = "; ".join(parts)
    version = (missing or extra) and all(c in ROW_COLUMNS for c in [*missing, *extra])
    why = (
        " (written by another perfmodel version: its report columns differ from this one's)"
        if version
        else " (another sweep's axes)"
    )
    return f"CSV header differs from this sweep's columns: the file {what}{why}"


def _is_prefix(tail: bytes, start: bytes, *, full_ok: bool) -> bool:
    """``tail`` is a torn start of a line beginning with ``start`` (or, ``full_ok``, longer)."""
    if len(tail) <= len(start):
        return start.startswith(tail)
    return full_ok and tail.startswith(start)


def drop_error_rows(fd: int, path: Path) -> int:
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
    "OutputFormat",
    "OutputLockedError",
    "load_results",
    "open_output",
    "read_done_keys",
]
