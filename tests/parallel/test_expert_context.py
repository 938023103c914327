"""Expert parallelism (ep, etp) and context parallelism (cp): plan feasibility, per-rank
workloads (hand-counted parameters, all-to-all and ring bytes), the groups on the topology,
ring overlap, model-state sharding over the expert data-parallel group, and 'ep'/'cp' in the
breakdown of a prediction."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fresh_chunks import lowerings

from perfmodel.api import Scenario, predict, resolve
from perfmodel.errors import InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import (
    CPImpl,
    RingSteps,
    context_groups,
    expert_groups,
    ring_exposed_s,
    torch_cp_exposed_s,
)
from perfmodel.parallel.partition import partition
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import ParallelismPlan, parse_plan_string
from perfmodel.parallel.segment_comm import SegmentCommContext, _expert_context_comm
from perfmodel.workload import ExpertRole, build_model
from perfmodel.workload.kernels import Fusion, KernelRecipe
from perfmodel.workload.zoo.moe import routing_sampling_load
from tests.parallel.moe_shapes import MIXTRAL_EXPERTS, SMALL_MOE

# Mixtral 8x7B (config.json of huggingface.co/mistralai/Mixtral-8x7B-v0.1): 32 layers of
# 8 SwiGLU experts of 3 x 4096 x 14336 weights
MIXTRAL_TOTAL = 46_702_792_704

SMALL = SMALL_MOE


# ---------------------------------------------------------------------------- plan


def test_plan_folding_and_sizes() -> None:
    # MoE parallel folding: ep need not divide dp (issue 13's example, with etp = 1)
    p = ParallelismPlan(dp=16, tp=2, ep=32, etp=1)
    assert (p.num_gpus, p.expert_tp, p.expert_dp, p.grad_replicas) == (32, 1, 1, 16)
    q = ParallelismPlan(dp=8, tp=8, pp=16, cp=16)
    assert (q.num_gpus, q.grad_replicas, q.describe()) == (
        16384,
        128,
        "dp=8,tp=8,pp=16,cp=16,schedule=1f1b",
    )
    assert ParallelismPlan(dp=64, ep=8).expert_dp == 8
    with pytest.raises(InfeasiblePlanError, match=r"ep=32 x etp=2 must divide .* = 32.*etp=1"):
        ParallelismPlan(dp=16, tp=2, ep=32)
    with pytest.raises(InfeasiblePlanError, match="cp=0"):
        ParallelismPlan(cp=0)
    assert parse_plan_string("dp=8,ep=4,cp=2,etp=1") == {"dp": 8, "ep": 4, "cp": 2, "etp": 1}


def test_world_includes_cp_and_errors_say_so() -> None:
    sc = Scenario(system="dgx-h100", nodes=2, model="llama", global_batch=8, cp=2, tp=8)
    assert resolve(sc).plan.dp == 1  # 16 GPUs = dp x tp x cp
    with pytest.raises(InfeasiblePlanError, match=r"tp\*pp\*cp=24 does not divide the 16"):
        resolve(Scenario(system="dgx-h100", nodes=2, model="llama", global_batch=8, cp=3, tp=8))


# ---------------------------------------------------------------------------- workloads


def test_expert_parallel_rank_holds_its_experts_and_alltoalls() -> None:
    w = build_model("mixtral_8x7b", batch_size=1, precision="bf16", ep=8)
    assert w.total_params == MIXTRAL_TOTAL
    local = sum(la.params for la in w.layers)
    assert local == MIXTRAL_TOTAL - MIXTRAL_EXPERTS + MIXTRAL_EXPERTS // 8  # 7,242,780,672
    disp = next(la for la in w.layers if la.expert_role is ExpertRole.DISPATCH)
    # one expert per rank receives 4096 tokens x top_k 2 = 8192 routed rows on average; the
    # busiest of the 8 ranks a little more (the sampling noise of 32,768 routed tokens)
    busiest = -(-8192 * routing_sampling_load(8, 2, 8, 8192) // 1)
    assert 8192 < busiest < 8192 * 1.03
    # the busiest rank's rows x hidden 4096 x 2 bytes, in forward and in backward
    (a2a,) = disp.fwd_comm
    assert (a2a.op, a2a.group, a2a.message_bytes) == (CollectiveOp.ALLTOALL, "ep", busiest * 8192)
    assert disp.bwd_comm == disp.fwd_comm
    fc1 = next(la for la in w.layers if la.name.endswith("experts_fc1"))
    assert (fc1.gemm.batch, fc1.gemm.m) == (1, busiest)
    # the routed FLOP per rank scale with the busiest rank's rows (same rows on average,
    # fewer experts); everything else is unchanged by ep
    dense = build_model("mixtral_8x7b", batch_size=1, precision="bf16")
    mine = {la.name: la.total_flop for la in w.layers}
    for la in dense.layers:
        routed = la.name.rsplit(".", 1)[-1].startswith(("experts_", "permute", "unpermute"))
        want = la.total_flop * (busiest / 8192 if routed else 1)
        assert mine[la.name] == pytest.approx(want, rel=1e-9), la.name


def test_load_imbalance_and_capacity_scale_the_busiest_rank() -> None:
    def rows(**kw: object) -> int:
        w = build_model("moe", batch_size=1, precision="bf16", ep=4, **SMALL, **kw)
        return next(la for la in w.layers if la.name.endswith("experts_fc1")).output_shape[0]

    noise = routing_sampling_load(8, 2, 4, 1024)  # 512 tokens x top-2 over 4 ranks
    assert 1.0 < noise < 1.1
    assert rows() == -(-1024 * noise // 1)
    assert rows(load_imbalance="1.5") == -(-1024 * 1.5 * noise // 1)
    assert rows(load_imbalance="1.5", capacity_factor="1.25") == 1280  # dropped beyond capacity


def test_expert_and_context_feasibility_errors() -> None:
    with pytest.raises(InfeasiblePlanError, match=r"ep=3 must divide experts=8.*\[1, 2, 4, 8\]"):
        build_model("mixtral_8x7b", batch_size=1, ep=3)
    with pytest.raises(InfeasiblePlanError, match="has no routed experts"):
        build_model("llama", batch_size=1, ep=2)
    with pytest.raises(InfeasiblePlanError, match=r"2 x cp = 8 equal chunks"):
        build_model("llama", batch_size=1, cp=4, seq_len=4100)
    with pytest.raises(InfeasiblePlanError, match="does not support it"):
        build_model("bert", batch_size=1, cp=2)


def test_context_parallel_attention_is_one_cp_th_and_rings_kv() -> None:
    """Transformer Engine's ring (Megatron-Core kernels): GQA native, the kv heads travel."""
    args = {"hidden": 256, "layers": 2, "heads": 4, "kv_heads": 2, "seq_len": 1024, "vocab": 512}
    te = KernelRecipe(fusion=Fusion.TE)
    full = build_model("llama", batch_size=1, precision="bf16", kernels=te, **args)
    part = build_model("llama", batch_size=1, precision="bf16", cp=4, kernels=te, **args)

    def attn(w):
        return next(la for la in w.layers if la.name.endswith("attention"))

    # causal: 2 b s^2 heads (d + d) / 2 over the whole sequence, a quarter per rank
    assert attn(full).fwd_flop == 2 * 1024 * 1024 * 4 * 128 / 2
    assert attn(part).fwd_flop == attn(full).fwd_flop / 4
    # K and V of 256 local positions x 2 kv heads x 64, bf16, all 4 chunks (all-gather output)
    ring = 4 * 2 * 256 * 2 * 64 * 2
    assert [(c.op, c.group, c.message_bytes) for c in attn(part).fwd_comm] == [
        (CollectiveOp.ALLGATHER, "cp", ring)
    ]
    assert [c.op for c in attn(part).bwd_comm] == [
        CollectiveOp.ALLGATHER,
        CollectiveOp.REDUCESCATTER,
    ]
    # activations of every layer are for 1/cp of the sequence
    assert part.layers[1].output_shape == (1, 256, 256)


