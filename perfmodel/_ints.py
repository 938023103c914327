"""Whole-number helpers shared by plan checks, workload checks and the plan search."""

from __future__ import annotations

from perfmodel.errors import ConfigError


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order (trial division up to ``sqrt(n)``).

    What the error messages of a plan that does not divide list ("tp values that fit: ..."),
    what the micro-batch auto-size tries, and the degrees the plan search enumerates.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    >>> divisors(1)
    [1]
    """
    if n < 1:
        raise ConfigError(f"divisors of a non-positive number {n!r}", value=n)
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
