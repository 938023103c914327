"""``perfmodel validate``: predicted vs measured, written as Markdown + PNG + JSON."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfmodel.cli import _types as ty
from perfmodel.cli._common import add_quiet_arg


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "validate",
        help="compare predictions with measurements (per layer, step, GEMM, collective)",
        description=(
            "Without --profile: `--published [DIR]` predicts every published measurement it can map "
            "(the shipped validation/ rows, or DIR/published.jsonl, DIR/modern.jsonl and DIR/scale.jsonl) and prints the README's "
            "accuracy table (about a minute). With --profile: predict what a calibration "
            "profile's measurements (or another measurement file, or the published GEMM rows) "
            "measured, with datasheet defaults, a GEMM+bandwidth calibration and the full "
            "calibration; write report.md, report.json, scatter.png and errors.png to OUTDIR."
        ),
    )
    p.add_argument(
        "--profile",
        help="calibration profile (default: --measurements, when that file is a profile)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--measurements", help="profile JSON or JSON/JSONL list of measurements")
    src.add_argument(
        "--published",
        nargs="?",
        const="",
        metavar="DIR",
        help="published measurements: the shipped copy, or DIR/published.jsonl. Alone: print the "
        "accuracy table; with --profile: compare its GEMM rows",
    )
    p.add_argument("--markdown", action="store_true", help="print the accuracy table as Markdown")
    p.add_argument(
        "--update-readme",
        metavar="README",
        help="rewrite the accuracy table between the README's accuracy-table markers, and the "
        "interval coverage table between its interval-coverage markers",
    )
    p.add_argument(
        "--update-residuals",
        nargs="?",
        const="",
        metavar="FILE",
        help="with --published: regenerate the residual record the prediction intervals read "
        "(default: residuals.jsonl beside the published rows, the shipped "
        "validation/residuals.jsonl), from the same predictions as the table",
    )
    p.add_argument(
        "-o", "--output", type=ty.output_dir("-o"), help="output folder (with --profile)"
    )
    add_quiet_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.calibration.profile import read_profile
    from perfmodel.calibration.validate import (
        build_report,
        load_measurements,
        to_markdown,
        write_report,
    )
    from perfmodel.errors import CalibrationError, ConfigError

    if args.published is not None and not args.profile and not args.measurements:
        return _accuracy_table(args)
    if args.markdown or args.update_readme or args.update_residuals is not None:
        raise ConfigError(
            "--markdown / --update-readme / --update-residuals go with --published alone (no "
            "--profile)",
            where="--markdown",
        )
    if not args.output:
        raise ConfigError("-o/--output is required with a profile", where="--output")
    measurements = load_measurements(args.measurements) if args.measurements else []
    if args.measurements and not measurements:  # not the profile's own rows in its place
        raise ConfigError(
            f"--measurements {args.measurements}: the file holds no measurements",
            value=args.measurements,
            where="--measurements",
        )
    if args.profile:
        profile = read_profile(args.profile)
    elif args.measurements and _is_profile(args.measurements):
        profile = read_profile(args.measurements)
    else:
        raise CalibrationError(
            "--profile is required (the calibration whose predictions are validated)",
            value=None,
            where="--profile",
        )
    published = None
    if args.published is not None:
        from perfmodel.accuracy import load_published

        published = load_published(args.published or None)
    report = build_report(profile, measurements, published)
    paths = write_report(report, args.output)
    text = to_markdown(report, images=False)
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    print("## Summary" + summary.rstrip())
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _accuracy_table(args: argparse.Namespace) -> int:
    """``validate --published [DIR]``: the README accuracy table from the published rows, the
    interval coverage table from the residual record (regenerated first with
    ``--update-residuals``)."""
    from perfmodel.accuracy import (
        accuracy_table,
        load_modern,
        load_published,
        load_scale,
        load_systems2026,
        replace_between_markers,
        to_markdown,
        to_text,
        training_results,
    )
    from perfmodel.intervals import coverage as cov

    readme = None
    if args.update_readme:  # checked before the minute of predictions, not after
        from perfmodel._io import read_text

        path = Path(args.update_readme)
        readme = read_text(path, where="--update-readme")  # a regular UTF-8 file, else exit 2
        replace_between_markers(readme, "", where=str(path))  # its markers are there
    record_out = _record_path(args)
    published = load_published(args.published or None)
    # the record is generated from the table's own training predictions (one minute, not two)
    training = training_results(published) if record_out is not None else None
    table = accuracy_table(
        published,
        training=training,
        modern=load_modern(args.published or None),
        scale=load_scale(args.published or None),
        systems2026=load_systems2026(args.published or None),
    )
    md = to_markdown(table)
    record = _record(args, record_out, training)
    coverage = cov.coverage_table(record)
    if readme is not None:
        from perfmodel._io import atomic_write

        updated = replace_between_markers(readme, md, where=str(path))
        written = "accuracy table"
        if cov.MARK_BEGIN in updated:  # a README without the coverage markers keeps its text
            updated = replace_between_markers(
                updated,
                cov.to_markdown(coverage),
                where=str(path),
                begin=cov.MARK_BEGIN,
                end=cov.MARK_END,
            )
            written = "accuracy and interval coverage tables"
        with atomic_write(path) as fh:  # never a half-written README
            fh.write(updated)
        print(f"{written} written to {path}")
    print(md if args.markdown else to_text(table))
    print()
    print(cov.to_markdown(coverage) if args.markdown else cov.to_text(coverage))
    return 0


def _record_path(args: argparse.Namespace) -> Path | None:
    """Where ``--update-residuals`` writes (checked writable before the predictions), or
    ``None`` without the flag."""
    if args.update_residuals is None:
        return None
    from perfmodel._io import check_output_path
    from perfmodel.accuracy import _validation_file
    from perfmodel.intervals.record import RECORD_NAME

    if args.update_residuals:
        out = Path(args.update_residuals)
    else:
        out = _validation_file(args.published or None, RECORD_NAME)
        if out.name != RECORD_NAME:
            out = out.parent / RECORD_NAME
    check_output_path(out, where="--update-residuals")
    return out


def _record(args: argparse.Namespace, out: Path | None, training: object) -> tuple:  # type: ignore[type-arg]
    """The residual record: regenerated (and written to ``out``) with ``--update-residuals``,
    else the shipped one (or DIR's)."""
    from perfmodel.intervals.record import read_record, write_record
    from perfmodel.intervals.residuals import generate

    if out is None:
        if args.published:  # DIR's own record where it has one
            from perfmodel.accuracy import _validation_file
            from perfmodel.intervals.record import RECORD_NAME

            mine = _validation_file(args.published, RECORD_NAME)
            mine = mine if mine.name == RECORD_NAME else mine.parent / RECORD_NAME
            if mine.exists():
                return read_record(mine)
        return read_record()
    rows = generate(args.published or None, training=training)
    write_record(rows, out)
    print(f"residual record written to {out} ({len(rows)} rows)")
    return rows


def _is_profile(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(2000)
    except OSError:
        return False
    return '"format_version"' in head
