"""Context-parallel overlap with unequal ring steps (issue 24): the causal diagonal step and the
unmasked half blocks hide different transfers (Transformer Engine's forward from the diagonal,
its backward ending on it; PyTorch's all-gather under the diagonal, its dK/dV permutes under
half blocks). Golden hand-computed cases, equal steps reproducing the equal-step formulas, and
the cost model's split reaching the segment's exposure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.compute import ComputeParams
from perfmodel.compute.attention import (
    AttentionBackend,
    AttentionEfficiency,
    ring_attention_efficiency,
)
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import (
    CPImpl,
    RingSteps,
    cp_exposed_s,
    ring_exposed_s,
    te_ring_bwd_exposed_s,
    torch_cp_exposed_s,
)
from perfmodel.parallel.plan import CPComm, ParallelismPlan
from perfmodel.parallel.segment_comm import SegmentCommContext, _expert_context_comm
from perfmodel.topology import load_system
from perfmodel.workload import build_model
from perfmodel.workload.kernels import Fusion, KernelRecipe
from perfmodel.workload.layers import LayerKind

times = st.floats(min_value=0.0, max_value=1e3, allow_nan=False)
counts = st.integers(min_value=1, max_value=64)


def test_split_golden() -> None:
    # 10 s over 4 steps, the causal one 1.5x a half block: 1.5 + 3 = 4.5 units of 10/4.5 s
    s = RingSteps.split(10.0, 4, 1.5)
    assert s.rest_s == pytest.approx(10.0 / 4.5)
    assert s.first_s == pytest.approx(15.0 / 4.5)
    assert s.first_s + 3 * s.rest_s == pytest.approx(10.0)
    with pytest.raises(ConfigError, match="ratio"):
        RingSteps.split(1.0, 4, 0.0)


@given(times, counts, st.floats(min_value=0.1, max_value=10.0))
def test_split_keeps_the_pass_time(attention_s: float, cp: int, ratio: float) -> None:
    s = RingSteps.split(attention_s, cp, ratio)
    assert s.first_s + (cp - 1) * s.rest_s == pytest.approx(attention_s, rel=1e-12, abs=1e-12)
    assert s.first_s == pytest.approx(ratio * s.rest_s, rel=1e-12, abs=1e-300)


def test_te_forward_golden() -> None:
    # cp = 4, 6 s of K/V transfers: 2 s each. Diagonal 1.5 s, half blocks 5/6 s:
    # transfer 0 under the diagonal shows 0.5, transfers 1, 2 under half blocks 7/6 each
    steps = RingSteps(4, 1.5, 5.0 / 6.0)
    assert ring_exposed_s(6.0, steps) == pytest.approx(0.5 + 2 * 7.0 / 6.0)
    # cp = 2: the one transfer hides under the diagonal alone
    assert ring_exposed_s(1.0, RingSteps(2, 0.7, 0.5)) == pytest.approx(0.3)
    assert cp_exposed_s(6.0, steps, CPComm.RING) == ring_exposed_s(6.0, steps)
    assert cp_exposed_s(6.0, steps, CPComm.ALLGATHER) == 6.0


def test_te_backward_golden() -> None:
    # cp = 4, 12 s of K/V and dK/dV chunks: u = 12 / 6 = 2 s. Steps 0..2 half blocks of 1 s,
    # step 3 the diagonal of 1.5 s: K/V alone 2 - 1, two K/V + dK/dV 4 - 1 each, dK/dV alone
    # under the diagonal 2 - 1.5
    steps = RingSteps(4, 1.5, 1.0)
    assert te_ring_bwd_exposed_s(12.0, steps) == pytest.approx(1 + 2 * 3 + 0.5)
    assert cp_exposed_s(12.0, steps, CPComm.RING, backward=True) == pytest.approx(7.5)
    # cp = 2: K/V under the half block, dK/dV under the diagonal (u = 1 s)
    assert te_ring_bwd_exposed_s(2.0, RingSteps(2, 0.8, 0.6)) == pytest.approx(0.4 + 0.2)
    assert te_ring_bwd_exposed_s(2.0, RingSteps(2, 5.0, 5.0)) == 0.0
    assert cp_exposed_s(12.0, steps, CPComm.ALLGATHER, backward=True) == 12.0


def test_torch_golden() -> None:
    # all-gather 3 s under a 2.5 s causal step 0; permutes of 1 s (4 s / 4) under 11/6 s
    # half blocks hide, the last shows
    steps = RingSteps(4, 2.5, 11.0 / 6.0)
    assert torch_cp_exposed_s(3.0, 4.0, steps) == pytest.approx(0.5 + 1.0)
    # permutes of 2 s under the half blocks: 3 x (2 - 11/6) + 2
    assert torch_cp_exposed_s(0.0, 8.0, steps) == pytest.approx(3 * (2 - 11 / 6) + 2)
    assert torch_cp_exposed_s(3.0, 4.0, steps, traced=True) == 7.0


def _old_ring(comm_s: float, attention_s: float, cp: int) -> float:
    """Main 42e2f3b's equal-step forward formula, restated."""
    if cp <= 1 or comm_s <= 0:
        return 0.0
    return (cp - 1) * max(0.0, comm_s / (cp - 1) - attention_s / cp)


