"""HSDP's routed experts: sharded within one replica group and replicated across the ``dp /
hsdp`` groups, as the dense weights are. torchtitan's sparse mesh is ``(pp, dp_replicate,
efsdp, ep)`` with ``efsdp = dp_shard x cp x tp / ep`` (``torchtitan/distributed/
parallel_dims.py`` ``build_mesh`` at b5bcd76): the experts are sharded over ``efsdp``, not over
the dense shard group and not over every expert data-parallel rank."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, resolve
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.pipeline.lower import build_step
from tests.parallel.moe_shapes import MIXTRAL_EXPERTS, SMALL_MOE

# Mixtral 8x7B (config.json of huggingface.co/mistralai/Mixtral-8x7B-v0.1): 32 layers of 8
# SwiGLU experts of 3 x 4096 x 14336 weights; the rest (embedding and head 2 x 32000 x 4096,
# attention 2 x 4096^2 + 2 x 4096 x 1024, router 4096 x 8 and two norms per layer, final norm)
MIXTRAL_DENSE = 2 * 32000 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 4096) + 4096
#: torchtitan's BF16 Adam under FSDP2: FP32 sharded weights, FP32 gradients, two FP32 moments
STATE_BYTES_PER_PARAM = 4 + 4 + 8

SMALL = SMALL_MOE


def _mixtral_hsdp(**extra: object) -> Scenario:
    """Mixtral 8x7B under torchtitan on one DGX H100, plan dp4 cp2 hsdp2 ep4 unless ``extra``
    says otherwise (analytic)."""
    plan = {"cp": 2, "hsdp": 2, "ep": 4, **extra}
    return Scenario(
        system="dgx-h100", nodes=1, model="mixtral_8x7b", batch_per_gpu=1, precision="bf16",
        optimizer="adam", fidelity="analytic", software="torchtitan",
        **plan,  # type: ignore[arg-type]
    )  # fmt: skip


def _state_bytes(model: str, args: dict[str, int] | None, gpus: int, **plan: int) -> float:
    sc = Scenario(
        system="dgx-h100",
        nodes=gpus // 8,
        model=model,
        model_args=args or {},
        batch_per_gpu=1,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
        software="torchtitan",
        **plan,  # type: ignore[arg-type]
    )
    step, _ = build_step(sc, resolve(sc))
    m = step.memory[0]
    return m.weights_bytes + m.grads_bytes + m.optimizer_bytes


def test_hand_computed_mixtral_params() -> None:
    assert MIXTRAL_EXPERTS == 45_097_156_608
    assert MIXTRAL_DENSE + MIXTRAL_EXPERTS == 46_702_792_704  # Mixtral's published total


@pytest.mark.parametrize(
    ("plan", "degree"),
    [
        ({"dp": 4, "cp": 2, "hsdp": 2, "ep": 4}, 1),  # efsdp = 2 x 2 x 1 / 4
        ({"dp": 8, "hsdp": 4, "ep": 2}, 2),  # efsdp = 4 x 1 x 1 / 2
        ({"dp": 16, "cp": 2, "hsdp": 8, "ep": 4}, 4),  # efsdp = 8 x 2 x 1 / 4
        ({"dp": 4, "cp": 2, "ep": 4}, 2),  # plain FSDP: expert_dp = 4 x 2 / 4
        ({"dp": 4, "hsdp": 4, "ep": 4}, 1),  # efsdp = 4 x 1 x 1 / 4
    ],
)
def test_expert_shard_degree_is_torchtitans_efsdp(plan: dict[str, int], degree: int) -> None:
    assert ParallelismPlan(fsdp=True, **plan).expert_shard_degree == degree  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("plan", "fold"),
    [
        ({"dp": 4, "hsdp": 1, "ep": 4}, 1),  # ep spans the replicas, not the shard group
        ({"dp": 20, "hsdp": 10, "ep": 4}, 10),  # efsdp would be 2.5
        ({"dp": 8, "tp": 2, "hsdp": 2, "ep": 8, "etp": 1}, 4),  # 2 x 1 x 2 / 8
    ],
)
def test_hsdp_refuses_ep_not_dividing_the_shard_group(plan: dict[str, int], fold: int) -> None:
    """torchtitan refuses an ``ep`` that does not divide ``dp_shard x cp x tp`` (``_validate``
    in ``torchtitan/distributed/parallel_dims.py`` at b5bcd76): no efsdp degree to invent."""
    from perfmodel.errors import InfeasiblePlanError

    with pytest.raises(InfeasiblePlanError, match=f"= {fold} ") as err:
        ParallelismPlan(fsdp=True, **plan)  # type: ignore[arg-type]
    assert err.value.where == "hsdp" and f"hsdp={plan['hsdp']}" in str(err.value)


def test_mixtral_hsdp_cp_ep_model_state_by_hand() -> None:
    """Mixtral 8x7B, torchtitan, one DGX H100, dp=4 (hsdp 2, 2 replicas) x cp=2, ep=4: each GPU
    holds 45,097,156,608 / 4 = 11,274,289,152 expert parameters, sharded over efsdp = 1 (whole),
    and the dense 1,605,636,096 over hsdp x cp = 4: 16 B x (11,274,289,152 + 401,409,024) =
    186,811,170,816 B (173.98 GiB; the experts divided by hsdp x cp = 4 read 47.98 GiB). Plain
    FSDP on the plan: 16 B x (11,274,289,152 / 2 + 1,605,636,096 / 8) = 93,405,585,408 B."""
    hsdp = _state_bytes("mixtral_8x7b", None, 8, cp=2, hsdp=2, ep=4)
    fsdp = _state_bytes("mixtral_8x7b", None, 8, cp=2, ep=4)
    per_gpu = MIXTRAL_EXPERTS // 4
    assert hsdp == pytest.approx(STATE_BYTES_PER_PARAM * (per_gpu + MIXTRAL_DENSE / 4))
    assert hsdp == pytest.approx(186_811_170_816)
    assert fsdp == pytest.approx(STATE_BYTES_PER_PARAM * (per_gpu / 2 + MIXTRAL_DENSE / 8))
    assert fsdp == pytest.approx(93_405_585_408)


@st.composite
def _hsdp_plans(draw: st.DrawFn) -> tuple[int, dict[str, int]]:
    gpus = draw(st.sampled_from([8, 16]))
    cp = draw(st.sampled_from([1, 2]))
    dp = gpus // cp
    hsdp = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16) if h <= dp and dp % h == 0]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if (hsdp * cp) % e == 0]))
    return gpus, {"cp": cp, "hsdp": hsdp, "ep": ep}


@settings(max_examples=20, deadline=None)
@given(_hsdp_plans())
def test_hsdp_never_holds_less_model_state_than_fsdp(case: tuple[int, dict[str, int]]) -> None:
    """HSDP shards within a replica group, a subset of FSDP's ranks: its model state per GPU is
    at least FSDP's on the same plan (dense and experts alike)."""
    gpus, plan = case
    fsdp = {k: v for k, v in plan.items() if k != "hsdp"}
    assert _state_bytes("moe", SMALL, gpus, **plan) >= _state_bytes("moe", SMALL, gpus, **fsdp)


