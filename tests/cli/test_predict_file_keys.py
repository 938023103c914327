"""User22 item 2: a ``predict`` scenario file takes the flags' keys (``tokens = 26e9``, the price
and MTBF keys, ``fabric``), typed and read once, a flag overriding the file; the output flags
are refused naming the key and the file (``perfmodel.cli.predict_file``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.cli import predict as predict_cli
from perfmodel.cli.predict_file import ALIASES, OUTPUT_KEYS, TABLES
from perfmodel.scenario import Scenario
from tests.cli.cli_helpers import refused

BASE = 'system = "dgx-a100"\nmodel = "gpt2"\nbatch_per_gpu = 8\nfidelity = "analytic"\n'


def _file(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(BASE + extra)
    return str(path)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--gpus", "1", "--json", "--interval", "off"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_predict_flag_has_a_file_key_or_a_stated_reason() -> None:
    """A new flag must be a Scenario field, a budget key, an alias, a table or an output flag."""
    ap = argparse.ArgumentParser()
    predict_cli.register(ap.add_subparsers())
    parser = ap._subparsers._group_actions[0].choices["predict"]  # type: ignore[union-attr]
    dests = {a.dest for a in parser._actions} - {"help", "scenario", "plan", "gpus"}
    accepted = {f.name for f in fields(Scenario)} | {k for k, _, _ in predict_cli.FILE_RUN_KEYS}
    accepted |= set(ALIASES.values()) | set(TABLES) | set(OUTPUT_KEYS)
    assert dests <= accepted, sorted(dests - accepted)


def test_budget_keys_from_the_file_equal_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = "tokens = 26e9\nprice_per_gpu_hour = 2\nmtbf_gpu_hours = 5000\nrestart_s = 60\n"
    from_file = _json(capsys, ["predict", _file(tmp_path, keys)])
    flags = ["--tokens", "26e9", "--price-per-gpu-hour", "2", "--mtbf-gpu-hours", "5000"]
    from_flags = _json(capsys, ["predict", _file(tmp_path, ""), *flags, "--restart-s", "60"])
    assert from_file["token_budget"] == from_flags["token_budget"]
    assert from_file["token_budget"]["cost"] > 0
    run_file, run_flags = from_file["training_run"], from_flags["training_run"]
    # the one difference: the source names what gave the MTBF (the file's key, the flag)
    source = run_flags.pop("reliability_source").removeprefix("--mtbf-gpu-hours given; ")
    assert run_file.pop("reliability_source").endswith("job.toml: mtbf_gpu_hours given; " + source)
    assert run_file == run_flags


def test_a_flag_overrides_the_files_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["predict", _file(tmp_path, "tokens = 26e9\n"), "--tokens", "1e9"])
    assert out["token_budget"]["tokens"] == 1e9


def test_fabric_is_the_flags_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", _file(tmp_path, 'nodes = 2\nfabric = "rail"\n')]
    out = _json(capsys, argv)
    assert out["scenario"]["fabric_topology"] == "rail"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ('tokens = "lots"', "job.toml: tokens 'lots': expected a finite number > 0"),
        ("tokens = [1]", "job.toml: tokens: expected a number (the file's --tokens)"),
        ("tokens = -1", "job.toml: tokens '-1': expected a finite number > 0"),
        ("json = true", "job.toml: json: not a scenario key: --json chooses what predict"),
        ('model_arg = ["seq_len=512"]', "job.toml: model_arg: the file's key for --model-arg"),
        ('fabric = "rail"\nfabric_topology = "rail"', "give 'fabric' or 'fabric_topology'"),
    ],
)
def test_refusals_name_the_key_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, words: str
) -> None:
    assert words in refused(capsys, ["predict", _file(tmp_path, extra + "\n")])
