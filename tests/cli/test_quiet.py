"""``perfmodel --quiet COMMAND`` and ``perfmodel COMMAND --quiet`` both silence the progress."""

from __future__ import annotations

import pytest

from perfmodel.cli import build_parser

COMMANDS = {
    "sweep": ["sweep", "spec.toml", "-o", "out.jsonl"],
    "predict": ["predict", "--model", "gpt2"],
    "compare": ["compare", "--model", "gpt2"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_quiet_before_or_after_the_command(name: str) -> None:
    argv = COMMANDS[name]
    p = build_parser()
    assert p.parse_args(["--quiet", *argv]).quiet is True
    assert p.parse_args([*argv, "--quiet"]).quiet is True
    assert p.parse_args(argv).quiet is False
