"""audit15 item 16 in ``perfmodel predict``: a curve's ranges in the unit of its iteration-time
column, the micro-batch fallback of a batch with few divisors said loudly, and errors of a
scenario file naming the file."""

from __future__ import annotations

import re

import pytest

from perfmodel.cli import main
from perfmodel.pipeline.autobatch import coarse_split_warning

GPT2 = ["--system", "dgx-h100", "--model", "gpt2", "--optimizer", "adamw",
        "--fidelity", "analytic"]  # fmt: skip


def test_curve_range_cells_are_in_milliseconds_like_the_row(capsys) -> None:
    assert main(["predict", *GPT2, "--global-batch", "64", "--gpus", "1,8"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if re.match(r"\s+[18] dp=", ln)]
    assert len(rows) == 2
    for row in rows:
        assert re.search(r"\d+\.\d\dms +\d+\.\d\d-\d+\.\d\dms ", row), row
        assert " s-" not in row


def test_a_coarse_micro_batch_split_is_a_warning(capsys) -> None:
    assert main(["predict", *GPT2, "--batch-per-gpu", "53"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("WARNING: micro-batch 1 only: 53 samples per replica split into")
    assert "runs 53 micro-batches of 1" in lines[2]
    assert main(["predict", *GPT2, "--batch-per-gpu", "52"]) == 0
    assert "WARNING" not in capsys.readouterr().out
    assert coarse_split_warning(48, 1, 24) == ""  # 24 -> 48: no gap
    assert coarse_split_warning(53, 1, 53) == ""  # the whole batch: nothing left out


SCENARIO = 'system = "dgx-h100"\nmodel = "gpt2"\nglobal_batch = 64\n'


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ('plan = "dp=4"\n', "dp*tp*pp = 4*1*1 = 4 but 8 GPUs"),
        ("model_args = { seq_len = 4096 }\n", "seq_len=4096 exceeds max_positions=1024"),
        ("nodes = 0\n", "nodes must be a positive integer"),
    ],
)
def test_a_scenario_files_error_names_the_file(tmp_path, capsys, extra, said) -> None:
    path = tmp_path / "job.toml"
    path.write_text(SCENARIO + extra)
    assert main(["predict", str(path), "--fidelity", "analytic"]) == 2
    err = capsys.readouterr().err
    assert said in err and f"{path}: " in err, err


def test_an_error_of_a_flag_stays_the_flags(tmp_path, capsys) -> None:
    path = tmp_path / "job.toml"
    path.write_text(SCENARIO)
    assert main(["predict", str(path), "--plan", "dp=3", "--fidelity", "analytic"]) == 2
    assert str(path) not in capsys.readouterr().err
