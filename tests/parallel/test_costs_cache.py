"""SystemCosts caches layer times by ``LayerCost.cost_key`` (identical blocks cost once) and
memoises collectives by (op, bytes, group, algorithm)."""

from __future__ import annotations

from dataclasses import replace

from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import SystemCosts
from perfmodel.topology import load_system
from perfmodel.workload import build_model


def test_identical_blocks_share_one_layer_time() -> None:
    costs = SystemCosts(load_system("dgx-a100"), Precision.parse("bf16"))
    wl = build_model("gpt", batch_size=1, precision="bf16", layers=4, hidden=256, heads=4)
    a = next(la for la in wl.layers if la.block == 1 and la.gemm is not None)
    b = next(la for la in wl.layers if la.block == 3 and la.name.endswith(a.name[7:]))
    assert a.name != b.name and a.cost_key() == b.cost_key()
    assert costs._layer(a) is costs._layer(b)
    assert costs._layer(replace(a, name="x", block=None)) is costs._layer(a)
    # a different cost field is a different entry
    assert costs._layer(replace(a, fwd_flop=2 * a.fwd_flop)) is not costs._layer(a)


def test_relabelled_equals_replace() -> None:
    wl = build_model("gpt", batch_size=1, layers=2, hidden=256, heads=4)
    la = wl.layers[-5]
    assert la.relabelled("y", 9) == replace(la, name="y", block=9)


def test_collective_memo_returns_the_model_time() -> None:
    topo = load_system("dgx-a100")
    costs = SystemCosts(topo, Precision.parse("bf16"))
    group = topo.gpus[:8]
    t = costs.collective_time(CollectiveOp.ALLREDUCE, 2**30, group)
    ref = costs.comm.collective(CollectiveOp.ALLREDUCE, 2**30, tuple(group)).time_s
    assert t == ref > 0
    assert costs.collective_time(CollectiveOp.ALLREDUCE, 2**30, list(group)) == t
