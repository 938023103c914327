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

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfmodel.errors import ConfigError
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.plan import CPComm, MoEDispatcher
from perfmodel.units import GB, Gbit

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


@dataclass(frozen=True)
class RingSteps:
    """The attention kernel time of one pass of a ring (context-parallel) attention, per step.

    A causal ring of ``count`` steps runs one causal diagonal block (``first_s``, the local
    queries against the local keys) and ``count - 1`` unmasked half blocks (``rest_s`` each),
    all of equal FLOP; the diagonal runs at the causal kernel's efficiency, the half blocks at
    the unmasked kernel's (:func:`perfmodel.compute.attention.ring_attention_efficiency`), so
    ``first_s`` is longer by the ratio of the two rates. Which step each transfer hides under
    is the implementation's order (:func:`ring_exposed_s`, :func:`te_ring_bwd_exposed_s`,
    :func:`torch_cp_exposed_s`).

    >>> RingSteps.split(10.0, 4, 1.5)   # 1.5 + 3 = 4.5 step units of 10 s / 4.5
    RingSteps(count=4, first_s=3.3333333333333335, rest_s=2.2222222222222223)
    >>> RingSteps.equal(8.0, 4) == RingSteps.split(8.0, 4, 1.0) == RingSteps(4, 2.0, 2.0)
    True
    """

    count: int
    first_s: float
    rest_s: float

    @classmethod
    def equal(cls, attention_s: float, count: int) -> RingSteps:
        """``count`` steps of equal time ``attention_s / count`` (no causal diagonal, or no
        ratio known)."""
        return cls.split(attention_s, count, 1.0)

    @classmethod
    def split(cls, attention_s: float, count: int, first_over_rest: float) -> RingSteps:
        """The pass's ``attention_s`` split into a causal step ``first_over_rest`` times as
        long as each of the ``count - 1`` others:

        ``rest_s = attention_s / (first_over_rest + count - 1)``,
        ``first_s = first_over_rest x rest_s``

        (with ``first_over_rest = 1`` both are exactly ``attention_s / count``)."""
        n = max(int(count), 1)
        r = float(first_over_rest)
        if not r > 0 or not math.isfinite(r):
            raise ConfigError(
                f"a ring's causal-step time ratio must be positive and finite, got {r!r}",
                value=r,
                where="RingSteps.split first_over_rest",
            )
        return cls(n, attention_s * r / (r + n - 1), attention_s / (r + n - 1))


def ring_exposed_s(comm_s: float, steps: RingSteps) -> float:
    """Exposed time of ring attention's forward key/value exchange (Transformer Engine's p2p
    ring, Megatron-Core ``cp_comm_type="p2p"``).

    The ``cp = steps.count`` steps run in order: step ``i`` waits for the chunk transfer
    ``i - 1`` brought, posts transfer ``i`` (the chunk it holds, on to the next rank) and then
    runs its attention, so transfer ``i`` (``comm_s / (cp - 1)`` each) runs beside step ``i``
    and shows only what exceeds it (Transformer Engine v1.8
    ``transformer_engine/pytorch/attention.py`` ``AttnFuncWithCP.forward`` lines 631-650,
    v2.14 ``attention/dot_product_attention/context_parallel.py``
    ``AttnFuncWithCPAndKVP2P.forward`` lines 1571-1590; Liu et al. 2023, Ring Attention,
    sec. 3). Step 0 is the causal diagonal (``first_s``), steps ``1 .. cp-1`` the half blocks
    (``rest_s``); transfer 0 hides under the diagonal, transfers ``1 .. cp-2`` under half
    blocks and the last step has nothing to hide:

    ``exposed = max(0, c - first_s) + (cp - 2) max(0, c - rest_s)``, ``c = comm_s / (cp - 1)``

    With equal steps this is ``(cp - 1) max(0, c - attention_s / cp)``, and is computed as
    that plus the diagonal's difference (0 there), so equal steps give the same float.

    Not modelled: TE runs the steps on two alternating CUDA streams ("to resolve wave
    quantization"), so transfer ``i + 1`` is posted on step ``i + 1``'s stream once transfer
    ``i`` has arrived and step ``i - 1`` has finished, possibly while step ``i`` still runs; a
    slow transfer can then borrow part of the step before its own. Charging each transfer
    against its own step alone is the upper bound of that overlap.

    >>> ring_exposed_s(3.0, RingSteps.equal(4.0, 4))  # 1 s per transfer under 1 s: hidden
    0.0
    >>> ring_exposed_s(6.0, RingSteps.equal(4.0, 4))  # 2 s per transfer under 1 s: 3 x 1 s
    3.0
    >>> round(ring_exposed_s(6.0, RingSteps(4, 1.5, 5 / 6)), 6)  # diagonal: 0.5 + 2 x 7/6
    2.833333
    """
    cp = steps.count
    if cp <= 1 or comm_s <= 0:
        return 0.0
    c = comm_s / (cp - 1)
    under_half = max(0.0, c - steps.rest_s)
    # every transfer as under a half block, then the first's difference under the diagonal
    # (0 for equal steps: exactly the equal-step formula)
    return (cp - 1) * under_half + (max(0.0, c - steps.first_s) - under_half)


