"""CPU catalogue: required models, computed peaks, socket links in the link catalogue."""

from __future__ import annotations

import pytest

from perfmodel import units
from perfmodel.errors import UnknownHardwareError
from perfmodel.hardware import get_cpu, get_link, list_cpus, list_gpus, list_links
from perfmodel.hardware.cpus import SOURCE_KEYS

REQUIRED = (
    "xeon-e5-2620-v4", "xeon-e5-2680-v4", "xeon-e5-2698-v4", "xeon-gold-6148",
    "xeon-platinum-8168", "xeon-platinum-8380", "xeon-platinum-8480plus", "power9-20c",
    "power9-22c", "epyc-7742", "epyc-9654", "host-cpu",
)  # fmt: skip


def test_required_cpus_present() -> None:
    assert set(REQUIRED) <= {c.name for c in list_cpus()}


@pytest.mark.parametrize("name", REQUIRED)
def test_cpu_entry_consistent_and_sourced(name: str) -> None:
    cpu = get_cpu(name)
    for key in SOURCE_KEYS:
        assert len(cpu.sources[key].strip()) > 15, (name, key)
    assert cpu.sockets == 1
    assert cpu.peak_fp32_flops == pytest.approx(
        cpu.cores * cpu.base_clock_hz * cpu.fp32_flop_per_cycle
    )
    assert cpu.boost_clock_hz is None or cpu.boost_clock_hz >= cpu.base_clock_hz
    # DDR channel bandwidth: between DDR4-1600 and DDR5-6400 per channel (12.8-51.2 GB/s).
    per_channel = cpu.memory_bandwidth_Bps / cpu.memory_channels
    assert 12.8 * units.GB <= per_channel <= 51.2 * units.GB
    assert get_link(cpu.socket_link).family.value == "cpu"
    assert cpu.socket_interconnect_bandwidth_Bps == pytest.approx(
        cpu.socket_links * get_link(cpu.socket_link).bandwidth_Bps
    )


def test_golden_cpu_values() -> None:
    # Seed workstation CPU: 8 cores x 2.1 GHz x 32 FLOP/cycle (AVX2 FMA x2) = 537.6 GFLOP/s.
    e5 = get_cpu("E5-2620-V4")  # alias, case-insensitive
    assert e5.peak_fp32_flops == pytest.approx(537.6e9)
    assert e5.memory_bandwidth_Bps == pytest.approx(68.3e9)
    assert e5.socket_link == "qpi-8.0"
    assert get_cpu("power9").socket_link == "xbus-p9"
    assert get_cpu("epyc-9654").memory_bandwidth_Bps == pytest.approx(12 * 4800e6 * 8)


def test_names_unique_across_all_catalogues() -> None:
    """`perfmodel hw show NAME` searches GPUs, links and CPUs: a key must name one thing."""
    owner: dict[str, str] = {}
    for spec in (*list_gpus(), *list_links(), *list_cpus()):
        for key in (spec.name, *spec.aliases):
            assert owner.setdefault(key.lower(), spec.name) == spec.name, key


def test_unknown_cpu() -> None:
    with pytest.raises(UnknownHardwareError) as info:
        get_cpu("xeon-e5-2620-v3")
    assert "xeon-e5-2620-v4" in info.value.args[0]
