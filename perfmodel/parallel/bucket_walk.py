"""A chunk's gradient buckets as id ranges, the stack's repeating blocks walked once (issue 27,
wave 13).

:func:`~perfmodel.parallel.lowering._segment_groups` closes a data-parallel gradient bucket
when the bytes walked in backward order (reverse layer ids) reach its capacity (PyTorch DDP's
``bucket_cap_mb``, Megatron's buckets; the first bucket may have a size of its own), one layer
at a time, and lists every id of every bucket: a GPT-3 175B chunk of two stages is ~580 layers
walked and listed, and every new plan (a new micro-batch and TP pair: new layer objects) walks
them again. :func:`bucket_ranges` gives the same buckets as ``(lo, hi)`` id ranges, and inside
a stack's whole copies of one block walks a stretch of blocks once: the walk is a function of
its state where a block is entered from above (the bytes in the open bucket, its capacity, how
far above the open bucket began), so where that state repeats, bit for bit, ``d`` ids lower
(a whole number of blocks, the same bytes read in the same order), every bucket closed in
between is closed again ``d`` ids lower, as many times as whole periods fit before the copies
or the chunk end; the walk then goes on from that state. Exact: the same additions of the same
floats in the same order, the same comparisons (the state compared is every input of the
walk's next step but the layer's bytes, which repeat with the block).

Measured: ``docs/design.md``, "A chunk's buckets as id ranges" (a warm GPT-3 175B PyTorch DDP
dp64 tp8 pp2 plan's chunks, two of ~580 layers and ~193 buckets each, rebuilt in 0.85-1.0 ms
instead of 1.19 ms).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: Whether :func:`~perfmodel.parallel.lowering.build_chunk` splits a bucketed chunk of
#: consecutive ids by :func:`bucket_ranges` (tests compare both ways).
RANGES = True


def bucket_ranges(
    lo: int,
    hi: int,
    cap_first: float,
    cap_rest: float,
    block_b: Sequence[float],
    start: int,
    end: int,
    bytes_of: Callable[[int], float],
    params_of: Callable[[int], int],
) -> list[tuple[int, int]]:
    """The buckets of ids ``lo .. hi`` (inclusive, consecutive) in backward order, each as
    ``(first id, last id)``: the first bucket closes when its bytes reach ``cap_first``, the
    others ``cap_rest``; a last bucket without parameters joins the one before it
    (:func:`~perfmodel.parallel.lowering._segment_groups`, whose id lists these are, reversed).

    ``block_b[j]`` is the gradient bytes of layer ``j`` of the block whose whole copies are ids
    ``start .. end - 1`` (``len(block_b)`` ids each; ``start == end``: none), ``bytes_of(i)``
    those of a layer outside them, ``params_of(i)`` a layer's parameters (any id)."""
    p = len(block_b)
    out: list[tuple[int, int]] = []
    acc, cap = 0.0, cap_first
    top: int | None = None  # the open bucket's highest id (None: empty)
    seen: dict[tuple[float, float, int], tuple[int, int]] = {}  # state -> (id, len(out))
    i = hi
    while i >= lo:
        if start <= i < end:
            if p and (i + 1 - start) % p == 0:  # entering a block from above
                state = (acc, cap, -1 if top is None else top - i)
                was = seen.get(state)
                if was is None:
                    seen[state] = (i, len(out))
                else:
                    i0, n0 = was
                    d = i0 - i  # whole blocks; the stretch i + 1 .. i0 closed out[n0:]
                    room = i + 1 - max(lo, start)  # ids left above the copies' or chunk's start
                    reps = room // d
                    if reps > 0:
                        period = out[n0:]
                        for r in range(d, reps * d + 1, d):  # r: each period's shift
                            out += [(a - r, b - r) for a, b in period]
                        i -= reps * d
                        if top is not None:
                            top -= reps * d  # the open bucket as far above i as before
                        seen.clear()
                        continue
            acc += block_b[(i - start) % p]
        else:
            acc += bytes_of(i)
        if top is None:
            top = i
        if acc >= cap:
            out.append((i, top))
            top, acc, cap = None, 0.0, cap_rest
        i -= 1
    if top is not None:
        if out and sum(params_of(j) for j in range(lo, top + 1)) == 0:
            out[-1] = (lo, out[-1][1])
        else:
            out.append((lo, top))
    return out
