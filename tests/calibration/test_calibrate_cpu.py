"""Acceptance: `perfmodel calibrate --device cpu` in a small budget, used for a real CPU step.

The calibration and the step run in subprocesses with one BLAS thread (``OPENBLAS_NUM_THREADS``
and friends = 1): a *single-CPU* step. Both time with the process CPU clock (``--clock process``),
which other processes sharing the cores cannot disturb (CI machines are shared).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from calibration_testlib import REPO

from perfmodel.calibration import load_profile
from perfmodel.calibration.measurement import Measurement
from perfmodel.calibration.validate import predict_step, step_workload

ONE_THREAD = {k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        **kw,
    )


MEASURE_STEP = """
import json, sys
from perfmodel.calibration.steps import numpy_mlp_step
ms = numpy_mlp_step(tuple(json.loads(sys.argv[1])), int(sys.argv[2]), repeats=7, clock="process")
print(json.dumps(ms[0].to_dict()))
"""


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("cal") / "profile.json"
    r = _run(
        [
            "-m",
            "perfmodel",
            "calibrate",
            "--device",
            "cpu",
            "--budget",
            "8s",
            "-o",
            str(out),
            "--only",
            "launch,memory,gemm",
            "--clock",
            "process",
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "[" in r.stderr and "/" in r.stderr  # the plain-text progress bar went to stderr
    assert "wrote" in r.stdout
    return str(out)


def test_cpu_profile_is_complete_and_fitted(cpu_profile):
    prof = load_profile(cpu_profile)
    assert prof.complete and prof.device.kind.value == "cpu"
    assert prof.provenance["perfmodel_version"] and prof.provenance["created_utc"]
    assert "compute" in prof.fits, prof.skipped
    assert prof.compute_params is not None
    spec = prof.device_spec()
    assert spec.memory_bandwidth_Bps > 1e8
    # a CPU profile is refused for a GPU prediction unless asked for
    from perfmodel.errors import CalibrationError

    with pytest.raises(CalibrationError, match=r"device\.gpu_model"):
        load_profile(cpu_profile, gpu="H100-SXM5-80GB")


@pytest.mark.parametrize(
    ("widths", "batch"), [((512, 1024, 1024, 10), 128), ((256, 2048, 2048, 10), 128)]
)
def test_calibrated_prediction_of_a_real_cpu_step_within_25_percent(cpu_profile, widths, batch):
    prof = load_profile(cpu_profile)
    r = _run(["-c", MEASURE_STEP, json.dumps(list(widths)), str(batch)])
    assert r.returncode == 0, r.stderr[-2000:]
    measured = Measurement.from_dict(json.loads(r.stdout.strip().splitlines()[-1]))
    workload, optimizer = step_workload(measured)
    fwd, bwd, opt, _ = predict_step(workload, optimizer, prof.device_spec(), prof.compute_params)
    predicted = fwd + bwd + opt
    error = predicted / measured.time_s - 1
    print(
        f"MLP {widths} b{batch}: measured {measured.time_s * 1e3:.2f} ms, predicted {predicted * 1e3:.2f} ms, error {error:+.1%}"
    )
    assert abs(error) < 0.25


def test_predict_uses_the_cpu_profile_for_a_real_cpu_step(cpu_profile, capsys):
    """`perfmodel predict --system calibrated --calibration profile.json` predicts the measured
    single-CPU step (the CLI path, not only the compute model) within 25%."""
    from perfmodel.cli import main

    widths, batch = (512, 1024, 1024, 10), 128
    r = _run(["-c", MEASURE_STEP, json.dumps(list(widths)), str(batch)])
    assert r.returncode == 0, r.stderr[-2000:]
    measured = Measurement.from_dict(json.loads(r.stdout.strip().splitlines()[-1]))
    code = main(
        [
            "predict", "--system", "calibrated", "--calibration", cpu_profile,
            "--model", "mlp", "--model-arg", "widths=" + ",".join(map(str, widths)),
            "--batch-per-gpu", str(batch), "--optimizer", "sgd",
            "--software", "tf-mirrored",  # graph-mode stack: no eager host dispatch (NumPy step)
            "--fidelity", "analytic", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    error = out["iteration_time_s"] / measured.time_s - 1
    print(
        f"predict --system calibrated: {out['iteration_time_s'] * 1e3:.2f} ms vs measured {measured.time_s * 1e3:.2f} ms ({error:+.1%})"
    )
    assert abs(error) < 0.25
    # the profile's device, not a catalogue GPU
    assert out["memory_per_gpu_bytes"] > 0 and out["fits_in_memory"]


def test_calibrated_system_needs_a_profile():
    from perfmodel.api import Scenario, predict
    from perfmodel.errors import ConfigError

    with pytest.raises(ConfigError, match="--calibration"):
        predict(Scenario(system="calibrated", model="mlp", batch_per_gpu=8))
