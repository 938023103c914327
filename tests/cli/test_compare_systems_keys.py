"""``perfmodel compare --systems``: an entry's key no scenario takes refuses the whole command
before any work (user24): exit 2, naming the entry and the key with a did-you-mean from the keys
an entry accepts (:func:`perfmodel.scenario.check_keys`, the scenario files' check), nothing
written. Before, ``--systems "dgx-h100:precison=bf16,dgx-a100"`` failed that entry's rows only,
printed the other's and exited 0; ``dgx-a100:system=dgx-h100`` was ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.cli_helpers import refused

TYPO = "dgx-h100:precison=bf16"
WHATIF = ["compare", "--model", "resnet50", "--batch-per-gpu", "32", "--gpus", "8"]
SEARCH = ["compare", "--model", "gpt2", "--global-batch", "64", "--gpus", "8", "--search"]


def _accepted(err: str) -> list[str]:
    """The accepted keys the error lists."""
    return err.rsplit("accepted keys: ", 1)[1].strip().split(", ")


@pytest.mark.parametrize(
    "argv",
    [WHATIF, [*WHATIF, "--json"], [*WHATIF, "--nodes", "1"], SEARCH],
    ids=["what-if", "json", "nodes", "search"],
)
def test_a_typo_in_one_entry_refuses_the_command(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plot = tmp_path / "whatif.png"
    extra = ["--plot", str(plot)] if argv is WHATIF else []
    err = refused(capsys, [*argv, *extra, "--systems", f"{TYPO},dgx-a100"])
    assert f"--systems entry {TYPO!r}: unknown key 'precison'" in err
    assert "(did you mean 'precision'?)" in err
    assert "precision" in _accepted(err)
    assert not plot.exists()


def test_the_accepted_keys_are_an_entrys(capsys: pytest.CaptureFixture[str]) -> None:
    """The keys the what-if sets itself are neither suggested nor listed; ``system`` (the
    entry's name) is refused saying why."""
    err = refused(capsys, [*WHATIF, "--systems", "dgx-h100,dgx-a100:node=2"])
    assert "unknown key 'node'" in err and "did you mean 'nodes'" not in err
    assert not {"system", "nodes", "gpus"} & set(_accepted(err))
    err = refused(capsys, [*WHATIF, "--systems", "dgx-h100,dgx-a100:system=dgx-h100"])
    assert "--systems entry 'dgx-a100:system=dgx-h100': unknown key 'system': an entry's " in err