def te_ring_bwd_exposed_s(comm_s: float, steps: RingSteps) -> float:
    """Exposed time of Transformer Engine's p2p ring in backward (K/V and the dK/dV
    accumulators travelling together).

    The backward runs the forward's steps in reverse, the causal diagonal LAST
    (TE v1.8 ``attention.py`` ``AttnFuncWithCP.backward``: "In reversed order of fwd", line
    1177, ``i == cp_size - 1`` the causal block; v2.14 ``context_parallel.py`` line 2423,
    ``section = "diagonal"`` for ``i == cp_size - 1``). Each of the ``cp`` steps posts one
    transfer before its attention and waits for it after ("wait until dKV is received": v1.8
    lines 1157-1176 and 1553-1555; v2.14 lines 2310-2345 and 2552-2553): step 0 sends the
    K/V chunk alone, steps ``1 .. cp-2`` the K/V chunk and the dK/dV accumulated so far,
    the last the dK/dV alone. With ``comm_s`` the pass's ``cp - 1`` K/V and ``cp - 1`` dK/dV
    chunk transfers (``u = comm_s / (2 (cp - 1))`` each):

    ``exposed = max(0, u - rest_s) + (cp - 2) max(0, 2u - rest_s) + max(0, u - first_s)``

    >>> te_ring_bwd_exposed_s(4.0, RingSteps.equal(8.0, 2))   # 2 s + 2 s under 4 s + 4 s
    0.0
    >>> te_ring_bwd_exposed_s(12.0, RingSteps(4, 1.0, 1.0))   # u = 2: 1 + 2 x 3 + 1
    8.0
    """
    cp = steps.count
    if cp <= 1 or comm_s <= 0:
        return 0.0
    u = comm_s / (2 * (cp - 1))
    return (
        max(0.0, u - steps.rest_s)
        + (cp - 2) * max(0.0, 2 * u - steps.rest_s)
        + max(0.0, u - steps.first_s)
    )


def cp_exposed_s(
    comm_s: float, steps: RingSteps, cp_comm: CPComm, *, backward: bool = False
) -> float:
    """Exposed seconds of a layer's context-parallel K/V exchange (Transformer Engine) for the
    plan's ``cp_comm``.

    ``ring``: :func:`ring_exposed_s` forward, :func:`te_ring_bwd_exposed_s` with ``backward``.
    ``allgather``: the all-gather of the whole sequence's K/V (forward) and the reduce-scatter
    of dK/dV (backward) run before/after the attention kernel and cannot overlap it
    (Megatron-Core ``TransformerConfig.cp_comm_type`` docstring, see
    :class:`~perfmodel.parallel.plan.CPComm`), so ``exposed = comm_s`` (0 when ``cp == 1``).
    Both move the same bytes; only the overlap differs.

    >>> four = RingSteps.equal(4.0, 4)
    >>> cp_exposed_s(3.0, four, CPComm.ALLGATHER), cp_exposed_s(3.0, four, CPComm.RING)
    (3.0, 0.0)
    """
    if steps.count <= 1 or comm_s <= 0:
        return 0.0
    if cp_comm is CPComm.ALLGATHER:
        return comm_s
    if backward:
        return te_ring_bwd_exposed_s(comm_s, steps)
    return ring_exposed_s(comm_s, steps)


class CPImpl(str, enum.Enum):
    """The context-parallel attention implementation a stack runs (what its K/V exchange is and
    what it overlaps).

    ``te-p2p``: Megatron-Core with Transformer Engine (``AttnFuncWithCPAndKVP2P``,
    ``cp_comm_type="p2p"``): each step posts the next K/V chunk's send/receive before the
    current chunk's attention kernel, so every transfer hides under a step
    (:func:`ring_exposed_s`); GQA is native (``kv_heads`` exchanged).

    ``torch``: PyTorch's ``context_parallel`` (``torch.distributed.tensor.experimental``, as
    torchtitan runs it in December 2024: torch 1963fc8, torchtitan 9dec370), whose SDPA
    dispatch wraps ``_templated_ring_attention``: the K/V it exchanges are SDPA's inputs, which
    torchtitan's Llama has already repeated to every query head (``repeat_kv`` before
    ``F.scaled_dot_product_attention``, ``torchtitan/models/llama/model.py``); torchtitan's
    default ``context_parallel_rotate_method = "allgather"`` (``config_manager.py``) makes the
    forward rotater one all-gather of every rank's K/V issued at step 0 (``_AllGatherRotater``:
    "Only one communication will be done"), which only the step-0 attention can hide; the
    backward gathers K/V again the same way and passes each step's accumulated dK/dV to the
    next rank (``dkv_rotater``, always ``_AllToAllRotater``, in FP32: ``convert_to_f32`` makes
    the accumulators FP32), each permute hidden under the next step's attention kernel and the
    last one waited for after the loop (:func:`torch_cp_exposed_s`).

    ``torch-compile``: the same ring traced by ``torch.compile`` (torchtitan compiles each
    transformer block with ``fullgraph=True``, ``apply_compile`` in
    ``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370, so the SDPA call and the ring
    it dispatches to are in the block's graph, forward and backward). The same kernels, bytes
    and transient memory as ``torch``, but every collective is waited for where it is issued:
    a functional collective traced by dynamo or AOTAutograd returns ``wait_tensor(result)`` at
    once instead of an ``AsyncCollectiveTensor`` that waits at first use
    (``torch/distributed/_functional_collectives.py`` ``_maybe_wrap_tensor`` under
    ``_are_we_tracing()``; its module note: traced, "wait_tensor() op is immediately called"),
    and inductor moves a wait later only with ``reorder_for_compute_comm_overlap``, off by
    default (``torch/_inductor/config.py``, torch 2.6) and not set by torchtitan 9dec370. The
    step-0 K/V all-gather and each FP32 dK/dV permute therefore block the compute stream
    (:func:`torch_cp_exposed_s` with ``traced=True``).
    """

    TE_P2P = "te-p2p"
    TORCH = "torch"
    TORCH_COMPILE = "torch-compile"

    @property
    def sdpa_ring(self) -> bool:
        """Whether this is PyTorch's ``context_parallel`` ring (eager or compiled): SDPA's
        repeated K/V exchanged, the all-gather rotater's gathered K/V live for a layer."""
        return self is not CPImpl.TE_P2P

    @classmethod
    def for_fusion(cls, fusion: object) -> CPImpl:
        """The implementation of a stack's kernels: Transformer Engine's for ``te``, PyTorch's
        for eager stacks, PyTorch's traced by ``torch.compile`` for ``compile`` stacks.

        The traced ring for every ``compile`` stack is an ASSUMPTION: its evidence is
        torchtitan's per-block ``fullgraph=True`` compile (``docs/predict.md``, context
        parallelism); a stack that compiles around the ring would hide as the eager one."""
        from perfmodel.workload.kernels import Fusion

        if fusion is Fusion.TE:
            return cls.TE_P2P
        return cls.TORCH_COMPILE if fusion is Fusion.COMPILE else cls.TORCH


