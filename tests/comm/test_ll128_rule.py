"""NCCL's LL128 enable rule per release and the GPU-to-NIC path types it reads (issue 24).

NVIDIA/nccl ``src/graph/tuning.cc`` enables LL128 by default only on listed compute
capabilities, NVLink rings inside servers and, across servers, a ring whose GPU-to-NIC path
(``typeInter``) is at most ``PXB`` (``PXN`` from Hopper on, 2.17+). Hand cases: the path types
of catalogue servers read off ``nvidia-smi topo -m`` style layouts, and the protocols offered.
"""

from __future__ import annotations

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.nccl_paths import PathType, host_path_type, net_path_type
from perfmodel.comm.params import Protocol
from perfmodel.comm.tuner import ll128_enabled, ll128_rule
from perfmodel.topology import load_system
from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule


def _protocols(system: str, nodes: int, release: tuple[int, int] | None, **kw) -> set[Protocol]:
    t = load_system(system, nodes=nodes, **kw)
    if release is not None:
        t = with_nccl_p2p_rule(t, NcclRelease(*release))
    m = CommCostModel(t)
    return set(m.protocols(m.group_info(t.gpus)))


@pytest.mark.parametrize(
    ("system", "kw", "path"),
    [
        ("dgx-h100", {}, PathType.PIX),  # GPU and NIC on one PCIe switch
        ("dgx-a100", {}, PathType.PXB),  # two levels of PCIe switches
        ("dgx-a100", {"network": "roce-100g", "nics_per_node": 4}, PathType.PXB),
        ("dell-c4140-4xv100", {}, PathType.PHB),  # the NIC hangs off the CPU
        ("gb200-nvl72", {}, PathType.P2C),  # NVLink-C2C to Grace, PCIe to the NIC
    ],
)
def test_net_path_types_of_catalogue_servers(system, kw, path) -> None:
    t = load_system(system, nodes=2, **kw)
    m = CommCostModel(t)
    assert m.group_info(t.gpus).net_path == path


def test_host_path_and_pxn() -> None:
    t = load_system("dgx-h100", nodes=2)
    server = t.gpus[:8]
    assert host_path_type(t, "n0/gpu0", "n0/nic7") is PathType.SYS
    # NVLink to gpu7, whose PCIe switch holds nic7: PXN (NCCL >= 2.12), not across the sockets
    assert net_path_type(t, ["n0/gpu0"], ["n0/nic7"]) is PathType.SYS  # no NVLink peer given
    assert net_path_type(t, server, ["n0/nic7"]) is PathType.PIX  # nic7 reached from gpu7
    from perfmodel.comm.nccl_paths import gpu_nic_path_type

    assert gpu_nic_path_type(t, "n0/gpu0", "n0/nic7", server) is PathType.PXN
    assert gpu_nic_path_type(t, "n0/gpu0", "n0/nic7", server, pxn=False) is PathType.SYS


def test_rule_eras_from_the_source() -> None:
    assert ll128_rule((2, 4), "volta") is None  # LL128 came with 2.5
    assert ll128_rule((2, 8), "ampere").capabilities == frozenset({70, 80})
    assert 90 in ll128_rule((2, 15), "hopper").capabilities
    assert 100 not in ll128_rule((2, 24), "blackwell").capabilities
    assert 100 in ll128_rule((2, 25), "blackwell").capabilities
    assert ll128_rule((2, 29), "ampere").capabilities is None  # every capability >= 7.0
    assert ll128_rule((2, 27), "hopper").inter_max_sm90 == PathType.P2C
    assert ll128_rule((2, 29), "hopper").inter_max_sm90 == PathType.PXN
    # no P2C before 2.27: Grace's NIC path is a host bridge then
    assert not ll128_enabled((2, 26), "blackwell", intra_nvlink=True, net_path=PathType.P2C)
    assert ll128_enabled((2, 29), "blackwell", intra_nvlink=True, net_path=PathType.P2C)
    assert not ll128_enabled((2, 29), "hopper", intra_nvlink=False, net_path=None)


def test_protocols_follow_the_rule() -> None:
    """InternEvo's servers (A100, 4 NICs behind two PCIe switch levels, NCCL 2.14) keep LL128;
    a Dell C4140 (V100, NIC on the CPU) loses it across servers with NCCL 2.8 but not inside
    one; a DGX H100 stating 2.14 loses it (Hopper joined in 2.15); every DGX keeps it with the
    release its era assumes."""
    ll128 = Protocol.LL128
    assert ll128 in _protocols("dgx-a100", 2, (2, 14), network="roce-100g", nics_per_node=4)
    assert ll128 not in _protocols("dell-c4140-4xv100", 2, (2, 8))
    assert ll128 in _protocols("dell-c4140-4xv100", 1, (2, 8))
    assert ll128 not in _protocols("dgx-h100", 1, (2, 14))
    assert ll128 in _protocols("dgx-h100", 1, (2, 15))
    for system in ("dgx-a100", "dgx-h100", "dgx-b200", "dgx1-v100"):
        assert ll128 in _protocols(system, 2, None)
