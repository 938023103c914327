"""Intervals on the answers perfmodel prints: a step, a speedup curve, a plan ranking, a
collective.

Every function reads the shipped residual record (:func:`perfmodel.intervals.conformal.
record_index`: read and indexed once per process, on first use) and returns values; the CLI
prints them. The method is :mod:`perfmodel.intervals.conformal`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from perfmodel._io import file_stamp
from perfmodel.intervals.conformal import (
    DEFAULT_LEVEL,
    RecordIndex,
    ResidualInterval,
    interval,
    record_index,
)
from perfmodel.intervals.features import CollectiveFeatures, Quantity, interconnect_of
from perfmodel.intervals.wording import bounded_note, overlaps, too
from perfmodel.scenario import Scenario

#: Speed-like fields of a step report (an interval divides them by ``exp(r)``) and time-like
#: ones (multiplied).
SPEED_FIELDS = (
    "throughput_samples_per_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_flops_per_gpu_per_s",
    "mfu",
)
TIME_FIELDS = ("iteration_time_s", "epoch_time_s")

#: Fields of a token budget (``TokenBudget.to_dict``, JSON ``token_budget``) and of its run
#: estimate (``RunEstimate.to_dict``, JSON ``training_run``) that are the step time times a
#: count: each gets the step time's range (:meth:`StepInterval.run_range`). The wall-clock time with failures
#: is one of them: Daly's expected wall-clock time is linear in the failure-free time at a given
#: checkpoint interval (:func:`perfmodel.report.goodput.daly_wall_time_s`), and the interval
#: (Daly's optimum, from the save time and the job MTBF) does not depend on the step time. The
#: energy is not: a slower step is not the same power for longer (its busy fraction changes);
#: its range is the power model's at the step range's ends (:data:`ENERGY_FIELDS`).
RUN_FIELDS: Mapping[str, tuple[str, ...]] = {
    "token_budget": ("time_to_train_s", "gpu_hours", "cost"),
    "training_run": (
        "ideal_time_s",
        "wall_clock_s",
        "cost_ideal",
        "cost_wall_clock",
        "cost_per_million_tokens",
    ),
}

#: Fields of a run estimate (JSON ``training_run``) whose ``_low`` / ``_high`` are not the step
#: time's scaling but the linear power model evaluated at the step range's ends
#: (:meth:`perfmodel.report.goodput.RunEstimate.energy_ranges`, :func:`perfmodel.report.goodput.
#: energy_range`): the text's ``80% range ... kJ per step; run ... MWh`` line.
ENERGY_FIELDS = ("energy_ideal_j", "energy_wall_clock_j")


@dataclass(frozen=True)
class StepInterval:
    """A step prediction's interval: ``low`` and ``high`` of every speed and time field of the
    report (``None`` where the report has no value), what it rests on, and its residual
    interval."""

    residual: ResidualInterval
    low: Mapping[str, float | None]
    high: Mapping[str, float | None]

    @property
    def level(self) -> float:
        return self.residual.level

    @property
    def basis(self) -> str:
        return self.residual.basis

    @property
    def warning(self) -> str:
        return self.residual.warning

    @property
    def level_text(self) -> str:
        """The level in words: ``"80%"``."""
        return f"{100 * self.level:g}%"

    def run_range(self, value: float) -> tuple[float, float]:
        """``(low, high)`` of a time or cost that is the step time times a count (an iteration,
        an epoch, a token budget's time, GPU-hours and cost, the wall-clock time with failures
        and its cost): ``value * exp(r_lo)`` to ``value * exp(r_hi)``
        (:meth:`ResidualInterval.time`), the step time's own range scaled (the count is exact;
        the step time is what the model predicts), so it agrees with the iteration time's."""
        return self.residual.time(value)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` fields: ``<field>_low`` / ``<field>_high`` of every field with a
        value, ``interval_level``, ``interval_basis``, ``interval_warning`` (``""`` for none),
        ``interval_bias`` (the median signed error of the rows it rests on, speed:
        ``+0.12`` = such runs predicted 12 % too fast), ``interval_bounded`` and, where a
        physical bound cut the range (:func:`peak_capped`), ``interval_capped`` (what it cut);
        where the pool is of other kinds of model than the question's
        (:func:`perfmodel.intervals.conformal.own_kind`), ``interval_kind_rows``,
        ``interval_kind_sources`` and ``interval_kind_bias`` (the median signed error of the
        record's rows of the question's kind)."""
        out = interval_fields(self.residual)
        for k, v in self.low.items():
            if v is not None:
                out[f"{k}_low"] = v
                out[f"{k}_high"] = self.high[k]
        return out


def interval_fields(iv: ResidualInterval | None) -> dict[str, Any]:
    """What a range rests on, as every ``--json`` names it (``predict``, the what-if's points,
    the systems search's best plans): ``interval_level`` (``None`` without an interval, and
    nothing else), ``interval_basis``, ``interval_warning`` (``""`` for none),
    ``interval_bias`` (the median signed speed error of the rows it rests on: ``+0.12`` = such
    runs predicted 12 % too fast), ``interval_bounded``; where a physical bound cut the range
    (:func:`peak_capped`), ``interval_capped``; where the pool is of other kinds of model than
    the question's (:func:`perfmodel.intervals.conformal.own_kind`), ``interval_kind_rows``,
    ``interval_kind_sources`` and ``interval_kind_bias``."""
    if iv is None:
        return {"interval_level": None}
    out: dict[str, Any] = {
        "interval_level": iv.level,
        "interval_basis": iv.basis,
        "interval_warning": iv.warning,
        "interval_bias": math.expm1(iv.bias),
        "interval_bounded": iv.bounded,
    }
    if capped := getattr(iv, "capped", ""):
        out["interval_capped"] = capped
    if (kind := getattr(iv, "kind", None)) is not None:
        out["interval_kind_rows"] = kind.rows
        out["interval_kind_sources"] = kind.sources
        if kind.rows:
            out["interval_kind_bias"] = math.expm1(kind.center)
    return out


def step_interval(
    report: Any,
    level: float = DEFAULT_LEVEL,
    *,
    index: RecordIndex | None = None,
    scenario: Any = None,
) -> StepInterval:
    """The interval of a :class:`~perfmodel.report.step.StepReport` (its scenario's features:
    :func:`perfmodel.intervals.features.step_features`), with two physical facts the residuals
    do not know (audit15 item 7):

    - a plan that does not fit in memory has no range (the step it times cannot run): every
      ``low`` / ``high`` is ``None`` and the warning says why (:data:`NO_FIT`);
    - no step runs its model FLOPs faster than the peak its MFU is measured against: the fast
      end stops at MFU 100 % of a datasheet peak, at a calibrated (fitted) peak plus two of its
      standard errors read with Student's t of the fit's degrees of freedom (:func:`peak_capped`,
      :func:`peak_uncertainty`), and the interval says so."""
    iv = interval(_features_of(report, scenario), Quantity.STEP, index or record_index(), level)
    d = report.to_dict() if hasattr(report, "to_dict") else report
    if d.get("fits_in_memory") is False:
        none: dict[str, float | None] = dict.fromkeys((*SPEED_FIELDS, *TIME_FIELDS))
        return StepInterval(replace(iv, warning=NO_FIT), none, dict(none))
    return _step_values(peak_capped(iv, d.get("mfu"), *peak_uncertainty(d)), d)


#: The warning of a plan that does not fit in memory (its step has no range).
NO_FIT = "the plan does not fit in memory: a run that cannot happen has no range"


#: How many of its standard errors a calibrated peak may sit below the true peak before the
#: cap binds, as a normal coverage: the two-sided 95 % normal quantile (1.96), rounded to 2. A
#: fitted peak (``fits["gemm.<dtype>"].values["peak_flops"]``, :func:`perfmodel.calibration.
#: profile.synthesize_spec`) is an estimate, not a bound: a step may run its model FLOPs somewhat
#: faster. A standard error estimated from ``dof`` residual degrees of freedom spans that coverage
#: at :func:`perfmodel.calibration.profile.t_coverage_factor` ``(PEAK_STDERRS, dof)`` standard
#: errors (Student's t; 2.28 at 10 degrees of freedom, 4.53 at 2, 13.97 at 1).
PEAK_STDERRS = 2.0


