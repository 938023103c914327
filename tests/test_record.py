"""perfmodel._record: a flat record's JSON form is its fields in order (enum -> value, tuple ->
list, mapping -> dict); the calibration profile's device and fit records keep their file form."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from perfmodel._record import FlatRecord, flat_value
from perfmodel.calibration.profile import DeviceInfo, DeviceKind, FitSummary


class _Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class _Rec(FlatRecord):
    colour: _Colour
    dims: tuple[int, ...]
    table: Any
    note: str | None = None


def test_flat_record_fields_in_order_converted() -> None:
    r = _Rec(_Colour.RED, (1, 2), MappingProxyType({"a": 1.5}))
    d = r.to_dict()
    assert list(d) == ["colour", "dims", "table", "note"]
    assert d == {"colour": "red", "dims": [1, 2], "table": {"a": 1.5}, "note": None}
    assert type(d["table"]) is dict and type(d["dims"]) is list


def test_flat_value_leaves_plain_values() -> None:
    assert [flat_value(v) for v in (3, 2.5, "x", None, [1])] == [3, 2.5, "x", None, [1]]


def test_device_info_file_form() -> None:
    dev = DeviceInfo(
        DeviceKind.CUDA, "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB", 85 * 2**30, 132, 8, "9.0"
    )
    assert json.dumps(dev.to_dict()) == (
        '{"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "gpu_model": "H100-SXM5-80GB", '
        '"memory_bytes": 91268055040, "cores": 132, "count": 8, "compute_capability": "9.0"}'
    )
    assert DeviceInfo.from_dict(dev.to_dict(), where="t") == dev


def test_fit_summary_file_form() -> None:
    fit = FitSummary(
        "t = a + b x",
        MappingProxyType({"a": 1.0, "b": 2.0}),
        MappingProxyType({"a": 0.5, "b": 0.25}),
        12,
        0.05,
        0.04,
    )
    assert json.dumps(fit.to_dict()) == (
        '{"model": "t = a + b x", "values": {"a": 1.0, "b": 2.0}, "stderr": {"a": 0.5, '
        '"b": 0.25}, "n_points": 12, "rms_log_residual": 0.05, "median_abs_error": 0.04, '
        '"notes": ""}'
    )
    assert FitSummary.from_dict(fit.to_dict(), where="t").to_dict() == fit.to_dict()
