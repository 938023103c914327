"""Operation tasks (issue 27): the analytic graph lowers a segment's compute with its exposed
tensor-parallel collective, the next segments of the same operation and the pipeline send after
it as one task (:attr:`Task.then_s`, :attr:`Task.send_s`, dependencies ``tid + SENT`` and
``tid + HEAD``; ``perfmodel.parallel.lower_shortcuts``, "Operation tasks"). The list schedule
adds the same durations in the same order, so every report equals the one without them: the
iteration time bit for bit (up to one straggler-wait ulp), the compute seconds to ~1e-16 (the
fine sweep also splits a compute interval where an overlapped TP collective beside it ends).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from report_compare import assert_close, drawn_plan, gpt_scenario, plan_draws

import perfmodel.api as api
from perfmodel.api import predict
from perfmodel.errors import PerfModelError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.lower_shortcuts import LoweringShortcuts
from perfmodel.parallel.taskgraph import (
    _S_SEND,
    _S_SEND_S,
    HEAD,
    SENT,
    CommKind,
    CommSpec,
    GraphBuilder,
    TaskKind,
)
from perfmodel.report.step_breakdown import breakdown
from perfmodel.sim.engine import _list_schedule

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def _both(sc: object, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """The report with operation tasks and without (the coarse graph the executors ran
    before), each computed afresh."""
    out = []
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(LoweringShortcuts, "OP_TASKS", on)
            m.setattr(api, "_REPORTS", {})
            out.append(predict(sc, baseline=False).to_dict())  # type: ignore[arg-type]
    return out[0], out[1]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=plan_draws(
        [
            "megatron",
            "megatron-core",
            "pytorch-ddp",
            "fsdp",
            "deepspeed-zero3",
            "nemo",
            "torchtitan",
            "deepspeed-zero1",
        ],
        mb=(1, 2),
        sequence_parallel=True,
    )
)
def test_reports_equal_without_operation_tasks(monkeypatch: pytest.MonkeyPatch, plan: dict) -> None:
    """Small GPTs over the presets, pipelines, schedules, recomputation and TP (hypothesis):
    every report field equal to the one without operation tasks to 1e-12 relative, the
    iteration time to 1e-15."""
    sc = drawn_plan(model_args=GPT, **plan)
    assume(sc is not None)
    try:
        with_ops, without = _both(sc, monkeypatch)
    except PerfModelError:  # a plan the model refuses (the batch does not divide)
        assume(False)
    assert math.isclose(
        with_ops["iteration_time_s"], without["iteration_time_s"], rel_tol=1e-15, abs_tol=0.0
    )
    assert_close(with_ops, without, rel=1e-12)


@pytest.mark.parametrize(
    "kw",
    [
        dict(software="megatron", pp=4, dp=1, tp=2, schedule="interleaved", interleave=2),
        dict(software="megatron-core", pp=2, dp=2, tp=2),
        dict(software="fsdp", pp=2, dp=2, tp=2),
        dict(software="pytorch-ddp", pp=2, dp=2, tp=2, recompute="full"),
    ],
)
def test_bench_shapes_equal(monkeypatch: pytest.MonkeyPatch, kw: dict) -> None:
    """The benchmark's presets on pipelines long enough for the periodic extension (64
    micro-batches): the same report either way, and the analytic graph had operation tasks
    (the comparison is not vacuous)."""
    import perfmodel.sim.engine as engine

    seen: list[int] = []
    orig = engine._list_schedule

    def spy(g):  # type: ignore[no-untyped-def]
        seen.append(sum(1 for t in g.tasks if t.then_s or t.send_s))
        return orig(g)

    monkeypatch.setattr(engine, "_list_schedule", spy)
    sc = gpt_scenario(model_args=GPT, global_batch=128, **kw)
    with_ops, without = _both(sc, monkeypatch)
    assert seen and seen[0] > 0
    assert with_ops["iteration_time_s"] == pytest.approx(without["iteration_time_s"], rel=1e-15)
    assert_close(with_ops, without, rel=1e-12)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=plan_draws(["megatron-core", "nemo"], mb=(1, 2), sequence_parallel=True),
)
def test_aligned_gathers_leave_reports_identical(
    monkeypatch: pytest.MonkeyPatch, plan: dict
) -> None:
    """Interleaved Megatron-Core / NeMo plans (aligned parameter gathers, hypothesis): the
    segments of the operations before the last chunk's gathers chain into operation tasks
    (``ALIGNED_CHAINS``, fewer tasks), and every report field is identical (``==``) to the one
    with a task per segment."""
    import perfmodel.sim.engine as engine

    sc = drawn_plan(model_args=GPT, **{**plan, "interleaved": True})
    assume(sc is not None)
    seen: list[int] = []
    orig = engine._list_schedule

    def spy(g):  # type: ignore[no-untyped-def]
        seen.append(len(g.tasks))
        return orig(g)

    out, tasks = [], []
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(LoweringShortcuts, "ALIGNED_CHAINS", on)
            m.setattr(api, "_REPORTS", {})
            m.setattr(engine, "_list_schedule", spy)
            try:
                out.append(predict(sc, baseline=False).to_dict())  # type: ignore[arg-type]
            except PerfModelError:  # a plan the model refuses (the batch does not divide)
                assume(False)
        tasks.append(sum(seen))
        seen.clear()
    assert out[0] == out[1]
    assert tasks[0] <= tasks[1]


def test_aligned_gathers_chain_the_other_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-Core, dp 2 pp 4 interleaved, 32 micro-batches: fewer analytic tasks with
    ``ALIGNED_CHAINS`` and the same report."""
    import perfmodel.sim.engine as engine

    seen: list[int] = []
    orig = engine._list_schedule

    def spy(g):  # type: ignore[no-untyped-def]
        seen.append(len(g.tasks))
        return orig(g)

    sc = gpt_scenario(model_args={**GPT, "layers": 32}, global_batch=64, software="megatron-core",
                      pp=4, dp=2, tp=1, schedule="interleaved", interleave=2)  # fmt: skip
    out = []
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(LoweringShortcuts, "ALIGNED_CHAINS", on)
            m.setattr(api, "_REPORTS", {})
            m.setattr(engine, "_list_schedule", spy)
            out.append(predict(sc, baseline=False).to_dict())
    assert out[0] == out[1]
    assert len(seen) == 2 and seen[0] < seen[1]


