"""CommCostModel: golden values on hand-made topologies, NVLink ring arithmetic, bad input."""

from __future__ import annotations

import math

import pytest
from comm_topos import star

from perfmodel.comm import Algorithm, CommCostModel, LinkParams, Protocol
from perfmodel.comm.p2p_read import ProcessLayout, with_process_layout
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.units import GB, GiB, us


def test_golden_ring_allreduce_1gib_8gpus():
    """8 GPUs on a switch, 100 GB/s per link, zero wire latency: NCCL Simple ring.

    latency = baseLat(ring, Simple) + 2(n-1) x hwLat(NVLink, ring, Simple) = 8.4 + 14 x 3.4 us
    bandwidth term = 2 (n-1)/n x 2^30 / 100e9 s.

    One process for the 8 GPUs (nccl-tests ``-g 8``; NCCL 2.8 era): direct pointers, no local
    copy. One process per GPU adds each rank's final ``directRecv`` copy, 2 (m/n) / B_mem
    (:mod:`perfmodel.comm.p2p_read`).
    """
    topo = with_process_layout(star(8, 100 * GB), ProcessLayout.PER_SERVER)
    r = CommCostModel(topo).collective("allreduce", GiB, topo.gpus, algorithm="ring")
    expected = (8.4 + 14 * 3.4) * us + 1.75 * GiB / (100 * GB)
    assert r.protocol is Protocol.SIMPLE
    assert r.time_s == pytest.approx(expected, rel=1e-12)
    assert r.algbw_Bps == pytest.approx(GiB / expected)
    assert r.busbw_Bps == pytest.approx(r.algbw_Bps * 1.75)
    per_gpu = star(8, 100 * GB)
    r = CommCostModel(per_gpu).collective("allreduce", GiB, per_gpu.gpus, algorithm="ring")
    copy = 2 * (GiB / 8) / per_gpu.gpu_spec().memory_bandwidth_Bps
    assert r.time_s == pytest.approx(expected + copy, rel=1e-12)


def test_busbw_of_bandwidth_bound_ring_is_bottleneck_link():
    # one process for the 8 GPUs: no local ring copy (perfmodel.comm.p2p_read), the link alone
    topo = with_process_layout(star(8, 100 * GB, slow={3: 40 * GB}), ProcessLayout.PER_SERVER)
    r = CommCostModel(topo).collective("allreduce", 8 * GiB, topo.gpus, algorithm="ring")
    assert r.bandwidth_Bps == pytest.approx(40 * GB)
    assert r.busbw_Bps == pytest.approx(40 * GB, rel=0.005)


@pytest.mark.parametrize(("n", "busbw_GBps"), [(2, 22.5), (4, 90.0), (8, 135.0)])
def test_dgx1_nvlink_rings(dgx1, n, busbw_GBps):
    """DGX-1V hybrid cube-mesh: NVLink2 = 25 GB/s x 0.9 per link and direction; NCCL's rings use
    1 link between 2 GPUs, 4 links per GPU among GPUs 0-3, all 6 links per GPU on 8 GPUs."""
    info = CommCostModel(dgx1).group_info(dgx1.gpus[:n])
    assert info.ring_bw_Bps == pytest.approx(busbw_GBps * GB)


def test_auto_picks_latency_protocol_for_small_and_simple_for_large(dgx1):
    m = CommCostModel(dgx1)
    small = m.collective("allreduce", 1024, dgx1.gpus)
    large = m.collective("allreduce", 4 * GiB, dgx1.gpus)
    assert small.protocol is Protocol.LL
    assert large.protocol is Protocol.SIMPLE
    assert small.time_s < large.time_s


def test_results_are_cached_and_op_accepts_enum_or_string(dgx1):
    m = CommCostModel(dgx1)
    a = m.collective("allreduce", 1 << 20, dgx1.gpus)
    b = m.collective(CollectiveOp.ALLREDUCE, 1 << 20, tuple(dgx1.gpus))
    assert a is b


def test_algorithm_by_exact_value_alias_or_member_is_one_result(dgx1):
    # collective() looks an exact value up without the parse; aliases and other spellings
    # still go through Algorithm.parse and land on the same cached result
    m = CommCostModel(dgx1)
    a = m.collective("allreduce", 1 << 20, dgx1.gpus, algorithm="tree")
    assert a.algorithm is Algorithm.TREE
    assert m.collective("allreduce", 1 << 20, dgx1.gpus, algorithm=Algorithm.TREE) is a
    assert m.collective("allreduce", 1 << 20, dgx1.gpus, algorithm="dbtree") is a
    assert m.collective("allreduce", 1 << 20, dgx1.gpus, algorithm="TREE") is a
    auto = m.collective("allreduce", 1 << 20, dgx1.gpus, algorithm="auto")
    assert m.collective("allreduce", 1 << 20, dgx1.gpus, algorithm="Auto") is auto


