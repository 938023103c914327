"""A PCIe link to a GPU trains at the highest generation both ends support."""

from __future__ import annotations

import pytest

from perfmodel.topology import load_system
from perfmodel.topology.builders import list_systems, system_path
from perfmodel.topology.cluster import negotiate_pcie
from perfmodel.topology.files import read_server_file
from perfmodel.topology.io import LinkSpec, link_from_tech
from perfmodel.topology.schema import NodeKind


def _gpu_link_techs(topo) -> set[str]:
    g = topo.graph
    return {
        d["tech"]
        for u, v, d in g.edges(data=True)
        if NodeKind.GPU in (g.nodes[u]["kind"], g.nodes[v]["kind"])
    }


def test_k20_in_a_pcie3_server_runs_at_gen2() -> None:
    """Tesla K20 board spec: PCIe 2.0 x16 -> its slot link is 8 GB/s raw, 6 GB/s effective;
    the switch uplinks (switch <-> CPU) stay PCIe 3.0."""
    topo = load_system("pcie-8x-server", gpu="K20")
    assert _gpu_link_techs(topo) == {"pcie2-x16"}
    g = topo.graph
    uplinks = {
        d["tech"]
        for u, v, d in g.edges(data=True)
        if {g.nodes[u]["kind"], g.nodes[v]["kind"]} == {NodeKind.CPU, NodeKind.PCIE_SWITCH}
    }
    assert uplinks == {"pcie3-x16"}
    d = next(iter(g.edges(topo.gpus[0], data=True)))[2]
    assert d["bandwidth_Bps"] * d["efficiency"] == pytest.approx(6.0e9)


def test_a_newer_gpu_never_upgrades_an_older_link() -> None:
    topo = load_system("pcie-8x-server", gpu="H100-PCIE-80GB")  # PCIe 5.0 board
    assert _gpu_link_techs(topo) == {"pcie3-x16"}


@pytest.mark.parametrize("name", list_systems())
def test_catalogue_systems_with_their_own_gpus_are_unchanged(name: str) -> None:
    desc = read_server_file(system_path(name))
    topo = load_system(name)
    described = {link.tech for link in desc.links}
    built = {d["tech"] for _, _, d in topo.graph.edges(data=True)}
    assert built <= described | {"ib-edr", "ib-hdr", "ib-ndr", "ib-fdr", "eth-100g", "roce-100g"}
    assert not any(t.startswith("pcie2") for t in built)


def test_explicit_numbers_win_and_non_gpu_links_are_untouched() -> None:
    gen = {"gpu0": 2}
    custom = LinkSpec("gpu0", "sw", "pcie3-x16", link_from_tech("a", "b", "pcie3-x16").family,
                      1, 20e9, 0.9, 1e-6)  # fmt: skip
    assert negotiate_pcie(custom, gen) is custom
    other = link_from_tech("cpu0", "sw", "pcie3-x16")
    assert negotiate_pcie(other, gen) is other
    slot = link_from_tech("gpu0", "sw", "pcie3-x8", 2)
    got = negotiate_pcie(slot, gen)
    assert (got.tech, got.count) == ("pcie2-x8", 2)
    assert got.bandwidth_Bps * got.efficiency < slot.bandwidth_Bps * slot.efficiency
