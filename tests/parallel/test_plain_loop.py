"""The plain operation loop (issue 27, ``LoweringShortcuts.run_plain_schedule``): the analytic
graph's plain operations (one operation task each, the send folded where it may be) emitted in
one loop from per-chunk templates instead of ``forward`` / ``backward`` / ``plain_op`` /
``send`` / ``fold_send`` per operation. It must lower the same graph: the same tasks in the
same order (every field and an operation task's own ``then_s``, ``send_s`` and ``send``), the
same devices, and the lowering left in the same state (what ``finish_stage`` and the counters
read), so every report is the one of the per-operation path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from report_compare import ZERO3_LIFTED, drawn_plan, gpt_scenario, pipelined_zero, plan_draws

import perfmodel.api as api
from perfmodel.api import predict
from perfmodel.errors import PerfModelError
from perfmodel.parallel import lower_pipeline as lp
from perfmodel.parallel.lower_shortcuts import LoweringShortcuts
from perfmodel.parallel.taskgraph import TaskGraph, TaskKind

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def _whole(g: TaskGraph) -> tuple[object, ...]:
    """Every task with its class and its operation-task slots, and the devices."""
    return tuple((t, type(t), t.then_s, t.send_s, t.send) for t in g.tasks), g.devices


def _state(low: lp.PipelineLowering) -> tuple[object, ...]:
    """What the schedule's emitters leave for the rest of the lowering."""
    return (
        low.f_out, low.b_out, low.f_done, low.last_compute, low.first_seg_done,
        low.gathers_left, low.gather_hist, low.op_merged, low.coarsened, low._cs_max, low._send_prev,
        low._send_exact, low._send_last, low.hidden_merged, low.grad_comm,
    )  # fmt: skip


