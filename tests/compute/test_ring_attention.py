"""The causal first step of a load-balanced ring context-parallel attention: one causal block of
the local queries and keys plus ``cp - 1`` unmasked half blocks, each at its own efficiency
(:func:`perfmodel.compute.attention.ring_attention_efficiency`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.compute.attention import AttentionBackend as B
from perfmodel.compute.attention import attention_efficiency
from perfmodel.compute.model import attention_shape
from perfmodel.dtypes import Precision
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.layers import LayerKind

PEAK = 989.4  # the FlashAttention-3 figures' H100 SXM5 dense BF16 peak, TFLOP/s


def _layers(cp: int, seq: int = 8192, kv_heads: int = 8):
    w = build_model(
        "llama",
        batch_size=1,
        precision="bf16",
        hidden=1024,
        layers=1,
        heads=8,
        kv_heads=kv_heads,
        ffn_hidden=2048,
        vocab=1024,
        seq_len=seq,
        **({"cp": cp} if cp > 1 else {}),
    )
    return [la for la in w.layers if la.kind is LayerKind.ATTENTION]


def _model(backend: B) -> ComputeModel:
    h100 = get_gpu("H100-SXM5-80GB")
    return ComputeModel(h100, ComputeParams.for_gpu(h100, attention_backend=backend))


def test_golden_cp2_cudnn_by_hand() -> None:
    """Llama, head dimension 128, 8k tokens over cp = 2: two steps of 4k local queries, the
    first causal (cuDNN 518 TFLOP/s forward, FlashAttention-3 paper Fig. 5d at 4k), the second
    unmasked (609, Fig. 5c); backward 499 unmasked (Fig. 6), the causal step at 499 x 518/609."""
    (att,) = _layers(2)
    assert att.ring_steps == 2
    shape = attention_shape(att)
    assert (shape.head_dim, shape.seq, shape.causal, shape.ring_steps) == (128, 4096, True, 2)
    cm = _model(B.CUDNN)
    e = cm.attention(att)
    bwd_c = 499 * 518 / 609
    assert e.fwd == pytest.approx(2 / (1 / 518 + 1 / 609) / PEAK)
    assert e.bwd == pytest.approx(2 / (1 / bwd_c + 1 / 499) / PEAK)
    # the layer's time: each half of the FLOP at its own rate, plus 2 launches per step
    t = cm.layer_time(att, Precision.BF16)
    peak = cm.params.peak(Precision.BF16.matmul_dtype)
    half = att.fwd_flop / 2
    hand_f = half / (peak * 518 / PEAK) + half / (peak * 609 / PEAK)
    assert t.fwd_s == pytest.approx(hand_f + 4 * cm.params.kernel_launch_s)
    hand_b = 2.5 * half / (peak * bwd_c / PEAK) + 2.5 * half / (peak * 499 / PEAK)
    assert t.bwd_input_s == pytest.approx(hand_b + 12 * cm.params.kernel_launch_s)


def test_the_causal_step_is_slower_than_an_unmasked_ring() -> None:
    """Fails before the fix: every ring step was priced at the unmasked efficiency."""
    (att,) = _layers(4)
    cm = _model(B.FLASH_ATTENTION_2)
    full = attention_efficiency(B.FLASH_ATTENTION_2, "Hopper", 128, 2048, False, generic=(1, 1))
    assert cm.attention(att).fwd < full.fwd
    assert cm.attention(att).bwd < full.bwd


@settings(max_examples=25, deadline=None)
@given(
    cp=st.sampled_from([2, 4, 8]),
    seq=st.sampled_from([2048, 8192, 32768]),
    kv=st.sampled_from([2, 8]),
    backend=st.sampled_from([B.FLASH_ATTENTION_2, B.FLASH_ATTENTION_3, B.CUDNN, B.GENERIC]),
)
def test_flop_is_the_non_cp_causal_flop_over_cp_and_efficiency_is_bracketed(
    cp: int, seq: int, kv: int, backend: B
) -> None:
    (one,) = _layers(1, seq, kv)
    (att,) = _layers(cp, seq, kv)
    # the ring's FLOP is unchanged by the step split: 1/cp of the whole causal attention
    assert att.fwd_flop == pytest.approx(one.fwd_flop / cp)
    assert att.bwd_flop == pytest.approx(one.bwd_flop / cp)
    assert att.fwd_flop / att.ring_steps == pytest.approx(att.gemm.flop)  # equal steps
    cm = _model(backend)
    e = cm.attention(att)
    local = seq // cp
    arch = cm.params.architecture
    g = (cm.params.fused_attention_efficiency, cm.params.fused_attention_bwd_efficiency)
    c = attention_efficiency(backend, arch, 128, local, True, generic=g)
    n = attention_efficiency(backend, arch, 128, local, False, generic=g)
    assert c.fwd <= e.fwd <= n.fwd and c.bwd <= e.bwd <= n.bwd
    # more steps: the causal step's share falls
    assert e.fwd == pytest.approx(cp / (1 / c.fwd + (cp - 1) / n.fwd))


def test_cp1_is_unchanged() -> None:
    (att,) = _layers(1)
    assert att.ring_steps == 1
    cm = _model(B.CUDNN)
    shape = attention_shape(att)
    assert (shape.seq, shape.causal, shape.ring_steps) == (8192, True, 1)
    plain = attention_efficiency(B.CUDNN, "Hopper", 128, 8192, True, generic=(1, 1))
    assert (cm.attention(att).fwd, cm.attention(att).bwd) == (plain.fwd, plain.bwd)


@pytest.mark.parametrize("cp", [2, 4, 5, 6, 8, 10, 13, 17])
def test_generic_pair_is_not_derated_for_any_cp(cp: int) -> None:
    """Review mend 2: on a power-limited board (H100 500 W, clock ratio 0.876) the generic
    pair is never scaled, whatever the ring's length; the ring blend of two equal values was
    one ulp off for cp = 5, 6, 10, 13, 17, so float equality with the pair scaled it for those
    cp only (0.438/0.210 against 0.5/0.24). A table backend is scaled for every cp."""
    part = get_gpu("H100-SXM5-96GB-500W")
    (att,) = _layers(cp, seq=1024 * cp)
    gen = ComputeModel(part, ComputeParams.for_gpu(part)).attention(att)
    assert (gen.fwd, gen.bwd) == (0.5, 0.24)
    tab = ComputeModel(part, ComputeParams.for_gpu(part, attention_backend=B.CUDNN)).attention(att)
    full = get_gpu("H100-SXM5-80GB")
    ref = ComputeModel(full, ComputeParams.for_gpu(full, attention_backend=B.CUDNN)).attention(att)
    assert tab.fwd == pytest.approx(ref.fwd * part.power_clock_ratio(), rel=1e-12)
