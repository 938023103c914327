"""Unit tests of the model changes the H100 calibration asked for: alignment, host floor,
attention backward, memory-bound backward bytes, SIMT tiles (golden numbers by hand)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from perfmodel.compute import ComputeModel, ComputeParams, LayerTime
from perfmodel.compute.params import ALIGNMENT_ELEMENTS, HOST_DISPATCH_S
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import CalibrationError
from perfmodel.hardware import get_gpu
from perfmodel.workload import LayerKind, build_model
from perfmodel.workload.layers import GemmShape, LayerCost, Workload

H100 = get_gpu("H100-SXM5-80GB")


def _gemm_layer(m: int, n: int, k: int) -> LayerCost:
    f = 2.0 * m * n * k
    return LayerCost("g", LayerKind.LINEAR, f, f, f, 0, 0.0, 0.0, 0.0, (m, n), GemmShape(m, n, k))


def test_alignment_rule_per_dtype() -> None:
    assert ALIGNMENT_ELEMENTS[DType.BF16] == 8 and ALIGNMENT_ELEMENTS[DType.TF32] == 4
    assert ALIGNMENT_ELEMENTS[DType.FP8] == 16
    cm = ComputeModel(H100)
    # 4095^3 bf16: the unaligned GEMM takes 1/0.2 = 5x the time of the aligned model's
    t_un = cm.layer_time(_gemm_layer(4095, 4095, 4095), "bf16").fwd_s
    ref = ComputeModel(H100, ComputeParams.for_gpu(H100, alignment_efficiency=1.0))
    t_al = ref.layer_time(_gemm_layer(4095, 4095, 4095), "bf16").fwd_s
    launch = 4e-6
    assert (t_un - launch) == pytest.approx((t_al - launch) / 0.2, rel=1e-9)
    # tf32 loses half as much (0.4), fp32 on CUDA cores nothing, m alone does not matter
    t32 = cm.layer_time(_gemm_layer(4095, 4095, 4095), "tf32").fwd_s
    r32 = ref.layer_time(_gemm_layer(4095, 4095, 4095), "tf32").fwd_s
    assert (t32 - launch) == pytest.approx((r32 - launch) / 0.4, rel=1e-9)
    assert cm.layer_time(_gemm_layer(4095, 4095, 4095), "fp32").fwd_s == pytest.approx(
        ref.layer_time(_gemm_layer(4095, 4095, 4095), "fp32").fwd_s
    )
    assert cm.layer_time(_gemm_layer(4095, 4096, 4096), "bf16").fwd_s == pytest.approx(
        ref.layer_time(_gemm_layer(4095, 4096, 4096), "bf16").fwd_s
    )
    # gemm_time applies it as well
    assert cm.gemm_time(GemmShape(8192, 50257, 768), DType.BF16) > 4 * cm.gemm_time(
        GemmShape(8192, 50304, 768), DType.BF16
    )


def test_padded_vocabulary_is_faster() -> None:
    cm = ComputeModel(H100)
    odd = build_model("gpt2", batch_size=8, precision="bf16", vocab=50257)
    pad = build_model("gpt2", batch_size=8, precision="bf16", vocab=50304)
    assert sum(cm.workload_time(odd)) > 1.2 * sum(cm.workload_time(pad))


def test_host_floor_golden() -> None:
    """A 1-element add: ~4 us of GPU launch; its host issue (one kernel x host_dispatch_s) is
    reported apart and sets a one-layer step (the host issues ahead of the GPU)."""
    h = HOST_DISPATCH_S["pytorch-eager"]
    layer = LayerCost("add", LayerKind.ELEMENTWISE, 1.0, 0.0, 0.0, 0, 12.0, 0.0, 0.0, (1,))
    p = ComputeParams.for_gpu(H100, host_dispatch_s=h)
    t = ComputeModel(H100, p).layer_time(layer, "fp32")
    t0 = ComputeModel(H100).layer_time(layer, "fp32")
    assert isinstance(t, LayerTime) and t.host_bound and t.host_s == pytest.approx(h)
    assert t.fwd_s == pytest.approx(t0.fwd_s) and t0.fwd_s < h  # GPU time, host apart
    assert not t0.host_bound and t0.host_s == 0.0
    wl = Workload("add", (layer,), 1, Precision.parse("fp32"), 0)
    cm = ComputeModel(H100, p)
    assert cm.step_time(wl) == pytest.approx(h + cm.optimizer_time(0, "sgd", "fp32"))


def test_host_floor_only_bites_small_batches() -> None:
    p = ComputeParams.for_gpu(H100, host_dispatch_s=HOST_DISPATCH_S["pytorch-eager"])
    on, off = ComputeModel(H100, p), ComputeModel(H100)
    small = build_model("resnet50", batch_size=2, precision="bf16")
    big = build_model("resnet50", batch_size=256, precision="bf16")
    assert on.step_time(small) > 1.3 * off.step_time(small)
    assert on.step_time(big) == pytest.approx(off.step_time(big))
    assert on.workload_time(small) == off.workload_time(small)  # GPU time is GPU time
    # the host floor equals the kernel count x dispatch
    kernels = on.host_time(small) / HOST_DISPATCH_S["pytorch-eager"]
    assert 600 < kernels < 1200  # the H100 trace of one ResNet-50 step has 868 kernels + memsets


def test_attention_backward_has_its_own_efficiency() -> None:
    w = build_model("gpt", batch_size=4, hidden=2048, heads=16, layers=1, seq_len=2048)
    att = next(la for la in w.layers if la.kind is LayerKind.ATTENTION)
    base = ComputeParams.for_gpu(H100)
    t1 = ComputeModel(H100, base).layer_time(att, "bf16")
    t2 = ComputeModel(H100, replace(base, fused_attention_bwd_efficiency=0.12)).layer_time(
        att, "bf16"
    )
    assert t1.fwd_s == t2.fwd_s
    assert t2.bwd_s == pytest.approx(2 * t1.bwd_s, rel=0.02)
    assert t1.bwd_s / t1.fwd_s == pytest.approx(2.5 * 0.50 / 0.24, rel=0.05)


def test_layernorm_and_loss_backward_bytes() -> None:
    w = build_model("gpt2", batch_size=8, precision="bf16", layers=1, vocab=50304)
    ln = next(la for la in w.layers if la.name == "layer0.ln1")
    el = 8 * 1024 * 768
    # 5 passes over the activations + 3 for the residual-fork accumulation, 2 bytes each,
    # + FP32 mean/rstd per row + weight read and FP32 weight-gradient write
    assert ln.bwd_bytes == pytest.approx(8 * el * 2 + 2 * 8192 * 4 + 2 * 768 * (2 + 4))
    assert ln.autocast_fp32 and ln.bwd_kernels == 3
    loss = next(la for la in w.layers if la.kind is LayerKind.LOSS)
    # eager cross_entropy of the FP32-cast logits: zero-filled FP32 gradient (4), log_softmax
    # backward (4 + 4 read, 4 written), the cast back to 16 bit (4 + 2); forward the cast
    # (2 + 4) and log_softmax (4 + 4)
    assert loss.bwd_bytes == pytest.approx(8192 * 50304 * (20 + 2))
    assert loss.fwd_bytes == pytest.approx(8192 * 50304 * (12 + 2))
    assert (loss.kernels, loss.bwd_kernels) == (3, 4)
    # under autocast the layer norm moves FP32 activations: twice the bytes of Megatron-style
    cm = ComputeModel(H100)
    mega = ComputeModel(H100, ComputeParams.for_gpu(H100, cast_weights_each_step=False))
    launches = 3 * 4e-6
    assert cm.layer_time(ln, "bf16").bwd_s - launches == pytest.approx(
        2 * (mega.layer_time(ln, "bf16").bwd_s - launches), rel=1e-6
    )


def test_simt_small_gemm_uses_the_whole_gpu() -> None:
    """256^3 FP32 on the H100 measured 6.7 us; the old SIMT menu predicted 27 us."""
    cm = ComputeModel(H100)
    t = cm.layer_time(_gemm_layer(256, 256, 256), "fp32").fwd_s
    assert t < 15e-6
    assert cm.gemm(GemmShape(256, 256, 256), DType.FP32).tile == "16x16"


def test_new_params_round_trip_and_validate() -> None:
    p = ComputeParams.for_gpu(H100, host_dispatch_s=9.68e-6, alignment_efficiency=0.3)
    d = json.loads(json.dumps(p.to_dict()))
    assert ComputeParams.from_dict(d) == p
    old = {k: v for k, v in d.items() if k not in ("host_dispatch_s", "alignment_efficiency")}
    assert ComputeParams.from_dict(old).host_dispatch_s == 0.0  # old profiles still load
    with pytest.raises(CalibrationError, match="host_dispatch_s"):
        ComputeParams.for_gpu(H100, host_dispatch_s=-1.0)
    with pytest.raises(CalibrationError, match="alignment_efficiency"):
        ComputeParams.for_gpu(H100, alignment_efficiency=0.0)
    with pytest.raises(CalibrationError, match="fused_attention_bwd_efficiency"):
        ComputeParams.for_gpu(H100, fused_attention_bwd_efficiency=2.0)
