"""Context-parallel attention accounting in ``Net.attention``: ``cp`` ring steps (a causal
``s x s`` block, then unmasked ``s x s/2`` ones) of one kernel call each and the FP32 merge of
their partial results."""

from __future__ import annotations

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net, RankLayout
from perfmodel.workload.kernels import Fusion, KernelRecipe
from perfmodel.workload.layers import LayerKind


def _attention(cp: int, s: int = 1024, b: int = 2, heads: int = 8, kv: int = 2, d: int = 64):
    # Transformer Engine's ring (Megatron-Core kernels): the fused merge, GQA native
    net = Net(b, Precision.BF16, RankLayout(cp=cp), kernels=KernelRecipe(fusion=Fusion.TE))
    net.attention("a", b, s, heads, kv, d, causal=True)
    return net.layers


def test_one_rank_has_no_merge() -> None:
    (att,) = _attention(1)
    assert att.kind is LayerKind.ATTENTION and (att.kernels, att.bwd_kernels) == (2, 6)
    assert (att.gemm.m, att.gemm.n, att.gemm.batch) == (1024, 1024, 16)


def test_ring_steps_shape_kernels_and_merge_bytes() -> None:
    cp, s, b, heads, kv, d = 4, 1024, 2, 8, 2, 64
    att, merge = _attention(cp, s, b, heads, kv, d)
    # cp calls of equal FLOP; the layer carries step 0's causal s x s block and cp once
    assert (att.gemm.m, att.gemm.n, att.gemm.k, att.gemm.batch) == (s, s, d, b * heads)
    assert att.ring_steps == cp
    # one call: the causal-halved QK^T + PV of the block, i.e. its full QK^T
    assert att.gemm.flop == pytest.approx(att.fwd_flop / cp)
    assert (att.kernels, att.bwd_kernels) == (2 * cp, 6 * cp)
    # merge: (10 cp + 6) bytes per element of O forward, of Q, K, V backward
    o_el, q_el, kv_el = b * s * heads * d, b * s * heads * d, b * s * kv * d
    assert merge.name == "a_cp_merge" and merge.kind is LayerKind.ELEMENTWISE
    assert merge.fwd_bytes == pytest.approx(46 * o_el)
    assert merge.bwd_bytes == pytest.approx(46 * (q_el + 2 * kv_el))
    assert merge.activation_bytes == 0 and (merge.kernels, merge.bwd_kernels) == (5, 5)


def test_merge_share_falls_with_the_local_sequence() -> None:
    """Merges grow as cp x s, the attention as cp x s^2: longer chunks hide them."""

    def share(s: int) -> float:
        att, merge = _attention(4, s)
        return merge.fwd_bytes / att.fwd_flop

    assert share(4096) == pytest.approx(share(1024) / 4)
