"""The analytic graph's summarised collectives (issue 27 item 2) agree with the fine lowering.

:meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.hidden_backward` lowers a
backward that reduces its gradients bucket by bucket as one compute, one TP collective, a lead
and one reduction (max-plus: the last reduction ends where the fine chain's does);
:meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.gather_runs` lowers runs of
segments whose parameter gathers hide under the compute before them as two computes. Both
are the analytic list schedule's graph only (:meth:`~perfmodel.parallel.periodic.LazyGraph.
analytic`); the SimPy replay keeps the coarse graph with every collective. Every report field
must equal the fine lowering's (measured: to 1.1e-13 relative on 700 small scenarios, the
summation order of the durations and the periodic extension).
"""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_compare import ZERO3_LIFTED, assert_close, gpt_scenario

import perfmodel.api as api
import perfmodel.pipeline.lower as lower_stage
from perfmodel.api import Scenario, predict, resolve
from perfmodel.parallel import lower_step
from perfmodel.parallel.lower_hidden import _lead
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.periodic import LazyGraph
from perfmodel.parallel.taskgraph import GraphBuilder, TaskKind
from perfmodel.pipeline.lower import build_step
from perfmodel.sim.engine import _list_schedule

# 8 blocks of hidden 4096: a ~200 M-parameter gradient bucket per block (Megatron-Core), 25 MiB
# buckets (PyTorch DDP), one FSDP unit per block
GPT = {"layers": 8, "hidden": 4096, "heads": 32, "seq_len": 1024, "vocab": 8000}


def _scenario(**kw: object) -> Scenario:
    return gpt_scenario(**{"model_args": GPT, "global_batch": 32, **kw})


