"""Profile file format: round trip, missing fields, newer format, other device."""

from __future__ import annotations

import json
import warnings

import pytest
from calibration_testlib import H100_PROFILE

from perfmodel.calibration import FORMAT_VERSION, CalibrationProfile, load_profile, read_profile
from perfmodel.compute import ComputeParams
from perfmodel.errors import CalibrationError


def _write(tmp_path, data) -> str:
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_round_trip(tmp_path, gpu_profile):
    path = tmp_path / "p.json"
    gpu_profile.save(path)
    back = read_profile(path)
    assert back == gpu_profile
    assert back.measurements[0].params["m"] == 4096
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # readable by others, not the tmp mode


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        ("format_version", "format_version"),
        ("device", "device"),
        ("measurements", "measurements"),
        ("provenance", "provenance"),
    ],
)
def test_missing_top_level_field_is_named(tmp_path, gpu_profile, drop, named):
    data = gpu_profile.to_dict()
    del data[drop]
    with pytest.raises(CalibrationError, match=named):
        load_profile(_write(tmp_path, data))


def test_missing_nested_fields_are_named(tmp_path, gpu_profile):
    data = gpu_profile.to_dict()
    del data["device"]["name"]
    with pytest.raises(CalibrationError, match=r"device\.name"):
        load_profile(_write(tmp_path, data))
    data = gpu_profile.to_dict()
    del data["measurements"][0]["time_s"]
    with pytest.raises(CalibrationError, match=r"measurements\[0\].*time_s"):
        load_profile(_write(tmp_path, data))


def test_newer_format_is_refused(tmp_path, gpu_profile):
    data = gpu_profile.to_dict()
    data["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(CalibrationError, match=r"format_version .*newer"):
        load_profile(_write(tmp_path, data))


def test_unknown_field_warns_and_names_it(tmp_path, gpu_profile):
    data = gpu_profile.to_dict()
    data["future_feature"] = {"x": 1}
    with pytest.warns(UserWarning, match="future_feature"):
        load_profile(_write(tmp_path, data))


def test_other_gpu_refused_unless_allowed(tmp_path, gpu_profile):
    path = _write(tmp_path, gpu_profile.to_dict())
    assert load_profile(path, gpu="h100").gpu_model == "H100-SXM5-80GB"
    with pytest.raises(
        CalibrationError, match=r"H100-SXM5-80GB.*A100-SXM4-80GB.*device\.gpu_model"
    ):
        load_profile(path, gpu="A100-SXM4-80GB")
    with pytest.warns(UserWarning, match="used anyway"):
        prof = load_profile(path, gpu="A100-SXM4-80GB", allow_other_device=True)
    assert prof.device.name == "NVIDIA H100 80GB HBM3"


def test_incomplete_profile_warns(tmp_path, gpu_profile):
    data = gpu_profile.to_dict()
    data["status"]["complete"] = False
    with pytest.warns(UserWarning, match="did not finish"):
        load_profile(_write(tmp_path, data))


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(CalibrationError, match="not found"):
        load_profile(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CalibrationError, match="invalid JSON"):
        load_profile(bad)


def test_committed_h100_profile_is_usable():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof = load_profile(H100_PROFILE, gpu="H100-SXM5-80GB")
    assert isinstance(prof, CalibrationProfile)
    params = prof.compute_params
    assert isinstance(params, ComputeParams)
    # measured achievable BF16 GEMM ceiling: below the 989 TFLOP/s datasheet, above half of it
    from perfmodel.dtypes import DType

    assert 0.5 * 989e12 < params.peak_flops[DType.BF16] <= 1.05 * 989e12
    assert prof.provenance["driver_version"] and prof.provenance["cuda_version"]
    assert len(prof.measurements) > 500
    assert prof.fits["compute"].stderr["memory_efficiency"] > 0


def test_predict_uses_the_profile_and_refuses_another_gpu():
    """`perfmodel predict --calibration` (perfmodel.api) takes the profile's ComputeParams."""
    api = pytest.importorskip("perfmodel.api")
    base = api.Scenario(system="dgx-h100", gpus=1, model="gpt2", batch_per_gpu=8, precision="bf16")
    plain = api.predict(base)
    calibrated = api.predict(
        api.Scenario.from_dict({**base.to_dict(), "calibration": str(H100_PROFILE)})
    )
    assert calibrated.iteration_time_s != plain.iteration_time_s
    other = api.Scenario.from_dict(
        {**base.to_dict(), "system": "dgx-a100", "calibration": str(H100_PROFILE)}
    )
    with pytest.raises(CalibrationError, match=r"H100-SXM5-80GB.*A100"):
        api.predict(other)
