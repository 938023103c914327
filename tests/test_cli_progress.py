"""The progress line: written only to a terminal, only when enabled, erased on exit."""

from __future__ import annotations

import io

from fake_tty import FakeTty

from perfmodel.cli import main
from perfmodel.cli._progress import DELAY_S, progress_line


def test_line_shown_on_a_terminal_then_erased() -> None:
    tty = FakeTty()
    with progress_line("perfmodel predict: working", tty, delay_s=0.0, interval_s=60.0):
        assert tty.wrote.wait(30)  # the body outlives the delay (no timing asserted)
    text = tty.getvalue()
    assert text.startswith("\rperfmodel predict: working, ")
    width = len(text.split("\r")[1])
    assert text.endswith("\r" + " " * width + "\r")


def test_nothing_when_quiet_or_not_a_terminal() -> None:
    tty = FakeTty()
    with progress_line("x", tty, enabled=False, delay_s=0.0):
        assert not tty.wrote.wait(0.2)
    pipe = io.StringIO()
    with progress_line("x", pipe, delay_s=0.0):
        pass
    assert pipe.getvalue() == "" and tty.getvalue() == ""


def test_delay_is_two_seconds() -> None:
    assert DELAY_S == 2.0  # issue 14: commands longer than about 2 s


def test_quiet_flag_parses_before_and_after_the_command(capsys) -> None:
    argv = ["predict", "--system", "dgx1-v100", "--model", "mlp", "--batch-per-gpu", "8"]
    argv += ["--fidelity", "analytic", "--gpus", "1"]
    assert main(["--quiet", *argv]) == 0
    assert main([*argv, "--quiet"]) == 0
    assert "[analytic]" in capsys.readouterr().out
