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


@pytest.mark.parametrize("name", GPUS_2026)
def test_sourced_and_datasheet_only(name: str) -> None:
    gpu = get_gpu(name)
    for group in SOURCE_GROUPS:
        if group == "achieved":  # optional: measured rates, or published ones for the reader
            continue
        assert len(gpu.sources.get(group, "").strip()) > 15, (name, group)
    assert gpu.datasheet_only
    note = datasheet_note(gpu)
    assert note is not None and note.startswith(f"hardware: {gpu.name} figures are datasheet only")
    assert gpu.tdp_w and gpu.memory_bytes % units.GiB == 0


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
    assert rows["MI300X"].split()[1] == "*" and "7x IF 64" in rows["MI300X"]
    assert rows["H100-SXM5-80GB"].split()[1] != "*"
    assert "datasheet only" in out
    assert main(["hw", "show", "mi355x"]) == 0
    shown = capsys.readouterr().out
    assert "Infinity Fabric    7 links x 76.8 GB/s per direction" in shown
    assert "datasheet only     yes" in shown
