"""torchtitan's op-level selective activation checkpointing (``SelectiveRecompute.OP``, issue 24
cause 10): which matrix products a block re-runs, and what the checkpoint keeps in memory."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.dtypes import Precision
from perfmodel.parallel.recipe import SelectiveRecompute, mm_products, op_checkpoint
from perfmodel.workload.memory import activation_bytes, full_recompute_bytes
from perfmodel.workload.zoo import build_model

LLAMA8B = dict(hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256)


def _llama(**kw: object):
    args = {**LLAMA8B, "layers": 2, "seq_len": 16, "batch_size": 1, "precision": "bf16", **kw}
    return build_model("llama", **args)


def test_llama_block_reruns_wk_wo_w3() -> None:
    """Llama 3.1 8B: mm calls wq, wk, wv, wo, w1, w3, w2; the even ones (wk 4096x1024, wo
    4096x4096, w3 4096x14336) re-run: 79,691,776 of 218,103,808 weights' FLOP = 0.36538."""
    wl = _llama()
    block = [la for la in wl.layers if la.block == 0]
    plan = op_checkpoint(wl.layers, 2)
    mm = [(la, w) for la, w in zip(block, mm_products(block), strict=True) if w]
    assert [tuple(w) for _, w in mm] == [(4096, 1024, 1024), (4096,), (14336, 14336), (4096,)]
    rerun = sum(la.fwd_flop * plan.share[la.cost_key()] for la, _ in mm)
    total = sum(la.fwd_flop for la, _ in mm)
    assert rerun / total == pytest.approx(79_691_776 / 218_103_808, rel=1e-12)
    share = SelectiveRecompute.OP.share_for(wl)
    attn = next(la for la in block if la.name.endswith("attention"))
    assert share(attn) == 0.0  # SDPA saved
    assert all(share(la) == 1.0 for la in block if la.kind.value in ("norm", "activation"))
    assert all(share(la) == 0.0 for la in wl.layers if la.block is None)


def test_kept_bytes_hand_computed() -> None:
    """b 1, s 8, hidden 64 (4 heads of 16, 2 KV heads), SwiGLU 128, bf16. Per block the
    checkpoint keeps its input (8 x 64 x 2 = 1,024 B), wq's output (1,024), wv's (8 x 32 x 2 =
    512), w1's (8 x 128 x 2 = 2,048), w2's (1,024), SDPA's output (1,024) and its FP32
    log-sum-exp (4 heads x 8 x 4 = 128): 6,784 B."""
    wl = build_model(
        "llama", batch_size=1, hidden=64, layers=2, heads=4, kv_heads=2, ffn_hidden=128,
        vocab=100, seq_len=8, precision="bf16",
    )  # fmt: skip
    kept, working = SelectiveRecompute.OP.kept_bytes(wl.layers, Precision.BF16)
    boundary, _ = full_recompute_bytes(wl.layers, Precision.BF16)
    outside = sum(la.activation_bytes for la in wl.layers if la.block is None)
    assert boundary == pytest.approx(outside + 2 * 1024)  # the two block inputs
    assert kept == pytest.approx(outside + 2 * 6784)
    block = sum(la.activation_bytes for la in wl.layers if la.block == 0)
    assert working == pytest.approx(block - (6784 - 1024))


@pytest.mark.parametrize("seq_len", [2048, 8192])
@pytest.mark.parametrize("batch", [1, 2])
def test_op_memory_between_full_and_none(seq_len: int, batch: int) -> None:
    """What the op checkpoint keeps lies between full recomputation (block inputs only) and
    none (everything): before, op-level selective was counted as keeping everything (fused
    attention has no s x s tensor to drop), the false out-of-memory of issue 24."""

    def acts(recompute: str) -> float:
        sc = Scenario(
            system="dgx-h100", gpus=8, model="llama", model_args={**LLAMA8B, "layers": 32,
            "seq_len": seq_len}, batch_per_gpu=batch, microbatch=batch, precision="bf16", optimizer="adamw",
            software="torchtitan", recompute=recompute, fidelity="analytic",
        )  # fmt: skip
        return predict(sc, baseline=False).memory.activations_bytes

    none, op, full = acts("none"), acts("selective"), acts("full")
    assert full < op < 0.75 * none


def test_attention_core_unchanged() -> None:
    """Megatron's selective recompute (attention core) keeps what each layer saves less the
    s x s tensors: the plain selective count, no working set."""
    wl = _llama()
    kept, working = SelectiveRecompute.ATTENTION_CORE.kept_bytes(wl.layers, Precision.BF16)
    assert kept == activation_bytes(wl.layers, "selective", precision=Precision.BF16)
    assert working == 0.0


@pytest.mark.parametrize("cp", [2, 4])
def test_context_parallel_qkv_still_splits_into_q_k_v(cp: int) -> None:
    """Review nit 11: under context parallelism the attention's ``gemm.batch`` is the local
    heads alone (cp is in the ring's steps, not the batch: cpstep0), so a CP model's fused
    projection still splits into ``wq, wk, wv``: 4 heads x 16 = 64 query columns and
    (128 - 64) / 2 = 32 per key and value, as without CP."""
    args = dict(batch_size=1, hidden=64, layers=1, heads=4, kv_heads=2, ffn_hidden=128,
                vocab=100, seq_len=32)  # fmt: skip
    w = build_model("llama", cp=cp, **args)
    block = [la for la in w.layers if la.block == 0]
    qkv = dict(zip((la.name for la in block), mm_products(block), strict=True))["layer0.qkv"]
    assert qkv == (64.0, 32.0, 32.0)
