"""Fewer cyclic garbage collections while a prediction or a CLI command runs (issue 14).

A prediction allocates hundreds of thousands of small container objects (tasks, layer costs,
routes, report dictionaries) that live until it returns. CPython's default collector threshold
(700 net allocations per young collection, ``gc.get_threshold() == (700, 10, 10)``) then runs
~270 young and ~26 older collections in one ``perfmodel predict`` of GPT-3 175B on 1024 A100, and
the older ones traverse every object the imports created: 0.12-0.14 s CPU of a 0.7 s command
(``gc.callbacks`` timing on the 2-core development machine). With the young threshold at
:data:`YOUNG_THRESHOLD` the same command runs 9 young collections and no older one, 0.03 s; its
peak memory is unchanged (79-84 MB, ``ru_maxrss``), as is every result (the collector frees only
unreachable cycles). mypy does the same for the same reason (``mypy/build.py``,
``gc.set_threshold(200 * 1000, 30, 30)``: "otherwise we can spend a large fraction of cpu in gc").

:func:`fewer_collections` raises the threshold for the outermost ``with`` only and restores the
caller's setting afterwards, so a library user's own GC configuration holds outside the call.
"""

from __future__ import annotations

import gc
from contextlib import AbstractContextManager

from perfmodel._outermost import Outermost

YOUNG_THRESHOLD = 50_000
"""Net container allocations between young collections inside :func:`fewer_collections`
(CPython default 700). 200,000 (mypy's) measured no faster here: 0.03-0.05 s either way."""

CLI_YOUNG_THRESHOLD = 200_000
"""The same for a whole ``perfmodel`` command (:func:`perfmodel.cli.program`; mypy's value), whose
process exits after it. Once numpy left the analytic prediction (issue 14), the GPT-3 175B
``predict --fidelity analytic`` on 1024 A100 made ~150,000 net allocations after its imports:
3 young collections of ~50,000 young objects at :data:`YOUNG_THRESHOLD`, 10-20 ms CPU of a
0.37 s command (``gc.callbacks`` timing on the 2-core development machine), none at 200,000.
Only unreachable cycles wait longer to be freed; the results are the same."""

_COLLECTOR = Outermost()
_saved: tuple[int, ...] | None = None
_young = YOUNG_THRESHOLD  # the threshold the outermost use set (restored from when it exits)


def fewer_collections(young: int = YOUNG_THRESHOLD) -> AbstractContextManager[None]:
    """Run the body with the young-generation threshold at ``young`` (default
    :data:`YOUNG_THRESHOLD`; unless the caller's is already higher, or 0: collection disabled);
    nested and concurrent uses share the outermost one's setting, restored when the last one
    exits unless someone changed it meanwhile."""

    def enter() -> None:
        global _saved, _young
        _saved = raise_young(young)
        if _saved is not None:
            _young = young

    def leave() -> None:
        global _saved
        if _saved is not None:
            if gc.get_threshold() == (_young, *_saved[1:]):
                gc.set_threshold(*_saved)
            _saved = None

    return _COLLECTOR.use(enter, leave)


def raise_young(young: int) -> tuple[int, ...] | None:
    """Raise the young-generation collection threshold to ``young``, unless it is already higher
    or 0 (collection disabled); return the setting it replaced, or ``None`` when it left it as it
    was. The one rule :func:`fewer_collections` and compare's worker initializer
    (:class:`perfmodel.search.compare._IsolatedRunner`'s pool initializer) share."""
    old = gc.get_threshold()
    if 0 < old[0] < young:
        gc.set_threshold(young, *old[1:])
        return old
    return None


__all__ = ["CLI_YOUNG_THRESHOLD", "YOUNG_THRESHOLD", "fewer_collections", "raise_young"]
