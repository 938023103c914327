"""A progress line on stderr for commands that run longer than a couple of seconds.

The line (``perfmodel predict: working, 3 s``) appears only when the command has run for
``delay_s`` (2 s: a user waiting at a terminal notices a pause of about that length), updates once
a second and is erased before the command returns, so piped output and ``--json`` stay clean. It
is off with ``--quiet`` and whenever the stream is not a terminal (CI logs, redirections).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

DELAY_S = 2.0
"""Seconds a command runs before the progress line appears (issue 14: "longer than about 2 s")."""

# Held while the line is written; a fork (compare's worker pool) waits for it, so the child never
# inherits the stream's buffer lock from a write cut in half.
_WRITING = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_WRITING.acquire,
        after_in_parent=_WRITING.release,
        after_in_child=_WRITING.release,
    )


class Status:
    """What the command is doing now (``compare``: ``"screen 800/1275 plans, ~3 s left"``),
    shown after the label; set by the command (:meth:`set`), read by the line's thread."""

    def __init__(self) -> None:
        self._text = ""
        self._lock = threading.Lock()

    def set(self, text: str) -> None:
        with self._lock:
            self._text = str(text)

    @property
    def text(self) -> str:
        with self._lock:
            return self._text


@contextmanager
def progress_line(
    label: str,
    stream: TextIO,
    *,
    enabled: bool = True,
    delay_s: float = DELAY_S,
    interval_s: float = 1.0,
) -> Iterator[Status]:
    """Show ``label``, the command's :class:`Status` and the elapsed seconds on ``stream``
    while the ``with`` body runs (``perfmodel compare: working (analytic 3/8 plans, at most
    25 s left), 4 s``).

    Nothing is written unless ``enabled`` and ``stream.isatty()``; the line is written by a
    daemon thread (the body keeps the main thread) and erased with ``\\r`` + spaces on exit.
    """
    status = Status()
    isatty = getattr(stream, "isatty", None)
    if not enabled or isatty is None or not isatty():
        yield status
        return
    stop = threading.Event()
    start = time.monotonic()
    width = [0]

    def show() -> None:
        if stop.wait(delay_s):
            return
        while True:
            detail = status.text
            text = f"{label}{f' ({detail})' if detail else ''}, {time.monotonic() - start:.0f} s"
            with _WRITING:
                stream.write("\r" + text.ljust(width[0]))
                stream.flush()
            width[0] = max(width[0], len(text))
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=show, name="perfmodel-progress", daemon=True)
    thread.start()
    try:
        yield status
    finally:
        stop.set()
        thread.join()
        if width[0]:
            stream.write("\r" + " " * width[0] + "\r")
            stream.flush()


__all__ = ["DELAY_S", "Status", "progress_line"]
