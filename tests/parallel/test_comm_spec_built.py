"""``CommSpec.built`` (issue 27, session 24): the data-parallel specs' constructor without the
frozen ``__init__``'s seven ``__setattr__`` calls must leave the spec ``__init__`` leaves: the
same dictionary (keys in the same order, the same value objects), equal, hashed, printed and
pickled alike; and a lowering with the switch ``taskgraph.FAST_SPECS`` on and off has the same
tasks with the same specs."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import pytest
from report_compare import gpt_scenario

from perfmodel.api import resolve
from perfmodel.ops import CollectiveOp
from perfmodel.parallel import taskgraph
from perfmodel.parallel.taskgraph import CommKind, CommSpec
from perfmodel.pipeline.lower import build_step

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}

ARGS = (
    CollectiveOp.ALLGATHER,
    3.0e6,
    ("g0", "g1", "g2"),
    "ring",
    CommKind.ZERO,
    (("g3", "g4", "g5"),),
    2.5e-5,
)


def _items(spec: CommSpec) -> list[tuple[str, type, Any]]:
    return [(k, type(v), v) for k, v in vars(spec).items()]


def test_built_is_the_constructors_spec() -> None:
    direct, fast = CommSpec(*ARGS), CommSpec.built(*ARGS)
    assert type(fast) is CommSpec
    assert _items(fast) == _items(direct)
    assert all(a is b for a, b in zip(vars(fast).values(), vars(direct).values(), strict=True))
    assert fast == direct and hash(fast) == hash(direct) and repr(fast) == repr(direct)
    back = pickle.loads(pickle.dumps(fast))
    assert _items(back) == _items(direct)
    with pytest.raises(AttributeError):  # still frozen
        fast.op = CollectiveOp.ALLREDUCE  # type: ignore[misc]


def test_built_falls_back_to_init_off_and_for_a_subclass(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass(frozen=True)
    class Tagged(CommSpec):
        tag: str = "t"

    sub = Tagged.built(*ARGS)
    assert type(sub) is Tagged and sub.tag == "t"  # __init__ ran: the subclass's default set
    calls: list[int] = []
    init = CommSpec.__init__

    def counted(self: CommSpec, *args: Any) -> None:
        calls.append(1)
        init(self, *args)

    monkeypatch.setattr(CommSpec, "__init__", counted)
    CommSpec.built(*ARGS)
    assert not calls
    monkeypatch.setattr(taskgraph, "FAST_SPECS", False)
    assert _items(CommSpec.built(*ARGS)) == _items(CommSpec(*ARGS)) and len(calls) == 2


def _step(fast: bool, software: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list, int]:
    monkeypatch.setattr(taskgraph, "FAST_SPECS", fast)
    calls: list[int] = []
    init = CommSpec.__init__

    def counted(self: CommSpec, *args: Any, **kw: Any) -> None:
        calls.append(1)
        init(self, *args, **kw)

    monkeypatch.setattr(CommSpec, "__init__", counted)
    sc = gpt_scenario(model_args=GPT, global_batch=32, software=software, dp=2, tp=2, pp=2)
    step, _ = build_step(sc, resolve(sc))
    tasks = [
        (t.tid, t.kind, t.device, t.stream, t.duration_s, t.deps, t.label)
        + ((None,) if t.comm is None else (type(t.comm), _items(t.comm)))
        for t in step.graph.tasks
    ]
    return tasks, len(calls)


@pytest.mark.parametrize("software", ["megatron-core", "pytorch-ddp", "fsdp"])
def test_a_lowering_has_the_same_specs_both_ways(
    software: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, fast_inits = _step(True, software, monkeypatch)
    direct, direct_inits = _step(False, software, monkeypatch)
    assert fast == direct
    assert sum(1 for t in direct if t[-1] is not None) > 0
    assert fast_inits < direct_inits  # the data-parallel specs took the fast path
