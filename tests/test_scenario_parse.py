"""A Scenario is parsed once, at the edge (issue 11 item 5): typed values, errors naming the field."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import perfmodel.pipeline.resolve as resolve_stage
from perfmodel.api import Scenario, resolve
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.host.input_pipeline import DatasetKind, LoaderKind
from perfmodel.parallel.plan import DPMode, Hybrid, PipelineSchedule, PSHost, Recompute
from perfmodel.pipeline.lower import build_step
from perfmodel.scenario_parse import (
    Fidelity,
    ParsedScenario,
    _zero,
    parse_placement,
    parse_scenario,
    pos_int,
)
from perfmodel.workload.memory import Optimizer
from perfmodel.workload.memory import Recompute as MemoryRecompute

SC = Scenario(system="dgx-a100", model="gpt", batch_per_gpu=8, fidelity="analytic")


def test_every_text_field_becomes_its_type() -> None:
    p = parse_scenario(
        replace(
            SC,
            precision="BF16",
            optimizer="AdamW",
            software="Megatron_Core",
            schedule="pipedream-flush",
            interleave=2,
            recompute="Full",
            dp_mode="ddp",
            hybrid="owt",
            ps_host="GPU",
            placement="tp, dp ,pp",
            memory_format="channels_last",
            dataset="cifar-memory",
            data_loader="dali",
            tp=4.0,  # an integral float from JSON is the integer
            hsdp=None,
        )
    )
    assert p.fidelity is Fidelity.ANALYTIC
    assert p.precision is Precision.BF16 and p.optimizer is Optimizer.ADAMW
    assert p.preset.name == "megatron-core"
    # interleave=2 > 1 names the interleaved 1F1B even when the schedule says 1f1b
    assert p.schedule is PipelineSchedule.INTERLEAVED and p.interleave == 2
    assert p.recompute is Recompute.FULL and p.dp_mode is DPMode.ALLREDUCE
    assert p.hybrid is Hybrid.ONE_WEIRD_TRICK and p.ps_host is PSHost.GPU
    assert p.placement == ("tp", "dp", "pp") and p.memory_format == "nhwc"
    assert p.dataset is DatasetKind.CIFAR_MEMORY and p.data_loader is LoaderKind.DALI
    assert p.tp == 4 and type(p.tp) is int and p.hsdp == 0 and p.zero is None


def test_one_recompute_enum_for_plan_and_memory() -> None:
    assert Recompute is MemoryRecompute


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("precision", "fp12"),
        ("optimizer", "adagrad"),
        ("software", "jax"),
        ("schedule", "zigzag"),
        ("recompute", "half"),
        ("dp_mode", "gossip"),
        ("hybrid", "two-weird-tricks"),
        ("ps_host", "tpu"),
        ("placement", "tp,tp,dp"),
        ("memory_format", "nwhc"),
        ("dataset", "imagenet-png"),
        ("data_loader", "opencv"),
        ("tp", 0),
        ("interleave", 1.5),
        ("dataset_size", -3),
        ("zero", "two"),
        ("zero", 2.7),  # was truncated to 2
        ("zero", True),  # was read as 1
        ("zero", 4),
        ("sequence_parallel", "no"),  # was bool("no") == True
        ("ep_overlap", "yes"),
    ],
)
def test_bad_field_is_named(field: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(replace(SC, **{field: value}))
    assert info.value.where == f"scenario.{field}"
    assert repr(value) in str(info.value) or str(value) in str(info.value)


def test_placement_text_and_tuple() -> None:
    assert parse_placement("dp,pp,tp") == ("dp", "pp", "tp")
    assert parse_placement(("pp", "tp", "dp")) == ("pp", "tp", "dp")


def test_resolve_parses_once_and_passes_types_down(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Scenario] = []
    real = resolve_stage.parse_scenario

    def counting(sc: Scenario) -> ParsedScenario:
        calls.append(sc)
        return real(sc)

    monkeypatch.setattr(resolve_stage, "parse_scenario", counting)
    sc = replace(SC, optimizer="adam", precision="bf16", placement="tp,dp,pp")
    r = resolve(sc)
    assert len(calls) == 1
    assert r.parsed.placement == ("tp", "dp", "pp")
    assert r.optimizer is Optimizer.ADAM and r.recipe is not None
    assert r.recipe.optimizer is Optimizer.ADAM
    step, _ = build_step(sc, r)
    assert step.num_gpus == 8


def test_file_flags_share_one_parser() -> None:
    """Files accept true/false, yes/no, on/off, 1/0 for flags (one parser, at the edge)."""
    from perfmodel._schema import parse_flag

    assert [parse_flag(v, where="x") for v in ("No", "on", 0, True)] == [False, True, False, True]
    with pytest.raises(ConfigError, match="x must be true or false"):
        parse_flag("maybe", where="x")


@given(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    )
)
def test_pos_int_and_zero_read_one_rule_of_integers(v: object) -> None:
    """``tp``-like counts and the ZeRO stage accept the same integers (an int or an integral
    finite float, never a bool or text: ``scenario_parse._integral``), each in its own range."""
    integral = (
        None
        if isinstance(v, bool | str) or v is None
        else int(v)
        if isinstance(v, int) or (math.isfinite(v) and float(v).is_integer())
        else None
    )
    for read, ok in ((lambda x: pos_int(x, "tp"), lambda i: i >= 1), (_zero, lambda i: i <= 3)):
        if v is None and read is _zero:
            assert read(v) is None
        elif integral is not None and ok(integral) and integral >= 0:
            assert read(v) == integral and type(read(v)) is int
        else:
            with pytest.raises(ConfigError):
                read(v)


# ------------------------------------------------------------------ the two mappings, copied


@pytest.mark.parametrize("key", ["model_args", "software_options"])
def test_a_mapping_given_in_code_is_copied(key: str) -> None:
    """A frozen scenario does not change when its caller later changes the dict it gave
    (a ``Scenario(model_args=d)`` kept ``d`` itself before: ``d["layers"] = 40`` afterwards
    made the same scenario predict a 10x longer step)."""
    given = {"layers": 4} if key == "model_args" else {"overlap_grad_comm": True}
    sc = Scenario(model="gpt", **{key: given})
    before = dict(getattr(sc, key))
    given["later"] = 1
    assert getattr(sc, key) == before
    assert getattr(sc, key) is not given
    assert getattr(replace(sc, **{key: given}), key) == given  # replace builds anew


def test_a_copied_model_args_keeps_its_prediction() -> None:
    from perfmodel.api import predict

    args = {"layers": 2, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000}
    sc = Scenario(system="dgx-a100", model="gpt", model_args=args, global_batch=8, gpus=8)
    first = predict(sc, baseline=False).iteration_time_s
    args["layers"] = 20
    assert predict(sc, baseline=False).iteration_time_s == first


@pytest.mark.parametrize("key", ["model_args", "software_options"])
def test_a_mapping_field_none_is_empty_and_a_list_is_refused(key: str) -> None:
    assert getattr(Scenario(**{key: None}), key) == {}
    assert getattr(Scenario.from_dict({key: None}), key) == {}
    with pytest.raises(
        ConfigError, match=rf"scenario: {key}: expected a table/mapping, got \[1, 2\]"
    ):
        Scenario(**{key: [1, 2]})
    with pytest.raises(ConfigError, match=rf"job\.toml: {key}: expected a table/mapping"):
        Scenario.from_dict({key: [1, 2]}, where="job.toml")


def test_a_list_inside_model_args_is_copied_too() -> None:
    """A list value (an MLP's ``widths``) is the scenario's own: changing the caller's list
    afterwards changes neither the hash nor the prediction (review rev27: a shallow copy
    still shared it, and the step went from 2.1 to 318 ms)."""
    from perfmodel.api import predict

    widths = [784, 1024, 1024, 10]
    sc = Scenario(
        system="dgx-a100", model="mlp", model_args={"widths": widths}, global_batch=256, gpus=8
    )
    key, first = sc.content_hash(), predict(sc, baseline=False).iteration_time_s
    widths[1:3] = [65536, 65536]
    assert sc.model_args["widths"] == [784, 1024, 1024, 10]
    assert sc.content_hash() == key
    assert predict(sc, baseline=False).iteration_time_s == first


def test_to_dict_shares_no_list_with_the_scenario() -> None:
    """What ``to_dict`` hands out is the caller's: appending to its ``widths`` leaves the
    scenario (and its hash) as it was (a shallow ``dict`` copy shared the list)."""
    sc = Scenario(model="mlp", model_args={"widths": [784, 1024, 10]})
    key = sc.content_hash()
    sc.to_dict()["model_args"]["widths"].append(5)
    assert sc.model_args["widths"] == [784, 1024, 10]
    assert sc.content_hash() == key
