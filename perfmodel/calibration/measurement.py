"""Measurements: what one microbenchmark observed, as a plain value.

A :class:`Measurement` is one timed operation (a GEMM shape, a copy size, one layer of a training
step ...) with the statistics of its repeated timings. Measurements are the raw material of the
fits in :mod:`perfmodel.calibration.fit` and are kept, unchanged, inside every
:class:`~perfmodel.calibration.profile.CalibrationProfile` so that a profile can be re-fitted
later with a better model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from perfmodel._enum import ParsedEnum
from perfmodel._schema import (
    _MISSING,
    as_int,
    as_mapping,
    as_number,
    as_optional_number,
    as_str,
    describe,
    require_fields,
)
from perfmodel.errors import CalibrationError


class BenchKind(
    str,
    ParsedEnum,
    error=CalibrationError,
    template="{where}: unknown measurement kind {text!r}; expected {expected}",
):
    """The family a measurement belongs to (decides which fit consumes it)."""

    GEMM = "gemm"  # (m x k) @ (k x n), batch times; params: m, n, k, batch, dtype
    CONV = "conv"  # 2-D convolution forward; params: n, c, h, w, k_out, r, s, stride, pad, dtype
    ATTENTION = (
        "attention"  # fused attention (SDPA); params: batch, heads, seq, head_dim, causal, phase
    )
    COPY = "copy"  # device-to-device copy; params: nbytes (bytes read + written in work_bytes)
    ELEMENTWISE = "elementwise"  # out = a * b + c; params: nbytes per tensor
    H2D = "h2d"  # host to device copy; params: nbytes, pinned
    D2H = "d2h"  # device to host copy; params: nbytes, pinned
    LAUNCH = "launch"  # per-launch overhead of a tiny kernel / op; params: launches
    STREAMS = "streams"  # several independent learners at once; params: streams, m, n, k, dtype
    STEP = "step"  # one whole training step; params: model, batch_size, precision
    STEP_LAYER = "step_layer"  # one layer of a training step; params: model, layer, phase
    COLLECTIVE = "collective"  # a collective; params: op, nbytes, ranks
    INPUT = "input"  # input-pipeline prep of one sample on the host CPU; params: dataset, loader


@dataclass(frozen=True)
class TimingStats:
    """Robust statistics of repeated timings of one operation, in seconds.

    ``median_s`` is what fits use; the spread (``p10_s`` .. ``p90_s``) is kept so a reader can see
    how noisy a point was.
    """

    median_s: float
    min_s: float
    p10_s: float
    p90_s: float
    repeats: int

    @classmethod
    def from_samples(cls, samples_s: Sequence[float], *, where: str = "timing") -> TimingStats:
        """Summarise raw per-repetition times (seconds).

        >>> TimingStats.from_samples([3.0, 1.0, 2.0]).median_s
        2.0
        """
        xs = sorted(float(x) for x in samples_s)
        if not xs:
            raise CalibrationError(f"{where}: no timing samples", value=samples_s, where=where)
        if any(not math.isfinite(x) or x < 0 for x in xs):
            raise CalibrationError(f"{where}: bad timing sample in {xs}", value=xs, where=where)
        return cls(
            median_s=statistics.median(xs),
            min_s=xs[0],
            p10_s=_quantile(xs, 0.1),
            p90_s=_quantile(xs, 0.9),
            repeats=len(xs),
        )

    @property
    def spread(self) -> float:
        """Relative spread ``(p90 - p10) / median`` (0 for a perfectly stable timing)."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted sequence."""
    if len(sorted_xs) == 1:
        return float(sorted_xs[0])
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return float(sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo))


#: The measured numbers of a :meth:`Measurement.to_dict` record: finite or absent (``None``),
#: as :meth:`Measurement.from_dict` reads them back.
NUMBER_FIELDS = ("time_s", "min_s", "p10_s", "p90_s", "work_flop", "work_bytes")


