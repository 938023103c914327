"""User22 item 4: predict names the hardware it placed the job on (GPU model, GPUs per node x
nodes used, intra-node link, fabric), in text and ``--json``, and says when fewer nodes are
used than asked."""

from __future__ import annotations

import json

import pytest

from perfmodel.cli import main

JOB = ["--model", "gpt2", "--batch-per-gpu", "4", "--fidelity", "analytic", "--interval", "off"]


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["predict", *argv, *JOB]) == 0
    return capsys.readouterr().out


def test_packed_gpus_name_the_nodes_used(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--system", "dgx-h100", "--nodes", "3", "--gpus", "12"]
    line = _out(capsys, argv).splitlines()[1]
    assert line == (
        "hardware        H100-SXM5-80GB, 8 GPU(s)/node x 2 node(s) (12 GPUs: the last node 4), "
        "intra-node nvswitch-v3, fabric ib-ndr rail (8 NIC(s)/node); 2 of the 3 nodes asked for "
        "are used (the GPUs fill one node before the next)"
    )
    hw = json.loads(_out(capsys, [*argv, "--json"]))["hardware"]
    assert (hw["nodes_used"], hw["nodes_asked"], hw["gpus_per_node_used"]) == (2, 3, 8)
    fabric = {"network": "ib-ndr", "topology": "rail", "nics_per_node": 8, "oversubscription": 1.0}
    assert hw["fabric"] == fabric


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--system", "pcie-8x-server", "--gpus", "4"], "V100-PCIE-16GB, 4 GPU(s)/node x 1 node"),
        (
            [
                "--system",
                "custom",
                "--gpu",
                "H100",
                "--gpus-per-node",
                "8",
                "--intra-node",
                "pcie5",
            ],
            "hardware        H100-SXM5-80GB, 8 GPU(s)/node x 1 node(s), intra-node pcie5-x16",
        ),
    ],
)
def test_the_gpu_model_is_named(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    assert words in _out(capsys, argv).splitlines()[1]
