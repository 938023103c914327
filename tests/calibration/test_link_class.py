"""Collectives are tagged with a link class that LinkParams can match (never silently unused)."""

from pathlib import Path

import pytest

from perfmodel.calibration.collectives import intra_node_link_class
from perfmodel.comm import LinkParams
from perfmodel.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"


@pytest.mark.parametrize(
    ("fixture", "gpu", "expected"),
    [
        ("smi-dgx1-v100.txt", "V100-SXM2-16GB", "nvlink2"),  # GPU0-GPU1: NV1
        ("smi-pcie-4gpu.txt", "V100-PCIE-16GB", "pcie3-x16"),  # GPU0-GPU1: PIX
        ("smi-dgx2.txt", "V100-SXM3-32GB", "nvswitch-v1"),
    ],
)
def test_intra_node_link_class_from_nvidia_smi(fixture, gpu, expected):
    assert intra_node_link_class((FIXTURES / fixture).read_text(), gpu) == expected


def test_unknown_link_class_is_refused():
    with pytest.raises(ConfigError) as info:
        LinkParams.from_dict({"intra-node": {"alpha_us": 1.0, "bandwidth_GBps": 10.0}})
    assert "'intra-node'" in str(info.value) and "link family" in str(info.value)


def test_aliases_become_the_names_lookup_matches():
    lp = LinkParams.from_dict({"EDR": {"alpha_us": 2.0}, "NVLink": {"bandwidth_GBps": 20.0}})
    assert lp.lookup("ib-edr", "infiniband").alpha_s == pytest.approx(2e-6)
    assert lp.lookup("nvlink3", "nvlink").bandwidth_Bps == pytest.approx(20e9)
