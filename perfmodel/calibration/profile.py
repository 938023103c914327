"""The calibration profile: fitted parameters, their uncertainty, provenance and raw measurements.

This is a leaf module (design contract): :mod:`perfmodel.compute` and :mod:`perfmodel.comm` may
import it; it imports them only lazily, when a caller asks for their parameter objects.

File format (JSON, ``format_version`` = :data:`FORMAT_VERSION`)::

    {
      "format_version": 1,
      "kind": "perfmodel-calibration-profile",
      "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "gpu_model": "H100-SXM5-80GB", ...},
      "provenance": {"created_utc": ..., "perfmodel_version": ..., "host": ..., "driver_version": ...,
                     "cuda_version": ..., "libraries": {...}, "command": ...},
      "status": {"complete": true, "skipped": {"collectives": "needs >= 2 GPUs"}},
      "fits": {"memory.copy": {"values": {...}, "stderr": {...}, "n_points": 12, ...}, ...},
      "compute_params": {...} | null,      # perfmodel.compute.ComputeParams.to_dict()
      "link_params": {...} | null,         # perfmodel.comm.LinkParams.to_dict()
      "measurements": [{"kind": "gemm", "key": ..., "params": {...}, "time_s": ..., ...}, ...]
    }

A profile is written after every benchmark (atomically), with ``status.complete = false`` until the
suite finishes, so an interrupted calibration keeps what it measured and ``--resume`` continues it.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from perfmodel._enum import ParsedEnum
from perfmodel._io import parse_json, read_text, write_json_atomic
from perfmodel._record import FlatRecord
from perfmodel._schema import (
    as_bool,
    as_int,
    as_list,
    as_mapping,
    as_number,
    as_str,
    number_map,
    require_fields,
)
from perfmodel.calibration.measurement import NUMBER_FIELDS, BenchKind, Measurement
from perfmodel.errors import CalibrationError, PerfModelError, UnknownHardwareError

if TYPE_CHECKING:  # pragma: no cover
    from perfmodel.comm import LinkParams
    from perfmodel.compute import ComputeParams
    from perfmodel.hardware import GPUSpec

FORMAT_VERSION = 1
"""Current profile file format. Readers refuse files with a larger number."""

PROFILE_KIND = "perfmodel-calibration-profile"

_REQUIRED_TOP = ("format_version", "device", "provenance", "measurements")
_KNOWN_TOP = {
    *_REQUIRED_TOP,
    "kind",
    "status",
    "fits",
    "compute_params",
    "link_params",
}


class DeviceKind(
    str,
    ParsedEnum,
    error=CalibrationError,
    template="{where}: device.kind {text!r} is not {expected}",
):
    """What was calibrated."""

    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True)
class DeviceInfo(FlatRecord):
    """The calibrated device (its JSON form: :class:`~perfmodel._record.FlatRecord`).

    Attributes
    ----------
    kind
        CPU or CUDA GPU.
    name
        The name the driver reports (``torch.cuda.get_device_name``, or the CPU model name).
    gpu_model
        Canonical name in the GPU catalogue (:func:`perfmodel.hardware.get_gpu`), ``None`` for a
        CPU or an uncatalogued GPU.
    memory_bytes
        Device memory in bytes (host RAM for a CPU), when known.
    cores
        Streaming multiprocessors (GPU) or logical CPU cores used.
    count
        Number of devices visible (collectives need >= 2).
    """

    kind: DeviceKind
    name: str
    gpu_model: str | None = None
    memory_bytes: int | None = None
    cores: int | None = None
    count: int = 1
    compute_capability: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str) -> DeviceInfo:
        as_mapping(d, "device", where=where, error=CalibrationError)
        require_fields(d, ("kind", "name"), where, table="device", error=CalibrationError)
        kind = DeviceKind.parse(
            as_str(d["kind"], "device.kind", where=where, error=CalibrationError), where=where
        )

        def opt_int(name: str) -> int | None:
            v = d.get(name)
            return (
                None
                if v is None
                else as_int(v, f"device.{name}", where=where, minimum=0, error=CalibrationError)
            )

        def opt_str(name: str) -> str | None:
            v = d.get(name)
            return (
                None
                if v is None
                else as_str(v, f"device.{name}", where=where, error=CalibrationError)
            )

        return cls(
            kind=kind,
            name=as_str(d["name"], "device.name", where=where, error=CalibrationError),
            gpu_model=opt_str("gpu_model"),
            memory_bytes=opt_int("memory_bytes"),
            cores=opt_int("cores"),
            count=as_int(
                d.get("count", 1), "device.count", where=where, minimum=1, error=CalibrationError
            ),
            compute_capability=opt_str("compute_capability"),
        )


def t_coverage_factor(sigmas: float, dof: int | None) -> float:
    """How many standard errors the interval with the two-sided coverage of ``sigmas`` normal
    standard errors spans when the standard error is estimated from ``dof`` residual degrees of
    freedom: Student's t quantile ``t_dof(Phi(sigmas))``. A least-squares standard error
    ``s sqrt(c_rr)`` (``s^2 = sum r^2 / (n - p)``) is read with ``t_{n-p}``, not the normal
    (Seber & Wild 2003, *Nonlinear Regression*, section 5.1: the linearised interval
    ``theta_r +- t_{n-p}^{alpha/2} s c_rr^{1/2}``; the linear case, section 2.1). ``dof``
    ``None``: ``sigmas`` (the normal reading); ``dof < 1``: ``inf`` (no residual to estimate
    the error from).

    >>> round(t_coverage_factor(1.96, 10), 2), t_coverage_factor(2.0, None)
    (2.23, 2.0)
    """
    if dof is None:
        return float(sigmas)
    if dof < 1:
        return float("inf")
    from scipy.stats import norm, t  # imported here: only interval readings need it

    return float(t.isf(norm.sf(sigmas), dof))


@dataclass(frozen=True)
class FitSummary(FlatRecord):
    """The result of one fit: parameter values with one-sigma standard errors (its JSON form:
    :class:`~perfmodel._record.FlatRecord`).

    Attributes
    ----------
    model
        Which formula was fitted (e.g. ``"t = alpha_s + bytes / bandwidth_Bps"``).
    values, stderr
        Fitted values and their standard errors (same units; ``nan`` when not identifiable).
    n_points
        Measurements used.
    rms_log_residual
        Root-mean-square of ``ln(predicted / measured)`` over the points (0.05 ~ 5% typical error).
    median_abs_error
        Median of ``|predicted / measured - 1|``.
    dof
        Residual degrees of freedom of the standard errors (points minus fitted parameters),
        ``None`` where unknown (a profile written before it was recorded): :meth:`halfwidth`
        reads the errors with Student's t of these.
    """

    model: str
    values: Mapping[str, float]
    stderr: Mapping[str, float]
    n_points: int
    rms_log_residual: float
    median_abs_error: float
    notes: str = ""
    dof: int | None = None

    def halfwidth(self, name: str, sigmas: float = 1.0) -> float:
        """Half-width of ``values[name]``'s interval with the coverage of ``sigmas`` normal
        standard errors: ``stderr[name] *`` :func:`t_coverage_factor` ``(sigmas, dof)``."""
        return float(self.stderr[name]) * t_coverage_factor(sigmas, self.dof)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str) -> FitSummary:
        as_mapping(d, "fit", where=where, error=CalibrationError)
        require_fields(d, ("model", "values", "stderr", "n_points"), where, error=CalibrationError)
        stderr = {
            k: float("nan") if v is None else v
            for k, v in as_mapping(
                d["stderr"], "stderr", where=where, error=CalibrationError
            ).items()
        }

        def stat(name: str) -> float:
            v = d.get(name)
            return (
                float("nan")
                if v is None
                else as_number(v, name, where=where, finite=False, error=CalibrationError)
            )

        return cls(
            model=as_str(d["model"], "model", where=where, error=CalibrationError),
            values=MappingProxyType(
                number_map(d["values"], "values", where=where, error=CalibrationError)
            ),
            stderr=MappingProxyType(
                number_map(stderr, "stderr", where=where, finite=False, error=CalibrationError)
            ),
            n_points=as_int(
                d["n_points"], "n_points", where=where, minimum=0, error=CalibrationError
            ),
            rms_log_residual=stat("rms_log_residual"),
            median_abs_error=stat("median_abs_error"),
            notes=as_str(d.get("notes", ""), "notes", where=where, error=CalibrationError),
            dof=None
            if d.get("dof") is None
            else as_int(d["dof"], "dof", where=where, minimum=0, error=CalibrationError),
        )


@dataclass(frozen=True)
class CalibrationProfile:
    """Everything a calibration produced for one device.

    Attributes
    ----------
    device
        The calibrated device (:class:`DeviceInfo`).
    provenance
        Where and how: ``created_utc``, ``perfmodel_version``, ``host``, ``driver_version``,
        ``cuda_version``, ``libraries`` (name -> version), ``command``.
    measurements
        Every raw measurement, in the order taken.
    fits
        Device-level fits by name (``"memory.copy"``, ``"gemm.bf16"``, ``"launch"`` ...).
    compute_params_data, link_params_data
        The fitted :class:`perfmodel.compute.ComputeParams` / :class:`perfmodel.comm.LinkParams`
        as dictionaries (``None`` when not fitted); use :attr:`compute_params` /
        :attr:`link_params` for the objects.
    complete
        False while a calibration is still running or was interrupted.
    skipped
        Benchmarks not run, with the reason (``{"collectives": "needs >= 2 GPUs"}``).
    """

    device: DeviceInfo
    provenance: Mapping[str, Any]
    measurements: tuple[Measurement, ...] = ()
    fits: Mapping[str, FitSummary] = field(default_factory=lambda: MappingProxyType({}))
    compute_params_data: Mapping[str, Any] | None = None
    link_params_data: Mapping[str, Any] | None = None
    complete: bool = False
    skipped: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    format_version: int = FORMAT_VERSION

    # -- the contract used by `perfmodel predict --calibration` ---------------------------------
    @property
    def gpu_model(self) -> str | None:
        """Catalogue name of the calibrated GPU (``None`` for a CPU profile)."""
        return self.device.gpu_model

    @cached_property
    def compute_params(self) -> ComputeParams | None:
        """The fitted :class:`perfmodel.compute.ComputeParams`, or ``None`` when not fitted."""
        if self.compute_params_data is None:
            return None
        from perfmodel.compute import ComputeParams

        return ComputeParams.from_dict(dict(self.compute_params_data))

    @property
    def sustained_gemms(self) -> bool:
        """True when this profile's GEMMs were timed as training runs them: normally
        distributed operands (``provenance["operands"] == "normal"``) held at the power limit
        for at least :data:`~perfmodel.calibration.timing.DEFAULT_SUSTAIN_S` before timing
        (``provenance["sustain_s"]``). Profiles made before issue 24 record neither."""
        from perfmodel.calibration.timing import DEFAULT_SUSTAIN_S

        prov = self.provenance
        try:
            sustain = float(prov.get("sustain_s", 0.0) or 0.0)
        except (TypeError, ValueError):
            sustain = 0.0
        return prov.get("operands") == "normal" and sustain >= DEFAULT_SUSTAIN_S

    @cached_property
    def training_compute_params(self) -> ComputeParams | None:
        """:attr:`compute_params` for predicting sustained training (``--calibration``).

        A profile whose GEMMs were bursts on low-entropy data (not :attr:`sustained_gemms`)
        overstates what a training step sustains: its fitted achievable peak of a tensor-core
        dtype is capped at the catalogue's sustained rate for this GPU
        (:meth:`perfmodel.hardware.GPUSpec.gemm_ceiling`), where the catalogue has one. The
        shipped H100 profile (uniform [0.5, 1.5) operands, 50-repeat bursts) fits 897.6
        TFLOP/s BF16 (862.7 before the smooth GEMM roofline of issue 24); the H100's sustained BF16 rate is 755 (the H200's MSMF at 700 W), so
        predictions with it use 755. Its other fits (memory, launch, attention, convolution,
        alignment) are kept. The profile's own validation (``perfmodel validate --measurements``)
        still uses :attr:`compute_params`: it judges the bursts it measured.
        """
        cp = self.compute_params
        if cp is None or self.sustained_gemms or not self.device.gpu_model:
            return cp
        from perfmodel.hardware import get_gpu

        try:
            gpu = get_gpu(self.device.gpu_model, where="profile device.gpu_model")
        except UnknownHardwareError:
            return cp
        peaks = dict(cp.peak_flops)
        capped = []
        for dtype, peak in cp.peak_flops.items():
            c = gpu.gemm_ceiling(dtype) if cp.uses_tensor_cores(dtype) else None
            if c is not None and c.flops < peak * cp.gemm_ceiling(dtype):
                peaks[dtype] = c.flops / cp.gemm_ceiling(dtype)
                capped.append(f"{dtype.value} {peak / 1e12:.1f}->{c.flops / 1e12:.1f}")
        if not capped:
            return cp
        return replace(
            cp,
            peak_flops=peaks,
            source=f"{cp.source}; burst GEMM peaks capped at the catalogue's sustained rates "
            f"({', '.join(capped)} TFLOP/s)",
        )

    @cached_property
    def link_params(self) -> LinkParams | None:
        """The fitted :class:`perfmodel.comm.LinkParams`, or ``None`` when not fitted."""
        if self.link_params_data is None:
            return None
        from perfmodel.comm import LinkParams

        return LinkParams.from_dict(dict(self.link_params_data))

    def device_spec(self) -> GPUSpec:
        """The :class:`~perfmodel.hardware.GPUSpec` to predict this device with.

        A catalogued GPU returns its catalogue entry. A CPU (or an uncatalogued GPU) returns a
        spec synthesised from this profile's own fits: the peak rate per dtype is the fitted
        asymptotic GEMM rate (``fits["gemm.<dtype>"].values["peak_flops"]``) and the memory
        bandwidth the fitted copy bandwidth, so that the calibrated efficiencies are relative
        to what was measured.

        Raises
        ------
        CalibrationError
            If the profile has no GEMM or memory fit to build a spec from.
        """
        from perfmodel.hardware import get_gpu

        if self.device.gpu_model:
            try:
                return get_gpu(self.device.gpu_model, where="profile device.gpu_model")
            except UnknownHardwareError:
                pass
        return synthesize_spec(self)

    # -- helpers --------------------------------------------------------------------------------
    def measurements_of(self, *kinds: BenchKind) -> list[Measurement]:
        wanted = set(kinds)
        return [m for m in self.measurements if m.kind in wanted]

    @property
    def measured_keys(self) -> frozenset[str]:
        return frozenset(m.key for m in self.measurements)

    def with_measurements(self, new: Sequence[Measurement]) -> CalibrationProfile:
        """A copy with ``new`` appended (a key already present is replaced by the new one)."""
        keys = {m.key for m in new}
        kept = tuple(m for m in self.measurements if m.key not in keys)
        return replace(self, measurements=kept + tuple(new))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "kind": PROFILE_KIND,
            "device": self.device.to_dict(),
            "provenance": dict(self.provenance),
            "status": {"complete": self.complete, "skipped": dict(self.skipped)},
            "fits": {k: v.to_dict() for k, v in self.fits.items()},
            "compute_params": None
            if self.compute_params_data is None
            else dict(self.compute_params_data),
            "link_params": None if self.link_params_data is None else dict(self.link_params_data),
            "measurements": [m.to_dict() for m in self.measurements],
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the profile as JSON, atomically (never a half-written file at ``path``).

        The file gets ordinary permissions (``0o666`` minus the umask), not the private mode of
        the temporary file it was written through.
        """
        check_finite(self, where=str(path))
        write_json_atomic(path, self.to_dict())
        _public_mode(path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "profile") -> CalibrationProfile:
        """Read a profile dictionary, checking the format version and the required fields.

        Raises
        ------
        CalibrationError
            Naming the missing field, or the newer ``format_version``.

        Warns
        -----
        UserWarning
            For unknown top-level fields (kept for forward compatibility, but ignored).
        """
        if not isinstance(data, Mapping):
            raise CalibrationError(
                f"{where}: a profile must be a JSON object", value=type(data).__name__, where=where
            )
        if "format_version" not in data:
            raise CalibrationError(
                f"{where}: missing field 'format_version' (is this a perfmodel calibration profile?)",
                value="format_version",
                where=where,
            )
        try:
            version = int(data["format_version"])
        except (TypeError, ValueError) as exc:
            raise CalibrationError(
                f"{where}: format_version {data['format_version']!r} is not an integer",
                value=data["format_version"],
                where=where,
            ) from exc
        if version > FORMAT_VERSION:
            raise CalibrationError(
                f"{where}: format_version {version} is newer than this perfmodel reads "
                f"({FORMAT_VERSION}); upgrade perfmodel",
                value=version,
                where=where,
            )
        if version < 1:
            raise CalibrationError(
                f"{where}: format_version {version} is not valid",
                value=version,
                where=where,
            )
        require_fields(data, _REQUIRED_TOP, where, error=CalibrationError)
        for name in sorted(set(data) - _KNOWN_TOP):
            warnings.warn(
                f"{where}: unknown field {name!r} ignored (written by another perfmodel version?)",
                UserWarning,
                stacklevel=3,
            )
        if data.get("kind", PROFILE_KIND) != PROFILE_KIND:
            raise CalibrationError(
                f"{where}: field 'kind' is {data['kind']!r}, expected {PROFILE_KIND!r}",
                value=data["kind"],
                where=where,
            )
        device = DeviceInfo.from_dict(data["device"], where=where)
        raw = as_list(data["measurements"], "measurements", where=where, error=CalibrationError)
        measurements = tuple(
            Measurement.from_dict(m, where=f"{where}: measurements[{i}]") for i, m in enumerate(raw)
        )
        status = as_mapping(data.get("status") or {}, "status", where=where, error=CalibrationError)
        fits = {
            name: FitSummary.from_dict(f, where=f"{where}: fits.{name}")
            for name, f in as_mapping(
                data.get("fits") or {}, "fits", where=where, error=CalibrationError
            ).items()
        }
        profile = cls(
            device=device,
            provenance=MappingProxyType(
                dict(
                    as_mapping(
                        data["provenance"], "provenance", where=where, error=CalibrationError
                    )
                )
            ),
            measurements=measurements,
            fits=MappingProxyType(fits),
            compute_params_data=_optional_table(data, "compute_params", where),
            link_params_data=_optional_table(data, "link_params", where),
            complete=as_bool(
                status.get("complete", False),
                "status.complete",
                where=where,
                error=CalibrationError,
            ),
            skipped=MappingProxyType(
                dict(
                    as_mapping(
                        status.get("skipped", {}),
                        "status.skipped",
                        where=where,
                        error=CalibrationError,
                    )
                )
            ),
            format_version=version,
        )
        # parse now (cached on the instance): a bad field is a load error
        for name in ("compute_params", "link_params"):
            try:
                getattr(profile, name)
            except PerfModelError:
                raise
            except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
                raise CalibrationError(
                    f"{where}: {name}: {type(exc).__name__}: {exc}",
                    value=data.get(name),
                    where=f"{where}:{name}",
                ) from exc
        return profile


