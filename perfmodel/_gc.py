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
When it restores it, it also moves the objects the body left to the oldest generation
(:data:`PROMOTE_SURVIVORS`, :func:`_promote`), so the young collection that the restored threshold
starts at once does not walk them all (issue 27).
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

PROMOTE_SURVIVORS = True
"""When the outermost :func:`fewer_collections` restores the caller's threshold, move every
tracked object to the oldest generation (:func:`_promote`: ``gc.freeze()`` then
``gc.unfreeze()``, two list splices). Without it, the young generation still holds what the body
made and kept (a prediction's report cache, ``perfmodel.api._REPORTS``, keeps its timeline and
task graph: ~28,000 containers for GPT-3 175B FSDP dp8 tp16 pp8 interleaved on 1024 A100, 6,144
``ChainTask`` and their tuples and chain entries), already past the restored threshold, so the
next allocation started a young collection that walked them all and moved them to the middle
generation (whose collections walk them again, every tenth young one): 2.2-4.1 ms CPU on that
plan and 0.14-0.57 ms on the median plans of ``bench_speed.py --only presets``, the collector
freeing nothing (``gc.callbacks`` timing, 2-core development machine). Promoted, they are walked
by full collections only, which CPython starts when the objects that survived a middle
collection since the last full one pass a quarter of the oldest generation (``Modules/
gcmodule.c``, ``long_lived_pending``; promoted objects do not count): fewer walks, no result
changed (the collector decides no number). What changes: unreachable cycles the body left (none
after an analytic ``predict``; ~10 objects after a SimPy one, ``gc.collect()`` counts) and a
caller's young objects wait for a full collection (or ``gc.collect()``) instead of a young one.
``False``: the threshold restored only, as before (``tests/test_api_gc.py`` compares both)."""

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
        old = gc.get_threshold()
        _saved = None
        if 0 < old[0] < young:
            _saved = old
            _young = young
            gc.set_threshold(young, *old[1:])

    def leave() -> None:
        global _saved
        if _saved is not None:
            if gc.get_threshold() == (_young, *_saved[1:]):
                gc.set_threshold(*_saved)
            _saved = None
            if PROMOTE_SURVIVORS:
                _promote()

    return _COLLECTOR.use(enter, leave)


def _promote() -> None:
    """Move every object the collector tracks to its oldest generation without walking them
    (:data:`PROMOTE_SURVIVORS`): ``gc.freeze()`` splices every generation into the permanent one
    and zeroes the young count, ``gc.unfreeze()`` splices the permanent one into the oldest
    (CPython ``Modules/gcmodule.c``, ``gc_freeze_impl``, ``gc_unfreeze_impl``). Not when objects
    are frozen already (a caller's own ``gc.freeze()``, or ``perfmodel``'s exit,
    :func:`perfmodel.cli.program`): unfreezing would hand theirs back to the collector."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


__all__ = ["CLI_YOUNG_THRESHOLD", "PROMOTE_SURVIVORS", "YOUNG_THRESHOLD", "fewer_collections"]
