"""Every enum read from text parses through :class:`perfmodel._enum.ParsedEnum` (issue 29): its own
values and members come back as members, and an unknown value raises the rule's typed error
naming the value, where it came from and the choices."""

from __future__ import annotations

import importlib

import pytest

from perfmodel._enum import ParsedEnum, choices
from perfmodel.errors import PerfModelError

#: the modules that define the parsed enums (imported so that ``__subclasses__`` sees them all)
MODULES = (
    "perfmodel.calibration.measurement", "perfmodel.calibration.profile",
    "perfmodel.dtypes", "perfmodel.ops", "perfmodel.comm.params", "perfmodel.compute.attention",
    "perfmodel.compute.grouped", "perfmodel.hardware.gpus", "perfmodel.intervals.features",
    "perfmodel.parallel.plan", "perfmodel.parallel.stack_choices", "perfmodel.search.compare",
    "perfmodel.search.sweep_workers", "perfmodel.topology.custom", "perfmodel.topology.schema",
    "perfmodel.workload.kernels", "perfmodel.workload.memory", "perfmodel.workload.window",
)  # fmt: skip
for _name in MODULES:
    importlib.import_module(_name)
ENUMS = sorted(ParsedEnum.__subclasses__(), key=lambda c: c.__qualname__)


def test_every_module_enum_is_found():
    assert len(ENUMS) >= 27


@pytest.mark.parametrize("cls", ENUMS, ids=lambda c: c.__qualname__)
def test_values_and_members_parse_to_members(cls):
    for member in cls:
        assert cls.parse(member.value, where="test") is member
        assert cls.parse(member, where="test") is member


@pytest.mark.parametrize("cls", ENUMS, ids=lambda c: c.__qualname__)
def test_unknown_value_raises_the_rule_error_naming_value_where_and_choices(cls):
    rule = cls._parse_rule
    with pytest.raises(rule.error) as info:
        cls.parse("no-such-value", where="test.key")
    err = info.value
    assert isinstance(err, PerfModelError)
    assert err.value == "no-such-value" and err.where == "test.key"
    assert "'no-such-value'" in str(err)
    assert (rule.expected or choices(cls)) in str(err)


@pytest.mark.parametrize(
    "cls", [c for c in ENUMS if c._parse_rule.unset is not None], ids=lambda c: c.__qualname__
)
def test_none_is_the_unset_member(cls):
    assert cls.parse(None) is cls(cls._parse_rule.unset)


def test_intra_node_member_and_padded_text():
    from perfmodel.topology.custom import IntraNode

    assert IntraNode.parse(IntraNode.NVLINK3) is IntraNode.NVLINK3  # was "IntraNode.NVLINK3"
    assert IntraNode.parse(" nvlink3 ") is IntraNode.NVLINK3


def test_where_defaults_to_the_rule():
    from perfmodel.dtypes import Precision
    from perfmodel.topology.schema import NodeKind

    with pytest.raises(PerfModelError) as info:
        Precision.parse("fp12")
    assert info.value.where == "--precision"
    with pytest.raises(TypeError, match="needs where="):
        NodeKind.parse("gpu")  # its rule names no default: every caller says which node
