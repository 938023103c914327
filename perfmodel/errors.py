"""Typed exceptions. Each carries the offending value and where it came from.

The CLI turns any :class:`PerfModelError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

from typing import Any


class PerfModelError(Exception):
    """Base class of every error perfmodel raises on bad input or infeasible requests.

    Parameters
    ----------
    message
        A full sentence naming the bad value.
    value
        The offending value (kept for programmatic use).
    where
        Where it came from: a file path, ``file:element``, a CLI flag or an argument name.
    """

    def __init__(self, message: str, *, value: Any = None, where: str | None = None) -> None:
        super().__init__(message)
        self.value = value
        self.where = where

    def __str__(self) -> str:
        msg = str(self.args[0]) if self.args else ""
        if self.where and self.where not in msg:
            return f"{self.where}: {msg}"
        return msg


class ConfigError(PerfModelError, ValueError):
    """A bad argument, flag, scenario key or file content."""


class FileAccessError(ConfigError):
    """A file or folder named on the command line or in a document cannot be used: not found, a
    folder where a file is expected (or the reverse), no permission, not UTF-8 text, a device,
    or an output held by another perfmodel process. ``where`` is the path."""


class FlagError(PerfModelError):
    """A command-line flag's value is bad (``--top 0``, ``--oversubscription nan``, ``-o DIR``).

    Raised by the ``type=`` functions of :mod:`perfmodel.cli._types` while arguments are parsed.
    Deliberately not a ``ValueError``: ``argparse`` would swallow that into a usage message, while
    this one reaches the CLI's handler (one line naming the flag and value, exit 2).
    """


class SchemaError(ConfigError):
    """A field of a structured document (profile, measurements, topology, scenario, sweep spec,
    link parameters) has the wrong type or an out-of-range value; the message names the field
    path, the bad value and what was expected."""


class TopologyError(ConfigError):
    """A topology file or graph violates the schema (see ``docs/topology.md``)."""


class UnknownHardwareError(ConfigError, KeyError):
    """A GPU, link technology or system name is not in the catalogue."""

    def __str__(self) -> str:  # KeyError would quote its message; keep it readable
        return PerfModelError.__str__(self)


class ParseError(ConfigError):
    """A log or import file could not be read."""


class InfeasiblePlanError(ConfigError):
    """A parallelism plan does not divide the GPUs, layers, heads or batch."""


class OutOfMemoryError(PerfModelError):
    """A plan does not fit in GPU memory (carries the breakdown in ``value``)."""


class CalibrationError(PerfModelError):
    """A calibration profile is missing fields, is for another device, or is from a newer format."""


def did_you_mean(key: str, names: Any, *, cutoff: float = 0.6) -> str:
    """`` (did you mean 'a', 'b'?)`` for the (at most three) ``names`` closest to ``key``
    (:func:`difflib.get_close_matches` at ``cutoff``), or ``""``: the hint an unknown
    scenario key or model argument carries.

    >>> did_you_mean("precison", ["precision", "optimizer"])
    " (did you mean 'precision'?)"
    """
    import difflib

    close = difflib.get_close_matches(str(key), list(names), n=3, cutoff=cutoff)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
