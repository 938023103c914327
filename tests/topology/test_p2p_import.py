"""Peer-to-peer status from real machines (issue 12): ``nvidia-smi topo -p2p r`` and NCCL's P2P
level rule for the host CPU of an NCCL topology dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.errors import ParseError
from perfmodel.topology.importers import import_topology, parse_p2p_status

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "topology"

P2P_R = """ \tGPU0\tGPU1\tGPU2\tGPU3\t
 GPU0\tX\tOK\tCNS\tCNS\t
 GPU1\tOK\tX\tCNS\tCNS\t
 GPU2\tCNS\tCNS\tX\tOK\t
 GPU3\tCNS\tCNS\tOK\tX\t

Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
"""


def test_parse_p2p_status():
    assert parse_p2p_status(P2P_R) == [
        ("gpu0", "gpu2"), ("gpu0", "gpu3"), ("gpu1", "gpu2"), ("gpu1", "gpu3"),
    ]  # fmt: skip
    with pytest.raises(ParseError, match="no GPU header"):
        parse_p2p_status("nothing here")


def test_denied_pairs_route_through_host_memory():
    topo = import_topology(FIX / "smi-pcie-4gpu.txt", gpu="V100-PCIE-16GB")
    denied = topo.with_p2p_denied(parse_p2p_status(P2P_R))
    m = CommCostModel(denied)
    cpu = m.links.shm_cpu("gpu0", "gpu2")
    assert cpu is not None and cpu in m.links.route("gpu0", "gpu2")
    assert m.links.shm_cpu("gpu0", "gpu1") is None
    assert CommCostModel(topo).links.shm_cpu("gpu0", "gpu2") is None


def test_nccl_xml_intel_host_stops_p2p_at_pcie_switches():
    """NCCL (src/graph/paths.cc) on an Intel host: P2P only through PCIe switches. DGX-1V pairs
    joined by NVLink keep it. Pairs joined through one intermediate GPU's NVLinks (PATH_NVB,
    NCCL 2.8+) are not modelled as such: like NCCL before 2.8, the pairs whose only path
    crosses a CPU get host memory."""
    from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

    topo = import_topology(FIX / "nccl-dgx1-v100.xml")
    assert topo.meta["nccl_p2p_rule"]["host"] == "intel-broadwell"  # family 6, model 79
    assert len(topo.meta["nccl_p2p_rule"]["pairs"]) == 12  # 8 GPUs x 3 / 2, NVB not modelled
    old = with_nccl_p2p_rule(topo, NcclRelease(2, 7))
    m = CommCostModel(old)
    nvlinked = [
        b
        for b in old.gpus
        if b != "gpu0" and m.links.hw_class(m.links.route("gpu0", b)).value == "nvlink"
    ]
    others = [b for b in old.gpus if b != "gpu0" and b not in nvlinked]
    assert nvlinked and others
    assert all(m.links.shm_cpu("gpu0", b) is None for b in nvlinked)
    assert all(m.links.shm_cpu("gpu0", b) is not None for b in others)
    assert old.meta["nccl_p2p_rule"]["release"] == "2.7"
    assert not any("peer-to-peer" in a for a in old.meta.get("assumptions", ()))  # no stale text


def test_cli_topo_import_reads_p2p_status(tmp_path, capsys):
    from perfmodel.cli import main

    f = tmp_path / "p2p.txt"
    f.write_text(P2P_R)
    rc = main(["topo", "import", str(FIX / "smi-pcie-4gpu.txt"), "--gpu", "V100-PCIE-16GB",
               "--p2p-status", str(f), "--json"])  # fmt: skip
    assert rc == 0
    assert '"p2p_denied"' in capsys.readouterr().out