def test_single_gpu_group_costs_nothing(dgx1):
    r = CommCostModel(dgx1).collective("allreduce", 1 << 20, dgx1.gpus[:1])
    assert r.time_s == 0.0 and r.group_size == 1


def test_link_params_override_changes_bandwidth(dgx1):
    lp = LinkParams.from_dict({"nvlink": {"bandwidth_GBps": 10.0, "alpha_us": 2.0}})
    info = CommCostModel(dgx1, lp).group_info(dgx1.gpus)
    assert info.ring_bw_Bps == pytest.approx(6 * 10 * GB)
    assert info.alpha_intra_s == pytest.approx(2 * us)
    assert LinkParams.from_dict(lp.to_dict()) == lp


def test_every_algorithm_runs(dgx_a100_2):
    m = CommCostModel(dgx_a100_2)
    g = dgx_a100_2.gpus
    cpu = next(n for n, d in dgx_a100_2.graph.nodes(data=True) if d["kind"].value == "cpu")
    cases = [
        ("allreduce", a)
        for a in ("ring", "tree", "halving_doubling", "hierarchical", "torus2d", "ps", "host")
    ] + [("allgather", "direct"), ("reducescatter", "halving_doubling"), ("alltoall", "auto")]
    for op, algo in cases:
        r = m.collective(op, 64 << 20, g, algo)
        assert r.time_s > 0 and math.isfinite(r.time_s), (op, algo)
    ps_cpu = m.collective("allreduce", 64 << 20, (*g[:8], cpu), "ps")
    assert ps_cpu.algorithm is Algorithm.PS
    p2p = m.collective("sendrecv", 64 << 20, (g[0], g[8]))
    assert p2p.algorithm is Algorithm.P2P


def test_hierarchical_beats_flat_ring_only_where_intra_is_faster(dgx_a100_2):
    m = CommCostModel(dgx_a100_2)
    flat = m.collective("allreduce", GiB, dgx_a100_2.gpus, "ring")
    hier = m.collective("allreduce", GiB, dgx_a100_2.gpus, "hierarchical")
    # inter-node traffic per node is the same, intra-node steps are extra: not faster than ring
    assert hier.time_s >= 0.95 * flat.time_s


def test_parameter_server_on_a_pcie_host_is_slower_than_nvlink_ring(dgx1):
    m = CommCostModel(dgx1)
    assert (
        m.collective("allreduce", 1 << 26, dgx1.gpus, "ps").time_s
        > 5 * m.collective("allreduce", 1 << 26, dgx1.gpus, "ring").time_s
    )


@pytest.mark.parametrize(
    ("op", "size", "group", "algo", "match"),
    [
        ("allreduce", 1024, (), "auto", "empty"),
        ("allreduce", 0, None, "auto", "> 0"),
        ("allreduce", -1, None, "auto", "> 0"),
        ("allreduce", 1024, ("gpu0", "gpu99"), "auto", "gpu99"),
        ("allreduce", 1024, ("gpu0", "gpu0"), "auto", "twice"),
        ("allreduce", 1024, ("gpu0", "plx0"), "auto", "not a GPU"),
        ("alltoall", 1024, None, "ring", "does not implement"),
        ("sendrecv", 1024, ("gpu0",), "auto", "at least 2"),
        ("allreduce", 1024, None, "magic", "unknown algorithm"),
        ("allscatter", 1024, None, "auto", "unknown collective"),
    ],
)
def test_bad_input_is_one_clear_error(dgx1, op, size, group, algo, match):
    with pytest.raises(ConfigError, match=match):
        CommCostModel(dgx1).collective(op, size, dgx1.gpus if group is None else group, algo)


def test_cpu_endpoints(dgx1):
    m = CommCostModel(dgx1)
    g = dgx1.gpus
    assert m.collective("allreduce", 1 << 24, (*g[:4], "cpu0")).algorithm is Algorithm.PS
    assert m.collective("allreduce", 1 << 24, (*g[:4], "cpu0"), "host").time_s > 0
    assert m.collective("sendrecv", 1 << 24, ("gpu0", "cpu0")).time_s > 0
    with pytest.raises(ConfigError, match="CPU"):
        m.collective("allgather", 1 << 24, (*g[:4], "cpu0"))


def test_bad_fidelity(dgx1):
    with pytest.raises(ConfigError, match="fidelity"):
        CommCostModel(dgx1, fidelity="exact")


def test_1024_gpu_group_is_fast():
    import time

    from perfmodel.topology import load_system

    topo = load_system("dgx-a100", nodes=128)
    m = CommCostModel(topo)
    t0 = time.perf_counter()
    r = m.collective("allreduce", GiB, topo.gpus)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for size in (1 << 20, 1 << 24, 1 << 28):
        m.collective("allreduce", size, topo.gpus)
    again = time.perf_counter() - t0
    assert r.group_size == 1024 and r.nodes == 128
    assert first < 5.0  # group analysis once (~1 s on one core)
    assert again < 0.05  # cached group: closed form only
