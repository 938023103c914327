"""Typed ``argparse`` values (``type=``) shared by every subcommand.

Every numeric or path flag is parsed by one of these factories, called with the flag's name
(``type=ty.positive_int("--top")``), so a bad value stops parsing, before any work, with a
:class:`~perfmodel.errors.FlagError`: one line naming the flag and the value (``--top '0':
expected an integer >= 1``) and exit 2. Integers are written as integers (``true`` or ``1.5`` is
refused); numbers must be finite (``nan`` and ``inf`` are refused). Output paths are checked for
kind and writability when parsed (:func:`perfmodel._io.check_output_path`), so nothing runs for
minutes and then fails to write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from perfmodel.errors import ConfigError, FlagError

_INT = re.compile(r"[+-]?[0-9]+")


def _fail(flag: str, text: str, expected: str) -> FlagError:
    return FlagError(f"{flag} {text!r}: expected {expected}", value=text, where=flag)


#: Digits an integer flag may have: every count perfmodel reads fits in 2**63 (19 digits); a
#: longer number is refused before ``int()`` converts it (CPython's conversion of a huge digit
#: string is itself quadratic).
MAX_INT_DIGITS = 19


def _int_type(
    flag: str, minimum: int, *, minus_one: bool = False, maximum: int | None = None
) -> Callable[[str], int]:
    expected = (
        f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    ) + (" or -1" if minus_one else "")

    def parse(text: str) -> int:
        t = str(text).strip()
        if not _INT.fullmatch(t) or len(t.lstrip("+-")) > MAX_INT_DIGITS:
            raise _fail(flag, text, expected)
        v = int(t)
        if v < minimum and not (minus_one and v == -1):
            raise _fail(flag, text, expected)
        if maximum is not None and v > maximum:
            raise _fail(flag, text, expected)
        return v

    parse.__name__ = "int"
    return parse


def positive_int(flag: str) -> Callable[[str], int]:
    """Counts that must be >= 1 (``--top``, ``--nodes``, ``--batch-per-gpu``)."""
    return _int_type(flag, 1)


def batch_int(flag: str, *, global_batch: bool = False) -> Callable[[str], int]:
    """A batch in samples: >= 1 and at most
    :data:`perfmodel.scenario_parse.MAX_BATCH_PER_REPLICA` (per GPU or replica) or
    :data:`~perfmodel.scenario_parse.MAX_GLOBAL_BATCH` (``global_batch``), refused when parsed:
    a huge batch ran the automatic micro-batch search for minutes (issue 28). The limit is
    read when a value is parsed (building the parser loads nothing more)."""

    def parse(text: str) -> int:
        from perfmodel.scenario_parse import MAX_BATCH_PER_REPLICA, MAX_GLOBAL_BATCH

        cap = MAX_GLOBAL_BATCH if global_batch else MAX_BATCH_PER_REPLICA
        return _int_type(flag, 1, maximum=cap)(text)

    parse.__name__ = "int"
    return parse


#: Longest picture title accepted (``topo draw --title``), characters: a title is one line
#: above the picture; matplotlib lays out longer text glyph by glyph for nothing.
MAX_TITLE_CHARS = 200


def title_text(flag: str = "--title") -> Callable[[str], str]:
    """A picture title: printable text of at most :data:`MAX_TITLE_CHARS` characters, drawn as
    plain text (``parse_math=False``: a ``$`` is a dollar sign, not mathtext)."""

    def parse(text: str) -> str:
        t = str(text)
        if len(t) > MAX_TITLE_CHARS:
            raise FlagError(
                f"{flag}: {len(t)} characters, at most {MAX_TITLE_CHARS} accepted",
                value=t[:40] + "...",
                where=flag,
            )
        if any(not c.isprintable() for c in t):
            raise _fail(flag, t[:40], "printable text on one line")
        return t

    parse.__name__ = "title"
    return parse


def nonneg_int(flag: str) -> Callable[[str], int]:
    """Counts that may be 0 (``--analytic-k 0`` skips that stage)."""
    return _int_type(flag, 0)


def jobs_int(flag: str = "--jobs") -> Callable[[str], int]:
    """``--jobs``: a positive integer, or ``-1`` for every CPU."""
    return _int_type(flag, 1, minus_one=True)


def _float_type(flag: str, *, minimum: float, strict: bool) -> Callable[[str], float]:
    expected = f"a finite number {'>' if strict else '>='} {minimum:g}"

    def parse(text: str) -> float:
        try:
            v = float(str(text).strip())
        except ValueError:
            raise _fail(flag, text, expected) from None
        if not math.isfinite(v) or (v <= minimum if strict else v < minimum):
            raise _fail(flag, text, expected)
        return v

    parse.__name__ = "float"
    return parse


def positive_float(flag: str) -> Callable[[str], float]:
    """A finite number > 0 (prices, hours, epochs, an oversubscription ratio)."""
    return _float_type(flag, minimum=0.0, strict=True)


def oversubscription(flag: str = "--oversubscription") -> Callable[[str], float]:
    """A fat-tree oversubscription ratio: finite and >= ``MIN_OVERSUBSCRIPTION`` (1, the rule
    of topology files, :data:`perfmodel.topology.io.MIN_OVERSUBSCRIPTION`), read when a value
    is parsed: building the parser does not load the topology stack (networkx)."""

    def parse(text: str) -> float:
        from perfmodel.topology.io import MIN_OVERSUBSCRIPTION

        return _float_type(flag, minimum=MIN_OVERSUBSCRIPTION, strict=False)(text)

    parse.__name__ = "float"
    return parse


def nonneg_float(flag: str) -> Callable[[str], float]:
    """A finite number >= 0."""
    return _float_type(flag, minimum=0.0, strict=False)


def _output_path(flag: str, kind: str, **check: Any) -> Callable[[str], str]:
    """A path checked by :func:`perfmodel._io.check_output_path` (``check``: its keywords) when
    parsed; its error becomes a :class:`FlagError` naming ``flag``. ``kind``: the value's name
    in argparse's messages (``path``, ``folder``)."""

    def parse(text: str) -> str:
        from perfmodel._io import check_output_path

        try:
            check_output_path(text, where=flag, **check)
        except ConfigError as exc:
            raise FlagError(str(exc), value=text, where=flag) from None
        return text

    parse.__name__ = kind
    return parse


