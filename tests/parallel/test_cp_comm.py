"""Context parallelism's all-gather variant (plan key ``cp_comm=allgather``, Megatron-Core
``cp_comm_type="all_gather"``): parsing at the edge, the same bytes as the ring, exposed in
full instead of under the attention, and the gathered K/V of one layer as transient memory."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import RingSteps, cp_exposed_s
from perfmodel.parallel.plan import CPComm, ParallelismPlan, parse_plan_string
from perfmodel.parallel.segment_comm import SegmentCommContext, _expert_context_comm
from perfmodel.workload import build_model
from perfmodel.workload.kernels import Fusion, KernelRecipe
from perfmodel.workload.memory import FRAGMENTATION

# hidden 512 / 8 heads -> head_dim 64; kv_heads = heads; sequence 8192 over cp = 8 -> 1024
ARGS = {"hidden": 512, "layers": 2, "heads": 8, "seq_len": 8192, "vocab": 1024}
# K and V of the whole sequence, one layer, bf16: 8 chunks x 1024 x 8 kv heads x 64 x 2 x 2 B
GATHERED_KV = 8 * 1024 * 8 * 64 * 2 * 2  # 16,777,216 B


def test_parse_cp_comm_at_the_edge() -> None:
    assert parse_plan_string("cp=4,cp_comm=allgather") == {"cp": 4, "cp_comm": "allgather"}
    assert CPComm.parse("all_gather") is CPComm.ALLGATHER
    assert CPComm.parse("p2p") is CPComm.RING
    assert CPComm.parse(None) is CPComm.RING
    with pytest.raises(ConfigError, match="bogus"):
        CPComm.parse("bogus", where="scenario.cp_comm")
    plan = ParallelismPlan(dp=1, cp=4, cp_comm=CPComm.ALLGATHER)
    assert "cp_comm=allgather" in plan.describe()


def test_exposure_golden() -> None:
    # 6 s of transfers beside 4 s of attention over cp = 4: ring shows 3 x (2 - 1) s
    four = RingSteps.equal(4.0, 4)
    assert cp_exposed_s(6.0, four, CPComm.RING) == pytest.approx(3.0)
    assert cp_exposed_s(6.0, four, CPComm.ALLGATHER) == 6.0
    assert cp_exposed_s(3.0, four, CPComm.RING) == 0.0
    assert cp_exposed_s(3.0, four, CPComm.ALLGATHER) == 3.0
    assert cp_exposed_s(3.0, RingSteps.equal(4.0, 1), CPComm.ALLGATHER) == 0.0


class _OneGBps:
    """A comm model moving 1 GB/s: a collective of ``b`` bytes takes ``b / 1e9`` s."""

    def concurrent_time(self, op, nbytes, groups, algorithm):
        return nbytes / 1e9


def test_allgather_same_bytes_exposed_in_full() -> None:
    te = KernelRecipe(fusion=Fusion.TE)  # Megatron-Core's cp_comm_type: Transformer Engine
    w = build_model("llama", batch_size=1, precision="bf16", cp=8, kernels=te, **ARGS)
    attn = next(la for la in w.layers if la.name.endswith("attention"))
    groups = {"cp": (tuple(f"g{i}" for i in range(8)),)}
    busy = (0.008, 0.016)  # forward / backward attention, s

    def run(kind: CPComm) -> dict[str, tuple[float, float, float]]:
        out: dict[str, list[float]] = {}
        plan = ParallelismPlan(cp=8, cp_comm=kind)
        ctx = SegmentCommContext(_OneGBps(), groups, "ring", plan)
        for c in _expert_context_comm(attn, busy, ctx):
            acc = out.setdefault(c.phase, [0.0, 0.0, 0.0])
            acc[0] += c.message_bytes
            acc[1] += c.duration_s
            acc[2] += c.full_s
        return {k: tuple(v) for k, v in out.items()}

    t = GATHERED_KV / 1e9  # 0.016777216 s per collective
    ag, ring = run(CPComm.ALLGATHER), run(CPComm.RING)
    # forward: one all-gather; backward: all-gather of K/V + reduce-scatter of dK/dV
    assert ag["F"] == pytest.approx((GATHERED_KV, t, t))
    assert ag["B"] == pytest.approx((2 * GATHERED_KV, 2 * t, 2 * t))
    # ring: 7 x max(0, t/7 - 0.008/8) = t - 0.007 forward; backward (Transformer Engine: all
    # 8 steps hide a transfer, u = 2t/14 = t/7 > 0.002): 2 (u - 0.002) + 6 (2u - 0.002) =
    # 2t - 8 x 0.016/8 = 2t - 0.016
    assert ring["F"][1] == pytest.approx(t - 0.007)
    assert ring["B"][1] == pytest.approx(2 * t - 0.016)
    # the same transfers in both; the ring replays only the exposed share of the bytes
    assert ring["F"][2] == pytest.approx(t) and ring["B"][2] == pytest.approx(2 * t)
    assert ring["F"][0] == pytest.approx(GATHERED_KV * (t - 0.007) / t)
    assert attn.fwd_comm[0].op is CollectiveOp.ALLGATHER
    assert attn.fwd_comm[0].message_bytes == GATHERED_KV


def _predict(cp_comm: str):
    sc = Scenario(
        system="dgx-h100",
        model="llama",
        model_args=ARGS,
        precision="bf16",
        optimizer="adam",
        global_batch=1,
        tp=1,
        cp=8,
        cp_comm=cp_comm,
        fidelity="analytic",
        software="megatron-core",
    )
    return predict(sc, baseline=False)


def test_prediction_ring_vs_allgather() -> None:
    ring, ag = _predict("ring"), _predict("allgather")
    note = next(n for n in ag.notes if n.startswith("context parallel (K/V all-gather"))
    ring_note = next(n for n in ring.notes if n.startswith("context parallel (ring"))
    # same transfers per step; all of them exposed for all_gather, less for the ring
    assert note.split(":")[1].split(" ms")[0] == ring_note.split(":")[1].split(" ms")[0]
    assert ag.breakdown.exposed_comm_s["cp"] > ring.breakdown.exposed_comm_s.get("cp", 0.0)
    # the gathered K/V of one layer is a transient (plus the allocator's fragmentation reserve)
    extra = ag.memory.workspace_bytes - ring.memory.workspace_bytes
    assert extra == pytest.approx(GATHERED_KV * (1 + FRAGMENTATION))
