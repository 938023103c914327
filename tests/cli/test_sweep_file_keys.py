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


def _sweep(
    tmp_path: Path, base: dict, axes: dict | None = None, zipped: dict | None = None
) -> list[str]:
    spec = tmp_path / "grid.json"
    doc = {"base": {**BASE, **base}, "axes": axes or {"gpus": [4, 8]}}
    if zipped:
        doc["zip"] = zipped
    spec.write_text(json.dumps(doc))
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


def test_a_zip_typo_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The [zip] table's keys are checked as [axes]'s (rev29 item 5)."""
    zipped = {"precison": ["fp32", "bf16"], "optimizer": ["sgd", "adam"]}
    assert main(_sweep(tmp_path, {}, zipped=zipped)) == 2
    assert "grid.json: [zip]: unknown key 'precison' (did you mean 'precision'?)" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "rows.jsonl").exists()


@pytest.mark.parametrize(
    "base, axes, zipped, words",
    [
        (
            {"gpus": 8},
            {"model_args.hiden": [512, 1024]},
            None,
            "[axes] model_args.hiden: model gpt2 has no argument 'hiden' (did you mean 'hidden'",
        ),
        (
            {"gpus": 8},
            {"model": ["gpt2", "resnet50"]},
            {"model_args.hidden": [512, 1024]},
            "[zip] model_args.hidden: model resnet50 has no argument 'hidden'",
        ),
        (
            {"gpus": 8, "model_args": {"hiden": 512}},
            None,
            None,
            "[base.model_args]: model gpt2 has no argument 'hiden'",
        ),
        ({}, {"gpus.x": [4, 8]}, None, "[axes] gpus.x: 'gpus' holds one value, not a table"),
        (
            {"gpus": 8},
            {"software_options.tp_comm_overlp": [True, False]},
            None,
            "[axes] software_options.tp_comm_overlp: unknown option 'tp_comm_overlp'",
        ),
        (
            {"gpus": 8},
            {"nccl_env.ALGO": ["Ring"]},
            None,
            "[axes] nccl_env.ALGO: 'ALGO' is no NCCL variable",
        ),
        ({"gpus": 8}, {"plan.tq": [1, 2]}, None, "[axes] plan.tq: unknown key 'tq'"),
        (
            {"gpus": 8, "plan": "tp=2"},
            {"plan.pp": [1, 2]},
            None,
            "[axes] plan.pp: [base] plan = 'tp=2' is not a table, so the axis would replace it",
        ),
        (
            {"model_args.hidden": 512},
            None,
            None,
            "[base]: unknown key 'model_args.hidden' (did you mean 'model_args'?): [base] takes "
            "no dotted key",
        ),
    ],
)
def test_a_sub_key_no_row_takes_is_refused_before_any_work(
    tmp_path: Path,
    base: dict,
    axes: dict | None,
    zipped: dict | None,
    words: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dotted key's sub-key is checked against what its table takes: a ``model_args``
    name against every model of the grid, with the model builder's words (rev29 item 1:
    every row failed, "2 errors", exit 0)."""
    assert main(_sweep(tmp_path, base, axes, zipped)) == 2
    assert "grid.json: " + words in capsys.readouterr().err
    assert not (tmp_path / "rows.jsonl").exists()


@pytest.mark.parametrize("gpus, code", [([3, 6], 2), ([3, 4], 0)])
def test_a_sweep_whose_every_row_is_an_error_fails(
    tmp_path: Path, gpus: list[int], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every row an error (64 sequences split over neither 3 nor 6 replicas) is exit 2 with
    the rows written; one row that ran keeps the sweep's exit 0 (docs/sweep.md)."""
    assert main(_sweep(tmp_path, {}, {"gpus": gpus})) == code
    rows = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and ("ok" in [r["status"] for r in rows]) == (code == 0)
    err = capsys.readouterr().err
    assert ("every scenario of the sweep is an error row" in err) == (code == 2)
