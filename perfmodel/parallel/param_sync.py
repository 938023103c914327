"""ZeRO-1 parameter synchronisation by owner broadcasts (InternEvo's Hybrid ZeRO).

After the optimizer step of a ZeRO-1 stack every rank holds the update of its own shard and the
other ranks need it. Megatron-Core and DeepSpeed all-gather the shards
(:attr:`~perfmodel.parallel.recipe.ParamSync.ALLGATHER`); InternEvo broadcasts them, one NCCL
broadcast per owner rank (:attr:`~perfmodel.parallel.recipe.ParamSync.OWNER_BROADCAST`).

Source: InternLM/InternEvo at 34fc28d7 (the commit of the ``scale.jsonl`` rows),
``internlm/solver/optimizer/hybrid_zero_optim.py`` ``HybridZeroOptimizer.broadcast_params`` (a
``dist.broadcast`` of each owner's flat 16-bit partition to the whole ZeRO group, skipping ranks
that own nothing) and ``internlm/solver/optimizer/utils.py`` ``ParamBcastSyncHandler``, which
decides the owners when ``overlap_sync_param`` is on (the default of ``configs/7B_sft.py``): it
walks the parameters in module order (embedding, blocks, norm, head), adds each tensor's elements
to the current owner's count and moves on to the next rank whenever the count exceeds
``1.01 x total / ranks`` (that tensor goes to the new rank and the count restarts from zero).
Every tensor larger than the average share therefore has a rank of its own, so the broadcast
count stops growing once the ranks outnumber the large tensors (about 160 for a 7B model), while
each broadcast spans the whole ZeRO group: a ring broadcast's latency grows with the ranks, and the
sum grows with both. The forward of each block waits for the broadcasts of its owners.

InternEvo's releases before that handler (added 2023-08-23; the initial commit ``fa7337b`` of
2023-07-06, whose throughput table ``doc/train_performance.md`` still shows unchanged at
``34fc28d7``), and later ones with ``overlap_sync_param=False``, partition by size instead
(``HybridZeroOptimizer._partition_param_list``, ``fa7337b`` lines 272-290): the tensors sorted
largest first, each given to the rank with the fewest elements so far (the lowest such rank on a
tie), :func:`size_greedy_owner_ranks`. On a group with at least as many ranks as tensors every
tensor then has a rank of its own, the norms' and biases' small ones included, and the
broadcasts run in rank order, largest tensor first (``broadcast_params``, ``fa7337b`` lines
629-647: one ``dist.broadcast`` per owner, all waited for before the next forward).
:class:`~perfmodel.parallel.stack_choices.ParamOwners` names the two rules.

The model applies the rule to the workload's parameter tensors in order
(:func:`~perfmodel.workload.layers.layer_tensors`: one per layer, except a gated MLP's fused
input projection, ``fc1`` before its SwiGLU, which is InternEvo's two matrices ``w1`` and
``w2``, and a linear layer's bias, a tensor of its own), and
prices each owner's broadcast with the collective model: NCCL's tuner picks ring and protocol per
broadcast, and the broadcast takes the time of a pipelined chain
(:func:`perfmodel.comm.closed_form.chain_time`: each network hop of the chain stores one protocol
step before forwarding it, ~124 us a server hop with LL128 over a run channel's share of
4 x 100 Gb RoCE, ~16 ms for a 1,024-rank chain of 128 servers, which NCCL's tuner does not
model); the TP siblings' broadcasts share the links' bandwidth, not
the chains' fill (:meth:`perfmodel.parallel.costs.SystemCosts.concurrent_time`). The
lowering charges the series as one task of the summed time; the simulated fidelity replays a
group of at most 16 ranks as one broadcast of all the bytes (the owners' launch latencies, a few
microseconds each at that size, are not replayed) and keeps the summed time above.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from perfmodel.errors import ConfigError
from perfmodel.parallel.stack_choices import ParamOwners

#: InternEvo ``ParamBcastSyncHandler``: a rank takes tensors until its count exceeds 1.01 x the
#: average share (``alloc_num > avg_param_num * 1.01``).
OWNER_SLACK = 1.01


def owner_ranks(params: Sequence[float], ranks: int) -> tuple[int, ...]:
    """The owner rank of each tensor of ``params`` (elements, in module order) over ``ranks``
    ranks, as InternEvo's ``ParamBcastSyncHandler`` assigns them.

    >>> owner_ranks([10, 10, 10, 10], 4)  # the tensor that passes the share opens the next rank
    (0, 1, 1, 2)
    >>> owner_ranks([100, 1, 1, 50, 50], 8)  # big tensors alone, small ones ride along
    (1, 1, 1, 2, 3)
    """
    if int(ranks) != ranks or ranks < 1:
        raise ConfigError(f"ranks must be a positive integer, got {ranks!r}", value=ranks)
    total = float(sum(params))
    avg = total // ranks  # InternEvo: total_param_num * 1.0 // zero1_size
    rank, alloc = 0, 0.0
    out = []
    for p in params:
        alloc += p
        if alloc > avg * OWNER_SLACK and rank < ranks - 1:
            rank += 1
            alloc = 0.0
        out.append(rank)
    return tuple(out)


def size_greedy_owner_ranks(params: Sequence[float], ranks: int) -> tuple[int, ...]:
    """The owner rank of each tensor of ``params`` (elements, in module order) over ``ranks``
    ranks by InternEvo's size-greedy partition (``HybridZeroOptimizer._partition_param_list``
    at ``fa7337b``): tensors taken largest first (equal sizes in module order: Python's stable
    ``sorted(..., reverse=True)``), each to the rank holding the fewest elements so far, the
    lowest rank on a tie (``numel_per_rank.index(min(numel_per_rank))``).

    >>> size_greedy_owner_ranks([10, 30, 20, 5], 8)  # more ranks than tensors: one rank each
    (2, 0, 1, 3)
    >>> size_greedy_owner_ranks([10, 30, 20, 5], 2)  # 30 -> r0; 20 -> r1; 10 -> r1; 5 -> r0
    (1, 0, 1, 0)
    """
    if int(ranks) != ranks or ranks < 1:
        raise ConfigError(f"ranks must be a positive integer, got {ranks!r}", value=ranks)
    order = sorted(range(len(params)), key=lambda i: -float(params[i]))
    heap = [(0.0, r) for r in range(int(ranks))]  # (elements held, rank): min load, then rank
    out = [0] * len(params)
    for i in order:
        load, r = heapq.heappop(heap)
        out[i] = r
        heapq.heappush(heap, (load + float(params[i]), r))
    return tuple(out)


def owners_by_rule(rule: ParamOwners, params: Sequence[float], ranks: int) -> tuple[int, ...]:
    """The owner rank of each tensor under ``rule`` (:class:`ParamOwners`): the module walk
    (:func:`owner_ranks`) or the size-greedy partition (:func:`size_greedy_owner_ranks`).

    >>> owners_by_rule(ParamOwners.MODULE_WALK, [10, 10, 10, 10], 4)
    (0, 1, 1, 2)
    >>> owners_by_rule(ParamOwners.SIZE_GREEDY, [10, 10, 10, 10], 4)
    (0, 1, 2, 3)
    """
    if rule is ParamOwners.SIZE_GREEDY:
        return size_greedy_owner_ranks(params, ranks)
    return owner_ranks(params, ranks)


def owner_bytes(
    layer_ids: Sequence[int],
    owners: dict[int, int],
    params: dict[int, float],
    bytes_per_param: float,
) -> list[float]:
    """Bytes each owner broadcasts for the layers ``layer_ids`` (owners by layer id, parameter
    counts by layer id), one entry per owner in order of first appearance; layers without
    parameters broadcast nothing.

    >>> owner_bytes([0, 1, 2], {0: 5, 1: 5, 2: 6}, {0: 10, 1: 2, 2: 4}, 2.0)
    [24.0, 8.0]
    """
    acc: dict[int, float] = {}
    for i in layer_ids:
        p = params.get(i, 0.0)
        if p > 0:
            acc[owners[i]] = acc.get(owners[i], 0.0) + p * bytes_per_param
    return list(acc.values())


def tensor_owner_bytes(
    layer_ids: Sequence[int],
    tensors: Sequence[tuple[int, float]],
    owners: Sequence[int],
    bytes_per_param: float,
) -> list[float]:
    """Bytes each owner broadcasts for the layers ``layer_ids``, given the tensors
    (:func:`~perfmodel.workload.layers.layer_tensors`) and each tensor's owner; one entry per
    owner in order of first appearance.

    >>> tensor_owner_bytes([1], [(0, 4.0), (1, 40.0), (1, 40.0)], [0, 0, 1], 2.0)
    [80.0, 80.0]
    """
    want = set(layer_ids)
    acc: dict[int, float] = {}
    for (i, p), o in zip(tensors, owners, strict=True):
        if i in want and p > 0:
            acc[o] = acc.get(o, 0.0) + p * bytes_per_param
    return list(acc.values())
