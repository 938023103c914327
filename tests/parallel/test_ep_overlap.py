"""Expert all-to-all overlap (plan key ``ep_overlap=true``, Megatron-Core's combined 1F1B,
``--overlap-moe-expert-parallel-comm``): exposed = max(0, all-to-all - other phase's compute)
per segment, the transfers unchanged; off by default, as in the framework."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import ep_overlap_exposed_s
from perfmodel.parallel.lowering import SegmentComm, _overlap_expert_comm
from perfmodel.parallel.plan import (
    ParallelismPlan,
    PipelineSchedule,
    Recompute,
    parse_plan_string,
)
from perfmodel.parallel.taskgraph import CommKind

SMALL = {
    "hidden": 256,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "ffn_hidden": 512,
    "experts": 8,
    "top_k": 2,
    "seq_len": 512,
    "vocab": 1024,
}


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
    comms = [
        SegmentComm(CommKind.EP, "F", a2a, 4e6, 0.004, 0.004),  # 4 ms forward all-to-alls
        SegmentComm(CommKind.EP, "B", a2a, 4e6, 0.004, 0.004),
        SegmentComm(CommKind.CP, "F", CollectiveOp.ALLGATHER, 1e6, 0.001, 0.002),
    ]
    # forward's 4 ms beside 3 ms of backward compute: 1 ms exposed, a quarter of the bytes;
    # backward's 4 ms beside 5 ms of forward compute: hidden; context comm untouched
    out = {(c.kind, c.phase): c for c in _overlap_expert_comm(comms, 0.005, 0.003)}
    f, b = out[CommKind.EP, "F"], out[CommKind.EP, "B"]
    assert (f.message_bytes, f.duration_s, f.full_s) == pytest.approx((1e6, 0.001, 0.004))
    assert (b.message_bytes, b.duration_s, b.full_s) == pytest.approx((0.0, 0.0, 0.004))
    assert out[CommKind.CP, "F"] == comms[2]


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