def _spec(a: str, b: str) -> CommSpec:
    return CommSpec(CollectiveOp.SENDRECV, 1e6, (a, b), "auto", CommKind.PP)


def test_operation_task_golden() -> None:
    """Hand-computed: on g0 a compute of 1 s, a TP collective of 0.5 s, a compute of 2 s and one
    of 0.25 s, then a 0.125 s send to g1, whose 1 s compute waits on it, and a gather prefetched
    after g0's first compute (1 s). As one operation task and as the tasks it stands for:
    the same times (g0 ends at 3.75 s, the send at 3.875 s, g1 at 4.875 s, the gather at
    1.1 s) and the same breakdown (g0: compute 3, tp 0.75, pp 0.125, bubble 1)."""
    op = GraphBuilder()
    a = op.add(TaskKind.COMPUTE, "g0", "compute", 1.0, label="F0", then=(0.5, 2.0, 0.25))
    _S_SEND_S(op.tasks[a], 0.125)
    _S_SEND(op.tasks[a], _spec("g0", "g1"))
    b = op.add(TaskKind.COMPUTE, "g1", "compute", 1.0, [a + SENT], "F0")
    c = op.add(TaskKind.COLLECTIVE, "g0", "ag", 0.1, [a + HEAD], "AG")
    tl = _list_schedule(op.build())
    assert tl.end_s == (3.75, 4.875, 1.1) and tl.start_s == (0.0, 3.875, 1.0)

    fine = GraphBuilder()
    x = fine.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    y = fine.add(TaskKind.COLLECTIVE, "g0", "compute", 0.5, [x])
    z = fine.add(TaskKind.COMPUTE, "g0", "compute", 2.0, [y])
    w = fine.add(TaskKind.COLLECTIVE, "g0", "compute", 0.25, [z])
    snd = fine.add(TaskKind.SENDRECV, "g0", "send_fwd", 0.125, [w], comm=_spec("g0", "g1"))
    fine.add(TaskKind.COMPUTE, "g1", "compute", 1.0, [snd])
    fine.add(TaskKind.COLLECTIVE, "g0", "ag", 0.1, [x])
    ftl = _list_schedule(fine.build())
    assert ftl.makespan_s == tl.makespan_s == 4.875
    for dev in ("g0", "g1"):
        assert breakdown(tl, dev) == breakdown(ftl, dev)
    g0 = breakdown(tl, "g0")
    assert (g0.compute_s, g0.exposed_comm_s, g0.bubble_s) == (
        3.0,
        {"tp": 0.75, "pp": 0.125},
        1.0,
    )
    g1 = breakdown(tl, "g1")
    assert (g1.compute_s, g1.exposed_comm_s, g1.bubble_s) == (1.0, {"pp": 0.125}, 3.75)
    assert c == 2 and b == 1