@pytest.mark.parametrize("fusion", [Fusion.EAGER, Fusion.COMPILE])
def test_torch_context_parallel_exchanges_repeated_kv_and_fp32_grads(fusion: Fusion) -> None:
    """PyTorch's ``context_parallel`` (torchtitan) rings SDPA's inputs, K/V repeated to all 4
    query heads: the all-gather is twice the kv-head ring; the backward gathers again and
    permutes the FP32 dK/dV (4 chunks x 256 positions x 4 heads x 64 x 2 tensors x 4 B). The
    merge moves the fused minimum under torch.compile and the ATen chain in eager (per element
    and step: forward 10 vs 38 bytes, key/value accumulators 10 vs 22)."""
    args = {"hidden": 256, "layers": 2, "heads": 4, "kv_heads": 2, "seq_len": 1024, "vocab": 512}
    w = build_model("llama", batch_size=1, precision="bf16", cp=4,
                    kernels=KernelRecipe(fusion=fusion), **args)  # fmt: skip
    by = {la.name: la for la in w.layers}
    attn, merge = by["layer0.attention"], by["layer0.attention_cp_merge"]
    ring = 4 * 4 * 256 * 2 * 64 * 2
    assert [(c.op, c.message_bytes) for c in attn.fwd_comm] == [(CollectiveOp.ALLGATHER, ring)]
    assert [(c.op, c.message_bytes) for c in attn.bwd_comm] == [
        (CollectiveOp.ALLGATHER, ring),
        (CollectiveOp.SENDRECV, 4 * 4 * 256 * 2 * 64 * 4),
    ]
    o = q = kv = 256 * 4 * 64  # one element count: 4 heads everywhere after repeat_kv
    eager = fusion is Fusion.EAGER
    assert merge.fwd_bytes == ((38 if eager else 10) * 4 + 6) * o
    assert merge.bwd_bytes == (10 * 4 + 6) * q + ((22 if eager else 10) * 4 + 6) * 2 * kv


