"""DeepSpeed refuses ZeRO-2/3 with pipeline parallelism (``PipelineEngine.__init__``: assert
``zero_optimization_stage() < ZeroStageEnum.gradients``, "ZeRO-2 and ZeRO-3 are incompatible
with pipeline parallelism", deepspeedai/DeepSpeed ``deepspeed/runtime/pipe/engine.py`` at v0.14.0
and edaa722): the fact lives once, on the preset (``SoftwarePreset.pipeline_max_zero`` with its
source), a scenario's software options derived from a DeepSpeed preset inherit it (and may
restate it), and ``predict`` refuses such a plan with a typed error naming the stage, the
software and ``pp``; ZeRO-1 with pipelining, ZeRO-3 without, and FSDP with pipelining still run.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.api import Scenario, predict, resolve
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.parallel import software as sw
from perfmodel.parallel.software import DEEPSPEED_PIPELINE_ZERO_SOURCE, PRESETS, get_preset
from perfmodel.pipeline.resolve import check_pipeline_zero

GPT = {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000}


def _scenario(**kw: object) -> Scenario:
    base: dict[str, object] = dict(
        system="dgx-a100", model="gpt", model_args=GPT, global_batch=16, precision="bf16",
        optimizer="adam", fidelity="analytic", microbatch=1,
    )  # fmt: skip
    return Scenario.from_dict({**base, **kw})


def test_only_the_deepspeed_presets_limit_zero_under_pipelining() -> None:
    limits = {name: p.pipeline_max_zero for name, p in PRESETS.items()}
    assert {n for n, v in limits.items() if v is not None} == {
        "deepspeed-zero1",
        "deepspeed-zero2",
        "deepspeed-zero3",
    }
    for name in ("deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3"):
        p = get_preset(name)
        assert p.pipeline_max_zero == 1
        assert DEEPSPEED_PIPELINE_ZERO_SOURCE in p.sources
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in (
        DEEPSPEED_PIPELINE_ZERO_SOURCE
    )


def test_software_options_inherit_and_restate_the_limit() -> None:
    ds3 = get_preset("deepspeed-zero3")
    derived = sw.with_software_options(ds3, {"bucket_mb": 100})
    assert derived.pipeline_max_zero == 1  # a user's stack derived from DeepSpeed inherits it
    assert (
        sw.with_software_options(get_preset("fsdp"), {"bucket_mb": 100}).pipeline_max_zero is None
    )
    lifted = sw.with_software_options(ds3, {"pipeline_max_zero": "3"})
    assert lifted.pipeline_max_zero == 3
    assert lifted.sources[-1] == "scenario software option pipeline_max_zero=3"
    assert sw.with_software_options(ds3, {"pipeline_max_zero": "none"}).pipeline_max_zero is None
    for bad in ("4", "-1", "x", True, 1.5):
        with pytest.raises(ConfigError, match="pipeline_max_zero must be a ZeRO stage"):
            sw.with_software_options(ds3, {"pipeline_max_zero": bad})
    with pytest.raises(ConfigError, match="pipeline_max_zero must be a ZeRO stage 0-3"):
        replace(ds3, pipeline_max_zero=5)


def test_predict_refuses_deepspeed_zero2_and_zero3_with_pipelining() -> None:
    for software, stage in (("deepspeed-zero3", 3), ("deepspeed-zero2", 2)):
        sc = _scenario(software=software, pp=2, dp=4)
        with pytest.raises(InfeasiblePlanError) as info:
            predict(sc, baseline=False)
        exc = info.value
        assert exc.value == stage
        assert exc.where == "software"
        text = str(exc)
        assert f"software {software} with pp=2" in text
        assert f"ZeRO-{stage} (the preset's stage) is refused" in text
        assert "pipeline_max_zero=1" in text
        assert "deepspeed/runtime/pipe/engine.py" in text
        assert "use pp=1, or zero=1 (software deepspeed-zero1) with pp=2" in text
        assert "fsdp or torchtitan" in text


def test_a_stated_zero_stage_is_refused_and_named() -> None:
    sc = _scenario(software="deepspeed-zero1", zero=3, pp=2, dp=4)
    with pytest.raises(InfeasiblePlanError, match=r"zero=3 \(the scenario's\) is refused") as info:
        resolve(sc)
    assert info.value.where == "zero"
    assert info.value.value == 3


@pytest.mark.parametrize(
    "keys",
    [
        dict(software="deepspeed-zero1", pp=2, dp=4),  # ZeRO-1 with pipelining: DeepSpeed runs it
        dict(software="deepspeed-zero3", zero=1, pp=2, dp=4),
        dict(software="deepspeed-zero3", zero=0, pp=2, dp=4),
        dict(software="deepspeed-zero3", pp=1, dp=8),  # ZeRO-3 without pipelining
        dict(software="deepspeed-zero2", pp=1, dp=8),
        dict(software="fsdp", pp=2, dp=4),  # FSDP2 shards with pipelining
        dict(software="torchtitan", pp=2, dp=4),
        dict(software="pytorch-ddp", zero=3, pp=2, dp=4),  # no stated limit outside DeepSpeed
        # a stack that lifts DeepSpeed's assertion says so
        dict(software="deepspeed-zero3", pp=2, dp=4, software_options={"pipeline_max_zero": 3}),
    ],
)
def test_plans_the_stacks_run_are_predicted(keys: dict) -> None:
    r = predict(_scenario(**keys), baseline=False)
    assert r.iteration_time_s > 0


def test_a_derived_stack_inherits_the_refusal() -> None:
    """A scenario's own software (a DeepSpeed preset with options of its own) is still
    DeepSpeed's pipeline engine; lowering the limit refuses ZeRO-1 too."""
    sc = _scenario(software="deepspeed-zero3", pp=2, dp=4, software_options={"bucket_mb": 50})
    with pytest.raises(InfeasiblePlanError, match="pipeline_max_zero=1"):
        predict(sc, baseline=False)
    sc = _scenario(
        software="deepspeed-zero1", pp=2, dp=4, software_options={"pipeline_max_zero": 0}
    )
    with pytest.raises(InfeasiblePlanError, match="scenario software option pipeline_max_zero=0"):
        resolve(sc)


