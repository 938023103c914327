"""cuDNN fused attention on data-centre Blackwell: the cuDNN frontend benchmark's tables.

Points are the TFLOP/s of NVIDIA/cudnn-frontend @3929da2
``benchmark/sdpa_benchmark_training/results/`` (BF16, non-deterministic backward) over the
GB200's and GB300's dense BF16 peak, 2500 TFLOP/s.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.compute.attention import AttentionBackend, attention_efficiency
from perfmodel.dtypes import Precision
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.layers import LayerKind

GB_PEAK = 2500.0
GENERIC = (0.5, 0.24)
B = AttentionBackend
SM100, SM103 = (10, 0), (10, 3)


def eff(d: int, s: int, causal: bool, cc: tuple[int, int] | None) -> tuple[float, float]:
    e = attention_efficiency(B.CUDNN, "Blackwell", d, s, causal, generic=GENERIC,
                             compute_capability=cc)  # fmt: skip
    return e.fwd, e.bwd


def test_gb200_and_gb300_points_from_the_csvs() -> None:
    # llama3.1 config (d = 128), 8k: GB200 causal 1574 fwd / 1332 bwd, no mask 1771 / 1404
    assert eff(128, 8192, True, SM100) == pytest.approx((1574 / GB_PEAK, 1332 / GB_PEAK))
    assert eff(128, 8192, False, SM100) == pytest.approx((1771 / GB_PEAK, 1404 / GB_PEAK))
    # GB300 (Blackwell Ultra) causal 1856 / 1435 at 8k, 1703 / 1248 at 4k
    assert eff(128, 8192, True, SM103) == pytest.approx((1856 / GB_PEAK, 1435 / GB_PEAK))
    assert eff(128, 4096, True, SM103) == pytest.approx((1703 / GB_PEAK, 1248 / GB_PEAK))


def test_mla_backward_is_converted_to_two_and_a_half_forwards() -> None:
    # dsv3 config (d_qk 192, d_vo 128) GB200 causal 4k: fwd 1406, bwd 1057 counted with
    # 3 x 192 + 2 x 128 = 832 per pair and head; this module counts 2.5 x (192 + 128) = 800
    f, b = eff(192, 4096, True, SM100)
    assert f == pytest.approx(1406 / GB_PEAK)
    assert b == pytest.approx(1057 / GB_PEAK * 800 / 832)


def test_causal_backward_is_the_measured_one_not_the_forward_ratio() -> None:
    # GB200 d = 128, 2k: causal bwd 885 measured; the Hopper rule would give 1124 x 1097/1433
    _, b = eff(128, 2048, True, SM100)
    assert b == pytest.approx(885 / GB_PEAK)
    assert b != pytest.approx(1124 * 1097 / 1433 / GB_PEAK)


def test_head_dim_64_takes_the_hopper_cudnn_ratio() -> None:
    hop64 = attention_efficiency(B.CUDNN, "Hopper", 64, 8192, False, generic=GENERIC)
    hop128 = attention_efficiency(B.CUDNN, "Hopper", 128, 8192, False, generic=GENERIC)
    f, b = eff(64, 8192, False, SM100)
    assert f == pytest.approx(1771 / GB_PEAK * hop64.fwd / hop128.fwd)
    assert b == pytest.approx(1404 / GB_PEAK * hop64.bwd / hop128.bwd)
    # beyond the Hopper figures' 16k the ratio stays at 16k's
    hop64 = attention_efficiency(B.CUDNN, "Hopper", 64, 16384, False, generic=GENERIC)
    hop128 = attention_efficiency(B.CUDNN, "Hopper", 128, 16384, False, generic=GENERIC)
    f, _ = eff(64, 32768, False, SM100)
    assert f == pytest.approx(1634 / GB_PEAK * hop64.fwd / hop128.fwd)


def test_lengths_outside_2k_32k_are_clamped() -> None:
    assert eff(128, 512, True, SM100) == eff(128, 2048, True, SM100)
    assert eff(128, 1 << 20, False, SM103) == eff(128, 32768, False, SM103)


def test_unknown_and_consumer_blackwell_keep_the_generic_pair() -> None:
    assert eff(128, 4096, True, None) == GENERIC
    assert eff(128, 4096, True, (12, 0)) == GENERIC  # RTX 50xx / RTX PRO 6000: no table
    fa2 = attention_efficiency(B.FLASH_ATTENTION_2, "Blackwell", 128, 4096, True,
                               generic=GENERIC, compute_capability=SM100)  # fmt: skip
    assert (fa2.fwd, fa2.bwd) == GENERIC


@given(
    cc=st.sampled_from([SM100, SM103]),
    d=st.integers(16, 512),
    s=st.integers(64, 1 << 20),
)
def test_efficiencies_are_fractions(cc: tuple[int, int], d: int, s: int) -> None:
    for causal in (False, True):
        f, b = eff(d, s, causal, cc)
        assert 0 < f <= 1 and 0 < b <= 1


#: One small Llama block at 8k tokens, head dimension 1024 / 8 = 128.
SMALL_LLAMA_8K = dict(hidden=1024, layers=1, heads=8, kv_heads=8, ffn_hidden=2048, vocab=1024)


def _attention_layer():
    w = build_model("llama", batch_size=1, precision="bf16", seq_len=8192, **SMALL_LLAMA_8K)
    return next(la for la in w.layers if la.kind is LayerKind.ATTENTION)


@pytest.mark.parametrize(
    ("gpu", "fwd_tflops"),
    [("GB200-186GB", 1574), ("B200-SXM-180GB", 1574), ("GB300-288GB", 1856),
     ("B300-SXM-288GB", 1856)],
)  # fmt: skip
def test_the_catalogue_gpus_read_their_generation(gpu: str, fwd_tflops: float) -> None:
    """B200/GB200 read the GB200 table, B300/GB300 the GB300's, as a fraction of their own
    peak (the B200's and B300's 2250 TFLOP/s give 0.9 x the GB parts' rate)."""
    spec = get_gpu(gpu)
    params = ComputeParams.for_gpu(spec, attention_backend=B.CUDNN)
    assert params.compute_capability == spec.compute_capability
    cm = ComputeModel(spec, params)
    e = cm.attention(_attention_layer())
    assert e.from_table and "cudnn-frontend" in e.source
    assert e.fwd == pytest.approx(fwd_tflops / GB_PEAK * params.power_clock_ratio)
    t = cm.layer_time(_attention_layer(), Precision.BF16)
    assert t.tile == "fused (cudnn)"


def test_compute_capability_survives_a_profile_round_trip() -> None:
    p = ComputeParams.for_gpu(get_gpu("GB300-288GB"))
    d = p.to_dict()
    assert d["compute_capability"] == [10, 3]
    assert ComputeParams.from_dict(d) == p
    old = {k: v for k, v in d.items() if k != "compute_capability"}  # a profile before it
    assert ComputeParams.from_dict(old).compute_capability is None


def test_a_128_key_sliding_window_runs_at_the_gpt_oss_measurement() -> None:
    # gpt_oss config (d = 64, window 128): GB200 2k-16k fwd 153/161/165/167, bwd 176-188
    e = attention_efficiency(B.CUDNN, "Blackwell", 64, 128, True, generic=GENERIC,
                             compute_capability=SM100, sliding=True)  # fmt: skip
    assert (e.fwd, e.bwd) == pytest.approx(
        ((153 + 161 + 165 + 167) / 4 / GB_PEAK, (176 + 182 + 187 + 188) / 4 / GB_PEAK)
    )
    # a window at the tables' shortest length reads the causal table; halfway in log2 between
    w2k = eff(64, 2048, True, SM100)
    win = attention_efficiency(B.CUDNN, "Blackwell", 64, 2048, True, generic=GENERIC,
                               compute_capability=SM100, sliding=True)  # fmt: skip
    assert (win.fwd, win.bwd) == pytest.approx(w2k)
    mid = attention_efficiency(B.CUDNN, "Blackwell", 64, 512, True, generic=GENERIC,
                               compute_capability=SM100, sliding=True)  # fmt: skip
    assert mid.fwd == pytest.approx((e.fwd + w2k[0]) / 2)
    # Hopper measured no window: its tables are read at the span as before
    hop = attention_efficiency(B.CUDNN, "Hopper", 64, 128, True, generic=GENERIC, sliding=True)
    span = attention_efficiency(B.CUDNN, "Hopper", 64, 128, True, generic=GENERIC)
    assert (hop.fwd, hop.bwd) == (span.fwd, span.bwd)


def test_gpt_oss_window_layers_are_read_as_sliding() -> None:
    from perfmodel.compute.model import attention_shape

    w = build_model("gpt_oss_120b", batch_size=1, precision="bf16", seq_len=4096)
    shapes = {attention_shape(la) for la in w.layers if la.kind is LayerKind.ATTENTION}
    assert {(s.seq, s.sliding) for s in shapes} == {(128, True), (4096, False)}
    gb300 = get_gpu("GB300-288GB")
    cm = ComputeModel(gb300, ComputeParams.for_gpu(gb300, attention_backend=B.CUDNN))
    win = next(la for la in w.layers if la.kind is LayerKind.ATTENTION and la.gemm.m == 128)
    assert cm.attention(win).fwd == pytest.approx((160 + 167 + 172 + 173) / 4 / GB_PEAK)


def test_a_causal_block_of_twice_its_queries_is_not_a_window_unless_stated() -> None:
    """A causal block ``GemmShape(m, 2 m, ...)`` built by hand (or imported) runs at the causal
    tables: only a layer that states its window (``sliding_window``) reads the window table."""
    from dataclasses import replace

    from perfmodel.compute.model import attention_shape
    from perfmodel.workload.layers import GemmShape, LayerCost

    g = GemmShape(128, 256, 64, 2 * 128 * 32)  # the shape of a 128-key window's blocks
    att = LayerCost(name="a", kind=LayerKind.ATTENTION, fwd_flop=g.flop, bwd_input_flop=2.5 * g.flop,
                    bwd_weight_flop=0.0, params=0, fwd_bytes=1.0, bwd_bytes=1.0,
                    activation_bytes=1.0, output_shape=(1,), gemm=g)  # fmt: skip
    shape = attention_shape(att)
    assert (shape.seq, shape.causal, shape.sliding) == (128, True, False)
    gb200 = get_gpu("GB200-186GB")
    cm = ComputeModel(gb200, ComputeParams.for_gpu(gb200, attention_backend=B.CUDNN))
    e = cm.attention(att)
    assert (e.fwd, e.bwd) == pytest.approx(eff(64, 128, True, SM100))
    window = (153 + 161 + 165 + 167) / 4 / GB_PEAK
    assert e.fwd != pytest.approx(window)
    stated = replace(att, sliding_window=128)
    assert attention_shape(stated).sliding
    assert cm.attention(stated).fwd == pytest.approx(window)


def test_tables_are_read_against_the_catalogues_peak() -> None:
    """The cuDNN tables are stored as fractions of 2500 TFLOP/s (GB200's and GB300's dense
    BF16 peak): the catalogue must say the same, or every Blackwell fraction is off."""
    from perfmodel.compute.attention import _GB_PEAK_TFLOPS
    from perfmodel.dtypes import DType

    for name in ("GB200-186GB", "GB300-288GB"):
        peak = get_gpu(name).peak_flops[DType.BF16]
        assert peak == _GB_PEAK_TFLOPS * 1e12 == GB_PEAK * 1e12
