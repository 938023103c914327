"""Transformer Engine's ``LayerNormLinear`` (the qkv and fc1 inputs of a TE layer) quantises its
input in the norm (TE v2.14 ``pytorch/csrc/extensions/normalization.cpp``:93-120; TE v1.8
``module/layernorm_linear.py``:126-137): delayed scaling's norm writes FP8 and only the
transposed copy is made (one launch in backward), current scaling's norm writes the amax (zero,
scale and cast remain: 3 launches, no amax pass), MXFP8 is not fused (cuDNN opt-in only)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.workload import build_model
from perfmodel.workload.kernels import Fp8Recipe, KernelRecipe
from perfmodel.workload.layers import LayerCost

TE = (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8)


def _layers(recipe: Fp8Recipe | None, tp: int = 1, name: str = "llama3_8b") -> dict[str, LayerCost]:
    w = build_model(
        name, batch_size=1, seq_len=4096, layers=1, precision="fp8", tp=tp,
        sequence_parallel=tp > 1, kernels=KernelRecipe(fp8=recipe),
    )  # fmt: skip
    return {la.name.split(".", 1)[1]: la for la in w.layers if la.name.startswith("layer0.")}


def _els(by: dict[str, LayerCost], lin: str) -> tuple[float, float, float]:
    g = by[lin].gemm
    assert g is not None
    return float(g.m * g.k * g.batch), float(g.m * g.n * g.batch), float(g.k * g.n * g.batch)


def test_delayed_norm_fed_golden() -> None:
    """Delayed scaling, qkv and fc1: no forward input cast (the norm wrote FP8), the weight's
    cast-transpose (1 launch, 4 B per weight element), backward the output gradient's
    cast-transpose (4 B) and the input's FP8 transpose (1 + 1 B): (1, 2) launches; the norms
    write 1 B per element instead of 2. attn_out and fc2 keep the plain cast (2, 1)."""
    by, base = _layers(Fp8Recipe.TE_DELAYED), _layers(None)
    for lin, norm in (("qkv", "ln1"), ("fc1", "ln2")):
        x, dy, w = _els(by, lin)
        c = by[f"{lin}.fp8_cast"]
        assert (c.kernels, c.bwd_kernels) == (1, 2)
        assert c.fwd_bytes == pytest.approx(4.0 * w)
        assert c.bwd_bytes == pytest.approx(4.0 * dy + 2.0 * x)
        assert base[norm].fwd_bytes - by[norm].fwd_bytes == pytest.approx(x)
    for lin in ("attn_out", "fc2"):
        x, _, w = _els(by, lin)
        c = by[f"{lin}.fp8_cast"]
        assert (c.kernels, c.bwd_kernels) == (2, 1)
        assert c.fwd_bytes == pytest.approx(4.0 * x + 4.0 * w)


def test_delayed_sequence_parallel_norm_writes_its_shard() -> None:
    """tp = 2 with sequence parallelism: the norm writes its sequence shard (half the gathered
    input) in FP8, so it saves ``x / 2`` bytes."""
    by, base = _layers(Fp8Recipe.TE_DELAYED, tp=2), _layers(None, tp=2)
    x, _, _ = _els(by, "qkv")
    assert base["ln1"].fwd_bytes - by["ln1"].fwd_bytes == pytest.approx(x / 2)


def test_current_norm_fed_golden() -> None:
    """Current scaling, qkv: zero-amax, scale and cast (3) + the weight's 4 forward, the output
    gradient's 4 backward; the input cast moves 2 + 1 + 1 B (no amax read); the norm still
    writes 16 bits."""
    by, base = _layers(Fp8Recipe.TE_CURRENT), _layers(None)
    x, _, w = _els(by, "qkv")
    c = by["qkv.fp8_cast"]
    assert (c.kernels, c.bwd_kernels) == (7, 4)
    assert c.fwd_bytes == pytest.approx(4.0 * x + 6.0 * w)
    assert by["ln1"].fwd_bytes == base["ln1"].fwd_bytes


def test_mxfp8_and_torchao_unchanged() -> None:
    """MXFP8 (norm then quantise unless NVTE_NORM_FWD_USE_CUDNN) and torchao (no
    LayerNormLinear): the qkv cast equals the attention output projection's count."""
    mx = _layers(Fp8Recipe.MXFP8)
    assert (mx["qkv.fp8_cast"].kernels, mx["qkv.fp8_cast"].bwd_kernels) == (3, 2)
    for r in (Fp8Recipe.TORCHAO_TENSORWISE, Fp8Recipe.TORCHAO_ROWWISE):
        by = _layers(r)
        assert by["qkv.fp8_cast"].kernels == r.cast_bytes.kernels_fwd
        x, _, w = _els(by, "qkv")
        assert by["qkv.fp8_cast"].fwd_bytes == pytest.approx(
            r.cast_bytes.x_fwd * x + r.cast_bytes.w_fwd * w
        )


def test_moe_router_input_is_not_norm_fed() -> None:
    """Megatron-Core's MoE layer norms with a separate ``TENorm`` before the router: only the
    attention's qkv is norm-fed; the experts' fc1 keeps the full input cast."""
    by = _layers(Fp8Recipe.TE_CURRENT, name="qwen3_30b_a3b")
    assert by["qkv.fp8_cast"].kernels == 7
    g = by["experts_fc1"].gemm
    assert g is not None and g.batch > 1
    assert by["experts_fc1.fp8_cast"].kernels == Fp8Recipe.TE_CURRENT.cast_launches(g.batch)[0]


@given(st.sampled_from(TE), st.integers(1, 16), st.floats(0.0, 1.0))
def test_norm_fed_never_costs_more(recipe: Fp8Recipe, groups: int, share: float) -> None:
    """A norm that quantises never adds launches or bytes to the linear's input cast."""
    f0, b0 = recipe.cast_launches(groups, share)
    f1, b1 = recipe.cast_launches(groups, share, norm_fed=True)
    assert f1 + b1 <= f0 + b0
    if recipe.fuses_norm_quantize:
        _, _, xf, xb = recipe.norm_fed_input()
        assert xf + xb <= recipe.cast_bytes.x_fwd + recipe.cast_bytes.x_bwd
        assert recipe.norm_output_bytes(2) <= 2
    else:
        assert (f1, b1) == (f0, b0)
        with pytest.raises(ValueError, match=recipe.value):
            recipe.norm_fed_input()
