"""The lowering's per-plan memos (issue 14 item 1) hit only where the answer is the same.

Each test builds two inputs that a too-coarse key would confuse and checks the second one is
computed afresh: hand-computed values, tiny workloads, no topology.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import ClassVar

import pytest

from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.host_lead import issue_times
from perfmodel.parallel.lower_hidden import HiddenCollectives
from perfmodel.parallel.lowering import build_chunk
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import ParallelismPlan, Recompute
from perfmodel.workload.layers import CommPoint, LayerCost, LayerKind, Workload


def _layer(name: str, fwd_flop: float, block: int | None, params: int = 10) -> LayerCost:
    return LayerCost(
        name=name,
        kind=LayerKind.LINEAR,
        fwd_flop=fwd_flop,
        bwd_input_flop=fwd_flop,
        bwd_weight_flop=fwd_flop,
        params=params,
        fwd_bytes=1.0,
        bwd_bytes=1.0,
        activation_bytes=1.0,
        output_shape=(2, 3),
        block=block,
        fwd_comm=(CommPoint(CollectiveOp.ALLREDUCE, 100.0),),
    )


class _ByName:
    """Prices a layer by its name (a cost model that does not declare ``prices_by_cost_key``):
    relabelled copies of a block cost differently here."""

    precision = Precision.FP32
    times: ClassVar[dict[str, float]] = {"b0.fc": 1.0, "b1.fc": 2.0, "b2.fc": 4.0}

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        t = self.times[layer.name]
        return t, 2 * t, 0.0

    def layer_host_time(self, layer: LayerCost) -> tuple[float, float]:
        return self.times[layer.name], 0.0

    def collective_time(
        self,
        op: CollectiveOp,
        message_bytes: float,
        group: tuple[str, ...],
        algorithm: str = "auto",
    ) -> float:
        return 0.5 * len(group)  # the group decides: a memo across groups would be wrong


class _ByKey(_ByName):
    """Prices by cost key (as :class:`~perfmodel.parallel.costs.SystemCosts` declares)."""

    prices_by_cost_key = True

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        t = layer.fwd_flop
        return t, 2 * t, 0.0

    def layer_host_time(self, layer: LayerCost) -> tuple[float, float]:
        return layer.fwd_flop, 0.0


def _stack() -> Workload:
    """Three one-layer blocks: b1 and b2 relabelled copies of b0, b2's differently named."""
    b0 = _layer("b0.fc", 1.0, 0)
    layers = (b0, b0.relabelled("b1.fc", 1), b0.relabelled("b2.fc", 2))
    return Workload("t", layers, 1, Precision.FP32, 30)


def _chunks(costs: object, memo: dict, groups: list[tuple[str, ...]]) -> list:
    wl, plan = _stack(), ParallelismPlan()
    kw = dict(bucket_bytes=None, first_bucket_bytes=None, by_block=False, seg_memo=memo)
    return [build_chunk(wl, [i], costs, plan, g, **kw) for i, g in enumerate(groups)]  # type: ignore[arg-type]


def test_segment_memo_keys_on_layer_identity_without_prices_by_cost_key() -> None:
    """A cost model pricing by name: each copy's own time (2 s forward for b1, 4 s for b2),
    not b0's, although they share one cost source."""
    memo: dict = {}
    c0, c1, c2 = _chunks(_ByName(), memo, [("g0",), ("g1",), ("g2",)])
    assert [c.segments[0].fwd_s for c in (c0, c1, c2)] == [1.0, 2.0, 4.0]
    assert [c.segments[0].bwd_s for c in (c0, c1, c2)] == [2.0, 4.0, 8.0]
    assert len(memo) == 3


def test_segment_memo_shares_copies_by_cost_key_but_not_tp_groups() -> None:
    """Copies of one block are summed once where the model prices by cost key; the TP time is
    still each chunk's own group's (two GPUs: 0.5 x 2 = 1 s; four: 2 s)."""
    memo: dict = {}
    c0, c1, c2 = _chunks(_ByKey(), memo, [("a", "b"), ("c", "d"), ("e", "f", "g", "h")])
    assert len(memo) == 1
    assert [c.segments[0].fwd_s for c in (c0, c1, c2)] == [1.0, 1.0, 1.0]
    assert [tuple(c.segment_ids(0)) for c in (c0, c1, c2)] == [(0,), (1,), (2,)]
    assert [c.segments[0].tp_fwd_s for c in (c0, c1, c2)] == [1.0, 1.0, 2.0]


def test_segment_memo_misses_on_a_changed_field_or_flag() -> None:
    """A layer that is not a copy (other FLOP) and another ``exclude_sharded`` miss the memo."""
    memo: dict = {}
    plan = ParallelismPlan()
    kw = dict(bucket_bytes=None, first_bucket_bytes=None, by_block=False, seg_memo=memo)
    b0 = _layer("b0.fc", 1.0, 0)
    other = _layer("b1.fc", 3.0, 1)
    wl = Workload("t", (b0, other), 1, Precision.FP32, 20)
    a = build_chunk(wl, [0], _ByKey(), plan, ("g0",), **kw)  # type: ignore[arg-type]
    b = build_chunk(wl, [1], _ByKey(), plan, ("g0",), **kw)  # type: ignore[arg-type]
    assert (a.segments[0].fwd_s, b.segments[0].fwd_s) == (1.0, 3.0)
    c = build_chunk(wl, [0], _ByKey(), plan, ("g0",), exclude_sharded=True, **kw)  # type: ignore[arg-type]
    assert (a.segments[0].dp_params, c.segments[0].dp_params) == (10, 0)
    assert len(memo) == 3


