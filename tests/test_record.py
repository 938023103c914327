"""perfmodel._record: a flat record's JSON form is its fields in order (enum -> value, tuple ->
list, mapping -> dict); the calibration profile's device and fit records keep their file form;
record_dict's records (validation row, statistical efficiency, time-to-accuracy point) keep theirs."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from perfmodel._record import FlatRecord, flat_value, record_dict
from perfmodel.calibration.profile import DeviceInfo, DeviceKind, FitSummary
from perfmodel.calibration.validate import ValidationRow
from perfmodel.search.tta import StatisticalEfficiency, TTAPoint


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
        '"notes": "", "dof": null}'
    )
    assert FitSummary.from_dict(fit.to_dict(), where="t").to_dict() == fit.to_dict()


def test_record_dict_names_in_order_converted() -> None:
    r = _Rec(_Colour.RED, (1, 2), MappingProxyType({"a": 1.5}), "n")
    d = record_dict(r, ("note", "dims", "colour"))
    assert list(d) == ["note", "dims", "colour"]
    assert d == {"note": "n", "dims": [1, 2], "colour": "red"}


def test_validation_row_file_form() -> None:
    row = ValidationRow("step", "gpt", "h100", 2.0, 2.5, source="s", notes="n")
    assert json.dumps(row.to_dict()) == (
        '{"category": "step", "name": "gpt", "variant": "h100", "measured_s": 2.0, '
        '"predicted_s": 2.5, "error": 0.25, "source": "s", "notes": "n"}'
    )


def test_statistical_efficiency_file_form() -> None:
    stat = StatisticalEfficiency(1000.0, 100.0, min_steps_rel_std=0.5, source="fit")
    assert json.dumps(stat.to_dict()) == (
        '{"min_steps": 1000.0, "noise_scale_samples": 100.0, "min_samples": 100000.0, '
        '"min_steps_rel_std": 0.5, "noise_scale_rel_std": NaN, "source": "fit"}'
    )


def test_tta_point_file_form_leaves_out_the_scenario() -> None:
    point = TTAPoint(256, 8, 1, 0.5, 1200.0, 600.0, scenario={"model": "resnet50"})
    assert json.dumps(point.to_dict()) == (
        '{"global_batch": 256, "gpus": 8, "learners_per_gpu": 1, "step_time_s": 0.5, '
        '"steps": 1200.0, "time_to_accuracy_s": 600.0}'
    )
