"""calibration/shapes: the convolution and attention benchmark shapes, their arithmetic checked by
hand and against what the torch backend recorded on an H100 (calibration/h100-sxm5-80gb.json),
and the suite recording them under the same names as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.calibration.backends import Backend, Op
from perfmodel.calibration.measurement import BenchKind
from perfmodel.calibration.profile import DeviceKind
from perfmodel.calibration.shapes import AttentionShape, ConvShape
from perfmodel.calibration.suite import plan_suite
from perfmodel.calibration.timing import TimingPolicy
from perfmodel.dtypes import DType

H100 = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb.json"


def test_conv_shape_by_hand() -> None:
    # ResNet-50 conv1: 3 -> 64 channels, 7x7, stride 2, pad 3 on 224x224: 112x112 out
    cs = ConvShape(n=2, c=3, h=224, w=224, k=64, r=7, s=7, stride=2, pad=3)
    assert (cs.out_h, cs.out_w) == (112, 112)
    assert cs.flop == 2 * 2 * 64 * 112 * 112 * 3 * 7 * 7
    assert cs.flop == 472_055_808
    assert (cs.input_elems, cs.output_elems, cs.weight_elems) == (301_056, 1_605_632, 9_408)
    assert ConvShape.from_params({**cs.params(), "dtype": "bf16"}) == cs
    assert list(cs.params()) == ["n", "c", "h", "w", "k", "r", "s", "stride", "pad"]


def test_attention_shape_by_hand() -> None:
    a = AttentionShape(batch=2, heads=4, seq=8, head_dim=16, causal=True)
    assert a.fwd_flop == 4 * 2 * 4 * 8 * 8 * 16 / 2  # 16,384
    assert AttentionShape(2, 4, 8, 16, False).fwd_flop == 32_768
    assert a.qkvo_bytes(2) == 4 * 2 * 2 * 4 * 8 * 16  # Q, K, V, O in bf16: 8,192
    assert AttentionShape.from_params({"batch": 2, "heads": 4, "seq": 8, "head_dim": 16}) == a
    assert list(a.params()) == ["batch", "heads", "seq", "head_dim", "causal"]


def test_shapes_restate_the_work_recorded_on_an_h100() -> None:
    """Every conv and attention measurement of the H100 profile: the work the torch backend
    recorded is what the shape read back from its params says."""
    if not H100.exists():
        pytest.skip("H100 profile not in this checkout")
    from perfmodel.calibration import load_profile

    convs = atts = 0
    for m in load_profile(H100).measurements:
        if m.kind not in (BenchKind.CONV, BenchKind.ATTENTION):
            continue
        item = DType(m.params["dtype"]).itemsize
        if m.kind is BenchKind.CONV:
            cs = ConvShape.from_params(m.params)
            assert m.work_flop == cs.flop
            elems = cs.input_elems + cs.output_elems + cs.weight_elems
            assert m.work_bytes == item * elems
            convs += 1
        else:
            a = AttentionShape.from_params(m.params)
            bwd = m.params["phase"] == "fwd+bwd"
            assert m.work_flop == a.fwd_flop * (3.5 if bwd else 1.0)
            assert m.work_bytes == a.qkvo_bytes(item) * (3.0 if bwd else 1.0)
            atts += 1
    assert convs > 0 and atts > 0


class _Recorder(Backend):
    """A CUDA-like backend that records the shapes the suite hands it."""

    name = "recorder"
    device_kind = DeviceKind.CUDA
    gemm_dtypes = (DType.BF16,)

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    def conv(self, shape: ConvShape, dtype: DType) -> Op:
        self.seen.append((shape, dtype))
        return Op(lambda: None, work_flop=shape.flop)

    def attention(self, shape: AttentionShape, dtype: DType, backward: bool) -> Op:
        self.seen.append((shape, dtype, backward))
        return Op(lambda: None, work_flop=shape.fwd_flop)


def test_suite_records_and_passes_the_shapes() -> None:
    be = _Recorder()
    items = {it.key: it for it in plan_suite(be, groups=["conv", "gemm"])}
    conv = items["conv/bf16/n64-c64-h56-w56-k64-r3-s3-st1-p1"]
    att = items["attention/bf16/b8-h12-s1024-d64-causal/fwd+bwd"]
    [mc] = conv.run(be, TimingPolicy(target_s=1e-4))
    [ma] = att.run(be, TimingPolicy(target_s=1e-4))
    assert be.seen == [
        (ConvShape(64, 64, 56, 56, 64, 3, 3, 1, 1), DType.BF16),
        (AttentionShape(8, 12, 1024, 64, True), DType.BF16, True),
    ]
    shape_c = {k: mc.params[k] for k in ("n", "c", "h", "w", "k", "r", "s", "stride", "pad")}
    assert shape_c == {"n": 64, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3} | {
        "stride": 1,
        "pad": 1,
    }
    assert mc.params["dtype"] == "bf16"
    assert {k: ma.params[k] for k in ("batch", "heads", "seq", "head_dim", "causal", "phase")} == {
        "batch": 8,
        "heads": 12,
        "seq": 1024,
        "head_dim": 64,
        "causal": True,
        "phase": "fwd+bwd",
    }
