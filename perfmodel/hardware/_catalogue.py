"""Machinery shared by the GPU, link and CPU catalogues (``gpus.py``, ``links.py``, ``cpus.py``).

Each catalogue is a TOML file holding an array of tables (``[[gpu]]``, ``[[link]]``, ``[[cpu]]``);
each table becomes a frozen spec with a canonical ``name`` and case-insensitive ``aliases``. This
module reads the file, checks keys, numbers and sources with errors naming the entry and the bad
value, indexes names and aliases, and looks names up with close-match hints.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

import tomllib

from perfmodel._io import load_toml, read_text
from perfmodel.errors import ConfigError, UnknownHardwareError


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...


S = TypeVar("S", bound=_Named)


def number(
    entry: Mapping[str, Any], key: str, where: str, *, sign: str | None = "positive"
) -> float:
    """``entry[key]`` as a finite float; ConfigError naming the key and value otherwise.

    ``sign`` is ``"positive"``, ``"non-negative"`` or ``None`` (any finite number).
    """
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {key} = {value!r} is not a number", value=value, where=where)
    v = float(value)
    if sign is None:
        if not math.isfinite(v):
            raise ConfigError(
                f"{where}: {key} = {value!r} is not a number", value=value, where=where
            )
        return v
    if not math.isfinite(v) or (sign == "positive" and v <= 0) or v < 0:
        raise ConfigError(f"{where}: {key} = {value!r} must be {sign}", value=value, where=where)
    return v


def integer(entry: Mapping[str, Any], key: str, where: str, *, sign: str = "positive") -> int:
    """``entry[key]`` as an int (see :func:`number`); ConfigError if it has a fraction."""
    v = number(entry, key, where, sign=sign)
    if v != int(v):
        raise ConfigError(
            f"{where}: {key} = {entry[key]!r} must be an integer", value=entry[key], where=where
        )
    return int(v)


def check_keys(
    entry: Mapping[str, Any], required: Iterable[str], allowed: Iterable[str], where: str
) -> None:
    """ConfigError on a key outside ``allowed`` (all listed) or the first missing required key."""
    unknown = set(entry) - set(allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}", value=sorted(unknown), where=where
        )
    for key in required:
        if key not in entry:
            raise ConfigError(f"{where}: missing key {key!r}", value=key, where=where)


def source_table(entry: Mapping[str, Any], where: str) -> MappingProxyType[str, str]:
    """The entry's ``sources`` table, frozen, its keys and values as text (the ``sources`` field
    of every spec); ConfigError if it is not a table.

    >>> dict(source_table({"sources": {"compute": "datasheet", 2: 3}}, "gpu[0]"))
    {'compute': 'datasheet', '2': '3'}
    """
    sources = entry["sources"]
    if not isinstance(sources, dict):
        raise ConfigError(f"{where}: sources must be a table", value=sources, where=where)
    return MappingProxyType({str(k): str(v) for k, v in sources.items()})


def require_sources(sources: Mapping[str, Any], keys: Iterable[str], where: str) -> None:
    """ConfigError naming the first of ``keys`` without a non-empty source."""
    for key in keys:
        if not str(sources.get(key, "")).strip():
            raise ConfigError(
                f"{where}: no source for {key}; add sources.{key}", value=key, where=where
            )


def aliases(entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The entry's ``aliases`` list (default empty) as a tuple of strings."""
    names = entry.get("aliases", [])
    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
        raise ConfigError(f"{where}: aliases must be a list of strings", value=names, where=where)
    return tuple(names)