@pytest.mark.parametrize("recompute", [Recompute.NONE, Recompute.FULL])
def test_issue_time_memo_per_chunk(recompute: Recompute) -> None:
    """Host issue time per stage: b0 + b1 on stage 0, b2 on stage 1, each copy its own price
    by name (x2 micro-batches; full recomputation re-issues the forward of block layers)."""
    wl = _stack()
    plan = ParallelismPlan(recompute=recompute)
    kw = dict(bucket_bytes=None, first_bucket_bytes=None, by_block=False)
    chunks = [build_chunk(wl, ids, _ByName(), plan, ("g",), **kw) for ids in ([0], [1], [2])]  # type: ignore[arg-type]
    factor = 2.0 if recompute is Recompute.FULL else 1.0
    out = issue_times(_ByName(), chunks, 2, 1, 2, recompute)  # type: ignore[arg-type]
    assert out == [2 * factor * (1.0 + 4.0), 2 * factor * 2.0]
    # by cost key: the three copies cost alike, but one outside any block (a copy of the same
    # source) is not re-issued under full recomputation
    tail = wl.layers[0].relabelled("tail", None)
    wl2 = Workload("t", (*wl.layers[:2], tail), 1, Precision.FP32, 30)
    chunks2 = [build_chunk(wl2, [i], _ByKey(), plan, ("g",), **kw) for i in range(3)]  # type: ignore[arg-type]
    assert issue_times(_ByKey(), chunks2, 3, 1, 1, recompute) == [factor, factor, 1.0]


@pytest.mark.parametrize("order", list(itertools.permutations(("tp", "pp", "dp"))))
def test_placement_strides_match_the_mixed_radix(order: tuple[str, str, str]) -> None:
    dp, tp, pp = 3, 2, 4
    gpus = tuple(f"g{i}" for i in range(dp * tp * pp))
    pl = Placement(dp, tp, pp, gpus, order)  # type: ignore[arg-type]
    size = {"dp": dp, "pp": pp, "tp": tp}

    def rank(d: int, p: int, t: int) -> int:
        coord, r, stride = {"dp": d, "pp": p, "tp": t}, 0, 1
        for x in order:
            r, stride = r + coord[x] * stride, stride * size[x]
        return r

    for d, p, t in itertools.product(range(dp), range(pp), range(tp)):
        assert pl.rank(d, p, t) == rank(d, p, t)
    for p, t in itertools.product(range(pp), range(tp)):
        assert pl.dp_group(p, t) == tuple(gpus[rank(d, p, t)] for d in range(dp))
    for d, p in itertools.product(range(dp), range(pp)):
        assert pl.tp_group(d, p) == tuple(gpus[rank(d, p, t)] for t in range(tp))
    for d, t in itertools.product(range(dp), range(tp)):
        assert pl.pp_group(d, t) == tuple(gpus[rank(d, p, t)] for p in range(pp))
    assert pl == Placement(dp, tp, pp, gpus, order) and hash(pl) == hash(  # type: ignore[arg-type]
        Placement(dp, tp, pp, gpus, order)  # type: ignore[arg-type]
    )


class _StageHidden(HiddenCollectives):
    """The parts of a lowering :meth:`HiddenCollectives._hidden_op` reads, with a reduction
    time that depends on the stage: ``(s + 1)`` seconds per reduced byte, 2 bytes per
    parameter, no fusion wait, TP on a stream of its own (none here)."""

    tp_overlap = False
    tp_stream = "tp"
    preset = SimpleNamespace(fusion_wait_s=0.0)
    rc = SimpleNamespace(grad_reduce_bytes=2.0)

    def __init__(self) -> None:
        self._rows: dict[tuple[object, ...], tuple] = {}
        self._hidden_seen: dict[tuple[int, bool], tuple] = {}

    def slowed(self, dur: float, comm_s: float) -> float:
        return dur + comm_s

    def reduced_params(self, params: float, expert: float) -> float:
        return params + expert

    def _grad_op(self) -> CollectiveOp:
        return CollectiveOp.REDUCESCATTER

    def dp_time(self, s: int, op: CollectiveOp, nbytes: float, group: str = "dp") -> float:
        return (s + 1) * nbytes

    def _exchanges(self, ch: object) -> bool:
        return False  # no expert or context exchange (``LoweringShortcuts._exchanges``)


def test_hidden_rows_memo_keys_on_the_stage() -> None:
    """Two segments of 1 s backward and one parameter each (2 bytes): on stage 0 reductions of
    2 s each, on stage 1 of 4 s (``dp_time`` by stage), so ``_hidden_op`` gives stage 1
    ``(compute 2, TP 0, lead 1, reductions 8, bytes 4)`` after stage 0's ``(2, 0, 1, 4, 4)``
    with the same rows memo (lead ``max(1 + 8, 2 + 4) - 8``), not stage 0's rows again."""
    seg = SimpleNamespace(bwd_s=1.0, recompute_s=0.0, tp_bwd_s=0.0, params=1.0,
                          expert_params=0.0, ep_cp=(), host_sync_s=0.0)  # fmt: skip
    ch = SimpleNamespace(segments=(seg, seg), values_of=None)
    h = _StageHidden()
    assert h._hidden_row(0, seg, None) == (1.0, 0.0, 1.0, 2.0, 2.0)  # type: ignore[arg-type]
    assert h._hidden_row(1, seg, 3.0) == (4.0, 0.0, 4.0, 2.0, 4.0)  # type: ignore[arg-type]
    assert h._hidden_op(0, ch, False) == (2.0, 0.0, 1.0, 4.0, 4.0)  # type: ignore[arg-type]
    assert h._hidden_op(1, ch, False) == (2.0, 0.0, 1.0, 8.0, 4.0)  # type: ignore[arg-type]
    assert len(h._rows) == 2
    assert h._hidden_seen[(id(ch), False)][0] == 0  # stage 0's summary kept, not given to 1
