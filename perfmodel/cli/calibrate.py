"""``perfmodel calibrate``: run the microbenchmark suite and write a calibration profile."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from perfmodel.cli import _types as ty
from perfmodel.cli._common import DURATION_HELP, add_typed_arg, parse_budget
from perfmodel.units import GB


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "calibrate",
        help="measure this machine's GPU/CPU and fit a calibration profile",
        description=(
            "Run microbenchmarks (GEMM, convolution, memory, host-device copies, launch overhead, "
            "concurrent streams, real training steps) within a time budget, fit the model's "
            "parameters and write a profile JSON (written after every benchmark; --resume continues)."
        ),
    )
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="what to calibrate (default cpu)"
    )
    p.add_argument(
        "--budget",
        default="60s",
        metavar="DURATION",
        help=f"time budget of the benchmarks: {DURATION_HELP} (default 60s)",
    )
    p.add_argument(
        "-o",
        "--output",
        default="profile.json",
        type=ty.output_file("-o"),
        help="profile file to write (default profile.json)",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted profile at --output"
    )
    p.add_argument(
        "--only",
        help="comma-separated groups: launch,memory,gemm,conv,transfer,streams,collectives,steps",
    )
    p.add_argument(
        "--backend", choices=["numpy", "torch"], default="numpy", help="CPU backend (default numpy)"
    )
    p.add_argument(
        "--clock",
        choices=["wall", "process"],
        default="wall",
        help="CPU/NumPy timer: wall (default) or process CPU time (set OPENBLAS_NUM_THREADS=1; "
        "immune to other processes on shared cores)",
    )
    p.add_argument(
        "--step",
        action="append",
        metavar="MODEL:BATCH:PRECISION[:k=v,...]",
        help="training step to measure (repeatable), e.g. resnet50:128:bf16 or gpt2:8:bf16:seq_len=1024",
    )
    g = p.add_argument_group("importing existing measurements (instead of running benchmarks)")
    g.add_argument(
        "--nccl-log",
        action="append",
        metavar="FILE",
        help="nccl-tests log to import as collective measurements (repeatable); fits link alpha/beta",
    )
    g.add_argument(
        "--link",
        help="link class the logged collectives crossed: nvlink, nvswitch, pcie, infiniband, ethernet or a tech name",
    )
    g.add_argument(
        "--op", help="collective of the logs when they do not name it (allreduce, allgather ...)"
    )
    g.add_argument(
        "--system",
        help="catalogue system the logs ran on (default: guessed from their device names); the "
        "link class is then fitted through the communication model so the profile reproduces "
        "the log",
    )
    add_typed_arg(
        p, "--trace-dir", ty.output_dir, help="write the training-step profiler traces here (torch)"
    )
    g.add_argument(
        "--refit",
        metavar="PROFILE",
        help="re-fit a stored profile offline from its raw measurements with the current model "
        "(no benchmark runs) and write it to --output; the re-fit is recorded in provenance.refits",
    )
    g.add_argument("--note", default="", help="with --refit: why, recorded in provenance.refits")
    p.set_defaults(func=run)


def _git_commit() -> str | None:
    """The perfmodel source tree's git commit (``None`` outside a checkout)."""
    import subprocess
    from pathlib import Path

    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _refit(args: argparse.Namespace) -> int:
    from perfmodel.calibration.profile import read_profile
    from perfmodel.calibration.runner import refit_profile

    profile = refit_profile(read_profile(args.refit), commit=_git_commit(), note=args.note)
    profile.save(args.output)
    print(f"re-fitted {args.refit} -> {args.output}: {len(profile.measurements)} measurements")
    return 0


def run(args: argparse.Namespace) -> int:
    from perfmodel._io import output_lock

    with output_lock(args.output):  # one writer of a profile at a time
        _refuse_foreign_output(args.output)
        return _run(args)


def _refuse_foreign_output(path: str) -> None:
    """Never overwrite an existing file that is not a calibration profile (a typo in ``-o``):
    it is recognised by its ``kind`` field (or, in profiles older than that field, its
    ``format_version``) before anything is written."""
    import json
    from pathlib import Path

    from perfmodel._io import read_text
    from perfmodel.calibration.profile import PROFILE_KIND
    from perfmodel.errors import FileAccessError

    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return
    try:
        doc = json.loads(read_text(p, where="-o"))
    except (ValueError, FileAccessError):
        doc = None
    ok = isinstance(doc, dict) and doc.get(
        "kind", PROFILE_KIND if "format_version" in doc else None
    )
    if ok != PROFILE_KIND:
        raise FileAccessError(
            f'-o {p}: exists and is not a perfmodel calibration profile (no "kind": '
            f"{PROFILE_KIND!r}); refusing to overwrite it: remove it or choose another -o",
            value=str(p),
            where="-o",
        )