def peak_capped(
    iv: ResidualInterval,
    mfu: float | None,
    peak_rel_stderr: float | None = 0.0,
    dof: int | None = None,
) -> ResidualInterval:
    """``iv`` with its fast end at most the peak FLOP rate: a speed residual ``r`` puts the true
    MFU at ``mfu * exp(-r)``, which cannot exceed ``bound`` (the model FLOPs of a step,
    recomputation not counted, are at most the FLOPs the GPUs run, at most their peak), so
    ``r_lo >= log(mfu / bound)``. MFU is against the peak of the step's precision
    (:mod:`perfmodel.report.step`).

    ``peak_rel_stderr`` says what that peak is: ``0.0`` a datasheet figure, ``bound = 1``
    (MFU 100 %); a positive relative standard error a calibrated (fitted) peak, ``bound = 1 +
    k * peak_rel_stderr`` with ``k =`` :func:`~perfmodel.calibration.profile.t_coverage_factor`
    ``(PEAK_STDERRS, dof)`` (the fitted peak plus the half-width of two normal standard errors'
    coverage, read with Student's t of the fit's ``dof`` residual degrees of freedom; ``dof``
    ``None``, a profile that records none, reads them as a normal: ``k = 2``), worded as such;
    ``None`` a peak with no stated uncertainty (the best measured rate), or ``dof = 0`` (no
    residual to estimate the error from): no cap. ``iv`` itself where the bound does not cut (or
    the report has no MFU)."""
    if peak_rel_stderr is None or not math.isfinite(peak_rel_stderr) or peak_rel_stderr < 0:
        return iv
    k = 0.0  # a datasheet peak: no calibration module loaded (tests/test_cold_imports.py)
    if peak_rel_stderr > 0:
        from perfmodel.calibration.profile import t_coverage_factor

        k = t_coverage_factor(PEAK_STDERRS, dof)
    bound = 1.0 + k * peak_rel_stderr
    if not math.isfinite(bound):
        return iv
    if mfu is None or not (0 < mfu < bound) or iv.r_lo >= math.log(mfu / bound):
        return iv
    r_lo = min(math.log(mfu / bound), iv.r_hi)
    was = f"was {100 * mfu * math.exp(-iv.r_lo):.1f}%"
    if peak_rel_stderr == 0:
        why = f"the fast end is capped at MFU 100% ({was}: no step runs its model FLOPs faster than the peak)"
    else:
        reading = (
            "read as a normal: the profile records no degrees of freedom"
            if dof is None
            else f"read with Student's t at {dof} degrees of freedom: {k:.2f} standard errors"
        )
        why = (
            f"the fast end is capped at MFU {100 * bound:.1f}% of the calibrated GEMM peak ({was}:"
            f" the fitted peak plus {PEAK_STDERRS:g} standard errors of "
            f"{100 * peak_rel_stderr:.1f}%, {reading}; a fitted peak is an estimate, not a bound)"
        )
    return replace(iv, r_lo=r_lo, capped=why)