def test_mixtral_hsdp_optimizer_updates_its_shard_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimizer step's parameters (``DataParallelEmitters.sharded_params``) on the plan
    above: 1,605,636,096 / 4 dense + 11,274,289,152 / 1 expert = 11,675,698,176 per GPU (the
    experts divided by hsdp x cp = 4 gave 3,219,981,312)."""
    from perfmodel.parallel.costs import SystemCosts

    seen: list[float] = []
    real = SystemCosts.optimizer_time

    def spy(self: SystemCosts, params: float, *a: object, **k: object) -> float:
        seen.append(params)
        return real(self, params, *a, **k)

    monkeypatch.setattr(SystemCosts, "optimizer_time", spy)
    _state_bytes("mixtral_8x7b", None, 8, cp=2, hsdp=2, ep=4)
    assert seen == [pytest.approx(MIXTRAL_EXPERTS / 4 + MIXTRAL_DENSE / 4)] * len(seen) != []
    assert seen[0] == pytest.approx(11_675_698_176)


def test_mixtral_hsdp_replica_all_reduce_bytes_by_hand() -> None:
    """The gradients' all-reduce across the ``dp / hsdp`` replicas carries the dense shard
    (over ``hsdp x cp``) and the experts' own shard (over efsdp = 1: whole), as torchtitan's
    FSDP2 reduces the expert gradients over efsdp and all-reduces them over dp_replicate
    (b5bcd76). Mixtral on the plan above, FP32 gradients (4 B): 4 x (11,274,289,152 / 1 +
    1,605,636,096 / 4) = 46,702,792,704 B per step (the old grouping carried 8.05 GB)."""
    sc = _mixtral_hsdp()
    r = resolve(sc)
    step, _ = build_step(sc, r)
    assert r.recipe.grad_reduce_bytes == 4
    ar = [t for t in step.graph.tasks if t.label.endswith("replicas")]
    assert ar and {len(t.comm.group) for t in ar} == {2}
    total = sum(t.comm.message_bytes for t in ar)
    assert total == pytest.approx(4 * (MIXTRAL_EXPERTS / 4 + MIXTRAL_DENSE / 4))
    assert total == pytest.approx(46_702_792_704)


def test_mixtral_hsdp_shard_reduce_scatter_bytes_by_hand() -> None:
    """The shard group's reduce-scatter carries the dense gradients (over hsdp x cp = 4) and
    the experts' over their own efsdp ranks (torchtitan's ``edp_mesh`` ``(dp_replicate,
    efsdp)`` at b5bcd76), here efsdp = 1: no expert reduce-scatter. Mixtral on the plan above,
    FP32 gradients: 4 x 1,605,636,096 = 6,422,544,384 B per step (the dense group's expert
    share, 0.571 of the rank's 11,274,289,152 expert parameters, read 32,192,348,160 B)."""
    sc = _mixtral_hsdp()
    step, _ = build_step(sc, resolve(sc))
    rs = [t for t in step.graph.tasks if t.label.startswith("grad ") and t.comm is not None
          and t.comm.op is CollectiveOp.REDUCESCATTER]  # fmt: skip
    assert rs and {len(t.comm.group) for t in rs} == {4}
    total = sum(t.comm.message_bytes for t in rs)
    assert total == pytest.approx(4 * MIXTRAL_DENSE)
    assert total == pytest.approx(6_422_544_384)


def test_mixtral_hsdp_without_overlap_reduces_as_hsdp_by_hand() -> None:
    """With the reduction after backward (``overlap_grad_comm`` off) HSDP still reduce-scatters
    in the shard group (4 ranks: 4 B x 1,605,636,096 dense, no expert part at efsdp = 1) and
    all-reduces the shard over the 2 replicas (4 B x (11,274,289,152 + 1,605,636,096 / 4)); it
    was one reduce-scatter of 32,192,348,160 B over all 8 ranks."""
    sc = _mixtral_hsdp(software_options={"overlap_grad_comm": "false"})
    r = resolve(sc)
    assert not r.recipe.grad_comm.overlap
    step, _ = build_step(sc, r)
    grads = [(t.comm.op, len(t.comm.group), t.comm.message_bytes)
             for t in step.graph.tasks if t.label.startswith("grad")]  # fmt: skip
    assert grads == [
        (CollectiveOp.REDUCESCATTER, 4, pytest.approx(6_422_544_384)),
        (CollectiveOp.ALLREDUCE, 2, pytest.approx(4 * (MIXTRAL_EXPERTS / 4 + MIXTRAL_DENSE / 4))),
    ]


@pytest.mark.parametrize(
    ("shard", "degree", "share"),
    [(4, 1, 0.0), (4, 4, 1.0), (8, 2, (1 / 2) / (7 / 8)), (8, 4, (3 / 4) / (7 / 8))],
)
def test_hsdp_expert_grad_share_by_hand(shard: int, degree: int, share: float) -> None:
    """A ring moves ``(n - 1) / n``: the experts' efsdp reduce-scatter priced in the shard
    group's collective moves ``((k - 1) / k) / ((S - 1) / S)`` of their bytes (the lowering's
    ``ring_share(k, S)``)."""
    from perfmodel.parallel.lowering import ring_share

    assert ring_share(degree, shard) == pytest.approx(share)


def test_hsdp_expert_state_bytes_by_hand() -> None:
    """``Recipe.expert_state_bytes`` on an HSDP plan with ep > 1: dp4 cp2 hsdp2 ep4 shards the
    experts over efsdp = 2 x 2 / 4 = 1 (16 B x params, whole) while the dense state is split
    over the shard group hsdp x cp = 4 (16 B x params / 4); dp8 hsdp4 ep2: efsdp = 4 / 2 = 2."""
    from perfmodel.dtypes import Precision
    from perfmodel.parallel.recipe import build_recipe
    from perfmodel.parallel.software import get_preset
    from perfmodel.workload.memory import Optimizer

    preset = get_preset("torchtitan")
    p = ParallelismPlan(dp=4, cp=2, fsdp=True, hsdp=2, ep=4)
    r = build_recipe(preset, Precision.BF16, Optimizer.ADAM, p)
    assert sum(r.expert_state_bytes(8e6, p)) == pytest.approx(16 * 8e6 / 1)
    assert sum(r.model_state_bytes(8e6, p.grad_replicas)) == pytest.approx(16 * 8e6 / 4)
    q = ParallelismPlan(dp=8, fsdp=True, hsdp=4, ep=2)
    r = build_recipe(preset, Precision.BF16, Optimizer.ADAM, q)
    assert sum(r.expert_state_bytes(8e6, q)) == pytest.approx(16 * 8e6 / 2)
    assert sum(r.model_state_bytes(8e6, q.grad_replicas)) == pytest.approx(16 * 8e6 / 4)


def test_mixtral_hsdp_expert_share_between_none_and_all() -> None:
    """dp8 hsdp4 ep2 on one DGX H100 (last read: every lowering case had efsdp = 1): shard group
    S = 4, efsdp k = expert_dp 4 / (8 / 4 replica groups) = 2, so the shard group's
    reduce-scatter carries the dense gradients and each rank's experts (Mixtral's / ep 2)
    scaled by ring_share(2, 4) = (1/2) / (3/4) = 2/3; FP32 gradients (4 B)."""
    sc = _mixtral_hsdp(cp=1, hsdp=4, ep=2)
    step, _ = build_step(sc, resolve(sc))
    rs = [t for t in step.graph.tasks if t.label.startswith("grad ") and t.comm is not None
          and t.comm.op is CollectiveOp.REDUCESCATTER]  # fmt: skip
    assert rs and {len(t.comm.group) for t in rs} == {4}
    total = sum(t.comm.message_bytes for t in rs)
    assert total == pytest.approx(4 * (MIXTRAL_DENSE + MIXTRAL_EXPERTS / 2 * 2 / 3))
