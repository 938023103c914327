"""Expert all-to-all overlap (plan key ``ep_overlap=true``, Megatron-Core's combined 1F1B,
``--overlap-moe-expert-parallel-comm``): exposed = max(0, all-to-all - other phase's compute)
per transformer block (``test_ep_overlap_blocks.py``), the transfers unchanged; off by default,
as in the framework."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import ep_overlap_exposed_s
from perfmodel.parallel.plan import (
    ParallelismPlan,
    PipelineSchedule,
    Recompute,
    parse_plan_string,
)
from perfmodel.parallel.segment_comm import SegmentComm, _exposed_shares, _scaled
from perfmodel.parallel.taskgraph import CommKind
from tests.parallel.moe_shapes import SMALL_MOE

SMALL = SMALL_MOE


def test_parse_and_feasibility() -> None:
    assert parse_plan_string("ep=8,ep_overlap=true") == {"ep": 8, "ep_overlap": True}
    assert parse_plan_string("ep_overlap=off") == {"ep_overlap": False}
    with pytest.raises(ConfigError, match="must be true or false"):
        parse_plan_string("ep_overlap=yes")
    with pytest.raises(ConfigError, match=r"scenario.ep_overlap must be true or false"):
        _moe(global_batch=8, ep_overlap="yes")
    assert "ep_overlap=true" in ParallelismPlan(dp=8, ep=8, ep_overlap=True).describe()
    for bad in (
        {"dp": 8, "ep": 1},
        {"dp": 8, "ep": 8, "recompute": Recompute.FULL},
        {"dp": 4, "ep": 4, "pp": 2, "schedule": PipelineSchedule.ONE_F_ONE_B},
    ):
        with pytest.raises(InfeasiblePlanError, match="ep_overlap needs"):
            ParallelismPlan(ep_overlap=True, **bad)  # type: ignore[arg-type]


def test_overlap_golden() -> None:
    assert ep_overlap_exposed_s(3.0, 2.0) == 1.0
    assert ep_overlap_exposed_s(1.0, 2.0) == 0.0
    a2a = CollectiveOp.ALLTOALL
    fwd = SegmentComm(CommKind.EP, "F", a2a, 4e6, 0.004, 0.004)  # 4 ms forward all-to-alls
    bwd = SegmentComm(CommKind.EP, "B", a2a, 4e6, 0.004, 0.004)
    # one block: forward's 4 ms beside 3 ms of backward compute: 1 ms exposed, a quarter of
    # the bytes; backward's 4 ms beside 5 ms of forward compute: hidden
    share_f, share_b = _exposed_shares(0.004, 0.004, 0.005, 0.003, 0.0)
    assert (share_f, share_b) == pytest.approx((0.25, 0.0))
    f, b = _scaled(fwd, share_f), _scaled(bwd, share_b)
    assert (f.message_bytes, f.duration_s, f.full_s) == pytest.approx((1e6, 0.001, 0.004))
    assert (b.message_bytes, b.duration_s, b.full_s) == pytest.approx((0.0, 0.0, 0.004))
    assert _exposed_shares(0.0, 0.0, 1.0, 1.0, 0.0) == (1.0, 1.0)  # nothing to scale


def _moe(**plan: object):
    sc = Scenario(
        system="dgx-h100",
        model="moe",
        model_args=SMALL,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
        software="megatron-core",
        ep=8,
        **plan,  # type: ignore[arg-type]
    )
    return predict(sc, baseline=False)


def _transfers(rep) -> str:
    note = next(n for n in rep.notes if n.startswith("expert parallel"))
    return note.split(":")[1].split(" ms")[0]


def test_exposed_ep_drops_transfers_unchanged() -> None:
    off = _moe(global_batch=32, microbatch=1)  # 4 micro-batches per replica
    on = _moe(global_batch=32, microbatch=1, ep_overlap=True)
    assert on.breakdown.exposed_comm_s.get("ep", 0.0) < off.breakdown.exposed_comm_s["ep"]
    assert _transfers(on) == _transfers(off)
    # one micro-batch per replica: no partner to overlap with, nothing changes
    one_off = _moe(global_batch=8)
    one_on = _moe(global_batch=8, ep_overlap=True)
    assert one_on.breakdown.exposed_comm_s["ep"] == one_off.breakdown.exposed_comm_s["ep"]


# --- warm-up and cool-down: the operations with no partner (Megatron-LM 4415119) ---------


def test_unpaired_phases_golden() -> None:
    """Hand-derived from Megatron-LM 4415119. No pipelining
    (``combined_1f1b_schedule_for_no_pipelining``): micro-batch 0's forward and the last
    backward run alone. Interleaved, pp 2, v 2, 4 micro-batches (``get_pp_rank_microbatches``,
    group size pp): stage 0 warms up with 2 (2 - 0 - 1) + (2 - 1) 2 = 4 forwards plus the
    combined schedule's one more, 5 of its 8 virtual forwards alone, and the last 5 backwards
    (cool-down) alone; stage 1: 0 + 2 + 1 = 3 each."""
    from perfmodel.parallel.expert import unpaired_phases
    from perfmodel.parallel.schedule import one_f_one_b, stage_ops

    assert unpaired_phases(one_f_one_b(1, 4, 0)) == {("F", 0, 0), ("B", 3, 0)}
    assert unpaired_phases(one_f_one_b(1, 1, 0)) == {("F", 0, 0), ("B", 0, 0)}
    s0 = unpaired_phases(stage_ops(PipelineSchedule.INTERLEAVED, 2, 4, 0, 2))
    # virtual forwards 0-4 in Megatron's order (micro-batches 0, 1 of chunk 0, then of
    # chunk 1, then micro-batch 2 of chunk 0); the cool-down's last five virtual backwards
    assert s0 == {
        ("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("F", 2, 0),
        ("B", 2, 1), ("B", 3, 1), ("B", 1, 0), ("B", 2, 0), ("B", 3, 0),
    }  # fmt: skip
    s1 = unpaired_phases(stage_ops(PipelineSchedule.INTERLEAVED, 2, 4, 1, 2))
    assert s1 == {("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("B", 3, 1), ("B", 2, 0), ("B", 3, 0)}


def _ep_tasks(**plan: object) -> dict[tuple[str, int, int], float]:
    """Expert all-to-all seconds per (phase, micro-batch, chunk) on the first GPU."""
    from perfmodel.api import resolve
    from perfmodel.pipeline.lower import build_step

    sc = Scenario(
        system="dgx-h100",
        model="moe",
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
        software="megatron-core",
        **{"ep": 8, "model_args": SMALL, **plan},  # type: ignore[arg-type]
    )
    step, _ = build_step(sc, resolve(sc))
    tasks = step.graph.tasks
    first = next(t.device for t in tasks if t.comm is not None and t.comm.kind is CommKind.EP)
    out: dict[tuple[str, int, int], float] = {}
    for t in tasks:
        if t.comm is not None and t.comm.kind is CommKind.EP and t.device == first:
            key = (t.label.split()[-1][0], t.microbatch, t.chunk)
            out[key] = out.get(key, 0.0) + t.duration_s
    return out


def test_first_forward_and_last_backward_expose_their_alltoalls() -> None:
    """pp 1, 4 micro-batches: forward 0 and backward 3 expose their all-to-alls in full (the
    no-overlap plan's), the six paired operations only the steady share; so the step's
    exposed all-to-all is 4 steady forwards and backwards plus the two unpaired shortfalls."""
    off = _ep_tasks(global_batch=32, microbatch=1)
    on = _ep_tasks(global_batch=32, microbatch=1, ep_overlap=True)
    for key in (("F", 0, 0), ("B", 3, 0)):
        assert on[key] == pytest.approx(off[key])
    steady_f, steady_b = on.get(("F", 1, 0), 0.0), on.get(("B", 0, 0), 0.0)
    assert steady_f < off[("F", 1, 0)] and steady_b < off[("B", 0, 0)]
    for mb in (1, 2, 3):
        assert on.get(("F", mb, 0), 0.0) == pytest.approx(steady_f)
    for mb in (0, 1, 2):
        assert on.get(("B", mb, 0), 0.0) == pytest.approx(steady_b)
    total = (
        4 * (steady_f + steady_b) + (off[("F", 0, 0)] - steady_f) + (off[("B", 3, 0)] - steady_b)
    )
    assert sum(on.values()) == pytest.approx(total)


def test_interleaved_warmup_and_cooldown_run_alone() -> None:
    """pp 2, v 2 (interleaved), 4 micro-batches: on stage 0, the 5 warm-up forwards and 5
    cool-down backwards of :func:`test_unpaired_phases_golden` expose their all-to-alls in
    full, the other 3 of each phase only the steady share."""
    plan = {"pp": 2, "interleave": 2, "schedule": "interleaved", "ep": 4}
    plan |= {"model_args": {**SMALL, "layers": 4}}
    plan |= {"global_batch": 16, "microbatch": 1}
    off = _ep_tasks(**plan)
    on = _ep_tasks(**plan, ep_overlap=True)
    assert on.keys() <= off.keys() and len(off) == 16
    full = {k for k in off if on.get(k, 0.0) == pytest.approx(off[k])}
    assert {(ph, mb, k // 2) for ph, mb, k in full} == {
        ("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("F", 2, 0),
        ("B", 2, 1), ("B", 3, 1), ("B", 1, 0), ("B", 2, 0), ("B", 3, 0),
    }  # fmt: skip


@settings(max_examples=6, deadline=None)
@given(st.integers(min_value=1, max_value=6))
def test_exposed_between_steady_state_and_no_overlap(m: int) -> None:
    """Exposed all-to-all time with the overlap is never below the steady state's (every
    operation paired) nor above no overlap, and equals no overlap at one micro-batch."""
    off = _moe(global_batch=8 * m, microbatch=1).breakdown.exposed_comm_s["ep"]
    on = _moe(global_batch=8 * m, microbatch=1, ep_overlap=True).breakdown.exposed_comm_s.get(
        "ep", 0.0
    )
    tasks = _ep_tasks(global_batch=8 * m, microbatch=1, ep_overlap=True)
    assert on <= off * (1 + 1e-9)
    if m == 1:
        assert on == pytest.approx(off)
        return
    steady = m * (tasks.get(("F", 1, 0), 0.0) + tasks.get(("B", 0, 0), 0.0))
    assert on >= steady * (1 - 1e-9)
    assert on > steady  # the first forward and the last backward add their shortfall


def test_paired_backward_sends_its_gradient_after_the_pair() -> None:
    """Megatron-Core's combined step interleaves the pair's layers and sends the backward's
    input gradient after them (``post_backward`` after the layer loop, Megatron-LM 4415119):
    pp 2, v 2, 4 micro-batches, each paired backward's send waits for its partner forward,
    the stage's next operation (hand-derived pairs: stage 1 runs F0 F1 of chunk 0 and F0 of
    chunk 1 alone, then (B0.1, F1.1), (B1.1, F2.0), (B0.0, F3.0), (B1.0, F2.1), (B2.1, F3.1),
    then B3.1 B2.0 B3.0 alone; stage 0's pairs with a send are (B0.1, F3.0), (B1.1, F2.1)).
    Without the overlap every send waits for its own backward."""
    from perfmodel.api import resolve
    from perfmodel.pipeline.lower import build_step

    def sends(**extra: object) -> dict[tuple[str, int, int], tuple[str, int, int]]:
        sc = Scenario(
            system="dgx-h100",
            model="moe",
            model_args={**SMALL, "layers": 4},
            precision="bf16",
            optimizer="adam",
            fidelity="analytic",
            software="megatron-core",
            ep=4,
            pp=2,
            interleave=2,
            schedule="interleaved",
            global_batch=16,
            microbatch=1,
            **extra,  # type: ignore[arg-type]
        )
        step, _ = build_step(sc, resolve(sc))
        tasks = step.graph.tasks
        out = {}
        for t in tasks:
            if t.label.startswith("send B"):
                (d,) = t.deps
                dep = tasks[d]  # the chunk's last task: its last all-to-all
                out[t.device, t.microbatch, t.chunk // 2] = (
                    dep.label.split()[-1][0],
                    dep.microbatch,
                    dep.chunk // 2,
                )
        return out

    paired = {
        ("gpu4", 0, 1): ("F", 1, 1),
        ("gpu4", 1, 1): ("F", 2, 0),
        ("gpu4", 0, 0): ("F", 3, 0),
        ("gpu4", 1, 0): ("F", 2, 1),
        ("gpu4", 2, 1): ("F", 3, 1),
        ("gpu0", 0, 1): ("F", 3, 0),
        ("gpu0", 1, 1): ("F", 2, 1),
    }
    on, off = sends(ep_overlap=True), sends()
    assert len(on) == len(off) == 12
    for key, dep in on.items():
        assert dep == paired.get(key, ("B", *key[1:]))
        assert off[key] == ("B", *key[1:])
