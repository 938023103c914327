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

How the rows are made from the validation files, and which rows feed which answers:
:mod:`perfmodel.intervals.residuals`. This module holds the row (:class:`ResidualRow`) and the
file (:func:`to_jsonl`, :func:`parse_record`, :func:`read_record`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.intervals.features import (
    Features,
    Quantity,
    features_from_dict,
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


# --------------------------------------------------------------------------- mappings per file

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
        A line that is not a JSON object (:func:`perfmodel._io.parse_jsonl_numbered`), a
        header of another format, or a malformed row.
    """
    from perfmodel._io import parse_jsonl_numbered

    rows: list[ResidualRow] = []
    for i, d in parse_jsonl_numbered(text, where=where):
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
    (cached by path and :func:`~perfmodel._io.file_stamp`)."""
    from perfmodel._io import file_stamp

    p = Path(path) if path is not None else record_path()
    return _read_cached(str(p), file_stamp(str(p)))


@lru_cache(maxsize=4)
def _read_cached(path: str, _stamp: tuple[str, int, int] | None) -> tuple[ResidualRow, ...]:
    from perfmodel._io import read_text

    return parse_record(read_text(path, where="residual record"), where=Path(path).name)
