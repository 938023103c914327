"""Issue 14, item 4: every long-running command shows the progress line on a terminal's stderr,
erases it before returning, keeps stdout clean, and is silent with ``--quiet``.

The line appears after ``DELAY_S`` (2 s); here it is shown at once (``progress_line`` with
``delay_s=0``) and each command waits until it has been drawn, so nothing depends on timing.
``validate`` (about a minute over the published rows) runs a stand-in body: what is tested is
that ``perfmodel.cli.main`` wraps it like the others. ``sweep`` draws its own counter
(``perfmodel.search.sweep``), tested through the CLI too.
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path

import pytest
from fake_tty import FakeTty

from perfmodel.cli import _progress, main

MLP = ["--system", "dgx1-v100", "--model", "mlp", "--batch-per-gpu", "8", "--fidelity", "analytic"]
COMMANDS = {
    "predict": ["predict", *MLP, "--gpus", "1"],
    "curve": ["predict", *MLP, "--gpus", "1,2"],
    "compare": ["compare", *MLP[:-2], "--gpus", "2"],
    "comm": ["comm", "--system", "dgx1-v100", "--op", "allreduce", "--sizes", "1M:2M"],
    "validate": ["validate"],
}


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> tuple[str, FakeTty, int]:
    tty = FakeTty()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(
        _progress, "progress_line", functools.partial(_progress.progress_line, delay_s=0.0)
    )
    command = next(a for a in argv if not a.startswith("-"))
    module = importlib.import_module(f"perfmodel.cli.{command}")
    real = module.run
    quiet = "--quiet" in argv

    def body(args):  # the command's run(args)
        if not quiet:
            assert tty.wrote.wait(30)  # the line is up before the command's work starts
        return 0 if command == "validate" else real(args)

    monkeypatch.setattr(module, "run", body)
    rc = main(argv)
    return capsys.readouterr().out, tty, rc


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_progress_line_on_a_terminal_then_erased(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, tty, rc = _run(monkeypatch, capsys, COMMANDS[name])
    assert rc == 0
    text = tty.getvalue()
    label = f"perfmodel {COMMANDS[name][0]}" + (
        " (analytic)" if name in ("predict", "curve") else ""
    )
    assert text.startswith(f"\r{label}: working, 0 s")
    drawn = text.split("\r")[1]
    assert text.endswith("\r" + " " * len(drawn) + "\r")  # erased: the terminal line is clean
    assert "\r" not in out and "working" not in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_quiet_after_the_command_silences_it(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, tty, rc = _run(monkeypatch, capsys, [*COMMANDS[name], "--quiet"])
    assert rc == 0 and tty.getvalue() == ""


def test_sweep_counts_on_a_terminal_and_is_silent_with_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "grid.toml"
    spec.write_text(
        '[base]\nsystem = "dgx1-v100"\nmodel = "mlp"\nbatch_per_gpu = 8\nfidelity = "analytic"\n'
        "[axes]\ngpus = [1, 2]\n"
    )
    for quiet in (False, True):
        tty = FakeTty()
        monkeypatch.setattr(sys, "stderr", tty)
        argv = ["sweep", str(spec), "-o", str(tmp_path / f"{quiet}.jsonl"), "--backend", "serial"]
        assert main([*argv, "--quiet"] if quiet else argv) == 0
        out = capsys.readouterr().out
        assert "2 of 2 scenarios done" in out and "\r" not in out
        if quiet:
            assert tty.getvalue() == ""
        else:  # redrawn in place (\r), the final count on its own line
            text = tty.getvalue()
            assert text.startswith("\rsweep: 1/2 done") and text.endswith("\n")
            assert "\rsweep: 2/2 done (0 errors this run)" in text
