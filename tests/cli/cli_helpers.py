"""Helpers the CLI tests share (one home, session 14's read: each file defined its own):
run ``perfmodel`` in-process and read what it wrote."""

from __future__ import annotations

import json
from typing import Any

import pytest

from perfmodel.cli import main

#: A small job every command accepts: gpt2, global batch 64, on 8 GPUs.
JOB = ["--model", "gpt2", "--global-batch", "64", "--gpus", "8"]


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The error text of a command that must refuse (exit status 2, nothing on stdout)."""
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 2, out.out + out.err
    assert out.out == ""
    return out.err


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit status (argparse's own usage errors exit through ``SystemExit``) and stderr of
    a command, which never shows a traceback whatever the input."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse: a bad choice, a flag without its value ("--top --")
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    """What a command that must succeed (exit status 0) wrote on stdout, read as JSON (the
    command line gives its own ``--json``)."""
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)
