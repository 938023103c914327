"""Gather chains in the analytic list schedule: the recurrence of the fine tasks a
:class:`~perfmodel.parallel.taskgraph.ChainTask` stands for, and its rows on demand.

A gather chain (ZeRO-3/FSDP parameter gathers, Megatron-Core's first forward) is one task of
the analytic graph whose schedule is its fine tasks' (each segment's gather, compute and
reduction), computed inside :func:`perfmodel.sim.engine._list_schedule` with the fine tasks'
floating-point operations, so every time is bit for bit theirs:

* :func:`_chain`: a chain of :attr:`~perfmodel.parallel.taskgraph.ChainStatic.flat` segments
  (the marks the lowering reads and the values it started from kept; its rows and other
  marks made again on demand, :func:`chain_rows`, :func:`_early_mark`); :func:`_chain_runs`:
  the general recurrence (hidden gather runs, a ``then_s`` of more than one piece), a row
  and a mark per item;
* :func:`_encoded_end`, :func:`_anchors`, :func:`_dep_end`: the ends encoded dependencies
  stand for (a chain's marks, an operation task's pieces), as the list schedule reads them;
  :func:`mark_count`, a chain's marks.

:data:`ChainEntry` is what the list schedule keeps per chain (``Timeline.chains``); the
breakdown reads rows through :func:`chain_rows`, marks through :func:`chain_marks`.

The flat chains' recurrence (``g_i = max(g free, h_{i-2}) + G_i``, ``cs_i = max(e_{i-1},
g_i's end)``, ``h_i = cs_i + C_i``, ``e_i = h_i + T_i``, ``r_i = max(r free, e_i) + R_i``) is
written four times, each with the same operations on the same values so that every time is
bit for bit the same (kept apart for speed: each is a hot loop over ~37,000 segments of the
gather-bound GPT-3 175B FSDP plan): :func:`_chain`'s two loops (reducing or not),
:func:`chain_rows` (the rows and marks, from the five start values; the breakdown's events
read them), and ``perfmodel.report.step_breakdown``'s ``_flat_split`` (the critical device's
compute stream as transitions). A change to it goes in all four; ``tests/sim/test_lazy_chain_rows.py`` compares them with :func:`_chain_runs`'
general recurrence.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from perfmodel.parallel.taskgraph import (
    CHAIN,
    HEAD,
    ROW_COMPUTE_START,
    SENT,
    ChainRow,
    ChainSegment,
    ChainStatic,
    ChainTask,
    Task,
)

#: What the list schedule keeps of one gather chain (``Timeline.chains``): one list, its marks
#: (:data:`~perfmodel.parallel.taskgraph.CHAIN`; ``entry[j]`` is mark ``j`` for ``j <= m``,
#: ``m`` = :func:`mark_count` less one: one mark per segment, two per hidden gather run, then
#: mark ``m``, the last reduction's end) followed by, for a chain of
#: :attr:`~perfmodel.parallel.taskgraph.ChainStatic.flat` segments (:func:`_chain`; its
#: marks ``0 .. m - 3`` left ``None`` until read, :func:`_early_mark`), the five
#: values its recurrence started from (``s``: when its compute stream and dependencies let it
#: start; the gather and reduction streams' free times; anchor two, anchor one), from which
#: :func:`chain_rows` makes its rows on demand; for another chain (:func:`_chain_runs`), its
#: rows (per item a plain tuple laid out as :class:`~perfmodel.parallel.taskgraph.ChainRow`, a
#: hidden gather run's as :class:`~perfmodel.parallel.taskgraph.ChainRunRow`). One container
#: per chain (~6,000 per list schedule of GPT-3 175B FSDP dp8 tp16 pp8 interleaved, each one
#: the young collection walks; three before wave 14). Read rows through :func:`chain_rows` /
#: ``Timeline.chain_rows``, marks through :func:`chain_marks` (the last item tells the two
#: kinds apart: rows are a list, a start value a float). The list schedule reads a mark by its
#: index (:func:`_encoded_end`, the anchors; ``None``: :func:`_early_mark`), its range
#: unchecked: an index past the marks would read a
#: start value or the rows (``tests/sim/test_lazy_chain_rows.py`` checks every encoded index
#: of the tested graphs is a mark). Two entries of the same chain compare equal (``==``, as
#: ``Timeline.chains`` equality in ``tests/sim/test_gather_chains.py`` reads them) only when
#: the same early marks have been filled: :func:`_early_mark` writes floats where an entry
#: no dependency read yet holds ``None``.
ChainEntry = list[Any]

#: When each stream is next free (seconds), per device and stream name: the list schedule's
#: stream state (``engine._list_schedule``), a dictionary per device so that a task's stream is
#: found by its two strings (no ``(device, stream)`` tuple made, hashed and compared per task).
Free = defaultdict[str, dict[str, float]]

#: ``divmod(x, SENT)`` of an encoded dependency less its base (``CHAIN``, ``HEAD``) is ``(x >>
#: SHIFT, x & LOW)``: ``SENT`` is a power of two (``tests/sim/test_dependency_kinds.py``).
#: Two bit operations on the two-digit integers the encodings are cost less than ``divmod``'s
#: long division and its tuple: ~0.19 us per anchor read (two per chain) down to ~0.1 us, GPT-3
#: 175B FSDP dp8 tp16 pp8 interleaved's 6,144 chains.
SHIFT = SENT.bit_length() - 1
LOW = SENT - 1

#: Flat chains (:attr:`~perfmodel.parallel.taskgraph.ChainStatic.flat`) through :func:`_chain`'s
#: own recurrence, which keeps no rows and of the marks only the last two ``h`` (the next
#: chain's anchors) and mark ``n`` (the entry's other marks ``None``, made where read:
#: :func:`_early_mark`); ``False``: every chain through :func:`_chain_runs`, the general
#: recurrence that keeps every mark and row, the direct path the tests compare with
#: (``tests/sim/test_lazy_chain_rows.py``). Issue 27: storing each ``h`` was ~1.5-2 ms of the
#: ~13 ms list schedule of GPT-3 175B FSDP dp8 tp16 pp8 interleaved (37,632 segments).
FLAT_CHAINS = True

_ROW_HEAD = ChainRow._fields.index("head_end_s")  # a row's h (its first compute's end)

#: Per segment count ``n``, the ``n - 2`` marks a flat chain leaves ``None`` (:func:`_chain`):
#: one unpacking makes an entry (~0.12 us against ~0.23 for a list of ``None`` filled in)
_PADS: dict[int, list[None]] = {}


def _encoded_end(
    d: int,
    start: list[float],
    end: list[float],
    tasks: tuple[Task, ...],
    chains: dict[int, ChainEntry],
) -> float:
    """The end a dependency at or above ``HEAD`` stands for (``_list_schedule``): the first
    compute of task ``d - HEAD`` and ``j`` pieces after it (``piece_end``), or mark ``j`` of a
    chain task (``chain_mark``)."""
    if d >= CHAIN:
        d -= CHAIN
        e = chains[d & LOW][d >> SHIFT]
        return _early_mark(d, tasks, chains) if e is None else e  # type: ignore[no-any-return]
    d -= HEAD
    j = d >> SHIFT
    d &= LOW
    x = tasks[d]
    e = start[d] + x.duration_s
    if j:
        for y in x.then_s[:j]:
            e += y
    return e


def _chain(
    t: ChainTask,
    s: float,
    free: Free,
    start: list[float],
    end: list[float],
    tasks: tuple[Task, ...],
    chains: dict[int, ChainEntry],
    busy: dict[str, float] | None = None,
) -> tuple[float, float]:
    """Start and end of gather chain ``t`` (:class:`~perfmodel.parallel.taskgraph.ChainTask`)
    whose compute stream and dependencies let it start at ``s``: the list schedule of the fine
    tasks it stands for, in their program order and with their arithmetic. Segment ``i``'s
    gather starts when the gather stream is free and its anchor ended (``a0``, ``a1``; from
    segment 2 on, the first compute of segment ``i - 2``: ``g_i = max(g_{i-1}, h_{i-2}) +
    G_i``); its compute when the previous one ended (``s`` for the first) and its gather did,
    ends ``h_i`` after its first compute and ``e_i`` after its ``then_s``; its reduction (if
    the operation reduces) when the reduction stream is free and ``e_i``, for ``R_i``. Records
    in ``chains`` the marks the lowering reads (``h_{n-2}``, ``h_{n-1}``: the next chain's
    anchors; mark ``n``, the last reduction's end; the earlier marks ``None``, made where
    read by :func:`_early_mark`) and the five values the rows are made from again
    (:func:`chain_rows`), and the gather and reduction streams' free times in ``free``; with ``busy`` (``_chain_mode``), adds each compute's ``e_i - cs_i``
    to ``busy[t.device]`` in order (``(b + e_i) - cs_i``, as ``_compute_busy`` read the rows)."""
    static, a0, a1 = t.chain
    # the anchors of the first two gathers (-inf: none), for either recurrence. An earlier
    # chain's marks (the usual anchors) are read inline, as _anchors reads them
    if a0 >= CHAIN and a1 >= CHAIN:
        x = a0 - CHAIN
        two0 = chains[x & LOW][x >> SHIFT]
        if two0 is None:  # a flat chain's mark before its last two (FLAT_CHAINS)
            two0 = _early_mark(x, tasks, chains)
        x = a1 - CHAIN
        one0 = chains[x & LOW][x >> SHIFT]
        if one0 is None:
            one0 = _early_mark(x, tasks, chains)
    else:
        two0, one0 = _anchors(a0, a1, start, end, tasks, chains)
    flat = static.flat
    if flat is None or not FLAT_CHAINS:  # hidden gather runs, or a then_s of more than one piece
        return _chain_runs(t, s, free, two0, one0, chains, busy)
    dev = t.device
    fd = free[dev]
    gk, rk = static.gather_stream, static.reduce_stream
    fg = fg0 = fd.get(gk, 0.0)  # fg0 ... one0: what the rows start from (chain_rows)
    fr = fr0 = fd.get(rk, 0.0)
    two, one = two0, one0  # then each first compute's end
    ce = s
    b = 0.0 if busy is None else busy.get(dev, 0.0)
    # segment i: h = max(e_{i-1}, g_i's end) + C_i, e_i = h + T_i (then_s's one piece); its
    # reduction when the reduction stream is free and e_i. Kept: the last two h (the next
    # chain's anchors, in ``two`` and ``one`` after the loop); every other value of the rows
    # (each h too) is made again on demand (chain_rows)
    if static.reducing:
        for g, c, x, r in flat:
            fg = (fg if fg >= two else two) + g  # max(stream free, anchor): one of the two
            cs = ce if ce >= fg else fg
            h = cs + c
            ce = e = h + x
            b = b + e - cs
            two = one
            one = h
            fr = (fr if fr >= e else e) + r
    else:
        for g, c, x, _ in flat:
            fg = (fg if fg >= two else two) + g
            cs = ce if ce >= fg else fg
            h = cs + c
            ce = h + x
            b = b + ce - cs
            two = one
            one = h
    fd[gk] = fg
    if static.reducing:
        fd[rk] = fr  # after the gather stream's, as _chain_runs (the streams differ anyway)
    # marks 0 .. n - 3 left None (made by _early_mark where read), n - 2 and n - 1 the last
    # two h, mark n, then what the rows start from: the kept layout, as long
    n = len(flat)
    if n > 1:
        pad = _PADS.get(n)
        if pad is None:
            pad = _PADS[n] = [None] * (n - 2)
        entry: ChainEntry = [*pad, two, one, fr, s, fg0, fr0, two0, one0]
    else:
        entry = [one, fr, s, fg0, fr0, two0, one0]
    if busy is not None:
        busy[dev] = b
    chains[t.tid] = entry
    # the first compute's start, again: max(s, g_0's end), the loop's first operations
    ge = (fg0 if fg0 >= two0 else two0) + flat[0][0]
    return (s if s >= ge else ge), ce


def mark_count(static: ChainStatic) -> int:
    """The marks of a chain of ``static``: one per segment (its first compute's end), two per
    hidden gather run (the ends of its pieces 2 and 4, :func:`_chain_runs`), and the last
    reduction's end after them."""
    items = static.items
    return len(items) + sum(type(it) is not ChainSegment for it in items) + 1


def chain_marks(static: ChainStatic, entry: ChainEntry) -> list[float]:
    """The marks of a chain of ``static`` whose ``entry`` ``_list_schedule`` recorded
    (``Timeline.chains``): mark ``j`` is ``entry[j]``, ``j < mark_count(static)``."""
    n = mark_count(static)
    # after the marks: the rows (one list) or the five values the recurrence started from
    assert len(entry) == n + (1 if type(entry[-1]) is list else 5), "entry of another chain"
    if type(entry[-1]) is list:
        return entry[:n]
    # a flat chain keeps its last two h and mark n only (_chain): each h made again
    return [row[_ROW_HEAD] for row in chain_rows(static, entry)] + [entry[n - 1]]


def _early_mark(x: int, tasks: tuple[Task, ...], chains: dict[int, ChainEntry]) -> float:
    """Mark ``j`` of chain ``tid`` (``x = j * SENT + tid``, an encoded dependency less
    ``CHAIN``) where :func:`_chain` left it ``None``: a flat chain keeps only the marks the
    lowering reads (its last two ``h``, the next chain's anchors, and mark ``n``, the last
    reduction's end: ``perfmodel.parallel.lower_hidden`` ``_chain_static``); an earlier one,
    which only a hand-made graph reads, is its row's ``h`` (:func:`chain_rows`: the same
    operations on the same values, so bit for bit the ``h`` the list schedule computed),
    written into the entry with every other early mark."""
    tid, j = x & LOW, x >> SHIFT
    entry = chains[tid]
    for i, row in enumerate(chain_rows(tasks[tid].chain[0], entry)[:-2]):  # type: ignore[attr-defined]
        entry[i] = row[_ROW_HEAD]
    return entry[j]  # type: ignore[no-any-return]


def chain_rows(static: ChainStatic, entry: ChainEntry) -> list[tuple[float, ...]]:
    """The rows of a chain whose ``entry`` ``_list_schedule`` recorded (``Timeline.chains``):
    per item a plain tuple laid out as :class:`~perfmodel.parallel.taskgraph.ChainRow` (a
    hidden gather run's as :class:`~perfmodel.parallel.taskgraph.ChainRunRow`).

    A chain of :attr:`~perfmodel.parallel.taskgraph.ChainStatic.flat` segments (:func:`_chain`)
    keeps only its last two marks ``h``, mark ``n`` and the five values it started from
    (``s``, the gather and reduction streams' free times, the two anchors): each row is the
    same recurrence made again with the same operations on the same values (``g_i = max(g
    free, anchor) + G_i``, the anchor ``h_{i-2}``; ``cs_i = max(e_{i-1}, g_i's end)``,
    ``e_{-1} = s``; ``h_i = cs_i + C_i``; ``e_i = h_i + T_i``; ``r_i = max(r free, e_i) +
    R_i``), so every time is bit for bit the one :func:`_chain` computed (tested against
    :func:`_chain_runs`' eager rows). Other chains keep their rows."""
    if type(entry[-1]) is list:  # _chain_runs' entry: its rows, kept
        return entry[-1]  # type: ignore[no-any-return]
    ce, fg, fr, two, one = entry[-5:]
    rows: list[tuple[float, ...]] = []
    add = rows.append
    reducing = static.reducing
    for g, c, x, r in static.flat:  # type: ignore[union-attr]
        gs = fg if fg >= two else two
        fg = ge = gs + g
        cs = ce if ce >= ge else ge
        h = cs + c
        ce = e = h + x
        if reducing:
            rs = fr if fr >= e else e
            fr = re = rs + r
            add((gs, ge, cs, h, e, rs, re))
        else:
            add((gs, ge, cs, h, e, 0.0, 0.0))
        two = one
        one = h
    return rows


def _chain_runs(
    t: ChainTask,
    s: float,
    free: Free,
    two: float,
    one: float,
    chains: dict[int, ChainEntry],
    busy: dict[str, float] | None,
) -> tuple[float, float]:
    """:func:`_chain` of a chain with hidden gather runs (``perfmodel.parallel.lower_hidden``
    ``_lower_run``) or whose segments' ``then_s`` are not all one piece (no ``flat``): a
    segment item as there, its pieces added in order; a run item ``(G_0, 0.0, then, R, ...,
    G_1, _, L)`` as its fine tasks: its first gather after anchor ``two`` (``g_0``), its second after
    anchor ``one`` (``g_1``; ``two`` and ``one``: the ends of the chain's anchors, as
    :func:`_chain` read them), both on the gather stream in that order; its run task at ``cs =
    max(previous end, g_0's end)``, its pieces added in order (``then``: the computes ending
    at pieces 2 and 4 are the next anchors, marks ``a`` and ``b``); its lead on the device's
    ``grad-lead`` stream from ``cs`` for ``L``, then its summary reduction of ``R`` on the
    reduction stream after the lead. A run's row is a segment's (``h = cs``: no first
    compute) followed by ``(g_1 start, g_1 end, lead start, lead end)``. With ``busy``, adds
    each item's ``e - cs`` to ``busy[t.device]`` in order, as :func:`_chain` does."""
    static = t.chain[0]
    segs, g_stream, r_stream = static.items, static.gather_stream, static.reduce_stream
    reducing = static.reducing
    dev = t.device
    fd = free[dev]
    gk, rk, lk = g_stream, r_stream, "grad-lead"
    fg = fd.get(gk, 0.0)
    fr = fd.get(rk, 0.0)
    fl = fd.get(lk, 0.0)
    marks: list[float] = []
    rows: list[tuple[float, ...]] = []
    ce = s
    rs = re = 0.0
    bs = 0.0 if busy is None else busy.get(dev, 0.0)
    for seg in segs:
        g, c, then, r = seg[0], seg[1], seg[2], seg[3]  # ChainSegment's and ChainRun's
        gs = fg if fg >= two else two
        ge = gs + g
        fg = ge
        if type(seg) is ChainSegment:  # as _chain
            cs = ce if ce >= ge else ge
            h = cs + c
            e = h
            for x in then:
                e += x
            marks.append(h)
            two, one = one, h
            if reducing:
                rs = fr if fr >= e else e
                re = rs + r
                fr = re
            rows.append((gs, ge, cs, h, e, rs, re))
            bs = bs + e - cs
            ce = e
            continue
        g1s = fg if fg >= one else one  # the run's second gather, on its own anchor
        g1e = g1s + seg.gather1_s
        fg = g1e
        cs = ce if ce >= ge else ge
        h = cs + c  # the run task's zero-length start
        a = h + then[0] + then[1]
        b = a + then[2] + then[3]
        e = b + then[4]
        marks.append(a)
        marks.append(b)
        two, one = a, b
        ls = le = 0.0
        if reducing:
            ls = fl if fl >= h else h
            le = ls + seg.lead_s
            fl = le
            rs = fr if fr >= le else le
            re = rs + r
            fr = re
        rows.append((gs, ge, cs, h, e, rs, re, g1s, g1e, ls, le))
        bs = bs + e - cs
        ce = e
    marks.append(fr)
    fd[gk] = fg
    if reducing:
        fd[rk] = fr
        fd[lk] = fl  # unchanged without runs: the value a later read would get
    marks.append(rows)  # type: ignore[arg-type]
    chains[t.tid] = marks
    if busy is not None:
        busy[dev] = bs
    return rows[0][ROW_COMPUTE_START], ce


_NONE = float("-inf")


def _anchors(
    a0: int,
    a1: int,
    start: list[float],
    end: list[float],
    tasks: tuple[Task, ...],
    chains: dict[int, ChainEntry],
) -> tuple[float, float]:
    """The ends of a chain's two anchors ``a0`` and ``a1`` as ``_list_schedule`` reads them
    (``-inf``: below 0, no anchor; else :func:`_dep_end`, a mark of an earlier chain, the
    usual anchor, as :func:`_encoded_end` reads it)."""
    two = _NONE if a0 < 0 else _dep_end(a0, start, end, tasks, chains)
    return two, _NONE if a1 < 0 else _dep_end(a1, start, end, tasks, chains)


def _dep_end(
    d: int,
    start: list[float],
    end: list[float],
    tasks: tuple[Task, ...],
    chains: dict[int, ChainEntry],
) -> float:
    """The end dependency ``d >= 0`` stands for, every encoding
    (``perfmodel.parallel.taskgraph``: a task's end, ``SENT`` its folded send's, ``HEAD``
    :func:`~perfmodel.parallel.taskgraph.piece_end`'s, ``CHAIN`` a chain's mark). The one
    decoder by a call (a chain's anchors; ``engine._over`` calls it for ``HEAD`` and ``CHAIN``
    only); ``engine._list_schedule``, ``engine._chain_mode`` and ``engine._over`` repeat its
    plain and ``SENT`` cases inline in their hot loops: a new encoding goes in all four
    (``tests/sim/test_dependency_kinds.py``)."""
    if d < SENT:
        return end[d]
    if d < HEAD:
        return end[d - SENT] + tasks[d - SENT].send_s
    return _encoded_end(d, start, end, tasks, chains)
