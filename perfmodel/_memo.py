"""A small bounded memo for values computed from a key (issue 14: work a prediction repeats for
its cluster, its speedup baseline and its micro-batch search), and :func:`made_once`, a value a
frozen object makes on first read."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from itertools import islice
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_ABSENT = object()


def keep(entries: dict[K, V], key: K, value: V, size: int) -> V:
    """Keep ``value`` under ``key`` in ``entries``, a plain dict that a hot path reads itself
    (``entries.get(key)``), at most ``size`` (>= 1) entries; returns ``value``. The bound of
    :class:`BoundedMemo` for memos that stay dicts (a sweep or a service predicting distinct
    scenarios in one process would otherwise grow them without end). Only for values that
    are a pure function of the key: a dropped entry costs a recompute, never a different
    answer.

    A new key that finds ``entries`` full drops its oldest quarter (at least one entry), in
    insertion order. Not one at a time: a dict keeps the slots of deleted entries until it
    resizes, so finding the oldest live entry (``next(iter(entries))``) walks every slot
    dropped before it, and dropping one entry a new key cost ~12 us at 65,536 entries
    (0.15 us while filling, CPython 3.11); a quarter at once spreads one walk over
    ``size // 4`` new keys.

    >>> d: dict[str, int] = {"a": 1, "b": 2}
    >>> keep(d, "c", 3, 2), d
    (3, {'b': 2, 'c': 3})
    >>> keep(d, "b", 4, 2), d
    (4, {'b': 4, 'c': 3})
    >>> d = dict.fromkeys("abcdefgh", 0)
    >>> keep(d, "i", 1, 8), "".join(d)
    (1, 'cdefghi')
    """
    if key not in entries and len(entries) >= size:
        for old in list(islice(entries, max(1, size // 4))):
            del entries[old]
    entries[key] = value
    return value


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``size`` of them, the oldest dropped first (:func:`keep`).

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
        return self.get_from(key, lambda _: make())

    def get_from(self, key: K, make: Callable[[K], V]) -> V:
        """:meth:`get` with ``make(key)`` made on a miss: no closure for a caller to build on
        every call (a hot memo read, issue 27).

        >>> memo = BoundedMemo[int, int](2)
        >>> memo.get_from(3, lambda k: k * k), memo.get_from(3, lambda k: 0)
        (9, 9)
        """
        try:
            hit = self.entries.get(key, _ABSENT)
        except TypeError:  # an unhashable key: computed, not kept
            return make(key)
        if hit is _ABSENT:
            hit = make(key)
            self.put(key, hit)
        return hit  # type: ignore[return-value]

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` (hashable), the oldest entries dropped first where a
        new key finds the memo full (a quarter of them at once, :func:`keep`): what
        :meth:`get` keeps on a miss (it calls this), for callers that read :attr:`entries`
        themselves and decide afterwards whether to keep what they made.

        >>> memo = BoundedMemo[str, int](2)
        >>> memo.put("a", 1); memo.put("b", 2); memo.put("a", 3); memo.put("c", 4)
        >>> memo.entries
        {'b': 2, 'c': 4}
        """
        keep(self.entries, key, value, self.size)

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
