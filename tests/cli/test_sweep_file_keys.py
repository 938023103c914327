"""``perfmodel sweep`` takes exactly the scenario keys its rows read (user23 item 3): a key of the
sweep file's ``[base]`` that no scenario takes (a typo, or ``predict``'s file keys ``tokens``,
``fabric``, ``json``) made every row an error and exited 0; an ``[axes]`` typo was refused
without the close key. Now each is refused before any work (exit 2, no output written), naming
the file, the table, the key, the closest accepted key and, for ``predict``'s own file keys,
why a sweep does not read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main

BASE = {"system": "dgx-a100", "model": "gpt2", "global_batch": 64, "fidelity": "analytic"}


def _sweep(tmp_path: Path, base: dict, axes: dict | None = None) -> list[str]:
    spec = tmp_path / "grid.json"
    spec.write_text(json.dumps({"base": {**BASE, **base}, "axes": axes or {"gpus": [4, 8]}}))
    return ["sweep", str(spec), "-o", str(tmp_path / "rows.jsonl"), "--jobs", "1", "--quiet"]


@pytest.mark.parametrize(
    "base, words",
    [
        ({"precison": "bf16"}, "unknown key 'precison' (did you mean 'precision'?)"),
        ({"tokens": 1e9}, "unknown key 'tokens': predict's --tokens (its scenario file"),
        ({"price_per_gpu_hour": 2.0}, "'price_per_gpu_hour': predict's --price-per-gpu-hour"),
        ({"fabric": "rail"}, "'fabric': predict's --fabric; the sweep's key is 'fabric_topology'"),
        ({"json": True}, "'json': --json chooses what predict prints or writes"),
    ],
)
def test_a_key_no_row_reads_is_refused_before_any_work(
    tmp_path: Path, base: dict, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sweep(tmp_path, base)) == 2
    err = capsys.readouterr().err
    assert "grid.json: [base]: unknown key '" in err and words in err
    assert "accepted keys: " in err
    assert not (tmp_path / "rows.jsonl").exists()


def test_an_axis_typo_names_the_close_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sweep(tmp_path, {}, {"precison": ["fp32", "bf16"]})) == 2
    assert "grid.json: [axes]: unknown key 'precison' (did you mean 'precision'?)" in (
        capsys.readouterr().err
    )


def test_the_keys_a_scenario_takes_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``plan``, ``microbatch_size`` and a dotted ``model_args`` key are a scenario's: the
    rows run (the grid's two points, no error rows)."""
    base = {"plan": "tp=1", "microbatch_size": 4, "gpus": 8}
    assert main(_sweep(tmp_path, base, {"model_args.layers": [2, 4]})) == 0
    capsys.readouterr()
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "ok"]
