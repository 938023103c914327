"""Host time per kernel of eager training steps, fitted on host-bound measured steps.

A PyTorch eager training step issues every kernel from Python (module call, autograd node,
dispatcher, cuDNN/cuBLAS plan lookup, caching allocator). When the GPU work is small the GPU waits
for the host and the step time is the host's issue time. For such a step ``i`` (traced GPU busy
time below :data:`HOST_BOUND_BUSY_FRACTION` of the step) the host time per *modelled* kernel is::

    h_i = (step_i - optimizer_i) / K_i

with ``K_i`` the kernels the compute model issues for the step's zoo workload (forward, both
backward passes, autocast casts; ``ComputeModel.host_time`` with one second per kernel) and
``optimizer_i`` the model's optimizer time (its few fused kernels run after the last backward
kernel is issued). The fit is the median over the host-bound steps: robust to the odd slow step,
and per modelled kernel so that ``kernels x h`` reproduces the measured host floor with the
model's own kernel counts. Steps that are not host-bound never enter it; they judge it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from perfmodel.errors import CalibrationError

#: A step whose traced GPU busy time is below this fraction of the step is host-bound.
HOST_BOUND_BUSY_FRACTION = 0.5


@dataclass(frozen=True)
class HostPoint:
    """One host-bound step: key, measured step (s), modelled kernels, host s per kernel."""

    key: str
    step_s: float
    busy_s: float
    kernels: float
    per_kernel_s: float


@dataclass(frozen=True)
class HostFit:
    """Median host time per modelled kernel over the host-bound steps (s) and the points."""

    per_kernel_s: float
    points: tuple[HostPoint, ...]

    @property
    def spread(self) -> tuple[float, float]:
        """Smallest and largest per-step value (s)."""
        v = [p.per_kernel_s for p in self.points]
        return min(v), max(v)


def fit_eager_host(measurements: Any, gpu: Any, *, exclude: tuple[str, ...] = ()) -> HostFit:
    """Fit the eager host time per kernel on the host-bound ``step/*`` measurements.

    ``exclude``: step keys held out of the fit (to judge it).

    Raises
    ------
    CalibrationError
        When no measured step is host-bound (nothing to fit).
    """
    from perfmodel.calibration.step_workload import step_workload
    from perfmodel.compute import ComputeModel, ComputeParams

    counter = ComputeModel(gpu, replace(ComputeParams.for_gpu(gpu), host_dispatch_s=1.0))
    points = []
    for m in measurements:
        if not m.key.startswith("step/") or m.key in exclude:
            continue
        busy = float(m.params.get("traced_device_busy_s") or 0.0)
        if not busy or busy >= HOST_BOUND_BUSY_FRACTION * m.time_s:
            continue
        workload, optimizer = step_workload(m)
        kernels = counter.host_time(workload)
        opt = counter.optimizer_time(workload.params, optimizer, workload.precision)
        per = (m.time_s - opt) / kernels
        points.append(HostPoint(m.key, m.time_s, busy, kernels, per))
    if not points:
        raise CalibrationError(
            "no host-bound training step (traced GPU busy < "
            f"{HOST_BOUND_BUSY_FRACTION:.0%} of the step) to fit the eager host time on",
            value=None,
            where="steps",
        )
    return HostFit(statistics.median(p.per_kernel_s for p in points), tuple(points))


#: Fewest host-bound steps a profile needs before its own eager host fit replaces the default.
MIN_HOST_BOUND_STEPS = 3


def host_fit_summary(fit: HostFit) -> Any:
    """The fit as a profile :class:`~perfmodel.calibration.profile.FitSummary`
    (``fits["host.eager_step"]``, value ``per_kernel_s``)."""
    from perfmodel.calibration.profile import FitSummary

    vals = [p.per_kernel_s for p in fit.points]
    spread = statistics.pstdev(vals) if len(vals) > 1 else float("nan")
    logs = [math.log(v / fit.per_kernel_s) for v in vals]
    return FitSummary(
        model="median over host-bound steps of (step - optimizer) / modelled kernels",
        values=MappingProxyType({"per_kernel_s": fit.per_kernel_s}),
        stderr=MappingProxyType({"per_kernel_s": spread / math.sqrt(len(vals))}),
        n_points=len(vals),
        rms_log_residual=math.sqrt(sum(x * x for x in logs) / len(logs)),
        median_abs_error=statistics.median(abs(v / fit.per_kernel_s - 1) for v in vals),
        notes="steps: " + ", ".join(p.key for p in fit.points),
    )
