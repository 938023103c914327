"""The residual record: every validation row's signed error with what the row is like.

For each shipped validation row that maps to a scenario, the record keeps the predicted and the
measured value, the row's :mod:`features <perfmodel.intervals.features>`, its source
(publication) and its group in the accuracy table. Intervals
(:mod:`perfmodel.intervals.conformal`) read the record; they never recompute it, so a
prediction stays fast. The record is generated, never edited:

    perfmodel validate --published --update-residuals

writes ``validation/residuals.jsonl`` (shipped with the package as
``perfmodel.catalogue.validation``); ``tests/validation/test_residual_record.py`` fails when the
record no longer matches what the validation tier computes (after a model change, regenerate it
in the same commit).

The residual of a row is ``log(predicted / measured)`` of its own quantity, and its *speed*
residual ``orientation * log(predicted / measured)``: ``orientation`` is ``+1`` for rates
(throughput, tokens/s, TFLOP/s, bus bandwidth) and ``-1`` for times (iteration, epoch,
collective or kernel time), so a positive speed residual always means "predicted too fast".

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
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.intervals.features import (
    CollectiveFeatures,
    Features,
    KernelFeatures,
    Quantity,
    features_from_dict,
    interconnect_of,
    step_features,
)

#: File name of the record in the validation folder.
RECORD_NAME = "residuals.jsonl"

#: Format of the record (bumped when a field changes meaning).
RECORD_FORMAT = 1


@dataclass(frozen=True)
class ResidualRow:
    """One validation row's prediction against its measurement.

    Attributes
    ----------
    row_id, file
        The row's ``id`` and the validation file it comes from (``published.jsonl``).
    source
        Its publication (:func:`source_key`): rows of one source are held out together when
        coverage is measured.
    quantity
        What the row measured (:class:`~perfmodel.intervals.features.Quantity`).
    group
        The accuracy-table group the row belongs to (the coverage table's rows).
    metric
        The row's own quantity (``throughput``, ``iteration``, ``tokens``, ``busbw``, ...).
    orientation
        ``+1`` for a rate, ``-1`` for a time (see the module docstring).
    predicted, measured
        In the row's unit (SI), both positive.
    features
        What the row's scenario is like.
    series
        Rows of one source that differ only in their GPU count share it (speedup pairs);
        ``""`` for none.
    score
        The row's calibration scores ``(e_lo, e_hi)``
        (:meth:`perfmodel.intervals.conformal.RecordIndex.scored`); ``None`` until
        :func:`perfmodel.intervals.conformal.with_scores` sets them.
    """

    row_id: str
    file: str
    source: str
    quantity: Quantity
    group: str
    metric: str
    orientation: int
    predicted: float
    measured: float
    features: Features
    series: str = ""
    score: tuple[float, float] | None = None

    @property
    def log_error(self) -> float:
        """``log(predicted / measured)`` of the row's own quantity."""
        return math.log(self.predicted / self.measured)

    @property
    def speed_residual(self) -> float:
        """``orientation * log(predicted / measured)``: positive when predicted too fast."""
        return self.orientation * self.log_error

    @property
    def signed_error(self) -> float:
        """``predicted / measured - 1`` of the row's own quantity (the accuracy table's)."""
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.row_id,
            "file": self.file,
            "source": self.source,
            "quantity": self.quantity.value,
            "group": self.group,
            "metric": self.metric,
            "orientation": self.orientation,
            "predicted": self.predicted,
            "measured": self.measured,
            "features": self.features.to_dict(),
            "series": self.series,
            "score": None if self.score is None else list(self.score),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = RECORD_NAME) -> ResidualRow:
        try:
            q = Quantity.parse(str(d["quantity"]), where=where)
            row = cls(
                str(d["id"]),
                str(d["file"]),
                str(d["source"]),
                q,
                str(d["group"]),
                str(d["metric"]),
                int(d["orientation"]),
                float(d["predicted"]),
                float(d["measured"]),
                features_from_dict(q, d["features"]),
                str(d.get("series", "")),
                None if d.get("score") is None else (float(d["score"][0]), float(d["score"][1])),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"{where}: residual row {d.get('id', '?')!r} is malformed ({exc}); regenerate "
                "it with `perfmodel validate --published --update-residuals`",
                value=d.get("id"),
                where=where,
            ) from exc
        if not (row.predicted > 0 and row.measured > 0) or row.orientation not in (1, -1):
            raise ConfigError(
                f"{where}: residual row {row.row_id!r} has predicted {row.predicted!r}, measured "
                f"{row.measured!r}, orientation {row.orientation!r} (positive values, +-1 "
                "expected)",
                value=row.row_id,
                where=where,
            )
        return row


