"""NVLink SHARP (NVLS) and InfiniBand SHARP (CollNet) all-reduce (issue 12).

NVLS hand value (docstring of ``CommCostModel._in_switch_candidates``): on one DGX H100 the
ring bus bandwidth ``B`` is 18 NVLink4 links x 25 GB/s x 0.9; NVLS moves ``m (1 + 1/8)`` per GPU
link at ``B x 0.85 x 15/16``. NCCL's author quotes a peak busbw of ~480 GB/s for 8 H100
(NVIDIA/nccl-tests#212).
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.params import Algorithm
from perfmodel.errors import ConfigError
from perfmodel.topology import load_system
from perfmodel.units import GB, us


@pytest.fixture(scope="module")
def h100():
    return load_system("dgx-h100")


def test_dgx_h100_8gib_allreduce_uses_nvls_near_480(h100):
    m = CommCostModel(h100)
    r = m.collective("allreduce", 8 * 2**30, h100.gpus)
    assert r.algorithm is Algorithm.NVLS
    bus = 18 * 25 * GB * 0.9
    assert m.group_info(h100.gpus).ring_bw_Bps == pytest.approx(bus, rel=1e-6)
    hand = 23 * us + 8 * 2**30 * (1 + 1 / 8) / (bus * 0.85 * 15 / 16)
    assert r.time_s == pytest.approx(hand, rel=1e-9)
    assert 450 * GB < r.busbw_Bps < 520 * GB
    sim = CommCostModel(h100, fidelity="simulated").collective("allreduce", 8 * 2**30, h100.gpus)
    assert sim.algorithm is Algorithm.NVLS and sim.time_s == pytest.approx(r.time_s)


def test_no_nvls_on_ampere_and_small_messages_keep_ring():
    a100 = load_system("dgx-a100")
    m = CommCostModel(a100)
    assert m.collective("allreduce", 2**30, a100.gpus).algorithm is Algorithm.RING
    with pytest.raises(ConfigError, match="nvls is not available"):
        m.collective("allreduce", 2**30, a100.gpus, algorithm="nvls")
    h = load_system("dgx-h100")
    assert CommCostModel(h).collective("allreduce", 1024, h.gpus).algorithm is Algorithm.RING


def test_collnet_only_on_a_sharp_fabric():
    two = load_system("dgx-h100", nodes=2)
    with pytest.raises(ConfigError, match="collnet is not available"):
        CommCostModel(two).collective("allreduce", 2**30, two.gpus, algorithm="collnet")
    sharp = two.with_sharp(True)
    m = CommCostModel(sharp)
    info = m.group_info(sharp.gpus)
    r = m.collective("allreduce", 2**30, sharp.gpus, algorithm="collnet")
    bus = min(info.intra_bw_Bps, info.inter_bw_Bps) * 0.85
    lat = 2 * (3.7 + 7 * 0.4) * us + 31 * us
    assert r.time_s == pytest.approx(lat + 2**30 / (bus * 0.5), rel=1e-9)


def test_fabric_sharp_key_and_errors():
    from perfmodel.errors import TopologyError
    from perfmodel.topology.io import parse_fabric

    assert parse_fabric({"network": "ib-ndr", "sharp": True}, "f").sharp is True
    assert parse_fabric({"network": "ib-ndr"}, "f").sharp is False
    with pytest.raises(TopologyError, match="sharp must be true or false"):
        parse_fabric({"network": "ib-ndr", "sharp": "yes"}, "f")
    from perfmodel.topology.custom import custom_system

    with pytest.raises(ConfigError, match="no fabric"):
        custom_system("A100-PCIE-40GB", 2, "pcie4").with_sharp(True)
