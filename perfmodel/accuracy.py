"""The accuracy table: predicted vs published measurements, grouped as the README shows them.

The published rows ship with the package (``validation/`` in the repository, installed as
``perfmodel.catalogue.validation``; see its README). This module holds what the validation tier
(``tests/validation/``) and ``perfmodel validate --published`` share: the mapping of a published
training row to a :class:`perfmodel.api.Scenario` (:mod:`perfmodel.accuracy_map`, its names
imported here; every row that does not state enough is skipped with its reason), the vTrain
plan-ranking scenarios, and :func:`accuracy_table`, whose rows are the README's accuracy table
(generated between the ``accuracy-table`` markers by ``perfmodel validate --published
--update-readme README.md``).

With the ``modern.jsonl`` rows (:func:`load_modern`) the table also holds today's large-model
stacks, mapped and predicted by :mod:`perfmodel.accuracy_modern`.

Errors are signed, ``predicted / measured - 1`` of the row's own quantity; the table reports the
median and the worst absolute error. Single-GPU compute and collective rows are mapped by
:mod:`perfmodel.compute.validation` and :mod:`perfmodel.comm.validation`.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.accuracy_map import (
    FIT_ROWS,
    Mapped,
    _group_key,
    assumed_precision,
    map_row,
    predicted_value,
)
from perfmodel.errors import ConfigError, PerfModelError

# --------------------------------------------------------------------------- training rows


@dataclass(frozen=True)
class TrainingResults:
    """Mapped training rows with their prediction, plus the skipped and failed rows.

    ``mapped`` holds ``(Mapped, predicted, measured, StepReport)``, values in SI units.
    """

    mapped: tuple[tuple[Mapped, float, float, Any], ...]
    skipped: Mapping[str, str]
    failed: Mapping[str, str]

    def judged(self) -> list[tuple[Mapped, float, float, Any]]:
        """Rows that count: not a fit row, precision stated."""
        return [
            x
            for x in self.mapped
            if x[0].row["id"] not in FIT_ROWS and not assumed_precision(x[0].row)
        ]


def training_results(rows: Iterable[Mapping[str, Any]]) -> TrainingResults:
    """Predict every ``training_scaling`` row that :func:`map_row` maps (analytic executor)."""
    mapped, skipped, failed = [], {}, {}
    for row in rows:
        if row.get("kind") != "training_scaling":
            continue
        m = map_row(dict(row))
        if isinstance(m, str):
            skipped[row["id"]] = m
            continue
        try:
            pred, rep = predicted_value(m)
        except PerfModelError as exc:
            failed[row["id"]] = str(exc)[:120]
            continue
        meas = float(row["value"]) * m.unit_scale
        mapped.append((m, pred, meas, rep))
    return TrainingResults(tuple(mapped), skipped, failed)


@dataclass(frozen=True)
class EfficiencyPoint:
    """Scaling efficiency ``throughput(n) / (n throughput(1))`` of one published table row."""

    group: tuple[Any, ...]
    gpus: int
    measured: float
    predicted: float

    @property
    def error_points(self) -> float:
        """``100 (predicted - measured)``, percentage points."""
        return 100.0 * (self.predicted - self.measured)


def scaling_efficiency_points(results: TrainingResults) -> list[EfficiencyPoint]:
    """Efficiency of every multi-GPU judged throughput row whose table has a 1-GPU row."""
    groups: dict[tuple[Any, ...], dict[int, tuple[float, float]]] = {}
    for m, pred, meas, _ in results.judged():
        if m.metric not in ("throughput", "tokens"):
            continue
        groups.setdefault(_group_key(m.row), {})[int(m.row["hardware"]["gpus"])] = (pred, meas)
    out = []
    for key, pts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if 1 not in pts or len(pts) < 2:
            continue
        p1, m1 = pts[1]
        for n in sorted(pts):
            if n > 1:
                out.append(EfficiencyPoint(key, n, pts[n][1] / (n * m1), pts[n][0] / (n * p1)))
    return out


# --------------------------------------------------------------------------- plan ranking

_VTRAIN_MODEL = re.compile(r"GPT \(h=(\d+), heads=(\d+), layers=(\d+), seq (\d+)\)")


def vtrain_ranking_scenarios(
    rows: Iterable[Mapping[str, Any]],
) -> tuple[list[tuple[Mapping[str, Any], dict[str, Any]]], dict[str, int]]:
    """vTrain single-node rows as scenario dicts (fp16 assumed: vTrain states no precision).

    Returns ``([(row, scenario dict)], {skip reason: count})``.
    """
    out = []
    skipped: dict[str, int] = defaultdict(int)
    for r in rows:
        if not r["id"].startswith("vtrain-single") or r["kind"] != "training_scaling":
            continue
        m = _VTRAIN_MODEL.match(r["model"])
        plan = r["plan"]
        if (
            not m
            or r.get("unit") != "ms"
            or None in (plan.get("dp"), plan.get("tp"), plan.get("pp"))
        ):
            skipped["model, unit or plan not stated"] += 1
            continue
        h, a, layers, s = map(int, m.groups())
        sc = {
            "system": "dgx-a100",
            "model": "gpt",
            "model_args": {"hidden": h, "heads": a, "layers": layers, "seq_len": s},
            "precision": "fp16",
            "optimizer": "adam",
            "software": "megatron",
            "gpus": int(r["hardware"]["gpus"]),
            "dp": int(plan["dp"]),
            "tp": int(plan["tp"]),
            "pp": int(plan["pp"]),
            "microbatch": int(r["batch"]["per_gpu"]),
            "global_batch": int(r["batch"]["global"]),
        }
        out.append((r, sc))
    return out, dict(skipped)


@dataclass(frozen=True)
class RankingResult:
    """Kendall tau of predicted vs measured iteration times of vTrain's plans."""

    rows: int
    groups: int
    plans: int
    weighted_tau: float
    pooled_tau: float