# --------------------------------------------------------------------------- sources


_REPO = re.compile(r"^([\w.-]+/[\w.-]+)\s*(?:@\s*[0-9a-fA-F]{6,40})?\s*:?\s*(\S*)")


def source_key(text: str) -> str:
    """The publication a row's ``source`` names: ``owner/repo`` and the folder of the file
    cited (``NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT``; the commit dropped,
    so two releases of one benchmark page are one source), or a paper's authors (the text before
    the first comma: ``Narayanan et al.``).

    >>> source_key("NVIDIA/DeepLearningExamples @729963dd47e7 PyTorch/Classification/"
    ...            "ConvNets/resnet50v1.5/README.md, 'Training performance results'")
    'NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5'
    >>> source_key("InternLM/InternEvo@34fc28d760282c11a2aba552d5b21ffefed3e188:doc/en/x.md, 'T'")
    'InternLM/InternEvo doc/en'
    >>> source_key("Farhad-n/MultiGPU_Study README.md (commit 08b97b3b7c99), 'Conclusion'")
    'Farhad-n/MultiGPU_Study'
    >>> source_key("Narayanan et al., 'Efficient Large-Scale Language Model Training' (SC21)")
    'Narayanan et al.'
    """
    t = text.strip()
    m = _REPO.match(t)
    if m and "/" in m.group(1) and not m.group(1).endswith("."):
        path = m.group(2).rstrip(",;'\"")
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        return f"{m.group(1)} {folder}".strip()
    return t.split(",", 1)[0].strip()


