"""Small I/O helpers: TOML/YAML/JSON loading with typed errors, atomic writes."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from perfmodel.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML file; a syntax error becomes a :class:`ConfigError` naming the file."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"file not found: {p}", value=str(p), where=str(p)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}", value=str(p), where=str(p)) from exc


def load_structured(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``.toml``, ``.json``, ``.yaml`` or ``.yml`` file into a dict (YAML needs PyYAML)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".toml":
        data: Any = load_toml(p)
    elif suffix == ".json":
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"file not found: {p}", value=str(p), where=str(p)) from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: invalid JSON: {exc}", value=str(p), where=str(p)) from exc
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ConfigError(
                f"{p}: reading YAML needs PyYAML (pip install 'perfmodel[yaml]'), or use TOML",
                value=str(p),
                where=str(p),
            ) from exc
        try:
            data = yaml.safe_load(p.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"file not found: {p}", value=str(p), where=str(p)) from exc
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
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
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
