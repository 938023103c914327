"""Test helper: a terminal stand-in for the progress line's tests."""

from __future__ import annotations

import io
import threading


class FakeTty(io.StringIO):
    """A terminal stand-in: ``isatty()`` and an event set by the first write."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = threading.Event()

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        n = super().write(s)
        self.wrote.set()
        return n
