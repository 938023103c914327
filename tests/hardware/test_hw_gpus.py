"""GPU catalogue: every entry parses and is sourced; physical invariants; golden datasheet values."""

from __future__ import annotations

import pytest
from gpus_2026 import GPUS_2026  # the entries appended for issue 25 (test_hw_gpus_2026.py)

from perfmodel import units
from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError, UnknownHardwareError
from perfmodel.hardware import get_gpu, get_link, list_gpus
from perfmodel.hardware.gpus import SOURCE_GROUPS

CANONICAL = (
    "K20", "K80", "M40", "P100-PCIE-12GB", "P100-PCIE-16GB", "P100-SXM2-16GB", "GTX-1080-Ti",
    "TITAN-X-MAXWELL", "TITAN-X-PASCAL", "TITAN-XP", "V100-PCIE-16GB", "V100-SXM2-16GB",
    "V100-SXM2-32GB", "V100-SXM3-32GB", "T4", "RTX-3090", "RTX-4090", "A100-PCIE-40GB",
    "A100-PCIE-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "L40S", "H100-PCIE-80GB",
    "H100-SXM5-80GB", "H100-SXM5-64GB", "H100-SXM5-96GB-500W", "H200-SXM-141GB",
    "B200-SXM-180GB",
)  # fmt: skip

ARCH_ORDER = (
    "Kepler",
    "Maxwell",
    "Pascal",
    "Volta",
    "Turing",
    "Ampere",
    "Ada",
    "Hopper",
    "Blackwell",
)
TENSOR_CORE_ARCHS = set(ARCH_ORDER[3:])

# FP32 CUDA cores per SM, from the architecture whitepapers (independent of the catalogue).
CORES_PER_SM = {
    "K20": 192, "K80": 192, "M40": 128, "TITAN-X-MAXWELL": 128, "P100-PCIE-12GB": 64,
    "P100-PCIE-16GB": 64, "P100-SXM2-16GB": 64, "GTX-1080-Ti": 128, "TITAN-X-PASCAL": 128,
    "TITAN-XP": 128, "V100-PCIE-16GB": 64, "V100-SXM2-16GB": 64, "V100-SXM2-32GB": 64,
    "V100-SXM3-32GB": 64, "T4": 64, "RTX-3090": 128, "RTX-4090": 128, "A100-PCIE-40GB": 64,
    "A100-PCIE-80GB": 64, "A100-SXM4-40GB": 64, "A100-SXM4-80GB": 64, "L40S": 128,
    "H100-PCIE-80GB": 128, "H100-SXM5-80GB": 128, "H100-SXM5-64GB": 128,
    "H100-SXM5-96GB-500W": 128, "H200-SXM-141GB": 128, "B200-SXM-180GB": 128,
}  # fmt: skip

# Sane ranges per generation: (memory GiB min, max), (bandwidth GB/s min, max).
GENERATION_RANGES = {
    "Kepler": ((4, 12), (150, 300)),
    "Maxwell": ((12, 24), (250, 350)),
    "Pascal": ((11, 16), (450, 750)),
    "Volta": ((16, 32), (850, 1000)),
    "Turing": ((16, 48), (300, 700)),
    "Ampere": ((24, 80), (900, 2100)),
    "Ada": ((24, 48), (800, 1100)),
    "Hopper": ((64, 141), (1900, 4900)),
    "Blackwell": ((180, 192), (7500, 8200)),
}


def test_every_canonical_name_is_present_and_nothing_else() -> None:
    names = [g.name for g in list_gpus()]
    assert len(names) == len(set(names))
    assert set(names) == set(CANONICAL) | set(GPUS_2026)


@pytest.mark.parametrize("name", CANONICAL)
def test_entry_is_sourced_for_every_group_of_numbers(name: str) -> None:
    gpu = get_gpu(name)
    # Every GPU in this catalogue states the four datasheet groups; "achieved" (measured or
    # derived rates) only where the entry has such numbers.
    for group in SOURCE_GROUPS:
        if group == "achieved" and not (gpu.sustained_flops or gpu.burst_flops):
            continue
        assert len(gpu.sources.get(group, "").strip()) > 15, (name, group)
    assert gpu.boost_clock_hz and gpu.tdp_w and gpu.pcie_gen
    assert gpu.architecture in ARCH_ORDER


