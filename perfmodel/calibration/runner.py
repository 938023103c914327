"""``perfmodel calibrate`` as a function: run the suite, fit, save the profile."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

from perfmodel._schema import as_list
from perfmodel.calibration.measurement import BenchKind
from perfmodel.calibration.profile import CalibrationProfile, DeviceKind, FitSummary
from perfmodel.errors import CalibrationError, ConfigError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|sec|m|min|h)?\s*$", re.IGNORECASE)


def parse_duration(text: str, *, where: str = "--budget") -> float:
    """``"60s"``, ``"5m"``, ``"1.5h"``, ``"300"`` (seconds) -> seconds.

    >>> parse_duration("5m")
    300.0
    """
    m = _DURATION.match(str(text))
    if not m:
        raise ConfigError(
            f"cannot read {where} {text!r}: expected e.g. 60s, 5m, 1h", value=text, where=where
        )
    value = (
        float(m.group(1))
        * {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[
            (m.group(2) or "s").lower()
        ]
    )
    if value <= 0:
        raise ConfigError(f"{where} must be positive, got {text!r}", value=text, where=where)
    return value


def _host_dispatch(profile: CalibrationProfile, gpu: Any, fits: dict[str, Any]) -> float:
    """``ComputeParams.host_dispatch_s`` of a profile (host seconds per kernel of a step).

    Torch (GPU) profiles: the profile's own eager host fit over its host-bound training steps
    (:func:`perfmodel.calibration.host.fit_eager_host`, stored as ``fits["host.eager_step"]``)
    when it has at least :data:`~perfmodel.calibration.host.MIN_HOST_BOUND_STEPS` of them, else
    ``HOST_DISPATCH_S["pytorch-eager"]``: the bare eager launch (``fits["launch.eager"]``) is a
    lower bound of a training op's host cost. Other backends (NumPy on the CPU): their own
    measured eager launch if any, else 0 (dispatch is part of their fitted launch cost).
    """
    from perfmodel.calibration.host import (
        MIN_HOST_BOUND_STEPS,
        fit_eager_host,
        host_fit_summary,
    )
    from perfmodel.compute.params import HOST_DISPATCH_S

    backend = str(profile.provenance.get("backend", ""))
    eager = fits.get("launch.eager")
    if not backend.startswith("torch"):
        return float(eager.values["launch_s"]) if eager is not None else 0.0
    try:
        fit = fit_eager_host(profile.measurements, gpu)
    except (CalibrationError, ConfigError):
        fit = None
    if fit is not None and len(fit.points) >= MIN_HOST_BOUND_STEPS:
        fits["host.eager_step"] = host_fit_summary(fit)
        return float(fit.per_kernel_s)
    fits.pop("host.eager_step", None)
    return float(HOST_DISPATCH_S["pytorch-eager"])


def finish_profile(profile: CalibrationProfile) -> CalibrationProfile:
    """Fit everything the measurements allow and return the profile with the fits.

    Device fits always (:func:`~perfmodel.calibration.fit.fit_device`); ``ComputeParams`` when
    :mod:`perfmodel.compute` provides them (fitted on the microbenchmarks only: training steps
    are kept out of the fit so that they can validate it), starting from the current datasheet
    defaults (tile menus included). ``ComputeParams.host_dispatch_s`` follows
    :func:`_host_dispatch`. A fit that cannot run is recorded in ``status.skipped`` with the
    reason.
    """
    # numpy and the fits on first use: parse_duration's readers (compare --budget) need neither
    from perfmodel.calibration.fit import fit_compute_params, fit_device

    fits = dict(profile.fits)
    fits.update(fit_device(profile))
    skipped = dict(profile.skipped)
    profile = replace(profile, fits=MappingProxyType(fits))
    compute_data = profile.compute_params_data
    host: float | None = None
    try:
        gpu = profile.device_spec()
        host = _host_dispatch(profile, gpu, fits)  # also for profiles of training steps only
        params, result = fit_compute_params(
            profile.measurements, gpu, base=base_compute_params(profile, gpu)
        )
        params = replace(params, host_dispatch_s=host)
        compute_data = params.to_dict()
        fits["compute"] = result.summary(
            "ComputeModel(gpu, params).layer_time(layer) (fwd, or fwd+bwd for attention) vs GEMM/conv/attention/memory/launch microbenchmarks",
            notes=f"gpu spec {gpu.name}; fields with nan stderr are not identifiable from these data",
        )
        skipped.pop("fit.compute", None)
    except ImportError as exc:
        skipped["fit.compute"] = f"perfmodel.compute not available: {exc}"
    except CalibrationError as exc:
        skipped["fit.compute"] = f"not fitted: {exc}"
    link_data = profile.link_params_data
    if profile.measurements_of(BenchKind.COLLECTIVE):
        try:
            from perfmodel.calibration.nccl import fit_link_params

            link_params, link_fits = fit_link_params(profile.measurements_of(BenchKind.COLLECTIVE))
            link_data = link_params.to_dict()
            fits.update(link_fits)
        except ImportError as exc:
            skipped["fit.links"] = f"perfmodel.comm not available: {exc}"
        except CalibrationError as exc:
            skipped["fit.links"] = f"not fitted: {exc}"
    return replace(
        profile,
        fits=MappingProxyType(fits),
        compute_params_data=compute_data,
        link_params_data=link_data,
        skipped=MappingProxyType(skipped),
    )


def refit_profile(
    profile: CalibrationProfile, *, commit: str | None = None, note: str = ""
) -> CalibrationProfile:
    """Re-fit a stored profile offline from its raw measurements with the current model.

    No benchmark runs: :func:`finish_profile` on the stored measurements. The previous fitted
    ``ComputeParams`` are replaced (the fit starts from the current defaults, so menus the model
    changed since the run, such as the SIMT tile menu, are the current ones), and the re-fit is
    appended to ``provenance["refits"]``: UTC time, perfmodel version and ``commit``, how many
    measurements, the fitted fields and ``note``.
    """
    import datetime

    from perfmodel import __version__ as version
    from perfmodel.calibration.fit import DEFAULT_COMPUTE_FIELDS

    out = finish_profile(profile)
    prov = dict(out.provenance)
    refits = as_list(  # absent or null: no earlier re-fit
        prov.get("refits") or [],
        "provenance.refits",
        where="calibration profile",
        error=ConfigError,
    )
    refits.append(
        {
            "refitted_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "perfmodel_version": version,
            "perfmodel_commit": commit or "unknown",
            "from": f"the profile's {len(profile.measurements)} stored raw measurements "
            f"(measured {prov.get('created_utc', '?')}); no benchmark re-run",
            "fields": [*DEFAULT_COMPUTE_FIELDS, "peak_flops.<dtype>"],
            "host_dispatch_s": "fits['host.eager_step'] (this profile's host-bound steps)"
            if "host.eager_step" in out.fits
            else "HOST_DISPATCH_S['pytorch-eager'] (fewer than 3 host-bound steps; the bare "
            "launch fits['launch.eager'] is a lower bound)"
            if str(prov.get("backend", "")).startswith("torch")
            else "the device's own launch fit",
            "note": note,
        }
    )
    prov["refits"] = refits
    return replace(out, provenance=MappingProxyType(prov))


def base_compute_params(profile: CalibrationProfile, gpu: Any) -> Any:
    """Starting ``ComputeParams`` for a fit: the datasheet defaults of a GPU; for a CPU, a plain
    roofline (one 1x1 "tile" on one "SM", no ``k`` overhead), since GPU tile and wave
    quantisation do not describe a CPU BLAS."""
    from perfmodel.compute import ComputeParams, Tile

    base = ComputeParams.for_gpu(gpu)
    # a profile fitted with an explicit k_overhead (the constant 64 before Hopper FP8 GEMMs
    # paid their output store, ComputeParams.k_overhead_for) keeps it: a refit reproduces it
    stored = (profile.compute_params_data or {}).get("k_overhead")
    if stored is not None:
        base = replace(base, k_overhead=float(stored))
    if profile.device.kind is DeviceKind.CPU:
        base = replace(
            base,
            sm_count=1,
            k_overhead=0,
            cuda_core_tiles=(Tile(1, 1, 1.0, 1),),
            tensor_core_tiles=(Tile(1, 1, 1.0, 1),),
            source="CPU roofline (no tile/wave quantisation)",
        )
    return base


def import_into_profile(
    out_path: str | Path,
    measurements: Sequence[Any],
    *,
    device_name: str | None = None,
    command: str | None = None,
) -> CalibrationProfile:
    """Add imported measurements (nccl-tests, traces) to the profile at ``out_path`` and refit.

    A missing profile is created for the device the log names (``device_name``); an existing one
    keeps its device, provenance and measurements (same keys are replaced).
    """
    from perfmodel.calibration.backends import base_provenance, resolve_gpu_model
    from perfmodel.calibration.profile import DeviceInfo, read_profile

    out = Path(out_path)
    if out.exists():
        profile = read_profile(out)
    else:
        if not device_name:
            raise CalibrationError(
                f"{out} does not exist and the import names no device to create it for",
                value=str(out),
                where=str(out),
            )
        prov = base_provenance(command)
        prov["backend"] = "import"
        profile = CalibrationProfile(
            device=DeviceInfo(DeviceKind.CUDA, device_name, resolve_gpu_model(device_name, None)),
            provenance=MappingProxyType(prov),
        )
    prov = dict(profile.provenance)
    prov.setdefault("imports", [])
    prov["imports"] = [*prov["imports"], command or "import"]
    profile = replace(
        profile.with_measurements(list(measurements)), provenance=MappingProxyType(prov)
    )
    profile = replace(finish_profile(profile), complete=True)
    profile.save(out)
    return profile


def calibrate(
    device: str = "cpu",
    budget_s: float = 60.0,
    out_path: str | Path = "profile.json",
    *,
    resume: bool = False,
    groups: Sequence[str] | None = None,
    backend: str = "numpy",
    clock: str = "wall",
    steps: Sequence[str] | None = None,
    trace_dir: str | Path | None = None,
    command: str | None = None,
    stream: TextIO | None = None,
    stop_after: int | None = None,
) -> CalibrationProfile:
    """Run the microbenchmark suite on ``device`` within ``budget_s`` and write ``out_path``.

    Parameters
    ----------
    device
        ``"cpu"`` or ``"cuda"``.
    budget_s
        Wall-clock budget for the measurements, seconds (the fits afterwards take a few seconds).
    resume
        Continue an interrupted profile at ``out_path`` (same device), measuring only what is missing.
    groups
        Restrict to some of ``launch, memory, gemm, conv, transfer, streams, steps``.
    backend
        CPU only: ``"numpy"`` (default) or ``"torch"``.
    clock
        CPU with NumPy only: ``"wall"`` (default) or ``"process"`` (CPU time of this process:
        immune to other processes on shared cores; only meaningful with one BLAS thread).
    steps
        Training steps to measure as ``MODEL:BATCH:PRECISION[:key=value,...]`` (default: ResNet-50
        and GPT-2 on a GPU, a NumPy MLP on the CPU).
    trace_dir
        Where training-step profiler traces are written (torch backends).
    """
    from perfmodel.calibration.backends import make_backend
    from perfmodel.calibration.suite import Progress, parse_step, plan_suite, run_suite

    be = make_backend(device, prefer=backend, clock=clock)
    specs = [parse_step(s) for s in steps] if steps else None
    items = plan_suite(
        be, groups=groups, steps=specs, trace_dir=Path(trace_dir) if trace_dir else None
    )
    progress = Progress(len(items), budget_s, stream)
    return run_suite(
        be,
        items,
        budget_s=budget_s,
        out_path=out_path,
        resume=resume,
        command=command,
        progress=progress,
        finish=finish_profile,
        stop_after=stop_after,
    )


__all__ = ["FitSummary", "calibrate", "finish_profile", "parse_duration"]