def test_fsdp_counts_as_stage_three() -> None:
    """FSDP is ZeRO-3 sharding: a stack stating a limit below 3 refuses it with pipelining."""
    keys = dict(software="fsdp", pp=2, dp=4, software_options={"pipeline_max_zero": 1})
    with pytest.raises(InfeasiblePlanError, match=r"software fsdp with pp=2: ZeRO-3") as exc:
        resolve(_scenario(**keys))
    assert "fsdp or torchtitan" not in str(exc.value)  # the refused stack is one of them
    check_pipeline_zero(get_preset("fsdp"), 3, 8)  # no limit stated: nothing refused


def test_the_lowering_tests_still_draw_pipelined_zero3() -> None:
    """The hypothesis draws of the gather-chain tests (``report_compare.drawn_plan``) pass a
    refused plan over (``assume``): a DeepSpeed ZeRO-3 draw with ``pp > 1`` must stay a plan
    that lowers (the limit lifted), or those tests would stop exercising the per-micro-batch
    gathers under pipelining without failing."""
    from report_compare import drawn_plan

    sc = drawn_plan(
        model_args=GPT, global_batch=16, software="deepspeed-zero3", nodes=1, tp=1, pp=2,
        mb=1, interleaved=False, recompute="none",
    )  # fmt: skip
    assert sc is not None
    plan = resolve(sc).plan
    assert (plan.pp, plan.zero, plan.fsdp) == (2, 3, False)


def test_a_restated_limit_names_no_preset_that_is_refused_too() -> None:
    """DeepSpeed ZeRO-3 restated to run ZeRO-2 with pipelining refuses ZeRO-3 and suggests
    ``zero=2`` alone: the shipped ``deepspeed-zero2`` runs at most ZeRO-1 there (final21c)."""
    keys = dict(software="deepspeed-zero3", pp=2, dp=4, software_options={"pipeline_max_zero": 2})
    with pytest.raises(InfeasiblePlanError, match=r"or zero=2 with pp=2") as exc:
        resolve(_scenario(**keys))
    assert "deepspeed-zero2" not in str(exc.value)
