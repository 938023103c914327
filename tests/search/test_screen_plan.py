"""The screen runs the plan ``predict`` runs (session review of 59b9956, item 1): both derive it
in one place (:func:`perfmodel.pipeline.resolve.plan_for`) and build its recipe with
:func:`perfmodel.pipeline.resolve.recipe_of`. At 59b9956 the screen restated the plan rules by
hand: (a) it never passed the recomputation to the recipe, so activation offloading with
``recompute=full`` was screened at 0.017 s where ``predict`` refuses it; (b) a plan without
``zero`` took ZeRO 0, not the preset's stage (FSDP: 4.55 GiB against predict's 2.65 GiB); (c)
``schedule="1f1b"`` with ``interleave=2`` kept 1F1B's in-flight memory while dividing the
bubble by ``v``. Item 2: the issue-lead cache is keyed on the selective-recomputation policy
it reads."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.parallel.plan import DPMode, PipelineSchedule, Recompute
from perfmodel.parallel.selective import SelectiveRecompute
from perfmodel.parallel.software import get_preset
from perfmodel.pipeline.resolve import plan_for, resolve
from perfmodel.scenario_parse import parse_scenario
from perfmodel.search.screen import PlanScreen
from perfmodel.search.screen_overlap import stage_issue_lead_s

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024}
GIB = 2**30


def _base(software: str, **kw: Any) -> dict[str, Any]:
    return {"system": "dgx-h100", "model": "gpt", "model_args": GPT, "precision": "bf16",
            "optimizer": "adam", "software": software, **kw}  # fmt: skip


def _predicted(base: dict[str, Any], plan: dict[str, Any]) -> Any:
    return predict(Scenario.from_dict({**base, **plan, "fidelity": "analytic"}), baseline=False)


def test_activation_offload_with_recompute_is_refused_as_predict_refuses_it() -> None:
    """(a) Megatron-Core's CPU offloading needs ``recompute=none``: the screen's recipe sees the
    plan's recomputation, so it raises what ``predict`` raises (59b9956: 0.017 s)."""
    base = _base("megatron-core", software_options={"activation_offload_layers": 2})
    plan = {"gpus": 8, "global_batch": 16, "recompute": "full"}
    with pytest.raises(ConfigError, match="needs recompute=none") as pred:
        _predicted(base, plan)
    with pytest.raises(ConfigError, match="needs recompute=none") as got:
        PlanScreen(base)(plan)
    assert str(got.value) == str(pred.value)
    PlanScreen(base)({**plan, "recompute": "none"})  # without recomputation: screened


@pytest.mark.parametrize(("software", "plan"), [
    ("fsdp", {"gpus": 8, "global_batch": 16}),  # preset ZeRO-3: FSDP (59b9956: 4.55 vs 2.65 GiB)
    ("megatron-core", {"gpus": 8, "tp": 2, "global_batch": 16}),  # distributed optimizer
])  # fmt: skip
def test_plan_without_zero_takes_the_presets_stage(software: str, plan: dict[str, Any]) -> None:
    """(b) A plan that states no ZeRO stage runs the preset's, as ``predict`` runs it: the
    screen's answer is its answer for the preset's stage, and its memory is ``predict``'s
    within 2% (59b9956: 71% and 31% above, with ZeRO 0; 2154e7d: FSDP 7.7% below, the two
    gathered FSDP units missing)."""
    base = _base(software)
    preset_zero = get_preset(software).zero
    assert preset_zero >= 1
    screen = PlanScreen(base)
    got = screen(plan)
    assert got == screen({**plan, "zero": preset_zero})
    pred = _predicted(base, plan).memory_per_gpu_bytes
    assert got["memory_per_gpu_bytes"] == pytest.approx(pred, rel=0.02)
    assert (
        got["memory_per_gpu_bytes"] < PlanScreen(base)({**plan, "zero": 0})["memory_per_gpu_bytes"]
    )