def output_file(flag: str, *suffixes: str) -> Callable[[str], str]:
    """An output file, checked writable and of the right kind when parsed (before any work;
    :func:`perfmodel._io.check_output_path`). ``suffixes``: the allowed extensions."""
    return _output_path(flag, "path", suffixes=suffixes or None)


def output_dir(flag: str) -> Callable[[str], str]:
    """An output folder (created if missing; must not be a file; writable)."""
    return _output_path(flag, "folder", directory=True)


def matplotlib_formats() -> tuple[str, ...]:
    """The file extensions matplotlib's Agg canvas can write (``png``, ``svg``, ``pdf`` ...;
    ``FigureCanvasBase.get_supported_filetypes()``, matplotlib >= 3.0)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return tuple(sorted(FigureCanvasAgg.get_supported_filetypes()))


def plot_file(flag: str = "--plot") -> Callable[[str], str]:
    """A plot written in the format its extension names: one that matplotlib can write."""

    def parse(text: str) -> str:
        return output_file(flag, *(f".{f}" for f in matplotlib_formats()))(text)

    parse.__name__ = "path"
    return parse


def png_file(flag: str = "--plot") -> Callable[[str], str]:
    """A plot written as PNG whatever its name (predict, comm): the name must end in ``.png``."""
    return output_file(flag, ".png")


#: What ``--interval`` takes, in the words of its error and of every command's ``--help``.
INTERVAL_RULE = (
    "off, a fraction strictly between 0 and 1 (0.9), or a percentage written with %% strictly "
    "between 0%% and 100%% (90%%)"
)


def interval_level(flag: str = "--interval") -> Callable[[str], float | None]:
    """An interval level (issue 26; audit15 item 7): ``off`` (no interval: ``None``), a bare
    number that is a fraction strictly between 0 and 1 (``0.9``), or a percentage written with
    ``%`` strictly between 0 % and 100 % (``90%``). One rule: a bare number is never read as a
    percentage (``1.5`` was a 1.5 % range while ``1`` was refused), so ``90``, ``1`` and ``1.5``
    are refused with the rule and, for a bare number from 1 to 100, the percentage it may mean.
    """
    expected = INTERVAL_RULE.replace("%%", "%")

    def parse(text: str) -> float | None:
        t = str(text).strip().lower()
        if t in ("off", "none", "no"):
            return None
        pct = t.endswith("%")
        try:
            v = float(t[:-1] if pct else t)
        except ValueError:
            raise _fail(flag, text, expected) from None
        if not pct and math.isfinite(v) and 1 <= v < 100:
            raise FlagError(
                f"{flag} {text!r}: a bare number is a fraction between 0 and 1 (0.9); "
                f"for a {v:g}% range write {v:g}%",
                value=text,
                where=flag,
            )
        if pct:
            v /= 100.0
        if not (math.isfinite(v) and 0 < v < 1):
            raise _fail(flag, text, expected)
        return v

    parse.__name__ = "level"
    return parse


def process_layout(flag: str = "--processes") -> Callable[[str], Any]:
    """A job's process layout (:class:`~perfmodel.comm.p2p_read.ProcessLayout`): ``per-gpu``
    or ``per-server`` (case-insensitive)."""
    from perfmodel.comm.p2p_read import ProcessLayout

    expected = " or ".join(e.value for e in ProcessLayout)

    def parse(text: str) -> ProcessLayout:
        try:
            return ProcessLayout.parse(str(text).strip(), where=flag)
        except ConfigError:
            raise _fail(flag, text, expected) from None

    parse.__name__ = "process layout"
    return parse
