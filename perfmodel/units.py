"""Units: the one place where unit constants live.

Every quantity inside perfmodel is in SI base units: bytes, seconds, bytes per second (``_Bps``),
floating-point operations (``_flop``) and FLOP per second (``_flops``). Human units appear only at
the edges (file loading, the CLI, reports). Decimal prefixes (``GB``) and binary prefixes
(``GiB``) are distinct names; bit rates (``Gbit``) are converted to bytes here.

>>> 100 * Gbit  # 100 Gb/s Ethernet in bytes per second
12500000000.0
>>> parse_size("4G")  # nccl-tests convention: binary multiples
4294967296
"""

from __future__ import annotations

import math
import re

from perfmodel.errors import ConfigError

# bytes, decimal
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
# bytes, binary
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
# bits expressed in bytes
bit = 1.0 / 8.0
Kbit = 1e3 / 8.0
Mbit = 1e6 / 8.0
Gbit = 1e9 / 8.0
Tbit = 1e12 / 8.0
# time
s = 1.0
ms = 1e-3
us = 1e-6
ns = 1e-9
minute = 60.0
hour = 3600.0
day = 86400.0
# rates
GHz = 1e9
MHz = 1e6
KFLOPS = 1e3
MFLOPS = 1e6
GFLOPS = 1e9
TFLOPS = 1e12
PFLOPS = 1e15

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)
_BINARY = {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB}


def parse_size(text: str, *, where: str = "size") -> int:
    """Parse a message size such as ``"8"``, ``"1K"``, ``"128M"`` or ``"4G"`` into bytes.

    Suffixes are binary multiples (1K = 1024 bytes), the convention of nccl-tests' ``-b``/``-e``
    flags (``parsesize`` in nccl-tests ``src/common.cu``: ``K``, ``M``, ``G`` multiply by
    1024, 1024**2, 1024**3). ``KiB``/``MiB``/``GiB`` mean the same. ``KB``/``MB``/``GB`` are
    refused: they read as powers of 1000 to most people and as powers of 1024 to nccl-tests,
    and a size that is 7% off is worse than an error (write ``1G``, ``1GiB`` or the bytes).

    >>> parse_size("1GiB") == parse_size("1G") == 2**30
    True

    Raises
    ------
    ConfigError
        If the text is not a positive size, or uses ``KB``/``MB``/``GB``/``TB``.
    """
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ConfigError(
            f"cannot read {where} {text!r}: expected a number with an optional K/M/G/T suffix",
            value=text,
            where=where,
        )
    if m.group(2) and m.group(3).upper() == "B":
        raise ConfigError(
            f"{where} {text!r}: {m.group(2).upper()}B is ambiguous (1000 or 1024?); write "
            f"{m.group(1)}{m.group(2).upper()} or {m.group(1)}{m.group(2).upper()}iB for powers "
            "of 1024 (nccl-tests' convention), or the number of bytes",
            value=text,
            where=where,
        )
    value = float(m.group(1)) * _BINARY[m.group(2).upper()]
    if value <= 0:
        raise ConfigError(f"{where} must be positive, got {text!r}", value=text, where=where)
    return round(value)


def parse_size_range(text: str, *, factor: int = 2, where: str = "--sizes") -> list[int]:
    """Parse ``"1K:4G"`` (or ``"1K:4G:4"`` with a multiplication factor) into a list of sizes.

    >>> parse_size_range("1K:8K")
    [1024, 2048, 4096, 8192]
    """
    parts = str(text).split(":")
    if len(parts) == 1:
        return [parse_size(parts[0], where=where)]
    if len(parts) not in (2, 3):
        raise ConfigError(
            f"{where} {text!r}: expected MIN:MAX or MIN:MAX:FACTOR", value=text, where=where
        )
    lo = parse_size(parts[0], where=where)
    hi = parse_size(parts[1], where=where)
    if len(parts) == 3:
        try:
            factor = int(parts[2])
        except ValueError as exc:
            raise ConfigError(
                f"{where} {text!r}: factor {parts[2]!r} is not an integer", value=text, where=where
            ) from exc
    if factor < 2:
        raise ConfigError(f"{where} {text!r}: factor must be >= 2", value=text, where=where)
    if hi < lo:
        raise ConfigError(f"{where} {text!r}: maximum below minimum", value=text, where=where)
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def format_bytes(n_bytes: float) -> str:
    """Human-readable binary size (reports only).

    >>> format_bytes(3 * GiB)
    '3.00 GiB'
    """
    n = float(n_bytes)
    for unit, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def format_rate(bytes_per_s: float) -> str:
    """Human-readable decimal rate in GB/s (reports only)."""
    return f"{bytes_per_s / GB:.2f} GB/s"


def format_time(seconds: float) -> str:
    """Human-readable duration (reports only).

    >>> format_time(0.0125)
    '12.50 ms'
    """
    t = float(seconds)
    if abs(t) >= 1.0:
        return f"{t:.3f} s"
    if abs(t) >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.2f} us"


def format_duration(seconds: float) -> str:
    """A long duration in the units people plan with (reports only, next to the seconds).

    Two units, the second rounded down: days and hours from one day, hours and minutes from one
    hour, minutes and seconds from one minute; below a minute, seconds with one decimal.

    >>> format_duration(34732.214)
    '9 h 38 min'
    >>> format_duration(3 * day + 5 * hour + 59 * minute)
    '3 d 5 h'
    >>> format_duration(75.0)
    '1 min 15 s'
    >>> format_duration(12.34)
    '12.3 s'
    """
    t = float(seconds)
    if not math.isfinite(t):
        return str(t)
    sign, t = ("-" if t < 0 else ""), abs(t)
    for big, big_name, small, small_name in (
        (day, "d", hour, "h"),
        (hour, "h", minute, "min"),
        (minute, "min", 1.0, "s"),
    ):
        if t >= big:
            whole = int(t // big)
            rest = int((t - whole * big) // small)
            return f"{sign}{whole} {big_name} {rest} {small_name}"
    return f"{sign}{t:.1f} s"