def peak_uncertainty(d: Mapping[str, Any]) -> tuple[float | None, int | None]:
    """What :func:`peak_capped` needs to know of the peak a report's MFU is against, as
    ``(peak_rel_stderr, dof)``: ``(0.0, None)`` for a datasheet figure (every catalogue GPU,
    calibrated or not); for the device a calibration profile synthesises (``--system
    calibrated``, a CPU), the relative standard error of the profile's fitted peak of the MFU's
    dtype (``fits["gemm.<dtype>"].stderr["peak_flops"]``) and the fit's residual degrees of
    freedom (``None`` in a profile that records none), or ``(None, None)`` where that peak is no
    fit (the best measured rate). The profile is read once per file version
    (:func:`_profile_peaks`), not once per interval."""
    sc = d.get("scenario") or {}
    if sc.get("system") != "calibrated" or not sc.get("calibration"):
        return 0.0, None
    path = str(sc["calibration"])
    peaks = _profile_peaks(path, file_stamp(path))  # None: load_profile names the missing file
    if peaks is None:
        return 0.0, None
    return peaks.get(str(d.get("mfu_peak_dtype", "")), (None, None))


@lru_cache(maxsize=8)
def _profile_peaks(
    path: str, stamp: tuple[str, int, int] | None
) -> Mapping[str, tuple[float | None, int | None]] | None:
    """``{dtype: (relative standard error of the fitted GEMM peak, its dof)}`` of the profile at
    ``path`` (``stamp``: its :func:`~perfmodel._io.file_stamp`, so a rewritten file is read
    again); ``None`` where the profile's device is a catalogue one (its peak is the datasheet's).
    Memoised: a search asks for every plan's interval of one profile."""
    from perfmodel.calibration import load_profile

    prof = load_profile(path)
    if prof.device_spec().vendor != "calibrated":
        return None
    out: dict[str, tuple[float | None, int | None]] = {}
    for name, fit in prof.fits.items():
        if not name.startswith("gemm.") or "peak_flops" not in fit.stderr:
            continue
        peak = float(fit.values.get("peak_flops", 0.0))
        rel = float(fit.stderr["peak_flops"]) / peak if peak > 0 else float("nan")
        out[name[len("gemm.") :]] = (
            (rel, fit.dof) if math.isfinite(rel) and rel >= 0 else (None, None)
        )
    return MappingProxyType(out)


