"""Defaults a user expects: an automatic micro-batch and a speedup baseline that can run.

Two choices :func:`perfmodel.api.predict` makes when the scenario leaves them open, each stated
in the report (``StepReport.defaults``) with the reason:

* **Micro-batch.** Without ``microbatch`` the plan used to take the whole per-replica batch (one
  micro-batch) or, with pipelining, 1. :func:`choose_microbatch` picks the largest micro-batch
  that divides the per-replica batch and fits in GPU memory (gradient accumulation over the
  rest, as Megatron-LM's ``--micro-batch-size`` with ``--global-batch-size`` does). With
  pipeline parallelism it keeps at least ``pp`` micro-batches per replica: with fewer, some
  stages have no micro-batch to work on in the 1F1B steady state and the bubble fraction
  ``(p - 1) / m`` exceeds ``(p - 1) / p`` (Narayanan et al. SC21, sec. 2.2.1). Memory grows
  with the micro-batch (activations are linear in it), so a bisection over the divisors finds
  the largest that fits with ``O(log d)`` evaluations. Without pipelining the search runs only
  when the whole batch does not fit (the default stays when it fits).
* **Speedup baseline.** The speedup compares with one GPU (:func:`perfmodel.api.baseline_scenario`).
  When that GPU cannot hold the model (a 13B model with Adam needs 16 bytes per parameter,
  208 GB, before activations), :func:`fitting_baseline` compares with the smallest GPU count
  that fits instead: one model replica (``tp x pp`` GPUs) and then doubling data-parallel
  replicas, each with the same software, plan shape and batch per replica (and the same
  global batch for pure data parallelism, as the 1-GPU baseline does). The report says so:
  ``speedup 3.9x vs 4 GPUs (1 GPU does not fit: ...)``, and the scaling efficiency is
  ``speedup x baseline GPUs / GPUs``.

The functions take the evaluation as callables, so this module depends on no prediction code
and its logic is tested with hand-made memory curves.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfmodel._ints import divisors
from perfmodel.errors import PerfModelError

__all__ = [
    "Baseline",
    "MicrobatchChoice",
    "affine_limit",
    "baseline_gpu_counts",
    "choose_microbatch",
    "fitting_baseline",
    "microbatch_candidates",
    "scaled_baseline",
]


@dataclass(frozen=True)
class MicrobatchChoice:
    """A micro-batch chosen for the user, with the reason (printed by ``perfmodel predict``)."""

    microbatch: int
    reason: str

    def note(self) -> str:
        return f"micro-batch {self.microbatch} chosen automatically: {self.reason}"


def microbatch_candidates(batch_per_replica: int, pp: int) -> list[int]:
    """Micro-batch sizes to consider, ascending: the divisors of the per-replica batch, with
    pipelining (``pp > 1``) only those leaving at least ``pp`` micro-batches.

    >>> microbatch_candidates(32, 1)
    [1, 2, 4, 8, 16, 32]
    >>> microbatch_candidates(32, 4)  # 32 / 8 = 4 micro-batches for 4 stages
    [1, 2, 4, 8]
    """
    b = int(batch_per_replica)
    fits = divisors(b) if b >= 1 else []
    if pp > 1:
        fits = [d for d in fits if b // d >= pp] or [1]
    return fits


def coarse_split_warning(batch_per_replica: int, pp: int, microbatch: int) -> str:
    """A warning when an automatically chosen ``microbatch`` is far below the next candidate
    (more than twice smaller: the divisors of ``batch_per_replica`` leave a gap), which did not
    fit: a batch with more divisors would run a larger micro-batch, likely faster (audit15 item
    16: ``--batch-per-gpu 53`` on GPT-2, dgx-h100, fp32, AdamW runs 53 micro-batches of 1 at
    268 samples/s; 52 runs 2 of 26 at 351); ``""`` otherwise.

    >>> coarse_split_warning(53, 1, 1)[:58]
    'WARNING: micro-batch 1 only: 53 samples per replica split '
    >>> coarse_split_warning(32, 1, 4)
    ''
    """
    cands = microbatch_candidates(batch_per_replica, pp)
    if microbatch not in cands or microbatch == cands[-1]:
        return ""
    above = cands[cands.index(microbatch) + 1]
    if above <= 2 * microbatch:
        return ""
    b = int(batch_per_replica)
    return (
        f"WARNING: micro-batch {microbatch} only: {b} samples per replica split into "
        f"micro-batches of {microbatch} or {above} (its divisors), and {above} does not fit, "
        f"so the step runs {b // microbatch} micro-batches of {microbatch}; a batch with more "
        "divisors runs larger micro-batches"
    )


def choose_microbatch(
    batch_per_replica: int,
    pp: int,
    fits: Callable[[int], bool],
    limit: Callable[[int], float | None] | None = None,
) -> MicrobatchChoice | None:
    """Largest micro-batch among :func:`microbatch_candidates` for which ``fits(mb)`` holds;
    ``None`` when there is only one candidate (nothing to choose).

    ``fits`` must be monotone (true up to some size, false beyond), as memory is; the search
    keeps a bracket (the largest size known to fit, the smallest known not to) and probes only
    inside it, so under that assumption any choice of probe returns the same size: the largest
    that fits. Without ``limit`` every probe is the bracket's midpoint (a bisection,
    ``O(log d)`` calls). ``limit(mb)``, asked after ``fits(mb)``, estimates the largest
    micro-batch that fits from what the probe of ``mb`` showed (:func:`affine_limit`); the next
    probe is then the size that estimate names (or the one above it when that size is already
    known to fit), so an accurate estimate closes the bracket in two probes (issue 14: the
    speedup baseline's 64-GPU search, 3 -> 2 lowerings). An estimate the probe contradicts is
    followed by one midpoint probe, so at most ``2 log2(d) + 1`` calls are made however poor
    the estimates, while estimates are given. ``limit(mb) = None`` (no estimate: the size is infeasible, a plan that
    cannot run, not a memory answer, so ``fits`` may not be monotone there) restarts the search
    as the bisection, whose probes ``fits`` then answers again: the bisection's size. When not
    even the smallest fits, micro-batch 1 (or the smallest candidate) is returned with a
    reason saying so.

    >>> choice = choose_microbatch(32, 1, lambda mb: mb <= 6)
    >>> choice.microbatch
    4
    >>> choice.reason
    'the largest that fits in GPU memory (32 samples per replica = 8 micro-batches of 4; 8 does not fit)'
    >>> probes = []
    >>> def fits(mb): probes.append(mb); return 20 + 7 * mb <= 80
    >>> choose_microbatch(64, 1, fits, lambda mb: (80 - 20) / 7).microbatch, probes
    (8, [8, 16])

    (a bisection probes 8, 32 and 16.)
    """
    cands = microbatch_candidates(batch_per_replica, pp)
    if len(cands) == 1:
        return None
    lo, hi = -1, len(cands)  # cands[lo] fits (or lo = -1), cands[hi] does not (or hi = len)
    pivot = (lo + hi) // 2  # the bisection's first probe, (len - 1) // 2
    while True:
        ok = fits(cands[pivot])
        if ok:
            lo = pivot
        else:
            hi = pivot
        if hi - lo <= 1:
            break
        est = limit(cands[pivot]) if limit is not None else None
        if est is None and limit is not None:  # no estimate (an infeasible size): bisect
            return choose_microbatch(batch_per_replica, pp, fits)
        guess = -1 if est is None else bisect.bisect_right(cands, est) - 1  # predicted answer
        if est is None or (pivot <= guess) != ok:  # no estimate, or the probe contradicted it
            pivot = (lo + hi) // 2
        else:  # probe the predicted answer, or the size above it when that one is known to fit
            pivot = min(max(guess, lo + 1), hi - 1)
    best = lo
    m = int(batch_per_replica)
    if best < 0:
        return MicrobatchChoice(
            cands[0], f"the smallest; not even micro-batch {cands[0]} fits in GPU memory"
        )
    mb = cands[best]
    why = f"the largest that fits in GPU memory ({m} samples per replica = {m // mb} micro-batches of {mb}"
    if best + 1 < len(cands):
        why += f"; {cands[best + 1]} does not fit"
    if pp > 1:
        why += f"; at least pp={pp} micro-batches keep every pipeline stage busy"
    return MicrobatchChoice(mb, why + ")")


def affine_limit(mb: int, stages: Sequence[Any]) -> float:
    """The largest micro-batch (samples, a real number) estimated to fit, from the per-stage
    memory of a step lowered with micro-batch ``mb``: activations grow in proportion to the
    micro-batch and the rest stays, so stage ``s`` fits up to
    ``mb x (capacity_s - (total_s - activations_s)) / activations_s`` samples; the smallest over
    the stages (``inf`` when no stage holds activations).

    ``stages`` are :class:`perfmodel.parallel.memory.PlanMemory` values (``total_bytes``,
    ``activations_bytes``, ``capacity_bytes``). Only a guide for :func:`choose_microbatch`'s
    next probe: the workspace's largest layer output and the fragmentation allowance also grow
    with the micro-batch, so the estimate is a little high, and the search's answer does not
    depend on it.

    >>> from types import SimpleNamespace as M
    >>> affine_limit(4, [M(total_bytes=50.0, activations_bytes=20.0, capacity_bytes=80.0),
    ...                  M(total_bytes=30.0, activations_bytes=0.0, capacity_bytes=80.0)])
    10.0
    """
    out = math.inf
    for m in stages:
        acts = float(m.activations_bytes)
        if acts > 0:
            out = min(out, mb * (float(m.capacity_bytes) - (float(m.total_bytes) - acts)) / acts)
    return out


@dataclass(frozen=True)
class Baseline:
    """What a speedup is measured against: ``gpus`` GPUs at ``throughput_samples_per_s``;
    ``note`` says why it is not one GPU (``None`` when it is)."""

    gpus: int
    throughput_samples_per_s: float
    note: str | None = None


def baseline_gpu_counts(num_gpus: int, replica_gpus: int) -> list[int]:
    """GPU counts smaller than ``num_gpus`` to try as a baseline, ascending: one model replica
    (``replica_gpus = tp x pp``; 2 for pure data parallelism, which 1 GPU already tried) and
    doubling replicas, each dividing ``num_gpus``.

    >>> baseline_gpu_counts(64, 8)
    [8, 16, 32]
    >>> baseline_gpu_counts(16, 1)
    [2, 4, 8]
    """
    k = max(int(replica_gpus), 2 if replica_gpus <= 1 else 1)
    out = []
    while k < num_gpus:
        if num_gpus % k == 0:
            out.append(k)
        k *= 2
    return out


def scaled_baseline(
    sc: Any, gpus: int, *, batch_per_replica: int, replica_gpus: int, gpus_per_node: int
) -> Any:
    """The scenario ``sc`` (a :class:`perfmodel.api.Scenario`) on ``gpus`` GPUs of the same
    system: same software, plan shape (tp, pp, schedule, sharding), micro-batch chosen again;
    ``gpus / replica_gpus`` data-parallel replicas on ``ceil(gpus / gpus_per_node)`` nodes. The
    batch follows :func:`perfmodel.api.baseline_scenario`: a fixed global batch under pure data
    parallelism (strong scaling) stays, otherwise each replica keeps its batch."""
    if sc.global_batch is not None and replica_gpus == 1:
        batch = {"global_batch": sc.global_batch, "batch_per_gpu": None}
    elif sc.global_batch is not None:
        batch = {"global_batch": batch_per_replica * (gpus // replica_gpus), "batch_per_gpu": None}
    else:
        batch = {"global_batch": None, "batch_per_gpu": sc.batch_per_gpu}
    return dataclasses.replace(
        sc,
        gpus=gpus,
        nodes=math.ceil(gpus / max(1, int(gpus_per_node))),
        dp=None,
        fidelity="analytic",
        microbatch=None,
        **batch,
    )


def fitting_baseline(
    one_gpu: tuple[float, bool],
    candidates: Sequence[int],
    run: Callable[[int], tuple[float, bool]],
    *,
    this_run: tuple[int, float, bool],
) -> Baseline:
    """The speedup baseline: one GPU when it fits (``one_gpu = (throughput, fits)``), else the
    first of ``candidates`` (ascending GPU counts) whose ``run(k) = (throughput, fits)`` fits
    (a ``PerfModelError`` from ``run``, a plan that cannot be laid out on ``k`` GPUs, skips
    ``k``). When none fits but the run itself does (``this_run = (gpus, throughput, fits)``),
    the run is its own baseline. When the run does not fit either, the 1-GPU number stays,
    saying so.

    >>> fitting_baseline((10.0, False), [8, 16], lambda k: (k * 9.0, k >= 16),
    ...                  this_run=(64, 500.0, True))
    Baseline(gpus=16, throughput_samples_per_s=144.0, note='1 GPU does not fit in memory; 8 GPUs do not either')
    """
    thr1, fits1 = one_gpu
    if fits1:
        return Baseline(1, thr1)
    gpus, thr_run, run_fits = this_run
    if not run_fits:
        return Baseline(1, thr1, "1 GPU does not fit in memory (nor does this run)")
    tried: list[int] = []
    for k in candidates:
        try:
            thr, fits = run(k)
        except PerfModelError:  # the plan cannot be laid out on k GPUs: not a baseline
            continue
        if fits:
            break
        tried.append(k)
    else:
        k, thr = gpus, thr_run
    parts = ["1 GPU does not fit in memory"]
    if tried:
        parts.append(f"{', '.join(map(str, tried))} GPUs do not either")
    if k == gpus:
        parts.append("this run is the smallest GPU count that fits")
    return Baseline(k, thr, "; ".join(parts))