def vtrain_ranking(rows: Iterable[Mapping[str, Any]]) -> RankingResult:
    """Analytic predictions of the vTrain plans, ranked within each (model, batch, GPUs) job."""
    from perfmodel.search._eval import analytic_evaluator
    from perfmodel.search.ranking import group_ranking, kendall_tau

    pairs, _ = vtrain_ranking_scenarios(rows)
    preds = []
    for r, sc in pairs:
        try:
            t = analytic_evaluator(sc)["iteration_time_s"]
        except PerfModelError:
            continue
        preds.append(
            {
                "group": (r["model"], sc["global_batch"], sc["gpus"]),
                "measured": float(r["value"]) / 1e3,
                "analytic": float(t),
            }
        )
    s = group_ranking(
        preds,
        group_key="group",
        predicted_key="analytic",
        measured_key="measured",
        k=3,
        min_plans=3,
    )
    pooled = kendall_tau([p["analytic"] for p in preds], [p["measured"] for p in preds])
    return RankingResult(
        len(preds), len(s.groups), sum(g.n for g in s.groups), s.weighted_tau, pooled
    )


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class AccuracyRow:
    """One line of the README accuracy table.

    ``median`` and ``worst`` are fractions (``0.138`` is 13.8 %), or points for the scaling
    efficiency (``unit="points"``); ``target`` is the project's target in the same unit (``None``
    when there is none).
    """

    what: str
    rows: int
    median: float
    worst: float | None
    target: float | None
    unit: str = "%"
    text: str = ""  # a free-form value (the ranking row)
    signed: float | None = None
    """Median of the rows' errors signed by speed (:func:`speed_signed`: ``+0.05`` = predicted
    5 % too fast, whether the row states a rate or a time), in ``unit`` (points for the scaling
    efficiency, predicted minus measured); ``None`` where there is none (the ranking row)."""

    @property
    def meets_target(self) -> bool | None:
        return None if self.target is None else self.median < self.target


@dataclass(frozen=True)
class AccuracyTable:
    rows: tuple[AccuracyRow, ...]
    training_by_interconnect: tuple[tuple[str, int, float, float], ...]  # class, n, median, worst


def _validation_file(directory: str | Path | None, name: str) -> Path:
    """``name`` in ``directory`` (default: the shipped copy); a file path stands for its own."""
    from perfmodel.catalogue import validation_dir

    path = Path(directory) if directory is not None else validation_dir()
    return path / name if path.is_dir() else path