def _features_of(report: Any, scenario: Any = None) -> Any:
    from perfmodel.intervals.features import step_features

    if scenario is None:
        d = report.scenario if hasattr(report, "scenario") else report["scenario"]
        scenario = Scenario.from_dict(dict(d))
    elif isinstance(scenario, Mapping):
        scenario = Scenario.from_dict(dict(scenario))
    return step_features(scenario)


def run_fields(si: StepInterval, d: Mapping[str, Any], names: Sequence[str]) -> dict[str, float]:
    """``<name>_low`` / ``<name>_high`` (:meth:`StepInterval.run_range`) of each of ``names`` that ``d``
    holds as a finite number (``RUN_FIELDS``); empty where the step has no range."""
    out: dict[str, float] = {}
    if si.low.get("iteration_time_s") is None:
        return out  # no range of the step (e.g. it does not fit), so none of what it scales
    for k in names:
        v = d.get(k)
        if isinstance(v, int | float) and math.isfinite(v):
            out[f"{k}_low"], out[f"{k}_high"] = si.run_range(float(v))
    return out


def _step_values(iv: ResidualInterval, d: Mapping[str, Any]) -> StepInterval:
    low: dict[str, float | None] = {}
    high: dict[str, float | None] = {}
    for k in SPEED_FIELDS:
        v = d.get(k)
        low[k], high[k] = (None, None) if v is None else iv.speed(float(v))
    for k in TIME_FIELDS:
        v = d.get(k)
        low[k], high[k] = (None, None) if v is None else iv.time(float(v))
    return StepInterval(iv, low, high)


def interval_lines(report: Any, si: StepInterval) -> list[str]:
    """The lines ``predict`` prints under the report: the range of the step time and of each
    rate the report shows, what the range rests on, the bias of the runs like this one, and a
    warning where the rows are few or none are on this GPU."""
    from perfmodel.units import format_time

    pct = f"{100 * si.level:g}%"
    if si.warning == NO_FIT:
        return [f"{pct} range    none: {NO_FIT}"]
    lines = [f"{pct} range    (from {si.basis})"]
    shown = (  # (value of StepInterval.low/high, label, how one end prints, after the range)
        ("iteration_time_s", "iteration time", format_time, ""),
        ("throughput_samples_per_s", "throughput", "{:,.1f}".format, " samples/s"),
        ("tokens_per_s_per_gpu", "tokens/s/GPU", "{:,.0f}".format, ""),
        ("mfu", "MFU", lambda f: f"{100 * f:.1f}%", ""),
        ("epoch_time_s", "epoch time", format_time, ""),
    )
    for key, label, end, unit in shown:
        low, high = si.low[key], si.high[key]
        if low is None or high is None:
            continue  # a rate the report does not give
        if key == "mfu" and not report.mfu > 0:
            continue  # no model FLOP count: the report shows no MFU, so no range of it
        lines.append(f"  {label:<16}{end(low)} - {end(high)}{unit}")
    bias = math.expm1(si.residual.bias)
    kind = getattr(si.residual, "kind", None)
    if kind is None:
        lines.append(
            f"  runs like this one were predicted {too(bias)} (median); the range is their "
            "spread, held out one publication at a time (docs/intervals.md)"
        )
    else:  # the pool is of other kinds of model (audit15 item 9): say whose bias is whose
        own = f"; {kind.describe()} {too(math.expm1(kind.center))} (median)" if kind.rows else ""
        lines.append(
            f"  the runs it rests on ({kind.others}) were predicted {too(bias)} "
            f"(median){own}; held out one publication at a time (docs/intervals.md)"
        )
    if note := bounded_note(si.residual):
        lines.append(f"  note: {note}")
    if capped := getattr(si.residual, "capped", ""):
        lines.append(f"  note: {capped}")
    if si.warning:
        lines.append(f"  note: {si.warning}")
    return lines


