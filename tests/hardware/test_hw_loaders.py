"""Loader errors: small temporary catalogue files, each with one defect, must fail clearly."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel import units
from perfmodel.errors import ConfigError
from perfmodel.hardware import read_cpus, read_gpus, read_links

GPU_OK = """
[[gpu]]
name = "TEST-GPU"
aliases = ["tg"]
architecture = "Volta"
form_factor = "PCIe"
sm_count = 80
boost_clock_GHz = 1.5
memory_bytes = 17179869184
memory_bandwidth_GBps = 900.0
l2_MiB = 6.0
tdp_W = 250
pcie_gen = 3
[gpu.peak_TFLOPS]
fp32 = 15.0
fp16 = 120.0
[gpu.sources]
compute = "test datasheet, compute table"
memory = "test datasheet, memory table"
sm = "test whitepaper, table 1"
board = "test datasheet, board table"
"""

LINK_OK = """
[[link]]
name = "test-link"
aliases = ["tl"]
family = "ethernet"
protocol = "tcp"
bandwidth_Gbps = 40
efficiency = 0.8
latency_us = 25.0
[link.sources]
bandwidth = "IEEE 802.3ba"
efficiency = "framing"
latency = "kernel stack"
"""

CPU_OK = """
[[cpu]]
name = "test-cpu"
vendor = "Intel"
architecture = "Broadwell-EP"
cores = 8
base_clock_GHz = 2.0
fp32_flop_per_cycle = 32
memory_channels = 4
memory_bandwidth_GBps = 68.3
pcie_lanes = 40
pcie_gen = 3
socket_link = "qpi"
socket_links = 2
[cpu.sources]
compute = "ark"
memory = "ark"
io = "ark"
"""


def _replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_valid_files_parse(write_toml) -> None:
    gpu = read_gpus(write_toml(GPU_OK))["TEST-GPU"]
    assert gpu.memory_bytes == 16 * units.GiB
    assert gpu.l2_bytes == 6 * units.MiB
    assert gpu.peak("fp16") == pytest.approx(120e12)
    assert gpu.compute_capability is None  # not stated
    cc = read_gpus(write_toml(_replace(GPU_OK, "sm_count", 'compute_capability = "7.0"\nsm_count')))
    assert cc["TEST-GPU"].compute_capability == (7, 0)
    link = read_links(write_toml(LINK_OK))["test-link"]
    assert link.bandwidth_Bps == pytest.approx(5e9)
    assert link.latency_s == pytest.approx(25e-6)
    cpu = read_cpus(write_toml(CPU_OK))["test-cpu"]
    assert cpu.socket_link == "qpi-9.6"  # alias resolved to the canonical link name
    assert cpu.peak_fp32_flops == pytest.approx(8 * 2e9 * 32)


@pytest.mark.parametrize(
    ("read", "text", "name", "key"),
    [
        (read_gpus, GPU_OK, "TEST-GPU", "compute = "),
        (read_links, LINK_OK, "test-link", "latency = "),
        (read_cpus, CPU_OK, "test-cpu", "io = "),
    ],
)
def test_sources_are_frozen_text(write_toml, read, text: str, name: str, key: str) -> None:
    """Each catalogue's ``sources`` field comes from the one reader of the table
    (``_catalogue.source_table``): frozen, keys and values as text (a number written as a source
    is kept as its text), for GPUs, links and CPUs alike."""
    value = text.split(key, 1)[1].split("\n", 1)[0]
    spec = read(write_toml(_replace(text, key + value, key + "2019")))[name]
    assert spec.sources[key.split()[0]] == "2019"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.sources.items())
    with pytest.raises(TypeError):
        spec.sources["notes"] = "edited"  # type: ignore[index]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('form_factor = "PCIe"', 'form_factor = "PCIe"\nwarp_size = 32', "unknown key"),
        ('architecture = "Volta"\n', "", "missing key 'architecture'"),
        ("memory_bandwidth_GBps = 900.0", "memory_bandwidth_GBps = -900.0", "-900.0"),
        ("memory_bandwidth_GBps = 900.0", 'memory_bandwidth_GBps = "fast"', "not a number"),
        ("sm_count = 80", "sm_count = 80.5", "integer"),
        ("fp16 = 120.0", "fp16 = 0.0", "fp16"),
        ("fp16 = 120.0", "fp12 = 120.0", "fp12"),
        ('board = "test datasheet, board table"\n', "", "no source for board"),
        ('memory = "test datasheet, memory table"', 'memory = " "', "no source for memory"),
        ("memory_bytes = 17179869184\n", "", "memory_bytes or memory_GB"),
        ("l2_MiB = 6.0", "l2_MiB = 6.0\nl2_MB = 6.0", "not both"),
        (
            'architecture = "Volta"',
            'architecture = "Volta"\ncompute_capability = "7"',
            "major.minor",
        ),
        ('architecture = "Volta"', 'architecture = "Volta"\ncompute_capability = "sm70"', "'sm70'"),
    ],
)
def test_gpu_file_errors(write_toml, old: str, new: str, message: str) -> None:
    path = write_toml(_replace(GPU_OK, old, new), "gpus.toml")
    with pytest.raises(ConfigError, match=message) as info:
        read_gpus(path)
    assert "gpus.toml" in str(info.value.args[0]) and "TEST-GPU" in info.value.args[0]


def test_gpu_duplicate_alias_is_an_error(write_toml) -> None:
    second = GPU_OK.replace('name = "TEST-GPU"', 'name = "OTHER-GPU"')
    with pytest.raises(ConfigError, match="alias 'tg' already names TEST-GPU"):
        read_gpus(write_toml(GPU_OK + second))


def test_gpu_duplicate_name_is_an_error(write_toml) -> None:
    second = GPU_OK.replace('aliases = ["tg"]', "aliases = []")
    with pytest.raises(ConfigError, match="duplicate GPU name"):
        read_gpus(write_toml(GPU_OK + second))


def test_invalid_toml_and_missing_file(write_toml, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid TOML"):
        read_gpus(write_toml("[[gpu]\nname = 1"))
    with pytest.raises(ConfigError, match="file not found"):
        read_links(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="top-level"):
        read_cpus(write_toml("[cpus]\nname = 'x'\n"))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('protocol = "tcp"', 'protocol = "tcp"\nmtu = 9000', "unknown key"),
        ("latency_us = 25.0\n", "", "missing key 'latency_us'"),
        ("bandwidth_Gbps = 40", "bandwidth_Gbps = -40", "non-positive bandwidth"),
        ("bandwidth_Gbps = 40", "bandwidth_Gbps = 40\nbandwidth_GBps = 5", "exactly one"),
        ("efficiency = 0.8", "efficiency = 1.2", "efficiency 1.2"),
        ("latency_us = 25.0", "latency_us = -1.0", "negative latency"),
        ('family = "ethernet"', 'family = "carrier-pigeon"', "carrier-pigeon"),
        ('latency = "kernel stack"\n', "", "no source for latency"),
    ],
)
def test_link_file_errors(write_toml, old: str, new: str, message: str) -> None:
    path = write_toml(_replace(LINK_OK, old, new), "links.toml")
    with pytest.raises(ConfigError, match=message) as info:
        read_links(path)
    assert "links.toml" in info.value.args[0] and "test-link" in info.value.args[0]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('vendor = "Intel"', 'vendor = "Intel"\nsmt = true', "unknown key"),
        ("cores = 8\n", "", "missing key 'cores'"),
        ("memory_bandwidth_GBps = 68.3", "memory_bandwidth_GBps = -68.3", "-68.3"),
        ('socket_link = "qpi"', 'socket_link = "hypertransport"', "hypertransport"),
        ('io = "ark"\n', "", "no source for io"),
    ],
)
def test_cpu_file_errors(write_toml, old: str, new: str, message: str) -> None:
    path = write_toml(_replace(CPU_OK, old, new), "cpus.toml")
    with pytest.raises(ConfigError, match=message) as info:
        read_cpus(path)
    assert "cpus.toml" in info.value.args[0]


def _read_link_text(text: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "links.toml"
        path.write_text(text)
        return read_links(path)["test-link"]


@settings(max_examples=40, deadline=None)
@given(
    gbps=st.floats(min_value=1e-3, max_value=1e4, allow_nan=False),
    eff=st.floats(min_value=0.01, max_value=1.0),
    lat=st.floats(min_value=0.0, max_value=1e3),
)
def test_link_units_round_trip(gbps: float, eff: float, lat: float) -> None:
    text = (
        LINK_OK.replace("bandwidth_Gbps = 40", f"bandwidth_Gbps = {gbps!r}")
        .replace("efficiency = 0.8", f"efficiency = {eff!r}")
        .replace("latency_us = 25.0", f"latency_us = {lat!r}")
    )
    link = _read_link_text(text)
    assert link.bandwidth_Bps == pytest.approx(gbps * 1e9 / 8)
    assert link.effective_bandwidth_Bps == pytest.approx(gbps * 1e9 / 8 * eff)
    assert link.latency_s == pytest.approx(lat * 1e-6)


@settings(max_examples=25, deadline=None)
@given(gbps=st.floats(max_value=0.0, allow_nan=False, allow_infinity=False))
def test_non_positive_bandwidth_always_rejected(gbps: float) -> None:
    with pytest.raises(ConfigError):
        _read_link_text(LINK_OK.replace("bandwidth_Gbps = 40", f"bandwidth_Gbps = {gbps!r}"))
