"""Memory model: per-parameter state, Korthikanti activation formulas, recompute, max batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel import units
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.layers import layer_runs
from perfmodel.workload.memory import (
    MemoryBreakdown,
    Optimizer,
    activation_bytes,
    first_block_input_elements,
    full_recompute_bytes,
    max_batch_size,
    memory_breakdown,
    param_state_bytes,
)

GPT_KW = dict(hidden=1024, heads=16, layers=2, seq_len=512, vocab=1000, flash_attention=False)


@pytest.mark.parametrize(
    ("precision", "optimizer", "per_param"),
    [
        ("fp32", "sgd", 4 + 4 + 0),
        ("fp32", "momentum", 4 + 4 + 4),
        ("fp32", "adam", 4 + 4 + 8),
        ("tf32", "adam", 16),
        ("fp16", "adam", 2 + 4 + 2 + 8),  # ZeRO paper: 16 bytes per parameter
        ("bf16", "momentum", 2 + 4 + 2 + 4),
        ("fp8", "adam", 16),
    ],
)
def test_bytes_per_parameter(precision: str, optimizer: str, per_param: int) -> None:
    assert sum(param_state_bytes(1000, precision, optimizer)) == 1000 * per_param


def _block_bytes(w, block: int = 0) -> float:
    return sum(la.activation_bytes for la in w.layers if la.block == block)


def test_korthikanti_no_parallelism() -> None:
    """Korthikanti et al. 2022, eq. (1): s b h (34 + 5 a s / h) bytes per layer at 16 bit."""
    s, b, h, a = 512, 2, 1024, 16
    w = build_model("gpt", batch_size=b, precision="fp16", **GPT_KW)
    assert _block_bytes(w) == pytest.approx(s * b * h * (34 + 5 * a * s / h))


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_and_sequence_parallel(t: int) -> None:
    s, b, h, a = 512, 2, 1024, 16
    tp = build_model("gpt", batch_size=b, precision="bf16", tp=t, **GPT_KW)
    assert _block_bytes(tp) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    sp = build_model("gpt", batch_size=b, precision="bf16", tp=t, sequence_parallel=True, **GPT_KW)
    assert _block_bytes(sp) == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))


def test_selective_recompute_drops_the_attention_core() -> None:
    """Korthikanti eq. (selective): the 5 a s / h term disappears."""
    s, b, h = 512, 2, 1024
    w = build_model("gpt", batch_size=b, precision="fp16", **GPT_KW)
    outside = sum(la.activation_bytes for la in w.layers if la.block is None)
    assert activation_bytes(w, "selective") == pytest.approx(outside + 2 * s * b * h * 34)


def test_recompute_orders_memory() -> None:
    w = build_model("gpt", batch_size=4, precision="bf16", **{**GPT_KW, "layers": 8})
    none, sel, full = (activation_bytes(w, r) for r in ("none", "selective", "full"))
    assert full < sel < none
    # full: one layer's input (2 s b h) per layer + one whole layer + head/loss
    s, b, h = 512, 4, 1024
    outside = sum(la.activation_bytes for la in w.layers if la.block is None)
    assert full == pytest.approx(outside + 8 * 2 * s * b * h + _block_bytes(w))


def _span(layers, first: int, end: int):
    """``layers[i:j]`` of the blocks ``first .. end - 1`` (a stack's slice stays stacked)."""
    ids = [i for i, la in enumerate(layers) if la.block is not None and first <= la.block < end]
    return layers[ids[0] : ids[-1] + 1]


@pytest.mark.parametrize("sp", [False, True])
def test_full_recompute_keeps_a_received_input(sp: bool) -> None:
    """A pipeline chunk that begins with a block keeps that block's input too (the tensor the
    previous stage sent, ``2 s b h`` bytes at 16 bit, ``s/t`` under sequence parallelism), as
    Megatron-Core's first checkpoint of a stage saves it: 4 blocks keep 4 inputs, not 3
    (main18). The stack's slice (its copies summed once) and the plain tuple agree exactly."""
    s, b, h, t = 512, 2, 1024, 2
    w = build_model("gpt", batch_size=b, precision="bf16", tp=t, sequence_parallel=sp,
                    **{**GPT_KW, "layers": 8})  # fmt: skip
    chunk = _span(w.layers, 2, 6)
    one = 2 * s * b * h / (t if sp else 1)
    kept, working = full_recompute_bytes(chunk, Precision.BF16)
    assert kept == 4 * one
    assert full_recompute_bytes(tuple(chunk), Precision.BF16) == (kept, working)
    assert first_block_input_elements(layer_runs(chunk)) * 2 == one
    # with the embedding in the chunk its output is the first block's input, counted once
    assert first_block_input_elements(layer_runs(w.layers)) == 0
    # a block that begins with a convolution (VGG's first: the model's input) is not guessed
    vgg = build_model("vgg11_cifar", batch_size=b, precision="bf16")
    assert vgg.layers[0].block is not None
    assert first_block_input_elements(layer_runs(vgg.layers)) == 0


def test_breakdown_sums_and_serialises() -> None:
    w = build_model("resnet50", batch_size=32, precision="fp16")
    m = memory_breakdown(w, optimizer="momentum")
    d = m.to_dict()
    assert d["total_bytes"] == pytest.approx(sum(v for k, v in d.items() if k != "total_bytes"))
    assert m.weights_bytes == pytest.approx(w.params * 6 + w.buffers * 4)
    assert m.optimizer_bytes == w.params * 4
    assert isinstance(m, MemoryBreakdown)


def test_zero_stages_shard_state() -> None:
    w = build_model("gpt2", batch_size=1, precision="bf16")
    z0 = memory_breakdown(w, optimizer="adam")
    z1 = memory_breakdown(w, optimizer="adam", zero_stage=1, dp=8)
    z3 = memory_breakdown(w, optimizer="adam", zero_stage=3, dp=8)
    p = w.params
    # stage 1 shards the FP32 master copy with the Adam moments: (4 + 8) / 8 bytes per parameter
    assert z1.optimizer_bytes == pytest.approx(12 * p / 8)
    assert z3.weights_bytes < z1.weights_bytes < z0.weights_bytes
    assert z3.gradients_bytes == pytest.approx(z0.gradients_bytes / 8)
    # textbook ZeRO-3 mixed-precision Adam: (2 + 2 + 12) x params / dp (was 9.8 GiB-style
    # undercount: the weights were divided by dp after the master copy was already sharded)
    z3_state = z3.weights_bytes - w.buffers * 4.0 + z3.gradients_bytes + z3.optimizer_bytes
    assert z3_state == pytest.approx(16 * p / 8)
    with pytest.raises(ConfigError):
        memory_breakdown(w, zero_stage=4)


def test_max_batch_is_the_boundary() -> None:
    r = max_batch_size("resnet50v2", "V100-SXM2-16GB", "fp32", "sgd", image_size=128)
    gpu = get_gpu("V100-SXM2-16GB")
    assert 64 <= r.batch_size <= 2048
    assert r.breakdown.total_bytes <= gpu.memory_bytes
    over = memory_breakdown(
        build_model("resnet50v2", batch_size=r.batch_size + 1, image_size=128), optimizer="sgd"
    )
    assert over.total_bytes > gpu.memory_bytes
    # activations dominate a CNN at its maximal batch
    assert r.breakdown.activations_bytes > 0.5 * r.breakdown.total_bytes


def test_max_batch_grows_with_memory_and_shrinks_with_adam() -> None:
    small = max_batch_size("gpt2", "V100-SXM2-16GB", "fp16", "adam").batch_size
    large = max_batch_size("gpt2", "A100-SXM4-80GB", "fp16", "adam").batch_size
    assert 0 < small < large
    assert (
        max_batch_size("gpt2", "A100-SXM4-80GB", "fp16", "adam", recompute="full").batch_size
        > large
    )
    flash = max_batch_size("gpt2", "A100-SXM4-80GB", "fp16", "adam", flash_attention=True)
    assert flash.batch_size > large


def test_model_too_large_returns_zero() -> None:
    r = max_batch_size("llama2_70b", "V100-SXM2-16GB", "bf16", "adam", seq_len=128)
    assert r.batch_size == 0
    assert r.breakdown.weights_bytes > 16 * units.GiB


def test_optimizer_parse() -> None:
    assert Optimizer.parse("SGD-momentum") is Optimizer.MOMENTUM
    with pytest.raises(ConfigError, match="optimizer"):
        Optimizer.parse("adagrad")


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(["resnet18", "mobilenet_v2", "gpt2", "vit_b_16", "mlp"]),
    batch=st.integers(1, 64),
    precision=st.sampled_from(["fp32", "bf16"]),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_memory_grows_with_batch(name, batch, precision, recompute) -> None:
    small = memory_breakdown(
        build_model(name, batch_size=batch, precision=precision),
        optimizer="adam",
        recompute=recompute,
    )
    big = memory_breakdown(
        build_model(name, batch_size=batch + 1, precision=precision),
        optimizer="adam",
        recompute=recompute,
    )
    assert big.activations_bytes > small.activations_bytes
    assert big.total_bytes > small.total_bytes
    assert big.weights_bytes == small.weights_bytes
