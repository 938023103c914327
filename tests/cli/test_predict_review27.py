"""Review rev27b of ``perfmodel predict``'s scenario-file keys and hardware line: a YAML file's
``tokens: 2.6e10`` (text to PyYAML) is read as ``--tokens 2.6e10`` is; an unknown key lists
what the file accepts and the close match; a budget key from the file is blamed as the file's
key; ``--nodes 1`` wins over a file's ``nodes``; the hardware line says a link one GPU does not
use, the grammar of one node, the oversubscription; a curve's JSON rows carry ``hardware``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.cli.headers import hardware_line
from tests.cli.cli_helpers import refused

BASE = {"system": "dgx-a100", "model": "gpt2", "batch_per_gpu": 8, "fidelity": "analytic"}


def _write(tmp_path: Path, suffix: str, extra: dict[str, str]) -> str:
    """``BASE`` and ``extra`` (values written as they stand: ``2.6e10``) in a file ``suffix``."""
    keys = {**{k: json.dumps(v) for k, v in BASE.items()}, **extra}
    path = tmp_path / f"job.{suffix}"
    if suffix == "toml":
        path.write_text("".join(f"{k} = {v}\n" for k, v in keys.items()))
    elif suffix == "yaml":
        path.write_text("".join(f"{k}: {v}\n" for k, v in keys.items()))
    else:
        path.write_text("{" + ", ".join(f'"{k}": {v}' for k, v in keys.items()) + "}")
    return str(path)


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--json", "--interval", "off"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("suffix", ["toml", "yaml", "json"])
@pytest.mark.parametrize("written", ["26e9", "2.6e10", "26000000000", '"2.6e10"'])
def test_a_files_tokens_is_read_as_the_flag_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str, written: str
) -> None:
    """PyYAML reads ``2.6e10`` and ``26e9`` as text (YAML 1.1): the flag's parser reads it."""
    if suffix == "yaml":
        pytest.importorskip("yaml")
    path = _write(tmp_path, suffix, {"tokens": written, "price_per_gpu_hour": "2"})
    out = _json(capsys, ["predict", path, "--gpus", "1"])
    assert out["token_budget"]["tokens"] == 26e9


def test_a_files_non_number_is_still_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, ["predict", _write(tmp_path, "toml", {"tokens": "true"})])
    assert "job.toml: tokens: expected a number (the file's --tokens), got True (bool)" in err


def test_an_unknown_key_lists_the_files_keys_and_the_close_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, ["predict", _write(tmp_path, "toml", {"token": "26e9"})])
    assert "unknown key 'token' (did you mean 'tokens'?)" in err
    accepted = err.split("accepted keys: ")[1].strip().split(", ")
    for key in ("tokens", "price_per_gpu_hour", "fabric", "mtbf_gpu_hours", "restart_s", "plan"):
        assert key in accepted, key


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"mtbf_gpu_hours": "5000"}, "job.toml: mtbf_gpu_hours needs --tokens"),
        ({"price_per_gpu_hour": "2"}, "job.toml: price_per_gpu_hour needs --tokens"),
    ],
)
def test_a_budget_key_without_tokens_is_blamed_on_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, str], words: str
) -> None:
    err = refused(capsys, ["predict", _write(tmp_path, "toml", extra), "--gpus", "1"])
    assert words in err
    assert "--mtbf" not in err and "--price" not in err


def test_the_sources_line_names_the_files_mtbf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "toml", {"mtbf_gpu_hours": "5000", "tokens": "1e9"})
    assert main(["predict", path, "--gpus", "1", "--interval", "off"]) == 0
    out = capsys.readouterr().out
    assert "job.toml: mtbf_gpu_hours given;" in out
    assert "--mtbf-gpu-hours given" not in out


def test_nodes_1_given_wins_over_the_files_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "toml", {"nodes": "2"})
    assert _json(capsys, ["predict", path, "--nodes", "1"])["scenario"]["nodes"] == 1
    assert _json(capsys, ["predict", path])["scenario"]["nodes"] == 2
    assert _json(capsys, ["predict", path, "--nodes", "3"])["scenario"]["nodes"] == 3


def test_one_gpu_leaves_the_intra_node_link_unused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", *("--system", "dgx-a100", "--model", "gpt2", "--batch-per-gpu", "8")]
    assert main([*argv, "--gpus", "1", "--interval", "off"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("hardware"))
    assert "intra-node nvswitch-v2 unused (one GPU)" in line


def test_the_hardware_line_grammar_and_oversubscription() -> None:
    hw = {
        "gpu": "A100",
        "gpus_used": 8,
        "gpus_per_node_used": 8,
        "nodes_used": 1,
        "nodes_asked": 2,
        "gpus_per_node": 8,
        "intra_node": "nvswitch-v2",
        "fabric": {
            "network": "ib-hdr",
            "topology": "fat-tree",
            "nics_per_node": 8,
            "oversubscription": 2.0,
        },
    }
    line = hardware_line(hw)
    assert "1 of the 2 nodes asked for is used" in line
    assert "fat-tree (8 NIC(s)/node, 2:1 oversubscribed)" in line
    assert "unused (one GPU)" not in line
    line = hardware_line({**hw, "nodes_used": 2, "nodes_asked": 3})
    assert "2 of the 3 nodes asked for are used" in line


def test_oversubscription_is_in_the_json_fabric(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", *("--system", "dgx-a100", "--nodes", "2", "--model", "gpt2")]
    argv += ["--batch-per-gpu", "8", "--fabric", "fat-tree", "--oversubscription", "2"]
    assert _json(capsys, argv)["hardware"]["fabric"]["oversubscription"] == 2.0


def test_a_curves_json_rows_carry_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", *("--system", "dgx-a100", "--nodes", "2", "--model", "gpt2")]
    rows = _json(capsys, [*argv, "--batch-per-gpu", "8", "--gpus", "8,16"])
    assert [r["hardware"]["nodes_used"] for r in rows] == [1, 2]
