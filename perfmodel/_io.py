"""Small I/O helpers: the one place files are opened for reading (typed errors naming the file),
output-path checks, TOML/YAML/JSON loading, atomic writes.

Every file the CLI reads goes through :func:`read_bytes` or :func:`read_text`: an OS error (not
found, a folder, no permission, a name too long, a symlink loop), a device or FIFO where a file is
expected, and a decoding error become a :class:`~perfmodel.errors.FileAccessError` naming the
file (and the line of a bad byte). Every file the CLI writes is checked first by
:func:`check_output_path` (before any work, before an existing file is touched).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from perfmodel.errors import ConfigError, FileAccessError, PerfModelError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


#: Largest file the CLI reads into memory (bytes): far above any topology, profile, log or
#: results file perfmodel writes, and it stops a typo such as ``/dev/zero`` from eating memory.
MAX_INPUT_BYTES = 2**31


def os_error_message(exc: OSError) -> str:
    """A short reason for an OS error on a path (``"is a directory"``, ``"permission denied"``).

    >>> os_error_message(IsADirectoryError(21, "Is a directory"))
    'is a directory, expected a file'
    """
    reasons = {
        errno.ENOENT: "not found",
        errno.EISDIR: "is a directory, expected a file",
        errno.ENOTDIR: "a component of the path is not a directory",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.ENAMETOOLONG: "file name too long",
        errno.ELOOP: "too many levels of symbolic links",
        errno.EROFS: "read-only file system",
        errno.ENOSPC: "no space left on device",
        errno.EEXIST: "already exists",
    }
    return reasons.get(exc.errno or 0, (exc.strerror or str(exc)).lower())


#: Suffixes of a system given as a file (``--system box.toml`` / ``.json``): the TOML a user
#: writes and the JSON ``topo show --json`` / ``topo import --json`` writes
#: (:mod:`perfmodel.topology.files` reads them).
SYSTEM_FILE_SUFFIXES = (".toml", ".json")


def file_stamp(path: str) -> tuple[str, int, int] | None:
    """``(real path, modification time in ns, size in bytes)`` of ``path``, ``None`` if it
    cannot be read (the loader raises its own error naming the file).

    Part of every cache key a file feeds (a calibration profile, a system file, a record): a
    file rewritten on disk (``perfmodel calibrate`` again, a hand edit) is read again instead
    of served stale, and the same relative name in another folder is another file.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), st.st_mtime_ns, st.st_size)


def system_file_stamp(system: str) -> tuple[str, int, int] | None:
    """:func:`file_stamp` of a system given as a file (a :data:`SYSTEM_FILE_SUFFIXES` name),
    ``None`` for a catalogue name or a file that cannot be read.

    Part of every cache key a system file feeds (the topology, the speedup baselines, whole
    reports): the same relative name in another folder, or the file edited in place ("edit the
    file as you measure", docs/topology.md), is another system; a name alone served the first
    file's machine again.
    """
    if os.path.splitext(system)[1].lower() not in SYSTEM_FILE_SUFFIXES:
        return None
    return file_stamp(system)


def read_bytes(path: str | os.PathLike[str], *, where: str | None = None) -> bytes:
    """The bytes of a regular file; every failure is a :class:`FileAccessError` naming it.

    Parameters
    ----------
    path
        The file.
    where
        What named the file (a flag such as ``--calibration``), added to the message.
    """
    p = Path(path)
    label = f"{where} {p}" if where else str(p)
    try:
        if stat.S_ISFIFO(os.stat(p).st_mode):  # open() would wait for a writer
            raise FileAccessError(
                f"{label}: not a regular file (a FIFO)", value=str(p), where=str(p)
            )
        with p.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISDIR(st.st_mode):  # pragma: no cover - open() already refuses it on Linux
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise FileAccessError(
                    f"{label}: not a regular file (a device, FIFO or socket)",
                    value=str(p),
                    where=str(p),
                )
            if st.st_size > MAX_INPUT_BYTES:
                raise FileAccessError(
                    f"{label}: {st.st_size} bytes is larger than the {MAX_INPUT_BYTES} bytes "
                    "perfmodel reads",
                    value=st.st_size,
                    where=str(p),
                )
            return fh.read()
    except FileNotFoundError as exc:
        raise FileAccessError(f"{label}: file not found", value=str(p), where=str(p)) from exc
    except OSError as exc:
        raise FileAccessError(
            f"{label}: cannot read: {os_error_message(exc)}", value=str(p), where=str(p)
        ) from exc


