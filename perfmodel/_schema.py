"""Field checks for structured documents read from files (profiles, measurements, topologies,
scenarios, sweep specs, link parameters), and the one reader of ``NAME=VALUE`` texts
(:func:`split_assignments`: ``--software-option``, ``--nccl-env``).

A loader calls these on each field it reads instead of ``int(d["x"])`` or ``float(...)``, so a
wrongly typed field is an error naming the file, the field path, the bad value and the expected
type (``h.json: device.memory_bytes: expected an integer, got 'lots' (str)``) rather than a
``ValueError`` or ``TypeError`` from deep inside. The rules follow the document formats: TOML and
JSON integers are integers (a boolean is not one, nor is ``2.0`` or ``"2"``), numbers are
integers or floats, and a number must be finite unless the caller allows otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from perfmodel.errors import ConfigError, PerfModelError, SchemaError

_MISSING: Any = object()


def describe(value: Any) -> str:
    """``repr`` of a bad value, cut to 60 characters, with its type.

    >>> describe("lots")
    "'lots' (str)"
    """
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _fail(
    where: str, path: str, value: Any, expected: str, error: type[PerfModelError]
) -> PerfModelError:
    return error(
        f"{where}: {path}: expected {expected}, got {describe(value)}",
        value=value,
        where=f"{where}: {path}",
    )


def require_fields(
    d: Mapping[str, Any],
    names: Iterable[str],
    where: str,
    *,
    table: str = "",
    error: type[PerfModelError] = SchemaError,
) -> None:
    """``error`` naming the first of ``names`` missing from ``d`` (as ``table.name`` when the
    fields sit in a sub-table ``table``).

    >>> require_fields({"gpu": "h100"}, ("gpu", "sm_count"), "p.json")
    Traceback (most recent call last):
    ...
    perfmodel.errors.SchemaError: p.json: missing field 'sm_count'
    """
    for name in names:
        if name not in d:
            field = f"{table}.{name}" if table else name
            raise error(f"{where}: missing field {field!r}", value=name, where=where)


def as_mapping(
    value: Any, path: str, *, where: str, error: type[PerfModelError] = SchemaError
) -> Mapping[str, Any]:
    """``value`` if it is a table/mapping."""
    if not isinstance(value, Mapping):
        raise _fail(where, path, value, "a table/mapping", error)
    return value


def as_list(
    value: Any, path: str, *, where: str, error: type[PerfModelError] = SchemaError
) -> list:
    """``value`` as a list if it is a list or tuple (not text)."""
    if not isinstance(value, list | tuple):
        raise _fail(where, path, value, "a list", error)
    return list(value)


def as_str(value: Any, path: str, *, where: str, error: type[PerfModelError] = SchemaError) -> str:
    """``value`` if it is text."""
    if not isinstance(value, str):
        raise _fail(where, path, value, "text", error)
    return value


def as_bool(
    value: Any, path: str, *, where: str, error: type[PerfModelError] = SchemaError
) -> bool:
    """``value`` if it is a boolean (``true``/``false``, not ``1`` or ``"yes"``)."""
    if not isinstance(value, bool):
        raise _fail(where, path, value, "true or false", error)
    return value


#: The words a boolean is written with in text (lower case; read in any case): the one table
#: of :func:`parse_flag`, of ``--model-arg`` values (``perfmodel.cli._common.model_arg_value``,
#: where ``1``/``0`` are read as integers first) and of the zoo's model arguments.
FLAG_WORDS: Mapping[str, bool] = MappingProxyType(
    dict.fromkeys(("true", "yes", "on", "1"), True)
    | dict.fromkeys(("false", "no", "off", "0"), False)
)


def parse_flag(v: Any, *, where: str) -> bool:
    """A boolean from a scenario, a file or a sweep axis: ``True``/``False``, or one of
    :data:`FLAG_WORDS` (true/false, yes/no, on/off, 1/0 in any case); anything else is a
    :class:`ConfigError` naming ``where``.

    >>> parse_flag("False", where="x"), parse_flag(1, where="x")
    (False, True)
    """
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in FLAG_WORDS:
        return FLAG_WORDS[text]
    raise ConfigError(f"{where} must be true or false, got {v!r}", value=v, where=where)


def split_assignments(
    items: Iterable[Any], *, where: str, example: str, form: str = "NAME=VALUE"
) -> list[tuple[str, str]]:
    """``NAME=VALUE`` texts as ``(name, value)`` pairs, in order: each text splits at its first
    ``=`` (the value may hold ``=``); the name is stripped of white space and may not be empty;
    the value stays as written (a caller that reads it as a word strips it; ``--nccl-env``
    keeps it, as NCCL reads its variables unstripped).

    >>> split_assignments(["a = b=c ", "d="], where="--opt", example="a=1")
    [('a', ' b=c '), ('d', '')]
    >>> split_assignments(["a"], where="--opt", example="a=1", form="KEY=VALUE")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: --opt 'a': expected KEY=VALUE (e.g. a=1)

    Raises
    ------
    ConfigError
        A text without ``=`` or with a blank name: ``where`` and the text, ``form`` and
        ``example`` (``value`` the text).
    """
    out = []
    for item in items:
        name, eq, value = str(item).partition("=")
        if not eq or not name.strip():
            raise ConfigError(
                f"{where} {item!r}: expected {form} (e.g. {example})", value=item, where=where
            )
        out.append((name.strip(), value))
    return out


def as_int(
    value: Any,
    path: str,
    *,
    where: str,
    minimum: int | None = None,
    error: type[PerfModelError] = SchemaError,
) -> int:
    """``value`` if it is an integer (not a boolean, float or text) ``>= minimum``.

    >>> as_int(3, "count", where="t.toml", minimum=1)
    3
    >>> as_int("two", "count", where="t.toml")
    Traceback (most recent call last):
    ...
    perfmodel.errors.SchemaError: t.toml: count: expected an integer, got 'two' (str)
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, path, value, "an integer", error)
    if minimum is not None and value < minimum:
        raise _fail(where, path, value, f"an integer >= {minimum}", error)
    return value


