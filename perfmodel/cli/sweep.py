"""``perfmodel sweep``: evaluate a grid of scenarios in parallel, resumably.

::

    perfmodel sweep examples/sweeps/resnet50-scaling.toml -o results.jsonl --jobs 2
    perfmodel sweep SWEEP.yaml -o results.csv --backend dask --scheduler tcp://host:8786

The sweep file has a ``[base]`` scenario, ``[axes]`` (full grid) and an optional ``[zip]`` table
(lists varied together); see ``docs/compare.md``. Rows are appended to the output as they finish,
keyed by the scenario's content hash: run the same command again after an interruption and only
the missing scenarios are evaluated. Errors of single scenarios are rows with ``status=error``.
On a Dask cluster (scheduler, workers, a worker dying mid-sweep): ``docs/sweep.md``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perfmodel.cli import _types as ty
from perfmodel.cli._common import (
    FIDELITIES,
    add_documented_command,
    add_interval_arg,
    add_quiet_arg,
    add_typed_arg,
    print_json,
)


def register(subparsers: Any) -> None:
    p = add_documented_command(
        subparsers,
        "sweep",
        "evaluate a grid of scenarios in parallel, streamed and resumable",
        __doc__,
    )
    p.add_argument("spec", help="sweep file (.toml, .yaml or .json)")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=ty.output_file("-o"),  # the extension is checked by run_sweep, first
        help="results file (.jsonl or .csv)",
    )
    add_typed_arg(
        p, "--jobs", ty.jobs_int, default=1, help="worker processes (-1: all cores; default 1)"
    )
    p.add_argument("--backend", default="joblib", choices=["joblib", "dask", "serial"])
    p.add_argument(
        "--scheduler", help="dask.distributed scheduler address (default: local cluster)"
    )
    p.add_argument("--fidelity", choices=FIDELITIES, help="override the base fidelity")
    p.add_argument("--retry-errors", action="store_true", help="evaluate error rows again")
    p.add_argument("--dry-run", action="store_true", help="print the grid size and first scenario")
    add_interval_arg(
        p,
        "each row's prediction interval (default %(default)s: *_low/*_high fields, "
        "docs/intervals.md); off: none",
    )
    add_quiet_arg(p, "no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.search.sweep import SweepSpec, run_sweep
    from perfmodel.search.sweep_check import check_spec_keys

    spec = SweepSpec.from_file(args.spec)
    check_spec_keys(spec, why=predict_file_why())  # predict's file keys refused with why
    if args.fidelity:
        spec = SweepSpec(
            {**spec.base, "fidelity": args.fidelity}, spec.axes, spec.zipped, spec.source
        )
    if args.dry_run:
        from perfmodel.search.sweep_check import check_spec

        check_spec(spec)  # the run's up-front check: a dry run refuses what the run would
        first = next(spec.points(), None)
        print(f"{len(spec)} scenarios over axes {', '.join(spec.axis_names) or '(none)'}")
        if first is not None:
            print_json(first[1])
        return 0
    evaluator = None
    if args.interval is not None:
        import functools

        from perfmodel.search._eval import interval_evaluator

        evaluator = functools.partial(interval_evaluator, level=args.interval)
    summary = _with_sigterm_as_interrupt(
        lambda: run_sweep(
            spec,
            args.output,
            evaluator=evaluator,
            jobs=args.jobs,
            backend=args.backend,
            scheduler=args.scheduler,
            progress=None if args.quiet else sys.stderr,
            retry_errors=args.retry_errors,
        )
    )
    print(
        f"{summary.output}: {summary.already_done + summary.evaluated} of "
        f"{len(spec) if summary.interrupted else summary.unique} scenarios "
        f"done ({summary.evaluated} evaluated now, {summary.already_done} already there, "
        f"{summary.errors} errors) in {summary.elapsed_s:.1f} s"
        + (
            f"; {summary.total - summary.unique} duplicate grid points"
            if summary.total > summary.unique
            else ""
        )
    )
    if summary.interrupted:
        return 130
    if summary.evaluated and summary.errors == summary.evaluated and not summary.already_done:
        # rev29 item 1: a sweep none of whose rows ran failed; some error rows are its results
        print(
            f"perfmodel: error: every scenario of the sweep is an error row (their messages "
            f"are in {summary.output}); nothing ran",
            file=sys.stderr,
        )
        return 2
    return 0


def predict_file_why() -> dict[str, str]:
    """Why each key of ``predict``'s scenario file that is no scenario key (its token budget,
    output flags, ``fabric``, ``model_arg``) is refused in a sweep file: a sweep row is one
    step's prediction (``predict`` without those flags) and takes the scenario's own key names
    (:func:`perfmodel.search.sweep_check.check_spec_keys`'s ``why``)."""
    from perfmodel.cli.predict import FILE_RUN_KEYS
    from perfmodel.cli.predict_file import ALIASES, OUTPUT_KEYS, TABLES

    why = {
        key: f"predict's {flag} (its scenario file reads it too); a sweep row is one "
        "step's prediction, with no token budget or training-run estimate"
        for key, flag, _ in FILE_RUN_KEYS
    }
    why.update(
        (key, f"--{key} chooses what predict prints or writes; a sweep writes rows to -o")
        for key in OUTPUT_KEYS
    )
    why.update(
        (key, f"predict's --{key.replace('_', '-')}; the sweep's key is {to!r}")
        for key, to in (*ALIASES.items(), *TABLES.items())
    )
    return why


def _with_sigterm_as_interrupt(fn: Any) -> Any:
    """Run ``fn`` with SIGTERM (``kill PID``) handled like Ctrl-C: the sweep stops its workers,
    keeps every row written and reports how far it got, instead of dying with workers left."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return fn()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        return fn()
    finally:
        signal.signal(signal.SIGTERM, old)