def _lowerings(sc: object, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The constructor arguments of every analytic (``hidden``) lowering ``predict`` makes."""
    seen: list[tuple] = []
    orig = lp.PipelineLowering.graph

    def spy(self: lp.PipelineLowering) -> TaskGraph:
        if self.hidden:
            seen.append((self.inp, self.costs, self.owt, self.m, self.chunks))
        return orig(self)

    with monkeypatch.context() as m:
        m.setattr(lp.PipelineLowering, "graph", spy)
        m.setattr(api, "_REPORTS", {})
        predict(sc, baseline=False)  # type: ignore[arg-type]
    return seen


def _check(sc: object, monkeypatch: pytest.MonkeyPatch) -> int:
    """Lower every analytic graph of ``sc`` both ways and compare; returns the operations the
    plain loop emitted itself (without calling ``forward`` / ``backward``)."""
    inline = 0
    for inp, costs, owt, m, chunks in _lowerings(sc, monkeypatch):
        out, calls = [], []
        for on in (True, False):
            n = [0]
            with monkeypatch.context() as mp:
                mp.setattr(LoweringShortcuts, "PLAIN_LOOP", on)
                for name in ("forward", "backward"):
                    orig = getattr(lp.PipelineLowering, name)

                    def counted(self, *a, orig=orig, n=n):  # type: ignore[no-untyped-def]
                        n[0] += 1
                        return orig(self, *a)

                    mp.setattr(lp.PipelineLowering, name, counted)
                low = lp.PipelineLowering(
                    inp, costs, one_weird_trick=owt, microbatches=m, chunks=chunks,
                    coarse=True, hidden=True,
                )  # fmt: skip
                out.append((_whole(low.graph()), _state(low)))
            calls.append(n[0])
        assert out[0] == out[1]
        inline += calls[1] - calls[0]
    return inline


@pytest.mark.parametrize(
    "kw",
    [
        dict(software="megatron", pp=4, dp=1, tp=2, schedule="interleaved", interleave=2),
        dict(software="megatron", pp=2, dp=2, tp=2),
        dict(software="megatron", pp=1, dp=4, tp=2),
        dict(software="megatron-core", pp=2, dp=2, tp=2),
        dict(software="megatron-core", pp=2, dp=2, tp=2, schedule="interleaved", interleave=2),
        dict(software="pytorch-ddp", pp=2, dp=2, tp=2, recompute="full"),
        dict(software="fsdp", pp=2, dp=2, tp=2),
        dict(software="nemo", pp=4, dp=2, tp=1, schedule="interleaved", interleave=2),
    ],
)
def test_plain_loop_lowers_the_same_graph(monkeypatch: pytest.MonkeyPatch, kw: dict) -> None:
    """The benchmark's presets on 64 micro-batches (short periodic schedules and whole ones):
    the same graph and state either way; the plain loop emitted operations itself (plain
    operation tasks, or FSDP's gather chains: ``lower_replay.OperationReplay.
    run_chain_schedule``)."""
    sc = gpt_scenario(model_args=GPT, global_batch=128, **kw)
    inline = _check(sc, monkeypatch)
    assert inline > 0


@pytest.mark.parametrize("replay", [True, False])
@pytest.mark.parametrize(
    "kw",
    [
        dict(pp=2, dp=1, tp=8, nodes=2),
        dict(pp=4, dp=2, tp=8, nodes=8, schedule="interleaved", interleave=2),
    ],
)
def test_replayed_operations_match(monkeypatch: pytest.MonkeyPatch, kw: dict, replay: bool) -> None:
    """Megatron-Core with tp 8 (a forward's first segment's TP all-reduce outlasts its
    compute: three tasks, then one operation task for the rest; interleaved, also while the
    stage's aligned parameter gathers are still to come): operations copied from a recorded
    one (``lower_replay``) lower the same graph and state as the per-operation path, and
    copies were made (the comparison is not vacuous). With ``OperationReplay.REPLAY`` off
    (the plain loop on, no copies: those operations through ``forward`` / ``backward``) the
    same graph and state too. (Copies of one task inline off: every copy through
    ``replay_op``, counted here; ``test_inline_single_copies_match`` has them on.)"""
    from perfmodel.parallel.lower_replay import OperationReplay

    monkeypatch.setattr(OperationReplay, "REPLAY", replay)
    monkeypatch.setattr(OperationReplay, "INLINE_SINGLES", False)
    copies = [0]
    orig = OperationReplay.replay_op

    def spy(self, s, fwd, mb, c):  # type: ignore[no-untyped-def]
        low: lp.PipelineLowering = self
        rec = low._replays.get((c * low.P + s, fwd, low.gathers_left[s] > 0))
        copies[0] += rec is not None and rec is not False
        return orig(self, s, fwd, mb, c)

    monkeypatch.setattr(OperationReplay, "replay_op", spy)
    sc = gpt_scenario(model_args=GPT, global_batch=128, software="megatron-core", **kw)
    assert _check(sc, monkeypatch) > 0
    assert copies[0] > 100 if replay else copies[0] == 0


def _spy_single_copies(monkeypatch: pytest.MonkeyPatch, weight: Callable[[], int]) -> list[int]:
    """Count the copies ``replay_op`` makes of a recorded operation of one task
    (``Recorded``'s ``Single``: its general copy), each adding ``weight()``."""
    from perfmodel.parallel.lower_replay import OperationReplay

    n = [0]
    orig = OperationReplay.replay_op

    def spy(self, s, fwd, mb, c):  # type: ignore[no-untyped-def]
        rec = self._replays.get((c * self.P + s, fwd, self.gathers_left[s] > 0))
        if rec and rec[6] is not None:
            n[0] += weight()
        return orig(self, s, fwd, mb, c)

    monkeypatch.setattr(OperationReplay, "replay_op", spy)
    return n


@pytest.mark.parametrize("over", [True, False])
def test_single_task_copies_match(monkeypatch: pytest.MonkeyPatch, over: bool) -> None:
    """Replayed operations of one task (Megatron-Core tp 8 forwards: one ``OverTask`` the
    later segments extend; ``OperationReplay._single``) copied by ``replay_op`` (copies
    inline in the plain loop off: ``test_inline_single_copies_match`` has them on) give the
    same graph and state as the per-operation path. With ``OverTask``s off the recorded
    forwards are several tasks each (compute, TP collective, tail, operation task): no copy
    of one task (and still the same graph). In these plans every copied ``OverTask`` is of
    one piece (``then_s`` of one entry), into which ``fold_send`` folds no send: it refused the
    recorded operation's, so every later send on that stream, the copies' included, is a task
    (``_send_task``); no copy reaches a fold."""
    from perfmodel.parallel.lower_replay import OperationReplay

    monkeypatch.setattr(OperationReplay, "OVER_TASKS", over)
    monkeypatch.setattr(OperationReplay, "INLINE_SINGLES", False)
    n = _spy_single_copies(monkeypatch, lambda: 1)
    for layers, kw in (
        (8, dict(pp=2, dp=1, tp=8, nodes=2)),
        (8, dict(pp=4, dp=2, tp=8, nodes=8, schedule="interleaved", interleave=2)),
        (4, dict(pp=4, dp=1, tp=8, nodes=4)),  # one block a stage
    ):
        sc = gpt_scenario(model_args={**GPT, "layers": layers}, global_batch=128,
                          software="megatron-core", **kw)  # fmt: skip
        assert _check(sc, monkeypatch) > 0
    assert n[0] > 100 if over else n[0] == 0


def _inline_singles(
    sc: object, monkeypatch: pytest.MonkeyPatch, hidden: bool = True
) -> tuple[int, int]:
    """Lower every analytic graph of ``sc`` (``hidden``: with its summarised reductions, else
    without) with copies of one task inline in the plain loop
    (``OperationReplay.single_template``) and through ``replay_op``, compare graph and state
    (also against the per-operation path: :func:`_check`), and return how many operations
    copies' templates the loop made (one per chunk and phase) and the copies of one task
    ``replay_op`` made: 1 each with the loop's on, 1,000 each with it off (the comparisons
    above not counted)."""
    from perfmodel.parallel.lower_replay import OperationReplay

    used, on_now = [0], [False]
    orig_tpl = OperationReplay.single_template

    def tpl(self, key):  # type: ignore[no-untyped-def]
        out = orig_tpl(self, key)
        used[0] += bool(out) and on_now[0]
        return out

    monkeypatch.setattr(OperationReplay, "single_template", tpl)
    copied = _spy_single_copies(monkeypatch, lambda: 1 if on_now[0] else 1_000)
    for inp, costs, owt, m, chunks in _lowerings(sc, monkeypatch):
        out = []
        for on in (True, False):
            with monkeypatch.context() as mp:
                mp.setattr(OperationReplay, "INLINE_SINGLES", on)
                on_now[0] = on
                low = lp.PipelineLowering(
                    inp, costs, one_weird_trick=owt, microbatches=m, chunks=chunks,
                    coarse=True, hidden=hidden,
                )  # fmt: skip
                out.append((_whole(low.graph()), _state(low)))
                on_now[0] = False
        assert out[0] == out[1]
    _check(sc, monkeypatch)
    return used[0], copied[0]


@pytest.mark.parametrize(
    "kw, inline",
    [
        # Megatron-Core tp 8 (small GPT): 1F1B, interleaved, one block a stage; every copy
        # there equals a plain operation (no exposed TP tail, one segment merged, none coarse,
        # no gathers to come): test_inline_single_copies_match_gpt3 has copies that do not
        (dict(pp=2, dp=1, tp=8, nodes=2), True),
        (dict(pp=4, dp=2, tp=8, nodes=8, schedule="interleaved", interleave=2), True),
        (dict(pp=4, dp=1, tp=8, nodes=4, layers=4), True),
        # must not apply: the same plans lowered without the analytic graph's summarised
        # reductions (no operation tasks: nothing replayed); no copy of one task (tp 2: plain
        # operations; FSDP and ZeRO-3: gather chains, never replayed; PyTorch DDP)
        (dict(pp=2, dp=1, tp=8, nodes=2, hidden=False), False),
        (
            dict(pp=4, dp=2, tp=8, nodes=8, schedule="interleaved", interleave=2, hidden=False),
            False,
        ),
        (dict(pp=2, dp=2, tp=2), False),
        (dict(software="fsdp", pp=2, dp=2, tp=2), False),
        (dict(software="deepspeed-zero3", pp=1, dp=4, tp=2), False),
        (dict(software="pytorch-ddp", pp=2, dp=2, tp=2, recompute="full"), False),
    ],
)
def test_inline_single_copies_match(
    monkeypatch: pytest.MonkeyPatch, kw: dict, inline: bool
) -> None:
    """Copies of a recorded operation of one task emitted inline by the plain loop
    (``OperationReplay.single_template``, ``INLINE_SINGLES``) lower the same graph and state
    as through ``replay_op`` and as the per-operation path; where they apply every copy is
    inline (none left to ``replay_op``), elsewhere none is."""
    kw = {"software": "megatron-core", **kw}
    layers, hidden = kw.pop("layers", 8), kw.pop("hidden", True)
    sc = gpt_scenario(model_args={**GPT, "layers": layers}, global_batch=128, **kw)
    used, copied = _inline_singles(sc, monkeypatch, hidden)
    # with them on, no copy is left to replay_op; off, it made every copy (> 50)
    assert (used > 0 and copied % 1_000 == 0 and copied > 50_000) if inline else used == copied == 0


@pytest.mark.parametrize("idx", [6, 9])
def test_inline_single_copies_match_gpt3(monkeypatch: pytest.MonkeyPatch, idx: int) -> None:
    """As :func:`test_inline_single_copies_match` on two of the ten GPT-3 175B plans of
    ``tests/sim/test_over_tasks.py`` (``_plans()``, Megatron-Core, analytic: [6] dp2 tp32 pp16
    1F1B, [9] dp8 tp16 pp8 interleaved 2), whose copies of one task are not plain operations:
    several segments merged into one task and coarsened (both), a longest compute other than
    the task's seconds and copies with and without the stage's gathers to come ([9]). A
    template that reads the task's seconds for ``cmax``, fixes the merged or coarse count, or
    keys the copies without the gathers flag lowers another graph on one of them."""
    from test_over_tasks import _plans

    from perfmodel.api import Scenario

    sc = Scenario.from_dict({**_plans()[idx], "software": "megatron-core", "fidelity": "analytic"})
    used, copied = _inline_singles(sc, monkeypatch)
    assert used > 0 and copied % 1_000 == 0 and copied > 50_000


@pytest.mark.parametrize(
    "kw",
    [
        dict(pp=4, dp=2, tp=1, schedule="interleaved", interleave=2),
        dict(pp=4, dp=4, tp=2, nodes=4, schedule="interleaved", interleave=2, microbatch=2),
        # a later send that is not folded waits on the line's last task, which took the
        # moved send (last21: without ``_send_last`` it waited on the line's first)
        dict(
            pp=4,
            dp=4,
            tp=2,
            nodes=4,
            schedule="interleaved",
            interleave=2,
            microbatch=4,
            global_batch=64,
        ),
    ],
)
def test_inline_line_copies_match(monkeypatch: pytest.MonkeyPatch, kw: dict) -> None:
    """Pipelined FSDP2, interleaved: a chunk's forwards while a later chunk's gathers are still
    to come on the stage are several operation tasks each (every segment's compute a prefetch
    anchor: ``op_task``), copied inline by the plain loop (``OperationReplay._single``'s lines,
    ``INLINE_LINES``; ``OperationReplay.line_rest``): the same graph and state as through
    ``replay_op``'s general copy and as the per-operation path. Lines were copied with them on
    (some with a folded send moved to their last task), none with them off."""
    from perfmodel.parallel.lower_replay import OperationReplay

    lines, moved = [0], [0]
    orig = OperationReplay.line_rest

    def spy(self, s, j, first, line):  # type: ignore[no-untyped-def]
        lines[0] += 1
        moved[0] += first.send is not None and len(line[0]) > 0
        return orig(self, s, j, first, line)

    monkeypatch.setattr(OperationReplay, "line_rest", spy)
    sc = gpt_scenario(
        model_args={**GPT, "layers": 16}, software="fsdp", **{"global_batch": 128, **kw}
    )
    made = {True: 0, False: 0}
    for inp, costs, owt, m, chunks in _lowerings(sc, monkeypatch):
        out = []
        for on in (True, False):
            with monkeypatch.context() as mp:
                mp.setattr(OperationReplay, "INLINE_LINES", on)
                n0 = lines[0]
                low = lp.PipelineLowering(
                    inp, costs, one_weird_trick=owt, microbatches=m, chunks=chunks,
                    coarse=True, hidden=True,
                )  # fmt: skip
                out.append((_whole(low.graph()), _state(low)))
                made[on] += lines[0] - n0
        assert out[0] == out[1]
    assert made[True] > 0 and made[False] == 0 and moved[0] > 0
    assert _check(sc, monkeypatch) > 0


def test_unfolded_sends_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step where some pipeline sends are not folded (after the last micro-batch's
    backward, which reduces its gradients and is not one operation task, every later send on
    that stream is a task): the same graph either way, and both kinds of send are in it."""
    sc = gpt_scenario(
        model_args={**GPT, "layers": 16}, global_batch=64, software="pytorch-ddp", nodes=2,
        pp=4, dp=2, tp=2, schedule="interleaved", interleave=2,
    )  # fmt: skip
    assert _check(sc, monkeypatch) > 0
    graphs: list[TaskGraph] = []
    orig = lp.PipelineLowering.graph

    def spy(self: lp.PipelineLowering) -> TaskGraph:
        g = orig(self)
        if self.hidden:
            graphs.append(g)
        return g

    with monkeypatch.context() as m:
        m.setattr(lp.PipelineLowering, "graph", spy)
        m.setattr(api, "_REPORTS", {})
        predict(sc, baseline=False)
    g = graphs[0]
    folded = sum(1 for t in g.tasks if t.send_s > 0)
    sends = [t for t in g.tasks if t.kind is TaskKind.SENDRECV]
    assert folded > 0 and sends


def test_reports_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report (``to_dict``) is identical (``==``) with and without the plain loop."""
    sc = gpt_scenario(
        model_args=GPT, global_batch=128, software="megatron", pp=4, dp=1, tp=2,
        schedule="interleaved", interleave=2,
    )  # fmt: skip
    out = []
    for on in (True, False):
        with monkeypatch.context() as m:
            m.setattr(LoweringShortcuts, "PLAIN_LOOP", on)
            m.setattr(api, "_REPORTS", {})
            out.append(predict(sc, baseline=False).to_dict())
    assert out[0] == out[1]


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=plan_draws(
        ["megatron", "megatron-core", "pytorch-ddp", "nemo", "torchtitan", "deepspeed-zero1"],
        mb=(1, 2),
        sequence_parallel=True,
    )
)
def test_plain_loop_over_plans(monkeypatch: pytest.MonkeyPatch, plan: dict) -> None:
    """Small GPTs over presets, pipelines, schedules, recomputation, sequence parallelism and
    TP (hypothesis): the same graph and state either way."""
    sc = drawn_plan(model_args=GPT, **plan)
    assume(sc is not None)
    try:
        _check(sc, monkeypatch)
    except PerfModelError:  # a plan the model refuses (the batch does not divide)
        assume(False)


def test_op_labels_are_the_segment_labels() -> None:
    """``op_labels`` gives what ``segment`` formats (``F3.c1``; ``B3`` with one chunk per
    stage), and a longer request replaces the table's list instead of extending it, so a list
    another lowering holds stays as it was."""
    from perfmodel.parallel.lower_shortcuts import op_labels

    short = op_labels("F", 1, 3)
    assert short[:3] == ["F0.c1", "F1.c1", "F2.c1"]
    n = len(short)
    longer = op_labels("F", 1, n + 5)
    assert longer is not short and len(short) == n
    assert longer[: n + 5] == [f"F{mb}.c1" for mb in range(n + 5)]
    assert op_labels("B", -1, 4)[:4] == ["B0", "B1", "B2", "B3"]


def _chain_ops(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the operations ``run_chain_schedule`` lowered itself (one gather chain each)."""
    from perfmodel.parallel.lower_replay import OperationReplay

    done = [0]
    orig = OperationReplay.run_chain_schedule

    def spy(self):  # type: ignore[no-untyped-def]
        orig(self)
        done[0] += self.chains_inline

    monkeypatch.setattr(OperationReplay, "run_chain_schedule", spy)
    return done


@pytest.mark.parametrize(
    ("software", "tp", "pp", "nodes", "microbatch", "extra"),
    [
        ("deepspeed-zero3", 2, 2, 2, 1, {}),  # gather-bound: chains of segments
        ("deepspeed-zero3", 1, 2, 2, 1, {"schedule": "interleaved", "interleave": 2}),
        ("deepspeed-zero3", 2, 1, 2, 1, {}),
        ("deepspeed-zero3", 1, 2, 2, 1, {"recompute": "full"}),
        ("deepspeed-zero3", 1, 2, 1, 4, {}),  # hidden gather runs: chains of runs
        ("deepspeed-zero3", 1, 2, 1, 8, {"schedule": "interleaved", "interleave": 2}),
        ("deepspeed-zero3", 1, 2, 1, 8, {"recompute": "full"}),
        # one micro-batch a step: a backward's last operation and its forward's end may be
        # the same task (run_chain_schedule's ``a == f`` dependencies)
        ("deepspeed-zero3", 2, 2, 1, 1, {"global_batch": 2}),
        ("deepspeed-zero3", 1, 4, 1, 1, {"global_batch": 2}),
    ],
)
def test_inline_gather_chains_match(
    monkeypatch: pytest.MonkeyPatch,
    software: str,
    tp: int,
    pp: int,
    nodes: int,
    microbatch: int,
    extra: dict,
) -> None:
    """ZeRO-3/FSDP operations lowered as one gather chain each, emitted by the plain loop
    (``OperationReplay.run_chain_schedule``: the chain's template per chunk, phase, last
    micro-batch and first segment done) instead of ``forward`` / ``backward`` / ``gather_runs`` /
    ``lower_gather_runs``: the same graph and state (``hidden_merged`` and the reductions'
    ends included), and chains were emitted inline (the comparison is not vacuous)."""
    done = _chain_ops(monkeypatch)
    sc = gpt_scenario(model_args=GPT, software=software, nodes=nodes,
                      dp=8 * nodes // (tp * pp), tp=tp, pp=pp, microbatch=microbatch,
                      **{"global_batch": 128 // nodes, **pipelined_zero(software, pp),
                         **extra})  # fmt: skip
    assert _check(sc, monkeypatch) > 0
    assert done[0] > 0


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=plan_draws(["fsdp", "deepspeed-zero3", "torchtitan"], mb=(1, 2, 4), nodes=(1, 2)))
def test_inline_gather_chains_over_plans(monkeypatch: pytest.MonkeyPatch, plan: dict) -> None:
    """ZeRO-3/FSDP small GPTs (hypothesis; gather-bound or hidden runs, one or two servers):
    the same graph and state with the plain loop's inline gather chains as without."""
    sc = drawn_plan(model_args=GPT, **plan)
    assume(sc is not None)
    try:
        _check(sc, monkeypatch)
    except PerfModelError:
        assume(False)


@pytest.mark.parametrize(
    ("kw", "taken"),
    [
        (dict(**ZERO3_LIFTED, tp=1, pp=2, nodes=2, dp=8, microbatch=1), True),  # limit lifted
        (dict(software="fsdp", tp=1, pp=1, nodes=2, dp=16, microbatch=1, hsdp=8), False),
        (dict(software="megatron-core", tp=2, pp=2, dp=2), False),
    ],
)
def test_chain_loop_taken_only_where_every_operation_may_chain(
    monkeypatch: pytest.MonkeyPatch, kw: dict, taken: bool
) -> None:
    """``run_chain_schedule`` runs the schedule where ``init_chain_ops`` allows chains
    (ZeRO-3/FSDP), not with HSDP (two collectives a bucket: no chains) nor without ZeRO-3;
    the graph and state are the reference loop's either way."""
    from perfmodel.parallel.lower_replay import OperationReplay

    calls = [0]
    orig = OperationReplay.run_chain_schedule

    def spy(self):  # type: ignore[no-untyped-def]
        calls[0] += 1
        orig(self)

    monkeypatch.setattr(OperationReplay, "run_chain_schedule", spy)
    sc = gpt_scenario(model_args=GPT, global_batch=64, **kw)
    inline = _check(sc, monkeypatch)  # the same graph and state either way
    assert (calls[0] > 0) is taken
    assert inline > 0 or not taken


def test_a_line_is_refused_where_a_task_differs() -> None:
    """``OperationReplay._single`` on a recorded operation of three operation tasks in a line
    (each waiting on the one before, the same device, stream, label, micro-batch and chunk):
    a line with ``INLINE_LINES``; refused where the third task differs in any field the copy
    would not carry, or the first is an ``OverTask`` (last21/final21b: no plan reached these)."""
    from pipelined_lowerings import torchtitan

    from perfmodel.parallel.lower_replay import OperationReplay

    low = torchtitan()
    first = (TaskKind.COMPUTE, "gpu0", "compute", 1e-3, ((False, 0, 0),), 0, None, 1, None,
             5e-4, None)  # fmt: skip

    def task(i: int, **kw: Any) -> tuple:
        fields = dict(kind=TaskKind.COMPUTE, dev="gpu0", stream="compute", dur=2e-3,
                      deps=((True, i - 1, 0),), lab=0, mbf=None, chunk=1, comm=None, then=5e-4,
                      over=None)  # fmt: skip
        return tuple({**fields, **kw}.values())

    def single(tpl: list[tuple]) -> object:
        return low._single(True, 1, tpl, len(tpl) - 1, None, (), 1)

    assert OperationReplay.INLINE_LINES
    line = single([first, task(1), task(2)])
    assert line is not None and line[-1] == (((2e-3, 5e-4), (2e-3, 5e-4)), ())
    for field, other in [("kind", TaskKind.COLLECTIVE), ("dev", "gpu1"), ("stream", "comm"),
                         ("deps", ((True, 0, 0),)), ("lab", 1), ("mbf", 3), ("chunk", 0),
                         ("comm", object()), ("then", None), ("over", object())]:  # fmt: skip
        assert single([first, task(1), task(2, **{field: other})]) is None, field
    assert single([(*first[:-1], object()), task(1), task(2)]) is None