def _optional_table(data: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any] | None:
    v = data.get(name)
    return None if v is None else as_mapping(v, name, where=where, error=CalibrationError)


def check_finite(profile: CalibrationProfile, *, where: str) -> None:
    """Refuse a profile holding a non-finite measured time or fitted value before it is written.

    Such a file would be refused by every reader (:meth:`Measurement.from_dict`), so writing it
    over a good profile would destroy the good one. Standard errors and residual statistics may
    be ``nan`` (a parameter the data does not identify).
    """
    for m in profile.measurements:
        d = m.to_dict()  # the numbers as the file would hold them
        for name in NUMBER_FIELDS:
            v = d[name]
            if v is not None and not math.isfinite(v):
                raise CalibrationError(
                    f"{where}: measurement {m.key!r} ({m.notes or m.backend}): {name} is {v}; "
                    "refusing to write a non-finite measurement",
                    value=v,
                    where=where,
                )
    for fname, fit in profile.fits.items():
        for k, v in fit.values.items():
            if not math.isfinite(v):
                raise CalibrationError(
                    f"{where}: fit {fname}: {k} is {v}; refusing to write a non-finite fit",
                    value=v,
                    where=where,
                )


def _public_mode(path: str | os.PathLike[str]) -> None:
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(path, 0o666 & ~umask)
    except OSError:  # pragma: no cover - e.g. a file system without permissions
        pass