# --------------------------------------------------------------------------- speedup curves


def speedup_interval(
    report: Any, level: float = DEFAULT_LEVEL, *, index: RecordIndex | None = None
) -> tuple[float, float, ResidualInterval, float | None] | None:
    """``(low, high, residual interval, cap)`` of a curve point's speedup: the ratio's own
    interval, from pairs of published rows at two GPU counts (``speedup`` rows of the record),
    not two independent intervals. ``None`` for the baseline itself or a point without a
    speedup.

    The residuals of 7 publications' ratios cannot bound an 80 % range on their own (the
    conformal rank needs 9), so the margins are every validation row's
    (:data:`perfmodel.intervals.conformal.CALIBRATED`) and the high end can pass linear
    scaling, which no measured pair does (one of the 72 pairs with their GPU counts in their ids
    is 0.2 % over, tf_cnn_benchmarks InceptionV3 4.007x on 4 P100). Linear is a physical bound
    where the model sees no superlinear mechanism: ``n`` GPUs do the baseline's work (or ``n /
    b`` times it) at no more than ``n / b`` times its rate unless the baseline ran slower per
    GPU for a reason the larger run lacks (a smaller micro-batch, recomputation to fit). So
    where the predicted speedup is at most linear, the high end stops at ``n / b`` and ``cap``
    is that value (``None`` where it did not cut); a predicted superlinear speedup (the model
    found such a reason) keeps its range."""
    if report.speedup is None or report.num_gpus <= report.baseline_gpus:
        return None
    iv = interval(_features_of(report), Quantity.SPEEDUP, index or record_index(), level)
    lo, hi = iv.speed(float(report.speedup))
    linear = report.num_gpus / report.baseline_gpus
    if report.speedup <= linear < hi:
        return min(lo, linear), linear, iv, linear
    return lo, hi, iv, None


# --------------------------------------------------------------------------- plan ranking


@dataclass(frozen=True)
class Tie:
    """Whether a ranked plan's interval overlaps the best plan's (a statistical tie), and
    whether both ranges are bounded by their publications (``bounded``: where either is the
    widest the record gives standing in for a range it cannot bound, there is no verdict and
    ``tied`` is ``False``)."""

    rank: int
    low: float
    high: float
    tied: bool
    bounded: bool = True


def ties(
    scores: Sequence[float],
    scenarios: Sequence[Mapping[str, Any]],
    level: float = DEFAULT_LEVEL,
    *,
    index: RecordIndex | None = None,
) -> tuple[list[Tie], ResidualInterval]:
    """Each ranked plan's interval of its score (a time per sample, a time to accuracy or a
    cost: lower is better, proportional to the step time) and whether it overlaps the best
    plan's (``scores[0]``): the plans the model cannot tell apart at ``level``, a verdict only
    where both ranges are bounded (:attr:`ResidualInterval.bounded`); and the best plan's
    residual interval (what the ranges rest on)."""
    idx = index or record_index()
    out: list[Tie] = []
    first: ResidualInterval | None = None
    best = (-math.inf, math.inf)
    for i, (s, sc) in enumerate(zip(scores, scenarios, strict=True)):
        iv = interval(_features_of(None, sc), Quantity.STEP, idx, level)
        lo, hi = iv.time(float(s))
        if first is None:
            first, best = iv, (lo, hi)
        bounded = iv.bounded and first.bounded
        out.append(Tie(i + 1, lo, hi, i > 0 and bounded and overlaps(best, (lo, hi)), bounded))
    if first is None:
        raise ValueError("ties() needs at least one ranked plan")
    return out, first


# --------------------------------------------------------------------------- collectives


def collective_interval(
    topology: Any,
    group: Sequence[str],
    op: str,
    message_bytes: float,
    level: float = DEFAULT_LEVEL,
    *,
    index: RecordIndex | None = None,
) -> ResidualInterval:
    """The interval of a collective's prediction (``perfmodel comm``): the features of the
    group on the topology, from the published collective rows."""
    spec = topology.gpu_spec(group[0]) if group else topology.gpu_spec()
    feats = CollectiveFeatures(
        spec.name,
        spec.architecture,
        interconnect_of(topology, len(group), group=group),
        op,
        len(group),
        float(message_bytes),
    )
    return interval(feats, Quantity.COLLECTIVE, index or record_index(), level)