def torch_cp_exposed_s(
    gather_s: float, permute_s: float, steps: RingSteps, *, traced: bool = False
) -> float:
    """Exposed seconds of one pass of PyTorch's all-gather-rotater ring attention
    (:attr:`CPImpl.TORCH`; ``traced``: :attr:`CPImpl.TORCH_COMPILE`, whose collectives are
    waited for where they are issued, so ``exposed = gather_s + permute_s``).

    PyTorch runs the causal diagonal FIRST in both passes (``_is_causal_behavior``: ``i == 0``
    is ``IS_CAUSAL``, later steps unmasked under load balancing; the backward loop runs the
    same order). ``gather_s``: the pass's K/V all-gather, issued at step 0
    (``rotater.exchange_buffers`` before the step's ``op``) and waited for at step 1
    (``rotater.next_buffer``), so only the causal step-0 attention (``steps.first_s``) hides it.
    ``permute_s``: the backward's dK/dV permutes, ``cp`` of equal size: permute ``i`` is issued
    after step ``i``'s kernel and waited for after step ``i + 1``'s, so it overlaps that
    unmasked half block (``steps.rest_s``); the last one is waited for after the loop
    (``_templated_ring_attention`` / ``_templated_ring_attention_backward`` in
    ``torch/distributed/tensor/experimental/_attention.py``, read at pytorch 0123248, the same
    loop as torchtitan 9dec370's torch 1963fc8)::

        exposed = max(0, gather_s - first_s)
                  + (cp - 1) max(0, p - rest_s) + p,     p = permute_s / cp

    >>> torch_cp_exposed_s(3.0, 0.0, RingSteps.equal(8.0, 4))   # 3 s gather, 2 s first step
    1.0
    >>> torch_cp_exposed_s(3.0, 0.0, RingSteps(4, 2.5, 11 / 6))   # a longer causal step
    0.5
    >>> torch_cp_exposed_s(1.0, 4.0, RingSteps.equal(8.0, 4))   # 1 s permutes under 2 s
    1.0
    >>> torch_cp_exposed_s(1.0, 4.0, RingSteps.equal(8.0, 4), traced=True)   # nothing hides
    5.0
    """
    cp = steps.count
    if cp <= 1:
        return 0.0
    if traced:
        return max(0.0, gather_s) + max(0.0, permute_s)
    exposed = max(0.0, gather_s - steps.first_s)
    if permute_s > 0:
        p = permute_s / cp
        exposed += (cp - 1) * max(0.0, p - steps.rest_s) + p
    return exposed