@dataclass(eq=False, repr=False, kw_only=True)
class Catalogue(Generic[S]):
    """One catalogue: its file, how to parse an entry, and how its errors name things.

    Parameters
    ----------
    table
        The TOML array-of-tables key and the word in ``where`` strings (``"gpu"``).
    kind
        The word in duplicate-name errors (``"GPU"``).
    unknown
        The words in lookup errors (``"GPU model"``).
    command
        The ``perfmodel hw`` subcommand listing the catalogue (``"gpus"``).
    spec_type
        The spec class; :meth:`get` returns an instance as is.
    parse
        ``parse(entry, where) -> spec`` for one table.
    data
        The shipped catalogue file.
    """

    table: str
    kind: str
    unknown: str
    command: str
    spec_type: type[S]
    parse: Callable[[dict[str, Any], str], S]
    data: Path
    _loaded: tuple[dict[str, S], dict[str, str]] | None = field(default=None, init=False)
    #: The shipped file, one text per entry.
    _blocks: list[str] | None = field(default=None, init=False)
    #: The same, lower-case.
    _lowered: list[str] = field(default_factory=list, init=False)
    #: Lower-case name or alias -> spec, by :meth:`_lookup`.
    _found: dict[str, S] = field(default_factory=dict, init=False)
    #: Entry index -> the spec :meth:`_lookup` returned.
    _entry_spec: dict[int, S] = field(default_factory=dict, init=False)
    #: The shipped text, lower-case, when the cut is exact.
    _plain: str | None = field(default=None, init=False)

    def read_indexed(self, path: str | os.PathLike[str]) -> tuple[dict[str, S], dict[str, str]]:
        """``({canonical name: spec}, {lower-case name or alias: canonical name})`` of a file."""
        p = Path(path)
        data = load_toml(p)
        table = self.table
        unknown = set(data) - {table}
        if unknown:
            raise ConfigError(
                f"{p}: unknown top-level key(s) {sorted(unknown)}; expected [[{table}]] tables",
                value=sorted(unknown),
                where=str(p),
            )
        entries = data.get(table, [])
        if not isinstance(entries, list):
            raise ConfigError(
                f"{p}: '{table}' must be an array of tables", value=entries, where=str(p)
            )
        specs: dict[str, S] = {}
        index: dict[str, str] = {}
        for i, entry in enumerate(entries):
            where = f"{p.name}: {table}[{i}] ({entry.get('name', '?')})"
            spec = self.parse(entry, where)
            if spec.name in specs:
                raise ConfigError(
                    f"{where}: duplicate {self.kind} name {spec.name!r}",
                    value=spec.name,
                    where=where,
                )
            specs[spec.name] = spec
            for key in (spec.name, *spec.aliases):
                k = key.lower()
                if k in index and index[k] != spec.name:
                    raise ConfigError(
                        f"{where}: alias {key!r} already names {index[k]}", value=key, where=where
                    )
                index[k] = spec.name
        return specs, index

    def read(self, path: str | os.PathLike[str]) -> dict[str, S]:
        """``{canonical name: spec}`` of a catalogue file of this schema, in file order (the
        shipped file or a user's: ``read_gpus``, ``read_links``, ``read_cpus``).

        Raises
        ------
        ConfigError
            Naming the file, the entry and the bad value (the module's ``parse``), a duplicate
            name, or an alias that already names another entry.
        """
        return self.read_indexed(path)[0]

    def _shipped(self) -> tuple[dict[str, S], dict[str, str]]:
        if self._loaded is None:
            specs, index = self.read_indexed(self.data)
            for spec in self._found.values():  # the specs get already returned stay the ones
                if specs.get(spec.name) == spec:
                    specs[spec.name] = spec
            self._loaded = specs, index
        return self._loaded

    def _entry_texts(self) -> list[str]:
        """The shipped file cut into one TOML text per ``[[table]]`` entry (file order); empty
        when the file is not laid out so that the cut is exact (anything but comments before
        the first entry, a multi-line string, which could hold a header line, or an escape
        sequence, which could spell a name no quoted text shows)."""
        if self._blocks is None:
            text = read_text(self.data)
            header = f"[[{self.table}]]"
            blocks: list[list[str]] = []
            simple = '"""' not in text and "'''" not in text and "\\" not in text
            for line in text.splitlines():
                if line.strip() == header:
                    blocks.append([])
                elif not blocks and line.strip() and not line.lstrip().startswith("#"):
                    simple = False
                if blocks:
                    blocks[-1].append(line)
            self._blocks = ["\n".join(b) for b in blocks] if simple else []
            self._lowered = [b.lower() for b in self._blocks]
            # no escape sequence anywhere: a name the text does not hold is no entry's
            self._plain = text.lower() if simple else None
        return self._blocks

    def _naming(self, key: str) -> list[int]:
        """Indices of the entries whose text quotes ``key`` (lower-case) in a basic or a
        literal string, the only ways a TOML value can hold a name without escapes."""
        self._entry_texts()
        dq, sq = f'"{key}"', f"'{key}'"
        return [i for i, b in enumerate(self._lowered) if dq in b or sq in b]

    def _entry(self, i: int) -> S | None:
        """The spec of the shipped file's entry ``i``, parsed alone (once); ``None`` where it
        does not parse alone as one ``[[table]]`` entry."""
        if i in self._entry_spec:
            return self._entry_spec[i]
        try:
            data = tomllib.loads(self._entry_texts()[i])
        except tomllib.TOMLDecodeError:
            return None
        entries = data.get(self.table)
        if set(data) != {self.table} or not isinstance(entries, list) or len(entries) != 1:
            return None
        entry = entries[0]
        where = f"{self.data.name}: {self.table}[{i}] ({entry.get('name', '?')})"
        spec = self._entry_spec[i] = self.parse(entry, where)
        return spec

    def _claims(self, key: str) -> list[int] | None:
        """Indices of the entries whose name or aliases include ``key`` (lower-case), read off
        the entries quoting it; ``None`` where one of those does not parse alone."""
        out = []
        for i in self._naming(key):
            spec = self._entry(i)
            if spec is None:
                return None
            if key in (n.lower() for n in (spec.name, *spec.aliases)):
                out.append(i)
        return out

    def _lookup(self, key: str) -> S | None:
        """The shipped spec named ``key`` (lower-case name or alias), parsing only the entries
        whose text quotes ``key`` (case-insensitive) instead of the whole file (issue 14: three
        catalogues of 13-42 entries were ~10 ms of a fresh ``perfmodel predict``); ``None``
        when that cannot answer exactly: the caller then reads the whole file, whose checks and
        errors are the ones that hold. Exact because an entry can claim a name only by quoting
        it (no escapes: :meth:`_entry_texts`): the entry found must be the only one claiming
        ``key`` and each of its own names and aliases, as the whole read requires."""
        if key in self._found:
            return self._found[key]
        if any(c in key for c in "\"'\\"):
            return None
        claims = self._claims(key)
        if claims is None or len(claims) != 1:
            return None
        (i,) = claims
        spec = self._entry_spec[i]
        for name in (spec.name, *spec.aliases):
            low = name.lower()
            if any(c in low for c in "\"'\\") or self._claims(low) != [i]:
                return None
        self._found[key] = spec
        return spec

    def specs(self) -> list[S]:
        """Every spec of the shipped catalogue, in file order (``list_gpus``, ``list_links``,
        ``list_cpus``)."""
        return list(self._shipped()[0].values())

    def find(self, name: str) -> S | None:
        """The shipped spec named ``name`` (canonical or alias, case-insensitive), ``None`` when
        there is none (no error, no close-match search: a name the shipped text does not hold
        at all is answered without parsing the file)."""
        key = str(name).lower()
        if self._loaded is None:
            found = self._lookup(key)
            if found is not None:
                return found
            self._entry_texts()
            if self._plain is not None and key not in self._plain:
                return None
        specs, index = self._shipped()
        return specs[index[key]] if key in index else None

    def get(self, name: str | S, where: str | None = None) -> S:
        """The shipped spec named ``name`` (canonical name or alias, case-insensitive); a spec is
        returned as is (``get_gpu``, ``get_link``, ``get_cpu``).

        ``where`` names what stated ``name`` in an error (default: the table, ``"gpu"``).

        Raises
        ------
        UnknownHardwareError
            Naming the value, ``where``, up to three close names and the ``perfmodel hw``
            command listing the catalogue.
        """
        if isinstance(name, self.spec_type):
            return name
        if where is None:
            where = self.table
        found = self.find(name)
        if found is not None:
            return found
        specs, index = self._shipped()  # the whole file: its errors, then the close names
        close = difflib.get_close_matches(str(name).lower(), list(index), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(specs[index[c]].name for c in close)}?" if close else ""
        raise UnknownHardwareError(
            f"unknown {self.unknown} {name!r} ({where}){hint} (see `perfmodel hw {self.command}`)",
            value=name,
            where=where,
        )
