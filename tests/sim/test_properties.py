"""Property tests of the lowering + executors (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_synthetic import FakeCosts, block_workload, lower_synthetic

from perfmodel.parallel.plan import DPMode, ParallelismPlan, PipelineSchedule
from perfmodel.parallel.taskgraph import GraphBuilder, TaskKind
from perfmodel.sim.engine import evaluate, simulate


def _throughput(
    plan: ParallelismPlan, costs: FakeCosts, bpr: int, software: str = "pytorch-ddp", **over: object
) -> float:
    step = lower_synthetic(
        plan,
        block_workload(8, batch=plan.microbatch_size or bpr),
        costs,
        batch_per_replica=bpr,
        software=software,
        slowdown=0.0,
        **over,
    )
    return step.samples_per_step / evaluate(step.graph).makespan_s


@settings(max_examples=25, deadline=None)
@given(
    dp=st.sampled_from([1, 2, 3, 4, 8, 16]),
    software=st.sampled_from(
        ["pytorch-ddp", "horovod", "tf-mirrored", "megatron", "tf-replicated", "deepspeed-zero2"]
    ),
)
def test_free_communication_gives_linear_speedup(dp: int, software: str) -> None:
    """Free communication = zero bandwidth time, zero latency, no fusion-cycle wait; host-side
    costs (the MirroredStrategy batch split) are not communication and are switched off too."""
    costs = FakeCosts()  # infinite bandwidth, zero latency
    free = {"fusion_cycle_s": 0.0, "host_split_per_sample_s": 0.0}
    one = _throughput(ParallelismPlan(dp=1), costs, 4, "pytorch-ddp")
    many = _throughput(
        ParallelismPlan(dp=dp, zero=2 if software == "deepspeed-zero2" else 0),
        costs,
        4,
        software,
        **free,
    )
    assert many == pytest.approx(dp * one, rel=1e-9)


def test_host_split_cost_breaks_linearity_as_documented() -> None:
    costs = FakeCosts()
    one = _throughput(ParallelismPlan(dp=1), costs, 4, "tf-mirrored")
    four = _throughput(ParallelismPlan(dp=4), costs, 4, "tf-mirrored")
    t1 = 4 / one
    assert 16 / four == pytest.approx(t1 + 35.9e-6 * 3 * 4, rel=1e-9)  # c (dp - 1) b per step


@settings(max_examples=30, deadline=None)
@given(
    bw=st.floats(min_value=1e6, max_value=1e12),
    factor=st.floats(min_value=1.0, max_value=100.0),
    dp=st.sampled_from([2, 4]),
    pp=st.sampled_from([1, 2, 4]),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
)
def test_faster_link_never_slows_a_plan(
    bw: float, factor: float, dp: int, pp: int, schedule: str
) -> None:
    plan = ParallelismPlan(dp=dp, pp=pp, microbatch_size=1, schedule=PipelineSchedule(schedule))
    wl = block_workload(8)
    slow = lower_synthetic(plan, wl, FakeCosts(bandwidth_Bps=bw, alpha_s=1e-5), batch_per_replica=4)
    fast = lower_synthetic(
        plan, wl, FakeCosts(bandwidth_Bps=bw * factor, alpha_s=1e-5), batch_per_replica=4
    )
    assert evaluate(fast.graph).makespan_s <= evaluate(slow.graph).makespan_s * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 2),
            st.floats(0, 1),
            st.lists(st.integers(0, 200), max_size=3),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_simpy_equals_analytic_on_random_graphs(
    spec: list[tuple[int, int, float, list[int]]],
) -> None:
    b = GraphBuilder()
    for i, (dev, stream, dur, deps) in enumerate(spec):
        b.add(
            TaskKind.COMPUTE,
            f"g{dev}",
            ["compute", "dp", "send_fwd"][stream],
            dur,
            [d % i for d in deps] if i else [],
        )
    g = b.build()
    a, s = evaluate(g), simulate(g)
    assert s.start_s == pytest.approx(a.start_s, abs=1e-12)
    assert s.end_s == pytest.approx(a.end_s, abs=1e-12)


def test_simulation_is_deterministic() -> None:
    step = lower_synthetic(
        ParallelismPlan(dp=4, pp=2, microbatch_size=1),
        block_workload(8),
        FakeCosts(bandwidth_Bps=1e9),
        batch_per_replica=4,
    )
    assert simulate(step.graph).end_s == simulate(step.graph).end_s


def test_overlap_hides_bucketed_gradients_and_costs_the_named_slowdown() -> None:
    costs = FakeCosts(bandwidth_Bps=2e6)  # 8 buckets of 4 kB gradients: 3 ms each
    wl = block_workload(8, params=1000)
    base = evaluate(
        lower_synthetic(ParallelismPlan(dp=1), wl, costs, batch_per_replica=1, slowdown=0.0).graph
    ).makespan_s
    ddp = lower_synthetic(
        ParallelismPlan(dp=4),
        wl,
        costs,
        batch_per_replica=1,
        slowdown=0.0,
        bucket_bytes=4000,
        first_bucket_bytes=None,
    )
    tf = lower_synthetic(
        ParallelismPlan(dp=4), wl, costs, batch_per_replica=1, software="tf-mirrored", slowdown=0.0
    )
    t_ddp, t_tf = evaluate(ddp.graph).makespan_s, evaluate(tf.graph).makespan_s
    assert base < t_ddp < t_tf  # overlapped buckets beat one all-reduce after backward
    slowed = lower_synthetic(
        ParallelismPlan(dp=4),
        wl,
        FakeCosts(bandwidth_Bps=1e15),
        batch_per_replica=1,
        slowdown=0.1,
        bucket_bytes=4000,
        first_bucket_bytes=None,
    )
    t_slowed = evaluate(slowed.graph).makespan_s
    # with negligible communication, only the overlapped backward segments pay 10 %
    n_seg = sum(1 for t in slowed.graph.tasks if t.label.startswith("B"))
    assert n_seg > 1
    assert base < t_slowed < base * 1.1


def test_memory_is_the_sum_of_its_parts() -> None:
    for plan in (
        ParallelismPlan(dp=4, zero=2),
        ParallelismPlan(dp=2, pp=2, microbatch_size=1),
        ParallelismPlan(dp=4, fsdp=True),
    ):
        step = lower_synthetic(plan, block_workload(8), FakeCosts(), batch_per_replica=4)
        for m in step.memory:
            assert m.total_bytes == pytest.approx(sum(m.parts().values()))
            # parts() names every part once (total_bytes is computed from parts())
            assert m.total_bytes == pytest.approx(
                m.weights_bytes
                + m.grads_bytes
                + m.optimizer_bytes
                + m.activations_bytes
                + m.workspace_bytes
                + m.comm_buffers_bytes
            )


def test_zero_shards_model_state() -> None:
    mems = [
        lower_synthetic(
            ParallelismPlan(dp=8, zero=z),
            block_workload(8, params=10**6),
            FakeCosts(),
            batch_per_replica=1,
            optimizer="adam",
        ).memory[0]
        for z in (0, 1, 2, 3)
    ]
    assert mems[0].grads_bytes == mems[1].grads_bytes > mems[2].grads_bytes
    assert mems[2].weights_bytes > mems[3].weights_bytes
    assert mems[0].total_bytes > mems[1].total_bytes >= mems[2].total_bytes > mems[3].total_bytes


@pytest.mark.parametrize(
    "mode",
    [
        DPMode.PARAMETER_SERVER,
        DPMode.ASYNC,
        DPMode.LOCAL_SGD,
        DPMode.CROSSBOW,
        DPMode.CPU_MERGE,
        DPMode.GPU_MERGE,
    ],
)
def test_dp_variants_lower_and_slow_down_with_slower_links(mode: DPMode) -> None:
    plan = ParallelismPlan(
        dp=4, dp_mode=mode, learners_per_gpu=2 if mode is DPMode.CROSSBOW else 1, sync_period=4
    )
    wl = block_workload(8, params=10**5)
    t = [
        evaluate(
            lower_synthetic(plan, wl, FakeCosts(bandwidth_Bps=bw), batch_per_replica=1).graph
        ).makespan_s
        for bw in (1e7, 1e10)
    ]
    assert t[0] >= t[1] > 0


def test_async_reports_staleness() -> None:
    step = lower_synthetic(
        ParallelismPlan(dp=4, dp_mode=DPMode.ASYNC),
        block_workload(4),
        FakeCosts(bandwidth_Bps=1e9),
        batch_per_replica=1,
    )
    assert step.staleness == {3: 1.0}
    assert step.min_period_s > 0


def test_local_sgd_amortises_averaging() -> None:
    wl = block_workload(4, params=10**6)
    t = {
        k: evaluate(
            lower_synthetic(
                ParallelismPlan(dp=4, dp_mode=DPMode.LOCAL_SGD, sync_period=k),
                wl,
                FakeCosts(bandwidth_Bps=1e8),
                batch_per_replica=1,
            ).graph
        ).makespan_s
        for k in (1, 8)
    }
    assert t[8] < t[1]