def dispatcher_sync_stall_s(run: Sequence[tuple[float, float]]) -> float:
    """GPU idle seconds after a MoE layer's dispatcher synchronises the host with the device.

    Megatron-Core's dropless token dispatchers need the routed-token counts on the host before
    the dispatch (all-to-all split sizes, the grouped GEMM's ``m_splits``, the flex backends'
    output buffers): ``MoEAlltoAllTokenDispatcher`` copies them device-to-host and waits at its
    ``cuda_sync_point`` (``before_ep_alltoall`` with expert or tensor parallelism, else
    ``before_finish``), DeepEP and HybridEP without a capacity factor size their buffers from
    ``tokens_per_expert.sum()`` ("CPU sync in dispatch"), Megatron-LM 4415119
    ``megatron/core/transformer/moe/token_dispatcher.py``. In every case the host waits before
    the data moves, so the dispatch collective is the first GPU work after the wait: the NCCL
    dispatcher syncs ``before_ep_alltoall``; DeepEP's ``Buffer.dispatch`` has the host wait for
    the notify kernel's counts in pinned memory before it launches the dispatch kernel
    (``fused_a2a.py`` ``FusedDispatch``: "the CPU will wait for GPU's signal"); HybridEP's
    ``dispatch_with_permute`` copies the metadata kernel's token count to the host before its
    dispatch kernel (deepseek-ai/DeepEP ``deep_ep/hybrid_ep_buffer.py``, hybrid-ep branch,
    ``use_host_meta=True`` by default). ``TEGroupedMLP.forward``'s ``tokens_per_expert.tolist()``
    (``experts.py`` at 4415119) then finds the counts on the host already (DeepEP: a
    ``torch.tensor`` of a host list; HybridEP: ``use_host_meta``; NCCL: moved at the dispatcher's
    ``cuda_dtoh_point``), so it adds no second wait. The eager host, which otherwise runs
    ahead of the GPU, waits there until the GPU has run everything before; it then issues the
    next kernels while the GPU waits for them. ``run`` is the ``(host, gpu)`` seconds of each
    layer from the dispatch to the next synchronisation, in order; the GPU is idle for the
    two-machine flow shop's lead (Johnson 1954, as :func:`perfmodel.parallel.host_lead.issue_lead`):

    ``stall = max_i (H_i - G_{i-1})``, ``H_i = h_1 + ... + h_i``, ``G_{i-1} = g_1 + ... + g_{i-1}``

    >>> dispatcher_sync_stall_s([(3e-5, 1e-4), (3e-5, 1e-4)])   # GPU-bound: the first issue
    3e-05
    >>> round(dispatcher_sync_stall_s([(3e-5, 1e-5), (3e-5, 1e-5)]), 9)  # host-bound: 6e-5 - 1e-5
    5e-05
    """
    h_sum = g_sum = stall = 0.0
    for h, g in run:
        h_sum += h
        stall = max(stall, h_sum - g_sum)
        g_sum += g
    return max(stall, 0.0)


def _miss(pool: int, holes: int, k: int) -> float:
    """Probability that ``k`` distinct draws from ``pool`` items all avoid ``holes`` of them:
    ``C(pool - holes, k) / C(pool, k)`` (hypergeometric, no replacement)."""
    if k > pool - holes:
        return 0.0
    return math.comb(pool - holes, k) / math.comb(pool, k)


