"""GraphBuilder's fast paths (issue 14: per-task cost of a lowering) give the tasks the general
path gives: dependencies cleaned the same way, devices listed once in first-use order, the
arguments after ``deps`` accepted by position or by keyword."""

from __future__ import annotations

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskKind
from perfmodel.sim.engine import evaluate


def test_single_dependency_cleaned_as_in_the_general_path() -> None:
    b = GraphBuilder()
    a = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    assert b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [-1]) == 1
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [None])  # type: ignore[list-item]
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, (a,))
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [3, a, 3, -1, None])  # type: ignore[list-item]
    assert [t.deps for t in b.tasks] == [(), (), (), (0,), (0, 3)]


def test_devices_once_in_first_use_order_including_given_ones() -> None:
    b = GraphBuilder(devices=["g1"])
    for dev in ("g0", "g1", "g0", "g2"):
        b.add(TaskKind.COMPUTE, dev, "compute", 0.5)
    assert b.build().devices == ("g1", "g0", "g2")


def test_positional_and_keyword_arguments_build_equal_tasks() -> None:
    spec = CommSpec(CollectiveOp.SENDRECV, 8.0, ("g0", "g1"), "auto", CommKind.PP)
    by_kw, by_pos = GraphBuilder(), GraphBuilder()
    by_kw.add(
        TaskKind.SENDRECV, "g0", "send_fwd", 2, label="send F3", microbatch=3, chunk=1, comm=spec
    )
    by_pos.add(TaskKind.SENDRECV, "g0", "send_fwd", 2, (), "send F3", 3, 1, spec)
    assert by_kw.tasks == by_pos.tasks
    assert type(by_pos.tasks[0].duration_s) is float  # an int duration is stored as float


def test_evaluate_hand_schedule() -> None:
    # g0 compute: 1 s, then 2 s; the transfer (3 s) waits for the first; g1 waits for it
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    b.add(TaskKind.COMPUTE, "g0", "compute", 2.0, [x])
    s = b.add(TaskKind.SENDRECV, "g0", "send_fwd", 3.0, [x])
    b.add(TaskKind.COMPUTE, "g1", "compute", 0.5, [s])
    tl = evaluate(b.build())
    assert tl.start_s == (0.0, 1.0, 1.0, 4.0)
    assert tl.end_s == (1.0, 3.0, 4.0, 4.5)


def test_two_dependencies_cleaned_as_any_other_count() -> None:
    """The unrolled two-dependency case drops ``None``, negative ids and a duplicate and sorts
    the rest, as the set-and-sort of three or more does (issue 14: one call per task)."""
    import itertools

    vals = [None, -1, 0, 1, 2]
    for a, d in itertools.product(vals, vals):
        b = GraphBuilder()
        for _ in range(3):
            b.add(TaskKind.COMPUTE, "g", "compute", 1.0)
        tid = b.add(TaskKind.COMPUTE, "g", "compute", 1.0, [a, d])
        want = tuple(sorted({x for x in (a, d) if x is not None and x >= 0}))
        assert b.tasks[tid].deps == want, (a, d)


def test_tasks_from_the_mutable_twin_are_frozen_tasks_equal_to_constructed_ones() -> None:
    """``add`` fills a :class:`~perfmodel.parallel.taskgraph._TaskTwin` and makes it a
    :class:`Task` by class assignment: the result is a ``Task`` (not a subclass), frozen,
    equal (and hashing equal) to the dataclass constructor's task, pickles as one, and reads
    the class attributes ``then_s``, ``send_s``, ``send`` of a plain task; an operation task
    (``then``) is still an :class:`OpTask`."""
    import dataclasses
    import pickle

    import pytest

    from perfmodel.parallel.taskgraph import OpTask, Task

    spec = CommSpec(CollectiveOp.ALLGATHER, 64.0, ("g0", "g1"), "auto", CommKind.ZERO)
    b = GraphBuilder()
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    tid = b.add(TaskKind.COLLECTIVE, "g0", "zero", 3, [0], "AG F1", 1, 2, spec)
    t = b.tasks[tid]
    want = Task(1, TaskKind.COLLECTIVE, "g0", "zero", 3.0, (0,), "AG F1", 1, 2, spec)
    assert type(t) is Task and t == want and hash(t) == hash(want)
    assert dataclasses.astuple(t) == dataclasses.astuple(want)
    assert (t.then_s, t.send_s, t.send) == ((), 0.0, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.duration_s = 2.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(t)) == want
    op = b.tasks[b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [1], "F1", 1, 2, None, (0.5,))]
    assert type(op) is OpTask and op.then_s == (0.5,) and op.deps == (1,)


def test_chain_tasks_from_the_mutable_twin_are_frozen_chain_tasks() -> None:
    """``add_chain`` (and the plain loop's ``run_chain_schedule``) fill a
    :class:`~perfmodel.parallel.taskgraph._ChainTaskTwin` and make it a :class:`ChainTask` by
    class assignment: the result is a ``ChainTask``, frozen, equal (and hashing equal) to one
    made by the frozen class's constructor and slot stores, with the same field values and
    slots, and pickles as one."""
    import dataclasses
    import pickle

    import pytest

    from perfmodel.parallel.taskgraph import (
        CHAIN_MARK,
        ChainSegment,
        ChainStatic,
        ChainTask,
        Task,
    )

    spec = CommSpec(CollectiveOp.ALLGATHER, 64.0, ("g0", "g1"), "auto", CommKind.ZERO)
    seg = ChainSegment(0.5, 1.0, (0.0,), 0.0, spec.group, ())
    proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=spec)
    static = ChainStatic((seg,), "zero", "dp", False, proto, proto, frozenset(("g0", "g1")), None)
    b = GraphBuilder()
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    tid = b.add_chain("g0", [0, -1], "F1.c1", 1, 3, (static, -1, 0))
    t = b.tasks[tid]
    want = ChainTask(1, TaskKind.COMPUTE, "g0", "compute", 0.0, (0,), "F1.c1", 1, 3, None)
    for name, value in (("then_s", CHAIN_MARK), ("send_s", 0.0), ("send", None),
                        ("chain", (static, -1, 0))):  # fmt: skip
        object.__setattr__(want, name, value)  # the frozen class's own slots
    assert type(t) is ChainTask and t == want and hash(t) == hash(want)
    assert dataclasses.astuple(t) == dataclasses.astuple(want)
    assert t.then_s is CHAIN_MARK and (t.send_s, t.send, t.chain) == (0.0, None, want.chain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.duration_s = 2.0  # type: ignore[misc]
    with pytest.raises((TypeError, AttributeError)):  # as a constructed ChainTask refuses it
        t.chain = (static, -1, -1)  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(t)) == want
