"""Megatron-Core's selective recomputation checkpoints the attention core whatever its kernel
(core_v0.8.0 ``Attention.checkpoint_core_attention``; ``recompute_modules=["core_attn"]`` at
the Megatron-Bridge 26.04 pin): a fused attention's forward re-runs in backward (its
context-parallel exchange too) and its saved log-sum-exp is freed; legacy Megatron-LM's rule
leaves fused attention alone."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict, resolve
from perfmodel.dtypes import Precision
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.selective import SelectiveRecompute
from perfmodel.parallel.software import MCORE_SELECTIVE, get_preset
from perfmodel.workload import build_model
from perfmodel.workload.layers import LayerCost, LayerKind, Workload
from perfmodel.workload.memory import ModuleRecompute, Recompute, RecomputeModule

B, S, H, HEADS, KV, LAYERS = 2, 256, 512, 8, 2, 3


def _llama() -> Workload:
    return build_model(
        "llama",
        batch_size=B,
        hidden=H,
        layers=LAYERS,
        heads=HEADS,
        kv_heads=KV,
        ffn_hidden=1024,
        vocab=1000,
        seq_len=S,
        precision="bf16",
    )


def test_megatron_core_presets_checkpoint_the_core_attention() -> None:
    assert get_preset("megatron-core").selective_recompute == MCORE_SELECTIVE
    assert get_preset("nemo").selective_recompute == MCORE_SELECTIVE
    assert MCORE_SELECTIVE.modules == frozenset({RecomputeModule.CORE_ATTN})
    # legacy Megatron-LM keeps flash attention outside the checkpoint
    assert get_preset("megatron").selective_recompute is SelectiveRecompute.ATTENTION_CORE
    attn = next(la for la in _llama().layers if la.kind is LayerKind.ATTENTION)
    assert MCORE_SELECTIVE.share(attn) == 1.0
    assert SelectiveRecompute.ATTENTION_CORE.share(attn) == 0.0


def test_core_attn_frees_the_fused_attentions_log_sum_exp() -> None:
    """Kept: every saved byte but each layer's FP32 log-sum-exp (b x heads x s x 4 bytes = 16
    KiB here); working: one layer's, live again while its attention re-runs."""
    wl = _llama()
    lse = B * HEADS * S * 4.0
    total = sum(la.activation_bytes for la in wl.layers)
    kept, working = MCORE_SELECTIVE.kept_bytes(wl.layers, Precision.BF16)
    assert (kept, working) == (pytest.approx(total - LAYERS * lse), pytest.approx(lse))
    # with mla_up_proj too the whole fused attention's saved bytes go (nothing double-counted)
    both = ModuleRecompute(frozenset({RecomputeModule.CORE_ATTN, RecomputeModule.MLA_UP_PROJ}))
    attn = next(la for la in wl.layers if la.kind is LayerKind.ATTENTION)
    assert both.dropped_bytes(attn, mla=True) == attn.activation_bytes


def _fixed_chunk(share_of: object) -> float:
    """Recompute seconds of a block (norm 1 ms, fused attention 4 ms, linear 2 ms forward)
    and an embedding outside it (3 ms) under ``share_of``."""
    from perfmodel.parallel.lowering import build_chunk

    def lay(name: str, kind: LayerKind, block: int | None) -> LayerCost:
        return LayerCost(
            name=name,
            kind=kind,
            fwd_flop=1.0,
            bwd_input_flop=1.0,
            bwd_weight_flop=1.0,
            params=0,
            fwd_bytes=1.0,
            bwd_bytes=1.0,
            activation_bytes=0.0,
            output_shape=(1,),
            block=block,
        )

    layers = (
        lay("embed", LayerKind.EMBEDDING, None),
        lay("layer0.ln1", LayerKind.NORM, 0),
        lay("layer0.attention", LayerKind.ATTENTION, 0),
        lay("layer0.attn_out", LayerKind.LINEAR, 0),
    )
    fwd = {"embed": 3e-3, "layer0.ln1": 1e-3, "layer0.attention": 4e-3, "layer0.attn_out": 2e-3}

    class FixedCosts:
        precision = Precision.BF16

        def layer_time(self, layer: LayerCost) -> tuple[float, float, float]:
            return fwd[layer.name], 0.0, 0.0

        def collective_time(self, *a: object, **k: object) -> float:
            return 0.0

    wl = Workload(name="t", layers=layers, batch_size=1, precision=Precision.BF16, total_params=0)
    chunk = build_chunk(
        wl,
        [0, 1, 2, 3],
        FixedCosts(),  # type: ignore[arg-type]
        ParallelismPlan(recompute=Recompute.SELECTIVE),
        ("g0",),
        bucket_bytes=None,
        first_bucket_bytes=None,
        by_block=False,
        selective_share=share_of,  # type: ignore[arg-type]
    )
    return chunk.segments[0].recompute_s


def test_core_attn_reruns_the_fused_attention_forward() -> None:
    assert _fixed_chunk(MCORE_SELECTIVE.share) == pytest.approx(4e-3)
    assert _fixed_chunk(SelectiveRecompute.ATTENTION_CORE.share) == 0.0


def _sc(**kw: object) -> Scenario:
    base: dict[str, object] = dict(
        system="dgx-h100",
        model="llama",
        model_args={"hidden": 512, "layers": 2, "heads": 8, "seq_len": 8192, "vocab": 1024},
        precision="bf16",
        optimizer="adam",
        global_batch=1,
        tp=1,
        fidelity="analytic",
        software="megatron-core",
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


def test_megatron_core_selective_is_slower_and_smaller_than_none() -> None:
    none, sel = (predict(_sc(gpus=1, recompute=r), baseline=False) for r in ("none", "selective"))
    assert sel.iteration_time_s > none.iteration_time_s
    assert sel.memory.activations_bytes < none.memory.activations_bytes
    assert not any("re-runs nothing" in d for d in sel.defaults)


def test_checkpointed_ring_attention_gathers_its_keys_again() -> None:
    """cp=8 with the all-gather exchange (exposed in full): the re-run forward's K/V
    all-gather joins the backward's context-parallel communication."""
    from perfmodel.parallel.taskgraph import CommKind
    from perfmodel.pipeline.lower import build_step

    def cp_s(rec: str, software: str = "megatron-core") -> float:
        sc = _sc(cp=8, cp_comm="allgather", recompute=rec, software=software)
        step, _ = build_step(sc, resolve(sc))
        tasks = [t for t in step.graph.tasks if t.comm is not None and t.comm.kind is CommKind.CP]
        return sum(t.duration_s for t in tasks)

    none, sel = cp_s("none"), cp_s("selective")
    assert sel > none
    # the forward all-gather is a third of none's (F all-gather, B all-gather + reduce-scatter
    # of the same bytes): selective adds it once more
    assert sel == pytest.approx(none * 4 / 3, rel=1e-6)
