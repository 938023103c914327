"""Hardware from parts: --system custom."""

from __future__ import annotations

import argparse
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.cli._common import add_system_args, system_from_args
from perfmodel.errors import ConfigError
from perfmodel.topology import path_bandwidth, route
from perfmodel.topology.custom import IntraNode, custom_system
from perfmodel.topology.schema import NodeKind


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_system_args(p)
    return p.parse_args(argv)


def test_nvlink_mesh_splits_links_over_peers():
    t = custom_system("V100-SXM2-16GB", 4, "nvlink2")
    for a, b in itertools.combinations(t.gpus, 2):
        assert t.graph.edges[a, b]["count"] == 2  # 6 links / 3 peers
        assert path_bandwidth(t, a, b) == pytest.approx(45e9)
    t3 = custom_system("V100-SXM2-16GB", 3, "nvlink2")
    assert t3.graph.edges["gpu0", "gpu1"]["count"] == 3


def test_nvswitch_gives_each_gpu_all_ports():
    t = custom_system(
        "H100-SXM5-80GB", 8, "nvswitch-v3", network="ib-ndr", nodes=2, nics_per_node=8
    )
    assert t.graph.edges["n0/gpu5", "n0/nvswitch0"]["count"] == 18
    assert t.num_gpus == 16
    assert route(t, "n0/gpu0", "n0/gpu7") == ("n0/gpu0", "n0/nvswitch0", "n0/gpu7")


def test_pcie_layout_switch_pairs_and_sockets():
    t = custom_system("V100-PCIE-16GB", 8, "pcie3")
    cpus = t.nodes_of_kind(NodeKind.CPU)
    switches = t.nodes_of_kind(NodeKind.PCIE_SWITCH)
    assert len(cpus) == 2 and len(switches) == 4
    assert route(t, "gpu0", "gpu1") == ("gpu0", "plx0", "gpu1")
    assert "cpu1" in route(t, "gpu0", "gpu7")
    # PCIe 4 doubles the PCIe 3 bottleneck of a same-switch pair for a PCIe 4 board ...
    a3 = custom_system("A100-PCIE-40GB", 8, "pcie3")
    a4 = custom_system("A100-PCIE-40GB", 8, "pcie4")
    assert path_bandwidth(a4, "gpu0", "gpu1") == pytest.approx(
        2 * path_bandwidth(a3, "gpu0", "gpu1"), rel=1e-3
    )
    # ... but a PCIe 3 board (V100 PCIe) trains its slot link at PCIe 3 in a PCIe 4 host
    t4 = custom_system("V100-PCIE-16GB", 8, "pcie4")
    assert path_bandwidth(t4, "gpu0", "gpu1") == pytest.approx(
        path_bandwidth(t, "gpu0", "gpu1"), rel=1e-3
    )
    one = custom_system("RTX-4090", 1, "pcie4")
    assert one.num_gpus == 1 and one.graph.has_edge("cpu0", "gpu0")


@pytest.mark.parametrize(
    ("kwargs", "flag", "value"),
    [
        ({"gpu": None, "gpus_per_node": 2, "intra_node": "pcie3"}, "--gpu", None),
        ({"gpu": "V900", "gpus_per_node": 2, "intra_node": "pcie3"}, "--gpu", "V900"),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": None, "intra_node": "pcie3"},
            "--gpus-per-node",
            None,
        ),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": 0, "intra_node": "pcie3"},
            "--gpus-per-node",
            "0",
        ),
        ({"gpu": "V100-SXM2-16GB", "gpus_per_node": 2, "intra_node": None}, "--intra-node", None),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": 2, "intra_node": "pcie9"},
            "--intra-node",
            "pcie9",
        ),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": 8, "intra_node": "nvlink2"},
            "--gpus-per-node",
            "8",
        ),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": 4, "intra_node": "nvlink3"},
            "--intra-node",
            "nvlink3",
        ),
        (
            {"gpu": "V100-PCIE-16GB", "gpus_per_node": 4, "intra_node": "nvswitch-v1"},
            "--intra-node",
            "nvswitch-v1",
        ),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": 4, "intra_node": "pcie3", "nodes": 2},
            "--network",
            None,
        ),
        (
            {
                "gpu": "V100-SXM2-16GB",
                "gpus_per_node": 4,
                "intra_node": "pcie3",
                "nodes": 2,
                "network": "ib-qdr",
            },
            "--network",
            "ib-qdr",
        ),
        (
            {"gpu": "V100-SXM2-16GB", "gpus_per_node": 4, "intra_node": "pcie3", "nodes": 0},
            "--nodes",
            "0",
        ),
        (
            {
                "gpu": "V100-SXM2-16GB",
                "gpus_per_node": 4,
                "intra_node": "pcie3",
                "nodes": 2,
                "network": "ib-edr",
                "oversubscription": 0.5,
            },
            "--oversubscription",
            "0.5",
        ),
    ],
)
def test_missing_or_bad_flag_is_named(kwargs, flag, value):
    with pytest.raises(ConfigError) as err:
        custom_system(**kwargs)
    msg = str(err.value)
    assert flag in msg, msg
    if value is not None:
        assert value in msg, msg


def test_cli_flags_build_custom_and_override_catalogue_fabric():
    t = system_from_args(
        _args(
            [
                "--system",
                "custom",
                "--gpu",
                "P100-PCIE-16GB",
                "--gpus-per-node",
                "4",
                "--intra-node",
                "pcie3",
                "--network",
                "eth-25g",
                "--nodes",
                "8",
            ]
        )
    )
    assert t.num_gpus == 32 and t.fabric.network == "eth-25g"
    t = system_from_args(_args(["--system", "dgx1-p100", "--nodes", "44", "--network", "eth-50g"]))
    assert t.num_gpus == 352 and t.fabric.network == "eth-50g"
    with pytest.raises(ConfigError, match="--nics-per-node"):
        system_from_args(_args(["--system", "dgx1-p100", "--nodes", "2", "--nics-per-node", "9"]))


def test_intra_node_enum_parses_families_and_generations():
    assert IntraNode.parse("NVSWITCH-V3").nvlink_generation == 4
    assert IntraNode.parse("nvlink1").family == "nvlink"
    assert (
        IntraNode.parse("pcie5").generation == 5
        and IntraNode.parse("pcie5").nvlink_generation is None
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpu_intra=st.sampled_from(
        [
            ("V100-PCIE-16GB", "pcie3"),
            ("A100-PCIE-80GB", "pcie4"),
            ("V100-SXM2-16GB", "nvlink2"),
            ("A100-SXM4-80GB", "nvswitch-v2"),
            ("B200-SXM-180GB", "nvswitch-v4"),
        ]
    ),
    gpn=st.integers(min_value=1, max_value=7),
    nodes=st.integers(min_value=1, max_value=3),
    nics=st.integers(min_value=1, max_value=2),
)
def test_every_custom_gpu_reaches_every_other(gpu_intra, gpn, nodes, nics):
    gpu, intra = gpu_intra
    t = custom_system(gpu, gpn, intra, network="ib-hdr", nodes=nodes, nics_per_node=nics)
    assert t.num_gpus == gpn * nodes
    for a, b in itertools.permutations(t.gpus, 2):
        assert path_bandwidth(t, a, b) > 0
