"""The kernels a transformer block launches per training stack, FP8 recipes, FSDP2 copies
(issue 24, "What to build" 2 and 3).

Golden values are hand-computed from the per-kernel reads and writes of
``perfmodel.workload.kernels`` (each with its source there); property tests state what must
hold whatever the shapes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.workload import build_model
from perfmodel.workload.kernels import (
    DEFAULT_KERNELS,
    OPS,
    Fp8Recipe,
    Fusion,
    GradClip,
    KernelRecipe,
    OptimizerImpl,
    fp8_linear,
    optimizer_bytes_per_param,
    repeat_kv_kernels,
)
from perfmodel.workload.layers import KernelClass, LayerKind, layer_tensors

#: Llama-3.1-8B shapes, two layers, short sequence (fast to build)
LLAMA = dict(
    hidden=4096, layers=2, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, seq_len=1024
)


def _llama(kernels: KernelRecipe = DEFAULT_KERNELS, **kw: object):
    args = {**LLAMA, **kw}
    return build_model("llama", batch_size=2, precision="bf16", kernels=kernels, **args)


def _named(w, suffix: str):
    return [la for la in w.layers if la.name.endswith(suffix)]


def test_eager_rmsnorm_bytes_per_element() -> None:
    """torchtitan's RMSNorm, ``_norm(x.float()).type_as(x) * weight``: forward reads/writes
    2+4, 4+4, 4, 4+4, 4+2, 2+2 bytes per element (36) in 8 kernels; at FP32 the two casts
    launch nothing (28 bytes, 6 kernels)."""
    ops = OPS["rms_norm"][Fusion.EAGER]
    assert ops.fwd_bytes(2) == 36.0 and ops.fwd_kernels(2) == 8
    assert ops.fwd_bytes(4) == 28.0 and ops.fwd_kernels(4) == 6
    # backward: the mul/pow/mean/rsqrt/cast derivatives, 92 bytes in 14 kernels
    assert ops.bwd_bytes(2) == 92.0 and ops.bwd_kernels(2) == 14
    # a fused norm (inductor, Transformer Engine) reads x once and writes y once
    assert OPS["rms_norm"][Fusion.COMPILE].fwd_bytes(2) == 4.0
    assert OPS["rms_norm"][Fusion.TE].fwd_bytes(2) == 4.0


def test_eager_loss_moves_the_fp32_upcasts() -> None:
    """cross_entropy(logits.float()): forward cast 2+4 and log_softmax 4+4 = 14 B per logit;
    backward zero-fill 4, log_softmax_backward 4+4+4, cast back 4+2 = 22 B (the old count,
    10 and 14, missed the casts)."""
    ops = OPS["loss"][Fusion.EAGER]
    assert (ops.fwd_bytes(2), ops.bwd_bytes(2)) == (14.0, 22.0)
    w = build_model("gpt2", batch_size=2, precision="bf16", layers=1, vocab=1000, seq_len=64)
    loss = next(la for la in w.layers if la.kind is LayerKind.LOSS)
    assert loss.fwd_bytes == pytest.approx(2 * 64 * 1000 * 14.0)
    assert loss.bwd_bytes == pytest.approx(2 * 64 * 1000 * 22.0)


def test_repeat_kv_copies_each_kv_element_n_rep_times() -> None:
    ops = repeat_kv_kernels(4)
    assert ops.fwd_bytes(2) == 2 * (1 + 4) and ops.bwd_bytes(2) == 2 * (4 + 1)


def test_eager_block_has_the_kernels_torchtitan_launches() -> None:
    """Eager: RoPE on q and k (3 kernels each way per tensor), repeat_kv of k and v
    (32 heads over 8 KV heads: 4 copies), the SDPA output copy; Transformer Engine: fused RoPE,
    no repeat_kv (GQA in the kernel), no layout copy."""
    eager, te = _llama(), _llama(KernelRecipe(fusion=Fusion.TE))
    b, s, d = 2, 1024, 128
    (rope,) = _named(eager, "layer0.rope")
    assert rope.klass is KernelClass.ROPE and (rope.kernels, rope.bwd_kernels) == (6, 6)
    qk = b * s * (32 + 8) * d
    assert rope.fwd_bytes == pytest.approx(qk * 20.0) and rope.bwd_bytes == pytest.approx(qk * 20.0)
    (rep,) = _named(eager, "layer0.repeat_kv")
    assert rep.klass is KernelClass.COPY
    assert rep.fwd_bytes == pytest.approx(2 * b * s * 8 * d * 2 * (1 + 4))
    (copy,) = _named(eager, "layer0.attn_out_copy")
    assert copy.fwd_bytes == pytest.approx(b * s * 32 * d * 4) and copy.bwd_bytes == 0
    assert not _named(te, "repeat_kv") and not _named(te, "attn_out_copy")
    (te_rope,) = _named(te, "layer0.rope")
    assert te_rope.fwd_bytes == pytest.approx(qk * 4.0)


def test_fusion_changes_kernels_not_arithmetic() -> None:
    """The same model under every stack: same parameters and GEMM FLOP; the memory-bound
    bytes and launches fall from eager to compile to TE."""
    ws = {f: _llama(KernelRecipe(fusion=f)) for f in Fusion}

    def gemm_flop(w) -> float:
        return sum(la.total_flop for la in w.layers if la.klass is KernelClass.GEMM)

    def mem_bytes(w) -> float:  # the blocks' memory-bound kernels
        return sum(
            la.fwd_bytes + la.bwd_bytes
            for la in w.layers
            if la.block is not None and la.klass not in (KernelClass.GEMM, KernelClass.ATTENTION)
        )

    def launches(w) -> int:
        return sum(la.kernels + (la.bwd_kernels or 0) for la in w.layers)

    e, c, t = ws[Fusion.EAGER], ws[Fusion.COMPILE], ws[Fusion.TE]
    assert e.total_params == c.total_params == t.total_params
    assert gemm_flop(e) == gemm_flop(c) == gemm_flop(t)
    assert mem_bytes(e) > 2.0 * mem_bytes(c) and mem_bytes(c) > mem_bytes(t)
    assert launches(e) > launches(c) >= launches(t)


def test_fp8_casts_follow_every_fp8_linear_but_the_lm_head() -> None:
    k = KernelRecipe(fusion=Fusion.TE, fp8=Fp8Recipe.TE_DELAYED, weight_cast_share=0.25)
    w = build_model("llama", batch_size=2, precision="fp8", kernels=k, **LLAMA)
    names = [la.name for la in w.layers]
    for gemm in ("qkv", "attn_out", "fc1", "fc2"):
        i = names.index(f"layer0.{gemm}")
        assert names[i - 1] == f"layer0.{gemm}.fp8_cast"
    assert "lm_head.fp8_cast" not in names
    head = next(la for la in w.layers if la.name == "lm_head")
    assert head.keep_16bit and not fp8_linear(head)
    # TE delayed scaling: cast-transpose of x (2 B read, 1 + 1 B written) every micro-batch,
    # of the weight once per step (here 1/4 per micro-batch), of dy in backward
    cast = next(la for la in w.layers if la.name == "layer0.fc2.fp8_cast")
    fc2 = next(la for la in w.layers if la.name == "layer0.fc2")
    g = fc2.gemm
    x, dy, wt = g.m * g.k, g.m * g.n, g.k * g.n
    assert cast.klass is KernelClass.FP8_CAST
    assert cast.fwd_bytes == pytest.approx(4.0 * x + 4.0 * wt * 0.25)
    assert cast.bwd_bytes == pytest.approx(4.0 * dy)


def test_fp8_sequence_parallel_gather_in_fp8() -> None:
    """Under tensor parallelism with sequence parallelism the column-parallel input is
    all-gathered after its FP8 cast: half the bf16 bytes."""
    base = dict(batch_size=1, tp=2, sequence_parallel=True, **LLAMA)
    bf = build_model("llama", precision="bf16", **base)
    f8 = build_model(
        "llama",
        precision="fp8",
        kernels=KernelRecipe(fusion=Fusion.TE, fp8=Fp8Recipe.TE_DELAYED),
        **base,
    )

    def gather(w) -> float:
        return next(la for la in w.layers if la.name == "layer0.qkv").fwd_comm[0].message_bytes

    assert gather(f8) == pytest.approx(gather(bf) / 2)


def test_fsdp_copies_per_unit() -> None:
    """FSDP2: the all-gather copy-out reads and writes the unit's bf16 parameters in forward
    and again in backward (reshard after forward), the reduce-scatter copy-in reads the bf16
    gradient and writes FP32: 4 P forward, 4 P + 6 P backward; one layer per block, first in
    it, and one for the root unit (embedding, final norm, LM head)."""
    w = _llama(KernelRecipe(fsdp_copies=True, fsdp_reduce_bytes=4))
    blocks = [la for la in w.layers if la.block == 0]
    assert blocks[0].name == "layer0.fsdp_copy"
    p = sum(la.params for la in blocks)
    cp = blocks[0]
    assert cp.klass is KernelClass.FSDP_COPY and cp.params == 0
    assert cp.fwd_bytes == pytest.approx(4.0 * p) and cp.bwd_bytes == pytest.approx(10.0 * p)
    root = next(la for la in w.layers if la.name == "root.fsdp_copy")
    outside = sum(la.params for la in w.layers if la.block is None)
    assert root.fwd_bytes == pytest.approx(4.0 * outside)
    # the block's last layer is still its output (block boundaries for the memory model)
    assert blocks[-1].name == "layer0.residual2"
    assert w.total_params == _llama().total_params


@pytest.mark.parametrize(("reduce", "m"), [(4, 8), (2, 8), (4, 2)])
def test_fsdp_copies_of_a_unit_held_gathered_for_the_step(reduce: int, m: int) -> None:
    """Pipelined FSDP2 (``fsdp_step_share = 1/m``): the copy-out and the reduce-scatter
    copy-in once a step, ``1/m`` of them per micro-batch, no backward copy-out, and the
    unsharded gradient accumulated every backward: read 2 P (bf16 gradient) and ``r`` P,
    write ``r`` P. Hand-computed with bf16 weights: forward 4 P / m; backward (2 + r) P / m
    + (2 + 2 r) P. Launches: one accumulation per parameter tensor of the unit
    (``layer_tensors``: the zoo Llama block's 7, two norms, the fused QKV projection, the
    output projection, the gate and up halves of the fused input projection and the down
    projection; torchtitan keeps q, k and v apart, 9) plus the copy-in's share rounded half
    up; the forward's one (the compute model's floor)."""
    once = _llama(KernelRecipe(fsdp_copies=True, fsdp_reduce_bytes=reduce))
    held = _llama(KernelRecipe(fsdp_copies=True, fsdp_reduce_bytes=reduce, fsdp_step_share=1.0 / m))
    cp = next(la for la in held.layers if la.name == "layer0.fsdp_copy")
    p = sum(la.params for la in held.layers if la.block == 0)
    assert cp.fwd_bytes == pytest.approx(4.0 * p / m)
    assert cp.bwd_bytes == pytest.approx((2.0 + reduce) * p / m + (2.0 + 2.0 * reduce) * p)
    idx = [i for i, la in enumerate(held.layers) if la.block == 0]
    tensors = len(layer_tensors(held.layers, idx))
    assert tensors == 7
    assert (cp.kernels, cp.bwd_kernels) == (1, tensors + (1 if m <= 2 else 0))
    # the layers around the copies are the per-micro-batch build's
    rest = [la for la in held.layers if not la.name.endswith("fsdp_copy")]
    assert rest == [la for la in once.layers if not la.name.endswith("fsdp_copy")]


@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(1, 5),
    heads=st.sampled_from([4, 8]),
    kv=st.sampled_from([1, 2, 4]),
    fusion=st.sampled_from(list(Fusion)),
    fp8=st.sampled_from([None, *Fp8Recipe]),
    fsdp=st.booleans(),
)
def test_recipe_kernels_never_change_parameters_or_gemms(
    layers: int, heads: int, kv: int, fusion: Fusion, fp8: Fp8Recipe | None, fsdp: bool
) -> None:
    """Whatever the recipe: parameters per rank and GEMM FLOP equal the plain build's, every
    added layer has no parameters, and the stacked copies read like a plain tuple."""
    args = dict(hidden=256, layers=layers, heads=heads, kv_heads=kv, ffn_hidden=512, vocab=500)
    prec = "fp8" if fp8 is not None else "bf16"
    plain = build_model("llama", batch_size=1, precision=prec, seq_len=64, **args)
    k = KernelRecipe(fusion=fusion, fp8=fp8, fsdp_copies=fsdp)
    w = build_model("llama", batch_size=1, precision=prec, seq_len=64, kernels=k, **args)
    assert w.params == plain.params and w.total_params == plain.total_params
    gemm = lambda wl: sum(la.total_flop for la in wl.layers if la.klass is KernelClass.GEMM)  # noqa: E731
    assert gemm(w) == pytest.approx(gemm(plain))
    added = {la.name for la in w.layers} - {la.name for la in plain.layers}
    assert all(la.params == 0 for la in w.layers if la.name in added and "norm" not in la.name)
    assert tuple(w.layers) == tuple(w.layers[i] for i in range(len(w.layers)))


def test_optimizer_bytes_per_implementation() -> None:
    fused = dict(impl=OptimizerImpl.FUSED, grad_bytes=4, working_copy_bytes=0)
    foreach = dict(impl=OptimizerImpl.FOREACH, grad_bytes=4, working_copy_bytes=0)
    assert optimizer_bytes_per_param(2, **fused) == 28.0  # r g, r/w p, m, v
    assert optimizer_bytes_per_param(2, **foreach) == 84.0  # 8 foreach passes
    assert optimizer_bytes_per_param(1, **foreach) == 44.0  # SGD momentum + weight decay
    assert optimizer_bytes_per_param(0, **foreach) == 24.0
    assert GradClip.FOREACH.bytes_per_param(4) == 12.0 and GradClip.L2NORM.bytes_per_param(4) == 4


@pytest.mark.parametrize("fusion", [Fusion.COMPILE, Fusion.TE])
def test_fused_bias_dropout_add_is_one_kernel(fusion: Fusion) -> None:
    """A dropout model under a fusing stack: each residual is one bias-dropout-add kernel
    (reads branch and skip, writes the sum and a 1-byte mask; backward reads the gradient and
    the mask, writes the branch's gradient), no parameters or weight gradient, in its layer's
    block."""
    w = build_model(
        "gpt", batch_size=2, precision="bf16", kernels=KernelRecipe(fusion=fusion),
        layers=2, hidden=256, heads=4, seq_len=128, vocab=1000,
    )  # fmt: skip
    el, a = 2 * 128 * 256, 2
    (qkv,) = _named(w, "layer1.qkv")
    for la in _named(w, "layer1.residual1") + _named(w, "layer1.residual2"):
        assert la.klass is KernelClass.RESIDUAL and la.kind is LayerKind.ELEMENTWISE
        assert (la.fwd_flop, la.bwd_input_flop, la.bwd_weight_flop) == (3.0 * el, el, 0.0)
        assert (la.fwd_bytes, la.bwd_bytes) == (el * (3 * a + 1.0), el * (2 * a + 1.0))
        assert la.activation_bytes == el and la.params == 0 and la.autocast_fp32
        assert la.output_shape == (2, 128, 256) and la.block == qkv.block == 1