def test_torch_ring_exposure_golden() -> None:
    """The all-gather hides under the first of cp steps only; each FP32 dK/dV permute under the
    next step, the last one waited for."""
    assert torch_cp_exposed_s(0.5, 0.0, RingSteps.equal(0.8, 4)) == pytest.approx(0.3)
    assert torch_cp_exposed_s(0.1, 0.4, RingSteps.equal(0.8, 4)) == pytest.approx(0.1)
    assert torch_cp_exposed_s(0.1, 1.2, RingSteps.equal(0.8, 4)) == pytest.approx(3 * 0.1 + 0.3)
    assert torch_cp_exposed_s(9.0, 9.0, RingSteps.equal(0.8, 1)) == 0.0


def test_compiled_torch_ring_exposes_every_collective_golden() -> None:
    """Traced by torch.compile, each functional collective is waited for where it is issued:
    the all-gather and the permutes show in full, whatever the attention beside them."""
    assert torch_cp_exposed_s(0.5, 0.4, RingSteps.equal(0.8, 4), traced=True) == pytest.approx(0.9)
    assert torch_cp_exposed_s(0.1, 0.4, RingSteps.equal(80.0, 4), traced=True) == pytest.approx(0.5)
    assert torch_cp_exposed_s(9.0, 9.0, RingSteps.equal(0.8, 1), traced=True) == 0.0
    # untraced, the same transfers under 80 s of attention leave only the last permute
    assert torch_cp_exposed_s(0.1, 0.4, RingSteps.equal(80.0, 4)) == pytest.approx(0.1)


def test_cp_impl_follows_the_stack_fusion() -> None:
    assert CPImpl.for_fusion(Fusion.TE) is CPImpl.TE_P2P
    assert CPImpl.for_fusion(Fusion.EAGER) is CPImpl.TORCH
    assert CPImpl.for_fusion(Fusion.COMPILE) is CPImpl.TORCH_COMPILE
    assert CPImpl.TORCH.sdpa_ring and CPImpl.TORCH_COMPILE.sdpa_ring
    assert not CPImpl.TE_P2P.sdpa_ring


class _FlatCosts:
    """Every collective at 1 TB/s, whatever its group (the exposure rule under test)."""

    def concurrent_time(self, op: CollectiveOp, nbytes: float, groups: object, alg: str) -> float:
        return nbytes / 1e12


def test_lowering_exposes_the_compiled_torch_ring_in_full() -> None:
    """One cp=4 attention layer under 10 s of compute per phase: the eager ring hides its
    all-gather under step 0 and each permute under the next step (only the last permute
    shows); the compiled one exposes every transfer; Transformer Engine's hides them all."""
    args = {k: v for k, v in SMALL.items() if k not in ("experts", "top_k")}
    w = build_model("llama", batch_size=1, precision="bf16", cp=4,
                    kernels=KernelRecipe(fusion=Fusion.COMPILE), **args)  # fmt: skip
    attn = next(la for la in w.layers if la.name == "layer0.attention")
    groups = {"cp": (("g0", "g1", "g2", "g3"),)}

    def exposed(impl: CPImpl, phase: str) -> tuple[float, float]:
        ctx = SegmentCommContext(_FlatCosts(), groups, "ring", ParallelismPlan(cp=4), impl)
        got = _expert_context_comm(attn, (10.0, 10.0), ctx)
        mine = [c for c in got if c.phase == phase]
        return sum(c.duration_s for c in mine), sum(c.full_s for c in mine)

    for phase, points in (("F", attn.fwd_comm), ("B", attn.bwd_comm)):
        full = sum(c.message_bytes for c in points) / 1e12
        shown, total = exposed(CPImpl.TORCH_COMPILE, phase)
        assert total == pytest.approx(full) and shown == pytest.approx(full)
        assert exposed(CPImpl.TE_P2P, phase)[0] == pytest.approx(0.0)
    last_permute = attn.bwd_comm[1].message_bytes / 4 / 1e12
    assert exposed(CPImpl.TORCH, "F")[0] == pytest.approx(0.0)
    assert exposed(CPImpl.TORCH, "B")[0] == pytest.approx(last_permute)


