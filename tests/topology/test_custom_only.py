"""user21 item 1: ``gpus_per_node`` / ``intra_node`` describe only ``--system custom``; on a
catalogue system or a system file they were read by nothing (``dgx-a100:intra_node=pcie4``
predicted the NVSwitch DGX, PCIe costing nothing). One check
(:func:`perfmodel.topology.builders.check_custom_only`) refuses them on the Python API, the
what-if's ``--systems`` entries and (tests/cli/test_custom_only_flags.py) the CLI; each test
here passed the keys through silently before the fix."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError
from perfmodel.search.system_option import SystemOption, parse_systems
from perfmodel.topology.builders import build_system

SMALL = {"model": "resnet50", "batch_per_gpu": 8, "gpus": 1, "fidelity": "analytic"}


@pytest.mark.parametrize(("key", "value"), [("intra_node", "pcie4"), ("gpus_per_node", 4)])
def test_api_scenario_on_a_catalogue_system_is_refused(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as exc:
        predict(Scenario(system="dgx-a100", **{key: value}, **SMALL))
    msg = str(exc.value)
    assert f"scenario.{key}={value!r}" in msg  # the API field, its value
    assert "'dgx-a100'" in msg and "custom" in msg
    assert exc.value.where == f"scenario.{key}"
    # what to use instead, in the API's own form
    assert "Scenario(system='custom', gpu='A100-SXM4-80GB'" in msg
    assert "Scenario(system='pcie-8x-server', gpu='A100-PCIE-80GB')" in msg


def test_build_system_refuses_them_and_a_bad_link() -> None:
    with pytest.raises(ConfigError, match="describes only a custom system"):
        build_system("dgx-a100", intra_node="pcie4")
    with pytest.raises(ConfigError, match=r"scenario.intra_node='pcie9': not an intra-node link"):
        build_system("dgx-a100", intra_node="pcie9", gpus_per_node=3)
    # the custom system reads them: accepted
    assert build_system("custom", gpu="T4", gpus_per_node=2, intra_node="pcie3").num_gpus == 2


def test_system_file_is_refused_too() -> None:
    from perfmodel.catalogue import topologies_dir

    path = topologies_dir() / "dgx1-v100.toml"
    with pytest.raises(ConfigError, match="describes only a custom system"):
        build_system(str(path), gpus_per_node=4)


def test_whatif_entry_is_refused_naming_the_entry() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_systems("dgx-a100,dgx-a100:intra_node=pcie4")
    msg = str(exc.value)
    assert msg.startswith("--systems entry 'dgx-a100:intra_node=pcie4': intra_node=pcie4 ")
    assert "custom:gpu=A100-SXM4-80GB:gpus_per_node=8:intra_node=pcie4" in msg
    assert "pcie-8x-server:gpu=A100-PCIE-80GB" in msg
    with pytest.raises(ConfigError, match="intra_node=pcie9: not an intra-node link"):
        SystemOption.parse("custom:gpu=T4:gpus_per_node=2:intra_node=pcie9")
    ok = SystemOption.parse("custom:gpu=T4:gpus_per_node=2:intra_node=pcie3")
    assert ok.overrides == {"gpu": "T4", "gpus_per_node": 2, "intra_node": "pcie3"}


@pytest.mark.parametrize(
    ("system", "custom", "servers"),
    [
        # a PCIe server: its own card over its own PCIe generation, never itself again
        (
            "pcie-8x-server",
            "--system custom --gpu V100-PCIE-16GB --gpus-per-node 4 --intra-node pcie3",
            ["--system pcie-8xtitanx --gpu V100-PCIE-16GB"],
        ),
        # an SXM part: its NVLink generation; the PCIe servers get its PCIe variant
        (
            "dgx-h100",
            "--system custom --gpu H100-SXM5-80GB --gpus-per-node 4 --intra-node nvlink4",
            [
                "--system pcie-8x-server --gpu H100-PCIE-80GB",
                "--system pcie-8xtitanx --gpu H100-PCIE-80GB",
            ],
        ),
        # no PCIe variant in the catalogue: no PCIe server offered
        ("gb200-nvl72", "--gpu GB200-186GB --gpus-per-node 4 --intra-node nvlink5", []),
    ],
)
def test_advice_reads_the_catalogue(system: str, custom: str, servers: list[str]) -> None:
    """rev27b item 4: ``--system pcie-8x-server --gpus-per-node 4`` suggested pcie-8x-server
    itself, SXM parts went to PCIe servers and every custom server got ``pcie4`` (failed
    before); each suggestion here is accepted (checked by hand with ``predict``)."""
    from argparse import Namespace

    from perfmodel.cli._common import check_custom_only_flags

    with pytest.raises(ConfigError) as exc:
        check_custom_only_flags(system, Namespace(gpus_per_node=4, intra_node=None))
    msg = str(exc.value)
    assert custom in msg
    offered = msg.split("whose GPU you choose: ")[1].split(" or ") if servers else []
    assert offered == servers and f"--system {system} " not in msg, msg
    assert ("whose GPU you choose" in msg) == bool(servers)