def decode_text(data: bytes, path: str | os.PathLike[str], *, where: str | None = None) -> str:
    """UTF-8 text of a file's bytes (a leading BOM is dropped); a bad byte is a
    :class:`FileAccessError` naming the file, line and column."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        label = f"{where} {path}" if where else str(path)
        raise FileAccessError(
            f"{label}:{line}:{col}: not UTF-8 text (byte 0x{data[exc.start]:02x}); "
            "save the file as UTF-8",
            value=str(path),
            where=f"{path}:{line}",
        ) from exc


def read_text(path: str | os.PathLike[str], *, where: str | None = None) -> str:
    """The UTF-8 text of a regular file (see :func:`read_bytes` and :func:`decode_text`)."""
    return decode_text(read_bytes(path, where=where), path, where=where)


def read_jsonl(path: str | os.PathLike[str], *, where: str | None = None) -> list[dict]:
    """The JSON objects of a JSONL file, one per non-blank line.

    Raises
    ------
    ConfigError
        A line that is not JSON, or not a JSON object, naming the file and the line.
    """
    return [row for _, row in read_jsonl_numbered(path, where=where)]


def read_jsonl_numbered(
    path: str | os.PathLike[str], *, where: str | None = None
) -> list[tuple[int, dict]]:
    """Like :func:`read_jsonl`, each object with its 1-based line number (for error messages)."""
    return parse_jsonl_numbered(read_text(path, where=where), where=str(path))


def parse_jsonl_numbered(text: str, *, where: str) -> list[tuple[int, dict]]:
    """The JSON objects of JSONL ``text``, one per non-blank line, each with its 1-based line
    number; ``where`` names the text (a file) in errors.

    >>> parse_jsonl_numbered('{"a": 1}\\n\\n{"b": 2}\\n', where="x.jsonl")
    [(1, {'a': 1}), (3, {'b': 2})]
    >>> parse_jsonl_numbered("[1]", where="x.jsonl")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: x.jsonl:1: expected a JSON object, got list

    Raises
    ------
    ConfigError
        A line that is not JSON, or not a JSON object, naming ``where`` and the line
        (``where`` of the error ``"<where>:<line>"``, ``value`` the line's first 80 characters).
    """
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{where}:{i}: invalid JSON: {exc}", value=line[:80], where=f"{where}:{i}"
            ) from exc
        if not isinstance(row, dict):
            raise ConfigError(
                f"{where}:{i}: expected a JSON object, got {type(row).__name__}",
                value=line[:80],
                where=f"{where}:{i}",
            )
        rows.append((i, row))
    return rows


def check_output_path(
    path: str | os.PathLike[str],
    *,
    where: str = "-o",
    directory: bool = False,
    suffixes: tuple[str, ...] | None = None,
) -> Path:
    """Check, before any work, that ``path`` can be written as the command expects.

    A file output must not be a folder, a device or a FIFO (``/dev/full``), nor a symlink loop,
    and it is refused if it exists read-only; a folder output (``directory=True``) must not be a
    file. A file's folder must exist (audit15 item 12: ``--trace /nonexistent/x.json`` made
    ``/nonexistent/``): a missing one is refused, naming it; a folder output's missing folders
    are made by its writer (``output_dir``: documented), so there the nearest existing ancestor
    must be a writable folder. ``suffixes``: the extensions the output may have (lower case,
    with the dot).

    Returns
    -------
    Path
        ``path`` as a :class:`Path`.

    Raises
    ------
    FileAccessError
        Naming the path, the flag (``where``) and the reason.
    """
    p = Path(path)

    def fail(reason: str) -> FileAccessError:
        label = f"{where} {p}" if where else str(p)
        return FileAccessError(f"{label}: {reason}", value=str(p), where=where or str(p))

    if not str(p).strip():
        raise fail("empty path")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise fail(f"unsupported extension {p.suffix!r} (use {', '.join(suffixes)})")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise fail(os_error_message(exc)) from exc
    if st is not None:
        if directory:
            if not stat.S_ISDIR(st.st_mode):
                raise fail("exists and is not a directory")
            if not os.access(p, os.W_OK | os.X_OK):
                raise fail("directory is not writable")
            return p
        if stat.S_ISDIR(st.st_mode):
            raise fail("is a directory, expected a file")
        if not stat.S_ISREG(st.st_mode):
            raise fail("is not a regular file (a device, FIFO or socket)")
        if not os.access(p, os.W_OK):
            raise fail("file is not writable")
    parent = p.absolute().parent
    while True:
        try:
            pst = os.stat(parent)
        except FileNotFoundError:
            if not directory:
                raise fail(f"folder {parent} does not exist (create it first)") from None
            if parent.parent == parent:  # pragma: no cover - the root always exists
                raise fail("no existing parent folder") from None
            parent = parent.parent
            continue
        except OSError as exc:
            raise fail(f"parent {parent}: {os_error_message(exc)}") from exc
        break
    if not stat.S_ISDIR(pst.st_mode):
        raise fail(f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise fail(f"folder {parent} is not writable")
    return p


@contextmanager
def output_lock(path: str | os.PathLike[str], *, where: str = "-o") -> Iterator[None]:
    """Hold an advisory lock on an output that is rewritten atomically (a calibration profile)
    for the whole command, so two processes never read-modify-write it at once.

    The file is replaced by ``os.replace`` on every save, so the lock lives on a companion file
    ``.NAME.lock`` beside it (``fcntl.flock(LOCK_EX | LOCK_NB)``), which the holder removes
    when it is done, failed or not, so no empty ``.NAME.lock`` is left beside the output
    (issue 28). Removing a lock file is safe with the usual check: after ``flock`` succeeds the
    holder compares the path's inode with the one it locked, and starts again when another
    holder has removed (and so released) that file in between. A second process raises
    :class:`FileAccessError` at once. No-op where ``fcntl`` is missing.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    p = Path(path)
    lock = p.absolute().parent / f".{p.name}.lock"
    created = not lock.parent.exists()
    fd = -1
    for _ in range(100):  # another holder removing its file between our open and flock
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise FileAccessError(
                f"{where} {p}: cannot create the lock {lock.name}: {os_error_message(exc)}",
                value=str(p),
                where=where,
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise FileAccessError(
                f"{where} {p}: another perfmodel process is writing this file (lock {lock.name} "
                "held); wait for it or write to another file",
                value=str(p),
                where=where,
            ) from exc
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # we locked a file its holder had just removed: lock the new one
        fd = -1
    if fd < 0:  # pragma: no cover - a hundred holders in a row
        raise FileAccessError(
            f"{where} {p}: the lock {lock.name} keeps changing", value=str(p), where=where
        )
    try:
        yield
    finally:
        try:
            os.unlink(lock)  # while holding it: a newcomer then locks a fresh file
        except OSError:
            pass
        os.close(fd)
        if created:  # a folder made only for the lock, nothing else written in it
            try:
                lock.parent.rmdir()
            except OSError:
                pass


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML file; an OS, decoding or syntax error becomes a :class:`ConfigError` naming
    the file."""
    p = Path(path)
    return parse_toml(read_text(p), p)


def parse_toml(text: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse TOML text read from ``path``; a syntax error becomes a :class:`ConfigError` naming
    the file."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", value=str(path), where=str(path)) from exc


def parse_json(
    text: str | bytes, path: str | os.PathLike[str], *, error: type[PerfModelError] = ConfigError
) -> Any:
    """Parse JSON text read from ``path``; a syntax error becomes ``error`` naming the file
    (``"<path>: invalid JSON: <reason> (line, column)"``, ``value`` and ``where`` the path), as
    :func:`parse_toml` does for TOML.

    >>> parse_json('{"a": [1, 2]}', "x.json")
    {'a': [1, 2]}
    >>> parse_json("{", "x.json")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: x.json: invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: invalid JSON: {exc}", value=str(path), where=str(path)) from exc


def load_structured(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``.toml``, ``.json``, ``.yaml`` or ``.yml`` file into a dict (YAML needs PyYAML)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".toml":
        data: Any = load_toml(p)
    elif suffix == ".json":
        data = parse_json(read_text(p), p)
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ConfigError(
                f"{p}: reading YAML needs PyYAML (pip install 'perfmodel[yaml]'), or use TOML",
                value=str(p),
                where=str(p),
            ) from exc
        text = read_text(p)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: invalid YAML: {exc}", value=str(p), where=str(p)) from exc
    else:
        raise ConfigError(
            f"{p}: unsupported file type {suffix!r} (use .toml, .yaml or .json)",
            value=str(p),
            where=str(p),
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: top level must be a table/mapping, got {type(data).__name__}",
            value=str(p),
            where=str(p),
        )
    return data


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Write a file atomically: write to a temporary file beside it, then ``os.replace``.

    Nothing half-written is ever left at ``path``: on an exception the temporary file is removed.
    An OS error of the temporary file (a folder the user cannot write, a full disk) is raised
    naming ``path``, the file the user asked for. No folder is made: a missing one raises
    :class:`~perfmodel.errors.FileAccessError` naming it (audit15 item 12: a typo in an output
    path made folders); a writer of a folder output makes that folder itself.
    """
    p = Path(path)
    if not p.absolute().parent.is_dir():
        raise FileAccessError(
            f"{p}: folder {p.absolute().parent} does not exist (create it first)",
            value=str(p),
            where=str(p),
        )
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:  # named by the user's path, not the temporary file's (issue 28)
        raise OSError(exc.errno, exc.strerror, str(p)) from exc
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        try:
            os.replace(tmp, p)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(p)) from exc
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename in (None, tmp) and exc.errno is not None:
            # a full disk or a lost folder, named by the user's path
            raise OSError(exc.errno, exc.strerror, str(p)) from exc
        raise


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask without changing it where the OS says it (Linux ``/proc/self/status``,
    kernel >= 4.7); elsewhere set and restore it under a lock, so threads of this module never
    see the temporary 0."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0)
        os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Serialise ``data`` as indented JSON to ``path`` atomically."""
    with atomic_write(path) as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=_json_default)
        fh.write("\n")


def _json_default(obj: Any) -> Any:
    import dataclasses
    import enum

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
