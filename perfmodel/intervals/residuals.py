"""The residual record's rows, made from the validation files (:func:`generate`; the row and
the file are :mod:`perfmodel.intervals.record`).

Which rows feed which answers (:class:`~perfmodel.intervals.features.Quantity`):

* ``step`` (``predict``, ``compare``, ``sweep``): the judged training rows of
  ``published.jsonl`` (:meth:`perfmodel.accuracy.TrainingResults.judged`: neither the rows a
  constant was fitted to nor vTrain's rows of unstated precision), the mapped ``modern.jsonl``
  tokens/s rows (dense, MoE and context-parallel) and the ``scale.jsonl`` training rows;
* ``collective`` (``perfmodel comm``): the mapped ``comm_microbenchmark`` rows of
  ``published.jsonl`` (every message size) and ``scale.jsonl``;
* ``kernel`` (no CLI interval yet; recorded for the coverage table): the compute
  microbenchmarks of ``published.jsonl`` (DeepBench GEMM and convolution, matmul ceilings)
  that fed no fit (:mod:`perfmodel.compute.validation`).

* ``speedup`` (the speedup curve of ``predict --gpus 1,2,4,8``): derived from the step rows,
  one per pair of rows of one table that differ only in their GPU count (the run at ``n`` GPUs
  against the table's smallest count, as the accuracy table's scaling efficiency pairs them):
  the ratio's residual ``r(n) - r(base)``, not two independent ones.

Every row also carries its calibration ``score`` (:meth:`perfmodel.intervals.conformal.
RecordIndex.scored`: how far it lands beyond the band of the rows like it when its own
publication is held out).

Not recorded: ``seeds.jsonl`` (its scenarios are built by ``examples/seeds.py``, and most of its
rows are time-to-accuracy or speedup ratios) and vTrain's rows of unstated precision (not judged
by the accuracy table either).

New validation files plug in through :data:`RECORD_SOURCES`: one function per file that takes
the file's rows and yields :class:`ResidualRow` values.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfmodel.accuracy import METRIC_ORIENTATION
from perfmodel.intervals.features import (
    CollectiveFeatures,
    KernelFeatures,
    Quantity,
    interconnect_of,
    step_features,
)
from perfmodel.intervals.record import ResidualRow, source_key


def _digest(*parts: Any) -> str:
    """A short stable key of ``parts`` (8 hex digits of their SHA-1)."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:8]


def _published_step_rows(rows: Sequence[Mapping[str, Any]], training: Any) -> Iterator[ResidualRow]:
    """``published.jsonl`` training rows the accuracy table judges."""
    from perfmodel.accuracy import _group_key, training_results

    tr = training if training is not None else training_results(rows)
    for m, pred, meas, _rep in tr.judged():
        row = m.row
        yield ResidualRow(
            row["id"],
            "published.jsonl",
            source_key(row["source"]),
            Quantity.STEP,
            "training rows (published.jsonl)",
            m.metric,
            METRIC_ORIENTATION[m.metric],
            float(pred),
            float(meas),
            step_features(m.scenario),
            series=_digest(_group_key(row)),
        )


def _published_comm_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[ResidualRow]:
    from perfmodel.comm.validation import CommComparison, CommSkip, compare, map_row

    for row in rows:
        if row.get("kind") != "comm_microbenchmark":
            continue
        sc = map_row(dict(row))
        if isinstance(sc, CommSkip):
            continue
        c = compare(sc)
        if not isinstance(c, CommComparison):  # pragma: no cover - compare always returns one
            continue
        label = "GB200 NVL72" if sc.interconnect == "GB200 NVL72" else "collectives"
        yield _collective_row(row, "published.jsonl", sc, c.predicted, sc.measured, label)


