"""The 7 training steps measured on an H100 SXM5 (PyTorch 2.11 eager), predicted by the compute model.

Source: ``calibration/h100-sxm5-80gb.json`` (``step/*`` measurements: whole-step median of 20
un-instrumented steps; ``traced_device_busy_s``: sum of kernel durations in one Kineto-traced
step). No step fed any default or fit: they judge the model.

Variants printed (``pytest -s``):

* ``datasheet``: ``ComputeParams.for_gpu`` (catalogue peaks x documented efficiencies), no host
  model (the GPU's kernel time alone, comparable with GPU-busy time);
* ``datasheet+host``: the same with ``host_dispatch_s`` = PyTorch eager training host cost
  (35.55 us per modelled kernel, ``HOST_DISPATCH_S["pytorch-eager"]``, fitted on 10 host-bound
  steps of a later lease at batch <= 16, ``calibration/h100-sxm5-80gb/hostbound/``), applied as a
  step-level floor (the host issues ahead of the GPU);
* ``profile+host``: the profile's fitted ``ComputeParams`` (``load_profile(...).compute_params``)
  with the same host cost (the profile's own ``launch.eager`` fit times a bare 1-element kernel,
  9.68 us, a lower bound for a training step's ops).

Tolerances: against GPU-busy time every step within 30% and the median within 20% (datasheet);
against the whole step the GPU-bound steps (busy >= 90% of the step) within 25%, and the
host-bound ResNet-50 b32 step (GPU busy 10 of 35 ms, held out of the host fit) within 25%.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.compute import ComputeParams
from perfmodel.compute.params import HOST_DISPATCH_S

PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb.json"

#: Predictions of the model before the H100 fixes (docs/calibration.md, datasheet variant), ms.
BEFORE_MS = {
    "step/resnet50/bf16/b128": 26.7,
    "step/resnet50/bf16/b32": 8.9,
    "step/resnet50/bf16/b256": 50.4,
    "step/resnet50/tf32/b64": 26.5,
    "step/gpt2/bf16/b8/seq_len1024": 19.3,
    "step/gpt2/bf16/b8/seq_len1024-vocab50304": 19.3,
    "step/gpt2/bf16/b16/seq_len512": 18.9,
}


@pytest.fixture(scope="module")
def table():
    if not PROFILE.exists():
        pytest.skip("H100 profile not in this checkout")
    from perfmodel.calibration import load_profile
    from perfmodel.calibration.measurement import BenchKind
    from perfmodel.calibration.validate import predict_step, step_workload

    prof = load_profile(PROFILE)
    gpu = prof.device_spec()
    ds = ComputeParams.for_gpu(gpu)
    variants = {
        "datasheet": ds,
        "datasheet+host": replace(ds, host_dispatch_s=HOST_DISPATCH_S["pytorch-eager"]),
        "profile+host": replace(
            prof.compute_params, host_dispatch_s=HOST_DISPATCH_S["pytorch-eager"]
        ),
    }
    rows = []
    for st in (m for m in prof.measurements if m.kind is BenchKind.STEP):
        workload, optimizer = step_workload(st)
        busy = float(st.params["traced_device_busy_s"])
        pred = {}
        hosts = {}
        for name, params in variants.items():
            fwd, bwd, opt, times = predict_step(workload, optimizer, gpu, params)
            pred[name] = fwd + bwd + opt
            hosts[name] = sum(t.host_bound for t in times)
        rows.append((st.key, st.time_s, busy, pred, hosts))
    lines = [
        f"{'step':42s} {'meas':>6s} {'busy':>6s} {'before':>6s}"
        + "".join(f" {n:>26s}" for n in variants),
    ]
    for key, meas, busy, pred, hosts in rows:
        line = (
            f"{key:42s} {meas * 1e3:6.1f} {busy * 1e3:6.1f} {BEFORE_MS.get(key, float('nan')):6.1f}"
        )
        for n in variants:
            p = pred[n]
            line += f" {p * 1e3:6.1f} ({p / meas - 1:+4.0%}/{p / busy - 1:+4.0%}) hb{hosts[n]:3d}"
        lines.append(line)
    lines.append("(error vs step / vs GPU busy; hb = layers the host bounds)")
    print("\n" + "\n".join(lines))
    return rows


def test_seven_steps(table):
    assert len(table) == 7


def test_gpu_busy_time_within_30_percent(table):
    errs = []
    for key, _meas, busy, pred, _h in table:
        err = pred["datasheet"] / busy - 1
        errs.append(abs(err))
        assert abs(err) < 0.30, (key, err)
    med = statistics.median(errs)
    print(f"\nmedian |error| vs GPU busy (datasheet): {med:.1%}")
    assert med < 0.20


def test_gpu_bound_steps_within_25_percent(table):
    n = 0
    for key, meas, busy, pred, _h in table:
        if busy / meas >= 0.9:
            n += 1
            for variant in ("datasheet", "profile+host"):
                err = pred[variant] / meas - 1
                assert abs(err) < 0.25, (key, variant, err)
    assert n == 3  # ResNet-50 b128, b256 and TF32 b64


def test_better_than_before_on_every_step(table):
    for key, meas, _busy, pred, _h in table:
        assert abs(pred["datasheet"] / meas - 1) < abs(BEFORE_MS[key] / 1e3 / meas - 1), key


def test_host_floor_marks_small_batch_layers(table):
    by = {key: (pred, hosts) for key, _m, _b, pred, hosts in table}
    pred, hosts = by["step/resnet50/bf16/b32"]
    # more layers are host-bound at batch 32 than at 256, and the host floor never speeds up
    assert hosts["datasheet+host"] > by["step/resnet50/bf16/b256"][1]["datasheet+host"]
    assert pred["datasheet+host"] >= pred["datasheet"]
    # GPU-bound steps are untouched: the host issues ahead of the GPU
    big = by["step/resnet50/bf16/b256"][0]
    assert big["datasheet+host"] == pytest.approx(big["datasheet"])


def test_host_bound_small_batch_step_within_25_percent(table):
    """The host-bound ResNet-50 b32 step (GPU busy 10.1 of 35.3 ms) was held out of the eager
    host fit (``HOST_DISPATCH_S``, 10 host-bound steps at batch <= 16 of a later lease); with
    the step-level host floor it is predicted at ~30 ms (it was ~11 ms with the bare-launch
    9.68 us per layer, -68%)."""
    by = {key: pred for key, _m, _b, pred, _h in table}
    for variant in ("datasheet+host", "profile+host"):
        assert abs(by["step/resnet50/bf16/b32"][variant] / 35.3e-3 - 1) < 0.25, variant
