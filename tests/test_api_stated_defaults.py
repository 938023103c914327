"""User22 items 1: the Python API states the system and model it defaulted to (the CLI refuses
to run without them), and a report's 80% range is one method away (``report.interval()``)."""

from __future__ import annotations

from perfmodel.api import Scenario, predict
from perfmodel.intervals.answers import step_interval
from perfmodel.scenario import unstated_defaults


def test_api_states_the_system_and_model_it_took() -> None:
    r = predict(Scenario(batch_per_gpu=8, fidelity="analytic"), baseline=False)
    assert r.defaults[:2] == ("system dgx1-v100 (default)", "model resnet50 (default)")
    assert "default         system dgx1-v100 (default)" in r.format_table()
    assert unstated_defaults(Scenario(model="gpt2")) == ("system dgx1-v100 (default)",)


def test_stating_the_default_value_states_no_default() -> None:
    """The same question with both named: same numbers, no default line, same content hash
    (the report cache keeps the two apart: neither answer is served for the other)."""
    bare = Scenario(batch_per_gpu=8, fidelity="analytic")
    named = Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=8, fidelity="analytic")
    assert bare.content_hash() == named.content_hash()
    a, b = predict(named, baseline=False), predict(bare, baseline=False)
    assert not any("(default)" in d and "system" in d for d in a.defaults)
    assert b.defaults[0] == "system dgx1-v100 (default)"
    assert a.iteration_time_s == b.iteration_time_s
    assert predict(named, baseline=False) is a
    assert type(b.scenario["system"]) is str  # serialised as plain text
    assert Scenario.from_dict(named.to_dict()) == named


def test_report_interval_is_predicts_range() -> None:
    sc = Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=8, fidelity="analytic")
    r = predict(sc, baseline=False)
    iv = r.interval()
    assert iv.to_dict() == step_interval(r, 0.8).to_dict()
    d = r.interval(0.9).to_dict()
    assert d["interval_level"] == 0.9
    assert d["iteration_time_s_low"] < r.iteration_time_s < d["iteration_time_s_high"]
