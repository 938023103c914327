"""A command that finds nothing to show ends with one ``perfmodel: error: ...`` line on stderr
and exit status 2 (``perfmodel.cli.error_exit``), as bad input does."""

from perfmodel.cli import error_exit, main

#: GPT-3 175B on one DGX-1 (8 x 16 GiB): the model state alone needs 82 such GPUs.
TOO_BIG = ["--model", "gpt", "--model-arg", "layers=96", "hidden=12288", "heads=96"]
SEARCH = ["--global-batch", "8", "--tp", "1", "--pp", "1", "--budget", "0", "--quiet"]


def test_error_exit_prints_one_line_and_returns_2(capsys):
    assert error_exit("no plan") == 2
    assert capsys.readouterr() == ("", "perfmodel: error: no plan\n")


def test_compare_without_a_feasible_plan(capsys):
    assert main(["compare", "--system", "dgx1-v100", *TOO_BIG, *SEARCH]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        "perfmodel: error: no feasible plan among 6 enumerated (pruned: 6 does not fit in memory)"
    )


def test_compare_systems_without_a_feasible_plan(capsys):
    argv = ["compare", "--systems", "dgx1-v100,dgx-a100", "--gpus", "8", "--search"]
    assert main([*argv, *TOO_BIG, *SEARCH]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "perfmodel: error: no system has a feasible plan"
    )


def test_hw_show_of_an_unknown_name(capsys):
    assert main(["hw", "show", "no-such-gpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfmodel: error: unknown hardware name 'no-such-gpu'")
    assert err.count("\n") == 1