def _collective_row(
    row: Mapping[str, Any],
    file: str,
    sc: Any,
    predicted: float,
    measured: float,
    label: str,
) -> ResidualRow:
    from perfmodel.comm.validation import _model

    model = _model(sc.system, sc.nodes, sc.network, sc.gpu, sc.sharp, None, sc.nccl, sc.cpu_model)
    topo = model.topology
    spec = topo.gpu_spec()
    feats = CollectiveFeatures(
        spec.name,
        spec.architecture,
        interconnect_of(topo, sc.gpus),
        sc.op.value,
        sc.gpus,
        float(sc.message_bytes),
    )
    return ResidualRow(
        str(row["id"]),
        file,
        source_key(str(row["source"])),
        Quantity.COLLECTIVE,
        f"{label}, {feats.interconnect.value}",
        sc.metric,
        METRIC_ORIENTATION[sc.metric],
        float(predicted),
        float(measured),
        feats,
    )


def _published_kernel_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[ResidualRow]:
    from perfmodel.compute.validation import RowPrediction, deduplicate_runs, predict_row
    from perfmodel.hardware.gpus import get_gpu

    by_id = {r["id"]: r for r in rows}
    micro = [r for r in rows if r.get("kind") == "compute_microbenchmark"]
    for p in deduplicate_runs([predict_row(r) for r in micro]):
        if not isinstance(p, RowPrediction) or p.in_sample:
            continue
        row = by_id[p.id]
        unit = p.unit.lower()
        orientation = -1 if unit in ("s", "ms", "us", "µs") else 1
        spec = get_gpu(p.gpu)
        prec = str(row.get("precision") or "").lower() or "not stated"
        yield ResidualRow(
            p.id,
            "published.jsonl",
            source_key(str(row["source"])),
            Quantity.KERNEL,
            "single-GPU kernels (DeepBench GEMM/conv, matmul)",
            "time" if orientation < 0 else "rate",
            orientation,
            float(p.predicted),
            float(p.measured),
            KernelFeatures(spec.name, spec.architecture, p.group, prec),
        )


def published_rows(
    rows: Sequence[Mapping[str, Any]], *, training: Any = None
) -> Iterator[ResidualRow]:
    """Residual rows of ``published.jsonl`` (training, collective and kernel rows);
    ``training`` reuses :func:`perfmodel.accuracy.training_results` of the same rows."""
    yield from _published_step_rows(rows, training)
    yield from _published_comm_rows(rows)
    yield from _published_kernel_rows(rows)


def _tokens_row(
    row: Mapping[str, Any],
    file: str,
    label: str,
    predicted: float,
    measured: float,
    scenario: Any,
    *,
    series: str = "",
) -> ResidualRow:
    """A ``step`` row of ``file`` measured in tokens/s per GPU (higher is better), with the
    features of its mapped ``scenario``: the rows of ``modern.jsonl``, ``scale.jsonl`` and
    ``systems2026.jsonl``."""
    return ResidualRow(
        str(row["id"]),
        file,
        source_key(str(row["source"])),
        Quantity.STEP,
        label,
        "tokens",
        1,
        float(predicted),
        float(measured),
        step_features(scenario),
        series=series,
    )


def modern_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[ResidualRow]:
    """Residual rows of ``modern.jsonl``: the dense rows and the MoE / context-parallel rows
    (tokens/s per GPU), as the accuracy table predicts them."""
    from perfmodel.accuracy_modern import (
        dense_results,
        map_dense_row,
        map_moe_cp_row,
        moe_cp_results,
    )

    for label, res, mapper in (
        ("today's stacks, dense (modern.jsonl)", dense_results(rows), map_dense_row),
        ("MoE and context-parallel rows (modern.jsonl)", moe_cp_results(rows), map_moe_cp_row),
    ):
        for d in res.done:
            row = d.row
            yield _tokens_row(
                row, "modern.jsonl", label, d.tokens_per_s_per_gpu, row["measured"], mapper(row)
            )


