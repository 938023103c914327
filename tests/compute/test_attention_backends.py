"""Fused attention per backend: published tables, SDPA/TE rules, and the compute model's use."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfmodel.compute import ComputeModel, ComputeParams
from perfmodel.compute.attention import AttentionBackend, attention_efficiency
from perfmodel.compute.attention import resolve as resolve_backend
from perfmodel.compute.model import attention_shape
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.layers import LayerKind

PEAK = 989.4
GENERIC = (0.5, 0.24)
B = AttentionBackend


def eff(backend: B, arch: str, d: int, s: int, causal: bool) -> tuple[float, float]:
    e = attention_efficiency(backend, arch, d, s, causal, generic=GENERIC)
    return e.fwd, e.bwd


def test_hopper_table_points_by_hand() -> None:
    # FlashAttention-3 paper Fig. 5/6: FA2 causal d=128 s=8k 333 TFLOP/s forward; backward (no
    # mask) 318, scaled by the forward's causal/full ratio 333/370
    f, b = eff(B.FLASH_ATTENTION_2, "Hopper", 128, 8192, True)
    assert f == pytest.approx(333 / PEAK)
    assert b == pytest.approx(318 / PEAK * 333 / 370)
    f, b = eff(B.CUDNN, "Hopper", 128, 2048, False)
    assert (f, b) == pytest.approx((617 / PEAK, 465 / PEAK))
    f, b = eff(B.FLASH_ATTENTION_3, "Hopper", 64, 16384, False)
    assert (f, b) == pytest.approx((497 / PEAK, 474 / PEAK))


def test_interpolation_in_log2_and_clamping() -> None:
    # d = 96 lies at log2 fraction t = log2(1.5) between 64 and 128; s = 2048 exactly
    t = math.log2(96 / 64)
    f, _ = eff(B.CUDNN, "Hopper", 96, 2048, False)
    assert f == pytest.approx((395 + t * (617 - 395)) / PEAK)
    # s = 3000 between 2k and 4k at log2(3000/2048)
    u = math.log2(3000 / 2048)
    f, _ = eff(B.FLASH_ATTENTION_3, "Hopper", 128, 3000, False)
    assert f == pytest.approx((625 + u * (638 - 625)) / PEAK)
    # outside the published ranges: clamped
    assert eff(B.FLASH_ATTENTION_3, "Hopper", 128, 10**6, False) == eff(
        B.FLASH_ATTENTION_3, "Hopper", 128, 16384, False
    )
    assert eff(B.FLASH_ATTENTION_2, "Hopper", 512, 4096, False) == eff(
        B.FLASH_ATTENTION_2, "Hopper", 256, 4096, False
    )


def test_each_hopper_kernel_reads_its_own_figures() -> None:
    # causal forward, head dimension 256, 16k (Fig. 5): FA2 298, cuDNN 509, FA3 642 TFLOP/s; the
    # causal backward takes the forward's causal/full ratio (FA3 at 128: 616/648 of 561)
    hd256 = {B.FLASH_ATTENTION_2: 298, B.CUDNN: 509, B.FLASH_ATTENTION_3: 642}
    for backend, tflops in hd256.items():
        e = attention_efficiency(backend, "Hopper", 256, 16384, True, generic=GENERIC)
        assert e.fwd == pytest.approx(tflops / PEAK) and e.from_table
        assert e.source.endswith("on Hopper: Shah et al. 2024 (FlashAttention-3, arXiv "
                                 "2407.08608) Fig. 5/6, H100 SXM5 BF16")  # fmt: skip
    assert eff(B.FLASH_ATTENTION_3, "Hopper", 128, 16384, True)[1] == pytest.approx(
        561 / PEAK * 616 / 648
    )
    assert eff(B.CUDNN, "Hopper", 128, 16384, True)[0] == pytest.approx(539 / PEAK)


def test_causal_head_dim_64_takes_head_dim_128s_ratio() -> None:
    f64c, _ = eff(B.FLASH_ATTENTION_2, "Hopper", 64, 1024, True)
    assert f64c == pytest.approx(306 / PEAK * 260 / 350)


def test_backend_rules() -> None:
    assert resolve_backend(B.SDPA, "Hopper") is B.FLASH_ATTENTION_2
    assert resolve_backend(B.SDPA, "Ampere") is B.FLASH_ATTENTION_2
    assert resolve_backend(B.SDPA, "Blackwell") is B.SDPA_EFFICIENT  # no FA2 kernels for sm100
    assert (
        resolve_backend(B.FLASH_ATTENTION_3, "Ampere") is B.FLASH_ATTENTION_2
    )  # FA3 is Hopper only
    assert resolve_backend(B.CUDNN, "Ampere") is B.FLASH_ATTENTION_2  # TE prefers FA2 on sm80
    assert resolve_backend(B.CUDNN, "Hopper") is B.CUDNN
    # AMD Instinct: SDPA's AOTriton/CK flash kernels and TE-ROCm's CK/AOTriton attention have no
    # published tables: the generic pair, whichever backend the stack names (but forced math)
    for arch in ("CDNA3", "CDNA4"):
        for b in (B.SDPA, B.SDPA_EFFICIENT, B.FLASH_ATTENTION_2, B.FLASH_ATTENTION_3, B.CUDNN):
            assert resolve_backend(b, arch) is B.GENERIC
        assert resolve_backend(B.SDPA_MATH, arch) is B.SDPA_MATH
    sdpa_amd = attention_efficiency(B.SDPA, "CDNA3", 128, 4096, True, generic=GENERIC)
    assert (sdpa_amd.fwd, sdpa_amd.bwd) == GENERIC  # not halved as the Blackwell fallback is


def test_generic_and_unpublished_pairs() -> None:
    assert eff(B.GENERIC, "Hopper", 128, 4096, True) == GENERIC
    assert eff(B.CUDNN, "Blackwell", 128, 4096, True) == GENERIC  # no published table
    sdpa_bw = attention_efficiency(B.SDPA, "Blackwell", 128, 4096, True, generic=GENERIC)
    assert (sdpa_bw.fwd, sdpa_bw.bwd) == pytest.approx((0.25, 0.12))
    # Ampere FA2 plateau: 73% forward, 63% backward of the A100 peak (FlashAttention-2 paper)
    f, b = eff(B.FLASH_ATTENTION_2, "Ampere", 128, 16384, False)
    assert (f, b) == pytest.approx((0.73, 0.63))


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ConfigError):
        attention_efficiency(B.CUDNN, "Hopper", 0, 1024, True, generic=GENERIC)


@given(
    backend=st.sampled_from([B.FLASH_ATTENTION_2, B.FLASH_ATTENTION_3, B.CUDNN, B.SDPA_MATH]),
    arch=st.sampled_from(["Ampere", "Hopper"]),
    d=st.integers(16, 512),
    s=st.integers(64, 1 << 20),
)
def test_efficiencies_are_fractions_and_the_mask_never_helps(
    backend: B, arch: str, d: int, s: int
) -> None:
    f, b = eff(backend, arch, d, s, False)
    fc, bc = eff(backend, arch, d, s, True)
    assert 0 < fc <= f <= 1 and 0 < bc <= b <= 1


def _attention_layer(cp: int = 1):
    w = build_model(
        "llama",
        batch_size=1,
        precision="bf16",
        hidden=1024,
        layers=1,
        heads=8,
        kv_heads=8,
        ffn_hidden=2048,
        vocab=1024,
        seq_len=4096,
        **({"cp": cp} if cp > 1 else {}),
    )
    return next(la for la in w.layers if la.kind is LayerKind.ATTENTION)


def test_zoo_attention_shape_is_read_back() -> None:
    s = attention_shape(_attention_layer())
    assert (s.head_dim, s.seq, s.causal) == (128, 4096, True)
    # ring context parallelism: each step is a local-by-local block
    assert attention_shape(_attention_layer(cp=2)).seq == 2048


def test_compute_model_uses_the_backend_and_the_power_limit() -> None:
    layer = _attention_layer()
    h100 = get_gpu("H100-SXM5-80GB")
    gen = ComputeModel(h100, ComputeParams.for_gpu(h100))
    cud = ComputeModel(h100, ComputeParams.for_gpu(h100, attention_backend=B.CUDNN))
    t_gen = gen.layer_time(layer, Precision.BF16)
    t_cud = cud.layer_time(layer, Precision.BF16)
    fwd_eff = 518 / PEAK  # cuDNN, causal, d=128, s=4k: 518 TFLOP/s (FlashAttention-3 Fig. 5d)
    assert t_cud.efficiency == pytest.approx(fwd_eff)
    assert t_cud.fwd_s < t_gen.fwd_s and t_cud.tile == "fused (cudnn)"
    part = get_gpu("H100-SXM5-96GB-500W")
    lim = ComputeModel(part, ComputeParams.for_gpu(part, attention_backend=B.CUDNN))
    assert lim.attention(layer).fwd == pytest.approx(fwd_eff * part.power_clock_ratio())
    # the generic pair is not derated (it is a fitted number of its own)
    lim_gen = ComputeModel(part, ComputeParams.for_gpu(part))
    assert lim_gen.attention(layer).fwd == 0.5


def test_presets_carry_their_backend_into_the_compute_model() -> None:
    from perfmodel.api import Scenario, resolve, system_costs
    from perfmodel.parallel.recipe import build_recipe
    from perfmodel.parallel.software import get_preset
    from perfmodel.workload.memory import Optimizer

    assert get_preset("torchtitan").attention_backend is B.SDPA
    assert get_preset("megatron-core").attention_backend is B.CUDNN
    assert get_preset("pytorch-ddp").attention_backend is B.GENERIC
    sc = Scenario(
        system="dgx-h100",
        model="llama",
        gpus=8,
        software="torchtitan",
        global_batch=8,
        precision="bf16",
        fidelity="analytic",
    )
    r = resolve(sc)
    recipe = build_recipe(r.preset, r.precision, Optimizer.ADAMW, r.plan)
    assert recipe.attention_backend is B.SDPA
    costs = system_costs(r.topology, r.precision, None, r.preset, recipe=recipe)
    assert costs.compute.params.attention_backend is B.SDPA