def _digest(*parts: Any) -> str:
    """A short stable key of ``parts`` (8 hex digits of their SHA-1)."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:8]


# --------------------------------------------------------------------------- mappings per file

#: Orientation of each metric the validation mappings use: ``+1`` for a rate (higher is
#: faster), ``-1`` for a time (:attr:`ResidualRow.orientation`; the accuracy table's signed
#: median, :func:`perfmodel.accuracy.speed_signed`, reads it too).
ORIENTATION: Mapping[str, int] = {
    "throughput": 1,
    "tokens": 1,
    "tflops": 1,
    "busbw": 1,
    "rate": 1,
    "iteration": -1,
    "epoch": -1,
    "time": -1,
}


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
            ORIENTATION[m.metric],
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
        yield _collective_row(row, "published.jsonl", sc, c.predicted, sc.measured, "collectives")


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
        ORIENTATION[sc.metric],
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
            sc = mapper(row)
            yield ResidualRow(
                str(row["id"]),
                "modern.jsonl",
                source_key(str(row["source"])),
                Quantity.STEP,
                label,
                "tokens",
                1,
                float(d.tokens_per_s_per_gpu),
                float(row["measured"]),
                step_features(sc),
            )


def scale_rows(rows: Sequence[Mapping[str, Any]]) -> Iterator[ResidualRow]:
    """Residual rows of ``scale.jsonl``: the InternEvo series (tokens/s per GPU, one series per
    tensor-parallel size) and the B200 ring collectives (bus bandwidth)."""
    from perfmodel.accuracy_scale import map_comm_row, map_training_row, scale_results

    res = scale_results(rows)
    for d in res.training:
        row = d.row
        sc = map_training_row(row)
        yield ResidualRow(
            str(row["id"]),
            "scale.jsonl",
            source_key(str(row["source"])),
            Quantity.STEP,
            "InternEvo on 8-1,024 A100 (scale.jsonl)",
            "tokens",
            1,
            float(d.predicted),
            float(d.measured),
            step_features(sc),
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
        yield ResidualRow(
            str(row["id"]),
            "systems2026.jsonl",
            source_key(str(row["source"])),
            Quantity.STEP,
            "2026 systems (systems2026.jsonl)",
            "tokens",
            1,
            float(d.tokens_per_s_per_gpu),
            float(row["measured"]),
            step_features(map_row(row)),
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
    from perfmodel._io import read_jsonl
    from perfmodel.accuracy import _validation_file
    from perfmodel.intervals.conformal import with_scores

    out: list[ResidualRow] = []
    for name, mapper in RECORD_SOURCES.items():
        path = _validation_file(directory, name)
        if path.name != name:
            path = path.parent / name
        if not path.exists():
            continue
        rows = read_jsonl(path, where="--published")
        if name == "published.jsonl":
            out.extend(published_rows(rows, training=training))
        else:
            out.extend(mapper(rows))
    out.extend(speedup_rows(out))
    return with_scores(out)


# --------------------------------------------------------------------------- the file


def to_jsonl(rows: Iterable[ResidualRow]) -> str:
    """The record's text: a header line (format, what wrote it), then one row per line, keys
    sorted, floats as Python prints them (exact round trip)."""
    head = {
        "format": RECORD_FORMAT,
        "generated_by": "perfmodel validate --published --update-residuals",
    }
    lines = [json.dumps(head, sort_keys=True)]
    lines += [json.dumps(r.to_dict(), sort_keys=True) for r in rows]
    return "\n".join(lines) + "\n"


def write_record(rows: Iterable[ResidualRow], path: str | Path) -> None:
    """Write the record atomically (never a half-written file)."""
    from perfmodel._io import atomic_write

    with atomic_write(path) as fh:
        fh.write(to_jsonl(rows))


def parse_record(text: str, *, where: str = RECORD_NAME) -> tuple[ResidualRow, ...]:
    """Rows of a record's text (:func:`to_jsonl`).

    Raises
    ------
    ConfigError
        A line that is not JSON, a header of another format, or a malformed row.
    """
    rows: list[ResidualRow] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{where}:{i}: not JSON ({exc.msg})", value=line[:60], where=where
            ) from exc
        if "format" in d:
            if d["format"] != RECORD_FORMAT:
                raise ConfigError(
                    f"{where}: residual record format {d['format']!r}, this perfmodel reads "
                    f"{RECORD_FORMAT}; regenerate it with `perfmodel validate --published "
                    "--update-residuals`",
                    value=d["format"],
                    where=where,
                )
            continue
        rows.append(ResidualRow.from_dict(d, where=f"{where}:{i}"))
    return tuple(rows)


def record_path() -> Path:
    """The shipped record (``validation/residuals.jsonl``)."""
    from perfmodel.catalogue import validation_dir

    return validation_dir() / RECORD_NAME


def read_record(path: str | Path | None = None) -> tuple[ResidualRow, ...]:
    """The record at ``path`` (default: the shipped one); read once per process per file
    (cached by path and modification time)."""
    from perfmodel._io import file_stamp

    p = Path(path) if path is not None else record_path()
    return _read_cached(str(p), file_stamp(str(p)))


@lru_cache(maxsize=4)
def _read_cached(path: str, _stamp: int | None) -> tuple[ResidualRow, ...]:
    from perfmodel._io import read_text

    return parse_record(read_text(path, where="residual record"), where=Path(path).name)