def _report(sc: Scenario, monkeypatch: pytest.MonkeyPatch, *, coarse: bool) -> api.StepReport:
    with monkeypatch.context() as m:
        m.setattr(lower_stage, "lower", functools.partial(lower_step.lower, coarse=coarse))
        m.setattr(api, "_REPORTS", {})
        return predict(sc, baseline=False)


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the operations each shortcut lowers (hidden gather runs and chains: through
    ``lower_gather_runs``, or as one gather chain by the plain loop's ``run_chain_schedule``)."""
    hits = {"backward": 0, "gathers": 0}
    hb, gr = PipelineLowering.lower_hidden_backward, PipelineLowering.lower_gather_runs

    def count_hb(self, *a, **k):  # type: ignore[no-untyped-def]
        hits["backward"] += 1
        return hb(self, *a, **k)

    def count_gr(self, *a, **k):  # type: ignore[no-untyped-def]
        hits["gathers"] += 1
        return gr(self, *a, **k)

    co = PipelineLowering.run_chain_schedule

    def count_co(self):  # type: ignore[no-untyped-def]
        co(self)  # the gather chains the plain loop emits itself (lower_replay)
        hits["gathers"] += self.chains_inline

    monkeypatch.setattr(PipelineLowering, "lower_hidden_backward", count_hb)
    monkeypatch.setattr(PipelineLowering, "lower_gather_runs", count_gr)
    monkeypatch.setattr(PipelineLowering, "run_chain_schedule", count_co)
    return hits


#: name -> (scenario overrides, which shortcut it takes)
CASES: dict[str, tuple[dict, str]] = {
    "ddp-pp1": (dict(software="pytorch-ddp", pp=1, tp=1, dp=8), "backward"),
    "ddp-tp2-pp2": (dict(software="pytorch-ddp", dp=2), "backward"),
    "ddp-interleaved": (
        dict(software="pytorch-ddp", schedule="interleaved", interleave=2, dp=2, global_batch=16),
        "backward",
    ),
    "mcore-pp2": (dict(software="megatron-core"), "backward"),
    "mcore-recompute": (dict(software="megatron-core", recompute="full"), "backward"),
    "mcore-tp1-pp2-gathers": (dict(software="megatron-core", tp=1, pp=2, dp=4), "gathers"),
    "zero2": (dict(software="megatron-core", zero=2, pp=1, dp=4), "backward"),
    "fsdp-tp1-pp2": (dict(software="fsdp", tp=1, pp=2, dp=4, microbatch=4), "gathers"),
    "fsdp-tp2-pp1": (dict(software="fsdp", tp=2, pp=1, dp=4, microbatch=4), "gathers"),
    "fsdp-two-servers": (
        dict(software="fsdp", tp=1, pp=2, dp=8, microbatch=4, nodes=2, global_batch=64),
        "gathers",
    ),
    "zero3": (dict(software="deepspeed-zero3", tp=1, pp=1, dp=8, microbatch=4), "gathers"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_summary_equals_fine(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kw, which = CASES[name]
    sc = _scenario(**kw)
    hits = _counting(monkeypatch)
    coarse = _report(sc, monkeypatch, coarse=True)
    assert hits[which] > 0, hits  # the case exercises the shortcut
    fine = _report(sc, monkeypatch, coarse=False)
    assert_close(coarse.to_dict(), fine.to_dict())
    # what shows tasks reads the fine graph
    assert coarse.timeline.graph.tasks == fine.timeline.graph.tasks


@pytest.mark.parametrize("name", ["ddp-tp2-pp2", "fsdp-tp1-pp2", "mcore-tp1-pp2-gathers"])
def test_simulation_keeps_every_collective(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SimPy replay runs the coarse graph, whose reductions and gathers are the fine
    graph's (their flows contend by bytes and start times); the analytic graph has fewer."""
    sc = _scenario(**CASES[name][0])
    step, _ = build_step(sc, resolve(sc))
    g = step.graph
    assert isinstance(g, LazyGraph) and g.analytic_merged

    def dp_comm(graph: object) -> int:
        return sum(
            1 for t in graph.tasks if t.comm is not None and t.comm.kind.value in ("dp", "zero")
        )  # type: ignore[attr-defined]

    assert dp_comm(g.coarse()) == dp_comm(g.full()) > dp_comm(g.analytic())
    simulated = _scenario(fidelity="simulated", **CASES[name][0])
    a = _report(simulated, monkeypatch, coarse=True)
    b = _report(simulated, monkeypatch, coarse=False)
    assert_close(a.to_dict(), b.to_dict())


def test_refused_where_gathers_outlast_the_compute() -> None:
    """A gather longer than the compute before it paces the segments (they wait for it): no
    run (sequences of 128 tokens, micro-batch 1); with sequences of 1,024 and micro-batch 4
    the same blocks' gathers hide and form runs."""
    from test_coarse_lowering import _inputs  # type: ignore[import-not-found]

    short_seq = {**GPT, "seq_len": 128}  # an eighth of the compute per block, the same gathers
    slow = PipelineLowering(
        *_inputs(_scenario(software="fsdp", tp=1, pp=1, dp=8, microbatch=1, model_args=short_seq)),
        coarse=True,
        hidden=True,
    )
    fast = PipelineLowering(
        *_inputs(_scenario(software="fsdp", tp=1, pp=1, dp=8, microbatch=4)),
        coarse=True,
        hidden=True,
    )
    for low, runs in ((slow, False), (fast, True)):
        ch = low.chunks[0]
        assert low.gather_every_mb and len(ch.segments) >= 3
        plan = low.gather_runs(0, "F", 1, ch, False)
        assert plan is not None and bool(plan[1]) is runs


def _fine_chain(
    a: float, r_prev: float, on_stream: list[float], red: list[float]
) -> tuple[float, float]:
    """List schedule of the fine tasks: segments back to back from ``a``, each followed by its
    reduction on a stream whose previous task ends at ``r_prev``; ``(last segment's end, last
    reduction's end)``."""
    b = GraphBuilder()
    start = b.add(TaskKind.HOST, "g0", "host", a)
    prev = b.add(TaskKind.HOST, "g0", "dp", r_prev)
    seg = start
    for d, r in zip(on_stream, red, strict=True):
        seg = b.add(TaskKind.COMPUTE, "g0", "compute", d, [seg])
        prev = b.add(TaskKind.COLLECTIVE, "g0", "dp", r, [seg, prev])
    tl = _list_schedule(b.build())
    return tl.end_s[seg], tl.end_s[prev]


def _summary_chain(
    a: float, r_prev: float, on_stream: list[float], red: list[float]
) -> tuple[float, float]:
    """The same through the summary's tasks: one compute, a lead, one reduction."""
    kappa, total = _lead(on_stream, red)
    b = GraphBuilder()
    start = b.add(TaskKind.HOST, "g0", "host", a)
    b.add(TaskKind.HOST, "g0", "dp", r_prev)
    comp = b.add(TaskKind.COMPUTE, "g0", "compute", sum(on_stream), [start])
    lead = b.add(TaskKind.COMPUTE, "g0", "grad-lead", kappa, [start])
    g = b.add(TaskKind.COLLECTIVE, "g0", "dp", total, [lead])
    tl = _list_schedule(b.build())
    assert tl.start_s[lead] >= a and tl.end_s[lead] <= tl.end_s[comp] * (1 + 1e-12)
    return tl.end_s[comp], tl.end_s[g]


_durations = st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    a=st.floats(0.0, 50.0),
    r_prev=st.floats(0.0, 100.0),
    on_stream=_durations,
    seed=st.integers(0, 2**32 - 1),
)
def test_lead_makes_the_last_reduction_end_as_the_fine_chain(
    a: float, r_prev: float, on_stream: list[float], seed: int
) -> None:
    """Property: for any durations and any state of the gradient stream, the summary's
    reduction ends where the fine chain's last one does, and its lead lies under the compute
    (``0 <= kappa <= sum D``)."""
    rng = random.Random(seed)
    red = [rng.choice([0.0, rng.uniform(0.0, 10.0), rng.uniform(0.0, 0.1)]) for _ in on_stream]
    f_fine, r_fine = _fine_chain(a, r_prev, on_stream, red)
    f_sum, r_sum = _summary_chain(a, r_prev, on_stream, red)
    assert f_sum == pytest.approx(f_fine, rel=1e-12, abs=1e-12)
    assert r_sum == pytest.approx(r_fine, rel=1e-12, abs=1e-12)
    kappa, _ = _lead(on_stream, red)
    assert 0.0 <= kappa <= sum(on_stream) * (1 + 1e-12) + 1e-12


def test_lead_hand_computed() -> None:
    """Segments of 1, 1, 1 s from a = 0 and reductions of 3, 0.5, 0.5 s (stream free): the
    first reduction runs 1 -> 4, the second 4 -> 4.5, the third 4.5 -> 5; kappa = max(1 + 4,
    2 + 1, 3 + 0.5) - 4 = 1, so the summary's reduction runs 1 -> 5."""
    assert _lead([1.0, 1.0, 1.0], [3.0, 0.5, 0.5]) == (1.0, 4.0)
    assert _fine_chain(0.0, 0.0, [1.0, 1.0, 1.0], [3.0, 0.5, 0.5]) == (3.0, 5.0)
    # reductions shorter than the next segment: the last one starts when the compute ends
    # (kappa = max(2 + 2, 4 + 1) - 2 = 3: the summary runs 3 -> 5, the fine last one 4 -> 5)
    assert _lead([2.0, 2.0], [1.0, 1.0]) == (3.0, 2.0)
    assert _fine_chain(0.0, 0.0, [2.0, 2.0], [1.0, 1.0]) == (4.0, 5.0)
    # a busy stream (the previous reduction ends at 10) delays all of them: 10 + 2
    assert _summary_chain(0.0, 10.0, [2.0, 2.0], [1.0, 1.0]) == (4.0, 12.0)


def test_forcing_runs_where_gathers_are_exposed_changes_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run condition is needed: planning runs as if every gather took no time (so the
    gather-bound segments of short sequences form runs) drops gathers the compute waits for,
    and the step comes out shorter than the fine lowering's."""
    from perfmodel.ops import CollectiveOp
    from perfmodel.parallel.lower_hidden import HiddenCollectives

    sc = _scenario(
        software="fsdp", tp=1, pp=1, dp=8, microbatch=1, model_args={**GPT, "seq_len": 128}
    )
    fine = _report(sc, monkeypatch, coarse=False)
    honest = _report(sc, monkeypatch, coarse=True)
    assert honest.iteration_time_s == pytest.approx(fine.iteration_time_s, rel=1e-12)
    orig = HiddenCollectives._gather_plan

    def free_gathers(self, *a):  # type: ignore[no-untyped-def]
        real = self.dp_time

        def no_gather(s, op, nbytes, group="dp"):  # type: ignore[no-untyped-def]
            return 0.0 if op is CollectiveOp.ALLGATHER else real(s, op, nbytes, group)

        self.dp_time = no_gather
        try:
            return orig(self, *a)
        finally:
            del self.dp_time

    monkeypatch.setattr(HiddenCollectives, "_gather_plan", free_gathers)
    forced = _report(sc, monkeypatch, coarse=True)
    assert forced.iteration_time_s < fine.iteration_time_s * (1 - 1e-6)


@pytest.mark.parametrize(
    "kw",
    [
        dict(software="fsdp", tp=1, pp=1, dp=8, microbatch=1),
        dict(software="fsdp", tp=2, pp=2, dp=2, microbatch=4),
        dict(**ZERO3_LIFTED, tp=1, pp=2, dp=4, microbatch=1),  # DeepSpeed refuses it: lifted
        dict(software="megatron-core", tp=1, pp=2, dp=4, microbatch=1),
        dict(  # TP beside the compute, a segment whose collective leaves no tail
            software="megatron-core",
            tp=2,
            pp=2,
            dp=2,
            model_args={**GPT, "hidden": 8192, "heads": 64, "seq_len": 2048},
        ),
        dict(software="fsdp", tp=2, pp=2, dp=2, schedule="interleaved", interleave=2),
    ],
)
def test_segments_outside_runs_lower_as_the_fine_loop(
    kw: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.lower_gather_runs` emits
    the segments outside its runs from precomputed durations, not through ``gather()``,
    ``segment()`` and ``reduce_gradients()``: with every run refused (and no summarised
    backward), the analytic graph is the fine loop's, task for task."""
    from test_coarse_lowering import _inputs  # type: ignore[import-not-found]

    from perfmodel.parallel.lower_hidden import HiddenCollectives
    from perfmodel.parallel.lower_shortcuts import LoweringShortcuts

    inp = _inputs(_scenario(**kw))
    orig = HiddenCollectives._gather_plan

    def no_runs(self, *a):  # type: ignore[no-untyped-def]
        plan = orig(self, *a)
        return None if plan is None else (plan[0], (), plan[2], plan[3])

    hits = _counting(monkeypatch)
    monkeypatch.setattr(HiddenCollectives, "_gather_plan", no_runs)
    monkeypatch.setattr(HiddenCollectives, "hidden_backward", lambda self, *a: None)
    # and no operation tasks (tests/parallel/test_op_tasks.py compares those)
    monkeypatch.setattr(LoweringShortcuts, "OP_TASKS", False)
    shortcut = PipelineLowering(*inp, coarse=True, hidden=True)
    a = shortcut.graph()
    assert hits["gathers"] > 0 and shortcut.hidden_merged == 0
    b = PipelineLowering(*inp, coarse=True, hidden=False).graph()
    assert a.tasks == b.tasks and a.devices == b.devices and a.notes == b.notes
