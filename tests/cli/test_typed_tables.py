"""Flags declared as ``(flag, kind, help)`` rows (``perfmodel.cli._common.add_typed_args``):
each row's values are parsed by its kind called with the row's own flag, so a bad value's error
names that flag; the token-budget rows are the flags ``run_options`` refuses without
``--tokens``; a command group alone prints its help on stderr, exit 2."""

import argparse

import pytest

from perfmodel.cli import _types as ty
from perfmodel.cli import build_parser, main
from perfmodel.cli._common import add_command_group, add_typed_args, flag_dest
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
