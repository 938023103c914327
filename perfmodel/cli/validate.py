"""``perfmodel validate``: predicted vs measured, written as Markdown + PNG + JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "validate",
        help="compare predictions with measurements (per layer, step, GEMM, collective)",
        description=(
            "Predict what a calibration profile's measurements (or another measurement file, or the "
            "published data) measured, with datasheet defaults, a GEMM+bandwidth calibration and the "
            "full calibration; write report.md, report.json, scatter.png and errors.png to OUTDIR."
        ),
    )
    p.add_argument(
        "--profile",
        help="calibration profile (default: --measurements, when that file is a profile)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--measurements", help="profile JSON or JSON/JSONL list of measurements")
    src.add_argument("--published", help="folder holding published.jsonl (GEMM rows are compared)")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.calibration.profile import read_profile
    from perfmodel.calibration.validate import (
        build_report,
        load_measurements,
        to_markdown,
        write_report,
    )
    from perfmodel.errors import CalibrationError

    measurements = load_measurements(args.measurements) if args.measurements else []
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
    if args.published:
        path = Path(args.published) / "published.jsonl"
        if not path.exists():
            raise CalibrationError(f"{path} not found", value=str(path), where="--published")
        published = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    report = build_report(profile, measurements, published)
    paths = write_report(report, args.output)
    text = to_markdown(report, images=False)
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    print("## Summary" + summary.rstrip())
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _is_profile(path: str) -> bool:
    try:
        with open(path) as fh:
            head = fh.read(2000)
    except OSError:
        return False
    return '"format_version"' in head
