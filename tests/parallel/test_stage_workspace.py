"""Transient memory of a stage per training recipe (issue 24): the loss's backward under
PyTorch eager (torchtitan) and FSDP2's gathered weights and unsharded gradients under
``torch.distributed.pipelining``. Hand-computed byte counts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.dtypes import Precision
from perfmodel.parallel.lowering import Chunk, Segment
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.recipe import CrossEntropy, build_recipe
from perfmodel.parallel.software import get_preset
from perfmodel.parallel.stage_memory import stage_memory
from perfmodel.workload import memory as wmem
from perfmodel.workload.layers import LayerCost, LayerKind
from perfmodel.workload.memory import Optimizer


def _layer(name: str, kind: LayerKind, block: int | None, act: float, out: tuple[int, ...]):
    return LayerCost(
        name=name, kind=kind, fwd_flop=1.0, bwd_input_flop=1.0, bwd_weight_flop=1.0, params=0,
        fwd_bytes=1.0, bwd_bytes=1.0, activation_bytes=act, output_shape=out, block=block,
    )  # fmt: skip


class _Prec:
    precision = Precision.BF16


# 8 tokens, vocabulary 100: the LM head's bf16 logits (8, 100) and the loss's saved FP32
# log-probabilities 8 x 100 x 4 = 3,200 B
LAYERS = (
    _layer("embed", LayerKind.EMBEDDING, None, 16.0, (8, 4)),
    _layer("b0", LayerKind.LINEAR, 0, 64.0, (8, 4)),
    _layer("lm_head", LayerKind.LINEAR, None, 64.0, (8, 100)),
    _layer("loss", LayerKind.LOSS, None, 3200.0, (1,)),
)


def _memory(plan: ParallelismPlan, recipe, params: int = 0):
    seg = Segment(0.0, 0.0, 0.0, 0.0, 0.0, params, 0.0, 0.0)
    chunk = Chunk((seg,), 0.0, 0.0, 1, LAYERS)
    return stage_memory(
        [chunk], plan=plan, costs=_Prec(), optimizer=Optimizer.ADAM, in_flight=1,  # type: ignore[arg-type]
        capacity_bytes=1e12, comm_buffer_bytes=0.0, recipe=recipe,
    )  # fmt: skip


def test_eager_fp32_loss_backward_holds_two_more_fp32_logits() -> None:
    """torchtitan's loss: saved FP32 log-probs (3,200 B, activations) and in backward two FP32
    gradients of the same size (6,400 B) against the generic largest pair, the bf16 logits and
    their gradient (2 x 8 x 100 x 2 = 3,200 B): the workspace grows by 3,200 B before the
    allocator's fragmentation share."""
    plan = ParallelismPlan(dp=8, fsdp=True)
    rc = build_recipe(get_preset("torchtitan"), Precision.BF16, Optimizer.ADAM, plan)
    assert rc.cross_entropy is CrossEntropy.EAGER_FP32
    assert rc.cross_entropy.transient_bytes(LAYERS) == 6400.0
    eager = _memory(plan, rc)
    default = _memory(plan, replace(rc, cross_entropy=CrossEntropy.DEFAULT))
    assert eager.activations_bytes == default.activations_bytes
    delta = eager.workspace_bytes - default.workspace_bytes
    assert delta == pytest.approx(3200.0 * (1 + wmem.FRAGMENTATION))


def test_fsdp2_pipelined_keeps_the_stage_gathered() -> None:
    """1,000 parameters on the stage. FSDP without a pipeline: two units gathered in bf16
    (2 x 1,000 x 2 = 4,000 B). Under torch.distributed.pipelining (pp 2): the whole stage in
    bf16 (2,000 B) plus its unsharded FP32 gradients (4,000 B) = 6,000 B."""
    flat = ParallelismPlan(dp=8, fsdp=True)
    piped = ParallelismPlan(dp=8, pp=2, fsdp=True)
    preset = get_preset("torchtitan")
    rc_flat = build_recipe(preset, Precision.BF16, Optimizer.ADAM, flat)
    rc_piped = build_recipe(preset, Precision.BF16, Optimizer.ADAM, piped)
    assert (rc_piped.gather_bytes, rc_piped.grad_reduce_bytes) == (2, 4)
    a = _memory(flat, rc_flat, params=1000)
    b = _memory(piped, rc_piped, params=1000)
    assert (a.weights_bytes, a.grads_bytes, a.optimizer_bytes) == (
        b.weights_bytes,
        b.grads_bytes,
        b.optimizer_bytes,
    )
    delta = b.workspace_bytes - a.workspace_bytes
    assert delta == pytest.approx((6000.0 - 4000.0) * (1 + wmem.FRAGMENTATION))