def _old_torch(gather_s: float, permute_s: float, attention_s: float, cp: int) -> float:
    """Main 42e2f3b's equal-step PyTorch formula, restated."""
    if cp <= 1:
        return 0.0
    step = attention_s / cp
    exposed = max(0.0, gather_s - step)
    if permute_s > 0:
        p = permute_s / cp
        exposed += (cp - 1) * max(0.0, p - step) + p
    return exposed


@given(times, times, counts)
def test_equal_steps_reproduce_the_equal_step_formulas(
    comm_s: float, attention_s: float, cp: int
) -> None:
    steps = RingSteps.equal(attention_s, cp)
    assert ring_exposed_s(comm_s, steps) == _old_ring(comm_s, attention_s, cp)
    assert cp_exposed_s(comm_s, steps, CPComm.RING) == _old_ring(comm_s, attention_s, cp)
    got = torch_cp_exposed_s(comm_s, attention_s / 3, steps)
    assert got == _old_torch(comm_s, attention_s / 3, attention_s, cp)


@given(
    times, times, st.integers(min_value=2, max_value=64), st.floats(min_value=1.0, max_value=3.0)
)
def test_unequal_step_exposure_is_bounded(
    comm_s: float, attention_s: float, cp: int, ratio: float
) -> None:
    """With the pass's time fixed and any diagonal ratio, the exposure of either TE pass lies
    between the transfers beyond everything and the transfers in full."""
    steps = RingSteps.split(attention_s, cp, ratio)
    for got in (ring_exposed_s(comm_s, steps), te_ring_bwd_exposed_s(comm_s, steps)):
        assert 0.0 <= got <= comm_s + 1e-9
        assert got >= comm_s - attention_s - 1e-9 * max(1.0, comm_s)


@given(
    times,
    times,
    st.floats(min_value=1.0, max_value=3.0),
    st.floats(min_value=1.0, max_value=3.0),
)
def test_a_longer_diagonal_hides_more_forward_at_cp2(
    comm_s: float, attention_s: float, r0: float, r1: float
) -> None:
    """At ``cp = 2``, with the pass's time fixed, a longer diagonal hides at least as much of
    the forward (its one transfer runs under the diagonal) and at most as much of the TE
    backward (its K/V transfer runs under the half block, which shrinks)."""
    lo, hi = sorted((r0, r1))
    a, b = RingSteps.split(attention_s, 2, lo), RingSteps.split(attention_s, 2, hi)
    tol = 1e-12 * max(1.0, comm_s, attention_s)
    assert ring_exposed_s(comm_s, b) <= ring_exposed_s(comm_s, a) + tol
    assert te_ring_bwd_exposed_s(comm_s, b) >= te_ring_bwd_exposed_s(comm_s, a) - tol


def test_a_longer_diagonal_need_not_hide_more_forward_golden() -> None:
    """Beyond ``cp = 2`` the forward is not monotone in the ratio: cp = 4, 6 s of attention,
    1.9 s per transfer. Equal steps (1.5 s): 3 x 0.4 = 1.2 s. Ratio 1.5 (diagonal 2 s, half
    blocks 4/3 s): 0 + 2 x (1.9 - 4/3) = 17/15 s, less. Ratio 3 (diagonal 3 s, half blocks
    1 s): 0 + 2 x 0.9 = 1.8 s, more: the transfers under the half blocks lose what the
    diagonal's gains."""
    got = [ring_exposed_s(5.7, RingSteps.split(6.0, 4, r)) for r in (1.0, 1.5, 3.0)]
    assert got == pytest.approx([1.2, 17 / 15, 1.8])


