"""Timing done right: warm-up, enough work per sample, repeated samples, medians.

Method (see also NVIDIA's "How to implement performance metrics in CUDA C/C++" and
``triton.testing.do_bench``): an operation is first run once to warm up (module load, library
handle creation, autotuning such as ``cudnn.benchmark``), then a few more times to estimate its
duration; each *sample* runs the operation ``inner`` times back to back so that a sample lasts at
least ``min_sample_s`` (this amortises timer resolution and, on a GPU, measures kernels queued
back to back as in a real training step); samples are repeated until the per-operation time budget
is used (at least ``min_repeats``). The median of the per-repetition times is reported. GPU
timings are taken with device events (``torch.cuda.Event``) around a sample, never with a host
clock on asynchronous work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from perfmodel.calibration.measurement import TimingStats
from perfmodel.errors import CalibrationError

#: Seconds a large operation runs back to back before it is timed, so the GPU sits at its power
#: limit and steady clock, as in training (stas00/ml-engineering's MSMF uses 2 s windows; the
#: clock settles within the first few hundred milliseconds of saturation there). Applied to
#: operations of at least :data:`SUSTAIN_MIN_FLOP`; 0 disables it.
DEFAULT_SUSTAIN_S = 0.5

#: Smallest operation (FLOP per call) worth sustaining: below it a kernel is launch- or
#: memory-bound and does not load the power limit.
SUSTAIN_MIN_FLOP = 1e10


class SampleTimer(Protocol):
    """Times ``inner`` back-to-back calls of ``fn``; returns seconds for the whole sample."""

    def __call__(self, fn: Callable[[], object], inner: int) -> float: ...


def host_sample(fn: Callable[[], object], inner: int) -> float:
    """Wall-clock seconds for ``inner`` calls (synchronous work: NumPy, torch on CPU)."""
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return time.perf_counter() - t0


def process_sample(fn: Callable[[], object], inner: int) -> float:
    """CPU seconds of this process for ``inner`` calls (``time.process_time``).

    With one compute thread this equals the wall time of an undisturbed run and is immune to
    other processes sharing the cores (time they take is not charged here). With several BLAS
    threads it sums their CPU time, so use it only with one thread (``OPENBLAS_NUM_THREADS=1``).
    """
    t0 = time.process_time()
    for _ in range(inner):
        fn()
    return time.process_time() - t0


CLOCKS: dict[str, Callable[[Callable[[], object], int], float]] = {
    "wall": host_sample,
    "process": process_sample,
}
"""Host clocks by name (``perfmodel calibrate --clock``)."""


@dataclass(frozen=True)
class TimingPolicy:
    """How hard to time one operation.

    Attributes
    ----------
    target_s
        Wall-clock budget for the timed samples of one operation (warm-up excluded).
    min_sample_s
        Each sample runs the operation often enough to last at least this long.
    min_repeats, max_repeats
        Bounds on the number of samples.
    warmup
        Untimed calls before the estimate (the first call also triggers autotuning).
    """

    target_s: float = 0.2
    min_sample_s: float = 1e-3
    min_repeats: int = 5
    max_repeats: int = 50
    warmup: int = 2

    def scaled(self, factor: float) -> TimingPolicy:
        """The same policy with ``target_s`` multiplied by ``factor`` (never below 5 ms)."""
        return TimingPolicy(
            target_s=max(5e-3, self.target_s * factor),
            min_sample_s=self.min_sample_s,
            min_repeats=self.min_repeats,
            max_repeats=self.max_repeats,
            warmup=self.warmup,
        )


def time_operation(
    fn: Callable[[], object],
    sample: SampleTimer = host_sample,
    policy: TimingPolicy | None = None,
    *,
    where: str = "operation",
) -> TimingStats:
    """Time ``fn`` and return statistics of the time of **one** call, in seconds.

    ``inner = ceil(min_sample_s / t_est)`` calls per sample; ``repeats = target_s / (inner *
    t_est)`` samples, clamped to ``[min_repeats, max_repeats]``; sample time / inner is one
    repetition's time.

    >>> stats = time_operation(lambda: sum(range(100)), policy=TimingPolicy(target_s=0.01))
    >>> stats.median_s > 0 and stats.repeats >= 5
    True
    """
    pol = policy or TimingPolicy()
    for _ in range(max(1, pol.warmup)):
        sample(fn, 1)
    estimate = sample(fn, 1)
    if not math.isfinite(estimate) or estimate < 0:
        raise CalibrationError(
            f"{where}: bad timer reading {estimate}", value=estimate, where=where
        )
    estimate = max(estimate, 1e-7)
    inner = max(1, math.ceil(pol.min_sample_s / estimate))
    inner = min(inner, 10_000)
    repeats = int(pol.target_s / (inner * estimate))
    repeats = max(pol.min_repeats, min(pol.max_repeats, repeats))
    per_call = [sample(fn, inner) / inner for _ in range(repeats)]
    return TimingStats.from_samples(per_call, where=where)


class Rotation:
    """Cycles through several pre-allocated input sets, so repeated calls do not hit a warm cache.

    The number of sets is chosen so that together they exceed ``cache_bytes`` by ``factor``
    (capped at ``max_sets`` and at ``max_total_bytes``); a single set larger than the cache
    needs no rotation.

    >>> r = Rotation.count(set_bytes=1_000_000, cache_bytes=4_000_000)
    >>> r
    9
    """

    def __init__(self, sets: list[object]) -> None:
        if not sets:
            raise CalibrationError("rotation needs at least one input set", value=0)
        self._sets = sets
        self._i = 0

    def next(self) -> object:
        s = self._sets[self._i]
        self._i = (self._i + 1) % len(self._sets)
        return s

    def __len__(self) -> int:
        return len(self._sets)

    @staticmethod
    def count(
        set_bytes: float,
        cache_bytes: float,
        *,
        factor: float = 2.0,
        max_sets: int = 16,
        max_total_bytes: float = 2e9,
    ) -> int:
        """Number of input sets: ``ceil(factor * cache_bytes / set_bytes) + 1`` within the caps."""
        if set_bytes <= 0:
            return 1
        n = math.ceil(factor * cache_bytes / set_bytes) + 1
        n = min(n, max_sets, max(1, int(max_total_bytes // set_bytes)))
        return max(1, n)
