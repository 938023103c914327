"""Expert and context parallelism: the groups their collectives run on, and the ring overlap.

Rank order inside a pipeline stage follows Megatron-Core (``megatron/core/parallel_state.py``,
``order="tp-cp-ep-dp-pp"``): tensor-parallel ranks fastest, then context-parallel ranks, then
data-parallel replicas. :class:`~perfmodel.parallel.placement.Placement` lays the ``dp x cp``
ranks that hold the same dense weights along its data-parallel axis, context-parallel rank
fastest, so a context-parallel group is ``cp`` consecutive entries of it and the dense
gradients are reduced over all ``dp x cp`` of them (Megatron-Core's
data-parallel-with-context-parallel group).

Expert groups fold over the same ``tp x cp x dp`` ranks of a stage ("MoE parallel folding",
Liu et al. 2025, arXiv:2504.14960; Megatron-Core ``expert_tensor_parallel_size``): numbered
``etp`` fastest, then ``ep``, then the expert data-parallel index, so an expert-parallel group
of ``ep <= gpus_per_node / etp`` ranks sits inside one server (NVLink) before it spans NICs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import CPComm

#: Most sibling groups a collective names for NIC sharing (the analytic sharing factor and the
#: flow simulation); groups on other servers do not share the representative's NICs.
MAX_SIBLINGS = 64


def stage_ranks(pl: Placement, pp_rank: int) -> list[str]:
    """GPUs of pipeline stage ``pp_rank`` in ``tp``-fastest, then ``cp``/``dp`` order."""
    return [pl.gpu(d, pp_rank, t) for d in range(pl.dp) for t in range(pl.tp)]


def context_groups(pl: Placement, pp_rank: int, cp: int) -> list[tuple[str, ...]]:
    """Every context-parallel group of a stage (``cp`` consecutive data-axis ranks, one per
    tensor-parallel rank and replica); the first is the simulated representative's."""
    return [
        tuple(pl.gpu(r * cp + c, pp_rank, t) for c in range(cp))
        for r in range(pl.dp // cp)
        for t in range(pl.tp)
    ]


def expert_groups(pl: Placement, pp_rank: int, ep: int, etp: int) -> list[tuple[str, ...]]:
    """Every expert-parallel group of a stage (``etp`` fastest, then ``ep``, then expert data
    parallelism, over :func:`stage_ranks`); the first is the representative's."""
    ranks = stage_ranks(pl, pp_rank)
    span = ep * etp
    return [
        tuple(ranks[j * span + k * etp + e] for k in range(ep))
        for j in range(len(ranks) // span)
        for e in range(etp)
    ]


def with_neighbours(
    groups: Sequence[tuple[str, ...]], topology: Any | None
) -> tuple[tuple[str, ...], ...]:
    """``groups[0]`` followed by the groups that share one of its servers (their traffic loads
    the same NICs), at most :data:`MAX_SIBLINGS`; only ``groups[0]`` without a topology."""
    first = tuple(groups[0])
    if topology is None or len(groups) == 1:
        return (first,)
    servers = {topology.server_of(g) for g in first}
    sibs = [g for g in groups[1:] if any(topology.server_of(x) in servers for x in g)]
    return (first, *sibs[:MAX_SIBLINGS])


def ring_exposed_s(comm_s: float, attention_s: float, cp: int) -> float:
    """Exposed time of ring attention's key/value exchange.

    The attention over ``cp`` chunks runs in ``cp`` steps; the transfer of the next chunk
    (``comm_s / (cp - 1)`` per step) runs beside the current step's attention
    (``attention_s / cp``), so each of the ``cp - 1`` transfers shows only what exceeds the step
    it hides under (Megatron-Core / Transformer Engine ``AttnFuncWithCPAndKVP2P``, which posts
    the next P2P exchange before the current block's attention kernel; Liu et al. 2023, Ring
    Attention, sec. 3):

    ``exposed = (cp - 1) max(0, comm_s / (cp - 1) - attention_s / cp)``

    >>> ring_exposed_s(3.0, 4.0, 4)  # 1 s per transfer under 1 s of attention: hidden
    0.0
    >>> ring_exposed_s(6.0, 4.0, 4)  # 2 s per transfer under 1 s: 3 x 1 s exposed
    3.0
    """
    if cp <= 1 or comm_s <= 0:
        return 0.0
    return (cp - 1) * max(0.0, comm_s / (cp - 1) - attention_s / cp)


def cp_exposed_s(comm_s: float, attention_s: float, cp: int, cp_comm: CPComm) -> float:
    """Exposed seconds of a layer's context-parallel K/V exchange for the plan's ``cp_comm``.

    ``ring``: :func:`ring_exposed_s`. ``allgather``: the all-gather of the whole sequence's K/V
    (forward) and the reduce-scatter of dK/dV (backward) run before/after the attention kernel
    and cannot overlap it (Megatron-Core ``TransformerConfig.cp_comm_type`` docstring, see
    :class:`~perfmodel.parallel.plan.CPComm`), so ``exposed = comm_s`` (0 when ``cp == 1``).
    Both move the same bytes; only the overlap differs.

    >>> cp_exposed_s(3.0, 4.0, 4, CPComm.ALLGATHER), cp_exposed_s(3.0, 4.0, 4, CPComm.RING)
    (3.0, 0.0)
    """
    if cp <= 1 or comm_s <= 0:
        return 0.0
    if cp_comm is CPComm.ALLGATHER:
        return comm_s
    return ring_exposed_s(comm_s, attention_s, cp)


def ep_overlap_exposed_s(alltoall_s: float, other_compute_s: float) -> float:
    """Exposed seconds of expert all-to-alls run beside another micro-batch's compute.

    Megatron-Core's combined 1F1B (``--overlap-moe-expert-parallel-comm``; developer guide
    "Combined 1F1B: Expert-Parallel All-to-All Overlap", docs.nvidia.com/megatron-core, user
    guide features/moe_a2a_overlap) pairs the forward of one micro-batch with the backward of
    another and runs each one's dispatch/combine all-to-all on a communication stream while
    the other's independent compute runs; DeepSeek-V3's DualPipe (arXiv:2412.19437, sec. 3.2.1)
    overlaps the same pairs. As an approximation of the steady state (warm-up and cool-down
    micro-batches, which have no partner, are not singled out; SM sharing between the
    streams is ignored), a segment's all-to-alls of one phase hide under the segment's compute
    of the other phase:

    ``exposed = max(0, alltoall_s - other_compute_s)``

    >>> ep_overlap_exposed_s(3.0, 2.0), ep_overlap_exposed_s(1.0, 2.0)
    (1.0, 0.0)
    """
    return max(0.0, alltoall_s - other_compute_s)


__all__ = [
    "MAX_SIBLINGS",
    "context_groups",
    "cp_exposed_s",
    "ep_overlap_exposed_s",
    "expert_groups",
    "ring_exposed_s",
    "stage_ranks",
    "with_neighbours",
]
