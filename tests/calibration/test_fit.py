"""Fitting recovers known parameters from synthetic noisy measurements and reports uncertainty."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.calibration.fit import (
    GEMM_BW_KINDS,
    fit_alpha_beta,
    fit_compute_params,
    fit_log_model,
    fit_streams,
    measurement_layer,
)
from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.dtypes import DType
from perfmodel.errors import CalibrationError
from perfmodel.hardware import get_gpu


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    alpha_us=st.floats(0.5, 50.0),
    bw_GBps=st.floats(5.0, 5000.0),
    noise=st.floats(0.0, 0.05),
    seed=st.integers(0, 2**16),
)
def test_alpha_beta_recovered_within_noise(alpha_us, bw_GBps, noise, seed):
    """Latency and bandwidth come back within a few standard errors, and the errors are honest."""
    rng = np.random.default_rng(seed)
    alpha, bw = alpha_us * 1e-6, bw_GBps * 1e9
    sizes = np.geomspace(64, 1e9, 16)
    times = (alpha + sizes / bw) * np.exp(rng.normal(0.0, noise, sizes.size))
    r = fit_alpha_beta(sizes, times)
    for name, truth in (("alpha_s", alpha), ("bandwidth_Bps", bw)):
        got, se = r.values[name], r.stderr[name]
        assert math.isfinite(se) and se >= 0
        # within 5 sigma or 3x the noise level (the robust loss down-weights, sigma is approximate)
        assert abs(got - truth) <= max(5 * se, 3 * noise * truth + 1e-3 * truth), (
            name,
            got,
            truth,
            se,
        )
    assert r.rms_log_residual <= 3 * noise + 1e-6


def test_noise_free_is_exact_and_uncertainty_shrinks_with_noise():
    sizes = np.geomspace(1e3, 1e9, 12)
    exact = fit_alpha_beta(sizes, 5e-6 + sizes / 2e11)
    assert exact.values["bandwidth_Bps"] == pytest.approx(2e11, rel=1e-6)
    assert exact.values["alpha_s"] == pytest.approx(5e-6, rel=1e-5)
    rng = np.random.default_rng(1)
    noisy = fit_alpha_beta(sizes, (5e-6 + sizes / 2e11) * np.exp(rng.normal(0, 0.05, sizes.size)))
    assert noisy.rel_stderr("bandwidth_Bps") > exact.rel_stderr("bandwidth_Bps")
    assert 0.005 < noisy.rel_stderr("bandwidth_Bps") < 0.2


def test_robust_loss_resists_an_outlier():
    sizes = np.geomspace(1e3, 1e9, 15)
    times = 5e-6 + sizes / 2e11
    times[-3] *= 3.0  # one point hit by a clock drop
    r = fit_alpha_beta(sizes, times)
    assert r.values["bandwidth_Bps"] == pytest.approx(2e11, rel=0.05)


def test_streams_concurrency():
    r = fit_streams([1, 2, 4, 8], [1e-3 * (1 + (n - 1) / 3.0) for n in (1, 2, 4, 8)])
    assert r.values["concurrency"] == pytest.approx(3.0, rel=1e-4)


def test_unidentifiable_parameter_reports_nan_and_keeps_start():
    x = np.geomspace(1, 100, 8)
    r = fit_log_model(lambda p: p["a"] * x + 0 * p["b"], 2.0 * x, {"a": 1.0, "b": 7.0})
    assert r.values["a"] == pytest.approx(2.0, rel=1e-6)
    assert r.values["b"] == pytest.approx(7.0, rel=1e-12) and math.isnan(r.stderr["b"])


def test_bad_input_is_a_calibration_error():
    with pytest.raises(CalibrationError, match="positive"):
        fit_log_model(lambda p: np.ones(2), [1.0, -1.0], {"a": 1.0})
    with pytest.raises(CalibrationError, match="no measurements"):
        fit_log_model(lambda p: np.ones(0), [], {"a": 1.0})


def _gemm(m, n, k, dtype, t):
    return Measurement(
        BenchKind.GEMM,
        f"gemm/{dtype}/m{m}-n{n}-k{k}-b1",
        {"m": m, "n": n, "k": k, "batch": 1, "dtype": dtype},
        TimingStats(t, t, t, t, 5),
        work_flop=2.0 * m * n * k,
    )


def _copy(nbytes, t):
    return Measurement(
        BenchKind.COPY,
        f"copy/{nbytes}",
        {"nbytes": nbytes},
        TimingStats(t, t, t, t, 5),
        work_bytes=2.0 * nbytes,
    )


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    peak_frac=st.floats(0.5, 0.95),
    mem_eff=st.floats(0.5, 0.95),
    launch_us=st.floats(2.0, 12.0),
    seed=st.integers(0, 1000),
)
def test_compute_params_recovered_through_compute_model(peak_frac, mem_eff, launch_us, seed):
    """Synthetic GEMM/copy timings from ComputeModel with known parameters (+3% noise) are fitted
    back: the achievable BF16 peak, memory efficiency and launch overhead.

    Derandomized (the same six draws every run): the noise is drawn, so the last check (the
    peak within 5 of its fitted standard errors, or 3%) fails on rare draws, e.g. peak 0.5,
    memory 0.5, launch 7 us, seed 43 (4.4% off against a 4.3% bound; 1 of 200 seeds there),
    which says the fit's standard error of the peak is somewhat small; a random draw in CI would
    fail a run now and then for that finding (session 14's closing note)."""
    gpu = get_gpu("H100-SXM5-80GB")
    truth = ComputeParams.for_gpu(gpu).with_updates(
        tensor_core_efficiency=1.0,
        cuda_core_efficiency=1.0,
        gemm_ceilings={},  # the truth's ceiling is its peak (no catalogue ceiling on top)
        memory_efficiency=mem_eff,
        kernel_launch_s=launch_us * 1e-6,
        peak_flops={
            **ComputeParams.for_gpu(gpu).peak_flops,
            DType.BF16: peak_frac * gpu.peak(DType.BF16),
        },
    )
    model = ComputeModel(gpu, truth)
    rng = np.random.default_rng(seed)
    ms = []
    shapes = [(s, s, s) for s in (512, 1024, 2048, 4096, 8192)] + [
        (m, 4096, 4096) for m in (1, 16, 64, 256)
    ]
    for m, n, k in shapes:
        probe = _gemm(m, n, k, "bf16", 1.0)
        layer, prec = measurement_layer(probe)
        t = model.layer_time(layer, prec).fwd_s * math.exp(rng.normal(0, 0.03))
        ms.append(_gemm(m, n, k, "bf16", t))
    for nbytes in (2**18, 2**22, 2**26, 2**30):
        probe = _copy(nbytes, 1.0)
        layer, prec = measurement_layer(probe)
        ms.append(
            _copy(nbytes, model.layer_time(layer, prec).fwd_s * math.exp(rng.normal(0, 0.03)))
        )
    params, res = fit_compute_params(
        ms, gpu, fields=("memory_efficiency", "kernel_launch_s"), kinds=GEMM_BW_KINDS
    )
    got_peak = params.peak_flops[DType.BF16]
    true_peak = truth.peak_flops[DType.BF16]
    assert got_peak == pytest.approx(true_peak, rel=0.08)
    assert params.memory_efficiency == pytest.approx(mem_eff, rel=0.08)
    assert params.kernel_launch_s == pytest.approx(launch_us * 1e-6, rel=0.25)
    for name in ("peak_flops.bf16", "memory_efficiency", "kernel_launch_s"):
        se = res.stderr[name]
        assert math.isfinite(se) and se > 0, name
    assert res.dof == len(ms) - 3
    # 5 standard errors read with Student's t of the fit's 10 residual degrees of freedom
    bound = res.summary("").halfwidth("peak_flops.bf16", 5)
    assert abs(got_peak - true_peak) <= max(bound, 0.03 * true_peak)


def test_compute_params_recovery_on_a_draw_the_normal_reading_understates() -> None:
    """Session 14's draw (promoted from a strict xfail by fix17): the peak is 4.4% off, 5.4 of
    its standard errors (0.82%): about a 1-in-3,300 event (two-sided) for Student's t with the
    fit's 10 residual degrees of freedom (the draw's residuals happen to be small, so ``s`` is),
    1 in 1.5 x 10^7 for the normal. The interval reads the errors with t (``FitSummary.halfwidth``)."""
    inner = test_compute_params_recovered_through_compute_model.hypothesis.inner_test
    inner(peak_frac=0.5, mem_eff=0.5, launch_us=7.0, seed=43)


def test_t_coverage_factor_golden() -> None:
    """Student's t quantiles (two-sided): t_10 at 95% is 2.228, t_1 at 95% 12.706 (any t
    table); no degrees of freedom known: the normal reading; none left: unbounded."""
    from perfmodel.calibration.profile import FitSummary, t_coverage_factor

    z95 = 1.959963984540054
    assert t_coverage_factor(z95, 10) == pytest.approx(2.228139, rel=1e-5)
    assert t_coverage_factor(z95, 1) == pytest.approx(12.706205, rel=1e-5)
    assert t_coverage_factor(2.0, None) == 2.0 and t_coverage_factor(2.0, 0) == math.inf
    assert t_coverage_factor(1.0, 10**6) == pytest.approx(1.0, rel=1e-5)
    fs = FitSummary("m", {"p": 2.0}, {"p": 0.1}, 12, 0.01, 0.01, dof=10)
    back = FitSummary.from_dict(fs.to_dict(), where="t")
    assert back == fs and back.halfwidth("p", z95) == pytest.approx(0.2228139, rel=1e-5)
    old = {k: v for k, v in fs.to_dict().items() if k != "dof"}  # a profile from before dof
    assert FitSummary.from_dict(old, where="t").halfwidth("p", 2.0) == pytest.approx(0.2)
