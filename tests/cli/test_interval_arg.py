"""``--interval`` is one flag (``perfmodel.cli._common.add_interval_arg``) in every command that
has it: the same default as the interval machinery, the same parsing of levels and ``off``."""

import pytest

from perfmodel.cli import build_parser
from perfmodel.cli._common import INTERVAL_LEVEL
from perfmodel.errors import FlagError
from perfmodel.intervals.conformal import DEFAULT_LEVEL

#: A minimal argument list of each command with ``--interval`` (the rest is not parsed here).
COMMANDS = {
    "predict": ["predict"],
    "comm": ["comm"],
    "compare": ["compare"],
    "sweep": ["sweep", "grid.toml", "-o", "out.jsonl"],
}


def test_cli_default_is_the_interval_machinery_default():
    assert INTERVAL_LEVEL == DEFAULT_LEVEL


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("text", "level"), [(None, DEFAULT_LEVEL), ("off", None), ("90%", 0.9), ("0.5", 0.5)]
)
def test_every_command_parses_interval_alike(command, text, level):
    argv = COMMANDS[command] + ([] if text is None else ["--interval", text])
    args, _ = build_parser(command).parse_known_args(argv)
    if level is None:
        assert args.interval is None
    else:
        assert args.interval == pytest.approx(level)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_level_of_one(command):
    with pytest.raises(FlagError, match="--interval"):
        build_parser(command).parse_known_args(COMMANDS[command] + ["--interval", "1"])
