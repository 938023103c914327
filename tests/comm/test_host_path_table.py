"""NCCL's GPU-to-NIC path types read from one search per GPU (issue 27).

``nccl_paths.host_path_types`` answers every target of one GPU from one breadth-first search;
``net_path_type`` and ``GroupAnalysis._net_path`` read those tables instead of searching each
(GPU, NIC) pair and each NVLink peer. Both must give what the pair-by-pair search gives: every
GPU against every node of two servers of each catalogue system, and ``typeInter`` of random
parts and NIC sets against the pair-by-pair rule restated here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from perfmodel.comm import CommCostModel
from perfmodel.comm.nccl_paths import (
    PathType,
    _nvlink_peers,
    host_path_type,
    host_path_types,
    net_path_type,
)
from perfmodel.topology import Topology, list_systems, load_system
from perfmodel.topology.schema import NodeKind


def _pairwise_net_path(
    topology: Topology, part: Sequence[str], nics: Sequence[str], pxn: bool
) -> PathType:
    """``typeInter`` with one search per (GPU, NIC) pair and per NVLink peer (the rule as
    stated in ``nccl_paths``, before the tables)."""

    def gpu_nic(x: str, nic: str) -> PathType:
        direct = host_path_type(topology, x, nic)
        if not pxn or direct <= PathType.PXB:
            return direct
        for h in _nvlink_peers(topology, x, part):
            if host_path_type(topology, h, nic) <= PathType.PXB:
                return min(direct, PathType.PXN)
        return direct

    worst = PathType.PIX
    for nic in nics:
        worst = max(worst, min(gpu_nic(x, nic) for x in part))
    return worst


def _server(t: Topology, s: int) -> list[str]:
    return [x for x in t.graph.nodes if str(x).startswith(f"n{s}/")]


@pytest.mark.parametrize("system", list_systems())
def test_one_search_per_gpu_equals_pair_searches(system: str) -> None:
    t = load_system(system, nodes=2)
    nodes = _server(t, 0) + _server(t, 1)[:3]  # another server's nodes: no host path
    for gpu in [x for x in _server(t, 0) if t.graph.nodes[x]["kind"] is NodeKind.GPU]:
        table = host_path_types(t, gpu)
        for y in nodes:
            assert table.get(y, PathType.SYS) is host_path_type(t, gpu, y), (system, gpu, y)


@pytest.mark.parametrize("system", list_systems())
def test_net_path_of_random_parts_equals_pairwise(system: str) -> None:
    t = load_system(system, nodes=2)
    server = _server(t, 0)
    gpus = [x for x in server if t.graph.nodes[x]["kind"] is NodeKind.GPU]
    nics = [x for x in server if t.graph.nodes[x]["kind"] is NodeKind.NIC]
    rng = random.Random(27)
    for _ in range(12):
        part = rng.sample(gpus, rng.randint(1, min(8, len(gpus))))  # the reference is slow
        chosen = rng.sample(nics, rng.randint(0, min(8, len(nics))))
        for pxn in (True, False):
            expect = _pairwise_net_path(t, part, chosen, pxn)
            assert net_path_type(t, part, chosen, pxn=pxn) is expect, (system, part, chosen)


@pytest.mark.parametrize(
    ("system", "kw"),
    [("dgx-a100", {}), ("dgx-h100", {}), ("dell-c4140-4xv100", {}), ("gb200-nvl72", {})],
)
def test_group_net_path_reads_the_tables_as_the_pairs(system: str, kw: dict) -> None:
    """The analysis's memoised tables give every cross-server group (each local-id set of
    two servers) the type, NIC rate and count of the pair-by-pair rule."""
    t = load_system(system, nodes=2, **kw)
    m = CommCostModel(t)
    per = len(t.gpus) // 2
    rng = random.Random(11)
    for _ in range(6):
        local = sorted(rng.sample(range(per), rng.randint(1, min(8, per))))
        members = tuple(t.gpus[i] for i in local) + tuple(t.gpus[per + i] for i in local)
        info = m.group_info(members)
        part = [t.gpus[i] for i in local]
        nics = sorted({n for x in part if (n := m.links.gpu_nic(x)) is not None})
        assert info.net_path == _pairwise_net_path(t, part, nics, pxn=True), (system, local)