def test_interleave_names_the_interleaved_schedule() -> None:
    """(c) ``schedule="1f1b"`` with ``interleave=2`` is the interleaved schedule in ``predict``
    (the parse's rule) and now in the screen: memory (in-flight micro-batches) and time are the
    ``schedule="interleaved"`` plan's (59b9956: 1F1B's in-flight memory, 1.86 vs 1.93 GiB,
    with the interleaved bubble), and the memory is ``predict``'s within 2% (2154e7d: 1.93 vs
    2.27 GiB, 15% below: the last stage's copy of the tied embedding missing)."""
    base = _base("megatron-core")
    plan = {"gpus": 8, "pp": 2, "global_batch": 32, "microbatch": 1, "interleave": 2, "zero": 1}
    one_f_one_b, interleaved = {**plan, "schedule": "1f1b"}, {**plan, "schedule": "interleaved"}
    p1, p2 = _predicted(base, one_f_one_b), _predicted(base, interleaved)
    assert p1.memory_per_gpu_bytes == p2.memory_per_gpu_bytes
    got = PlanScreen(base)(one_f_one_b)
    assert got == PlanScreen(base)(interleaved)
    assert got["memory_per_gpu_bytes"] == pytest.approx(p2.memory_per_gpu_bytes, rel=0.02)


def test_plan_for_is_resolves_plan() -> None:
    """``plan_for`` is the plan ``predict`` resolves (golden fields of a hand-checked case):
    64 samples over dp = 32 / (2 x 2) = 8 replicas is 8 per replica, micro-batch 1 with
    pipelining, the preset's ZeRO-1, interleave 2 naming the interleaved schedule."""
    plan_fields = {"nodes": 4, "gpus": 32, "tp": 2, "pp": 2, "global_batch": 64, "interleave": 2,
                   "recompute": "selective"}  # fmt: skip
    sc = Scenario.from_dict({**_base("megatron-core"), **plan_fields})
    plan, per_replica = plan_for(parse_scenario(sc), 32)
    assert (plan.dp, plan.tp, plan.pp, per_replica, plan.microbatch_size) == (8, 2, 2, 8, 1)
    assert (plan.zero, plan.fsdp, plan.dp_mode) == (1, False, DPMode.ALLREDUCE)
    assert (plan.schedule, plan.interleave) == (PipelineSchedule.INTERLEAVED, 2)
    assert plan.recompute is Recompute.SELECTIVE
    assert plan == resolve(sc).plan


def test_issue_lead_cache_is_keyed_on_the_selective_policy() -> None:
    """Item 2: the issue lead reads the recipe's selective-recomputation share, so two recipes
    of different policies on the same stage get their own leads (59b9956: the first one's)."""
    base = _base("megatron", model_args={**GPT, "layers": 12}, precision="fp16")
    base["system"] = "dgx-a100"
    scr = PlanScreen(base)
    scr({"gpus": 8, "dp": 4, "tp": 2, "microbatch": 1, "global_batch": 8, "recompute": "selective"})
    (st,) = scr._stage_cache.values()
    (rc,) = scr._recipes.values()
    other = replace(rc, selective_recompute=SelectiveRecompute.OP)
    assert other.selective_recompute is not rc.selective_recompute
    costs, wl = scr._system_costs(1), st.stage_workload
    for recipe in (rc, other):
        lead = stage_issue_lead_s(costs, wl, recipe, "1f1b", 1, 2, 1, "selective")
        want = min(lead, 2 * st.host_s)
        assert scr._issue_lead_s(st, recipe, "1f1b", 1, 2, 1, "selective") == want
    leads = {stage_issue_lead_s(costs, wl, r, "1f1b", 1, 2, 1, "selective") for r in (rc, other)}
    assert len(leads) == 2  # the policies' leads differ: the test can tell the keys apart


def test_learners_outside_crossbow_are_refused_by_predict_and_the_screen() -> None:
    """Last read of this session: two learners per GPU with all-reduce data parallelism.
    predict ran it as one learner while the plan said two, and the screen counted one
    learner's samples but timed and sized two (0.105 s against predict's 0.058 s, 3.80 against
    2.39 GiB). Several learners per GPU are Crossbow's: both refuse the plan, naming it."""
    base = {"system": "dgx1-v100", "model": "resnet50", "precision": "fp32",
            "optimizer": "sgd", "software": "pytorch-ddp", "batch_per_gpu": 16}  # fmt: skip
    plan = {"gpus": 8, "dp": 8, "learners_per_gpu": 2, "dp_mode": "allreduce"}
    with pytest.raises(InfeasiblePlanError, match="learners_per_gpu=2") as exc:
        _predicted(base, plan)
    assert exc.value.where == "learners_per_gpu"
    with pytest.raises(InfeasiblePlanError, match="learners_per_gpu=2"):
        PlanScreen(base)(plan)
    crossbow = PlanScreen(base)({**plan, "dp_mode": "crossbow"})
    assert crossbow["samples_per_step"] == 256  # Crossbow's learners each take the batch