@dataclass(frozen=True)
class Measurement:
    """One measured operation.

    Attributes
    ----------
    kind
        Benchmark family.
    key
        Unique, stable name (``"gemm/bf16/m4096-n4096-k4096-b1"``); resume skips keys already done.
    params
        What was run (shapes, dtype, byte counts ...), JSON-serialisable scalars.
    timing
        Statistics of the repeated timings.
    work_flop
        Floating-point operations of one repetition (``None`` when not a compute benchmark).
    work_bytes
        Bytes moved through memory (or over the link) by one repetition, when meaningful.
    """

    kind: BenchKind
    key: str
    params: Mapping[str, Any]
    timing: TimingStats
    work_flop: float | None = None
    work_bytes: float | None = None
    backend: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.params, MappingProxyType):
            object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def time_s(self) -> float:
        """Median time of one repetition in seconds."""
        return self.timing.median_s

    @property
    def achieved_flops(self) -> float | None:
        """FLOP/s achieved at the median time (``work_flop / time_s``)."""
        if self.work_flop is None or self.time_s <= 0:
            return None
        return self.work_flop / self.time_s

    @property
    def achieved_Bps(self) -> float | None:
        """Bytes/s achieved at the median time (``work_bytes / time_s``)."""
        if self.work_bytes is None or self.time_s <= 0:
            return None
        return self.work_bytes / self.time_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "key": self.key,
            "params": dict(self.params),
            "time_s": self.timing.median_s,
            "min_s": self.timing.min_s,
            "p10_s": self.timing.p10_s,
            "p90_s": self.timing.p90_s,
            "repeats": self.timing.repeats,
            "work_flop": self.work_flop,
            "work_bytes": self.work_bytes,
            "backend": self.backend,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "measurement") -> Measurement:
        """Inverse of :meth:`to_dict`; a missing field is a :class:`CalibrationError` naming it."""
        if not isinstance(d, Mapping):
            raise CalibrationError(
                f"{where}: expected a table/mapping, got {describe(d)}", value=d, where=where
            )
        require_fields(
            d, ("kind", "key", "params", "time_s", "repeats"), where, error=CalibrationError
        )
        kind = BenchKind.parse(
            as_str(d["kind"], "kind", where=where, error=CalibrationError), where=where
        )

        def num(name: str, default: Any = _MISSING) -> float:
            v = d.get(name, default)
            return as_number(v, name, where=where, minimum=0.0, error=CalibrationError)

        if not isinstance(d["time_s"], bool) and isinstance(d["time_s"], int | float):
            if not (math.isfinite(d["time_s"]) and d["time_s"] >= 0):
                raise CalibrationError(
                    f"{where}: time_s must be a finite non-negative number, got {d['time_s']}",
                    value=d["time_s"],
                    where=where,
                )
        median = num("time_s")
        timing = TimingStats(
            median_s=median,
            min_s=num("min_s", median),
            p10_s=num("p10_s", median),
            p90_s=num("p90_s", median),
            repeats=as_int(d["repeats"], "repeats", where=where, minimum=0, error=CalibrationError),
        )
        return cls(
            kind=kind,
            key=as_str(d["key"], "key", where=where, error=CalibrationError),
            params=dict(as_mapping(d["params"], "params", where=where, error=CalibrationError)),
            timing=timing,
            work_flop=as_optional_number(
                d.get("work_flop"), "work_flop", where=where, minimum=0.0, error=CalibrationError
            ),
            work_bytes=as_optional_number(
                d.get("work_bytes"), "work_bytes", where=where, minimum=0.0, error=CalibrationError
            ),
            backend=as_str(d.get("backend", ""), "backend", where=where, error=CalibrationError),
            notes=as_str(d.get("notes", ""), "notes", where=where, error=CalibrationError),
        )


def collective_measurement(
    op: str,
    nbytes: int,
    *,
    ranks: int,
    nodes: int,
    dtype: str,
    link_class: str,
    timing: TimingStats,
    backend: str,
    notes: str,
    key_suffix: str = "",
    more_params: Mapping[str, Any] | None = None,
) -> Measurement:
    """A collective's measurement: ``op`` of ``nbytes`` bytes over ``ranks`` GPUs in ``nodes``
    servers, keyed ``collective/<op>/n<ranks>/<nbytes><key_suffix>``, its params ``op``,
    ``nbytes``, ``ranks``, ``nodes``, ``dtype``, ``link_class`` and then ``more_params``, the
    bytes as its work (the form both the torch.distributed benchmark and the nccl-tests import
    write)."""
    return Measurement(
        kind=BenchKind.COLLECTIVE,
        key=f"collective/{op}/n{ranks}/{nbytes}{key_suffix}",
        params={
            "op": op,
            "nbytes": int(nbytes),
            "ranks": ranks,
            "nodes": nodes,
            "dtype": dtype,
            "link_class": link_class,
            **(more_params or {}),
        },
        timing=timing,
        work_bytes=float(nbytes),
        backend=backend,
        notes=notes,
    )