def expected_units_hit(
    experts: int, top_k: int, units: int, routing_groups: tuple[int, int] = (0, 0)
) -> float:
    """Expected number of distinct units (ranks or servers) a token's ``top_k`` experts fall in.

    The ``experts`` are split into ``units`` equal blocks of consecutive experts (expert-parallel
    ranks hold ``experts / ep`` consecutive experts, Megatron-Core ``local_expert_indices``; the
    ranks of a server are consecutive in the expert-parallel group). Routing is uniform at
    random: the Megatron-Bridge benchmark rows "force-balance the token distribution among
    experts" (``moe_router_force_load_balancing``: random router logits), so the ``top_k``
    experts are a uniform draw without replacement, and the probability that a unit of
    ``b = experts / units`` experts gets none is ``C(E - b, k) / C(E, k)``:

    ``E[units hit] = units (1 - C(E - b, k) / C(E, k))``

    With group-limited routing ``routing_groups = (G, g)`` (DeepSeek-V3 sec. 2.1.2 node-limited
    routing; Megatron-Core ``--moe-router-num-groups G --moe-router-group-topk g``) the token
    first picks ``g`` of ``G`` equal groups uniformly, then its ``top_k`` experts uniformly among
    the ``g E / G`` experts of those groups; a unit then misses when none of its experts is
    drawn, summed over how many of its groups were picked (units nested in groups, or groups in
    units; other splits raise).

    >>> round(expected_units_hit(8, 2, 4), 4)  # 4 ranks x 2 experts: 1 - 4 * C(6,2)/C(8,2) / 4
    1.8571
    >>> round(expected_units_hit(128, 8, 2), 3)  # Qwen3 over 2 servers: nearly always both
    1.994
    >>> round(expected_units_hit(256, 8, 4, (8, 4)), 3)  # DeepSeek-V3 over 4 servers
    2.928

    Raises
    ------
    ConfigError
        When ``units`` does not divide ``experts``, ``top_k`` exceeds the routable experts, or
        the groups and the units do not nest.
    """
    if units < 1 or experts % units:
        raise ConfigError(
            f"{units} units do not split {experts} experts evenly", value=units, where="ep"
        )
    groups, picked = routing_groups
    if not groups:
        groups = picked = 1
    if experts % groups or not 1 <= picked <= groups:
        raise ConfigError(
            f"routing groups {routing_groups} do not split {experts} experts",
            value=routing_groups,
            where="routing_groups",
        )
    pool = picked * experts // groups  # experts a token can reach once its groups are picked
    if top_k > pool:
        raise ConfigError(
            f"top_k={top_k} exceeds the {pool} experts of {picked} routing groups",
            value=top_k,
            where="top_k",
        )
    block = experts // units
    if units >= groups and units % groups == 0:  # units inside groups
        p_group = picked / groups  # the unit's group is picked
        miss = (1.0 - p_group) + p_group * _miss(pool, block, top_k)
    elif groups % units == 0:  # groups inside units: j of the unit's G/U groups picked
        own = groups // units
        miss = 0.0
        for j in range(0, min(own, picked) + 1):
            p_j = (
                math.comb(own, j) * math.comb(groups - own, picked - j) / math.comb(groups, picked)
            )
            miss += p_j * _miss(pool, j * experts // groups, top_k)
    else:
        raise ConfigError(
            f"{units} units and {groups} routing groups do not nest",
            value=(units, groups),
            where="routing_groups",
        )
    return units * (1.0 - miss)


def dispatch_share(
    dispatcher: MoEDispatcher,
    experts: int,
    top_k: int,
    ranks: int,
    servers: int,
    routing_groups: tuple[int, int] = (0, 0),
) -> float:
    """Bytes a dispatcher sends per token over those of the all-to-all of every routed row.

    The all-to-all (``alltoall``) sends each of a token's ``top_k`` rows to its expert's rank:
    share 1 (the lowering's all-to-all of ``tokens x top_k`` rows). The flex dispatchers
    (``deepep``, ``hybridep``) send a token once to each destination: inside one server once
    per rank holding one of its experts, and across ``servers > 1`` once per destination server
    over RDMA, then forwarded over NVLink (DeepEP README, "normal kernels": NVLink and RDMA
    forwarding; the RDMA leg is the bottleneck the lowering's all-to-all prices, so its bytes
    are what the share sets):

    ``share = E[ranks hit] / top_k`` (one server), ``E[servers hit] / top_k`` (several)

    with :func:`expected_units_hit` (without the routing groups where they do not nest in the
    units, and 1 where the units do not split the experts evenly). ``allgather`` is not a share
    of the all-to-all (the lowering replaces its collective): 1.

    >>> round(dispatch_share(MoEDispatcher.DEEPEP, 128, 8, 8, 1), 3)  # Qwen3 on 8 ranks
    0.667
    >>> dispatch_share(MoEDispatcher.ALLTOALL, 128, 8, 8, 1)
    1.0
    """
    if not dispatcher.deduplicates or ranks < 2:
        return 1.0
    units = ranks if servers <= 1 else servers
    # a placement whose servers split the experts unevenly, or groups that do not nest in
    # them: the uniform count without groups, else no deduplication (never an error here)
    for groups in (routing_groups, (0, 0)):
        try:
            return expected_units_hit(experts, top_k, units, groups) / top_k
        except ConfigError:
            continue
    return 1.0


class DispatchFabric(str, enum.Enum):
    """Where a flex dispatcher's expert-parallel group sits, as its published benchmarks split it.

    ``nvlink``: every rank in one NVLink domain (a DGX/HGX server, an NVL72 rack); a token
    travels once to each rank that holds one of its experts. ``rdma``: the group spans servers;
    a token crosses the NICs once per destination server and is forwarded over NVLink inside
    it (:func:`dispatch_share`)."""

    NVLINK = "nvlink"
    RDMA = "rdma"


@dataclass(frozen=True)
class KernelRate:
    """Published per-GPU bandwidth of a flex dispatcher's dispatch and combine kernels.

    Stored as fractions of the benchmark link's line rate (``line_rate_Bps``), by
    expert-parallel ranks, so that the same kernels on another link of the same kind reach
    the same fraction of it (an assumption: the kernels are link-bound at these sizes).
    The bytes are counted as the benchmarks count them (:func:`flex_kernel_floor_s`): over
    ``rdma``, every (token, server) pair the token goes to, the token's own server included
    (DeepEP ``tests/test_internode.py`` ``num_rdma_token_sent``; Hybrid-EP
    ``tests/utils.py`` ``count_rdma_send_from_routing_map``: "we do not set the local node map to
    zeros"); over ``nvlink``, every row a rank receives, its own included (``recv_x.numel()``,
    ``dispatched_hidden.numel()``). Kernel time only (the benchmarks' Kineto/``bench_kineto``
    columns): the permutation, the host synchronisation and the copies the Torch API adds are
    priced apart (the ``permute``/``unpermute`` layers, :func:`dispatcher_sync_stall_s`).
    """

    ranks: tuple[int, ...]
    dispatch: tuple[float, ...]
    combine: tuple[float, ...]
    line_rate_Bps: float
    source: str

    def fraction(self, ranks: int, combine: bool) -> float:
        """The kernel's fraction of the line rate at ``ranks`` expert-parallel ranks, linear in
        ``log2(ranks)`` between the benchmarked counts and held at the ends.

        >>> r = KernelRate((8, 32), (0.8, 0.6), (0.7, 0.5), 1.0, "")
        >>> r.fraction(16, False), r.fraction(4, True), r.fraction(64, True)
        (0.7, 0.7, 0.5)
        """
        ys = self.combine if combine else self.dispatch
        x = math.log2(max(ranks, 1))
        xs = [math.log2(r) for r in self.ranks]
        if x <= xs[0]:
            return ys[0]
        for (x0, y0), (x1, y1) in zip(
            zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False
        ):
            if x <= x1:
                return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
        return ys[-1]


_HYBRID_EP_DOC = (
    "deepseek-ai/DeepEP branch hybrid-ep @94a9f8f docs/README_Hybrid-EP.md 'Performance "
    "Results' (4096 tokens per rank, hidden 7168, top-8, random uniform router, 8 local "
    "experts; 'Kernel Only' columns, BF16 dispatch and combine)"
)
_DEEPEP_README = (
    "deepseek-ai/DeepEP @dd758ca README.md 'Normal kernels with NVLink and RDMA forwarding' "
    "(H800, ~160 GB/s NVLink, CX7 400 Gb/s ~50 GB/s; 4096 tokens, hidden 7168, top-4 groups, "
    "top-8 experts, FP8 dispatch, BF16 combine; kernel times)"
)

#: Published achieved bandwidth of the flex dispatchers' kernels (:class:`KernelRate`), by
#: backend and fabric, as fractions of the benchmark's line rate:
#:
#: * Hybrid-EP over RDMA: H100 + CX7 400 Gb/s (50 GB/s), 16 SMs (the most listed; Megatron-Bridge
#:   runs 32): 16 ranks 71.71 / 62.95 GB/s, 32 ranks 57.69 / 57.46, 64 ranks 49.97 / 49.77
#:   (dispatch / combine, "algorithm bandwidth" of the RDMA bytes).
#: * Hybrid-EP over NVLink: GB200 NVL72 (NVLink 5, 900 GB/s per direction, NVIDIA GB200
#:   datasheet 1.8 TB/s per GPU both ways), 32 SMs: 8 ranks 764.03 / 737.13 GB/s, 16 ranks
#:   706.95 / 666.26, 24 ranks 665.97 / 639.80, 32 ranks 642.23 / 605.15, 36 ranks 632.31 /
#:   596.99 (the same document's B200 8-rank row at 16 SMs, 734.95 / 673.84, is within 5% of
#:   the GB200 8-rank row at 16 SMs, 750.15 / 684.27).
#: * DeepEP over RDMA: 16 ranks 43 / 43 GB/s, 32 ranks 58 / 57, 64 ranks 51 / 50 (H800, CX7).
#: * DeepEP over NVLink: 8 ranks 153 / 158 GB/s of the H800's ~160 GB/s.
FLEX_KERNEL_RATES: dict[tuple[str, DispatchFabric], KernelRate] = {
    ("hybridep", DispatchFabric.RDMA): KernelRate(
        (16, 32, 64),
        (71.71 / 50, 57.69 / 50, 49.97 / 50),
        (62.95 / 50, 57.46 / 50, 49.77 / 50),
        400 * Gbit,  # CX7 400 Gb/s
        _HYBRID_EP_DOC + ", H100 Platform, 16/32/64 ranks, SM count 16",
    ),
    ("hybridep", DispatchFabric.NVLINK): KernelRate(
        (8, 16, 24, 32, 36),
        (764.03 / 900, 706.95 / 900, 665.97 / 900, 642.23 / 900, 632.31 / 900),
        (737.13 / 900, 666.26 / 900, 639.80 / 900, 605.15 / 900, 596.99 / 900),
        900 * GB,
        _HYBRID_EP_DOC + ", GB200 Platform, 8-36 ranks, SM count 32",
    ),
    ("deepep", DispatchFabric.RDMA): KernelRate(
        (16, 32, 64),
        (43 / 50, 58 / 50, 51 / 50),
        (43 / 50, 57 / 50, 50 / 50),
        400 * Gbit,  # CX7 400 Gb/s
        _DEEPEP_README + ", internode EP 16/32/64 (RDMA bottleneck bandwidth)",
    ),
    ("deepep", DispatchFabric.NVLINK): KernelRate(
        (8,),
        (153 / 160,),
        (158 / 160,),
        160 * GB,
        _DEEPEP_README + ", intranode EP 8 (NVLink bottleneck bandwidth)",
    ),
}


def flex_kernel_floor_s(
    dispatcher: MoEDispatcher,
    fabric: DispatchFabric,
    ranks: int,
    token_bytes: float,
    units_hit: float,
    line_rate_Bps: float,
    combine: bool,
) -> float:
    """Shortest time a flex dispatcher's dispatch (or combine) kernel takes, from its published
    achieved bandwidth (:data:`FLEX_KERNEL_RATES`); 0 where none is published (the NCCL
    dispatchers, whose collectives the communication model prices).

    ``token_bytes``: one rank's tokens times their hidden bytes; ``units_hit``: the servers
    (``rdma``) or ranks (``nvlink``) a token goes to on average, its own included
    (:func:`expected_units_hit`), so ``token_bytes x units_hit`` are the bytes as the benchmark
    counts them; ``line_rate_Bps``: the line rate of this system's link of that kind (a NIC
    port, or one GPU's NVLink bandwidth per direction)::

        t = token_bytes x units_hit / (fraction(ranks) x line_rate_Bps)

    >>> # Qwen3-30B-A3B's 4096 tokens x 2048 x 2 B over 2 H100 servers (Hybrid-EP, 16 ranks):
    >>> # 16.8 MB x 1.994 servers / (1.434 x 50 GB/s)
    >>> t = flex_kernel_floor_s(MoEDispatcher.HYBRIDEP, DispatchFabric.RDMA, 16,
    ...                         4096 * 2048 * 2, 1.994, 50e9, combine=False)
    >>> round(t * 1e6)
    467
    >>> flex_kernel_floor_s(MoEDispatcher.ALLTOALL, DispatchFabric.RDMA, 16, 1e6, 2, 50e9, False)
    0.0
    """
    rate = FLEX_KERNEL_RATES.get((dispatcher.value, fabric))
    if rate is None or token_bytes <= 0 or line_rate_Bps <= 0:
        return 0.0
    return token_bytes * units_hit / (rate.fraction(ranks, combine) * line_rate_Bps)


def flex_fabric(topology: Any, group: Sequence[str]) -> tuple[DispatchFabric, float]:
    """The fabric of an expert-parallel ``group`` and its link's line rate (bytes/s per
    direction): ``rdma`` when the group spans servers, the narrowest link on the route from its
    first rank to the first rank of another server (the NIC port on a DGX); else ``nvlink``,
    the narrowest link from its first rank to its second (the GPU's NVLink to the switch).
    ``bandwidth_Bps`` as the topology states it, before the link's efficiency (the published
    fractions are of the line rate). ``(nvlink, 0)`` without a topology or a second rank."""
    from perfmodel.topology import route
    from perfmodel.topology.routing import path_edges

    if topology is None or len(group) < 2:
        return DispatchFabric.NVLINK, 0.0
    first = group[0]
    home = topology.server_of(first)
    other = next((g for g in group[1:] if topology.server_of(g) != home), None)
    fabric = DispatchFabric.NVLINK if other is None else DispatchFabric.RDMA
    edges = path_edges(route(topology, first, group[1] if other is None else other))
    g = topology.graph
    rate = min((float(g.edges[u, v]["bandwidth_Bps"]) for u, v in edges), default=0.0)
    return fabric, rate


def flex_units_hit(
    experts: int,
    top_k: int,
    units: int,
    routing_groups: tuple[int, int] = (0, 0),
) -> float:
    """:func:`expected_units_hit` as :func:`dispatch_share` falls back: without the routing
    groups where they do not nest in the units, ``top_k`` (every row its own) where the units
    do not split the experts evenly."""
    for groups in (routing_groups, (0, 0)):
        try:
            return expected_units_hit(experts, top_k, units, groups)
        except ConfigError:
            continue
    return float(min(top_k, units))


#: Bytes of one (token, expert) entry of the routing map Hybrid-EP all-gathers: a ``torch.bool``
#: tensor (deepseek-ai/DeepEP hybrid-ep branch @94a9f8f ``deep_ep/hybrid_ep_buffer.py``
#: ``dispatch_with_permute``: ``assert routing_map.dtype == torch.bool``).
ROUTING_MAP_ENTRY_BYTES = 1


def routing_map_gather_bytes(
    dispatcher: MoEDispatcher, tokens: float, experts: int, ranks: int
) -> float:
    """Output bytes of the routing-map all-gather a dispatcher's forward dispatch runs over the
    expert-parallel group before its tokens move; 0 where it runs none.

    Hybrid-EP builds each dispatch's metadata (which node and rank each token goes to) from
    the routing map of every rank of the group: ``HybridEPBuffer.dispatch_with_permute``
    without a cached handle (Megatron-Core's forward dispatch: ``_HybridEPManager.dispatch``
    passes none, Megatron-LM 4415119 ``megatron/core/transformer/moe/token_dispatcher.py``;
    the backward passes reuse the handle) calls ``metadata_preprocessing``, whose
    ``Executor::allgather_routing_map`` runs ``torch.distributed.all_gather_into_tensor`` of the
    ``tokens x experts`` boolean map over the group whenever the group spans NVLink domains or
    the custom all-gather is off (deepseek-ai/DeepEP hybrid-ep branch @94a9f8f
    ``csrc/hybrid_ep/executor/executor.cu``; ``enable_custom_allgather=False`` is the
    ``HybridEPBuffer`` default and Megatron-Core's ``init_hybrid_ep_buffer`` does not set it,
    ``megatron/core/transformer/moe/fused_a2a.py`` at 4415119): an NCCL all-gather of

    ``bytes = ranks x tokens x experts x 1 B``   (the gathered output, as the lowering counts)

    ``tokens``: one rank's tokens routed by the layer. DeepEP's own layout exchange runs inside
    its notify kernel and the NCCL dispatchers gather token counts, not maps (0 here).

    >>> routing_map_gather_bytes(MoEDispatcher.HYBRIDEP, 4096, 128, 16)  # Qwen3-30B, EP 16
    8388608.0
    >>> routing_map_gather_bytes(MoEDispatcher.DEEPEP, 4096, 128, 16)
    0.0
    """
    if dispatcher is not MoEDispatcher.HYBRIDEP or ranks < 2 or tokens <= 0 or experts <= 0:
        return 0.0
    return float(ranks) * float(tokens) * experts * ROUTING_MAP_ENTRY_BYTES


#: Streaming multiprocessors the flex dispatchers' communication kernels occupy: DeepEP
#: ``TransformerConfig.moe_deepep_num_sms = 20`` (Megatron-Core default, Megatron-LM 4415119);
#: HybridEP ``moe_hybridep_num_sms = 32``, set by Megatron-Bridge's performance scripts
#: (``scripts/performance/utils/overrides.py`` ``_set_common_perf_overrides`` at 21d102f).
DISPATCHER_SMS = {MoEDispatcher.DEEPEP: 20, MoEDispatcher.HYBRIDEP: 32}


def overlap_compute_slowdown(dispatcher: MoEDispatcher, sm_count: int) -> float:
    """Extra compute seconds per second of compute that runs beside the dispatcher's kernels.

    The flex dispatchers' kernels hold ``s`` of the GPU's ``N`` SMs while they run
    (:data:`DISPATCHER_SMS`), so compute beside them gets ``(N - s) / N`` of the SMs:
    ``s / (N - s)``. NCCL's all-to-all and all-gather kernels (one SM per channel) take the
    house estimate :data:`~perfmodel.parallel.software.COMM_OVERLAP_COMPUTE_SLOWDOWN`.

    >>> round(overlap_compute_slowdown(MoEDispatcher.DEEPEP, 148), 4)  # B200: 20 / 128
    0.1562
    >>> overlap_compute_slowdown(MoEDispatcher.ALLTOALL, 132)
    0.05
    """
    from perfmodel.parallel.software import COMM_OVERLAP_COMPUTE_SLOWDOWN

    sms = DISPATCHER_SMS.get(dispatcher)
    if sms is None or sm_count <= sms:
        return COMM_OVERLAP_COMPUTE_SLOWDOWN
    return sms / (sm_count - sms)


def ep_overlap_exposed_s(alltoall_s: float, other_compute_s: float, slowdown: float = 0.0) -> float:
    """Exposed seconds of expert all-to-alls run beside another micro-batch's compute.

    Megatron-Core's combined 1F1B (``--overlap-moe-expert-parallel-comm``; developer guide
    "Combined 1F1B: Expert-Parallel All-to-All Overlap", docs.nvidia.com/megatron-core, user
    guide features/moe_a2a_overlap) pairs the forward of one micro-batch with the backward of
    another and runs each one's dispatch/combine all-to-all on a communication stream while
    the other's independent compute runs; DeepSeek-V3's DualPipe (arXiv:2412.19437, sec. 3.2.1)
    overlaps the same pairs. As an approximation of the steady state (the warm-up and cool-down
    operations with no partner expose theirs in full: :func:`unpaired_phases`, applied per
    micro-batch by the pipeline lowering), a transformer block's all-to-alls of one phase hide
    under the block's compute of the other phase (Megatron-Core pairs layers, not gradient
    buckets: :func:`perfmodel.parallel.segment_comm._expert_context_overlapped`), which runs
    ``slowdown`` slower while they share the SMs (:func:`overlap_compute_slowdown`):

    ``exposed = max(0, alltoall_s - other_compute_s) + min(alltoall_s, other_compute_s) slowdown``

    >>> ep_overlap_exposed_s(3.0, 2.0), ep_overlap_exposed_s(1.0, 2.0)
    (1.0, 0.0)
    >>> ep_overlap_exposed_s(1.0, 2.0, 0.25)  # 1 s of compute beside it takes 1.25 s
    0.25
    """
    return max(0.0, alltoall_s - other_compute_s) + min(alltoall_s, other_compute_s) * slowdown


def unpaired_phases(ops: Sequence[tuple[str, int, int]]) -> frozenset[tuple[str, int, int]]:
    """The operations of one stage's schedule that Megatron-Core's combined 1F1B
    (``overlap_moe_expert_parallel_comm``) runs alone, with no other micro-batch's compute to
    hide their expert all-to-alls under.

    ``ops`` is the stage's order of ``(phase, micro-batch, chunk)``
    (:func:`~perfmodel.parallel.schedule.stage_ops`): ``w`` warm-up forwards, then forward
    and backward alternating, then ``w`` cool-down backwards. At Megatron-LM 4415119,
    ``combined_1f1b_schedule_for_no_pipelining`` (``pipeline_parallel/combined_1f1b.py``)
    runs micro-batch 0's forward alone, pairs forward ``i + 1`` with backward ``i``, and runs
    the last backward alone; with interleaved pipelining, ``get_pp_rank_microbatches``
    (``pipeline_parallel/schedules.py``) adds one warm-up forward "to ensure the forward and
    backward computations are independent", so the ``w + 1`` forwards before the first
    backward run alone, each steady step pairs a forward with the backward ``w + 1`` places
    before it, and the ``w + 1`` backwards after the last forward run alone. Both are the
    same order as the plain schedule's: the first ``n`` forwards and the last ``n``
    backwards, ``n`` the forwards before the first backward, have no partner (every
    operation with one micro-batch).

    >>> from perfmodel.parallel.schedule import one_f_one_b
    >>> sorted(unpaired_phases(one_f_one_b(1, 3, 0)))
    [('B', 2, 0), ('F', 0, 0)]
    >>> len(unpaired_phases(one_f_one_b(1, 1, 0)))
    2
    """
    n = next((i for i, op in enumerate(ops) if op[0] == "B"), len(ops))
    backward = [op for op in ops if op[0] == "B"]
    return frozenset(ops[:n]) | frozenset(backward[len(backward) - n :] if n else ())


__all__ = [
    "DISPATCHER_SMS",
    "FLEX_KERNEL_RATES",
    "MAX_SIBLINGS",
    "ROUTING_MAP_ENTRY_BYTES",
    "CPImpl",
    "DispatchFabric",
    "KernelRate",
    "RingSteps",
    "context_groups",
    "cp_exposed_s",
    "dispatch_share",
    "dispatcher_sync_stall_s",
    "ep_overlap_exposed_s",
    "expected_units_hit",
    "expert_groups",
    "flex_fabric",
    "flex_kernel_floor_s",
    "flex_units_hit",
    "overlap_compute_slowdown",
    "ring_exposed_s",
    "routing_map_gather_bytes",
    "stage_ranks",
    "te_ring_bwd_exposed_s",
    "torch_cp_exposed_s",
    "unpaired_phases",
    "with_neighbours",
]