def _run(args: argparse.Namespace) -> int:
    from perfmodel.calibration.runner import calibrate

    if args.refit:
        return _refit(args)
    if args.nccl_log:
        return _import_nccl(args)
    budget = parse_budget(args.budget)
    groups = [g.strip() for g in args.only.split(",") if g.strip()] if args.only else None
    command = "perfmodel " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else None
    profile = calibrate(
        args.device,
        budget,
        args.output,
        resume=args.resume,
        groups=groups,
        backend=args.backend,
        clock=args.clock,
        steps=args.step,
        trace_dir=args.trace_dir,
        command=command,
        stream=sys.stderr,
    )
    print(f"wrote {args.output}: {len(profile.measurements)} measurements on {profile.device.name}")
    for name, fit in profile.fits.items():
        print(fit_summary_line(name, fit))
    if profile.skipped:
        print(f"  skipped: {len(profile.skipped)} (see status.skipped in the profile)")
    return 0


def fit_summary_line(name: str, fit: Any) -> str:
    """One fit as ``name  k=v ± err, ...``; a value no measurement constrained (its standard
    error is ``nan``: e.g. the convolution efficiency of a profile without convolution
    benchmarks) is marked ``(not fitted)`` instead of ``± nan``."""
    import math

    parts = []
    for k, v in fit.values.items():
        err = fit.stderr.get(k, float("nan"))
        if isinstance(err, float) and math.isnan(err):
            parts.append(f"{k}={_human(k, v)} (not fitted)")
        else:
            parts.append(f"{k}={_human(k, v)} ± {_human(k, err)}")
    return (
        f"  {name:<24} {', '.join(parts)}  (n={fit.n_points}, median |err| "
        f"{fit.median_abs_error:.1%})"
    )


def _human(name: str, value: float) -> str:
    if value != value:  # nan
        return "nan"
    if name.endswith("_Bps"):
        return f"{value / GB:.2f} GB/s"
    if name.endswith("_flops") or name.startswith("peak_flops"):
        return f"{value / 1e12:.3f} TFLOP/s"
    if name.endswith("_s"):
        return f"{value * 1e6:.2f} us"
    return f"{value:.4g}"


def _import_nccl(args: argparse.Namespace) -> int:
    from perfmodel.calibration.nccl import log_measurements
    from perfmodel.calibration.runner import import_into_profile
    from perfmodel.comm.nccl_tests import read_nccl_tests
    from perfmodel.errors import CalibrationError

    if not args.link:
        raise CalibrationError(
            "--nccl-log needs --link (the link class the collectives crossed)",
            value=None,
            where="--link",
        )
    from dataclasses import replace as _replace
    from types import MappingProxyType

    from perfmodel.comm.nccl_tests import guess_system

    measurements = []
    device = None
    for path in args.nccl_log:
        log = read_nccl_tests(path, op=args.op)  # read once: rows and device names
        system = getattr(args, "system", None) or guess_system(log.devices)
        for m in log_measurements(log, link_class=args.link, where=str(path)):
            if system:  # fit through the model of this system (round-trips the log)
                m = _replace(m, params=MappingProxyType({**m.params, "system": system}))
            measurements.append(m)
        device = device or (log.devices[0] if log.devices else None)
    command = "perfmodel " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    profile = import_into_profile(args.output, measurements, device_name=device, command=command)
    print(f"imported {len(measurements)} collective measurements into {args.output}")
    for name, fit in profile.fits.items():
        if name.startswith("link."):
            a, b = fit.values.get("alpha_s", 0.0), fit.values["bandwidth_Bps"]
            print(
                f"  {name}: alpha {a * 1e6:.2f} ± {fit.stderr.get('alpha_s', 0.0) * 1e6:.2f} us, "
                f"bandwidth {b / GB:.1f} ± {fit.stderr['bandwidth_Bps'] / GB:.1f} GB/s "
                f"(median |err| {fit.median_abs_error:.1%}; {fit.model.split(' (')[0]})"
            )
    return 0
