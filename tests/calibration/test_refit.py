"""The new ComputeParams fields are fitted by default where the measurements identify them; the
eager launch becomes ``host_dispatch_s``; a stored profile re-fits offline with provenance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from perfmodel.calibration.fit import (
    DEFAULT_COMPUTE_FIELDS,
    GEMM_BW_KINDS,
    fit_compute_params,
    measurement_layer,
)
from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.hardware import get_gpu

PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb.json"
H100 = get_gpu("H100-SXM5-80GB")


def _gemm(m: int, n: int, k: int, dtype: str, t: float) -> Measurement:
    return Measurement(
        BenchKind.GEMM,
        f"gemm/{dtype}/m{m}-n{n}-k{k}-b1",
        {"m": m, "n": n, "k": k, "batch": 1, "dtype": dtype},
        TimingStats(t, t, t, t, 5),
        work_flop=2.0 * m * n * k,
    )


def test_new_fields_are_fitted_by_default() -> None:
    assert "alignment_efficiency" in DEFAULT_COMPUTE_FIELDS
    assert "fused_attention_bwd_efficiency" in DEFAULT_COMPUTE_FIELDS


def _synthetic(truth: ComputeParams, shapes: list[tuple[int, int, int]], seed: int) -> list:
    model = ComputeModel(H100, truth)
    rng = np.random.default_rng(seed)
    out = []
    for m, n, k in shapes:
        layer, prec = measurement_layer(_gemm(m, n, k, "bf16", 1.0))
        t = model.layer_time(layer, prec).fwd_s * math.exp(rng.normal(0, 0.02))
        out.append(_gemm(m, n, k, "bf16", t))
    return out


ALIGNED = [(s, s, s) for s in (1024, 2048, 4096, 8192)]
UNALIGNED = [(4095, 4095, 4095), (3000, 257, 2048), (2048, 4095, 1023)]


@pytest.mark.parametrize("seed", [1, 7])
def test_alignment_efficiency_recovered_from_unaligned_gemms(seed: int) -> None:
    truth = ComputeParams.for_gpu(H100, alignment_efficiency=0.3)
    ms = _synthetic(truth, ALIGNED + UNALIGNED, seed)
    params, res = fit_compute_params(ms, H100, kinds=GEMM_BW_KINDS)
    assert params.alignment_efficiency == pytest.approx(0.3, rel=0.1)
    assert math.isfinite(res.stderr["alignment_efficiency"])
    # no attention measurement: its backward efficiency is not identified and keeps the default
    assert math.isnan(res.stderr["fused_attention_bwd_efficiency"])
    assert (
        params.fused_attention_bwd_efficiency
        == ComputeParams.for_gpu(H100).fused_attention_bwd_efficiency
    )


def test_alignment_not_identified_by_aligned_gemms_only() -> None:
    ms = _synthetic(ComputeParams.for_gpu(H100), ALIGNED, 3)
    params, res = fit_compute_params(ms, H100, kinds=GEMM_BW_KINDS)
    assert math.isnan(res.stderr["alignment_efficiency"])
    assert params.alignment_efficiency == ComputeParams.for_gpu(H100).alignment_efficiency


@pytest.mark.skipif(not PROFILE.exists(), reason="H100 profile not in this checkout")
def test_h100_profile_is_a_refit_with_current_defaults() -> None:
    from perfmodel.calibration import load_profile

    prof = load_profile(PROFILE)
    cp = prof.compute_params
    # the stored profile was re-fitted offline: current SIMT tile menu, the new fields fitted
    assert cp.cuda_core_tiles == ComputeParams.for_gpu(H100).cuda_core_tiles
    values = prof.fits["compute"].values
    for name in ("alignment_efficiency", "fused_attention_bwd_efficiency"):
        assert name in values and math.isfinite(prof.fits["compute"].stderr[name])
        assert getattr(cp, name) == pytest.approx(values[name])
    # one host-bound step only: the eager training host cost is the default, not the bare launch
    from perfmodel.compute.params import HOST_DISPATCH_S

    assert "host.eager_step" not in prof.fits
    assert cp.host_dispatch_s == pytest.approx(HOST_DISPATCH_S["pytorch-eager"])
    assert prof.fits["launch.eager"].values["launch_s"] < cp.host_dispatch_s
    refits = prof.provenance["refits"]
    assert refits and {"refitted_utc", "perfmodel_commit", "from"} <= set(refits[-1])


@pytest.mark.skipif(not PROFILE.exists(), reason="H100 profile not in this checkout")
def test_refit_cli_reproduces_the_stored_profile(tmp_path: Path) -> None:
    from perfmodel.cli import main

    out = tmp_path / "refit.json"
    assert main(["calibrate", "--refit", str(PROFILE), "-o", str(out), "--note", "test"]) == 0
    new = json.loads(out.read_text())
    old = json.loads(PROFILE.read_text())
    assert len(new["measurements"]) == len(old["measurements"])
    assert new["provenance"]["refits"][-1]["note"] == "test"
    assert len(new["provenance"]["refits"]) == len(old["provenance"].get("refits", [])) + 1
    for key, value in old["compute_params"].items():
        if isinstance(value, float):
            assert new["compute_params"][key] == pytest.approx(value, rel=1e-3), key


HOSTBOUND = PROFILE.parent / "h100-sxm5-80gb" / "hostbound" / "steps-cuda.json"


@pytest.mark.skipif(not HOSTBOUND.exists(), reason="H100 host-bound steps not in this checkout")
def test_profile_with_host_bound_steps_fits_its_own_host_cost() -> None:
    """A torch profile holding >= 3 host-bound training steps gets its own eager host fit, which
    predictions with that profile then use."""
    from perfmodel.calibration import load_profile
    from perfmodel.calibration.host import fit_eager_host
    from perfmodel.calibration.runner import finish_profile

    prof = finish_profile(load_profile(HOSTBOUND))
    fit = prof.fits["host.eager_step"]
    direct = fit_eager_host(prof.measurements, H100)
    assert fit.n_points == len(direct.points) == 11  # the 10 of HOST_DISPATCH_S + ResNet-50 b32
    assert fit.values["per_kernel_s"] == pytest.approx(direct.per_kernel_s)
    assert prof.compute_params is None or prof.compute_params.host_dispatch_s == pytest.approx(
        direct.per_kernel_s
    )
