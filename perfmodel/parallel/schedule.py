"""Pipeline schedules as per-stage operation orders (pure functions, no timing).

An operation is ``(phase, microbatch, chunk)`` with ``phase`` ``"F"`` or ``"B"``; ``chunk`` is the
model chunk index on that device (``0..v-1``). The global model chunk of device ``s`` and local
chunk ``c`` is ``c * p + s`` (Megatron-LM interleaving: device ``s`` holds layers of chunks
``s, s + p, s + 2p, ...``).

The executor (SimPy or the analytic list scheduler) runs each device's operations in this
order, each as soon as its inputs arrive; bubbles follow from the dependencies. With equal
per-chunk times and free communication this reproduces the known bubble fractions:
GPipe and 1F1B ``(p - 1) / m``, interleaved 1F1B ``(p - 1) / (v m)``
(Narayanan et al., SC21, sections 2.2.1-2.2.2).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import accumulate

from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel.plan import PipelineSchedule

Op = tuple[str, int, int]


def _warm_then_alternate(fwd: tuple[Op, ...], bwd: tuple[Op, ...], warm: int) -> list[Op]:
    """``warm`` forwards, then one forward and one backward in turn while forwards remain,
    then the remaining backwards (``fwd`` and ``bwd`` in issue order, equally long)."""
    total = len(fwd)
    steady = [op for pair in zip(fwd[warm:], bwd[: total - warm], strict=True) for op in pair]
    return [*fwd[:warm], *steady, *bwd[total - warm :]]


@lru_cache(maxsize=32)
def _one_f_one_b_ops(m: int) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """The forwards and backwards of :func:`one_f_one_b` in issue order (every stage's)."""
    return tuple(("F", i, 0) for i in range(m)), tuple(("B", i, 0) for i in range(m))


@lru_cache(maxsize=32)
def _interleaved_ops(p: int, m: int, v: int) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """The virtual forwards and backwards of :func:`interleaved` in issue order (every
    stage's): virtual micro-batch ``k`` is micro-batch ``(k // (p v)) p + k % p``, chunk
    ``(k // p) % v`` forward and ``v - 1 - (k // p) % v`` backward."""
    pv, total = p * v, m * v
    mbs = [(k // pv) * p + k % p for k in range(total)]
    fwd = tuple(("F", mbs[k], (k // p) % v) for k in range(total))
    bwd = tuple(("B", mbs[k], v - 1 - (k // p) % v) for k in range(total))
    return fwd, bwd


def gpipe(p: int, m: int, stage: int) -> list[Op]:
    """All forwards, then all backwards (Huang et al. 2019).

    >>> gpipe(2, 2, 0)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('B', 1, 0)]
    """
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def warmup_forwards(p: int, stage: int, interleave: int | None = None) -> int:
    """Forwards ``stage`` runs before 1F1B's alternation, uncapped: ``p - stage - 1`` for
    PipeDream-Flush 1F1B (``interleave`` ``None``), ``2 (p - stage - 1) + (v - 1) p`` virtual
    forwards for interleaved 1F1B over ``v = interleave`` chunks per device (Megatron-LM's
    ``forward_backward_pipelining_with_interleaving``, Narayanan et al. SC21). Callers cap it
    at the stage's ``m`` (``m v``) forwards.

    >>> warmup_forwards(4, 0), warmup_forwards(4, 0, 2), warmup_forwards(4, 3, 2)
    (3, 10, 4)
    """
    if interleave is None:
        return p - stage - 1
    return (p - stage - 1) * 2 + (interleave - 1) * p


def one_f_one_b(p: int, m: int, stage: int) -> list[Op]:
    """PipeDream-Flush 1F1B: ``min(p - stage - 1, m)`` warm-up forwards, then alternate.

    >>> one_f_one_b(2, 3, 0)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('F', 2, 0), ('B', 1, 0), ('B', 2, 0)]
    """
    fwd, bwd = _one_f_one_b_ops(m)
    return _warm_then_alternate(fwd, bwd, min(warmup_forwards(p, stage), m))


def check_interleaved(p: int, m: int) -> None:
    """Raise :class:`InfeasiblePlanError` unless ``p`` divides the ``m`` micro-batches
    (:func:`interleaved`'s requirement)."""
    if m % p:
        raise InfeasiblePlanError(
            f"interleaved schedule needs the number of micro-batches ({m}) to be a multiple of "
            f"pp={p}; use {((m // p) + 1) * p} or {max(p, (m // p) * p)} micro-batches",
            value=m,
            where="microbatch",
        )


def interleaved(p: int, m: int, stage: int, v: int) -> list[Op]:
    """Interleaved 1F1B over ``v`` chunks per device (Megatron-LM, Narayanan et al. SC21).

    Requires ``m % p == 0``. Virtual micro-batch ``k`` runs chunk ``(k // p) % v`` (backward:
    ``v - 1 - (k // p) % v``) of micro-batch ``(k // (p v)) p + k % p``; warm-up is
    ``(p - stage - 1) * 2 + (v - 1) * p`` virtual forwards (capped at ``m v``).
    """
    check_interleaved(p, m)
    fwd, bwd = _interleaved_ops(p, m, v)
    return _warm_then_alternate(fwd, bwd, min(warmup_forwards(p, stage, v), m * v))


def stage_ops(schedule: PipelineSchedule, p: int, m: int, stage: int, v: int = 1) -> list[Op]:
    """Operation order of ``stage`` under ``schedule``."""
    if schedule is PipelineSchedule.GPIPE:
        return gpipe(p, m, stage)
    if schedule is PipelineSchedule.ONE_F_ONE_B or p == 1:
        return one_f_one_b(p, m, stage)
    return interleaved(p, m, stage, v)


def peak_in_flight(ops: list[Op]) -> int:
    """Largest number of (micro-batch, chunk) activations held at once (forwards not yet
    matched by their backward) along an operation order.

    >>> peak_in_flight(gpipe(4, 8, 0)), peak_in_flight(one_f_one_b(4, 8, 0))
    (8, 4)
    """
    return max(accumulate((1 if op[0] == "F" else -1 for op in ops), initial=0))


@lru_cache(maxsize=1024)
def stage_peak_in_flight(schedule: PipelineSchedule, p: int, m: int, stage: int, v: int = 1) -> int:
    """:func:`peak_in_flight` of :func:`stage_ops`, without the operation lists (memoised: it
    depends on these integers only). GPipe holds all ``m``; 1F1B and interleaved 1F1B run
    ``w`` warm-up forwards of their ``n`` (``m``, or ``m v`` virtual) and then a forward and a
    backward in turn (:func:`_warm_then_alternate`), so the count peaks at ``w + 1`` after the
    first forward that follows the warm-up, or at ``n`` when the warm-up is all of them
    (``w = n``): ``min(w + 1, n)``. Refuses what :func:`interleaved` refuses.

    >>> from perfmodel.parallel.plan import PipelineSchedule as S
    >>> [stage_peak_in_flight(S.ONE_F_ONE_B, 4, 8, s) for s in range(4)]
    [4, 3, 2, 1]
    >>> stage_peak_in_flight(S.INTERLEAVED, 4, 8, 0, 2), stage_peak_in_flight(S.GPIPE, 4, 8, 0)
    (11, 8)
    """
    w, n, _ = _alternation(schedule, p, m, stage, v)
    return min(w + 1, n)


#: Whether :func:`chunk_moments` jumps over the operations that cannot change its answer
#: (:func:`_moments_jumping`) instead of walking them (:func:`_moments_walk`, the reference);
#: tests compare both ways.
JUMPS = True

#: One moment of a stage's schedule, per local chunk: ``(live, gathered, grads, done)``, its
#: (micro-batch) activation sets saved and not yet released by their backward, whether its
#: weights are gathered (from its first forward to its last backward), whether its unsharded
#: gradients are held (from its first backward to its last) and how many of its forwards have
#: run. :func:`chunk_moments` lists them.
ChunkState = tuple[int, bool, bool, int]


@lru_cache(maxsize=1024)
def chunk_moments(
    schedule: PipelineSchedule, p: int, m: int, stage: int, v: int = 1, windows: bool = True
) -> tuple[tuple[ChunkState, ...], ...]:
    """The moments of ``stage``'s operation order (:func:`stage_ops`) that can hold the most,
    each the :data:`ChunkState` of every local chunk while an operation runs: during a forward
    its micro-batch's set counts (saved as it runs), during a backward it still does
    (released as it runs); a chunk's windows include their first and last operation.
    ``windows=False``: the live counts only (windows ``False``, forwards run 0), for a stack
    whose weights and gradients do not follow the chunks' windows. Memoised.

    Only moments no other moment holds at least as much of, chunk by chunk, can be a stage's
    peak, so the list keeps the warm-up's last forward (each warm-up forward holds all the one
    before it does: more live sets and forwards run, windows only opening), the later forwards
    and each chunk's first backward (where its gradients appear), and in the cool-down (only
    backwards) the first and last backward of each run of one chunk's and the step's last:
    in the steady state a backward holds no more than the forward before it, but under
    ``torch.distributed.pipelining`` a finished backward trades its saved set for a kept
    ``.grad`` and an idle receive buffer (:func:`~perfmodel.parallel.stage_memory.
    _moment_peak`), so within a run of backwards the stage's memory may fall or grow, and is
    largest at one of the run's ends. Of the moments alike in live counts and windows the
    list keeps the last (the most forwards run): a few per phase of the schedule, not one per
    operation. Without windows the walk ends at the last forward. In order of first
    occurrence.

    The count of live sets summed over the chunks peaks at :func:`stage_peak_in_flight`; per
    chunk it says which chunk's sets the peak holds. Stage 3 of 4, interleaved over 2 chunks
    with 4 micro-batches, holds 4 of chunk 0 and 1 of chunk 1 at its peak of 5, never 2 of
    chunk 1:

    >>> from perfmodel.parallel.plan import PipelineSchedule as S
    >>> ms = chunk_moments(S.INTERLEAVED, 4, 4, 3, 2)
    >>> max(sum(c[0] for c in t) for t in ms), max(t[1][0] for t in ms)
    (5, 1)
    >>> [c[0] for c in max(ms, key=lambda t: sum(c[0] for c in t))]
    [4, 1]
    """
    if not windows and LIVE_RUNS:
        return _moments_live(schedule, p, m, stage, v)
    walk = _moments_jumping if JUMPS else _moments_walk
    return walk(schedule, p, m, stage, v, windows)


#: Whether :func:`chunk_moments` without windows reads the alternation run by run
#: (:func:`_moments_live`) instead of jumping (:func:`_moments_jumping`); tests compare both
#: with the walk.
LIVE_RUNS = True


def _moments_live(
    schedule: PipelineSchedule, p: int, m: int, stage: int, v: int
) -> tuple[tuple[ChunkState, ...], ...]:
    """:func:`chunk_moments` without windows (the live counts after each forward up to the
    last, in order of first occurrence), made run by run; bit for bit
    :func:`_moments_walk`'s (tests compare them over a grid of schedules).

    After the warm-up, forward ``k`` (chunk ``(k // p) % u``) is recorded and then backward
    ``k - w`` (chunk ``u - 1 - ((k - w) // p) % u``) releases a set, so while neither chunk
    changes (a run: ``k`` and ``k - w`` inside one block of ``p``) step ``t`` of the run
    records the counts with ``t`` more of the forward's chunk and ``t - 1`` fewer of the
    backward's; where the two are one chunk every step records the same counts. Whole
    periods of ``p u`` steps leave the counts as they were and record again what the next
    period records, so all but the last are skipped (the walk's skip)."""
    w, n, u = _alternation(schedule, p, m, stage, v)
    pu, live = p * u, [0] * v
    seen: dict[tuple, tuple[int, ...] | None] = {}
    if w:  # the warm-up's last forward holds all the ones before it do
        cycles, rest = divmod(w, pu)
        for c in range(u):
            live[c] = cycles * p + min(p, max(0, rest - c * p))
        seen[tuple(live)] = None
    k = w
    if k + 2 * pu <= n:
        k += ((n - k) // pu - 1) * pu
    while k < n:
        j = k - w
        cf, cb = (k // p) % u, u - 1 - (j // p) % u
        run = n - k if u == 1 else min((k // p + 1) * p, (j // p + 1) * p + w, n) - k
        x, y = live[cf], live[cb]
        if cf == cb:  # each step records the counts with one more of the chunk's sets
            live[cf] = x + 1
            seen[tuple(live)] = None
            live[cf] = x
        else:
            for t in range(1, run + 1):
                live[cf], live[cb] = x + t, y - t + 1
                seen[tuple(live)] = None
            live[cb] = y - run
        k += run
    return _moments_out(seen, False)


def _moments_walk(
    schedule: PipelineSchedule, p: int, m: int, stage: int, v: int, windows: bool
) -> tuple[tuple[ChunkState, ...], ...]:
    """:func:`chunk_moments` by walking the operations one by one (whole periods of the
    alternation skipped): the reference :func:`_moments_jumping` is compared with."""
    w, n, u = _alternation(schedule, p, m, stage, v)
    first_f, first_b, last_b = _chunk_windows(w, n, u, p, v)
    live, done = [0] * v, [0] * v
    seen: dict[tuple, tuple[int, ...] | None] = {}  # moment key -> forwards run
    # the windows change only where a chunk's window opens or closes
    edges = sorted({*first_f, *first_b, *(b + 1 for b in last_b)}) if windows else []
    edge_set = set(edges)
    flags: tuple[tuple[bool, bool], ...] = ((False, False),) * v

    hi, period, i = w + 2 * (n - w), 2 * p * u, 0
    if w > 1:  # the warm-up's forwards before its last, counted at once (forward k: chunk
        cycles, rest = divmod(w - 1, p * u)  # (k // p) % u); each held no more than the next
        for c in range(u):
            live[c] = done[c] = cycles * p + min(p, max(0, rest - c * p))
        i = w - 1
        if windows:  # the windows at position i (they change only at the edges)
            flags = _windows_at(i, first_f, first_b, last_b)
    # without windows, no moment comes after the last forward (a backward only releases)
    end = 2 * n if windows else (n if n <= w else hi - 1)
    while i < end:
        if w <= i and i + 2 * period <= hi:  # whole periods of the alternation: skip to the last
            nxt = edges[bisect_left(edges, i)] if edges and edges[-1] >= i else 2 * n
            t = (min(nxt, hi) - i) // period - 1
            if t > 0:  # each period runs p forwards and p backwards of every chunk
                i += t * period
                done = [d + t * p if c < u else d for c, d in enumerate(done)]
        is_f, c = _op_at(i, n, w, p, u)
        if windows and i in edge_set:
            flags = _windows_at(i, first_f, first_b, last_b)
        i += 1
        if is_f:
            live[c] += 1
            done[c] += 1
        elif not (windows and (i - 1 == first_b[c] or (i > hi and _run_end(i - 1 - n, p, n)))):
            live[c] -= 1  # released as it runs: holds no more than the operation before
            continue
        if windows:  # the forwards run (the last of a key kept), the states made at the end
            seen[(tuple(live), flags)] = tuple(done)
        elif (key := tuple(live)) not in seen:
            seen[key] = None
        if not is_f:
            live[c] -= 1
    return _moments_out(seen, windows)


def _moments_jumping(
    schedule: PipelineSchedule, p: int, m: int, stage: int, v: int, windows: bool
) -> tuple[tuple[ChunkState, ...], ...]:
    """:func:`chunk_moments` without visiting the operations that cannot change its answer;
    bit for bit :func:`_moments_walk`'s (tests compare them over a grid of schedules).

    The walk's dict keeps each moment key's first occurrence (its order) and last value, so
    a run of operations that records one key may be visited at its last operation alone, and
    operations that record nothing need only their net effect: (1) a pair of the alternation
    (forward ``k``, backward ``k - w``) whose forward and backward run the same chunk leaves
    the live counts as they were, so consecutive such pairs of one chunk between two window
    edges record one key, and only the forwards run grow (``done_c`` plus the pairs
    skipped); (2) a cool-down backward records only at a run end (:func:`_run_end`) or a
    window edge, and the ones between two such in a run of one chunk release that chunk's
    sets one each. Whole periods of the alternation are skipped as the walk skips them.
    """
    w, n, u = _alternation(schedule, p, m, stage, v)
    first_f, first_b, last_b = _chunk_windows(w, n, u, p, v)
    edges = sorted({*first_f, *first_b, *(b + 1 for b in last_b), 2 * n}) if windows else [2 * n]
    live, pu, hi = [0] * v, p * u, 2 * n - w
    seen: dict[tuple, tuple[int, ...] | None] = {}  # moment key -> forwards run
    flags: tuple[tuple[bool, bool], ...] = ((False, False),) * v

    def record() -> None:  # the moment after the operation just applied
        if windows:
            seen[(tuple(live), flags)] = tuple(done)
        elif (key := tuple(live)) not in seen:
            seen[key] = None

    def at_edge(i: int) -> tuple[tuple[tuple[bool, bool], ...], int]:  # flags, next edge
        return _windows_at(i, first_f, first_b, last_b), edges[bisect_right(edges, i)]

    if w:  # the warm-up's forwards, the last recorded (forward k runs chunk (k // p) % u)
        cycles, rest = divmod(w, pu)
        for c in range(u):
            live[c] = cycles * p + min(p, max(0, rest - c * p))
        if windows:
            flags = _windows_at(w - 1, first_f, first_b, last_b)
    done = live.copy()
    if w:
        record()
    nxt = edges[bisect_right(edges, w - 1)]  # the first window edge not yet applied
    k = w
    while k < n:  # the alternation: forward k at position i, then backward j = k - w
        i, j = 2 * k - w, k - w
        if k + 2 * pu <= n and (t := (min(nxt, hi) - i) // (2 * pu) - 1) > 0:
            k, i, j = k + t * pu, i + 2 * t * pu, j + t * pu  # whole periods, as the walk
            done = [d + t * p if c < u else d for c, d in enumerate(done)]
        cf, cb = (k // p) % u, u - 1 - (j // p) % u
        if cf == cb:  # pairs that leave the live counts: skip to the last of one chunk's
            e = edges[bisect_right(edges, i)]
            end = n if u == 1 else min((k // p + 1) * p, (j // p + 1) * p + w, n)
            extra = min(end - k, (e - i) // 2) - 1
            if extra > 0:
                k, i, j = k + extra, i + 2 * extra, j + extra
                done[cf] += extra
        if i >= nxt:
            flags, nxt = at_edge(i)
        live[cf] += 1
        done[cf] += 1
        record()
        if i + 1 >= nxt:
            flags, nxt = at_edge(i + 1)
        if windows and i + 1 == first_b[cb]:
            record()
        live[cb] -= 1
        k += 1
    j = n - w
    while windows and j < n:  # the cool-down: backward j at position n + j
        i, c = n + j, u - 1 - (j // p) % u
        if i >= nxt:
            flags, nxt = at_edge(i)
        if i == first_b[c] or _run_end(j, p, n):
            record()
        live[c] -= 1
        # the backwards up to the run's last, the step's last or the next edge record nothing
        # (the cool-down's edges, first and one past last backwards, fall on run starts, so
        # the edge bound never binds; it keeps a jump from crossing one if that changes)
        to = min((j // p) * p + p - 1, n - 1, nxt - n)
        if to > j + 1:
            live[c] -= to - j - 1
            j = to
        else:
            j += 1
    return _moments_out(seen, windows)


def _chunk_windows(w: int, n: int, u: int, p: int, v: int) -> tuple[list[int], ...]:
    """Per local chunk, the positions of its first forward, first backward and last backward
    in :func:`_warm_then_alternate`'s order (a chunk ``c >= u`` runs nothing: ``2 n``, ``2 n``,
    ``-1``)."""
    first_f = [_f_pos(c * p, w) if c < u else 2 * n for c in range(v)]
    first_b = [_b_pos((u - 1 - c) * p, n, w) if c < u else 2 * n for c in range(v)]
    last_b = [_b_pos(_last_b(c, n, p, u), n, w) if c < u else -1 for c in range(v)]
    return first_f, first_b, last_b


def _windows_at(
    i: int, first_f: list[int], first_b: list[int], last_b: list[int]
) -> tuple[tuple[bool, bool], ...]:
    """``(gathered, grads)`` of every chunk at position ``i`` (:func:`_chunk_windows`)."""
    return tuple(
        (first_f[k] <= i <= last_b[k], first_b[k] <= i <= last_b[k]) for k in range(len(first_f))
    )


def _moments_out(
    seen: dict[tuple, tuple[int, ...] | None], windows: bool
) -> tuple[tuple[ChunkState, ...], ...]:
    """The :data:`ChunkState` tuples of a walk's kept keys (``(live, flags) -> done`` with
    windows, ``live -> None`` without; two chunks, interleaving's usual count, unrolled)."""
    first = next(iter(seen), ())
    if not windows:
        if len(first) == 2:
            return tuple([((a, False, False, 0), (b, False, False, 0)) for a, b in seen])
        return tuple(tuple([(x, False, False, 0) for x in key]) for key in seen)
    if first and len(first[0]) == 2:
        return tuple(
            [
                ((a, *f0, d[0]), (b, *f1, d[1]))  # type: ignore[index]
                for ((a, b), (f0, f1)), d in seen.items()
            ]
        )
    return tuple(
        tuple([(lt[k], *fl[k], d[k]) for k in range(len(lt))])  # type: ignore[index]
        for (lt, fl), d in seen.items()
    )


def _run_end(j: int, p: int, n: int) -> bool:
    """Whether cool-down backward ``j`` (of ``n``; backward ``j`` runs chunk ``u - 1 - (j // p)
    % u``) starts or ends a run of one chunk's ``p`` backwards, or is the step's last."""
    return j % p in (0, p - 1) or j == n - 1


def _alternation(
    schedule: PipelineSchedule, p: int, m: int, stage: int, v: int
) -> tuple[int, int, int]:
    """``(w, n, u)`` of :func:`stage_ops`: ``w`` warm-up forwards of ``n`` (virtual)
    micro-batches over ``u`` chunks, then a forward and a backward in turn, then the rest of
    the backwards (:func:`_warm_then_alternate`; GPipe: ``w = n``, one chunk)."""
    if schedule is PipelineSchedule.GPIPE:
        return m, m, 1
    if schedule is PipelineSchedule.ONE_F_ONE_B or p == 1:
        return min(warmup_forwards(p, stage), m), m, 1
    check_interleaved(p, m)
    return min(warmup_forwards(p, stage, v), m * v), m * v, v


def _f_pos(k: int, w: int) -> int:
    """Position of virtual forward ``k`` in :func:`_warm_then_alternate`'s order."""
    return k if k < w else w + 2 * (k - w)


def _b_pos(j: int, n: int, w: int) -> int:
    """Position of virtual backward ``j`` in :func:`_warm_then_alternate`'s order."""
    return w + 2 * j + 1 if j < n - w else n + j


def _last_b(c: int, n: int, p: int, u: int) -> int:
    """The last virtual backward of chunk ``c`` (backward ``j`` runs chunk
    ``u - 1 - (j // p) % u``; ``u = 1``: every one chunk 0's)."""
    if u == 1:
        return n - 1
    blocks = n // p
    last = blocks - 1 - ((blocks - 1 - (u - 1 - c)) % u)
    return last * p + p - 1


def _op_at(i: int, n: int, w: int, p: int, u: int) -> tuple[bool, int]:
    """``(forward?, chunk)`` of the operation at position ``i`` of :func:`_warm_then_alternate`'s
    order (forward ``k`` runs chunk ``(k // p) % u``, backward ``j`` ``u - 1 - (j // p) % u``)."""
    if i < w:
        return True, (i // p) % u
    if i < w + 2 * (n - w):
        k, odd = divmod(i - w, 2)
        if not odd:
            k += w
            return True, (k // p) % u
        return False, u - 1 - (k // p) % u
    j = i - n
    return False, u - 1 - (j // p) % u


def round_robin(
    ops: Sequence[Sequence[Op]], pos: list[int]
) -> Iterator[tuple[int, Sequence[Op], int, int]]:
    """The global order a lowering emits the stages' operations in: stage ``0, 1, ..., P - 1``
    round after round. At each visit it yields ``(s, ops[s], pos[s], len(ops[s]))``; the
    caller emits stage ``s``'s operations from ``pos[s]`` on while the chunk each depends on
    has been emitted, and sets ``pos[s]`` past the last one it emitted before the next visit.
    Ends after the round in which every stage's operations are emitted; a round that emits
    none is a schedule bug (``RuntimeError``: the lowering would wait forever). The one
    driver of ``PipelineLowering.run_schedule``'s reference loop and of its speed doors
    (``run_plain_schedule``, ``run_chain_schedule``), which differ in what they emit per
    operation, not in this order.

    >>> ops, pos, done = [[("F", 0, 0), ("B", 0, 0)]] * 2, [0, 0], []
    >>> def ready(s, phase):  # a forward after the previous stage's, a backward after the next's
    ...     return s == (0 if phase == "F" else 1) or (phase, s - 1 if phase == "F" else s + 1) in done
    >>> for s, o, i, n in round_robin(ops, pos):
    ...     while i < n and ready(s, o[i][0]):
    ...         done.append((o[i][0], s))
    ...         i += 1
    ...     pos[s] = i
    >>> done
    [('F', 0), ('F', 1), ('B', 1), ('B', 0)]
    """
    total = sum(len(o) for o in ops)
    done = 0
    while done < total:
        for s, o in enumerate(ops):
            yield s, o, pos[s], len(o)
        now = sum(pos)
        if now == done:  # a schedule bug
            raise RuntimeError("pipeline schedule deadlocked during lowering")
        done = now
