"""Link catalogue: canonical names, per-direction golden rates, latency classes, sources."""

from __future__ import annotations

import itertools

import pytest

from perfmodel import units
from perfmodel.errors import UnknownHardwareError
from perfmodel.hardware import LinkFamily, get_link, list_links
from perfmodel.hardware.links import SOURCE_KEYS

CANONICAL = (
    "pcie3-x8", "pcie3-x16", "pcie4-x8", "pcie4-x16", "pcie5-x8", "pcie5-x16",
    "nvlink1", "nvlink2", "nvlink3", "nvlink4", "nvlink5",
    "nvswitch-v1", "nvswitch-v2", "nvswitch-v3", "nvswitch-v4",
    "qpi-8.0", "qpi-9.6", "upi-10.4", "upi-11.2", "upi-16", "xbus-p9",
    "ib-fdr", "ib-edr", "ib-hdr", "ib-ndr", "ib-xdr",
    "eth-10g", "eth-25g", "eth-40g", "eth-50g", "eth-100g", "eth-200g", "eth-400g",
    "roce-25g", "roce-50g", "roce-100g", "roce-200g", "roce-400g",
)  # fmt: skip


def test_every_canonical_name_present_and_unique() -> None:
    names = [lk.name for lk in list_links()]
    assert len(names) == len(set(names))
    assert set(CANONICAL) <= set(names)


@pytest.mark.parametrize("name", CANONICAL)
def test_entry_sourced_and_physical(name: str) -> None:
    link = get_link(name)
    for key in SOURCE_KEYS:
        assert len(link.sources[key].strip()) > 15, (name, key)
    assert link.bandwidth_Bps > 0
    assert 0.25 <= link.efficiency <= 1.0
    assert 0 < link.effective_bandwidth_Bps <= link.bandwidth_Bps
    assert 0 < link.latency_s < 100 * units.us


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("pcie3", "pcie3-x16"),
        ("pcie4", "pcie4-x16"),
        ("pcie5", "pcie5-x16"),
        ("edr", "ib-edr"),
        ("hdr", "ib-hdr"),
        ("ndr", "ib-ndr"),
        ("PCIE3", "pcie3-x16"),
    ],
)
def test_cli_aliases(alias: str, canonical: str) -> None:
    assert get_link(alias).name == canonical


# ----------------------------------------------------------------------------- golden values


def test_golden_pcie3_x16_raw() -> None:
    # 16 lanes x 8 GT/s x 128/130 / 8 bits = 15.754 GB/s per direction.
    assert get_link("pcie3-x16").bandwidth_Bps == pytest.approx(16 * 8e9 * 128 / 130 / 8, rel=1e-4)
    assert get_link("pcie3-x16").bandwidth_Bps == pytest.approx(15.75e9, rel=1e-3)


def test_golden_edr_and_40gbe() -> None:
    assert get_link("ib-edr").bandwidth_Bps == pytest.approx(12.5e9)
    assert get_link("eth-40g").bandwidth_Bps == pytest.approx(5e9)


def test_pcie_generations_double_and_x8_is_half() -> None:
    for gen in (3, 4, 5):
        x16 = get_link(f"pcie{gen}-x16").bandwidth_Bps
        assert get_link(f"pcie{gen}-x8").bandwidth_Bps == pytest.approx(x16 / 2, rel=1e-3)
        if gen > 3:
            prev = get_link(f"pcie{gen - 1}-x16").bandwidth_Bps
            assert x16 == pytest.approx(2 * prev, rel=1e-3)


@pytest.mark.parametrize(("gen", "gbps"), [(1, 20), (2, 25), (3, 25), (4, 25), (5, 50)])
def test_nvlink_per_link_per_direction(gen: int, gbps: float) -> None:
    link = get_link(f"nvlink{gen}")
    assert link.family is LinkFamily.NVLINK
    assert link.bandwidth_Bps == pytest.approx(gbps * units.GB)


@pytest.mark.parametrize(("version", "nvlink_gen"), [(1, 2), (2, 3), (3, 4), (4, 5)])
def test_nvswitch_port_pairs_with_its_nvlink_generation(version: int, nvlink_gen: int) -> None:
    switch = get_link(f"nvswitch-v{version}")
    nvlink = get_link(f"nvlink{nvlink_gen}")
    assert switch.family is LinkFamily.NVSWITCH
    assert switch.bandwidth_Bps == nvlink.bandwidth_Bps
    assert f"NVLink {nvlink_gen}.0" in switch.notes


@pytest.mark.parametrize("rate", ["25g", "50g", "100g", "200g", "400g"])
def test_roce_vs_tcp_same_wire(rate: str) -> None:
    tcp, roce = get_link(f"eth-{rate}"), get_link(f"roce-{rate}")
    assert tcp.bandwidth_Bps == roce.bandwidth_Bps
    assert tcp.protocol == "tcp" and roce.protocol == "roce"
    # RDMA bypasses the kernel: at least as efficient, an order of magnitude lower latency.
    assert roce.efficiency >= tcp.efficiency
    assert 1 * units.us <= roce.latency_s <= 3 * units.us
    assert 10 * units.us <= tcp.latency_s <= 100 * units.us


def test_infiniband_rates_double_each_generation() -> None:
    rates = [get_link(f"ib-{g}").bandwidth_Bps for g in ("edr", "hdr", "ndr", "xdr")]
    for slow, fast in itertools.pairwise(rates):
        assert fast == pytest.approx(2 * slow)
    assert get_link("ib-fdr").bandwidth_Bps < rates[0]
    for lk in list_links():
        if lk.family is LinkFamily.INFINIBAND:
            assert lk.latency_s <= 2 * units.us


def test_aliases_unique() -> None:
    seen: dict[str, str] = {}
    for lk in list_links():
        for key in (lk.name, *lk.aliases):
            assert seen.setdefault(key.lower(), lk.name) == lk.name, key


def test_unknown_link_suggests() -> None:
    with pytest.raises(UnknownHardwareError) as info:
        get_link("nvlnk2")
    assert "nvlink2" in info.value.args[0]