def scale_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[ResidualRow]:
    """Residual rows of ``scale.jsonl``: the InternEvo series (tokens/s per GPU, one series per
    tensor-parallel size) and the B200 ring collectives (bus bandwidth)."""
    from perfmodel.accuracy_scale import map_comm_row, map_training_row, scale_results

    res = scale_results(rows)
    for d in res.training:
        row = d.row
        yield _tokens_row(
            row,
            "scale.jsonl",
            "InternEvo on 8-1,024 A100 (scale.jsonl)",
            d.predicted,
            d.measured,
            map_training_row(row),
            series=_digest(source_key(str(row["source"])), row["plan"].get("tp")),
        )
    for d in res.comm:
        row = d.row
        cs = map_comm_row(row)
        # predicted and measured in GB/s, as scale_results gives them (a ratio: units cancel)
        yield _collective_row(row, "scale.jsonl", cs, d.predicted, d.measured, "B200 rings")


#: One function per validation file: the file's rows in, residual rows out. A new file plugs in
#: here (and in :func:`generate`'s loader) with its own mapping.
def systems2026_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[ResidualRow]:
    """Residual rows of ``systems2026.jsonl``: Megatron-Bridge runs on GB200 / GB300 NVL72 and
    DGX B300 (tokens/s per GPU), as the accuracy table predicts them
    (:mod:`perfmodel.accuracy_2026`)."""
    from perfmodel.accuracy_2026 import map_row, results

    for d in results(rows).done:
        row = d.row
        yield _tokens_row(
            row,
            "systems2026.jsonl",
            "2026 systems (systems2026.jsonl)",
            d.tokens_per_s_per_gpu,
            row["measured"],
            map_row(row),
        )


RECORD_SOURCES: Mapping[str, Callable[[Sequence[Mapping[str, Any]]], Iterable[ResidualRow]]] = {
    "published.jsonl": published_rows,
    "modern.jsonl": modern_rows,
    "scale.jsonl": scale_rows,
    "systems2026.jsonl": systems2026_rows,
}


def speedup_rows(rows: Sequence[ResidualRow]) -> list[ResidualRow]:
    """The derived ``speedup`` rows of the step rows: in every ``series`` (rows of one table
    that differ only in their GPU count), each row with more GPUs than the series' smallest
    count against that smallest-count row. Predicted and measured are speed ratios (a time's
    speed is its inverse), so the pair's residual is ``r(n) - r(base)``."""
    by_series: dict[str, list[ResidualRow]] = {}
    for r in rows:
        if r.quantity is Quantity.STEP and r.series:
            by_series.setdefault(r.series, []).append(r)
    out = []
    for members in by_series.values():
        base = min(members, key=lambda r: (r.features.gpus, r.row_id))  # type: ignore[union-attr]
        for r in members:
            if r.features.gpus <= base.features.gpus:  # type: ignore[union-attr]
                continue

            def speed(x: ResidualRow, v: float) -> float:
                return math.log(v) * x.orientation

            out.append(
                ResidualRow(
                    f"{r.row_id}/{base.row_id}",
                    r.file,
                    r.source,
                    Quantity.SPEEDUP,
                    "speedup (pairs of rows at two GPU counts)",
                    "speedup",
                    1,
                    math.exp(speed(r, r.predicted) - speed(base, base.predicted)),
                    math.exp(speed(r, r.measured) - speed(base, base.measured)),
                    r.features,
                    series=r.series,
                )
            )
    return out


def generate(
    directory: str | Path | None = None, *, training: Any = None
) -> tuple[ResidualRow, ...]:
    """Every residual row of the validation files in ``directory`` (default: the shipped
    copy), in :data:`RECORD_SOURCES` order then file order, then the derived
    :func:`speedup_rows`, each with its calibration score (about a minute on 2 cores: every
    training row is predicted).

    ``training`` reuses :func:`perfmodel.accuracy.training_results` of ``published.jsonl``.
    """
    from perfmodel.catalogue import validation_rows
    from perfmodel.intervals.conformal import with_scores

    out: list[ResidualRow] = []
    for name, mapper in RECORD_SOURCES.items():
        rows = validation_rows(directory, name)  # no file: no rows
        if not rows:
            continue
        if name == "published.jsonl":
            out.extend(published_rows(rows, training=training))
        else:
            out.extend(mapper(rows))
    out.extend(speedup_rows(out))
    return with_scores(out)
