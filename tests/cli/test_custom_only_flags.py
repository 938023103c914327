"""user21 item 1 on the command line: ``--intra-node`` / ``--gpus-per-node``, a scenario
file's ``intra_node`` / ``gpus_per_node`` and a ``--systems`` entry's ``:intra_node=...`` on a
system other than ``custom`` exit 2 naming the flag, key or entry, its value and where it came
from, and write nothing (each exited 0 before the fix, the keys ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.cli_helpers import refused

PRED = ["predict", "--model", "resnet50", "--batch-per-gpu", "8", "--fidelity", "analytic"]
WHATIF = ["compare", "--model", "resnet50", "--batch-per-gpu", "8", "--gpus", "1"]


def test_predict_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    err = refused(
        capsys, [*PRED, "--system", "dgx-a100", "--intra-node", "pcie4", "--trace", str(trace)]
    )
    assert "--intra-node pcie4 describes only a custom system" in err
    assert "--system custom --gpu A100-SXM4-80GB --gpus-per-node 8 --intra-node pcie4" in err
    assert "--system pcie-8x-server --gpu A100-PCIE-80GB" in err
    assert not trace.exists()


def test_predict_bad_link_value(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(
        capsys, [*PRED, "--system", "dgx-a100", "--intra-node", "pcie9", "--gpus-per-node", "3"]
    )
    assert "--intra-node pcie9: not an intra-node link" in err and "pcie4" in err


def test_scenario_file_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('system = "dgx-a100"\nmodel = "resnet50"\nbatch_per_gpu = 8\ngpus_per_node = 4\n')
    err = refused(capsys, ["predict", str(f)])
    assert f"{f}: gpus_per_node = 4 describes only a custom system" in err
    assert "system = 'custom', gpu = 'A100-SXM4-80GB', gpus_per_node = 4" in err


def test_compare_systems_entry_and_flag(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, [*WHATIF, "--systems", "dgx-a100,dgx-a100:intra_node=pcie4"])
    assert "--systems entry 'dgx-a100:intra_node=pcie4': intra_node=pcie4 describes" in err
    # a flag applies to every entry: refused on the catalogue one, named as the flag
    err = refused(
        capsys,
        [
            *WHATIF,
            "--systems",
            "custom:gpu=T4:gpus_per_node=2:intra_node=pcie3,dgx-a100",
            "--gpus-per-node",
            "2",
        ],
    )
    # rev27b item 3: it says the flag applies to every entry and suggests the entry's key
    # (it gave predict's "--system custom --gpu ..." wording; failed before)
    assert "--gpus-per-node 2 applies to every --systems entry, and entry 'dgx-a100'" in err
    assert "on the custom entry alone, as its key: custom:gpu=T4:gpus_per_node=2:" in err
    assert "--system custom" not in err
    err = refused(capsys, [*WHATIF, "--systems", "custom:gpu=T4,dgx-a100", "--gpus-per-node", "4"])
    assert "as its key: custom:gpu=T4:gpus_per_node=4" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "--system", "dgx-a100", "--gpus-per-node", "4", "--model", "resnet50"],
        ["topo", "show", "--system", "dgx-a100", "--gpus-per-node", "4"],
        ["comm", "--system", "dgx-a100", "--intra-node", "pcie4", "--op", "allreduce"],
    ],
)
def test_other_commands_with_system_flags(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, argv)
    assert "describes only a custom system" in err and "'dgx-a100'" in err
