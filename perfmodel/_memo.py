"""A small bounded memo for values computed from a key (issue 14: work a prediction repeats for
its cluster, its speedup baseline and its micro-batch search), and :func:`made_once`, a value a
frozen object makes on first read."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_ABSENT = object()


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``size`` of them, the oldest dropped first.

    Used where :func:`functools.lru_cache` does not fit: the key is derived from the
    arguments (text, a server's graph contents) rather than being them, or an argument may be
    unhashable, in which case :meth:`get` computes the value every time and keeps nothing.

    >>> memo = BoundedMemo[str, int](2)
    >>> memo.get("a", lambda: 1), memo.get("a", lambda: 2)
    (1, 1)
    >>> memo.get(["unhashable"], lambda: 3), len(memo)  # type: ignore[arg-type]
    (3, 1)
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: dict[K, V] = {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` (and kept) on a miss."""
        try:
            hit = self.entries.get(key, _ABSENT)
        except TypeError:  # an unhashable key: computed, not kept
            return make()
        if hit is _ABSENT:
            hit = make()
            self.put(key, hit)
        return hit  # type: ignore[return-value]

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` (hashable), the oldest entry dropped first where a new
        key finds the memo full: what :meth:`get` keeps on a miss (it calls this), for callers
        that read :attr:`entries` themselves and decide afterwards whether to keep what they
        made.

        >>> memo = BoundedMemo[str, int](2)
        >>> memo.put("a", 1); memo.put("b", 2); memo.put("a", 3); memo.put("c", 4)
        >>> memo.entries
        {'b': 2, 'c': 4}
        """
        entries = self.entries
        if key not in entries and len(entries) >= self.size:
            entries.pop(next(iter(entries)))
        entries[key] = value

    def __len__(self) -> int:
        return len(self.entries)


def made_once(obj: object, name: str, make: Callable[[], V]) -> V:
    """Attribute ``name`` of ``obj``; while it is ``None`` (not made yet), ``make()`` stored
    there first, so each object makes it at most once. Stored as a frozen dataclass's
    ``__init__`` stores its fields (``object.__setattr__``): the frozen graphs and timelines
    that lower or execute a graph on first read use it (``perfmodel.parallel.periodic.
    LazyGraph``, ``perfmodel.sim.engine.CoarseTimeline`` and ``PeriodicTimeline``).

    >>> class Lazy:
    ...     value = None
    >>> lazy = Lazy()
    >>> made_once(lazy, "value", lambda: 1), made_once(lazy, "value", lambda: 2)
    (1, 1)
    """
    value = getattr(obj, name)
    if value is None:
        value = make()
        object.__setattr__(obj, name, value)
    return value  # type: ignore[no-any-return]
