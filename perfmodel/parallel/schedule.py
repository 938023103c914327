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

from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel.plan import PipelineSchedule

Op = tuple[str, int, int]


def gpipe(p: int, m: int, stage: int) -> list[Op]:
    """All forwards, then all backwards (Huang et al. 2019).

    >>> gpipe(2, 2, 0)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('B', 1, 0)]
    """
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def one_f_one_b(p: int, m: int, stage: int) -> list[Op]:
    """PipeDream-Flush 1F1B: ``min(p - stage - 1, m)`` warm-up forwards, then alternate.

    >>> one_f_one_b(2, 3, 0)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('F', 2, 0), ('B', 1, 0), ('B', 2, 0)]
    """
    warm = min(p - stage - 1, m)
    ops: list[Op] = [("F", i, 0) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        ops.append(("F", f, 0))
        f += 1
        ops.append(("B", b, 0))
        b += 1
    while b < m:
        ops.append(("B", b, 0))
        b += 1
    return ops


def interleaved(p: int, m: int, stage: int, v: int) -> list[Op]:
    """Interleaved 1F1B over ``v`` chunks per device (Megatron-LM, Narayanan et al. SC21).

    Requires ``m % p == 0``. Virtual micro-batch ``k`` runs chunk ``(k // p) % v`` (backward:
    ``v - 1 - (k // p) % v``) of micro-batch ``(k // (p v)) p + k % p``; warm-up is
    ``(p - stage - 1) * 2 + (v - 1) * p`` virtual forwards (capped at ``m v``).
    """
    if m % p:
        raise InfeasiblePlanError(
            f"interleaved schedule needs the number of micro-batches ({m}) to be a multiple of "
            f"pp={p}; use {((m // p) + 1) * p} or {max(p, (m // p) * p)} micro-batches",
            value=m,
            where="microbatch",
        )
    total = m * v

    def fwd(k: int) -> Op:
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> Op:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    ops: list[Op] = [fwd(k) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        ops.append(fwd(f))
        f += 1
        ops.append(bwd(b))
        b += 1
    while b < total:
        ops.append(bwd(b))
        b += 1
    return ops


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
    live = peak = 0
    for phase, _, _ in ops:
        live += 1 if phase == "F" else -1
        peak = max(peak, live)
    return peak
