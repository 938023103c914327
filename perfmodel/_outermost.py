"""A process-wide setting made by the outermost of nested and concurrent ``with`` uses and
undone by the last one to exit: the machinery shared by :func:`perfmodel._gc.fewer_collections`
(the collector's threshold, issue 14) and :func:`perfmodel._malloc.keep_heap` (the heap's top
pad, issue 27), so that a library user's own setting holds outside a prediction."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Outermost:
    """A count of the uses running now, under a lock that a fork (compare's worker pool) never
    copies held."""

    def __init__(self) -> None:
        self.depth = 0
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(
                before=self._lock.acquire,
                after_in_parent=self._lock.release,
                after_in_child=self._lock.release,
            )

    @contextmanager
    def use(self, enter: Callable[[], None], leave: Callable[[], None]) -> Iterator[None]:
        """Run the body; ``enter()`` first when no other use is running, ``leave()`` after it
        when this is the last use to exit (also when the body raises). Both run under the
        lock."""
        with self._lock:
            if self.depth == 0:
                enter()
            self.depth += 1
        try:
            yield
        finally:
            with self._lock:
                self.depth -= 1
                if self.depth == 0:
                    leave()


__all__ = ["Outermost"]
