"""Module constants bound to enum members on hot paths (docs/design.md "Session 26 (speed41a)").

On CPython 3.11 ``EnumType`` defines ``__getattr__``, so each read of ``Enum.MEMBER`` through
its class costs ~1,000 instructions (a module global ~30). The hot modules bind the members
they read once as module constants, named ``PREFIX + MEMBER`` (the same name for the same
member in every module). These tests check that every such constant is its member (a renamed
or mistyped binding fails here, not silently in a prediction), that no function of a hot module
reads a member through its class where the module binds that member (read statically: every
path, Hopper's NCCL table and the CNN paths included), and that a GPT-3 plan's prediction reads
none at run time.
"""

from __future__ import annotations

import ast
import enum
import importlib
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

#: the modules whose hot functions read enum members as module constants
HOT_MODULES = (
    "perfmodel.comm.analytic",
    "perfmodel.comm.group_memo",
    "perfmodel.comm.nccl_choice",
    "perfmodel.comm.p2p_read",
    "perfmodel.compute.model",
    "perfmodel.dtypes",
    "perfmodel.ops",
    "perfmodel.parallel.host_lead",
    "perfmodel.parallel.lower_hidden",
    "perfmodel.parallel.lower_pipeline",
    "perfmodel.parallel.lowering",
    "perfmodel.parallel.segment_comm",
    "perfmodel.parallel.stack_choices",
)

#: each enum class's constant-name prefix (collective operations go bare: ``ALLREDUCE``)
PREFIX = {
    "CollectiveOp": "",
    "Algorithm": "ALGO_",
    "Protocol": "PROTO_",
    "Bound": "BOUND_",
    "CommKind": "COMM_",
    "DType": "DTYPE_",
    "Precision": "PRECISION_",
    "ExpertRole": "ROLE_",
    "HwClass": "HW_",
    "LayerKind": "LAYER_",
    "MoEDispatcher": "DISPATCHER_",
    "Optimizer": "OPTIMIZER_",
    "Recompute": "RECOMPUTE_",
    "TaskKind": "TASK_",
    "CrossEntropy": "CROSS_ENTROPY_",
}


#: the modules that define the constants beside their enums (the hot modules import them)
DEFINING = (
    "perfmodel.comm.params",
    "perfmodel.compute.layer_time",
    "perfmodel.parallel.plan",
    "perfmodel.parallel.taskgraph",
    "perfmodel.workload.layers",
    "perfmodel.workload.memory",
)


def _constants(module: ModuleType) -> dict[str, enum.Enum]:
    """The module's upper-case globals that hold an enum member (enum classes' own members
    are class attributes, not module globals)."""
    return {
        name: value
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, enum.Enum)
    }


@pytest.mark.parametrize("name", HOT_MODULES + DEFINING)
def test_each_constant_is_its_member(name: str) -> None:
    """Every upper-case enum-member global is ``PREFIX + MEMBER`` of its class, that member
    (a class outside :data:`PREFIX` fails too: its constants would be checked by nothing)."""
    module = importlib.import_module(name)
    constants = _constants(module)
    assert constants, f"{name} binds no enum member"
    for const, value in constants.items():
        cls = type(value)
        assert cls.__name__ in PREFIX, f"{name}.{const}: {cls.__name__} has no prefix"
        prefix = PREFIX[cls.__name__]
        assert const.startswith(prefix), f"{name}.{const} holds {value!r}"
        member = const[len(prefix) :]
        assert value is cls.__members__.get(member), f"{name}.{const} holds {value!r}"


def test_hot_modules_read_their_bound_members_as_constants() -> None:
    """A GPT-3 175B Megatron-Core plan's prediction: no module of :data:`HOT_MODULES` reads,
    through its class, a member it binds as a constant (a read put back on a hot path fails)."""
    from perfmodel.api import Scenario, predict

    files = {}
    for name in HOT_MODULES:
        module = importlib.import_module(name)
        bound = {(type(v).__name__, v.name) for v in _constants(module).values()}
        files[module.__file__] = (name, bound)
    reads: Counter[tuple[str, str, str]] = Counter()
    get = type.__getattribute__

    def counting(cls: type, attr: str) -> object:
        code = sys._getframe(1).f_code
        hit = files.get(code.co_filename)
        if hit is not None and (get(cls, "__name__"), attr) in hit[1]:
            reads[(hit[0], code.co_name, f"{get(cls, '__name__')}.{attr}")] += 1
        return get(cls, attr)

    sc = Scenario.from_dict(
        {
            "system": "dgx-a100",
            "nodes": 128,
            "model": "gpt",
            "model_args": {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048},
            "precision": "fp16",
            "optimizer": "adam",
            "software": "megatron-core",
            "fidelity": "analytic",
            "gpus": 1024,
            "global_batch": 1536,
            "tp": 8,
            "pp": 4,
            "microbatch": 1,
        }
    )
    enum.EnumType.__getattribute__ = counting  # type: ignore[method-assign]
    try:
        predict(sc, baseline=False)
    finally:
        del enum.EnumType.__getattribute__
    assert not reads, sorted(reads.items())


@pytest.mark.parametrize("name", HOT_MODULES)
def test_no_function_reads_a_bound_member_through_its_class(name: str) -> None:
    """Static, every function of the module (final26: the run-time test sees one A100 plan's
    paths; Hopper's NCCL table ``_table_229`` and the CNN paths read members too)."""
    module = importlib.import_module(name)
    bound = {(type(v).__name__, v.name) for v in _constants(module).values()}
    found = []
    for fn in ast.walk(ast.parse(Path(str(module.__file__)).read_text())):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and (node.value.id, node.attr) in bound
                ):
                    found.append(f"{node.lineno} {fn.name} {node.value.id}.{node.attr}")
    assert not found, found
