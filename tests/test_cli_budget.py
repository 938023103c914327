"""--budget reads the same durations in ``compare`` and ``calibrate`` (60s, 5m, 1.5h, bare
seconds) through one parser, and both help texts say so in the same words."""

from typing import Any

import pytest

import perfmodel.calibration.runner
import perfmodel.search.compare
from perfmodel.cli import build_parser, main
from perfmodel.cli._common import DURATION_HELP, parse_budget
from perfmodel.errors import ConfigError


class _Stop(Exception):
    pass


def _capture(monkeypatch, module, name) -> list[Any]:
    seen: list[Any] = []

    def spy(*args, **kwargs):
        seen.append((args, kwargs))
        raise _Stop

    monkeypatch.setattr(module, name, spy)
    return seen


COMPARE = ["compare", "--system", "dgx1-v100", "--model", "mlp", "--global-batch", "8"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2m", 120.0), ("90s", 90.0), ("1.5h", 5400.0), ("45", 45.0), ("1200", 1200.0)],
)
def test_parse_budget(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize(
    ("flag", "seconds"),
    [(["--budget", "2m"], 120.0), (["--budget", "1200"], 1200.0), ([], 30.0)],
)
def test_compare_budget_reaches_the_search_in_seconds(flag, seconds, monkeypatch):
    seen = _capture(monkeypatch, perfmodel.search.compare, "search_plans")
    with pytest.raises(_Stop):
        main([*COMPARE, *flag])
    assert seen[0][1]["budget_s"] == seconds


def test_compare_budget_zero_still_means_no_later_stage(monkeypatch):
    seen = _capture(monkeypatch, perfmodel.search.compare, "search_plans")
    with pytest.raises(_Stop):
        main([*COMPARE, "--budget", "0"])
    assert seen[0][1]["budget_s"] == 0.0
    with pytest.raises(ConfigError):
        parse_budget("0")  # calibrate: a zero budget measures nothing


def test_calibrate_budget_uses_the_same_parser(monkeypatch, tmp_path):
    seen = _capture(monkeypatch, perfmodel.calibration.runner, "calibrate")
    with pytest.raises(_Stop):
        main(["calibrate", "--budget", "2m", "-o", str(tmp_path / "p.json")])
    assert seen[0][0][1] == 120.0


@pytest.mark.parametrize("command", ["compare", "calibrate"])
@pytest.mark.parametrize("bad", ["2 weeks", "abc", "-5"])
def test_bad_budget_is_one_line_naming_it(command, bad, monkeypatch, capsys, tmp_path):
    _capture(monkeypatch, perfmodel.search.compare, "search_plans")
    _capture(monkeypatch, perfmodel.calibration.runner, "calibrate")
    argv = COMPARE if command == "compare" else ["calibrate", "-o", str(tmp_path / "p.json")]
    assert main([*argv, f"--budget={bad}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budget" in err and repr(bad) in err


def _budget_help(command: str) -> str:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    action = next(a for a in sub.choices[command]._actions if a.dest == "budget")
    return action.help


def test_help_texts_describe_the_format_identically():
    helps = {c: _budget_help(c) for c in ("compare", "calibrate")}
    for text in helps.values():
        assert DURATION_HELP in text
    assert (
        helps["compare"].replace("30s", "60s").split(DURATION_HELP)[1]
        == (helps["calibrate"].split(DURATION_HELP)[1])
    )


def test_sweep_has_no_duration_flag():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    flags = [s for a in sub.choices["sweep"]._actions for s in a.option_strings]
    assert not [f for f in flags if any(w in f for w in ("budget", "timeout", "time"))]
