"""A ``perfmodel predict`` scenario file's keys that are flags but not :class:`Scenario
<perfmodel.scenario.Scenario>` fields (user22 item 2: "same keys as the flags"): the token
budget's (``tokens``, ``price_per_gpu_hour``, the failure and checkpoint flags), taken from the
file once, typed as their flags are, the flag winning over the file; the output flags
(``json``, ``trace``, ...) refused with the reason; a flag whose file key is spelled otherwise
(``--fabric``: ``fabric_topology``) accepted under the flag's name."""

from __future__ import annotations

import argparse
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from perfmodel._schema import describe
from perfmodel.errors import ConfigError, SchemaError

#: ``(file key, flag, kind)``: ``kind(flag)`` is the flag's parser (:mod:`perfmodel.cli._types`).
RunKey = tuple[str, str, Callable[[str], Callable[[str], Any]]]

#: Flags that choose what ``predict`` prints or writes, not the question: command line only.
OUTPUT_KEYS = ("json", "explain", "interval", "trace", "gantt", "chakra", "plot", "quiet")

#: A flag whose scenario key is another name: ``{flag's key: scenario key}``; the file may use
#: either (``fabric``, ``fabric_topology``).
ALIASES = {"fabric": "fabric_topology"}

#: Repeatable ``KEY=VALUE`` flags whose file key is a table: ``{flag's key: table key}``.
TABLES = {"model_arg": "model_args", "software_option": "software_options"}


def take_file_keys(
    d: MutableMapping[str, Any], args: argparse.Namespace, path: str, run_keys: Sequence[RunKey]
) -> None:
    """Move the flag-only keys of the scenario file ``path`` (``d``, keys with ``_``) out of
    ``d``: each of ``run_keys`` onto ``args`` (typed by its flag's parser, a number or its text;
    a flag given wins), an alias (:data:`ALIASES`) to its scenario key. ``args.file_run_keys``
    records the keys taken (``{key: "FILE: key"}``) so that an error names the file's key, not
    a flag (:func:`where_given`).

    Raises
    ------
    ConfigError
        An output flag's key (:data:`OUTPUT_KEYS`), a ``KEY=VALUE`` flag's key
        (:data:`TABLES`: the file's key is the table), or a key given under both names.
    SchemaError
        A budget value that is not a number in its flag's range (naming the file and the key).
    """
    taken: dict[str, str] = {}
    for key, flag, kind in run_keys:
        if key not in d:
            continue
        value = d.pop(key)
        where = f"{path}: {key}"
        # Text goes through the flag's own parser: PyYAML reads ``tokens: 26e9`` (no dot) and
        # ``2.6e10`` (YAML 1.1's float needs a signed exponent) as text, as TOML/JSON strings.
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise SchemaError(
                f"{where}: expected a number (the file's {flag}), got {describe(value)}",
                value=value,
                where=where,
            )
        parsed = kind(where)(str(value))
        if getattr(args, key, None) is None:  # the flag given wins over the file
            setattr(args, key, parsed)
            taken[key] = where
    args.file_run_keys = taken
    for key, scenario_key in ALIASES.items():
        if key in d:
            if scenario_key in d:
                raise ConfigError(
                    f"{path}: {key}: give {key!r} or {scenario_key!r}, not both (the same setting)",
                    value=key,
                    where=f"{path}: {key}",
                )
            d[scenario_key] = d.pop(key)
    for key in OUTPUT_KEYS:
        if key in d:
            raise ConfigError(
                f"{path}: {key}: not a scenario key: --{key} chooses what predict prints "
                f"or writes, not the question; give --{key} on the command line",
                value=key,
                where=f"{path}: {key}",
            )
    for key, table in TABLES.items():
        if key in d:
            raise ConfigError(
                f"{path}: {key}: the file's key for --{key.replace('_', '-')} KEY=VALUE is the "
                f"table {table!r} ({table} = {{ KEY = VALUE }})",
                value=key,
                where=f"{path}: {key}",
            )


def where_given(args: argparse.Namespace, key: str, flag: str) -> str:
    """How an error names the budget setting ``key``: ``"FILE: key"`` when the scenario file
    gave it (:func:`take_file_keys`), else its flag ``flag``."""
    taken: dict[str, str] = getattr(args, "file_run_keys", None) or {}
    return taken.get(key, flag)


def file_only_keys(run_keys: Sequence[RunKey]) -> tuple[str, ...]:
    """The keys a ``predict`` file accepts beside the :class:`~perfmodel.scenario.Scenario`
    fields: the budget's ``run_keys`` and the flags' names of :data:`ALIASES` (an unknown
    key's error lists them too)."""
    return (*(key for key, _, _ in run_keys), *ALIASES)
