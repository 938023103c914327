"""Pipeline schedules in the simulation: bubble fractions, memory, communication."""

from __future__ import annotations

import pytest
from sim_synthetic import FakeCosts, block_workload, lower_synthetic

from perfmodel.parallel.plan import ParallelismPlan, PipelineSchedule
from perfmodel.parallel.schedule import gpipe, interleaved, one_f_one_b, peak_in_flight
from perfmodel.sim.engine import evaluate, simulate


def _bubble(p: int, m: int, schedule: str, v: int = 1, costs: FakeCosts | None = None) -> float:
    plan = ParallelismPlan(
        dp=1, tp=1, pp=p, microbatch_size=1, schedule=PipelineSchedule(schedule), interleave=v
    )
    wl = block_workload(p * v * 2)
    step = lower_synthetic(plan, wl, costs or FakeCosts(), batch_per_replica=m)
    T = evaluate(step.graph).makespan_s
    per_block = 1e-3 * 3  # 1 ms forward + 2 ms backward per block and micro-batch
    ideal = m * per_block * (2 * v)  # blocks per stage = 2 v
    return (T - ideal) / ideal


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 32)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_bubble_fraction_free_comm(p: int, m: int, schedule: str) -> None:
    assert _bubble(p, m, schedule) == pytest.approx((p - 1) / m, rel=1e-9)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 16, 2)])
def test_interleaved_bubble_fraction(p: int, m: int, v: int) -> None:
    assert _bubble(p, m, "interleaved", v) == pytest.approx((p - 1) / (v * m), rel=1e-9)


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_bubble_grows_with_communication(schedule: str, v: int) -> None:
    free = _bubble(4, 8, schedule, v)
    paid = _bubble(4, 8, schedule, v, FakeCosts(bandwidth_Bps=1e6, alpha_s=1e-4))
    assert paid > free


def test_1f1b_holds_fewer_activations_than_gpipe() -> None:
    wl = block_workload(8)
    mem = {}
    for sched in ("gpipe", "1f1b"):
        plan = ParallelismPlan(pp=4, microbatch_size=1, schedule=PipelineSchedule(sched))
        step = lower_synthetic(plan, wl, FakeCosts(), batch_per_replica=16)
        mem[sched] = max(m.activations_bytes for m in step.memory)
    assert mem["1f1b"] < mem["gpipe"]
    assert mem["gpipe"] / mem["1f1b"] == pytest.approx(16 / 4)


def test_schedule_orders_are_complete_and_causal() -> None:
    for ops in (gpipe(4, 8, 1), one_f_one_b(4, 8, 1), interleaved(4, 8, 1, 2)):
        fs = {(mb, c) for ph, mb, c in ops if ph == "F"}
        bs = [(mb, c) for ph, mb, c in ops if ph == "B"]
        assert len(fs) == len(bs) == len(ops) // 2
        seen = set()
        for ph, mb, c in ops:
            if ph == "F":
                seen.add((mb, c))
            else:
                assert (mb, c) in seen  # a backward never precedes its forward
    assert peak_in_flight(one_f_one_b(4, 8, 0)) == 4
    assert peak_in_flight(one_f_one_b(4, 8, 3)) == 1
    assert peak_in_flight(gpipe(4, 8, 0)) == 8


def test_simpy_and_analytic_agree_on_pipeline() -> None:
    plan = ParallelismPlan(
        dp=2, pp=4, microbatch_size=1, schedule=PipelineSchedule.INTERLEAVED, interleave=2
    )
    step = lower_synthetic(
        plan, block_workload(16), FakeCosts(bandwidth_Bps=1e9, alpha_s=1e-5), batch_per_replica=8
    )
    a, s = evaluate(step.graph), simulate(step.graph)
    assert s.makespan_s == pytest.approx(a.makespan_s, rel=1e-12)
    assert s.end_s == pytest.approx(a.end_s, rel=1e-9, abs=1e-15)


def _reference_interleaved(p: int, m: int, stage: int, v: int) -> list[tuple[str, int, int]]:
    """The operation order written as the loop of the schedule's definition (Megatron-LM)."""
    total = m * v

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
    ops = [fwd(k) for k in range(warm)]
    f, b = warm, 0
    while f < total:
        ops += [fwd(f), bwd(b)]
        f, b = f + 1, b + 1
    return ops + [bwd(k) for k in range(b, total)]


def test_schedules_match_their_loop_definitions() -> None:
    """The shared forward/backward lists (issue 14) give each stage the order of the loops;
    ``peak_in_flight`` the largest running count, at least 0."""
    from perfmodel.parallel.plan import PipelineSchedule
    from perfmodel.parallel.schedule import stage_peak_in_flight

    for p, m in ((1, 1), (1, 3), (2, 2), (3, 7), (4, 8), (4, 2), (8, 16)):
        for stage in range(p):
            warm = min(p - stage - 1, m)
            ref = [("F", i, 0) for i in range(warm)]
            for i in range(m - warm):
                ref += [("F", warm + i, 0), ("B", i, 0)]
            ref += [("B", i, 0) for i in range(m - warm, m)]
            assert one_f_one_b(p, m, stage) == ref
            live, peak = 0, 0
            for phase, _, _ in ref:
                live += 1 if phase == "F" else -1
                peak = max(peak, live)
            assert peak_in_flight(ref) == peak
            assert stage_peak_in_flight(PipelineSchedule.ONE_F_ONE_B, p, m, stage) == peak
            for v in (1, 2, 3):
                if m % p == 0:
                    assert interleaved(p, m, stage, v) == _reference_interleaved(p, m, stage, v)
    assert peak_in_flight([("B", 0, 0)]) == 0 and peak_in_flight([]) == 0


def test_stage_peak_in_flight_closed_form_equals_the_operation_lists() -> None:
    """``stage_peak_in_flight`` counts without listing the operations (a GPT-3 step of 192
    micro-batches on 8 stages listed 8 x 768 of them for its memory): the same peak as
    :func:`peak_in_flight` of :func:`stage_ops` for every schedule, stage and chunk count on
    a grid, and the same refusal where pp does not divide an interleaved step's micro-batches."""
    from perfmodel.errors import InfeasiblePlanError
    from perfmodel.parallel.plan import PipelineSchedule
    from perfmodel.parallel.schedule import stage_ops, stage_peak_in_flight

    for sched in PipelineSchedule:
        for p in range(1, 7):
            for m in range(13):
                for v in range(1, 4):
                    for stage in range(p):
                        try:
                            ref = peak_in_flight(stage_ops(sched, p, m, stage, v))
                        except InfeasiblePlanError:
                            with pytest.raises(InfeasiblePlanError):
                                stage_peak_in_flight(sched, p, m, stage, v)
                            continue
                        assert stage_peak_in_flight(sched, p, m, stage, v) == ref