def read_profile(path: str | os.PathLike[str]) -> CalibrationProfile:
    """Read a profile file without any device check (see :func:`load_profile`)."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise CalibrationError(f"calibration profile not found: {p}", value=str(p), where=str(p))
    data = parse_json(read_text(p), p, error=CalibrationError)
    return CalibrationProfile.from_dict(data, where=str(p))


def load_profile(
    path: str | os.PathLike[str],
    gpu: str | GPUSpec | None = None,
    allow_other_device: bool = False,
) -> CalibrationProfile:
    """Load a calibration profile for use in predictions.

    Parameters
    ----------
    path
        The profile JSON file.
    gpu
        The GPU the prediction is for (catalogue name, alias or spec). When given and the profile
        was measured on another GPU model (or on a CPU), the profile is refused.
    allow_other_device
        Use the profile anyway (a warning names both devices). Efficiencies measured on one GPU
        transfer only approximately to another.

    Raises
    ------
    CalibrationError
        File missing or unreadable, a missing field, a newer format, an incomplete profile with no
        fitted parameters, or another device (unless allowed).
    """
    profile = read_profile(path)
    if not profile.complete:
        warnings.warn(
            f"{path}: calibration did not finish (status.complete is false); "
            f"using the {len(profile.measurements)} measurements it has",
            UserWarning,
            stacklevel=2,
        )
    if gpu is not None:
        from perfmodel.hardware import get_gpu

        wanted = get_gpu(gpu, where="gpu").name
        have = profile.device.gpu_model
        if have != wanted:
            measured = have or f"{profile.device.kind.value} {profile.device.name!r}"
            msg = (
                f"{path}: profile was measured on {measured}, not on {wanted} "
                f"(field device.gpu_model)"
            )
            if not allow_other_device:
                raise CalibrationError(
                    msg + "; on the command line, predict the profiled device itself with "
                    "`--system calibrated --calibration FILE`, or run `perfmodel calibrate` on "
                    f"the {wanted}; from Python, load_profile(..., allow_other_device=True) "
                    "uses it anyway",
                    value=have,
                    where=str(path),
                )
            warnings.warn(msg + "; used anyway as asked", UserWarning, stacklevel=2)
    return profile


def synthesize_spec(profile: CalibrationProfile) -> GPUSpec:
    """Build a :class:`GPUSpec` for an uncatalogued device (a CPU) from the profile's own fits.

    Peak FLOP/s per dtype: ``fits["gemm.<dtype>"].values["peak_flops"]`` (else the best measured
    GEMM rate of that dtype); memory bandwidth: ``fits["memory.copy"].values["bandwidth_Bps"]``
    (else the best measured copy/elementwise rate). ``sm_count`` is the number of cores.
    """
    from perfmodel.dtypes import DType
    from perfmodel.hardware import GPUSpec

    peaks: dict[DType, float] = {}
    for name, fit in profile.fits.items():
        if name.startswith("gemm.") and "peak_flops" in fit.values:
            try:
                peaks[DType(name.split(".", 1)[1])] = float(fit.values["peak_flops"])
            except ValueError:
                continue
    for m in profile.measurements_of(BenchKind.GEMM):  # no fit for a dtype: its best rate
        try:
            d = DType(str(m.params.get("dtype")))
        except ValueError:
            continue
        if d not in peaks and m.achieved_flops:
            best = max(
                x.achieved_flops or 0.0
                for x in profile.measurements_of(BenchKind.GEMM)
                if x.params.get("dtype") == d.value
            )
            peaks[d] = best
    if not peaks:
        raise CalibrationError(
            "profile has no GEMM measurement or fit (fits.gemm.<dtype>) to describe the device with",
            value=profile.device.name,
            where="fits",
        )
    mem = profile.fits.get("memory.copy")
    if mem is not None and "bandwidth_Bps" in mem.values:
        bandwidth = float(mem.values["bandwidth_Bps"])
    else:
        rates = [
            m.achieved_Bps or 0.0
            for m in profile.measurements_of(BenchKind.COPY, BenchKind.ELEMENTWISE)
        ]
        if not rates or max(rates) <= 0:
            raise CalibrationError(
                "profile has no memory-bandwidth measurement or fit (fits.memory.copy)",
                value=profile.device.name,
                where="fits.memory.copy",
            )
        bandwidth = max(rates)
    return GPUSpec(
        name=f"{profile.device.kind.value}:{profile.device.name}",
        architecture="CPU" if profile.device.kind is DeviceKind.CPU else "unknown",
        form_factor="host" if profile.device.kind is DeviceKind.CPU else "unknown",
        sm_count=max(1, int(profile.device.cores or 1)),
        memory_bytes=int(profile.device.memory_bytes or 0) or 1,
        memory_bandwidth_Bps=bandwidth,
        peak_flops=MappingProxyType(peaks),
        vendor="calibrated",
        sources=MappingProxyType({"all": f"calibration profile of {profile.device.name}"}),
        notes="synthesised from a calibration profile: peaks are measured, not datasheet",
    )
