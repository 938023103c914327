"""Achieved GEMM ceilings of the GPU catalogue: measured, derived and power-limited rates."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu, read_gpus
from perfmodel.hardware.gpus import (
    SPLIT_ACCUMULATION_FACTOR,
    SUSTAINED_OVER_BURST,
    GemmFormat,
    power_limited_clock_ratio,
)

T = 1e12


def test_h100_sustained_is_the_measured_h200_msmf() -> None:
    h100 = get_gpu("H100-SXM5-80GB")
    assert h100.gemm_ceiling(GemmFormat.BF16).flops == pytest.approx(755 * T)
    assert h100.gemm_ceiling(DType.FP8).flops == pytest.approx(1354 * T)
    assert h100.gemm_ceiling(GemmFormat.BF16, burst=True).flops == pytest.approx(794.5 * T)
    # fp16 runs at the bf16 tensor rate (equal datasheet peaks)
    assert h100.gemm_ceiling(GemmFormat.FP16).flops == pytest.approx(755 * T)


def test_power_limited_part_is_derated_by_the_cube_law_by_hand() -> None:
    # ((500 - 88) / (700 - 88)) ** (1/3) = 0.87643; 755 x 0.87643 = 661.7 TFLOP/s
    part = get_gpu("H100-SXM5-96GB-500W")
    ratio = (412 / 612) ** (1 / 3)
    assert part.power_clock_ratio() == pytest.approx(ratio)
    assert part.gemm_ceiling(GemmFormat.BF16).flops == pytest.approx(755 * T * ratio)
    assert part.gemm_ceiling(GemmFormat.FP8).flops == pytest.approx(1354 * T * ratio)
    assert "power limit 500/700 W" in part.gemm_ceiling(GemmFormat.BF16).basis
    # a burst is not power-limited: the 700 W part's burst
    assert part.gemm_ceiling(GemmFormat.BF16, burst=True).flops == pytest.approx(794.5 * T)
    assert part.memory_bandwidth_Bps == pytest.approx(2410e9)
    assert part.tdp_w == 500


def test_burst_only_entry_gets_the_architecture_ratio() -> None:
    a100 = get_gpu("A100-SXM4-80GB")
    c = a100.gemm_ceiling(GemmFormat.BF16)
    assert c.flops == pytest.approx(271.2 * T * 258 / 285)
    assert "burst" in c.basis
    assert SUSTAINED_OVER_BURST["Ampere"] == pytest.approx(258 / 285)


def test_split_accumulation_costs_on_hopper_not_on_blackwell() -> None:
    h = get_gpu("H200-SXM-141GB")
    assert h.gemm_ceiling(GemmFormat.FP8_SPLIT).flops == pytest.approx(1354 * T / 1.15)
    b = get_gpu("B200-SXM-180GB")
    assert b.gemm_ceiling(GemmFormat.FP8_SPLIT).flops == b.gemm_ceiling(GemmFormat.FP8).flops
    assert SPLIT_ACCUMULATION_FACTOR["Blackwell"] == 1.0


def test_tf32_takes_the_bf16_fraction_and_unknown_gpus_state_nothing() -> None:
    b = get_gpu("B200-SXM-180GB")
    frac = 1439 / 2250
    assert b.gemm_ceiling(GemmFormat.TF32).flops == pytest.approx(frac * 1125 * T)
    v100 = get_gpu("V100-SXM2-16GB")
    assert v100.gemm_ceiling(GemmFormat.FP16) is None  # datasheet only
    assert get_gpu("A100-SXM4-80GB").gemm_ceiling(GemmFormat.FP8_SPLIT) is None  # no FP8


def test_every_sustained_rate_is_below_its_peak_and_its_burst() -> None:
    from perfmodel.hardware import list_gpus

    for g in list_gpus():
        for f in GemmFormat:
            s, b = g.gemm_ceiling(f), g.gemm_ceiling(f, burst=True)
            if s is None:
                continue
            if f.dtype is not None:
                assert s.flops < g.peak_flops[f.dtype], (g.name, f)
            if b is not None:
                assert s.flops <= b.flops, (g.name, f)


@given(
    p=st.floats(100.0, 1500.0),
    q=st.floats(100.0, 1500.0),
    idle=st.floats(10.0, 90.0),
)
def test_power_ratio_is_monotone_and_capped(p: float, q: float, idle: float) -> None:
    ref = 700.0
    rp = power_limited_clock_ratio(p, ref, idle)
    rq = power_limited_clock_ratio(q, ref, idle)
    assert 0 < rp <= 1 and 0 < rq <= 1
    if p <= q:
        assert rp <= rq
    if p >= ref:
        assert rp == 1.0


def test_power_ratio_refuses_a_limit_at_idle() -> None:
    with pytest.raises(ConfigError):
        power_limited_clock_ratio(80.0, 700.0, 88.0)


_ENTRY = """
[[gpu]]
name = "X"
architecture = "Hopper"
form_factor = "SXM5"
sm_count = 132
memory_GB = 80.0
memory_bandwidth_GBps = 3000.0
tdp_W = 500
{extra}
[gpu.peak_TFLOPS]
bf16 = 1000.0
{tables}
[gpu.sources]
compute = "c"
memory = "m"
sm = "s"
board = "b"
{achieved}
"""


def _write(tmp_path: Path, *, extra: str = "", tables: str = "", achieved: str = "") -> Path:
    p = tmp_path / "gpus.toml"
    p.write_text(_ENTRY.format(extra=extra, tables=tables, achieved=achieved))
    return p


def test_loader_rejects_an_unsourced_or_unknown_rate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="achieved"):
        read_gpus(_write(tmp_path, tables="[gpu.sustained_TFLOPS]\nbf16 = 700.0"))
    with pytest.raises(ConfigError, match="fp7"):
        read_gpus(
            _write(
                tmp_path, tables="[gpu.sustained_TFLOPS]\nfp7 = 700.0", achieved='achieved = "x"'
            )
        )
    with pytest.raises(ConfigError):
        read_gpus(
            _write(tmp_path, tables="[gpu.burst_TFLOPS]\nbf16 = -1.0", achieved='achieved = "x"')
        )


def test_power_limited_entry_needs_its_idle_power(tmp_path: Path) -> None:
    spec = read_gpus(
        _write(
            tmp_path,
            extra="sustained_power_W = 700",
            tables="[gpu.sustained_TFLOPS]\nbf16 = 700.0",
            achieved='achieved = "measured"',
        )
    )["X"]
    with pytest.raises(ConfigError, match="idle_W"):
        spec.gemm_ceiling(GemmFormat.BF16)
