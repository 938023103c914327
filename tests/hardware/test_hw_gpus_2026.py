"""The GPUs of the 2026 market (issue 25): sourced, datasheet only, physically consistent."""

from __future__ import annotations

import pytest
from gpus_2026 import GPUS_2026

from perfmodel import units
from perfmodel.cli import main
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu, get_link, read_gpus
from perfmodel.hardware.gpus import SOURCE_GROUPS, datasheet_note

# FP32 lanes per SM (NVIDIA) or vector FP32 FLOP per CU per clock / 2 (AMD CDNA 3/4: 256 FP32
# FLOP/clk per CU = 128 FMA lanes), from the architecture whitepapers, not the catalogue.
LANES_PER_SM = {
    "RTX-5090": 128,
    "RTX-PRO-6000-BLACKWELL": 128,
    "L4": 128,
    "L40": 128,
    "A10G": 128,
    "MI300X": 128,
    "MI325X": 128,
    "MI355X": 128,
}


#: The 2026 GPUs with a published achieved matmul rate (their own, or a stated sibling's):
#: B300 and GB200 (stas00/ml-engineering MAMF), GB300 (as B300), AMD's (Max-Achievable FLOPs).
MEASURED_2026 = {"B300-SXM-288GB", "GB200-186GB", "GB300-288GB", "MI300X", "MI325X", "MI355X"}


@pytest.mark.parametrize("name", GPUS_2026)
def test_sourced_and_datasheet_only_without_a_measured_ceiling(name: str) -> None:
    gpu = get_gpu(name)
    for group in SOURCE_GROUPS:
        if group == "achieved":  # optional: measured rates, or published ones for the reader
            continue
        assert len(gpu.sources.get(group, "").strip()) > 15, (name, group)
    assert gpu.tdp_w and gpu.memory_bytes % units.GiB == 0
    note = datasheet_note(gpu)
    if name not in MEASURED_2026:
        assert gpu.datasheet_only and not gpu.sustained_flops and not gpu.burst_flops
        assert note is not None
        assert note.startswith(f"hardware: {gpu.name} figures are datasheet only")
        return
    assert not gpu.datasheet_only
    assert len(gpu.sources.get("achieved", "")) > 100
    for fmt in ("bf16", "fp8"):  # every ceiling below the datasheet peak, sustained <= burst
        sustained, burst = gpu.gemm_ceiling(fmt), gpu.gemm_ceiling(fmt, burst=True)
        assert sustained is not None and burst is not None
        assert 0.4 * gpu.peak(fmt) < sustained.flops <= burst.flops < gpu.peak(fmt)
    # the AMD parts say what is still datasheet only; NVIDIA's share the measured kernel tables
    assert (note is not None) == (gpu.vendor != "NVIDIA")


@pytest.mark.parametrize("name", GPUS_2026)
def test_peaks_ordered(name: str) -> None:
    gpu = get_gpu(name)
    p = gpu.peak_flops
    assert p[DType.FP64] <= p[DType.FP32] < p[DType.FP16]
    assert p[DType.BF16] == p[DType.FP16]
    if DType.FP8 in p:
        assert p[DType.FP8] == pytest.approx(2 * p[DType.FP16], rel=0.01)
    if DType.FP4 in p:
        assert p[DType.FP4] >= p.get(DType.FP8, p[DType.FP16])
    if DType.FP6 in p:
        assert p[DType.FP8] <= p[DType.FP6] <= p[DType.FP4]


@pytest.mark.parametrize("name", sorted(LANES_PER_SM))
def test_fp32_is_lanes_times_clock(name: str) -> None:
    gpu = get_gpu(name)
    assert gpu.boost_clock_hz is not None
    expected = gpu.sm_count * LANES_PER_SM[name] * 2 * gpu.boost_clock_hz
    assert gpu.peak_flops[DType.FP32] == pytest.approx(expected, rel=0.02)


def test_golden_datasheet_values() -> None:
    # AMD MI300X data sheet: 1307.4 TFLOPS dense BF16, 192 GB HBM3 (8 x 24 GiB stacks)
    mi = get_gpu("mi300x")
    assert mi.peak("bf16") == pytest.approx(1307.4e12)
    assert mi.memory_bytes == 192 * 2**30 and mi.vendor == "AMD"
    # GB200 NVL72 datasheet: 40 PF FP4 per superchip with sparsity -> 10 PF dense per GPU
    assert get_gpu("gb200").peak("fp4") == pytest.approx(10e15)
    # HGX B300: 105 PF dense FP4 per 8 GPUs
    assert get_gpu("b300").peak("fp4") == pytest.approx(105e15 / 8)
    assert get_gpu("b300").memory_bytes == 288 * 2**30
    # MI355X: no TF32 matrix path, TF32 falls back to the FP32 vector rate
    mi355 = get_gpu("mi355x")
    assert mi355.peak("tf32") == mi355.peak("fp32") == pytest.approx(157.3e12)


