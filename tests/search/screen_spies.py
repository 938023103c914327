"""Spies on the plan screen's group pricing, shared by the screen's group tests."""

from __future__ import annotations

from typing import Any


def record_groups(screen: Any) -> list[tuple[tuple[int, ...], Any]]:
    """Replace ``screen._group`` with a spy and return the list it fills: every group the
    screen prices as it screens plans, as ``(global ranks, (GPU names, cost model))``."""
    asked: list[tuple[tuple[int, ...], Any]] = []
    group = screen._group

    def spy(ranks: tuple[int, ...]) -> Any:
        asked.append((ranks, group(ranks)))
        return asked[-1][1]

    screen._group = spy
    return asked
