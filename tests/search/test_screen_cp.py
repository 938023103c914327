"""The search screen's ring-attention exposure is the lowering's (review10 finding 3): the cost
model's unequal ring steps (``SystemCosts.ring_step_ratio``), Transformer Engine's forward and
backward formulas or PyTorch's ring by the preset's kernels, and the base's ``cp_comm``;
checked against :mod:`perfmodel.parallel.expert`'s formulas applied by hand."""

from __future__ import annotations

import pytest

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import (
    RingSteps,
    ring_exposed_s,
    te_ring_bwd_exposed_s,
    torch_cp_exposed_s,
)
from perfmodel.parallel.placement import DEFAULT_ORDER
from perfmodel.search.screen import PlanScreen
from perfmodel.search.screen_ranks import Ranks
from perfmodel.workload.layers import LayerKind

# short local sequences (4k over cp): the attention is too short to hide the whole exchange
LLAMA = {
    "hidden": 2048,
    "layers": 2,
    "heads": 16,
    "kv_heads": 4,
    "ffn_hidden": 5632,
    "vocab": 32000,
    "seq_len": 4096,
}
# Transformer Engine's ring sends the K/V heads only (4 of 16 query heads above), so its
# exchange hides under this attention; with as many K/V heads as query heads it does not
MHA = {**LLAMA, "kv_heads": 16}


def _screen(software: str, args: dict[str, int] = LLAMA, **kw: object) -> PlanScreen:
    base = dict(
        system="dgx-h100",
        model="llama",
        model_args=args,
        precision="bf16",
        optimizer="adamw",
        software=software,
        global_batch=8,
        **kw,
    )
    return PlanScreen(base)


def _by_hand(scr: PlanScreen, cp: int):  # type: ignore[no-untyped-def]
    """The attention layer of the cp-rank workload, its side communication as the screen
    charges it, its ``(forward, backward)`` seconds, step ratios and per-pass ring seconds
    ``[(op, s), ...]`` (the group of ``cp`` consecutive GPUs)."""
    wl = scr._workload(1, 1, False, 1, cp)
    la = next(x for x in wl.layers if x.kind is LayerKind.ATTENTION)
    costs = scr._system_costs(1)
    lf, lbi, lbw = costs.layer_time(la)
    grp, gc = scr._group(tuple(range(cp)))
    rings = [
        [(c.op, gc.collective_time(c.op, c.message_bytes, grp)) for c in pts if c.group == "cp"]
        for pts in (la.fwd_comm, la.bwd_comm)
    ]
    got = scr._times(1, "none", 1, cp, Ranks.of(DEFAULT_ORDER, cp, 1, 1))([la])[2]
    return got, (lf, lbi + lbw), costs.ring_step_ratio(la), rings


@pytest.mark.parametrize("cp", [2, 4])
def test_te_stack_unequal_steps_and_backward_formula(cp: int) -> None:
    """Megatron-Core (Transformer Engine's ring): forward :func:`ring_exposed_s`, backward
    :func:`te_ring_bwd_exposed_s`, each pass split by the cost model's causal-step ratio
    (multi-head attention: TE's exchange of as many K/V heads as query heads is exposed)."""
    scr = _screen("megatron-core", MHA)
    got, (f, b), ratio, (fr, br) = _by_hand(scr, cp)
    assert ratio[0] > 1.0 and ratio[1] > 1.0  # cuDNN's causal step is slower: not vacuous
    fwd = ring_exposed_s(sum(t for _, t in fr), RingSteps.split(f, cp, ratio[0]))
    bwd = te_ring_bwd_exposed_s(sum(t for _, t in br), RingSteps.split(b, cp, ratio[1]))
    assert got == pytest.approx(fwd + bwd, rel=1e-12)
    assert got > 0.0
    # main's screen: the forward formula on equal steps for both passes
    old = ring_exposed_s(sum(t for _, t in fr), RingSteps.equal(f, cp)) + ring_exposed_s(
        sum(t for _, t in br), RingSteps.equal(b, cp)
    )
    assert got != pytest.approx(old, rel=1e-6)


@pytest.mark.parametrize("cp", [2, 4])
def test_torch_stack_exposes_pytorchs_ring(cp: int) -> None:
    """torchtitan (eager, PyTorch's ``context_parallel``): the all-gather beyond the causal
    step, the dK/dV permutes beyond each next step (:func:`torch_cp_exposed_s`)."""
    scr = _screen("torchtitan")
    got, (f, b), ratio, rings = _by_hand(scr, cp)
    want = 0.0
    for k, (ring, busy) in enumerate(zip(rings, (f, b), strict=True)):
        gather = sum(t for o, t in ring if o is CollectiveOp.ALLGATHER)
        rest = sum(t for _, t in ring) - gather
        want += torch_cp_exposed_s(gather, rest, RingSteps.split(busy, cp, ratio[k]))
    assert got == pytest.approx(want, rel=1e-12)
    assert got > 0.0


def test_allgather_cp_comm_is_exposed_in_full() -> None:
    """``cp_comm=allgather`` in the base: the exchange runs before/after the attention, all
    of it exposed (the screen used the ring's overlap for every ``cp_comm``)."""
    for software in ("megatron-core", "torchtitan"):
        scr = _screen(software, cp_comm="allgather")
        got, _, _, rings = _by_hand(scr, 4)
        assert got == pytest.approx(sum(t for ring in rings for _, t in ring), rel=1e-12)
