"""GPU peer-to-peer capability and NCCL's SHM path through host memory (issue 12).

Hand values: the custom PCIe 4 server puts two GPUs under each PCIe switch and the switches under
the CPUs. With peer-to-peer an 8-GPU ring crosses each switch uplink once per direction: bus
bandwidth = one PCIe 4.0 x16 link's goodput. Without it (RTX 4090: NVIDIA/nccl#1127) every hop
is GPU -> CPU memory -> GPU, so both GPUs of a switch send up and receive down its uplink:
half the goodput.
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.model import shm_note
from perfmodel.errors import TopologyError
from perfmodel.hardware import get_gpu
from perfmodel.hardware.links import get_link
from perfmodel.topology.custom import custom_system
from perfmodel.topology.io import parse_server
from perfmodel.topology.nccl_p2p import with_nccl_p2p_rule

GOODPUT = get_link("pcie4-x16").bandwidth_Bps * get_link("pcie4-x16").efficiency


@pytest.fixture(scope="module")
def rtx4090():
    return custom_system("RTX-4090", 8, "pcie4")


def test_geforce_ada_has_no_pcie_p2p_but_datacenter_cards_do():
    assert get_gpu("RTX-4090").pcie_p2p is False
    assert get_gpu("A100-PCIE-40GB").pcie_p2p is True


def test_no_p2p_halves_the_ring_bandwidth_through_host_memory(rtx4090):
    r = CommCostModel(rtx4090).collective("allreduce", 2**30, rtx4090.gpus)
    assert r.shm
    assert r.bandwidth_Bps == pytest.approx(GOODPUT / 2, rel=1e-9)
    on = with_nccl_p2p_rule(rtx4090.with_p2p(True))  # --p2p on: P2P between all GPUs
    r_on = CommCostModel(on).collective("allreduce", 2**30, on.gpus)
    assert not r_on.shm
    assert r_on.bandwidth_Bps == pytest.approx(GOODPUT, rel=1e-9)
    m = CommCostModel(rtx4090)
    assert m.links.route("gpu0", "gpu1") == ("gpu0", "plx0", "cpu0", "plx0", "gpu1")


def test_shm_note_names_the_gpu(rtx4090):
    note = shm_note(rtx4090, rtx4090.gpus)
    assert note is not None and "host memory" in note and "RTX-4090" in note
    a100 = custom_system("A100-PCIE-40GB", 8, "pcie4")
    assert shm_note(a100, a100.gpus[:2]) is None  # one PCIe switch: P2P
    assert "refused" in (shm_note(a100, a100.gpus) or "")  # NCCL's PXB level, across switches
    assert "disabled" in (shm_note(a100.with_p2p(False), a100.gpus) or "")


def _server(p2p):
    return {
        "system": {"name": "t", "gpu": "A100-PCIE-40GB", "p2p": p2p},
        "node": [
            {"id": "cpu0", "kind": "cpu"},
            {"id": "gpu0", "kind": "gpu"},
            {"id": "gpu1", "kind": "gpu", "p2p": True},
        ],
        "link": [
            {"a": "cpu0", "b": "gpu0", "tech": "pcie4-x16"},
            {"a": "cpu0", "b": "gpu1", "tech": "pcie4-x16"},
        ],
    }


def test_system_file_p2p_key():
    desc = parse_server(_server(False), source="t.toml")
    flags = {n.id: n.p2p for n in desc.nodes}
    assert flags == {"cpu0": False, "gpu0": False, "gpu1": True}
    with pytest.raises(TopologyError, match="p2p must be true or false"):
        parse_server(_server("no"), source="t.toml")


def test_cli_comm_and_predict_say_host_memory(capsys):
    from perfmodel.cli import main

    hw = [
        "--system",
        "custom",
        "--gpu",
        "RTX-4090",
        "--gpus-per-node",
        "8",
        "--intra-node",
        "pcie4",
    ]
    assert main(["comm", *hw, "--sizes", "1G:1G"]) == 0
    assert "through host memory" in capsys.readouterr().out
    assert main(["comm", *hw, "--sizes", "1G:1G", "--p2p", "on"]) == 0
    assert "host memory" not in capsys.readouterr().out
    args = [
        "predict",
        "--model",
        "resnet50",
        *hw,
        "--batch-per-gpu",
        "64",
        "--fidelity",
        "analytic",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "all 28 GPU pairs (gpu0-gpu1" in out and "talk through host memory" in out


def test_denied_pairs_take_the_host_memory_detour():
    """Per-pair refusals (``nvidia-smi topo -p2p r``, NCCL's P2P level) reroute like ``p2p = false``.

    Denying the two GPUs under each PCIe switch (``gpu0-gpu1`` ...) sends their hop up to the CPU
    and back down the same switch uplink: the 8-GPU ring then uses each uplink twice per direction,
    half a PCIe 4.0 x16 goodput (the ring ignored the refusal before, 25.8 GB/s). Pairs refused
    across the CPUs (NCCL's PXB rule on this server) keep their path, which already crosses the
    sender's CPU: the bandwidth stays, the SHM flag is set.
    """
    base = custom_system("A100-PCIE-40GB", 8, "pcie4")
    same_switch = base.with_p2p_denied([(f"gpu{i}", f"gpu{i + 1}") for i in range(0, 8, 2)])
    m = CommCostModel(same_switch)
    assert m.links.route("gpu0", "gpu1") == ("gpu0", "plx0", "cpu0", "plx0", "gpu1")
    r = m.collective("allreduce", 2**30, same_switch.gpus)
    assert r.shm and r.bandwidth_Bps == pytest.approx(GOODPUT / 2, rel=1e-9)
    across = base.with_p2p_denied([(f"gpu{a}", f"gpu{b}") for a in range(4) for b in range(4, 8)])
    m = CommCostModel(across)
    assert m.links.route("gpu3", "gpu4") == ("gpu3", "plx1", "cpu0", "cpu1", "plx2", "gpu4")
    assert m.links.route("gpu0", "gpu1") == ("gpu0", "plx0", "gpu1")
    r = m.collective("allreduce", 2**30, across.gpus)
    assert r.shm and r.bandwidth_Bps == pytest.approx(GOODPUT, rel=1e-9)
