"""`topo show` reports the ring channels the communication model uses, across servers too."""

import json

from perfmodel.cli import main


def test_two_dgx_a100_rings_use_every_nic(capsys):
    assert main(["topo", "show", "dgx-a100", "--nodes", "2", "--json"]) == 0
    rings = json.loads(capsys.readouterr().out)["rings"]
    # 8 HDR NICs per server at 25 GB/s x 0.92 efficiency = 23 GB/s each: 184 GB/s of ring bandwidth
    assert abs(rings["bandwidth_Bps"] - 8 * 23e9) < 1e6
    assert len(rings["orders"]) == rings["channels"]


def test_single_server_rings_unchanged(capsys):
    assert main(["topo", "show", "dgx1-v100", "--json"]) == 0
    rings = json.loads(capsys.readouterr().out)["rings"]
    assert rings["channels"] == 6 and abs(rings["bandwidth_Bps"] - 135e9) < 1e6
