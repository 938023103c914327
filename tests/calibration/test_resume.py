"""An interrupted calibration keeps what it measured (written incrementally) and resumes."""

from __future__ import annotations

import json

import pytest

from perfmodel.calibration import read_profile
from perfmodel.calibration.backends import NumpyBackend
from perfmodel.calibration.suite import plan_suite, run_suite
from perfmodel.errors import CalibrationError


def _items():
    backend = NumpyBackend()
    return backend, [
        it for it in plan_suite(backend, groups=["launch", "memory"]) if "134217728" not in it.key
    ]


def test_interrupted_run_keeps_measurements_and_resumes(tmp_path):
    out = tmp_path / "p.json"
    backend, items = _items()
    first = run_suite(backend, items, budget_s=30, out_path=out, stop_after=3)
    on_disk = read_profile(out)
    assert not on_disk.complete
    assert len(on_disk.measurements) == 3 == len(first.measurements)
    kept = {m.key: m.time_s for m in on_disk.measurements}

    # a crash mid-item leaves the last complete file in place (atomic writes)
    class Boom(Exception):
        pass

    def explode(_p):
        raise Boom

    with pytest.raises(Boom):
        run_suite(backend, items, budget_s=30, out_path=out, resume=True, finish=explode)
    mid = read_profile(out)
    assert not mid.complete and len(mid.measurements) == len(items)

    done = run_suite(backend, items, budget_s=30, out_path=out, resume=True)
    assert done.complete
    assert {m.key for m in done.measurements} == {it.key for it in items}
    for key, t in kept.items():  # earlier measurements are kept, not re-measured
        assert next(m for m in done.measurements if m.key == key).time_s == t
    assert len(json.loads(out.read_text())["provenance"]["resumed_utc"]) == 2


def test_resume_refuses_another_device(tmp_path):
    out = tmp_path / "p.json"
    backend, items = _items()
    run_suite(backend, items[:1], budget_s=5, out_path=out)
    data = json.loads(out.read_text())
    data["device"]["name"] = "Some Other CPU"
    out.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"device\.name"):
        run_suite(backend, items, budget_s=5, out_path=out, resume=True)