@pytest.mark.parametrize("name", CANONICAL)
def test_peaks_positive_and_ordered(name: str) -> None:
    gpu = get_gpu(name)
    assert all(v > 0 for v in gpu.peak_flops.values())
    assert DType.FP32 in gpu.peak_flops and DType.FP64 in gpu.peak_flops
    fp32 = gpu.peak_flops[DType.FP32]
    assert gpu.peak_flops[DType.FP64] <= fp32
    if gpu.architecture in TENSOR_CORE_ARCHS:
        assert gpu.peak_flops[DType.FP16] >= 1.9 * fp32, "tensor FP16 must beat CUDA-core FP32"
        for d in (DType.TF32, DType.BF16):
            if d in gpu.peak_flops:
                assert gpu.peak_flops[d] >= fp32
        if DType.FP8 in gpu.peak_flops:
            fp8, fp16 = gpu.peak_flops[DType.FP8], gpu.peak_flops[DType.FP16]
            assert fp8 == pytest.approx(2 * fp16, rel=0.02)  # L40S datasheet: 733 vs 2 x 362.05
        if DType.BF16 in gpu.peak_flops:
            assert gpu.peak_flops[DType.BF16] == gpu.peak_flops[DType.FP16]
    else:
        # No tensor cores: no TF32/BF16/FP8 units, FP16 at most 2x FP32 (GP100).
        assert not {DType.TF32, DType.BF16, DType.FP8} & set(gpu.peak_flops)
        assert gpu.peak_flops[DType.FP16] <= 2 * fp32 * 1.01  # datasheet rounding


@pytest.mark.parametrize("name", CANONICAL)
def test_fp32_peak_matches_cores_times_clock(name: str) -> None:
    """FP32 peak = SMs x cores/SM x 2 x boost clock, within the rounding of datasheets."""
    gpu = get_gpu(name)
    assert gpu.boost_clock_hz is not None
    expected = gpu.sm_count * CORES_PER_SM[name] * 2 * gpu.boost_clock_hz
    assert gpu.peak_flops[DType.FP32] == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("name", CANONICAL)
def test_memory_and_bandwidth_sane_for_generation(name: str) -> None:
    gpu = get_gpu(name)
    (mem_lo, mem_hi), (bw_lo, bw_hi) = GENERATION_RANGES[gpu.architecture]
    assert mem_lo * units.GiB <= gpu.memory_bytes <= mem_hi * units.GiB
    assert bw_lo * units.GB <= gpu.memory_bandwidth_Bps <= bw_hi * units.GB
    if gpu.l2_bytes is not None:
        assert units.MiB <= gpu.l2_bytes <= 128 * units.MiB


def test_memory_sizes_are_binary_multiples() -> None:
    for gpu in list_gpus():
        assert gpu.memory_bytes % units.GiB == 0, gpu.name


def test_nvlink_generation_has_a_link_technology() -> None:
    for gpu in list_gpus():
        if gpu.nvlink_links:
            assert gpu.nvlink_gen is not None
            assert get_link(f"nvlink{gpu.nvlink_gen}").family.value == "nvlink"
        else:
            assert gpu.nvlink_gen is None


def test_aliases_unique_and_resolve_case_insensitively() -> None:
    seen: dict[str, str] = {}
    for gpu in list_gpus():
        for key in (gpu.name, *gpu.aliases):
            assert key.lower() not in seen or seen[key.lower()] == gpu.name, key
            seen[key.lower()] = gpu.name
            assert get_gpu(key.upper()) is gpu


# ----------------------------------------------------------------------------- golden values


def test_golden_h100_sxm5_bf16_dense() -> None:
    assert get_gpu("H100-SXM5-80GB").peak(DType.BF16) == pytest.approx(989.4e12)


def test_golden_v100_sxm2_fp16_tensor() -> None:
    assert get_gpu("V100-SXM2-16GB").peak("fp16") == pytest.approx(125e12)


def test_golden_memory_and_consumer_rates() -> None:
    assert get_gpu("v100").memory_bytes == 16 * 2**30
    assert get_gpu("A100-SXM4-80GB").memory_bandwidth_Bps == pytest.approx(2039e9)
    gtx = get_gpu("GTX-1080-Ti")
    assert gtx.peak("fp16") == pytest.approx(gtx.peak("fp32") / 64, rel=0.01)
    p100 = get_gpu("P100-SXM2-16GB")
    assert p100.peak("fp16") == pytest.approx(2 * p100.peak("fp32"), rel=0.01)
    # GeForce tensor FP16 with FP32 accumulate is half rate: 71 (not 142) on the RTX 3090.
    assert get_gpu("RTX-3090").peak("fp16") == pytest.approx(71e12)
    assert get_gpu("RTX-4090").peak("fp16") == pytest.approx(165.2e12)
    k80 = get_gpu("K80")
    assert "TWO" in k80.notes and k80.memory_bytes == 12 * 2**30


def test_peak_fallbacks_follow_frameworks() -> None:
    assert get_gpu("K80").peak("tf32") == get_gpu("K80").peak("fp32")
    assert get_gpu("V100").peak("bf16") == get_gpu("V100").peak("fp32")
    with pytest.raises(ConfigError, match="fp8"):
        get_gpu("A100-SXM4-80GB").peak("fp8")
    with pytest.raises(ConfigError, match="bf16"):
        get_gpu("P100-SXM2-16GB").peak("bf16")


def test_unknown_gpu_names_close_matches() -> None:
    with pytest.raises(UnknownHardwareError) as info:
        get_gpu("H100-SXM5-80G")
    assert info.value.value == "H100-SXM5-80G"
    assert "H100-SXM5-80GB" in info.value.args[0]
