"""``perfmodel`` as a program freezes what is left before the interpreter exits (its shutdown
collections skip frozen objects); :func:`perfmodel.cli.main`, called in a process that goes on
(tests, notebooks, wrappers), does not, with or without an argument list."""

from __future__ import annotations

import gc
import sys

import pytest

from perfmodel.cli import main, program

ARGV = ["hw", "gpus"]


def test_called_with_arguments_leaves_the_collector_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = gc.get_freeze_count()
    assert main(ARGV) == 0
    assert gc.get_freeze_count() == before
    assert "A100" in capsys.readouterr().out


def test_main_on_this_process_command_line_leaves_the_collector_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["perfmodel", *ARGV])
    before = gc.get_freeze_count()
    assert main() == 0
    assert gc.get_freeze_count() == before
    assert "A100" in capsys.readouterr().out


def test_run_as_the_program_freezes_before_exit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["perfmodel", *ARGV])
    before = gc.get_freeze_count()
    try:
        assert program() == 0
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()  # this test process goes on
    assert "A100" in capsys.readouterr().out
