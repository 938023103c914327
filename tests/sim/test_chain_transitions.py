"""The breakdown's compute stream of a device's own flat gather chains as transitions
(``step_breakdown._flat_split`` / ``_sweep_split``, wave 14): ``_class_seconds`` must give the
seconds of every event swept (``_sweep(*_class_events(...))``, the path before) bit for bit and
with the classes in the same order, on every device of lowered steps (FSDP and DeepSpeed ZeRO-3
chains with and without hidden gather runs, Megatron-Core's first-forward chain, other
devices' chains), over the whole step and windows inside it; and fall back to every event
where the transitions are out of time order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_compare import gpt_scenario, pipelined_zero

import perfmodel.api as api
from perfmodel.api import predict
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.taskgraph import (
    ChainSegment,
    ChainStatic,
    CommKind,
    CommSpec,
    GraphBuilder,
    Task,
    TaskKind,
)
from perfmodel.report import step_breakdown as sb
from perfmodel.sim.engine import CoarseTimeline, PeriodicTimeline, Timeline, _list_schedule

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 8000}


def _events_sweep(tl: Timeline, dev: str, t0: float, t1: float) -> list[tuple[str, float]]:
    """The seconds per class of every event swept (the path without transitions)."""
    return list(sb._sweep(*sb._class_events(tl, dev), t0, t1).items())


def _split_devices(tl: Timeline, windows: list[tuple[float, float]]) -> int:
    """Assert ``_class_seconds`` equals :func:`_events_sweep` on every device of ``tl`` over
    each window (``==`` on the items: values bit for bit, classes in the same order); the
    number of devices whose own flat chains gave transitions."""
    split = 0
    for dev in tl.graph.devices:
        ct: list[float] = []
        sb._class_events(tl, dev, ct, [])
        split += bool(ct)
        for t0, t1 in windows:
            assert list(sb._class_seconds(tl, dev, t0, t1).items()) == _events_sweep(
                tl, dev, t0, t1
            ), (dev, t0, t1)
    return split


def _timeline(software: str, monkeypatch: pytest.MonkeyPatch, **plan: object) -> Timeline:
    """The analytic timeline ``predict`` returns (its coarse or short schedule: the one the
    breakdown sweeps); DeepSpeed ZeRO-3 with pipelining on a stack stating it runs it
    (``report_compare.pipelined_zero``: DeepSpeed's own ``PipelineEngine`` refuses it)."""
    monkeypatch.setattr(api, "_REPORTS", {})
    # deepspeed-zero3 with pp > 1 (gpt_scenario's pp=2 by default): a stack that runs it
    keys = {**pipelined_zero(software, int(plan.get("pp", 2))), **plan}  # type: ignore[call-overload]
    tl = predict(gpt_scenario(software=software, **keys), baseline=False).timeline
    if isinstance(tl, PeriodicTimeline):
        tl = tl.short
    if isinstance(tl, CoarseTimeline):
        tl = tl.coarse
    return tl


#: A GPT whose stages hold three or more of Megatron-Core's gradient buckets (its first forward
#: a chain: ``test_gather_chains.BUCKETED_GPT``).
BUCKETED_GPT = {"layers": 32, "hidden": 2048, "heads": 16, "seq_len": 1024, "vocab": 8000}


@pytest.mark.parametrize(
    "software, plan, flat, chains",
    [
        # ZeRO-3 chains of one-piece segments, one device per stage (gathers every micro-batch:
        # DeepSpeed's ZeRO-3; pipelined FSDP2 gathers once a step, Recipe.gather_per_step)
        ("deepspeed-zero3", {"dp": 8, "tp": 2, "pp": 2, "nodes": 4}, True, 32),
        (
            "deepspeed-zero3",
            {"dp": 4, "tp": 2, "pp": 2, "nodes": 2, "schedule": "interleaved", "interleave": 2},
            True,
            64,
        ),
        # the ZeRO-3 groups across the two servers (the order tp,pp,dp; the default tp,dp,pp
        # keeps a stage's group in one server, where the gathers hide)
        (
            "deepspeed-zero3",
            {"dp": 4, "tp": 2, "pp": 2, "nodes": 2, "placement": "tp,pp,dp"},
            True,
            64,
        ),
        ("torchtitan", {"dp": 8, "tp": 2, "pp": 1, "nodes": 2}, True, 16),
        # Megatron-Core's and NeMo's first forward as a chain (1F1B, distributed optimizer)
        (
            "megatron-core",
            {"dp": 4, "tp": 2, "pp": 2, "nodes": 2, "model_args": BUCKETED_GPT},
            True,
            2,
        ),
        ("nemo", {"dp": 4, "tp": 2, "pp": 2, "nodes": 2, "model_args": BUCKETED_GPT}, True, 2),
        # hidden gather runs (no flat chains: every event, as before)
        ("deepspeed-zero3", {"dp": 2, "tp": 8, "pp": 2, "nodes": 4, "microbatch": 8}, False, 16),
        ("deepspeed-zero3", {"dp": 8, "tp": 1, "pp": 2, "nodes": 2}, False, 32),
    ],
)
def test_class_seconds_with_transitions_is_the_event_sweep(
    monkeypatch: pytest.MonkeyPatch, software: str, plan: dict, flat: bool, chains: int
) -> None:
    tl = _timeline(software, monkeypatch, **{"model_args": GPT, "global_batch": 64, **plan})
    T = tl.makespan_s
    windows = [(0.0, T), (0.0, T * 1.25), (T * 0.3, T * 0.6), (T * 0.5, T * 0.5 + 1e-4)]
    # chains either way, as many as the case's kind lowers (measured; a case that stops
    # chaining per micro-batch, as pipelined fsdp did in session 19, falls below)
    assert len(tl.chains) >= chains
    assert (_split_devices(tl, windows) > 0) == flat  # the shortcut taken where it applies


@settings(max_examples=12, deadline=None)
@given(
    lo=st.floats(0.0, 1.0),
    width=st.floats(0.0, 1.0),
    interleaved=st.booleans(),
    software=st.sampled_from(["fsdp", "deepspeed-zero3"]),
)
def test_any_window_of_a_chained_step(
    lo: float, width: float, interleaved: bool, software: str
) -> None:
    """Windows drawn anywhere in (and past) a chained step: the transitions left after the
    last event below the window's end, the first event at or after it, a window before any
    transition."""
    with pytest.MonkeyPatch.context() as m:
        extra = {"schedule": "interleaved", "interleave": 2} if interleaved else {}
        # gather-bound: data-parallel groups across the two servers (the order tp,pp,dp;
        # pipelined fsdp chains its first forward only, deepspeed-zero3 every micro-batch)
        tl = _timeline(software, m, model_args=GPT, global_batch=32, dp=4, tp=2, pp=2,
                       nodes=2, placement="tp,pp,dp", **extra)  # fmt: skip
    T = tl.makespan_s
    t0 = lo * T
    assert _split_devices(tl, [(t0, t0 + width * T)]) > 0


def test_transitions_out_of_order_fall_back_to_every_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A segment whose TP piece is negative (``e < h``; no event: ``e > h`` fails) lets the
    next segment's compute start before the first's end (``cs_1 = max(e_0, g_1's end) <
    h_0``): its transitions are not in time order, so ``_flat_split`` refuses
    (``_Unordered``) and ``_class_seconds`` sweeps every event, as the events say: the two
    computes overlap on the stream and count once."""
    tl, c = _lone_chain(((1.0, 1.0, -0.5), (0.1, 1.0, 0.25), (0.1, 1.0, 0.25)))
    rows = tl.chain_rows(c)
    assert rows[1][2] < rows[0][3]  # cs_1 < h_0: the second compute starts in the first
    got = _falls_back(tl, monkeypatch)
    # the hand count: computes [1, 2] and [1.5, 2.5] (one compute second from 1 to 2.5), TP
    # pieces of the later two segments, gathers before the first compute
    assert got["compute"] == pytest.approx(1.5 + 1.0)


def test_tp_piece_out_of_order_falls_back_to_every_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A segment whose first compute is negative (``h < cs``: no compute event) but whose TP
    piece is not (``e > h``) puts that piece before the previous segment's end (``h_1 = cs_1 +
    C_1 < e_0 = cs_1``): ``_flat_split``'s check of the TP-only branch refuses
    (``_Unordered``) and ``_class_seconds`` sweeps every event, as the events say."""
    tl, c = _lone_chain(((1.0, 1.0, 0.25), (0.1, -0.5, 0.25), (0.1, 1.0, 0.25)))
    rows = tl.chain_rows(c)
    # segment 1: its compute [2.25, 1.75] negative, its TP piece [1.75, 2.0] before e_0 = 2.25
    assert rows[1][3] < rows[1][2] and rows[1][3] < rows[1][4] and rows[1][3] < rows[0][4]
    _falls_back(tl, monkeypatch)


def _g0_static(segments: tuple[tuple[float, float, float], ...]) -> ChainStatic:
    """A flat ZeRO gather chain on g0 (group g0, g1) of ``(gather, compute, TP piece)``
    segments, each reducing 0.5 s."""
    g_spec = CommSpec(CollectiveOp.ALLGATHER, 1e6, ("g0", "g1"), "auto", CommKind.ZERO)
    r_spec = CommSpec(CollectiveOp.REDUCESCATTER, 1e6, ("g0", "g1"), "auto", CommKind.DP)
    segs = tuple(
        ChainSegment(g, cmp, (tp,), 0.5, g_spec.group, r_spec.group) for g, cmp, tp in segments
    )
    g_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "zero", 0.0, comm=g_spec)
    r_proto = Task(-1, TaskKind.COLLECTIVE, "g0", "dp", 0.0, comm=r_spec)
    static = ChainStatic(segs, "zero", "dp", True, g_proto, r_proto, frozenset(("g0", "g1")), None)
    assert static.flat is not None
    return static


def _lone_chain(segments: tuple[tuple[float, float, float], ...]) -> tuple[Timeline, int]:
    """The list schedule of :func:`_g0_static`'s chain alone, then an optimizer step, and the
    chain's task id."""
    b = GraphBuilder()
    c = b.add_chain("g0", [], "F0", 0, 0, (_g0_static(segments), -1, -1))
    b.add(TaskKind.OPTIMIZER, "g0", "compute", 1.0, [c])
    return _list_schedule(b.build()), c


def _falls_back(tl: Timeline, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Assert ``_flat_split`` refuses ``tl``'s g0 chain (``_Unordered``) and ``_class_seconds``
    then sweeps every event (the transitions' sweep never runs); the seconds."""
    with pytest.raises(sb._Unordered):
        sb._class_events(tl, "g0", [], [])
    swept: list[bool] = []
    real = sb._sweep_split
    monkeypatch.setattr(sb, "_sweep_split", lambda *a: swept.append(True) or real(*a))
    T = tl.makespan_s
    got = sb._class_seconds(tl, "g0", 0.0, T)
    assert not swept and list(got.items()) == _events_sweep(tl, "g0", 0.0, T)
    return got


def test_hand_computed_transitions() -> None:
    """Three one-piece segments on g0 after a 1 s compute (the hand-computed chain of
    ``test_gather_chains``: gathers [0, 2], [2, 2.5], [3, 3.5]; computes [2, 3] + TP [3,
    3.25], [3.25, 4.25], [4.25, 5.25]; reductions [3.25, 3.75], [4.25, 4.75], [5.25, 5.75]):
    the transitions ``_flat_split`` lists (zero-length TP pieces give none) and the seconds."""
    static = _g0_static(((2.0, 1.0, 0.25), (0.5, 1.0, 0.0), (0.5, 1.0, 0.0)))
    b = GraphBuilder()
    x = b.add(TaskKind.COMPUTE, "g0", "compute", 1.0)
    b.add_chain("g0", [x], "F0", 0, 0, (static, -1, x))
    tl = _list_schedule(b.build())
    ct: list[float] = []
    tk: list[str] = []
    events, _ = sb._class_events(tl, "g0", ct, tk)
    assert ct == [2.0, 3.0, 3.25, 3.25, 4.25, 4.25, 5.25]
    assert tk == ["0|compute", "0|comm:tp", "~", "0|compute", "~", "0|compute", "~"]
    # the plain compute [0, 1], gathers and reductions stay events
    assert sorted({k for _, _, k in events}) == ["0|compute", "1|comm:dp", "1|comm:zero"]
    got = sb._class_seconds(tl, "g0", 0.0, 6.0)
    assert got == {"compute": 4.0, "comm:zero": 1.0, "comm:tp": 0.25, "comm:dp": 0.5,
                   "bubble": 0.25}  # fmt: skip
    assert list(got.items()) == _events_sweep(tl, "g0", 0.0, 6.0)
