"""``perfmodel validate``: predicted vs measured, written as Markdown + PNG + JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from perfmodel.cli import _types as ty


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
    p.add_argument("-o", "--output", required=True, type=ty.output_dir("-o"), help="output folder")
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
        published = _read_jsonl(path)
    report = build_report(profile, measurements, published)
    paths = write_report(report, args.output)
    text = to_markdown(report, images=False)
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    print("## Summary" + summary.rstrip())
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; a bad line is a :class:`ConfigError` naming the file and line."""
    from perfmodel._io import read_text
    from perfmodel.errors import ConfigError

    rows = []
    for i, line in enumerate(read_text(path, where="--published").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{path}:{i}: invalid JSON: {exc}", value=line[:80], where=f"{path}:{i}"
            ) from exc
        if not isinstance(row, dict):
            raise ConfigError(
                f"{path}:{i}: expected a JSON object, got {type(row).__name__}",
                value=line[:80],
                where=f"{path}:{i}",
            )
        rows.append(row)
    return rows


def _is_profile(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(2000)
    except OSError:
        return False
    return '"format_version"' in head
