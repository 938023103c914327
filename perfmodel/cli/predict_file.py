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
    ``d``: each of ``run_keys`` onto ``args`` (typed by its flag's parser; a flag given wins),
    an alias (:data:`ALIASES`) to its scenario key.

    Raises
    ------
    ConfigError
        An output flag's key (:data:`OUTPUT_KEYS`), a ``KEY=VALUE`` flag's key
        (:data:`TABLES`: the file's key is the table), or a key given under both names.
    SchemaError
        A budget value that is not a number in its flag's range (naming the file and the key).
    """
    for key, flag, kind in run_keys:
        if key not in d:
            continue
        value = d.pop(key)
        where = f"{path}: {key}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(
                f"{where}: expected a number (the file's {flag}), got {describe(value)}",
                value=value,
                where=where,
            )
        parsed = kind(where)(str(value))
        if getattr(args, key, None) is None:  # the flag given wins over the file
            setattr(args, key, parsed)
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
