"""Token dispatchers of expert-parallel layers (plan key ``moe_dispatcher``): the NCCL
all-to-all of every routed row, the flex dispatchers (DeepEP / HybridEP) that send a token once
per destination rank or server, and the all-gather dispatcher."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, resolve
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import dispatch_share, expected_units_hit
from perfmodel.parallel.plan import MoEDispatcher, ParallelismPlan, parse_plan_string
from perfmodel.parallel.taskgraph import CommKind, TaskKind
from perfmodel.pipeline.lower import build_step
from perfmodel.workload import build_model
from perfmodel.workload.layers import ExpertRole
from perfmodel.workload.zoo.moe import routing_sampling_load

SMALL = {
    "hidden": 256,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "ffn_hidden": 512,
    "experts": 16,
    "top_k": 4,
    "seq_len": 512,
    "vocab": 1024,
}


def _sampled_units(
    experts: int, top_k: int, units: int, groups: tuple[int, int], n: int = 20000
) -> float:
    """Monte Carlo of :func:`expected_units_hit`: the routing its docstring describes."""
    rnd = random.Random(7)
    g, picked = groups if groups[0] else (1, 1)
    per_group, per_unit = experts // g, experts // units
    hits = 0
    for _ in range(n):
        chosen = rnd.sample(range(g), picked)
        pool = [e for c in chosen for e in range(c * per_group, (c + 1) * per_group)]
        hits += len({e // per_unit for e in rnd.sample(pool, top_k)})
    return hits / n


def test_expected_units_golden() -> None:
    # 4 ranks of 2 experts, top-2: a rank misses with C(6,2)/C(8,2) = 15/28
    assert expected_units_hit(8, 2, 4) == pytest.approx(4 * (1 - 15 / 28))
    assert expected_units_hit(128, 1, 16) == pytest.approx(1.0)  # one expert: one unit
    assert expected_units_hit(128, 8, 1) == pytest.approx(1.0)  # one unit holds them all
    assert expected_units_hit(16, 16, 4) == pytest.approx(4.0)  # every expert: every unit
    # groups of one unit each and one group per token: every expert on one unit
    assert expected_units_hit(8, 2, 4, (4, 1)) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("experts", "top_k", "units", "groups"),
    [
        (256, 8, 4, (8, 4)),  # DeepSeek-V3 over 4 servers: groups nest in units
        (256, 8, 32, (8, 4)),  # over 32 ranks: units nest in groups
        (128, 8, 16, (0, 0)),
        (64, 6, 8, (0, 0)),
    ],
)
def test_expected_units_matches_sampling(
    experts: int, top_k: int, units: int, groups: tuple[int, int]
) -> None:
    exact = expected_units_hit(experts, top_k, units, groups)
    assert exact == pytest.approx(_sampled_units(experts, top_k, units, groups), rel=0.02)


@settings(max_examples=60, deadline=None)
@given(
    per_unit=st.integers(1, 16),
    units=st.sampled_from([1, 2, 4, 8, 16]),
    top_k=st.integers(1, 8),
)
def test_expected_units_bounds_and_monotone(per_unit: int, units: int, top_k: int) -> None:
    experts = per_unit * units
    if top_k > experts:
        return
    e = expected_units_hit(experts, top_k, units)
    assert 1.0 - 1e-12 <= e <= min(units, top_k) + 1e-12
    if units > 1:  # fewer, larger units are hit no more often
        assert expected_units_hit(experts, top_k, units // 2 or 1) <= e + 1e-12


def test_units_errors() -> None:
    with pytest.raises(ConfigError, match="do not split"):
        expected_units_hit(10, 2, 4)
    with pytest.raises(ConfigError, match="exceeds"):
        expected_units_hit(16, 8, 4, (4, 1))  # one group of 4 experts cannot hold 8
    with pytest.raises(ConfigError, match="do not nest"):
        expected_units_hit(48, 2, 4, (6, 2))


def test_dispatch_share() -> None:
    a2a, deepep = MoEDispatcher.ALLTOALL, MoEDispatcher.DEEPEP
    assert dispatch_share(a2a, 128, 8, 16, 2) == 1.0
    # one server: once per rank hit; several: once per server hit (the RDMA leg)
    assert dispatch_share(deepep, 128, 8, 8, 1) == pytest.approx(expected_units_hit(128, 8, 8) / 8)
    assert dispatch_share(MoEDispatcher.HYBRIDEP, 128, 8, 16, 2) == pytest.approx(
        expected_units_hit(128, 8, 2) / 8
    )
    assert dispatch_share(deepep, 256, 8, 32, 4, (8, 4)) == pytest.approx(2.9277 / 8, abs=1e-4)
    assert dispatch_share(deepep, 128, 8, 1, 1) == 1.0  # no expert parallelism
    # uneven servers or groups that do not nest: no error in the lowering, a safe share
    assert dispatch_share(deepep, 48, 2, 16, 4, (6, 2)) == pytest.approx(
        expected_units_hit(48, 2, 4) / 2
    )
    assert dispatch_share(deepep, 128, 8, 24, 3) == 1.0


def test_parse_and_describe() -> None:
    assert parse_plan_string("ep=8,moe_dispatcher=deepep") == {"ep": 8, "moe_dispatcher": "deepep"}
    assert MoEDispatcher.parse("flex-hybridep") is MoEDispatcher.HYBRIDEP
    assert MoEDispatcher.parse(None) is MoEDispatcher.ALLTOALL
    assert MoEDispatcher.parse("All_Gather") is MoEDispatcher.ALLGATHER
    with pytest.raises(ConfigError, match="moe_dispatcher"):
        MoEDispatcher.parse("nccl")
    plan = ParallelismPlan(dp=8, ep=8, moe_dispatcher=MoEDispatcher.DEEPEP)
    assert "moe_dispatcher=deepep" in plan.describe()
    assert "moe_dispatcher" not in ParallelismPlan(dp=8, ep=8).describe()


def test_dispatch_layers_carry_routing() -> None:
    w = build_model("deepseek_v3", batch_size=1, seq_len=256, layers=4, ep=8)
    disp = next(la for la in w.layers if la.expert_role is ExpertRole.DISPATCH)
    comb = next(la for la in w.layers if la.expert_role is ExpertRole.COMBINE)
    for la in (disp, comb):
        assert (la.experts, la.top_k, la.routing_groups) == (256, 8, (8, 4))
    with pytest.raises(ConfigError, match="router_groups"):
        build_model("moe", batch_size=1, router_groups=3, router_group_topk=1)
    with pytest.raises(ConfigError, match="cannot hold"):
        build_model("moe", batch_size=1, experts=8, top_k=4, router_groups=8, router_group_topk=1)


def _ep_specs(dispatcher: str | None, nodes: int = 2) -> list:
    sc = Scenario(
        system="dgx-h100",
        nodes=nodes,
        model="moe",
        model_args=SMALL,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
        software="megatron-core",
        ep=8 * nodes,
        global_batch=8 * nodes,
        moe_dispatcher=dispatcher,
    )
    step, _ = build_step(sc, resolve(sc))
    specs = [
        t.comm
        for t in step.graph.tasks
        if t.kind is TaskKind.COLLECTIVE and t.comm is not None and t.comm.kind is CommKind.EP
    ]
    # the routed rows' collectives, not the NCCL dispatcher's all-gather of the token counts
    return [s for s in specs if s.op is not CollectiveOp.ALLGATHER or dispatcher == "allgather"]


#: Share of the NCCL dispatcher's all-to-all bytes that are the routed rows: a layer's
#: dispatch and combine of one phase run as one collective (2 x 2 B x hidden per row), with
#: the FP32 probability of each row (4 B) that the dispatch sends beside its rows.
ROWS_SHARE = 2 * 2 * 256 / (2 * 2 * 256 + 4)


def test_flex_dispatch_sends_the_deduplicated_rows() -> None:
    a2a = _ep_specs(None)
    flex = _ep_specs("deepep")
    assert a2a and len(a2a) == len(flex)
    share = dispatch_share(MoEDispatcher.DEEPEP, 16, 4, 16, 2)  # 16 experts, 2 servers
    assert share < 1
    for x, y in zip(a2a, flex, strict=True):
        assert y.op is x.op is CollectiveOp.ALLTOALL
        assert y.message_bytes == pytest.approx(x.message_bytes * share * ROWS_SHARE)


def test_allgather_dispatcher_gathers_and_reduce_scatters() -> None:
    a2a = _ep_specs(None, nodes=1)
    ag = _ep_specs("allgather", nodes=1)
    ops = {s.op for s in ag}
    assert ops == {CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER}
    # each all-to-all of tokens x top_k rows becomes a collective over the 8 ranks' tokens
    # (a top_k-th of the routed rows each), half gathers and half reduce-scatters
    total = sum(s.message_bytes for s in a2a) * ROWS_SHARE
    gathered = sum(s.message_bytes for s in ag if s.op is CollectiveOp.ALLGATHER)
    scattered = sum(s.message_bytes for s in ag if s.op is CollectiveOp.REDUCESCATTER)
    assert gathered + scattered == pytest.approx(total / 4 * 8)
    assert math.isclose(gathered, scattered)


def test_overlapped_dispatch_slows_the_compute_beside_it() -> None:
    from perfmodel.parallel.expert import ep_overlap_exposed_s, overlap_compute_slowdown
    from perfmodel.parallel.segment_comm import SegmentComm, _exposed_shares, _scaled

    # DeepEP's 20 SMs of a B200's 148: compute beside it runs 148/128 as long
    s = overlap_compute_slowdown(MoEDispatcher.DEEPEP, 148)
    assert s == pytest.approx(20 / 128)
    assert overlap_compute_slowdown(MoEDispatcher.HYBRIDEP, 132) == pytest.approx(32 / 100)
    assert ep_overlap_exposed_s(2.0, 1.0, s) == pytest.approx(1.0 + 1.0 * s)
    assert ep_overlap_exposed_s(1.0, 3.0, s) == pytest.approx(s)
    a2a = CollectiveOp.ALLTOALL
    comms = [SegmentComm(CommKind.EP, "F", a2a, 4e6, 0.002, 0.002)]
    share_f, _ = _exposed_shares(0.002, 0.0, 0.0, 0.004, s)  # 2 ms beside 4 ms of backward
    c = _scaled(comms[0], share_f)
    assert c.duration_s == pytest.approx(0.002 * s) and c.full_s == 0.002


def test_dispatcher_sync_makes_the_gpu_wait_for_the_host() -> None:
    """Megatron-Core's dropless dispatchers synchronise the host with the GPU once per MoE
    layer's forward: the lowering adds one host task per forward ("host-sync" stream, counted
    as host in the breakdown) as long as the two-machine flow-shop lead of the layers from each
    dispatch to the next or the forward's end, by hand from the layers' own host and GPU
    times (ep = 1: no dispatch collective in the run); a dense model has none."""
    from perfmodel.parallel.expert import dispatcher_sync_stall_s
    from perfmodel.pipeline.lower import step_workload
    from perfmodel.workload.layers import ExpertRole

    sc = Scenario(system="dgx-h100", gpus=1, model="moe", model_args=SMALL, batch_per_gpu=2,
                  microbatch=1, precision="bf16", software="megatron-core",
                  fidelity="analytic")  # fmt: skip
    r = resolve(sc)
    step, costs = build_step(sc, r)
    syncs = [t for t in step.graph.tasks if t.label.startswith("MoE dispatcher host sync F")]
    assert len(syncs) == 2 and {t.stream for t in syncs} == {"host-sync"}  # 2 micro-batches
    w, _ = step_workload(sc, r, None)
    runs: list[list[tuple[float, float]]] = []
    for la in w.layers:
        if la.expert_role is ExpertRole.DISPATCH:
            runs.append([])
        if runs:
            runs[-1].append((costs.layer_host_time(la)[0], costs.layer_time(la)[0]))
    assert len(runs) == SMALL["layers"]
    expected = sum(dispatcher_sync_stall_s(run) for run in runs)
    assert expected > 0
    assert syncs[0].duration_s == pytest.approx(expected)
    dense = Scenario(system="dgx-h100", gpus=1, model="llama", batch_per_gpu=1, precision="bf16",
                     software="megatron-core", fidelity="analytic",
                     model_args={"hidden": 256, "layers": 2, "heads": 4, "seq_len": 512,
                                 "vocab": 1024})  # fmt: skip
    step, _ = build_step(dense, resolve(dense))
    assert not [t for t in step.graph.tasks if t.stream == "host-sync"]


def test_flex_kernel_rates_golden() -> None:
    """The published kernel bandwidths, read back as the benchmarks state them (GB/s at the
    benchmark's line rate), and the floor by hand."""
    from perfmodel.parallel.expert import FLEX_KERNEL_RATES, DispatchFabric, flex_kernel_floor_s

    rdma = FLEX_KERNEL_RATES[("hybridep", DispatchFabric.RDMA)]
    assert rdma.fraction(16, False) * 50 == pytest.approx(71.71)  # H100, 16 ranks, dispatch
    assert rdma.fraction(32, True) * 50 == pytest.approx(57.46)  # combine, 32 ranks
    assert rdma.fraction(128, False) * 50 == pytest.approx(49.97)  # held beyond 64 ranks
    nvl = FLEX_KERNEL_RATES[("hybridep", DispatchFabric.NVLINK)]
    assert nvl.fraction(8, False) * 900 == pytest.approx(764.03)
    assert nvl.fraction(4, True) * 900 == pytest.approx(737.13)  # held below 8 ranks
    # 12 ranks: halfway in log2 between 8 (764.03) and 16 (706.95)? log2(12) = 3.585
    t = (math.log2(12) - 3) / 1
    assert nvl.fraction(12, False) * 900 == pytest.approx(764.03 + t * (706.95 - 764.03))
    assert FLEX_KERNEL_RATES[("deepep", DispatchFabric.RDMA)].fraction(32, False) == 58 / 50
    # 16.8 MB per rank (4096 tokens x 2048 x 2 B) once to each of 8 B200s it hits (5.29 of 8):
    # 88.8 MB at 764.03 GB/s
    t_ = flex_kernel_floor_s(MoEDispatcher.HYBRIDEP, DispatchFabric.NVLINK, 8,
                             4096 * 2048 * 2, 5.29, 900e9, combine=False)  # fmt: skip
    assert t_ == pytest.approx(4096 * 2048 * 2 * 5.29 / 764.03e9)
    for d in (MoEDispatcher.ALLTOALL, MoEDispatcher.ALLGATHER):  # NCCL: priced by comm
        assert flex_kernel_floor_s(d, DispatchFabric.RDMA, 16, 1e6, 2.0, 50e9, False) == 0.0


@settings(max_examples=40, deadline=None)
@given(ranks=st.integers(1, 512), combine=st.booleans())
def test_flex_kernel_fractions_stay_in_the_published_range(ranks: int, combine: bool) -> None:
    from perfmodel.parallel.expert import FLEX_KERNEL_RATES

    for rate in FLEX_KERNEL_RATES.values():
        ys = rate.combine if combine else rate.dispatch
        assert min(ys) - 1e-12 <= rate.fraction(ranks, combine) <= max(ys) + 1e-12


def test_flex_fabric_reads_the_link() -> None:
    from perfmodel.parallel.expert import DispatchFabric, flex_fabric

    sc = Scenario(system="dgx-h100", nodes=2, gpus=16, model="moe", model_args=SMALL,
                  global_batch=16, precision="bf16", fidelity="analytic")  # fmt: skip
    topo = resolve(sc).topology
    g = topo.gpus
    assert flex_fabric(topo, g[:8]) == (DispatchFabric.NVLINK, 450e9)  # NVLink 4 per direction
    assert flex_fabric(topo, g[:16]) == (DispatchFabric.RDMA, 50e9)  # a 400 Gb/s NIC port
    assert flex_fabric(None, g[:16]) == (DispatchFabric.NVLINK, 0.0)


def test_flex_dispatch_takes_at_least_its_published_kernel_time() -> None:
    """Hybrid-EP over two H100 servers: each dispatch/combine all-to-all lasts at least the
    published kernel time of its tokens (4096 x 2048 x 2 B per rank, sent once to each server
    hit) at 71.71 / 62.95 GB/s (16 ranks); before, the collective model's NIC-bound all-to-all
    ran at 87.7 GB/s in the same count. The NCCL all-to-all dispatcher keeps its collective."""
    from perfmodel.parallel.expert import FLEX_KERNEL_RATES, DispatchFabric

    args = {**SMALL, "hidden": 2048, "heads": 16, "kv_heads": 4, "seq_len": 4096,
            "experts": 32, "top_k": 8, "layers": 1}  # fmt: skip

    def ep_tasks(dispatcher: str) -> list:
        sc = Scenario(system="dgx-h100", nodes=2, model="moe", model_args=args,
                      precision="bf16", optimizer="adam", fidelity="analytic",
                      software="megatron-core", ep=16, global_batch=16,
                      moe_dispatcher=dispatcher)  # fmt: skip
        step, _ = build_step(sc, resolve(sc))
        return [t for t in step.graph.tasks
                if t.kind is TaskKind.COLLECTIVE and t.comm is not None
                and t.comm.kind is CommKind.EP]  # fmt: skip

    flex = [t for t in ep_tasks("hybridep") if t.comm.op is CollectiveOp.ALLTOALL]
    assert len(flex) == 2  # per phase, the dispatch and the combine back to back
    rate = FLEX_KERNEL_RATES[("hybridep", DispatchFabric.RDMA)]
    # the busiest rank's rows (tokens x top_k x the sampling load) over top_k, as tokens
    rows = math.ceil(4096 * 8 * routing_sampling_load(32, 8, 16, 4096 * 8))
    counted = rows * 2048 * 2 / 8 * expected_units_hit(32, 8, 2)
    pair = sum(counted / (rate.fraction(16, c) * 50e9) for c in (False, True))
    assert [t.duration_s for t in flex] == pytest.approx([pair, pair])
    a2a = ep_tasks("alltoall")  # the NCCL all-to-all of every routed row: no floor
    a2a = [t for t in a2a if t.comm.op is CollectiveOp.ALLTOALL]
    share = dispatch_share(MoEDispatcher.HYBRIDEP, 32, 8, 16, 2)
    assert min(t.duration_s for t in a2a) > pair / share * 0.5


def test_hybridep_gathers_the_routing_map_once_per_forward_dispatch() -> None:
    """Hybrid-EP's forward dispatch all-gathers every rank's boolean routing map (tokens x
    experts x 1 B) over the expert-parallel group before the tokens move (DeepEP hybrid-ep
    ``Executor::allgather_routing_map``); the backward passes reuse the handle. By hand: each
    rank's own tokens (global batch 16 over dp = 16 ranks: 1 sequence of 4096, whatever the
    routing load), times 32 experts x 1 B, times 16 ranks, priced as the
    communication model's all-gather of those bytes on the group. DeepEP and the NCCL
    all-to-all dispatcher gather no map (the latter only its token counts, int64 per expert)."""
    from perfmodel.parallel.expert import routing_map_gather_bytes

    assert routing_map_gather_bytes(MoEDispatcher.HYBRIDEP, 4096, 128, 16) == 16 * 4096 * 128
    assert routing_map_gather_bytes(MoEDispatcher.HYBRIDEP, 4096, 128, 1) == 0.0
    for d in (MoEDispatcher.DEEPEP, MoEDispatcher.ALLTOALL, MoEDispatcher.ALLGATHER):
        assert routing_map_gather_bytes(d, 4096, 128, 16) == 0.0

    args = {**SMALL, "hidden": 2048, "heads": 16, "kv_heads": 4, "seq_len": 4096,
            "experts": 32, "top_k": 8, "layers": 1}  # fmt: skip

    def gathers(dispatcher: str) -> tuple[list, object, object]:
        sc = Scenario(system="dgx-h100", nodes=2, model="moe", model_args=args,
                      precision="bf16", optimizer="adam", fidelity="analytic",
                      software="megatron-core", ep=16, global_batch=16,
                      moe_dispatcher=dispatcher)  # fmt: skip
        step, costs = build_step(sc, resolve(sc))
        tasks = [t for t in step.graph.tasks
                 if t.kind is TaskKind.COLLECTIVE and t.comm is not None
                 and t.comm.kind is CommKind.EP and t.comm.op is CollectiveOp.ALLGATHER]  # fmt: skip
        return tasks, costs, step

    tasks, costs, _ = gathers("hybridep")
    assert len(tasks) == 1 and tasks[0].label.startswith("EP allgather F")
    nbytes = 16 * 4096 * 32 * 1  # review mend 3: was the busiest rank's rows / top_k
    assert tasks[0].comm.message_bytes == pytest.approx(nbytes)
    group = tasks[0].comm.group
    assert len(group) == 16
    t = costs.concurrent_time(CollectiveOp.ALLGATHER, nbytes, (group,), "auto")
    assert tasks[0].duration_s == pytest.approx(t) and t > 0
    assert gathers("deepep")[0] == []


def test_allgather_dispatcher_waits_after_its_gather() -> None:
    """The all-gather dispatcher reads the token counts on the host once the tokens are
    gathered (Megatron-LM 4415119 ``MoEAllGatherTokenDispatcher``): the gather runs before the
    wait, so it hides none of the host's issue after it. The GPU's wait is the flow shop's lead
    of each run with the permute's compute alone and the combine's reduce-scatter, by hand;
    counting the gather in the run (the NCCL dispatcher's order) would hide it."""
    from perfmodel.parallel.expert import dispatcher_sync_stall_s
    from perfmodel.pipeline.lower import step_workload

    sc = Scenario(system="dgx-h100", gpus=8, model="moe", model_args=SMALL, precision="bf16",
                  optimizer="adam", fidelity="analytic", software="megatron-core", ep=8,
                  global_batch=8, moe_dispatcher="allgather")  # fmt: skip
    r = resolve(sc)
    step, costs = build_step(sc, r)
    tasks = step.graph.tasks
    w, _ = step_workload(sc, r, None)
    # the segment's collectives add up its identical MoE layers'
    n = sum(la.expert_role is ExpertRole.DISPATCH for la in w.layers)
    gather = next(t.duration_s for t in tasks if t.label.startswith("EP allgather F0")) / n
    scatter = next(t.duration_s for t in tasks if t.label.startswith("EP reducescatter F0")) / n
    runs: list[list[tuple[float, float]]] = []
    for la in w.layers:
        if la.expert_role is ExpertRole.DISPATCH:
            runs.append([])
        if runs:
            g = costs.layer_time(la)[0] + (scatter if la.expert_role is ExpertRole.COMBINE else 0)
            runs[-1].append((costs.layer_host_time(la)[0], g))
    expected = sum(dispatcher_sync_stall_s(run) for run in runs)
    hidden = sum(
        dispatcher_sync_stall_s([(run[0][0], run[0][1] + gather), *run[1:]]) for run in runs
    )
    syncs = [t for t in tasks if t.label.startswith("MoE dispatcher host sync F0")]
    assert len(syncs) == 1 and syncs[0].duration_s == pytest.approx(expected)
    assert expected > hidden  # the gather would have hidden part of the issue
