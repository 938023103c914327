"""Grouped GEMMs of mixture-of-experts layers: the same expert shape, one GEMM per expert.

A routed-expert layer of a rank runs ``groups = experts / ep`` GEMMs of ``m = rows / groups``
rows each (balanced routing: the ``GemmShape`` of :meth:`perfmodel.workload._net.Net.grouped_linear`,
``batch = groups``). How they reach the GPU decides what a small expert costs:

``multi-stream`` (:attr:`GroupedImpl.MULTI_STREAM`, the default)
    Transformer Engine's ``GroupedLinear`` (Megatron-Core ``TEGroupedMLP``, ``--moe-grouped-gemm``):
    ``nvte_multi_tensor_gemm`` launches one cuBLAS GEMM per expert, round-robin over
    ``TE_COMPUTE_STREAMS = 4`` compute streams, then joins them
    (``transformer_engine/common/gemm/cublaslt_gemm.cu`` ``multi_stream_cublas_gemm`` and
    ``common/util/multi_stream.cpp`` ``get_num_compute_streams() = 4`` at TE v2.9-v2.14; the
    CUTLASS grouped kernel of the same function is taken only for BF16/FP16 on Hopper with
    ``NVTE_USE_CUTLASS_GROUPED_GEMM=1``, off by default). At most four expert GEMMs share the
    SMs at once, so a GEMM too small to fill the GPU leaves the rest of its wave idle unless
    three others run beside it, and each stream issues its GEMMs one after another: the
    ``ceil(groups / 4)`` launches of the busiest stream are on the critical path.
``grouped-kernel`` (:attr:`GroupedImpl.GROUPED_KERNEL`)
    One launch whose persistent tile scheduler walks every expert's tiles (CUTLASS grouped
    GEMM, ``torch._grouped_mm``, DeepGEMM's "contiguous layout"): all ``groups x tiles`` fill
    the waves together, but each expert's rows are padded to the kernel's M block
    (DeepGEMM README: "each expert segment must be aligned to the GEMM M block size",
    ``get_m_alignment_for_contiguous_layout()``, 128 rows on Hopper).

The per-GEMM efficiency (large-GEMM ceiling, tile, wave and ``k`` quantisation) is the dense
model's (:meth:`perfmodel.compute.ComputeModel.gemm`, one function: its ceilings are the compute
model's, not restated here); this module only says which GEMMs share a wave and how many
launches the pass waits for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from perfmodel._enum import ParsedEnum, dashed
from perfmodel.workload.layers import GemmShape

#: Compute streams Transformer Engine spreads a grouped GEMM's per-expert cuBLAS calls over:
#: ``transformer_engine/common/util/multi_stream.cpp`` ``get_num_compute_streams()`` returns
#: ``num_compute_streams = 4`` (TE v2.9 to v2.14, the Megatron-Core/NeMo 25.x-26.04 range).
TE_COMPUTE_STREAMS = 4

#: Rows an expert's segment is padded to in a single-launch grouped kernel: the GEMM's M block
#: (DeepGEMM README, "Grouped GEMMs (contiguous layout)"; its ``BLOCK_M`` is 128 on SM90).
GROUPED_M_ALIGNMENT = 128


class GroupedImpl(str, ParsedEnum, where="grouped_gemm", normalize=dashed):
    """How a grouped GEMM's per-expert GEMMs are launched (see the module docstring)."""

    MULTI_STREAM = "multi-stream"
    GROUPED_KERNEL = "grouped-kernel"


@dataclass(frozen=True)
class GroupedEfficiency:
    """Outcome of :func:`grouped_gemm_efficiency`.

    Attributes
    ----------
    efficiency
        FLOP-weighted fraction of the dtype's peak over the whole pass: the useful FLOP over
        the sum, round by round, of each round's FLOP at its batched efficiency (padding rows
        of a grouped kernel count as waste).
    launches
        GEMM launches one after another on the busiest stream (each pays the compute model's
        ``kernel_launch_s``; the first is the layer's own launch).
    concurrent
        Expert GEMMs that share the SMs at once.
    """

    efficiency: float
    launches: int
    concurrent: int


def grouped_gemm_efficiency(
    gemm: GemmShape,
    gemm_efficiency: Callable[[GemmShape], float],
    impl: GroupedImpl = GroupedImpl.MULTI_STREAM,
    *,
    streams: int = TE_COMPUTE_STREAMS,
    m_alignment: int = GROUPED_M_ALIGNMENT,
) -> GroupedEfficiency:
    """Efficiency of ``gemm.batch`` expert GEMMs of ``(gemm.m x gemm.k) @ (gemm.k x gemm.n)``.

    ``gemm_efficiency(shape)`` is the dense model's efficiency of a batched GEMM (``shape.batch``
    GEMMs launched together), e.g. ``lambda s: cm.gemm(s, dtype).efficiency``.

    ``multi-stream``: ``c = min(streams, groups)`` GEMMs run at once, in ``groups // c`` full
    rounds and one round of the ``groups % c`` left::

        T     = (groups // c) F(c) / e(c) + F(r) / e(r)      (F(j) = j x one GEMM's FLOP)
        eff   = groups F(1) / T,     launches = ceil(groups / c)

    ``grouped-kernel``: every expert's rows padded to ``m_alignment``, one launch::

        eff   = e(m_pad, groups) m / m_pad,     launches = 1

    Examples
    --------
    Eight experts of 4096 x 1536 x 2048 (Qwen3-30B-A3B fc1 on 16 ranks) on a model that loses
    nothing at two or more concurrent GEMMs and a quarter below: four streams, two rounds:

    >>> e = lambda s: 1.0 if s.batch >= 2 else 0.75
    >>> r = grouped_gemm_efficiency(GemmShape(4096, 1536, 2048, 8), e)
    >>> r.efficiency, r.launches, r.concurrent
    (1.0, 2, 4)
    >>> r = grouped_gemm_efficiency(GemmShape(4096, 1536, 2048, 5), e)  # 4 + 1: the single one
    >>> round(r.efficiency, 4), r.launches          # 5 / (4 + 1 / 0.75)
    (0.9375, 2)
    >>> r = grouped_gemm_efficiency(GemmShape(100, 1536, 2048, 8), e, GroupedImpl.GROUPED_KERNEL)
    >>> round(r.efficiency, 4), r.launches          # 100 of 128 padded rows do work
    (0.7812, 1)
    """
    groups = max(int(gemm.batch), 1)
    m, n, k = max(gemm.m, 1), max(gemm.n, 1), max(gemm.k, 1)
    if impl is GroupedImpl.GROUPED_KERNEL:
        m_pad = -(-m // m_alignment) * m_alignment
        eff = gemm_efficiency(GemmShape(m_pad, n, k, groups)) * m / m_pad
        return GroupedEfficiency(eff, 1, groups)
    c = max(1, min(int(streams), groups))
    full, rest = divmod(groups, c)
    # time in units of one GEMM's FLOP over the peak
    t = full * c / gemm_efficiency(GemmShape(m, n, k, c))
    if rest:
        t += rest / gemm_efficiency(GemmShape(m, n, k, rest))
    return GroupedEfficiency(groups / t, math.ceil(groups / c), c)


__all__ = [
    "GROUPED_M_ALIGNMENT",
    "TE_COMPUTE_STREAMS",
    "GroupedEfficiency",
    "GroupedImpl",
    "grouped_gemm_efficiency",
]