def test_ring_overlap_golden() -> None:
    assert ring_exposed_s(0.3, RingSteps.equal(0.8, 4)) == 0.0
    assert ring_exposed_s(0.9, RingSteps.equal(0.8, 4)) == pytest.approx(3 * (0.3 - 0.2))
    assert ring_exposed_s(1.0, RingSteps.equal(0.0, 1)) == 0.0


# ---------------------------------------------------------------------------- groups


def test_groups_fold_tp_fastest_then_cp_then_dp() -> None:
    # dp x cp = 4 on the data axis, tp = 2: stage ranks are g0..g7 in (data, tp) order
    pl = Placement(dp=4, tp=2, pp=1, gpus=tuple(f"g{i}" for i in range(8)))
    assert context_groups(pl, 0, 2) == [("g0", "g2"), ("g1", "g3"), ("g4", "g6"), ("g5", "g7")]
    assert expert_groups(pl, 0, 4, 1) == [("g0", "g1", "g2", "g3"), ("g4", "g5", "g6", "g7")]
    assert expert_groups(pl, 0, 2, 2) == [("g0", "g2"), ("g1", "g3"), ("g4", "g6"), ("g5", "g7")]


def test_llama3_uneven_first_and_last_stage() -> None:
    w = build_model("llama", batch_size=1, hidden=64, layers=126, heads=2, seq_len=16, vocab=64)
    parts = partition(w, 16, [1.0] * len(w.layers))
    blocks = [len({w.layers[i].block for i in p if w.layers[i].block is not None}) for p in parts]
    assert blocks == [7] + [8] * 14 + [7]


# ---------------------------------------------------------------------------- predictions


def _moe_scenario(**plan: object) -> Scenario:
    keys: dict[str, object] = {
        "system": "dgx-h100",
        "model": "moe",
        "model_args": SMALL,
        "precision": "bf16",
        "optimizer": "adam",
        "global_batch": 16,
        "fidelity": "analytic",
        "software": "megatron-core",
    }
    return Scenario(**{**keys, **plan})  # type: ignore[arg-type]


def test_expert_parallel_prediction_shows_ep_and_shards_state() -> None:
    rep = predict(_moe_scenario(ep=8), baseline=False)
    assert rep.breakdown.exposed_comm_s.get("ep", 0.0) > 0.0
    assert any(n.startswith("expert parallel") for n in rep.notes)
    base = predict(_moe_scenario(), baseline=False)
    assert "ep" not in base.breakdown.exposed_comm_s
    # expert data parallelism is 8 / 8 = 1: the experts' optimizer state is not sharded, the
    # dense part's is (ZeRO-1 over 8 ranks)
    r = resolve(_moe_scenario(ep=8)).recipe
    w = build_model("moe", batch_size=1, precision="bf16", ep=8, **SMALL)
    expert = sum(la.params for la in w.layers if la.expert_role is ExpertRole.EXPERT)
    dense = sum(la.params for la in w.layers) - expert
    assert rep.memory.optimizer_bytes == pytest.approx(r.state_bytes * (dense / 8 + expert))


def test_context_parallel_prediction_reports_cp() -> None:
    sc = Scenario(
        system="dgx-h100",
        model="llama",
        model_args={"hidden": 512, "layers": 2, "heads": 8, "seq_len": 8192, "vocab": 1024},
        precision="bf16",
        optimizer="adam",
        global_batch=1,
        tp=1,
        cp=8,
        fidelity="analytic",
        software="megatron-core",
    )
    rep = predict(sc, baseline=False)
    assert rep.num_gpus == 8 and rep.tokens_per_s > 0
    assert any(n.startswith("context parallel (ring attention") for n in rep.notes)


