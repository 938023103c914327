"""mend31: a ``--nodes`` given (``--nodes 1`` too) wins over a scenario file's or an
nccl-tests log's node count in every command that takes it; no ``--nodes`` keeps the file's,
the log's or one server. Each test marked "failed before" failed when the shared flag's
default was 1 (``--nodes 1`` read as "not given")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main
from tests.cli.cli_helpers import cli_json, refused

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "a3mega-h100-2node-all_reduce.txt"


def test_comm_compare_nodes_1_given_wins_over_the_logs_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The log ran 16 ranks on 2 servers; ``--nodes 1`` is one 8-GPU server, so the 16 ranks
    are refused (failed before: the log's 2 servers replaced the flag's 1)."""
    err = refused(capsys, ["comm", "--compare", str(LOG), "--nodes", "1", "--json"])
    assert "--gpus 16: system dgx-h100 has 8 GPUs" in err, err


@pytest.mark.parametrize(("flag", "system"), [([], "dgx-h100x2"), (["--nodes", "2"], "dgx-h100x2")])
def test_comm_compare_without_nodes_takes_the_logs(
    capsys: pytest.CaptureFixture[str], flag: list[str], system: str
) -> None:
    assert main(["comm", "--compare", str(LOG), *flag, "--json"]) == 3  # degraded, as before
    assert json.loads(capsys.readouterr().out)["system"] == system


def test_predict_names_a_given_nodes_1_as_its_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A file's ``gpus = 12`` and ``nodes = 2`` with ``--nodes 1``: the refusal names
    ``--nodes 1`` as the flag the user gave (failed before: "with nodes=1 ... use nodes=2", as
    if the file had said 1)."""
    f = tmp_path / "run.toml"
    f.write_text(
        'system = "dgx-a100"\nmodel = "resnet50"\nbatch_per_gpu = 8\ngpus = 12\nnodes = 2\n'
    )
    err = refused(capsys, ["predict", str(f), "--nodes", "1"])
    assert f"{f}: gpus=12 but system dgx-a100 with --nodes 1 has 8 GPUs" in err, err
    assert "use --nodes 2, or at most gpus=8" in err, err


def test_topo_without_nodes_is_one_server(capsys: pytest.CaptureFixture[str]) -> None:
    """No ``--nodes`` is one server, as the old default 1 was."""
    one = cli_json(capsys, ["topo", "show", "dgx-a100", "--json"])
    given = cli_json(capsys, ["topo", "show", "dgx-a100", "--nodes", "1", "--json"])
    assert one == given and one["summary"]["num_nodes"] == 1
