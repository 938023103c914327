"""Flags declared as ``(flag, kind, help)`` rows (``perfmodel.cli._common.add_typed_args``):
each row's values are parsed by its kind called with the row's own flag, so a bad value's error
names that flag (and every typed flag of the CLI, :func:`add_typed_arg`, names its own); the
token-budget rows are the flags ``run_options`` refuses without
``--tokens``; a command group alone prints its help on stderr, exit 2."""

import argparse

import pytest

from perfmodel.cli import _types as ty
from perfmodel.cli import build_parser, main
from perfmodel.cli._common import add_command_group, add_typed_arg, add_typed_args, flag_dest
from perfmodel.cli.compare import STATISTICAL_EFFICIENCY_FLAGS
from perfmodel.cli.predict import RUN_FLAGS, run_options
from perfmodel.errors import ConfigError, FlagError

ROWS = [("predict", row) for row in RUN_FLAGS] + [
    ("compare", row) for row in STATISTICAL_EFFICIENCY_FLAGS
]


@pytest.mark.parametrize(("command", "row"), ROWS, ids=[r[0] for _, r in ROWS])
def test_a_bad_value_names_its_flag(command, row):
    flag = row[0]
    with pytest.raises(FlagError) as err:
        build_parser(command).parse_known_args([command, flag, "-1"])
    assert err.value.where == flag
    assert str(err.value).startswith(f"{flag} '-1': expected")


@pytest.mark.parametrize(("command", "row"), ROWS, ids=[r[0] for _, r in ROWS])
def test_a_good_value_lands_under_the_flags_name(command, row):
    args, _ = build_parser(command).parse_known_args([command, row[0], "2.5"])
    assert getattr(args, flag_dest(row[0])) == 2.5


@pytest.mark.parametrize("flag", [r[0] for r in RUN_FLAGS])
def test_every_token_budget_flag_needs_tokens(flag):
    args, _ = build_parser("predict").parse_known_args(["predict", flag, "3"])
    with pytest.raises(ConfigError, match=f"^{flag} needs --tokens") as err:
        run_options(args)
    assert err.value.where == flag


def _typed_actions(parser, path=()):
    """``(command path, action)`` of every flag of ``parser`` and its subcommands whose values a
    :mod:`perfmodel.cli._types` factory parses."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _typed_actions(sub, (*path, name))
        elif action.option_strings and getattr(action.type, "__module__", "") == ty.__name__:
            yield path, action


def test_every_typed_flag_of_the_cli_names_itself():
    named = 0
    for path, action in _typed_actions(build_parser()):
        try:
            action.type("-1x")  # a file name to the output-path kinds, bad to every other
        except FlagError as err:
            assert err.where in action.option_strings, (path, action.option_strings, err.where)
            named += 1
    assert named >= 60  # predict, compare, sweep, model, topo, comm, calibrate... (69 today)


def test_add_typed_arg_passes_argparses_options():
    p = argparse.ArgumentParser()
    action = add_typed_arg(p, "--top", ty.positive_int, default=10, metavar="N", help="h")
    assert (action.default, action.metavar, action.help) == (10, "N", "h")
    assert p.parse_args(["--top", "3"]).top == 3
    with pytest.raises(FlagError) as err:
        p.parse_args(["--top", "0"])
    assert err.value.where == "--top"


def test_flag_dest_is_argparses():
    p = argparse.ArgumentParser()
    add_typed_args(
        p, [("--storage-write-GBps", ty.positive_float, "x"), ("--restart-s", ty.nonneg_float, "y")]
    )
    assert {a.dest for a in p._actions} - {"help"} == {
        flag_dest("--storage-write-GBps"),
        flag_dest("--restart-s"),
    }


def test_a_command_group_alone_prints_its_help(capsys):
    assert main(["topo"]) == 2
    assert main(["hw"]) == 2
    err = capsys.readouterr().err
    assert "usage: perfmodel topo" in err and "usage: perfmodel hw" in err

    sub = argparse.ArgumentParser(prog="x").add_subparsers()
    group = add_command_group(sub, "g", help="h", description="d", commands=("a", "b"))
    assert group.dest == "g_command" and group.metavar == "{a,b}"