def as_number(
    value: Any,
    path: str,
    *,
    where: str,
    minimum: float | None = None,
    positive: bool = False,
    finite: bool = True,
    error: type[PerfModelError] = SchemaError,
) -> float:
    """``value`` as a float if it is a number (integer or float, not a boolean or text).

    ``finite`` refuses NaN and infinities; ``minimum`` is inclusive; ``positive`` means ``> 0``.

    >>> as_number(2, "alpha_us", where="lp.toml")
    2.0
    >>> as_number(float("nan"), "time_s", where="m.json")
    Traceback (most recent call last):
    ...
    perfmodel.errors.SchemaError: m.json: time_s: expected a finite number, got nan (float)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, path, value, "a number", error)
    x = float(value)
    if finite and not math.isfinite(x):
        raise _fail(where, path, value, "a finite number", error)
    if positive and not x > 0:
        raise _fail(where, path, value, "a number > 0", error)
    if minimum is not None and not x >= minimum:
        raise _fail(where, path, value, f"a number >= {minimum:g}", error)
    return x


def as_optional_number(value: Any, path: str, *, where: str, **kw: Any) -> float | None:
    """:func:`as_number`, or ``None`` for a missing (``None``) value."""
    return None if value is None else as_number(value, path, where=where, **kw)


def number_map(
    value: Any,
    path: str,
    *,
    where: str,
    finite: bool = True,
    error: type[PerfModelError] = SchemaError,
) -> dict[str, float]:
    """A table of name -> number (``fits.*.values``, ``peak_flops``)."""
    table = as_mapping(value, path, where=where, error=error)
    return {
        str(k): as_number(v, f"{path}.{k}", where=where, finite=finite, error=error)
        for k, v in table.items()
    }


__all__ = [
    "as_bool",
    "as_int",
    "as_list",
    "as_mapping",
    "as_number",
    "as_optional_number",
    "as_str",
    "describe",
    "number_map",
    "require_fields",
    "split_assignments",
]
