"""User22 items 1: the Python API states the system and model it defaulted to (the CLI refuses
to run without them), and a report's 80% range is one method away (``report.interval()``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.cli.headers import job_settings
from perfmodel.intervals.answers import step_interval
from perfmodel.scenario import unstated_defaults


def test_api_states_the_system_and_model_it_took() -> None:
    r = predict(Scenario(batch_per_gpu=8, fidelity="analytic"), baseline=False)
    assert r.defaults[:2] == ("system dgx1-v100 (default)", "model resnet50 (default)")
    assert "default         system dgx1-v100 (default)" in r.format_table()
    stated = Scenario(model="gpt2", software="fsdp", precision="bf16", optimizer="adam")
    assert unstated_defaults(stated) == ("system dgx1-v100 (default)",)


def test_api_states_the_software_precision_and_optimizer_it_took() -> None:
    """User23 item 2: ``defaults`` named the system and model only, not the software preset,
    precision and optimizer the CLI header marks "(default)"; now each, in the header's words
    (one function, :func:`perfmodel.scenario.setting_words`, writes both), after its key."""
    sc = Scenario(system="dgx-a100", model="gpt2", batch_per_gpu=8, fidelity="analytic")
    r = predict(sc, baseline=False)
    words = job_settings("pytorch-ddp", "fp32", "sgd", frozenset())
    software = "pytorch-ddp (default preset; --software to choose)"
    assert words == [software, "fp32 (default)", "sgd (default)"]
    api = "pytorch-ddp (default preset; Scenario(software=...) to choose)"  # rev29 item 3
    assert r.defaults[:3] == tuple(
        f"{k} {w}"
        for k, w in zip(("software", "precision", "optimizer"), [api, *words[1:]], strict=True)
    )
    assert "default         optimizer sgd (default)" in r.format_table()
    only = predict(replace(sc, precision="fp32", optimizer="adam"), baseline=False)
    assert only.defaults[0] == f"software {api}"
    assert "--software" not in " ".join(only.defaults)  # an API caller has no flags
    assert not any(d.startswith(("precision", "optimizer")) for d in only.defaults)
    stated = replace(sc, software="pytorch-ddp", precision="fp32", optimizer="sgd")
    assert stated.content_hash() == sc.content_hash()  # the same question, nothing defaulted
    assert not any("(default" in d for d in predict(stated, baseline=False).defaults)
    assert predict(stated, baseline=False).iteration_time_s == r.iteration_time_s


def test_cli_states_them_once(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's header marks them; its text does not repeat them as ``default`` lines, its
    ``--json`` (no header) lists them as the API does, in the flags' words (the API names the
    Scenario field: rev29 item 3)."""
    argv = ["predict", "--system", "dgx-a100", "--model", "gpt2", "--batch-per-gpu", "8"]
    argv += ["--fidelity", "analytic", "--precision", "bf16", "--interval", "off"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pytorch-ddp (default preset; --software to choose), bf16, sgd (default)" in out
    assert "default         software" not in out and "default         optimizer" not in out
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["defaults"][:2] == [
        "software pytorch-ddp (default preset; --software to choose)",
        "optimizer sgd (default)",
    ]
    assert main([*argv, "--gpus", "4,8", "--json"]) == 0  # a curve's rows alike
    rows = json.loads(capsys.readouterr().out)
    assert [r["defaults"][0] for r in rows] == [d["defaults"][0]] * 2


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
