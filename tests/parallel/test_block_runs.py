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
from perfmodel.workload import build_model
from perfmodel.workload.layers import StackedLayers, Workload

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
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_stacked_report_equals_layer_by_layer(kw: dict[str, Any]) -> None:
    sc = Scenario.from_dict(
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
    makes only the first and last layer of each stage (their input and output sizes)."""
    wl = _stacked(batch_size=2, precision="fp16", tp=2)
    assert isinstance(wl.layers, StackedLayers)
    sc = Scenario.from_dict(
        {
            "system": "dgx1-v100",
            "gpus": 8,
            "model": "gpt",
            "precision": "fp16",
            "microbatch": 2,
            "global_batch": 32,
            "tp": 2,
            "pp": 4,
            "software": "megatron",
            "fidelity": "analytic",
        }
    )
    predict(sc, workload_fn=lambda **kw: wl, baseline=False)
    made = sum(la is not None for la in wl.layers._s.cache)  # type: ignore[attr-defined]
    assert made <= 2 * 4