def test_infinity_fabric_only_on_amd() -> None:
    for name in GPUS_2026:
        gpu = get_gpu(name)
        if gpu.vendor == "AMD":
            assert gpu.infinity_fabric_links == 7 and gpu.nvlink_links == 0
            assert gpu.infinity_fabric_link_Bps in (64e9, 76.8e9)
        else:
            assert gpu.infinity_fabric_links == 0 and gpu.infinity_fabric_link_Bps is None
    # the topology's link technology carries the same per-direction rate as the GPU entry
    assert get_link("xgmi-gfx94").bandwidth_Bps == get_gpu("mi300x").infinity_fabric_link_Bps
    assert get_link("xgmi-gfx950").bandwidth_Bps == get_gpu("mi355x").infinity_fabric_link_Bps


def test_measured_gpus_are_not_datasheet_only() -> None:
    assert not get_gpu("H100-SXM5-80GB").datasheet_only
    assert datasheet_note(get_gpu("B200-SXM-180GB")) is None
    assert "Max-Achievable" in (datasheet_note(get_gpu("mi300x")) or "")


MINIMAL = """
[[gpu]]
name = "X1"
architecture = "CDNA3"
form_factor = "OAM"
sm_count = 4
memory_bytes = 1073741824
memory_bandwidth_GBps = 100.0
{extra}
[gpu.peak_TFLOPS]
fp32 = 1.0
[gpu.sources]
compute = "test"
memory = "test"
sm = "test"
board = "test"
"""


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("infinity_fabric_links = 7", "together"),
        ("infinity_fabric_GBps = 64.0", "together"),
        ("datasheet_only = 1", "datasheet_only"),
        ("infinity_fabric_links = -1\ninfinity_fabric_GBps = 64.0", "non-negative"),
    ],
)
def test_new_fields_checked(tmp_path, extra: str, message: str) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(MINIMAL.format(extra=extra))
    with pytest.raises(ConfigError, match=message):
        read_gpus(path)


def test_new_fields_need_a_board_source(tmp_path) -> None:
    path = tmp_path / "gpus.toml"
    path.write_text(
        MINIMAL.format(extra="infinity_fabric_links = 7\ninfinity_fabric_GBps = 64.0").replace(
            'board = "test"\n', ""
        )
    )
    with pytest.raises(ConfigError, match="no source for board"):
        read_gpus(path)


def test_fp4_fp6_are_catalogue_formats_only() -> None:
    assert (DType.FP4.bits, DType.FP6.bits, DType.FP8.bits) == (4, 6, 8)
    assert DType.parse("FP4") is DType.FP4
    with pytest.raises(ConfigError, match="packed 4-bit"):
        _ = DType.FP4.itemsize
    with pytest.raises(ConfigError, match="packed 6-bit"):
        _ = DType.FP6.itemsize
    # no training precision runs them: the existing predictions cannot change
    assert "fp4" not in {p.value for p in Precision} and "fp6" not in {p.value for p in Precision}
    with pytest.raises(ConfigError, match="fp4"):
        get_gpu("H100-SXM5-80GB").peak("fp4")


def test_hw_gpus_marks_datasheet_only_and_infinity_fabric(capsys) -> None:
    assert main(["hw", "gpus"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isalnum()}
    assert rows["L40"].split()[1] == "*" and "7x IF 64" in rows["MI300X"]
    assert rows["MI300X"].split()[1] != "*"  # AMD's measured Max-Achievable FLOPs
    assert rows["H100-SXM5-80GB"].split()[1] != "*"
    assert "datasheet only" in out
    assert main(["hw", "show", "mi355x"]) == 0
    shown = capsys.readouterr().out
    assert "Infinity Fabric    7 links x 76.8 GB/s per direction" in shown
    assert "sustained GEMM     bf16 1565 TFLOPS, fp8 2817 TFLOPS" in shown
    assert "datasheet only" not in shown
    assert main(["hw", "show", "l4"]) == 0
    assert "datasheet only     yes" in capsys.readouterr().out
