"""Analyses: bisection (golden fat trees), rings, trees, nvidia-smi classes, monotonicity."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.errors import ConfigError
from perfmodel.topology import Topology, build_cluster, load_system
from perfmodel.topology.analysis import (
    BisectionMethod,
    bandwidth_matrix,
    bisection_bandwidth,
    cut_bandwidth,
    double_binary_tree,
    nccl_rings,
    nccl_trees,
    smi_class,
    smi_matrix,
)
from perfmodel.topology.custom import custom_server
from perfmodel.topology.importers import from_smi_text
from perfmodel.topology.model import FabricSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
EDR = 12.5e9 * 0.92  # InfiniBand EDR: 100 Gbit/s = 12.5 GB/s raw x 0.92 efficiency = 11.5 GB/s


def _fat_tree(servers: int, oversubscription: float, leaf_radix: int = 4) -> Topology:
    one_gpu = custom_server("V100-SXM2-16GB", 1, "pcie3", 1)
    fabric = FabricSpec("ib-edr", "fat-tree", 1, oversubscription, leaf_radix)
    return build_cluster(one_gpu, servers, fabric)


def test_bisection_two_level_fat_tree_2to1_golden():
    """8 single-GPU servers, leaves of 4 ports at 2:1 -> 2 EDR uplinks per leaf to the spine.
    The weakest balanced cut separates the two leaves: 2 uplinks x 11.5 GB/s = 23 GB/s.
    (Splitting inside a leaf would cut 4 NIC links = 46 GB/s.)"""
    t = _fat_tree(8, 2.0)
    b = bisection_bandwidth(t)
    assert b.method is BisectionMethod.EXACT and b.partitions_checked == 35
    assert b.bandwidth_Bps == pytest.approx(2 * EDR)
    leaf_of = {g: next(iter(t.graph.neighbors(f"n{g.split('/')[0][1:]}/nic0"))) for g in t.gpus}
    assert len({leaf_of[g] for g in b.side_a} & {leaf_of[g] for g in b.side_b}) == 0


def test_bisection_fat_tree_non_blocking_and_structured_16_servers():
    # 1:1: 4 uplinks per leaf; the cut equals the 4 NIC links of either side: 46 GB/s
    assert bisection_bandwidth(_fat_tree(8, 1.0)).bandwidth_Bps == pytest.approx(4 * EDR)
    # 16 servers, 4 leaves at 2:1: half the leaves vs the other half, 2 x 2 uplinks = 46 GB/s
    b = bisection_bandwidth(_fat_tree(16, 2.0))
    assert b.method is BisectionMethod.STRUCTURED
    assert b.bandwidth_Bps == pytest.approx(4 * EDR)


def test_bisection_dgx1_is_exact_and_counts_nvlink_and_host_paths():
    t = load_system("dgx1-v100")
    b = bisection_bandwidth(t)
    assert b.method is BisectionMethod.EXACT and b.partitions_checked == 35
    # the quad split {0,1,2,3} | {4,5,6,7}: 4 cross NVLink bundles (2,1,1,2 links = 6 x 22.5
    # GB/s = 135 GB/s) plus the PCIe/QPI path (min(2 x 12.9 PCIe uplinks, 26.9 QPI) = 25.8)
    assert b.bandwidth_Bps == pytest.approx(135e9 + 2 * 12.918e9, rel=1e-3)
    assert cut_bandwidth(t, b.side_a, b.side_b) == pytest.approx(b.bandwidth_Bps)


def test_cut_rejects_overlap_and_bisection_needs_two_gpus():
    t = load_system("dgx1-v100")
    with pytest.raises(ConfigError):
        cut_bandwidth(t, ["gpu0"], ["gpu0", "gpu1"])
    with pytest.raises(ConfigError):
        bisection_bandwidth(t, ["gpu0"])
    with pytest.raises(ConfigError, match="not a GPU"):
        bandwidth_matrix(t, ["gpu0", "cpu0"])


def test_dgx1_rings_use_only_nvlink_six_channels():
    """Each V100 has 6 NVLinks: 6 ring channels, each one NVLink per hop (22.5 GB/s)."""
    t = load_system("dgx1-v100")
    rs = nccl_rings(t)
    assert rs.channels == 6
    assert rs.bandwidth_Bps == pytest.approx(6 * 22.5e9)
    for ring in rs.rings:
        assert sorted(ring.gpus) == sorted(t.gpus)
        for a, b in ring.hops():
            assert t.graph.has_edge(a, b) and t.graph.edges[a, b]["tech"] == "nvlink2"
    # every directed NVLink carries at most its link count of channels
    use: dict[tuple[str, str], int] = {}
    for ring in rs.rings:
        for hop in ring.hops():
            use[hop] = use.get(hop, 0) + 1
    assert all(use[(a, b)] <= t.graph.edges[a, b]["count"] for a, b in use)


def test_rings_on_nvswitch_pcie_and_clusters():
    a100 = nccl_rings(load_system("dgx-a100"))
    assert a100.bandwidth_Bps == pytest.approx(12 * 22.5e9)  # 12 NVLink 3 ports x 22.5 GB/s
    pcie = nccl_rings(load_system("pcie-8x-server"))
    assert pcie.bandwidth_Bps <= 12.92e9  # PCIe 3.0 x16 effective
    two = load_system("dgx1-v100", nodes=2)
    rs = nccl_rings(two)
    assert rs.bandwidth_Bps <= 4 * EDR * (1 + 1e-9)  # 4 EDR NICs per server bound the ring
    for ring in rs.rings:
        servers = [two.server_of(g) for g in ring.gpus]
        assert servers == sorted(servers)  # one contiguous chain per server


@pytest.mark.parametrize("n", list(range(1, 70)))
def test_double_binary_tree_is_two_trees_with_disjoint_inner_nodes(n):
    t1, t2 = double_binary_tree(n)
    for tree in (t1, t2):
        assert sum(p is None for p in tree) == 1
        for r in range(n):  # every rank reaches the root without a cycle
            seen, x = set(), r
            while tree[x] is not None:
                assert x not in seen
                seen.add(x)
                x = tree[x]
        assert max(sum(p == r for p in tree) for r in range(n)) <= 2  # binary
    inner1 = {p for p in t1 if p is not None}
    inner2 = {p for p in t2 if p is not None}
    assert not (inner1 & inner2)


def test_nccl_trees_chain_inside_servers_and_tree_across():
    t = load_system("dgx1-v100", nodes=4)
    tree1, tree2 = nccl_trees(t)
    for tree in (tree1, tree2):
        assert set(tree.parent) == set(t.gpus)
        heads = [g for g, p in tree.parent.items() if p is None or t.server_of(p) != t.server_of(g)]
        assert len(heads) == 4  # one head per server links servers
        assert tree.depth() >= 7  # the 8-GPU chain of one server
    assert tree1.root != tree2.root


def test_smi_matrix_of_catalogue_dgx1_equals_published_style_output():
    """The classes computed from dgx1-v100.toml match an nvidia-smi topo -m of a DGX-1V."""
    text = (FIXTURES / "smi-dgx1-v100.txt").read_text()
    labels, rows = smi_matrix(load_system("dgx1-v100"))
    imported = from_smi_text(text, gpu="V100-SXM2-16GB")
    _, rows_in = smi_matrix(imported)
    assert rows == rows_in
    assert labels[:8] == tuple(f"GPU{i}" for i in range(8))


def test_smi_matrix_of_catalogue_dgx2_equals_published_output():
    text = (FIXTURES / "smi-dgx2.txt").read_text()
    _, rows = smi_matrix(load_system("dgx2-v100"))
    _, rows_in = smi_matrix(from_smi_text(text, gpu="V100-SXM3-32GB"))
    assert rows == rows_in


def test_smi_classes_ac922_and_workstation():
    ac = load_system("ibm-ac922-4xv100")
    assert smi_class(ac, "gpu0", "gpu1") == "NV3"
    assert smi_class(ac, "gpu0", "gpu2") == "SYS"
    ws = load_system("asus-z10pe-2x1080ti")
    assert smi_class(ws, "gpu0", "gpu1") == "SYS"
    assert smi_class(ws, "gpu0", "nic0") == "PHB"


# --- property: more bandwidth on any link never lowers any pair's bandwidth -------------------

_SMALL = ["asus-z10pe-2x1080ti", "ibm-ac922-4xv100", "dell-c4140-4xv100", "dgx1-v100"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(_SMALL),
    nodes=st.sampled_from([1, 2]),
    edge_pick=st.integers(min_value=0, max_value=10_000),
    factor=st.floats(min_value=1.0, max_value=50.0),
)
def test_adding_bandwidth_never_lowers_a_pair(name, nodes, edge_pick, factor):
    base = load_system(name, nodes=nodes)
    g = base.graph.copy()
    edges = list(g.edges())
    u, v = edges[edge_pick % len(edges)]
    g.edges[u, v]["bandwidth_Bps"] *= factor
    better = dataclasses.replace(base, graph=g, meta={})
    before = bandwidth_matrix(base)
    after = bandwidth_matrix(better)
    assert np.all(after >= before * (1 - 1e-12))


def test_bandwidth_matrix_is_symmetric_for_symmetric_links():
    for name in ("dgx1-v100", "dgx-a100", "pcie-8x-server"):
        m = bandwidth_matrix(load_system(name))
        assert np.allclose(m, m.T)
        assert np.all(np.isinf(np.diag(m)))


def test_routes_never_cross_a_third_gpu():
    t = load_system("dgx1-v100")
    for a, b in itertools.permutations(t.gpus, 2):
        from perfmodel.topology import route

        assert not any(n in t.gpus for n in route(t, a, b)[1:-1])
    assert nx.is_connected(t.graph)
