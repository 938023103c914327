"""Identical transformer blocks cost once (issue 14 item 1): a zoo transformer's stack is kept as
its block and a count (``StackedLayers``), and the lowering sums a run of ``n`` identical blocks
once and multiplies (``block_runs``). Every number of the report must stay within 1e-12 relative
of the layer-by-layer answer (the same layers as independent objects, which nothing merges), and
the lowering must not make the stack's copies.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.dtypes import Precision
from perfmodel.parallel.host_lead import issue_times
from perfmodel.parallel.lowering import _segment_sums, build_chunk
from perfmodel.parallel.plan import ParallelismPlan, Recompute
from perfmodel.workload import build_model
from perfmodel.workload.layers import ExpertRole, LayerCost, LayerKind, StackedLayers, Workload

_ARGS = {"hidden": 256, "layers": 12, "heads": 8, "seq_len": 128, "vocab": 1000}


def _stacked(**kw: Any) -> Workload:
    return build_model("gpt", **_ARGS, **kw)


def _layer_by_layer(**kw: Any) -> Workload:
    """The same layers as independent objects (``replace`` drops a copy's link to its block),
    as a plain tuple: every sum goes layer by layer, as before the stack was kept."""
    wl = _stacked(**kw)
    return replace(wl, layers=tuple(replace(la) for la in wl.layers))


def _numbers(x: Any, path: str = "") -> dict[str, Any]:
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _numbers(val, f"{path}.{key}").items()}
    if isinstance(x, (list, tuple)):
        return {k: v for i, val in enumerate(x) for k, v in _numbers(val, f"{path}[{i}]").items()}
    return {path: x}


CASES = [
    {"tp": 2, "pp": 2, "software": "megatron"},  # bucket-less segments, pipeline cut mid-stack
    {"tp": 2, "pp": 4, "software": "megatron"},  # 12 blocks over 4 stages
    {"pp": 2, "interleave": 2, "schedule": "interleaved", "software": "megatron"},
    {"pp": 2, "software": "pytorch-ddp"},  # gradient buckets (overlap): segments cut blocks
    {"software": "deepspeed-zero3"},  # ZeRO-3: one segment per block
    {"tp": 2, "pp": 2, "recompute": "full", "software": "megatron"},
    {"tp": 2, "pp": 2, "recompute": "selective", "software": "megatron"},
    # stages holding exactly one whole copy of the block (a piece of one copy is read as the
    # copy's own layers: the template's carry another block index, which merged two blocks in
    # the full-recomputation memory and the block counts)
    {"tp": 2, "pp": 4, "recompute": "full", "software": "megatron"},
    {"pp": 4, "interleave": 3, "schedule": "interleaved", "recompute": "full"},
]


def _scenario(**kw: Any) -> Scenario:
    """The 12-layer GPT of :data:`_ARGS` on one DGX-1, analytic, with the plan ``kw``."""
    return Scenario.from_dict(
        {
            "system": "dgx1-v100",
            "gpus": 8,
            "model": "gpt",
            "precision": "fp16",
            "microbatch": 2,
            "global_batch": 32,
            "fidelity": "analytic",
            **kw,
        }
    )


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_stacked_report_equals_layer_by_layer(kw: dict[str, Any]) -> None:
    sc = _scenario(**kw)
    a = _numbers(predict(sc, workload_fn=_stacked, baseline=False).to_dict())
    b = _numbers(predict(sc, workload_fn=_layer_by_layer, baseline=False).to_dict())
    assert a.keys() == b.keys()
    for k, x in a.items():
        y = b[k]
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0) or x == y, (k, x, y)
        else:
            assert x == y, (k, x, y)


def test_lowering_makes_no_copy_of_the_stack() -> None:
    """A 4-stage lowering of 12 blocks reads the block once: of the 11 copies' layers it
    makes only the first and last layer of each stage (their input and output sizes), and the
    layers of a stage's copy where it holds exactly one whole copy (read as its own layers:
    :meth:`StackedLayers.pieces`, the template's carry another block index)."""
    wl = _stacked(batch_size=2, precision="fp16", tp=2)
    assert isinstance(wl.layers, StackedLayers)
    sc = _scenario(tp=2, pp=4, software="megatron")
    predict(sc, workload_fn=lambda **kw: wl, baseline=False)
    stack = wl.layers._s  # type: ignore[attr-defined]
    made = sum(la is not None for la in stack.cache)
    per_stage = 2 + len(stack.template)  # first + last layer, at most one whole copy
    assert made <= 4 * per_stage < stack.copies * len(stack.template)


class _ByKey:
    """Prices a layer by its cost fields (``prices_by_cost_key``): seconds = forward FLOP."""

    precision = Precision.FP32
    prices_by_cost_key = True

    def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
        return layer.fwd_flop, 2 * layer.fwd_flop, 0.0

    def layer_host_time(self, layer: LayerCost) -> tuple[float, float]:
        return layer.fwd_flop, 0.0

    def collective_time(self, *_: object) -> float:
        return 0.0


_TEMPLATE = (
    LayerCost("layer1.a", LayerKind.LINEAR, 0.1, 0.1, 0.1, 3, 1.0, 1.0, 1.0, (2,), block=1),
    LayerCost("layer1.b", LayerKind.LINEAR, 0.7, 0.7, 0.7, 5, 1.0, 1.0, 1.0, (2,), block=1),
)


def _blocks(copies: int) -> StackedLayers:
    """Block 1 and ``copies`` copies of it, one template object for every count."""
    return StackedLayers.of(_TEMPLATE, _TEMPLATE, copies, (), first=2, strip=7, block0=2)


def test_memos_miss_for_another_count_of_the_same_block() -> None:
    """The segment and issue-time memos key a run by its block and its count: 3 and 4 copies
    of the same block share the block's ids but not the answer (hand-computed: a block is
    0.1 + 0.7 s of forward)."""
    costs, memo = _ByKey(), {}
    short, long = _blocks(2), _blocks(3)  # 3 and 4 blocks, one template
    a = _segment_sums(short, costs, False, None, memo)  # type: ignore[arg-type]
    b = _segment_sums(long, costs, False, None, memo)  # type: ignore[arg-type]
    assert (a[0], a[4]) == (pytest.approx(3 * 0.8), 3 * 8)
    assert (b[0], b[4]) == (pytest.approx(4 * 0.8), 4 * 8)
    wl = Workload("w", long, 1, Precision.FP32, 32)
    plan = ParallelismPlan(pp=2)
    chunks = [
        build_chunk(
            wl, ids, costs, plan, ("g",), bucket_bytes=None, first_bucket_bytes=None, by_block=False
        )
        for ids in ([0, 1], [2, 3, 4, 5, 6, 7])  # block 1 / blocks 2-4 (3 copies)
    ]
    assert [c.blocks for c in chunks] == [1, 3]
    assert issue_times(costs, chunks, 2, 1, 1, Recompute.NONE) == [
        pytest.approx(0.8),
        pytest.approx(3 * 0.8),
    ]


def test_routed_expert_parameters_of_a_stack_count_every_copy() -> None:
    """A stacked block with a routed-expert layer (``ExpertRole.EXPERT``, 5 parameters of its
    11): ``_segment_sums`` of the block and 3 copies counts 4 x 5 = 20 routed-expert parameters
    (index 8) and 4 x 11 = 44 in all (index 4), as the same layers summed one by one; the run of
    copies is summed once and multiplied (``expert += n * uexpert``)."""
    template = (
        LayerCost("layer1.a", LayerKind.LINEAR, 0.1, 0.1, 0.1, 6, 1.0, 1.0, 1.0, (2,), block=1),
        replace(
            LayerCost("layer1.e", LayerKind.LINEAR, 0.7, 0.7, 0.7, 5, 1.0, 1.0, 1.0, (2,), block=1),
            expert_role=ExpertRole.EXPERT,
        ),
    )
    stacked = StackedLayers.of(template, template, 3, (), first=2, strip=7, block0=2)
    costs = _ByKey()
    fast = _segment_sums(stacked, costs, False, None, {})  # type: ignore[arg-type]
    slow = _segment_sums(tuple(replace(la) for la in stacked), costs, False, None, {})  # type: ignore[arg-type]
    assert (fast[4], fast[8]) == (44, 20)
    assert (slow[4], slow[8]) == (44, 20)
