"""Kernels of Transformer Engine's fused permutation under Megatron-Core's all-to-all dispatcher
(``moe_permute_fusion``): the index maps built before the copies (``make_row_id_map``: three
Triton kernels; ``make_chunk_sort_map``: one), reused by the backward copies."""

from __future__ import annotations

import pytest

from perfmodel.compute import HOST_DISPATCH_S, ComputeModel, ComputeParams
from perfmodel.hardware import get_gpu
from perfmodel.workload import build_model
from perfmodel.workload.kernels import Fusion, KernelRecipe
from perfmodel.workload.zoo.moe import CHUNK_SORT_MAP_KERNELS, PERMUTE_MAP_KERNELS


def _layers(sort_chunks: bool, ep: int = 16) -> dict:
    k = KernelRecipe(fusion=Fusion.TE, moe_sort_chunks=sort_chunks)
    w = build_model(
        "qwen3_30b_a3b", batch_size=1, seq_len=4096, ep=ep, layers=1, precision="bf16",
        kernels=k,
    )  # fmt: skip
    return {la.name.split(".", 1)[1]: la for la in w.layers if la.name.startswith("layer0.")}


def test_alltoall_permute_golden() -> None:
    """The all-to-all dispatcher's permute: 3 map kernels + the copy forward, 1 backward; each
    chunk sort: 1 map kernel + the copy forward, 1 backward."""
    assert (PERMUTE_MAP_KERNELS, CHUNK_SORT_MAP_KERNELS) == (3, 1)
    by = _layers(True)
    assert (by["permute"].kernels, by["permute"].bwd_kernels) == (4, 1)
    for name in ("sort_chunks", "unsort_chunks"):
        assert (by[name].kernels, by[name].bwd_kernels) == (2, 1)
    assert (by["unpermute"].kernels, by["unpermute"].bwd_kernels) == (1, None)


def test_other_dispatchers_keep_one_copy_kernel() -> None:
    """Hybrid-EP permutes inside its own dispatch; no all-to-all flag, no map kernels."""
    by = _layers(False)
    assert (by["permute"].kernels, by["permute"].bwd_kernels) == (1, None)
    assert "sort_chunks" not in by


def test_map_kernels_cost_launches_not_bytes() -> None:
    """Same bytes; forward pays 3 more launches (GPU launch and host dispatch each), backward
    the same single copy kernel."""
    gpu = get_gpu("H100-SXM5-80GB")
    eager = HOST_DISPATCH_S["pytorch-eager"]
    cm = ComputeModel(gpu, ComputeParams.for_gpu(gpu, host_dispatch_s=eager))
    a2a, other = _layers(True)["permute"], _layers(False)["permute"]
    assert a2a.fwd_bytes == other.fwd_bytes and a2a.bwd_bytes == other.bwd_bytes
    ta, to = cm.layer_time(a2a, "bf16"), cm.layer_time(other, "bf16")
    assert ta.fwd_s - to.fwd_s == pytest.approx(3 * cm.params.kernel_launch_s)
    assert ta.bwd_input_s == pytest.approx(to.bwd_input_s)
    assert ta.host_fwd_s - to.host_fwd_s == pytest.approx(3 * eager)
