"""The choice flags several commands share take one list each (``perfmodel.cli._common``),
and each list is its enum's values in the enum's order: a value added to the model is offered by
every command, and none is offered that the model would refuse."""

import argparse

import pytest

from perfmodel.cli import _common as c
from perfmodel.cli import build_parser
from perfmodel.dtypes import Precision
from perfmodel.scenario_parse import Fidelity
from perfmodel.workload.kernels import Fp8Recipe
from perfmodel.workload.memory import Optimizer, Recompute


@pytest.mark.parametrize(
    ("values", "enum"),
    [
        (c.PRECISIONS, Precision),
        (c.FP8_RECIPES, Fp8Recipe),
        (c.OPTIMIZERS, Optimizer),
        (c.RECOMPUTE, Recompute),
        (c.FIDELITIES, Fidelity),
    ],
)
def test_a_choice_list_is_its_enums_values(values, enum):
    assert values == tuple(e.value for e in enum)


def _actions(parser):
    """Every action of ``parser`` and of its subcommands' parsers."""
    for a in parser._actions:
        yield a
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _actions(sub)


@pytest.mark.parametrize(
    ("command", "flag", "values"),
    [
        ("predict", "--precision", c.PRECISIONS),
        ("compare", "--precision", c.PRECISIONS),
        ("predict", "--fp8-recipe", c.FP8_RECIPES),
        ("model", "--fp8-recipe", c.FP8_RECIPES),
        ("predict", "--optimizer", c.OPTIMIZERS),
        ("compare", "--optimizer", c.OPTIMIZERS),
        ("predict", "--recompute", c.RECOMPUTE),
        ("predict", "--fidelity", c.FIDELITIES),
        ("compare", "--fidelity", c.FIDELITIES),
        ("sweep", "--fidelity", c.FIDELITIES),
    ],
)
def test_every_command_offers_the_list(command, flag, values):
    found = [a for a in _actions(build_parser(command)) if flag in a.option_strings]
    assert found and all(tuple(a.choices) == values for a in found)