def test_ring_attention_keeps_the_causal_over_unmasked_ratio() -> None:
    c = AttentionEfficiency(0.4, 0.3, AttentionBackend.CUDNN, "t")
    n = AttentionEfficiency(0.6, 0.5, AttentionBackend.CUDNN, "t")
    assert ring_attention_efficiency(c, n, 4).causal_over_rest == pytest.approx((1.5, 5 / 3))
    assert ring_attention_efficiency(c, n, 1).causal_over_rest == (1.0, 1.0)
    assert ring_attention_efficiency(c, c, 4).causal_over_rest == (1.0, 1.0)


def _attention(cp: int):
    """Llama, head dimension 128, 8k tokens over ``cp``, Transformer Engine's kernels: the
    ring attention layer."""
    te = KernelRecipe(Fusion.TE)
    w = build_model(
        "llama",
        batch_size=1,
        precision="bf16",
        hidden=1024,
        layers=1,
        heads=8,
        kv_heads=8,
        ffn_hidden=2048,
        vocab=1024,
        seq_len=8192,
        cp=cp,
        kernels=te,
    )
    return next(la for la in w.layers if la.kind is LayerKind.ATTENTION)


def test_system_costs_give_the_causal_step_longer_golden() -> None:
    """cuDNN on H100 at 4k local tokens (FlashAttention-3 paper Fig. 5-6, as
    tests/compute/test_ring_attention.py): causal forward 518 TFLOP/s, unmasked 609; the
    backward's causal step at 499 x 518/609 against 499. Both passes: the diagonal takes
    609/518 = 1.176 of a half block's time."""
    from perfmodel.parallel.costs import SystemCosts

    h100 = get_gpu("H100-SXM5-80GB")
    params = ComputeParams.for_gpu(h100, attention_backend=AttentionBackend.CUDNN)
    costs = SystemCosts(load_system("dgx-h100"), Precision.BF16, compute_params=params)
    att = _attention(2)
    fwd, bwd = costs.ring_step_ratio(att)
    assert fwd == pytest.approx(609 / 518) and bwd == pytest.approx(609 / 518)
    assert costs.ring_step_ratio(_attention(1)) == (1.0, 1.0)


class _Costs:
    """20 MB/s collectives; 1 s of every layer's forward and of its backward."""

    def concurrent_time(self, op, nbytes, groups, algorithm):
        return nbytes / 2e7

    def layer_time(self, layer):
        return (1.0, 1.0, 0.0)


class _SplitCosts(_Costs):
    """The same, the causal step 1.5x a half block in both passes."""

    def ring_step_ratio(self, layer):
        return (1.5, 1.5)


def test_segment_exposure_reads_the_step_ratio() -> None:
    """A TE ring layer at cp = 2 (its K/V 1.68 s at 20 MB/s) beside 1 s of attention per pass. Forward: its one transfer
    hides under the 0.5 s of an equal step, under the 0.6 s diagonal (1.5 / 2.5 of the pass)
    with the ratio. Backward (u = the pass's transfers / 2): K/V under the half block, dK/dV
    under the diagonal."""
    att = _attention(2)
    groups = {"cp": (("g0", "g1"),)}
    plan = ParallelismPlan(dp=1, cp=2)

    def shown(costs, phase):
        ctx = SegmentCommContext(costs, groups, "auto", plan, CPImpl.TE_P2P)
        got = _expert_context_comm(att, (1.0, 1.0), ctx)
        return sum(c.duration_s for c in got if c.phase == phase)

    fwd = sum(c.message_bytes for c in att.fwd_comm) / 2e7
    u = sum(c.message_bytes for c in att.bwd_comm) / 2e7 / 2
    assert att.fwd_comm[0].op is CollectiveOp.ALLGATHER
    assert fwd > 0.6  # partly exposed, so the step it hides under shows
    assert shown(_Costs(), "F") == pytest.approx(fwd - 0.5)
    assert shown(_SplitCosts(), "F") == pytest.approx(fwd - 0.6)
    assert shown(_Costs(), "B") == pytest.approx(2 * max(0.0, u - 0.5))
    assert shown(_SplitCosts(), "B") == pytest.approx(max(0.0, u - 0.4) + max(0.0, u - 0.6))