def test_flow_simulation_alltoall_contends_with_dp_traffic_on_nics() -> None:
    """The lowering's expert all-to-all spans both servers when ep = 16 on 8-GPU servers; in
    the flow simulation it shares the NICs with a data-parallel all-reduce running at the
    same time and finishes later than alone."""
    from perfmodel.api import topology_of
    from perfmodel.parallel.taskgraph import CommKind, GraphBuilder, TaskKind
    from perfmodel.pipeline.lower import build_step
    from perfmodel.sim.engine import FlowComm, simulate

    sc = _moe_scenario(nodes=2, ep=16, model_args={**SMALL, "experts": 16}, fidelity="simulated")
    step, _ = build_step(sc, resolve(sc))
    # the dispatcher's all-to-all of the routed rows (the all-gather of the token counts
    # before it is an expert-parallel collective too)
    ep = max(
        (t for t in step.graph.tasks if t.comm is not None and t.comm.kind is CommKind.EP),
        key=lambda t: t.comm.message_bytes,  # type: ignore[union-attr]
    )
    assert ep.comm.op is CollectiveOp.ALLTOALL and len(ep.comm.group) == 16
    topo = topology_of(sc)
    dp_spec = replace(ep.comm, op=CollectiveOp.ALLREDUCE, kind=CommKind.DP, siblings=())
    dp_spec = replace(dp_spec, group=(topo.gpus[0], topo.gpus[8]), message_bytes=64e6)

    def run(with_dp: bool) -> float:
        b = GraphBuilder()
        tid = b.add(TaskKind.COLLECTIVE, ep.device, "ep", ep.duration_s, comm=ep.comm)
        if with_dp:
            b.add(TaskKind.COLLECTIVE, topo.gpus[0], "dp", 1e-3, comm=dp_spec)
        tl = simulate(b.build(), network_factory=lambda env: FlowComm(env, topo))
        return tl.end_s[tid] - tl.start_s[tid]

    alone, shared = run(False), run(True)
    assert shared > alone * 1.05


def test_expert_gradients_skip_the_dense_reduction_when_ep_spans_the_replicas() -> None:
    """dp = ep = 8: every rank holds different experts (expert data parallelism 1), so only the
    dense gradients are reduced over the 8 replicas (Megatron-Core reduces expert gradients
    over the expert data-parallel group)."""
    from perfmodel.parallel.taskgraph import CommKind
    from perfmodel.pipeline.lower import build_step

    sc = _moe_scenario(ep=8)
    r = resolve(sc)
    step, _ = build_step(sc, r)
    grads = [
        t.comm.message_bytes
        for t in step.graph.tasks
        if t.comm is not None and t.comm.kind is CommKind.DP and t.label.startswith("grad")
    ]
    w = build_model("moe", batch_size=1, precision="bf16", ep=8, **SMALL)
    expert = sum(la.params for la in w.layers if la.expert_role is ExpertRole.EXPERT)
    dense = sum(la.params for la in w.layers) - expert
    assert sum(grads) == pytest.approx(dense * r.recipe.grad_reduce_bytes)


def test_expert_group_fills_a_server_first_under_pipelining() -> None:
    """ep = 8 with pp = 2 on two 8-GPU servers: Megatron-Core's order (stages outermost) puts
    each stage's expert group on one server (the order tp,pp,dp would stride it over both)."""
    from perfmodel.api import topology_of
    from perfmodel.parallel.taskgraph import CommKind
    from perfmodel.pipeline.lower import build_step

    sc = _moe_scenario(nodes=2, pp=2, ep=8, microbatch=1)
    step, _ = build_step(sc, resolve(sc))
    topo = topology_of(sc)
    groups = {t.comm.group for t in step.graph.tasks if t.comm and t.comm.kind is CommKind.EP}
    assert groups and all(len({topo.server_of(g) for g in grp}) == 1 for grp in groups)


def test_stage_expert_params_sums_every_chunk_of_the_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``stage_expert_params`` (its sums in C) is the routed experts' parameters of every chunk
    a stage holds: an expert-parallel interleaved plan (v 2), both chunks of each stage
    counted (rev24-a: reading chunk 0 alone moved such a plan's step and only the validation
    record noticed)."""
    sc = Scenario(system="dgx-h100", model="moe", model_args={**SMALL_MOE, "layers": 4},
                  precision="bf16", optimizer="adam", fidelity="analytic",
                  software="megatron-core", ep=4, pp=2, interleave=2, schedule="interleaved",
                  global_batch=16, microbatch=1)  # fmt: skip
    low = lowerings(sc, monkeypatch)[0]
    assert low.V == 2
    for s in range(low.P):
        per_chunk = [
            sum(seg.expert_params for seg in low.chunks[c * low.P + s].segments)
            for c in range(low.V)
        ]
        assert all(n > 0 for n in per_chunk)
        assert low.stage_expert_params(s) == sum(per_chunk)