def load_published(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``published.jsonl`` in ``directory`` (default: the shipped copy)."""
    from perfmodel._io import read_jsonl

    return read_jsonl(_validation_file(directory, "published.jsonl"), where="--published")


def load_modern(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``modern.jsonl`` in ``directory`` (default: the shipped copy).

    ``directory`` may also be a ``published.jsonl`` path: its sibling ``modern.jsonl`` is read.
    A directory without ``modern.jsonl`` gives no rows (the table then leaves its rows out).
    """
    from perfmodel.catalogue import validation_rows

    return validation_rows(directory, "modern.jsonl")


def load_scale(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``scale.jsonl`` in ``directory`` (default: the shipped copy); a
    ``published.jsonl`` path reads its sibling; a directory without the file gives no rows."""
    from perfmodel.catalogue import validation_rows

    return validation_rows(directory, "scale.jsonl")


def load_systems2026(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``systems2026.jsonl`` in ``directory`` (default: the shipped copy); a
    ``published.jsonl`` path reads its sibling; a directory without the file gives no rows
    (:func:`perfmodel.accuracy_2026.load_rows`)."""
    from perfmodel.accuracy_2026 import load_rows

    return load_rows(directory)


def _median_worst(errs: Sequence[float]) -> tuple[float, float]:
    a = [abs(e) for e in errs]
    return statistics.median(a), max(errs, key=abs)


#: Orientation of each metric the validation mappings use: ``+1`` for a rate (higher is
#: faster), ``-1`` for a time (one table for the accuracy table's signed median,
#: :func:`speed_signed`, and the residual record,
#: :attr:`perfmodel.intervals.record.ResidualRow.orientation`).
METRIC_ORIENTATION: Mapping[str, int] = {
    "throughput": 1,
    "tokens": 1,
    "tflops": 1,
    "busbw": 1,
    "rate": 1,
    "iteration": -1,
    "epoch": -1,
    "time": -1,
}


def speed_signed(error: float, orientation: int) -> float:
    """A row's error ``predicted / measured - 1`` signed by speed: as it is for a rate
    (``orientation`` +1), negated for a time (-1), so positive always means predicted too fast
    (issue 24's optimism) and the magnitude is the row's own error (the table's median absolute
    error column).

    >>> speed_signed(0.25, 1), speed_signed(0.25, -1)
    (0.25, -0.25)
    """
    return orientation * error


def _unit_orientation(unit: str) -> int:
    """``-1`` for a time unit (``s``, ``ms``, ``us``), ``+1`` for a rate."""
    return -1 if unit.strip().lower() in ("s", "ms", "us", "µs") else 1


def _signed_median(errs: Sequence[float], orientations: Sequence[int]) -> float:
    """Median of :func:`speed_signed` over rows."""
    return statistics.median(speed_signed(e, o) for e, o in zip(errs, orientations, strict=True))


def accuracy_table(
    rows: Sequence[Mapping[str, Any]],
    *,
    training: TrainingResults | None = None,
    modern: Sequence[Mapping[str, Any]] = (),
    scale: Sequence[Mapping[str, Any]] = (),
    systems2026: Sequence[Mapping[str, Any]] = (),
) -> AccuracyTable:
    """The README accuracy table computed from published rows (about a minute on 2 cores).

    ``training`` reuses :func:`training_results` of the same rows (the validation tier's).
    ``modern`` are the ``modern.jsonl`` rows (:func:`load_modern`): with them the table gains
    today's dense stacks and the MoE / context-parallel rows (:mod:`perfmodel.accuracy_modern`,
    a few seconds more); without them those two rows are left out. ``scale`` are the
    ``scale.jsonl`` rows (:func:`load_scale`): the InternEvo series on 8-1,024 A100 and the B200
    ring collectives (:mod:`perfmodel.accuracy_scale`); without them those rows are left out.
    ``systems2026`` are the ``systems2026.jsonl`` rows (:func:`load_systems2026`): the
    Megatron-Bridge GB300 / GB200 / B300 rows (:mod:`perfmodel.accuracy_2026`, about 30 s more);
    without them that row is left out.
    """
    out: list[AccuracyRow] = [_compute_row(rows)]
    out.extend(_collective_rows(rows))
    tr = training if training is not None else training_results(rows)
    judged = tr.judged()
    errs = [p / q - 1 for _m, p, q, _ in judged]
    med, worst = _median_worst(errs)
    out.append(
        AccuracyRow(
            "training throughput / iteration time, all judged rows",
            len(errs),
            med,
            worst,
            0.15,
            signed=_signed_median(errs, [METRIC_ORIENTATION[m.metric] for m, *_ in judged]),
        )
    )
    out.extend(_modern_rows(modern))
    out.extend(_scale_rows(scale))
    out.extend(_systems2026_rows(systems2026))
    eff = scaling_efficiency_points(tr)
    pts = [e.error_points for e in eff]
    out.append(
        AccuracyRow(
            "scaling efficiency (multi-GPU rows)",
            len(pts),
            statistics.median(abs(p) for p in pts),
            None,
            10.0,
            unit="points",
            signed=statistics.median(pts),
        )
    )
    rk = vtrain_ranking(rows)
    out.append(
        AccuracyRow(
            f"plan ranking on vTrain (Kendall tau within {rk.groups} jobs, {rk.plans} plans; "
            "all rows pooled)",
            rk.rows,
            rk.weighted_tau,
            None,
            None,
            unit="tau",
            text=f"tau {rk.weighted_tau:+.2f} within jobs ({rk.pooled_tau:+.2f} pooled)",
        )
    )
    return AccuracyTable(tuple(out), _interconnect_rows(judged))


def _compute_row(rows: Sequence[Mapping[str, Any]]) -> AccuracyRow:
    """Single-GPU compute: the out-of-sample compute microbenchmarks and 1-GPU training rows
    (:mod:`perfmodel.compute.validation`, runs of one configuration once)."""
    from perfmodel.compute.validation import RowPrediction, deduplicate_runs, predict_row

    single = [
        r
        for r in rows
        if r["kind"] == "compute_microbenchmark"
        or (r["kind"] == "training_scaling" and r["hardware"].get("gpus") == 1)
    ]
    comp = [
        r
        for r in deduplicate_runs([predict_row(r) for r in single])
        if isinstance(r, RowPrediction) and not r.in_sample
    ]
    med, worst = _median_worst([r.signed_error for r in comp])
    return AccuracyRow(
        "single-GPU compute (DeepBench GEMM/conv, 1-GPU training throughput)",
        len(comp),
        med,
        worst,
        0.20,
        signed=_signed_median(
            [r.signed_error for r in comp], [_unit_orientation(r.unit) for r in comp]
        ),
    )


def _collective_rows(rows: Sequence[Mapping[str, Any]]) -> list[AccuracyRow]:
    """Large-message collectives per interconnect (:mod:`perfmodel.comm.validation`)."""
    from perfmodel.comm.validation import CommComparison, CommSkip, compare
    from perfmodel.comm.validation import map_row as map_comm_row

    out: list[AccuracyRow] = []
    by_ic: dict[str, list[float]] = defaultdict(list)
    ic_orient: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        if r["kind"] != "comm_microbenchmark":
            continue
        sc = map_comm_row(r)
        if isinstance(sc, CommSkip):
            continue
        c = compare(sc)
        if isinstance(c, CommComparison) and c.large:
            by_ic[sc.interconnect].append(c.error)
            ic_orient[sc.interconnect].append(METRIC_ORIENTATION[sc.metric])
    for ic, label, target in (
        ("NVLink", "NVLink (DGX-1V)", 0.15),
        ("NVSwitch", "NVSwitch (DGX A100)", 0.15),
        ("PCIe", "PCIe", 0.25),
        ("InfiniBand", "InfiniBand", 0.25),
        # one rack and 2 / 20 racks over InfiniBand: issue 3's multi-node target
        ("GB200 NVL72", "GB200 NVL72 (NVLink domain and across racks)", 0.25),
    ):
        if by_ic.get(ic):
            med, worst = _median_worst(by_ic[ic])
            out.append(
                AccuracyRow(
                    f"collectives, large messages, {label}",
                    len(by_ic[ic]),
                    med,
                    worst,
                    target,
                    signed=_signed_median(by_ic[ic], ic_orient[ic]),
                )
            )
    return out


def _interconnect_rows(judged: Sequence[Any]) -> tuple[Any, ...]:
    """``(interconnect, rows, median |error|, worst)`` of the judged training rows, in the
    table's order of interconnects."""
    by_class: dict[str, list[float]] = defaultdict(list)
    for m, p, q, _ in judged:
        by_class[m.interconnect].append(p / q - 1)
    order = ["NVLink", "InfiniBand", "NVSwitch", "PCIe", "single GPU"]
    classes = sorted(by_class, key=lambda k: (order.index(k) if k in order else len(order), k))
    return tuple(
        (k, len(by_class[k]), *(_median_worst(by_class[k]))) for k in classes if by_class[k]
    )


def _modern_rows(modern: Sequence[Mapping[str, Any]]) -> list[AccuracyRow]:
    """Table rows of today's stacks: dense rows, then the MoE / context-parallel rows.

    Errors of tokens/s per GPU (:class:`perfmodel.accuracy_modern.ModernPrediction`); target the
    project's training target, 15 %. Rows that fail to predict are left out (the validation tier
    asserts there are none).
    """
    from perfmodel.accuracy_modern import MOE_CP_ROWS, dense_results, moe_cp_results

    out: list[AccuracyRow] = []
    if not modern:
        return out
    for what, res in (
        (
            "today's stacks, dense (modern.jsonl: torchtitan Dec 2024, NeMo 24.07, "
            "Megatron-Bridge; tokens/s/GPU)",
            dense_results(modern),
        ),
        (
            f"mixture-of-experts and context-parallel rows (modern.jsonl; all {len(MOE_CP_ROWS)} "
            "rows, 8-1,024 GPUs)",
            moe_cp_results(modern),
        ),
    ):
        if res.done:
            errs = [d.error for d in res.done]
            med, worst = _median_worst(errs)
            out.append(
                AccuracyRow(
                    what,
                    len(res.done),
                    med,
                    worst,
                    0.15,
                    signed=_signed_median(errs, [1] * len(errs)),
                )
            )
    return out


def _scale_rows(scale: Sequence[Mapping[str, Any]]) -> list[AccuracyRow]:
    """Table rows of ``scale.jsonl``: the InternEvo training series (tokens/s per GPU, target
    15%, issue 24) and the B200 ring collectives (bus bandwidth, target 10%)."""
    from perfmodel.accuracy_scale import scale_results

    if not scale:
        return []
    res = scale_results(scale)
    out = []
    for what, done, target in (
        (
            "at scale: InternEvo InternLM-7B, ZeRO-1 over all ranks, on 8-1,024 A100 over "
            "4 x 100 Gb RoCE (scale.jsonl; tokens/s/GPU; issue 24 asks every row within 15%)",
            res.training,
            0.15,
        ),
        (
            "at scale: ring all-reduce / all-gather at 8 GiB on 16-512 B200, 8 x NDR 400 "
            "(scale.jsonl; nccl-tests busbw; issue 24 asks every row within 10%)",
            res.comm,
            0.10,
        ),
    ):
        if done:
            errs = [d.error for d in done]
            med, worst = _median_worst(errs)
            out.append(
                AccuracyRow(
                    what,
                    len(done),
                    med,
                    worst,
                    target,
                    signed=_signed_median(errs, [1] * len(errs)),
                )
            )
    return out


def _systems2026_rows(rows: Sequence[Mapping[str, Any]]) -> list[AccuracyRow]:
    """The "2026 systems" row: tokens/s per GPU of every mapped ``systems2026.jsonl`` row
    (:func:`perfmodel.accuracy_2026.results`), target the training target, 15 %."""
    from perfmodel.accuracy_2026 import results

    if not rows:
        return []
    res = results(rows)
    if not res.done:
        return []
    errs = [d.error for d in res.done]
    med, worst = _median_worst(errs)
    what = (
        "2026 systems: GB300 / GB200 NVL72 and B300 (systems2026.jsonl: Megatron-Bridge "
        "26.04.01, dense and MoE, 8-256 GPUs; tokens/s/GPU)"
    )
    return [
        AccuracyRow(
            what, len(res.done), med, worst, 0.15, signed=_signed_median(errs, [1] * len(errs))
        )
    ]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def to_markdown(table: AccuracyTable) -> str:
    """The README's accuracy table (Markdown) and its by-interconnect line."""
    lines = [
        "| what | rows | median abs. error | signed median (+ = too fast) | worst | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in table.rows:
        cells = _cells(r, {True: " ✓", False: " ✗", None: ""})
        lines.append("| " + " | ".join(cells) + " |" * (7 - len(cells)))  # tau rows: 3 empty
    lines += ["", "By interconnect, training rows: " + _by_interconnect(table) + "."]
    return "\n".join(lines)


def to_text(table: AccuracyTable) -> str:
    """Plain-text form of :func:`to_markdown` for the terminal."""
    width = max(len(r.what) for r in table.rows)
    lines = [
        f"{'what':<{width}}  {'rows':>5}  {'median':>18}  {'signed':>12}  {'worst':>8}  target"
    ]
    pads = (f"<{width}", ">5", ">18", ">12", ">8")  # the last cell is not padded
    for r in table.rows:
        *head, last = _cells(r, {True: " ok", False: " MISSED", None: ""})
        lines.append("".join(f"{c:{pad}}  " for c, pad in zip(head, pads)) + last)
    lines.append("training rows by interconnect: " + _by_interconnect(table))
    return "\n".join(lines)


def _cells(r: AccuracyRow, marks: Mapping[bool | None, str]) -> tuple[str, ...]:
    """The cells of one row of the accuracy table: what, rows, then a rank row's (``tau``)
    text alone, or the median, signed median, worst and target cells of a row measured in
    percent or points (``"4.2%"``, ``"+1.3%"``, ``"-9.0%"``, ``"< 15%"``; a points row has no
    worst), the target followed by ``marks[r.meets_target]``."""
    if r.unit == "tau":
        return r.what, str(r.rows), r.text
    if r.unit == "points":
        med, worst, tgt = f"{r.median:.1f} points", "", f"< {r.target:g} points"
    else:
        med = _pct(r.median)
        worst = "" if r.worst is None else f"{100 * r.worst:+.1f}%"
        tgt = "" if r.target is None else f"< {100 * r.target:g}%"
    return r.what, str(r.rows), med, _signed_text(r), worst, tgt + marks[r.meets_target]


def _signed_text(r: AccuracyRow) -> str:
    """The signed median cell: ``+4.2%``, ``-1.3 points``, or empty."""
    if r.signed is None:
        return ""
    return f"{r.signed:+.1f} points" if r.unit == "points" else f"{100 * r.signed:+.1f}%"


def _by_interconnect(table: AccuracyTable) -> str:
    """The training rows' median error per interconnect:
    ``"NVLink 8.9% (n=31, worst +40%), ..."``."""
    return ", ".join(
        f"{k} {_pct(med)} (n={n}, worst {100 * worst:+.0f}%)"
        for k, n, med, worst in table.training_by_interconnect
    )


MARK_BEGIN = "<!-- accuracy-table: begin (generated by `perfmodel validate --published --update-readme README.md`) -->"
MARK_END = "<!-- accuracy-table: end -->"


def replace_between_markers(
    text: str,
    block: str,
    *,
    where: str = "README.md",
    begin: str = MARK_BEGIN,
    end: str = MARK_END,
) -> str:
    """``text`` with the lines between ``begin`` and ``end`` (default: the accuracy table's
    :data:`MARK_BEGIN` and :data:`MARK_END`) replaced by ``block``."""
    try:
        a = text.index(begin) + len(begin)
        b = text.index(end, a)
    except ValueError as exc:
        name = begin.removeprefix("<!-- ").split(":", 1)[0]  # "accuracy-table"
        raise ConfigError(f"{where}: no {name} markers ({begin} ... {end})", where=where) from exc
    return text[:a] + "\n" + block.strip("\n") + "\n" + text[b:]


def table_in_readme(text: str, *, begin: str = MARK_BEGIN, end: str = MARK_END) -> str:
    """The block between the markers (as :func:`to_markdown` wrote it)."""
    a = text.index(begin) + len(begin)
    return text[a : text.index(end, a)].strip("\n")