class _Stage(LoweringShortcuts):
    """Just the state :meth:`LoweringShortcuts.fold_send` reads: one stage's builder."""

    def __init__(self) -> None:
        self.hidden, self.combined, self.P, self.chunks = True, False, 1, []
        self.b = GraphBuilder()
        self.init_op_tasks()

    def op(self, dur: float, deps: list[int]) -> int:
        tid = self.b.add(TaskKind.COMPUTE, "g0", "compute", dur, deps, then=(0.0,))
        self.compute_emitted(0, dur)
        return tid


def test_send_is_folded_only_where_it_starts_when_its_task_ends() -> None:
    """A send longer than the next operation's compute still runs when that operation ends:
    the next send then starts later than its task's end, so it is refused (a task, which waits
    on the folded send as the stream made it wait), and so is every later send on that
    stream. The schedule equals the one with every send a task (x's send over [1, 3], y's
    from 3 to 3.1, z's from 7.5); folding y's would start it at 2.5."""
    st_ = _Stage()
    spec = _spec("g0", "g1")
    x = st_.op(1.0, [])
    assert st_.fold_send(0, [x], "send_fwd", 2.0, spec) == (True, -1)  # the stream is free
    y = st_.op(1.5, [x])
    # 2.0 s > the 1.5 s compute since: a task, after x's send
    assert st_.fold_send(0, [y], "send_fwd", 0.1, spec) == (False, x + SENT)
    ys = st_.b.add(TaskKind.SENDRECV, "g0", "send_fwd", 0.1, [y, x + SENT], comm=spec)
    z = st_.op(5.0, [y])
    assert st_.fold_send(0, [z], "send_fwd", 0.1, spec) == (False, -1)  # tasks from now on
    zs = st_.b.add(TaskKind.SENDRECV, "g0", "send_fwd", 0.1, [z], comm=spec)
    assert st_.fold_send(0, [z], "send_bwd", 0.1, spec) == (True, -1)  # its own stream
    tl = _list_schedule(st_.b.build())

    real = GraphBuilder()
    rx = real.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    real.add(TaskKind.SENDRECV, "g0", "send_fwd", 2.0, [rx], comm=spec)
    ry = real.add(TaskKind.COMPUTE, "g0", "compute", 1.5, [rx])
    rys = real.add(TaskKind.SENDRECV, "g0", "send_fwd", 0.1, [ry], comm=spec)
    rz = real.add(TaskKind.COMPUTE, "g0", "compute", 5.0, [ry])
    rzs = real.add(TaskKind.SENDRECV, "g0", "send_fwd", 0.1, [rz], comm=spec)
    rtl = _list_schedule(real.build())
    assert (tl.start_s[ys], tl.start_s[zs]) == (rtl.start_s[rys], rtl.start_s[rzs]) == (3.0, 7.5)
    assert tl.end_s[x] + st_.b.tasks[x].send_s == 3.0


def test_operation_task_pickles_with_its_pieces() -> None:
    """An operation task keeps its pieces and send through pickling (a report's periodic
    timeline holds its short schedule's graph; sweeps pickle reports across processes)."""
    import pickle

    b = GraphBuilder()
    a = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [], "F0", 3, 1, None, (0.5, 2.0))
    b.add(TaskKind.COMPUTE, "g0", "compute", 1.0, [a])
    _S_SEND_S(b.tasks[a], 0.125)
    _S_SEND(b.tasks[a], _spec("g0", "g1"))
    g = b.build()
    back = pickle.loads(pickle.dumps(g))
    t = back.tasks[0]
    assert back == g and type(t) is type(g.tasks[0])
    assert (t.then_s, t.send_s, t.send, t.microbatch) == ((0.5, 2.0), 0.125, _spec("g0", "g1"), 3)
    assert back.tasks[1].then_s == () and _list_schedule(back).end_s == _list_schedule(g).end_s
