"""Time to accuracy: statistical efficiency (McCandlish et al. 2018) times hardware efficiency.

A bigger global batch ``B`` processes more samples per second but needs more samples to reach a
target accuracy. McCandlish, Kaplan, Amodei et al., *An Empirical Model of Large-Batch Training*
(arXiv:1812.06162, 2018), eq. 2.11, model the trade-off with the gradient noise scale
``B_noise``::

    S(B) = S_min (1 + B_noise / B)        optimisation steps to the target
    E(B) = E_min (1 + B / B_noise)        training samples to the target,   E_min = S_min B_noise

Time to accuracy is steps times the time of one step (the hardware side, which perfmodel
predicts)::

    T(B) = S(B) t_step(B)

Too small a batch is slow because each step is short of parallel work (``t_step`` stops
shrinking while ``S`` keeps growing); too large a batch is slow because extra samples buy no
fewer steps. That is the U-shape Crossbow (Koliousis et al., VLDB 2019) shows for ResNet-32.

Fitting
-------
:func:`fit_time_to_accuracy` fits the model to measured ``(B, T)`` points with
``scipy.optimize.least_squares`` on ``log T`` (relative errors, because measured times span
several-fold). Either the step times come from perfmodel (two free parameters ``S_min``,
``B_noise``), or, from the measured times alone, with the two-term step-time model
``t_step(B) = t_fixed + B t_sample`` (three identifiable parameters ``B_noise``,
``a = S_min t_fixed``, ``b = S_min t_sample``)::

    T(B) = (1 + B_noise / B) (a + b B),   optimum  B* = sqrt(a B_noise / b)

Standard errors come from the Jacobian at the optimum, ``cov = s^2 (J^T J)^-1`` with
``s^2 = SSR / (n - p)``; parameters are fitted as logarithms so the errors are relative.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from perfmodel import units
from perfmodel._record import record_dict
from perfmodel.errors import ConfigError

if TYPE_CHECKING:  # numpy is imported by the fits that use it (a plan search does not)
    import numpy as np


class StepTimeModel(str, enum.Enum):
    """Where the step times of a time-to-accuracy fit come from."""

    PREDICTED = "predicted"  # given per point (perfmodel's predicted iteration time)
    AFFINE = "affine"  # fitted: t_step(B) = t_fixed + B t_sample


@dataclass(frozen=True)
class StatisticalEfficiency:
    """Steps and samples to a target accuracy versus the global batch (McCandlish et al. 2018).

    Attributes
    ----------
    min_steps
        ``S_min``: steps to the target with an infinitely large batch.
    noise_scale_samples
        ``B_noise``: the gradient noise scale, in samples. Batches well below it are almost
        perfectly efficient per sample, batches well above it almost perfectly efficient per step.
    min_steps_rel_std, noise_scale_rel_std
        Relative standard errors of the two parameters when fitted (``nan`` if given).
    source
        Where the parameters come from (a paper, or "fit to N points of FILE").

    Examples
    --------
    >>> se = StatisticalEfficiency(min_steps=1000.0, noise_scale_samples=256.0)
    >>> se.steps_to_target(256)  # S_min (1 + 256/256)
    2000.0
    >>> se.samples_to_target(256)  # E_min (1 + 1) = 1000 * 256 * 2
    512000.0
    """

    min_steps: float
    noise_scale_samples: float
    min_steps_rel_std: float = math.nan
    noise_scale_rel_std: float = math.nan
    source: str = "given"

    def __post_init__(self) -> None:
        for name in ("min_steps", "noise_scale_samples"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ConfigError(
                    f"{name} must be a positive number, got {v!r}", value=v, where=name
                )

    @classmethod
    def from_min_epochs(
        cls,
        min_epochs: float,
        noise_scale_samples: float,
        dataset_size: int,
        *,
        source: str = "given",
    ) -> StatisticalEfficiency:
        """Build from ``E_min`` in epochs: ``S_min = E_min dataset_size / B_noise``.

        >>> StatisticalEfficiency.from_min_epochs(2.0, 100.0, 50_000).min_steps
        1000.0
        """
        if dataset_size <= 0:
            raise ConfigError(
                f"dataset_size must be positive, got {dataset_size!r}",
                value=dataset_size,
                where="dataset_size",
            )
        return cls(
            min_epochs * dataset_size / noise_scale_samples, noise_scale_samples, source=source
        )

    @property
    def min_samples(self) -> float:
        """``E_min = S_min B_noise``: samples to the target with a vanishingly small batch."""
        return self.min_steps * self.noise_scale_samples

    def steps_to_target(self, global_batch: float) -> float:
        """``S(B) = S_min (1 + B_noise / B)`` optimisation steps."""
        _check_batch(global_batch)
        return self.min_steps * (1.0 + self.noise_scale_samples / global_batch)

    def samples_to_target(self, global_batch: float) -> float:
        """``E(B) = E_min (1 + B / B_noise) = S(B) B`` samples."""
        return self.steps_to_target(global_batch) * global_batch

    def epochs_to_target(self, global_batch: float, dataset_size: int) -> float:
        """``E(B) / dataset_size`` epochs."""
        return self.samples_to_target(global_batch) / dataset_size

    def time_to_accuracy_s(self, global_batch: float, step_time_s: float) -> float:
        """``T = S(B) t_step`` in seconds."""
        if not (step_time_s > 0 and math.isfinite(step_time_s)):
            raise ConfigError(f"step time must be positive, got {step_time_s!r}", value=step_time_s)
        return self.steps_to_target(global_batch) * step_time_s

    def to_dict(self) -> dict[str, Any]:
        """The fields with :attr:`min_samples` after ``noise_scale_samples`` (its JSON form)."""
        return record_dict(self, _STAT_KEYS)


_STAT_KEYS = (
    "min_steps",
    "noise_scale_samples",
    "min_samples",
    "min_steps_rel_std",
    "noise_scale_rel_std",
    "source",
)


def _check_batch(global_batch: float) -> None:
    if not (global_batch > 0 and math.isfinite(global_batch)):
        raise ConfigError(
            f"global batch must be positive, got {global_batch!r}",
            value=global_batch,
            where="global_batch",
        )


@dataclass(frozen=True)
class TTAFit:
    """Result of :func:`fit_time_to_accuracy`.

    Attributes
    ----------
    step_time_model
        :class:`StepTimeModel` used.
    params
        Fitted parameters by name (``noise_scale_samples``; ``min_steps`` for ``PREDICTED``;
        ``fixed_time_s`` = ``S_min t_fixed`` and ``per_sample_time_s`` = ``S_min t_sample`` for
        ``AFFINE``).
    rel_std
        Relative standard error of each parameter from the Jacobian (``nan`` when
        ``identifiable`` is false: ``J^T J`` has condition number >= 1e10, i.e. the data pin
        down a combination of parameters but not each one).
    param_range
        16th-84th percentile of each parameter over residual-bootstrap refits.
    identifiable
        Whether the Jacobian at the optimum has full rank (see ``rel_std``).
    batch_sizes, measured_s, fitted_s
        The points and the fitted time to accuracy at each, seconds.
    optimal_batch, optimal_batch_range
        Batch minimising the fitted ``T(B)`` and its bootstrap 16th-84th percentile range
        (``AFFINE``: closed form ``sqrt(a B_noise / b)``; ``PREDICTED``: minimum over a dense
        grid with the step time interpolated log-log between the points).
    rms_log_error
        Root-mean-square of ``log(fitted / measured)``.
    source
        Description of the data.
    """

    step_time_model: StepTimeModel
    params: Mapping[str, float]
    rel_std: Mapping[str, float]
    batch_sizes: tuple[float, ...]
    measured_s: tuple[float, ...]
    fitted_s: tuple[float, ...]
    optimal_batch: float
    optimal_batch_range: tuple[float, float]
    rms_log_error: float
    source: str = ""
    covariance_log: tuple[tuple[float, ...], ...] = field(default=(), repr=False)
    param_range: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    identifiable: bool = True

    @property
    def noise_scale_samples(self) -> float:
        return float(self.params["noise_scale_samples"])

    @property
    def signed_errors_pct(self) -> tuple[float, ...]:
        """``100 (fitted - measured) / measured`` per point."""
        return tuple(100.0 * (f - m) / m for f, m in zip(self.fitted_s, self.measured_s))

    def predict_s(self, global_batch: float, step_time_s: float | None = None) -> float:
        """Fitted time to accuracy at another batch (``PREDICTED`` needs its step time)."""
        _check_batch(global_batch)
        bn = self.params["noise_scale_samples"]
        if self.step_time_model is StepTimeModel.AFFINE:
            a, b = self.params["fixed_time_s"], self.params["per_sample_time_s"]
            return (1.0 + bn / global_batch) * (a + b * global_batch)
        if step_time_s is None:
            raise ConfigError("a fit on predicted step times needs the step time to extrapolate")
        return self.params["min_steps"] * (1.0 + bn / global_batch) * step_time_s

    def statistical_efficiency(self) -> StatisticalEfficiency:
        """The fitted :class:`StatisticalEfficiency` (only ``PREDICTED`` identifies ``S_min``)."""
        if self.step_time_model is not StepTimeModel.PREDICTED:
            raise ConfigError(
                "S_min is not identifiable from times alone (it multiplies the unknown step time); "
                "fit with predicted step times to get a StatisticalEfficiency",
                value=self.step_time_model.value,
            )
        return StatisticalEfficiency(
            self.params["min_steps"],
            self.params["noise_scale_samples"],
            self.rel_std["min_steps"],
            self.rel_std["noise_scale_samples"],
            source=self.source,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_time_model": self.step_time_model.value,
            "params": dict(self.params),
            "rel_std": dict(self.rel_std),
            "points": [
                {"global_batch": b, "measured_s": m, "fitted_s": f, "error_pct": e}
                for b, m, f, e in zip(
                    self.batch_sizes, self.measured_s, self.fitted_s, self.signed_errors_pct
                )
            ],
            "optimal_batch": self.optimal_batch,
            "optimal_batch_range": list(self.optimal_batch_range),
            "param_range": {k: list(v) for k, v in self.param_range.items()},
            "identifiable": self.identifiable,
            "rms_log_error": self.rms_log_error,
            "source": self.source,
        }


def fit_time_to_accuracy(
    batch_sizes: Sequence[float],
    tta_s: Sequence[float],
    *,
    step_time_s: Sequence[float] | None = None,
    source: str = "",
    draws: int = 300,
    seed: int = 0,
) -> TTAFit:
    """Fit McCandlish's model to measured time-to-accuracy points.

    Parameters
    ----------
    batch_sizes
        Global batch of each point, samples.
    tta_s
        Measured time to the target accuracy, seconds.
    step_time_s
        Time of one optimisation step at each batch (e.g. perfmodel's predicted iteration time).
        Given: fit ``S_min`` and ``B_noise`` (needs >= 3 points). Omitted: fit ``B_noise``,
        ``a`` and ``b`` of ``T = (1 + B_noise/B)(a + b B)`` (needs >= 4 points).
    source
        Description of the data, kept in the result.
    draws, seed
        Residual-bootstrap refits (log space) for the 16th-84th percentile ranges of the
        parameters and of the optimal batch.

    Raises
    ------
    ConfigError
        Too few points, non-positive values, or lengths that differ.
    """
    import numpy as np
    from scipy.optimize import least_squares

    b = np.asarray(batch_sizes, dtype=float)
    t = np.asarray(tta_s, dtype=float)
    model = StepTimeModel.AFFINE if step_time_s is None else StepTimeModel.PREDICTED
    n_params = 3 if model is StepTimeModel.AFFINE else 2
    _check_points(b, t, n_params)
    log_t = np.log(t)
    st = None if step_time_s is None else np.asarray(step_time_s, dtype=float)
    names, log_model, x0 = _log_model(model, b, t, st)

    def solve(y_log: np.ndarray, start: np.ndarray) -> Any:
        return least_squares(
            lambda x: log_model(x) - y_log, start, method="lm", xtol=1e-12, ftol=1e-12
        )

    res = solve(log_t, x0)
    x = res.x
    resid = res.fun
    cov, rel_std, identifiable = _covariance(res, names, len(b))
    params = {n: float(np.exp(x[i])) for i, n in enumerate(names)}
    fitted = np.exp(log_model(x))
    dense = np.geomspace(b.min(), b.max(), 256)

    def optimum(xx: np.ndarray) -> float:
        if model is StepTimeModel.AFFINE:
            return float(np.exp(0.5 * (xx[1] + xx[0] - xx[2])))  # sqrt(a B_noise / b)
        # step times known at the points only: interpolate log t_step in log B between them
        st_dense = np.exp(np.interp(np.log(dense), np.log(b), np.log(st)))
        return float(dense[int(np.argmin(np.log1p(np.exp(xx[1]) / dense) + np.log(st_dense)))])

    b_opt = optimum(x)
    # residual bootstrap in log space: robust where the Jacobian is near-singular
    rng = np.random.default_rng(seed)
    boot_params: list[np.ndarray] = []
    boot_opts: list[float] = []
    for _ in range(draws):
        y_star = np.log(fitted) + rng.choice(resid, size=len(resid), replace=True)
        r = solve(y_star, x)
        boot_params.append(r.x)
        boot_opts.append(optimum(r.x))
    bp = np.exp(np.array(boot_params))
    param_range = {
        n: (float(np.percentile(bp[:, i], 16)), float(np.percentile(bp[:, i], 84)))
        for i, n in enumerate(names)
    }
    lo, hi = (float(v) for v in np.percentile(boot_opts, [16, 84]))
    return TTAFit(
        step_time_model=model,
        params=params,
        rel_std=rel_std,
        batch_sizes=tuple(float(v) for v in b),
        measured_s=tuple(float(v) for v in t),
        fitted_s=tuple(float(v) for v in fitted),
        optimal_batch=b_opt,
        optimal_batch_range=(lo, hi),
        rms_log_error=float(math.sqrt(np.mean(resid**2))),
        source=source,
        covariance_log=tuple(tuple(float(c) for c in row) for row in cov),
        param_range=param_range,
        identifiable=identifiable,
    )


def _check_points(b: Any, t: Any, n_params: int) -> None:
    """Refuse batch sizes and times that are not 1-D of equal length, positive and finite, or
    fewer than ``n_params + 1`` points."""
    import numpy as np

    if b.shape != t.shape or b.ndim != 1:
        raise ConfigError(
            f"batch_sizes and tta_s must be 1-D of equal length, got {b.shape} and {t.shape}",
            value=(b.shape, t.shape),
        )
    if np.any(~np.isfinite(b)) or np.any(b <= 0) or np.any(~np.isfinite(t)) or np.any(t <= 0):
        raise ConfigError(
            "batch sizes and times must be positive and finite", value=(list(b), list(t))
        )
    if len(b) < n_params + 1:
        raise ConfigError(
            f"fitting {n_params} parameters needs at least {n_params + 1} points, got {len(b)}",
            value=len(b),
        )


def _log_model(
    model: StepTimeModel, b: Any, t: Any, st: Any
) -> tuple[tuple[str, ...], Callable[..., Any], Any]:
    """``(parameter names, log T(x), start)`` of the model fitted in log space, its
    parameters the logs of the names': ``S_min`` and ``B_noise`` over the step times ``st``
    (``predicted``), or ``B_noise``, ``a`` and ``b`` of ``T = (1 + B_noise/B)(a + b B)``."""
    import numpy as np

    if model is StepTimeModel.PREDICTED:
        if st.shape != b.shape or np.any(st <= 0) or np.any(~np.isfinite(st)):
            raise ConfigError(
                "step_time_s must be positive, one per batch size", value=list(np.atleast_1d(st))
            )
        names: tuple[str, ...] = ("min_steps", "noise_scale_samples")

        def log_model(x: np.ndarray, bb: np.ndarray = b) -> np.ndarray:
            return x[0] + np.log1p(np.exp(x[1]) / bb) + np.log(st)

        x0 = np.array([np.log(np.median(t / st)), np.log(np.median(b))])
        return names, log_model, x0
    names = ("noise_scale_samples", "fixed_time_s", "per_sample_time_s")

    def log_affine(x: np.ndarray, bb: np.ndarray = b) -> np.ndarray:
        return np.log1p(np.exp(x[0]) / bb) + np.log(np.exp(x[1]) + np.exp(x[2]) * bb)

    x0 = np.array(
        [np.log(np.median(b)), np.log(np.min(t) / 2), np.log(np.min(t) / (2 * np.max(b)))]
    )
    return names, log_affine, x0


def _covariance(
    res: Any, names: Sequence[str], n_points: int
) -> tuple[Any, dict[str, float], bool]:
    """The fit's covariance in log space (``s^2 (J^T J)^-1``), each parameter's relative
    standard deviation, and whether the parameters are identifiable (``cond(J^T J) < 1e10``;
    otherwise ``nan``)."""
    import numpy as np

    n_params = len(names)
    resid = res.fun
    dof = max(n_points - n_params, 1)
    s2 = float(resid @ resid) / dof
    jtj = res.jac.T @ res.jac
    cond = float(np.linalg.cond(jtj))
    identifiable = bool(np.isfinite(cond) and cond < 1e10)
    if identifiable:
        cov = np.linalg.inv(jtj) * s2
        rel_std = {n: float(math.sqrt(max(cov[i, i], 0.0))) for i, n in enumerate(names)}
    else:
        cov = np.full((n_params, n_params), np.nan)
        rel_std = {n: math.nan for n in names}
    return cov, rel_std, identifiable


def load_tta_points(path: str, *, match: str | None = None) -> tuple[list[float], list[float], str]:
    """Read ``time_to_accuracy`` rows (the ``seeds.jsonl`` schema) from a JSONL file.

    Parameters
    ----------
    path
        JSONL file of rows with ``kind``, ``batch.global``, ``value`` and ``unit`` (``s``).
    match
        Keep only rows whose ``id`` or ``model`` contains this text (case-insensitive).

    Returns
    -------
    (batch_sizes, tta_s, description)
    """
    from pathlib import Path

    from perfmodel._io import read_jsonl_numbered

    p = Path(path)
    batches: list[float] = []
    times: list[float] = []
    models: set[str] = set()
    for i, row in read_jsonl_numbered(p, where="--tta-data"):
        if row.get("kind") != "time_to_accuracy":
            continue
        text = f"{row.get('id', '')} {row.get('model', '')}".lower()
        if match and match.lower() not in text:
            continue
        unit = row.get("unit")
        scale = {"s": 1.0, "min": units.minute, "h": units.hour}.get(str(unit))
        if scale is None:
            raise ConfigError(
                f"{p}:{i}: unit {unit!r} is not s, min or h", value=unit, where=f"{p}:{i}"
            )
        try:
            batches.append(float(row["batch"]["global"]))
            times.append(float(row["value"]) * scale)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"{p}:{i}: time_to_accuracy row needs batch.global and value",
                value=row.get("id"),
                where=f"{p}:{i}",
            ) from exc
        models.add(str(row.get("model")))
    if not batches:
        raise ConfigError(
            f"{p}: no time_to_accuracy rows{' matching ' + repr(match) if match else ''}",
            value=match,
            where=str(p),
        )
    import numpy as np

    order = np.argsort(batches)
    return (
        [batches[i] for i in order],
        [times[i] for i in order],
        f"{len(batches)} points of {', '.join(sorted(models))} from {p.name}",
    )


@dataclass(frozen=True)
class TTAPoint:
    """Time to accuracy of one configuration (global batch on a hardware plan)."""

    global_batch: int
    gpus: int
    learners_per_gpu: int
    step_time_s: float
    steps: float
    time_to_accuracy_s: float
    scenario: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The fields but :attr:`scenario` (its JSON form)."""
        return record_dict(self, _POINT_KEYS)


_POINT_KEYS = tuple(f.name for f in fields(TTAPoint) if f.name != "scenario")


def tta_grid(
    stat: StatisticalEfficiency,
    base: Mapping[str, Any],
    *,
    global_batches: Sequence[int],
    gpus: Sequence[int],
    learners_per_gpu: Sequence[int] = (1,),
    evaluator: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> list[TTAPoint]:
    """Time to accuracy over global batch x GPU count x learners per GPU.

    Each configuration is the ``base`` scenario dict with ``gpus``, ``learners_per_gpu`` and
    ``batch_per_gpu = global_batch / (gpus x learners)`` (the batch of one learner, the
    ``Scenario`` convention; ``dp_mode = "crossbow"`` when there are several learners); its step
    time is the evaluator's ``iteration_time_s``, and its ``samples_per_step`` must equal the
    global batch. Configurations whose global batch does not divide over the learners, or
    that the evaluator rejects or reports out of memory, are skipped.

    Learners are treated as synchronous data-parallel replicas (gradients averaged each step), so
    the statistical efficiency depends on the global batch only. Crossbow's synchronous model
    averaging differs (it claims better statistical efficiency for many small learners); this
    model does not credit it.
    """
    from perfmodel.errors import PerfModelError
    from perfmodel.search._eval import default_evaluator

    ev = evaluator or default_evaluator
    out: list[TTAPoint] = []
    for g in gpus:
        for k in learners_per_gpu:
            for gb in global_batches:
                if gb % (g * k):
                    continue
                sc = dict(base)
                sc.pop("global_batch", None)
                sc.update(gpus=g, batch_per_gpu=gb // (g * k), learners_per_gpu=k)
                if k > 1:
                    sc.setdefault("dp_mode", "crossbow")
                try:
                    rep = ev(sc)
                except PerfModelError:
                    continue
                if not rep.get("fits_in_memory", True):
                    continue
                t = float(rep["iteration_time_s"])
                samples = int(rep.get("samples_per_step") or gb)
                if samples != gb:
                    raise ConfigError(
                        f"the evaluator processed {samples} samples per step for gpus={g}, "
                        f"learners={k}, batch_per_gpu={gb // (g * k)}; expected {gb}",
                        value=samples,
                        where="samples_per_step",
                    )
                out.append(
                    TTAPoint(
                        gb, g, k, t, stat.steps_to_target(gb), stat.time_to_accuracy_s(gb, t), sc
                    )
                )
    return out
