"""Fitting measurements into parameters, with uncertainty.

All fits minimise robust (``soft_l1``) least squares of **log** residuals,
``r_i = ln(t_model_i / t_measured_i)``, so a 10% miss counts the same on a 10 us copy as on a
100 ms GEMM, and an outlier (a point hit by a clock change) pulls less than it would in plain
least squares (``scipy.optimize.least_squares``, Branch et al. 1999 trust-region reflective).
Positive parameters are fitted as ``ln(p)``; one-sigma standard errors come from the Gauss-Newton
covariance at the optimum, ``cov(ln p) = s^2 (J^T J)^{-1}`` with ``s^2 = sum r_i^2 / (n - k)``,
propagated as ``stderr(p) = p * stderr(ln p)``, with ``n - k`` degrees of freedom
(:attr:`FitResult.dof`): an interval reads them with Student's ``t_{n-k}`` (Seber & Wild 2003,
section 5.1; :meth:`perfmodel.calibration.profile.FitSummary.halfwidth`), the normal's tails
being far too thin at ``n - k ~ 10``. A parameter whose column of ``J`` is (near) zero is not
identifiable from the data: it keeps its starting value and reports ``nan``.

Device-level fits (:func:`fit_device`) use only closed forms written here:

- memory, host-device transfer: ``t = alpha_s + bytes / bandwidth_Bps`` (Hockney 1994);
- GEMM per dtype: ``t = alpha_s + flop / peak_flops`` over the compute-bound points (achieved
  rate at least half the best of that dtype): the achievable peak;
- launch: the median per-launch time;
- concurrent streams: ``t_n = t_1 (1 + (n - 1) / c)`` (``c`` = how many learners the GPU runs
  at once for free; ``c -> inf`` is perfect overlap, ``c = 1`` none).

:func:`fit_compute_params` fits named fields of :class:`perfmodel.compute.ComputeParams` by
predicting each microbenchmark with :class:`perfmodel.compute.ComputeModel` itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from perfmodel.calibration.measurement import BenchKind, Measurement
from perfmodel.calibration.profile import CalibrationProfile, FitSummary
from perfmodel.calibration.shapes import AttentionShape, ConvShape
from perfmodel.errors import CalibrationError


@dataclass(frozen=True)
class FitResult:
    """Fitted positive parameters with one-sigma standard errors.

    Attributes
    ----------
    values, stderr
        Parameter name -> value / standard error (same unit as the value; ``nan`` when the
        parameter is not identifiable from the data).
    residuals
        ``ln(model / measured)`` per point at the optimum.
    success
        The optimiser's convergence flag.
    dof
        Residual degrees of freedom of ``s^2``: points minus fitted (identifiable) parameters.
        The standard errors are read with Student's t of these (:meth:`FitSummary.halfwidth
        <perfmodel.calibration.profile.FitSummary.halfwidth>` of :meth:`summary`), not the
        normal: with 13 points and 3 parameters a miss of 5 standard errors happens about once
        in 1,900 fits (``t_10``), not once in 1.7 million (session 14's recovery draw,
        ``tests/calibration/test_fit.py``; 1,500 draws of that test's setting, fix17: the
        t intervals cover 68.1 / 95.1 / 99.3 / 99.67 % at 68.3 / 95 / 99 / 99.73 %, the
        normal ones 65.5 / 92.5 / 97.7 / 99.2 %).
    """

    values: Mapping[str, float]
    stderr: Mapping[str, float]
    residuals: tuple[float, ...]
    success: bool
    message: str = ""
    dof: int | None = None

    @property
    def n_points(self) -> int:
        return len(self.residuals)

    @property
    def rms_log_residual(self) -> float:
        r = np.asarray(self.residuals)
        return float(np.sqrt(np.mean(r**2))) if r.size else float("nan")

    @property
    def median_abs_error(self) -> float:
        r = np.asarray(self.residuals)
        return float(np.median(np.abs(np.expm1(r)))) if r.size else float("nan")

    def rel_stderr(self, name: str) -> float:
        v = self.values[name]
        return self.stderr[name] / v if v else float("nan")

    def summary(self, model: str, notes: str = "") -> FitSummary:
        return FitSummary(
            model=model,
            values=MappingProxyType(dict(self.values)),
            stderr=MappingProxyType(dict(self.stderr)),
            n_points=self.n_points,
            rms_log_residual=self.rms_log_residual,
            median_abs_error=self.median_abs_error,
            notes=notes,
            dof=self.dof,
        )


def fit_log_model(
    predict: Callable[[Mapping[str, float]], np.ndarray],
    measured_s: Sequence[float],
    start: Mapping[str, float],
    *,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    loss: str = "soft_l1",
    f_scale: float = 0.1,
    where: str = "fit",
) -> FitResult:
    """Fit positive parameters so that ``predict(params)`` matches ``measured_s`` in log space.

    Parameters
    ----------
    predict
        Maps a parameter dict to model times (seconds), one per measurement.
    measured_s
        Measured times, seconds (> 0).
    start
        Starting values (> 0); their names are the fitted parameters.
    bounds
        Optional ``(low, high)`` per parameter (> 0).
    f_scale
        Soft-L1 scale: residuals beyond ~``f_scale`` in log (10%) count linearly, not squared.

    Raises
    ------
    CalibrationError
        With no points, a non-positive measured time or starting value.
    """
    y = np.asarray(measured_s, dtype=float)
    names = list(start)
    if y.size == 0:
        raise CalibrationError(f"{where}: no measurements to fit", value=0, where=where)
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise CalibrationError(
            f"{where}: measured times must be positive", value=y.tolist(), where=where
        )
    x0 = []
    for n in names:
        if not (start[n] > 0 and math.isfinite(start[n])):
            raise CalibrationError(
                f"{where}: start value of {n} must be positive, got {start[n]}",
                value=start[n],
                where=where,
            )
        x0.append(math.log(start[n]))
    lo = np.full(len(names), -np.inf)
    hi = np.full(len(names), np.inf)
    for i, n in enumerate(names):
        if bounds and n in bounds:
            lo[i], hi[i] = math.log(bounds[n][0]), math.log(bounds[n][1])
            x0[i] = float(np.clip(x0[i], lo[i] + 1e-9, hi[i] - 1e-9))
    log_y = np.log(y)
    x_full = np.asarray(x0, dtype=float)

    def resid_full(x: np.ndarray) -> np.ndarray:
        params = {n: float(math.exp(v)) for n, v in zip(names, x)}
        pred = np.asarray(predict(params), dtype=float)
        pred = np.where(np.isfinite(pred) & (pred > 0), pred, 1e30)
        return np.log(pred) - log_y

    # identifiability: a parameter no prediction depends on (at the start, over +-10%) is frozen
    r0 = resid_full(x_full)
    free = []
    for j in range(len(names)):
        moved = False
        for h in (0.1, -0.1):
            xp = x_full.copy()
            xp[j] = float(np.clip(xp[j] + h, lo[j], hi[j]))
            if np.max(np.abs(resid_full(xp) - r0)) > 1e-9:
                moved = True
                break
        if moved:
            free.append(j)
    free_idx = np.asarray(free, dtype=int)

    def resid(xf: np.ndarray) -> np.ndarray:
        x = x_full.copy()
        x[free_idx] = xf
        return resid_full(x)

    if free_idx.size:
        from scipy.optimize import least_squares  # imported here: ~0.6 s, only fits need it

        res = least_squares(
            resid,
            x_full[free_idx],
            bounds=(lo[free_idx], hi[free_idx]),
            loss=loss,
            f_scale=f_scale,
            x_scale=1.0,
            diff_step=1e-4,
            max_nfev=200 * (len(free) + 1),
        )
        x_full[free_idx] = res.x
        success, message = bool(res.success), str(res.message)
    else:
        success, message = False, "no parameter affects the predictions"
    r = resid_full(x_full)
    values = {n: float(math.exp(v)) for n, v in zip(names, x_full)}
    se_free = _stderr(x_full[free_idx], resid, r) if free else np.array([])
    stderr = np.full(len(names), np.nan)
    stderr[free_idx] = se_free
    return FitResult(
        values=MappingProxyType(values),
        stderr=MappingProxyType({n: stderr[i] * values[n] for i, n in enumerate(names)}),
        residuals=tuple(float(v) for v in r),
        success=success,
        message=message,
        dof=max(r.size - len(free), 0),
    )


def _stderr(x: np.ndarray, resid: Callable[[np.ndarray], np.ndarray], r: np.ndarray) -> np.ndarray:
    """Gauss-Newton standard errors of the log-parameters (``nan`` where not identifiable)."""
    n, k = r.size, x.size
    jac = np.empty((n, k))
    for j in range(k):
        h = 1e-5 * max(1.0, abs(x[j]))
        xp = x.copy()
        xp[j] += h
        xm = x.copy()
        xm[j] -= h
        jac[:, j] = (resid(xp) - resid(xm)) / (2 * h)
    out = np.full(k, np.nan)
    if n <= k:
        return out
    s2 = float(np.sum(r**2) / (n - k))
    col = np.linalg.norm(jac, axis=0)
    ok = col > 1e-9 * max(1.0, float(col.max(initial=0.0)))
    if not ok.any():
        return out
    jt = jac[:, ok]
    try:
        cov = np.linalg.pinv(jt.T @ jt) * s2
    except np.linalg.LinAlgError:  # pragma: no cover
        return out
    out[np.where(ok)[0]] = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return out


# ---------------------------------------------------------------------------------------------
# closed-form device fits
# ---------------------------------------------------------------------------------------------


def fit_alpha_beta(
    sizes: Sequence[float], times_s: Sequence[float], *, where: str = "alpha-beta"
) -> FitResult:
    """Fit ``t = alpha_s + size / bandwidth_Bps`` (size in bytes, or FLOP for a rate fit).

    >>> r = fit_alpha_beta([1e3, 1e6, 1e9], [1e-5 + 1e3 / 1e10, 1e-5 + 1e6 / 1e10, 1e-5 + 1e9 / 1e10])
    >>> round(r.values["bandwidth_Bps"] / 1e10, 3), round(r.values["alpha_s"] * 1e5, 3)
    (1.0, 1.0)
    """
    x = np.asarray(sizes, dtype=float)
    y = np.asarray(times_s, dtype=float)
    if x.size != y.size or x.size == 0:
        raise CalibrationError(
            f"{where}: need matching, non-empty sizes and times",
            value=(x.size, y.size),
            where=where,
        )
    # start: bandwidth from the largest point, latency from the smallest
    i_big = int(np.argmax(x))
    bw0 = max(x[i_big] / y[i_big], 1.0)
    alpha0 = max(float(np.min(y)) * 0.5, 1e-9)
    return fit_log_model(
        lambda p: p["alpha_s"] + x / p["bandwidth_Bps"],
        y,
        {"alpha_s": alpha0, "bandwidth_Bps": bw0},
        bounds={"alpha_s": (1e-12, 10.0), "bandwidth_Bps": (1.0, 1e16)},
        where=where,
    )


def fit_streams(
    n_streams: Sequence[int], times_s: Sequence[float], *, where: str = "streams"
) -> FitResult:
    """Fit ``t_n = t_1 (1 + (n - 1) / c)``: ``c`` is the effective number of concurrent learners.

    >>> r = fit_streams([1, 2, 4, 8], [1.0, 1.25, 1.75, 2.75])
    >>> round(r.values["concurrency"], 2)
    4.0
    """
    n = np.asarray(n_streams, dtype=float)
    y = np.asarray(times_s, dtype=float)
    t1 = float(y[np.argmin(n)])
    return fit_log_model(
        lambda p: p["t1_s"] * (1.0 + (n - 1.0) / p["concurrency"]),
        y,
        {"t1_s": t1, "concurrency": 2.0},
        bounds={"t1_s": (t1 * 0.2, t1 * 5.0), "concurrency": (0.05, 1e3)},
        where=where,
    )


def fit_device(profile: CalibrationProfile) -> dict[str, FitSummary]:
    """All device-level fits the profile's measurements allow (see the module docstring)."""
    fits: dict[str, FitSummary] = {}
    ms = profile.measurements
    for kind, name in (
        (BenchKind.COPY, "memory.copy"),
        (BenchKind.ELEMENTWISE, "memory.elementwise"),
    ):
        pts = [m for m in ms if m.kind is kind and m.work_bytes]
        if len(pts) >= 3:
            r = fit_alpha_beta([m.work_bytes for m in pts], [m.time_s for m in pts], where=name)  # type: ignore[misc]
            fits[name] = r.summary("t = alpha_s + bytes / bandwidth_Bps (bytes read + written)")
    for kind in (BenchKind.H2D, BenchKind.D2H):
        for pinned in (True, False):
            pts = [
                m
                for m in ms
                if m.kind is kind and bool(m.params.get("pinned")) is pinned and m.work_bytes
            ]
            name = f"{kind.value}.{'pinned' if pinned else 'pageable'}"
            if len(pts) >= 3:
                r = fit_alpha_beta([m.work_bytes for m in pts], [m.time_s for m in pts], where=name)  # type: ignore[misc]
                fits[name] = r.summary("t = alpha_s + bytes / bandwidth_Bps")
    for m in (m for m in ms if m.kind is BenchKind.LAUNCH):
        name = (
            "launch.eager"
            if m.params.get("mode") == "eager" and m.backend.startswith("torch-cuda")
            else "launch"
        )
        sigma = (m.timing.p90_s - m.timing.p10_s) / 2.563  # normal: p90 - p10 = 2.563 sigma
        fits[name] = FitSummary(
            model=f"median time of one back-to-back launch of a 1-element kernel ({m.params.get('mode', 'eager')})",
            values=MappingProxyType({"launch_s": m.time_s}),
            stderr=MappingProxyType({"launch_s": sigma / math.sqrt(max(1, m.timing.repeats))}),
            n_points=1,
            rms_log_residual=0.0,
            median_abs_error=0.0,
            dof=None,  # a spread of the repeats read from quantiles, not a residual s^2
        )
    gemm_by_dtype: dict[str, list[Measurement]] = {}
    for m in ms:
        if m.kind is BenchKind.GEMM and m.work_flop:
            gemm_by_dtype.setdefault(str(m.params["dtype"]), []).append(m)
    for dtype, pts in gemm_by_dtype.items():
        best = max(m.achieved_flops or 0.0 for m in pts)
        bound = [m for m in pts if (m.achieved_flops or 0.0) >= 0.5 * best]
        if len(bound) >= 3:
            r = fit_alpha_beta(
                [m.work_flop for m in bound], [m.time_s for m in bound], where=f"gemm.{dtype}"
            )  # type: ignore[misc]
            vals = {"alpha_s": r.values["alpha_s"], "peak_flops": r.values["bandwidth_Bps"]}
            errs = {"alpha_s": r.stderr["alpha_s"], "peak_flops": r.stderr["bandwidth_Bps"]}
            fits[f"gemm.{dtype}"] = FitSummary(
                model="t = alpha_s + flop / peak_flops over compute-bound GEMMs (>= 50% of best rate)",
                values=MappingProxyType(vals),
                stderr=MappingProxyType(errs),
                n_points=r.n_points,
                rms_log_residual=r.rms_log_residual,
                median_abs_error=r.median_abs_error,
                dof=r.dof,
                notes=f"best single GEMM: {best / 1e12:.3f} TFLOP/s; {len(pts)} shapes measured",
            )
    by_shape: dict[tuple[Any, ...], list[Measurement]] = {}
    for m in ms:
        if m.kind is BenchKind.STREAMS:
            by_shape.setdefault(
                (m.params["m"], m.params["n"], m.params["k"], m.params["dtype"]), []
            ).append(m)
    for (mm, nn, kk, dt), pts in by_shape.items():
        if len(pts) >= 3 and any(p.params["streams"] == 1 for p in pts):
            r = fit_streams(
                [int(p.params["streams"]) for p in pts], [p.time_s for p in pts], where="streams"
            )
            fits[f"streams.{dt}.m{mm}"] = r.summary(
                f"t_n = t1_s (1 + (n - 1) / concurrency): n learners of {mm}x{nn}x{kk} GEMMs on n streams"
            )
    return fits


# ---------------------------------------------------------------------------------------------
# ComputeParams (the compute engineer's model) fitted through ComputeModel itself
# ---------------------------------------------------------------------------------------------


def measurement_layer(m: Measurement) -> tuple[Any, Any] | None:
    """The :class:`~perfmodel.workload.layers.LayerCost` and :class:`Precision` a microbenchmark ran.

    GEMM -> a ``LINEAR`` layer (``m x k @ k x n``, ``batch`` times); CONV -> a ``CONV`` layer
    with its implicit-GEMM shape; ATTENTION -> an ``ATTENTION`` layer with the zoo's FLOP
    convention (causal halves ``4 b h s^2 d``; backward 2.5x forward); COPY / ELEMENTWISE -> an ``ELEMENTWISE`` layer moving
    ``work_bytes``; LAUNCH -> an ``ELEMENTWISE`` layer of one element. ``None`` for other kinds.
    """
    from perfmodel.dtypes import DType, Precision
    from perfmodel.workload.layers import GemmShape, LayerCost, LayerKind

    p = m.params
    if m.kind is BenchKind.GEMM:
        dtype = DType(p["dtype"])
        mm, nn, kk, b = int(p["m"]), int(p["n"]), int(p["k"]), int(p.get("batch", 1))
        flop = 2.0 * mm * nn * kk * b
        item = dtype.itemsize
        layer = LayerCost(
            name=m.key,
            kind=LayerKind.LINEAR if b == 1 else LayerKind.MATMUL,
            fwd_flop=flop,
            bwd_input_flop=flop,
            bwd_weight_flop=flop,
            params=0,  # a bare GEMM: no FP32 master weights to cast under mixed precision
            fwd_bytes=float(item * b * (mm * kk + mm * nn) + item * kk * nn),
            bwd_bytes=float(2 * item * b * (mm * kk + mm * nn) + 2 * item * kk * nn),
            activation_bytes=float(item * b * mm * kk),
            output_shape=(b, mm, nn) if b > 1 else (mm, nn),
            gemm=GemmShape(mm, nn, kk, b),
        )
        return layer, _precision_of(dtype, Precision)
    if m.kind is BenchKind.CONV:
        dtype = DType(p["dtype"])
        cs = ConvShape.from_params(p)
        ho, wo = cs.out_h, cs.out_w
        flop = cs.flop
        item = dtype.itemsize
        operands = cs.input_elems + cs.output_elems + cs.weight_elems
        layer = LayerCost(
            name=m.key,
            kind=LayerKind.CONV,
            fwd_flop=flop,
            bwd_input_flop=flop,
            bwd_weight_flop=flop,
            params=0,  # a bare convolution: no master weights to cast
            fwd_bytes=float(item * operands),
            bwd_bytes=float(2 * item * operands),
            activation_bytes=float(item * cs.input_elems),
            output_shape=(cs.n, cs.k, ho, wo),
            gemm=GemmShape(cs.n * ho * wo, cs.k, cs.c * cs.r * cs.s),
        )
        return layer, _precision_of(dtype, Precision)
    if m.kind is BenchKind.ATTENTION:
        dtype = DType(p["dtype"])
        att = AttentionShape.from_params(p)
        b, h, sq, d = att.dims
        fwd = att.fwd_flop
        nbytes = att.qkvo_bytes(dtype.itemsize)
        layer = LayerCost(
            name=m.key,
            kind=LayerKind.ATTENTION,
            fwd_flop=fwd,
            bwd_input_flop=2.5 * fwd,
            bwd_weight_flop=0.0,
            params=0,
            fwd_bytes=nbytes,
            bwd_bytes=2.0 * nbytes,
            activation_bytes=nbytes,
            output_shape=(b, sq, h * d),
            gemm=GemmShape(sq, sq, d, b * h),
        )
        return layer, _precision_of(dtype, Precision)
    if (
        m.kind is BenchKind.LAUNCH
        and m.params.get("mode") == "eager"
        and m.backend.startswith("torch-cuda")
    ):
        return (
            None  # host dispatch rate, not a per-kernel GPU cost (reported as fits["launch.eager"])
        )
    if m.kind in (BenchKind.COPY, BenchKind.ELEMENTWISE, BenchKind.LAUNCH):
        nbytes = float(m.work_bytes or 12.0)
        elems = max(1.0, nbytes / 12.0)
        layer = LayerCost(
            name=m.key,
            kind=LayerKind.ELEMENTWISE,
            fwd_flop=elems,
            bwd_input_flop=0.0,
            bwd_weight_flop=0.0,
            params=0,
            fwd_bytes=nbytes,
            bwd_bytes=nbytes,
            activation_bytes=0.0,
            output_shape=(int(elems),),
        )
        return layer, Precision.FP32
    return None


def _precision_of(dtype: Any, precision_cls: Any) -> Any:
    return {
        "fp32": precision_cls.FP32,
        "tf32": precision_cls.TF32,
        "fp16": precision_cls.FP16,
        "bf16": precision_cls.BF16,
        "fp8": precision_cls.FP8,
    }.get(dtype.value, precision_cls.FP32)


def predicted_time(model: Any, layer: Any, precision: Any, phase: str = "fwd") -> float:
    """``ComputeModel`` time of a microbenchmark: forward, or forward + backward (``"fwd+bwd"``)."""
    t = model.layer_time(layer, precision)
    return t.total_s if phase == "fwd+bwd" else t.fwd_s


def _positive_float_fields(params: Any) -> dict[str, float]:
    out = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if isinstance(v, float) and not isinstance(v, bool) and v > 0 and math.isfinite(v):
            out[f.name] = v
    return out


#: ComputeParams fields fitted by default (those the microbenchmarks can identify); the GEMM
#: ceilings are folded into per-dtype ``peak_flops.<dtype>`` (achievable peaks).
#: ``alignment_efficiency`` is identified by tensor-core GEMMs whose ``k`` or ``n`` is not a
#: multiple of the dtype's alignment (e.g. the 4095^3 shapes of the suite), and
#: ``fused_attention_bwd_efficiency`` by attention benchmarks timed forward + backward
#: (``phase="fwd+bwd"``); without such measurements the identifiability check of
#: :func:`fit_log_model` keeps their defaults (``nan`` standard error).
DEFAULT_COMPUTE_FIELDS: tuple[str, ...] = (
    "fused_attention_efficiency",
    "fused_attention_bwd_efficiency",
    "alignment_efficiency",
    "memory_efficiency",
    "kernel_launch_s",
    "conv_efficiency",
    "winograd_speedup",
    "split_k_efficiency",
)

#: Microbenchmark kinds a GEMM-and-bandwidth-only calibration uses.
GEMM_BW_KINDS: tuple[BenchKind, ...] = (BenchKind.GEMM, BenchKind.COPY, BenchKind.ELEMENTWISE)
#: Microbenchmark kinds the full compute calibration uses (training steps stay out: they validate).
FULL_KINDS: tuple[BenchKind, ...] = (
    BenchKind.GEMM,
    BenchKind.CONV,
    BenchKind.ATTENTION,
    BenchKind.COPY,
    BenchKind.ELEMENTWISE,
    BenchKind.LAUNCH,
)


def fit_compute_params(
    measurements: Sequence[Measurement],
    gpu: Any,
    base: Any | None = None,
    fields: Sequence[str] | None = None,
    *,
    kinds: Sequence[BenchKind] = FULL_KINDS,
    fit_peaks: bool = True,
    where: str = "compute fit",
) -> tuple[Any, FitResult]:
    """Fit ``ComputeParams`` fields so that ``ComputeModel`` reproduces the microbenchmarks.

    Each measurement becomes a one-layer prediction (:func:`measurement_layer`); the model's
    forward time is compared with the measured time in log space.

    Parameters
    ----------
    gpu
        The :class:`~perfmodel.hardware.GPUSpec` the model runs with.
    base
        Starting parameters (default ``ComputeParams.for_gpu(gpu)``).
    fields
        Positive float fields of ``base`` to fit (default :data:`DEFAULT_COMPUTE_FIELDS`, those
        present). A field no measurement depends on keeps its value and reports ``nan`` error.
    kinds
        Which measurements feed the fit (:data:`GEMM_BW_KINDS` or :data:`FULL_KINDS`).
    fit_peaks
        Also fit ``peak_flops[dtype]`` for every dtype with GEMM measurements; the
        ``tensor_core_efficiency`` / ``cuda_core_efficiency`` ceilings are then fixed at 1 (the
        fitted peak *is* the achievable ceiling, tiles and waves still apply on top).

    Returns
    -------
    (ComputeParams, FitResult)
        Fit values are named as the fields, peaks as ``peak_flops.<dtype>``.
    """
    from perfmodel.compute import ComputeModel, ComputeParams
    from perfmodel.dtypes import DType

    base = base if base is not None else ComputeParams.for_gpu(gpu)
    pts: list[tuple[Any, Any, str, float]] = []
    dtypes: set[str] = set()
    used: set[BenchKind] = set()  # kinds with a measurement in the fit (the source names these)
    for m in measurements:
        if m.kind not in kinds or m.time_s <= 0:
            continue
        lp = measurement_layer(m)
        if lp is None:
            continue
        used.add(m.kind)
        pts.append((lp[0], lp[1], str(m.params.get("phase", "fwd")), m.time_s))
        if m.kind is BenchKind.GEMM:
            dtypes.add(str(m.params["dtype"]))
    if not pts:
        raise CalibrationError(
            f"{where}: no GEMM/conv/memory measurements to fit", value=0, where=where
        )
    candidates = _positive_float_fields(base)
    names = [
        f for f in (fields if fields is not None else DEFAULT_COMPUTE_FIELDS) if f in candidates
    ]
    start = {n: candidates[n] for n in names}
    bounds = {n: _field_bounds(n, candidates[n]) for n in names}
    if fit_peaks and dtypes:
        # the fitted peak is the achievable ceiling: no catalogue ceilings on top of it
        base = dataclasses.replace(
            base,
            tensor_core_efficiency=1.0,
            cuda_core_efficiency=1.0,
            gemm_ceilings={},
            gemm_ceiling_basis={},
        )
        for d in sorted(dtypes):
            dt = DType(d)
            try:
                peak0 = base.peak(dt) * 0.8
            except Exception:  # no such dtype on the datasheet: start from the best measurement
                peak0 = max(
                    m.achieved_flops or 0.0 for m in measurements if m.params.get("dtype") == d
                )
            start[f"peak_flops.{d}"] = peak0
            bounds[f"peak_flops.{d}"] = (peak0 / 1e3, peak0 * 1e3)
    if not start:
        raise CalibrationError(
            f"{where}: none of the fields {list(fields or [])} is a positive float of {type(base).__name__}",
            value=list(fields or []),
            where=where,
        )

    def make(params: Mapping[str, float]) -> Any:
        peaks = dict(base.peak_flops)
        upd: dict[str, Any] = {}
        for n, v in params.items():
            if n.startswith("peak_flops."):
                peaks[DType(n.split(".", 1)[1])] = float(v)
            else:
                lo, hi = bounds[n]
                upd[n] = float(min(max(v, lo), hi))
        return dataclasses.replace(base, peak_flops=peaks, **upd)

    def predict(params: Mapping[str, float]) -> np.ndarray:
        model = ComputeModel(gpu, make(params))
        return np.array([predicted_time(model, layer, prec, ph) for layer, prec, ph, _ in pts])

    result = fit_log_model(predict, [t for *_, t in pts], start, bounds=bounds, where=where)
    fitted = make(result.values)
    fitted = dataclasses.replace(
        fitted,
        source=f"calibrated: {result.n_points} microbenchmarks ({', '.join(sorted(k.value for k in used))})",
    )
    return fitted, result


def _field_bounds(name: str, value: float) -> tuple[float, float]:
    """Search range for a ComputeParams field: efficiencies in (0, 1], others x/1000 .. x*1000."""
    low = name.lower()
    if "eff" in low or "fraction" in low or low.endswith("_frac"):
        return (1e-4, 1.0 - 1e-9)
    return (value / 1e3, value * 1e3)
