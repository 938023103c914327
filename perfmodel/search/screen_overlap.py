"""What ``predict``'s lowering overlaps, in the closed form of the search screen
(:class:`perfmodel.search.screen.PlanScreen`): a phase's tensor-parallel collectives beside its
compute (:func:`tp_phase_s`, the lowering's own
:func:`~perfmodel.parallel.lower_pipeline.tp_overlapped`), the data-parallel reduction and
parameter gathers as the training recipe runs them (:func:`dp_exposed`, buckets by
:func:`beyond`), and the eager host's issue lead (:func:`stage_issue_lead_s`). The lowering's
rules are called (the pure functions :mod:`perfmodel.parallel.lower_pipeline` states them as),
not restated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from perfmodel.ops import CollectiveOp


def beyond(comm_s: float, busy_s: float, k: int) -> float:
    """Seconds a collective of ``comm_s`` split into ``k`` equal buckets runs past ``busy_s``
    of compute that makes its buckets ready one by one, evenly (backward's gradient buckets),
    or that consumes them in order (forward's parameter gathers): bucket ``i`` can start once
    ``i / k`` of the compute is done and the buckets queue on one stream, so the last ends at
    ``max(busy / k + comm, busy + comm / k)`` (the queue's finish over the readiness of
    its first and last bucket), ``max(comm - busy + busy / k, comm / k)`` past the compute:
    at least one bucket exposed, all of it with one bucket.

    >>> beyond(1.0, 4.0, 4), beyond(1.0, 4.0, 1), beyond(4.0, 2.0, 2)
    (0.25, 1.0, 3.0)
    """
    return max(comm_s - busy_s + busy_s / k, comm_s / k)


def ring_representative(n: int, stride: int, gpus_per_node: int) -> tuple[int, list[int]]:
    """``(servers, ranks)``: where to price a collective of ``n`` ranks ``stride`` apart
    on a topology of ``servers`` servers. Where every server holds the same local ranks of
    the group (``stride`` divides the GPUs per server, or a multiple of them), the group
    itself when it spans one or two servers, else two servers' worth of it (the same members
    per server; one per server when ``stride`` is a server or more), which
    :func:`ring_extended_s` extends to ``n`` ranks. Otherwise (a placement's stride that
    neither divides nor is a multiple of the server, e.g. ``tp,pp,dp`` with tp 2, pp 3 on
    8-GPU servers: stride 6), or where the group's last of three or more servers holds fewer
    of its ranks (20 ranks 1 apart on 8-GPU servers: 8 + 8 + 4), the servers differ, so the
    group itself: ranks ``i x stride`` on the servers it spans.

    >>> ring_representative(4, 2, 8), ring_representative(32, 1, 8), ring_representative(16, 32, 8)
    ((1, [0, 2, 4, 6]), (2, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]), (2, [0, 8]))
    >>> ring_representative(4, 6, 8), ring_representative(20, 1, 8)[0]
    ((3, [0, 6, 12, 18]), 3)
    """
    per_server = max(1, min(n, gpus_per_node // stride)) if stride < gpus_per_node else 1
    servers = math.ceil(n / per_server)
    uneven = servers > 2 and n % per_server  # the last server holds fewer of the group
    if (gpus_per_node % stride and stride % gpus_per_node) or uneven:
        span = (n - 1) * stride + 1
        return math.ceil(span / gpus_per_node), [i * stride for i in range(n)]
    r = n if servers <= 2 else 2 * per_server
    step = stride if stride < gpus_per_node else gpus_per_node
    return min(servers, 2), [i * step for i in range(r)]


def ring_extended_s(time_s: float, latency_s: float, r: int, n: int) -> float:
    """A ring collective priced on ``r`` ranks (``time_s``, of which ``latency_s`` latency)
    extended to ``n`` ranks: latency ``x (n - 1) / (r - 1)``, transfer time
    ``x ((n - 1) / n) / ((r - 1) / r)`` (Patarasuk & Yuan 2009: a ring moves ``(n - 1)/n`` of
    the message per rank over ``n - 1`` steps; the per-server bottleneck of a ring across
    servers does not depend on how many servers it crosses).

    >>> ring_extended_s(3.0, 1.0, 2, 2), ring_extended_s(3.0, 1.0, 2, 4)
    (3.0, 6.0)
    """
    if r >= n:
        return time_s
    lat = min(max(latency_s, 0.0), time_s)
    return lat * (n - 1) / (r - 1) + (time_s - lat) * ((n - 1) / n) / ((r - 1) / r)


def tp_phase_s(
    preset: Any, costs: Any, overlap: bool, phase: str, dur: float, tp_s: float, rs_s: float
) -> float:
    """Seconds one micro-batch's ``phase`` (``"F"``/``"B"``) holds the compute path: ``dur``
    of compute and ``tp_s`` of tensor-parallel collectives after it; with the recipe's
    ``tp_comm`` overlapped (``overlap``), the lowering's split
    (:func:`perfmodel.parallel.lower_pipeline.tp_overlapped`: ``preset``'s
    :class:`~perfmodel.parallel.software.TPOverlap`, the compute slowed by the SMs the
    communication holds, ``rs_s`` seconds of reduce-scattered GEMMs on fewer SMs, the exposed
    tail) run as :meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.segment` runs it:
    ``max(compute, overlapped) + tail``. Applied to a stage's sums where the lowering applies
    it per segment (gradient bucket or block): the same while every segment's overlapped
    communication is shorter than its compute."""
    if tp_s <= 0:
        return dur
    if not overlap:
        return dur + tp_s
    from perfmodel.parallel.lower_pipeline import tp_overlapped

    sm_count = getattr(getattr(costs, "gpu_spec", None), "sm_count", 0)
    c, under, tail = tp_overlapped(preset, sm_count, phase, dur, tp_s, rs_s)
    return max(c, under) + tail


def stage_issue_lead_s(
    costs: Any, workload: Any, rc: Any, schedule: str, pp: int, m: int, v: int, recompute: str
) -> float:
    """Seconds the eager host issues before the first stage's GPU can run its step without
    waiting: :func:`perfmodel.parallel.host_lead.issue_lead` (predict's rule) over the first
    stage's operation order for ``m`` micro-batches, the stage's layers ``workload.layers``,
    the recipe's selective-recomputation share; every chunk of an interleaved stage priced as
    the whole stage's layers (an upper bound of the first operation's lead)."""
    from perfmodel.parallel.host_lead import issue_lead
    from perfmodel.parallel.lowering import Chunk
    from perfmodel.parallel.plan import PipelineSchedule, Recompute
    from perfmodel.parallel.schedule import stage_ops

    sched = PipelineSchedule.parse(schedule)
    v = v if sched is PipelineSchedule.INTERLEAVED and pp > 1 else 1
    chunks = [Chunk((), 0.0, 0.0, 0, workload.layers)] * (pp * v)
    share = rc.selective_recompute.share_for(workload)
    ops = stage_ops(sched, pp, m, 0, v)
    return issue_lead(costs, chunks, ops, pp, 0, Recompute.parse(recompute), share)


def dp_exposed(
    rc: Any,
    params: float,
    m: int,
    fwd_s: float,
    bwd_s: float,
    collective_s: Callable[[CollectiveOp, float], float],
    fill_stages: int = 1,
) -> tuple[float, float]:
    """``(gradient reduction, parameter gather)`` seconds exposed per step of a stage's
    ``params`` over its data-parallel (``dp x cp``) ranks, ``collective_s(op, bytes)`` the
    seconds of one collective over them, as the recipe ``rc`` runs them
    (:class:`~perfmodel.parallel.recipe.Recipe`: ``grad_reduce_op`` of
    ``grad_reduce_bytes`` per parameter, gathers of ``gather_bytes``, ``sharding``,
    ``grad_comm`` / ``param_gather`` overlap), beside ``m`` micro-batches whose phases hold
    the compute path ``fwd_s`` / ``bwd_s`` seconds each:

    - ZeRO-3 / FSDP: every micro-batch gathers the parameters before its forward and again
      before its backward and reduce-scatters the gradients in its backward (the
      lowering's prefetched gathers and per-micro-batch reduction): each phase exposes
      what it moves beyond its compute, ``m [max(0, AG - F) + max(0, AG + RS - B)]`` with
      the reduction overlapped (``grad_comm``), ``m [max(0, AG - F) + max(0, AG - B) + RS]``
      without (the reduce-scatter after the backward, in full);
    - FSDP2 pipelined by ``torch.distributed.pipelining``
      (:attr:`~perfmodel.parallel.recipe.Recipe.gather_per_step`): the units gathered once,
      prefetched under the first micro-batch's forward (``fill_stages x max(0, AG - F)``),
      the gradients reduce-scattered once after the last backward, in full;
    - ZeRO-2: the gradients reduce-scattered in every micro-batch's backward, beyond it
      when overlapped (:func:`beyond`), else in full;
    - ZeRO-0/1: one reduction beyond the last micro-batch's backward when overlapped
      (bucketed DDP, Megatron's ``overlap_grad_reduce``; Li et al. VLDB 2020), else in
      full after it (a pipeline flush included);
    - ZeRO-1/2's parameter all-gather after the optimizer: beyond the next step's first
      forward when the recipe overlaps it (Megatron's ``overlap_param_gather``), else in
      full. Owner broadcasts (``param_sync``) are priced as that all-gather. A pipeline
      whose stages each start their gathers with their own first forward (the lowering's
      ``forward`` without interleaving: the first micro-batch's gathers prefetched from the
      stage's compute) fills ``fill_stages`` such delays in series, one per stage; an
      interleaved schedule launches them at the step's start (``aligned_gather``,
      Megatron-LM core_v0.9.0 ``schedules.py``'s ``param_sync_func``): one.

    Overlapped ZeRO-0/1/2 collectives run per bucket of the recipe's ``bucket_bytes``
    (:func:`beyond`); the first bucket's own size (``first_bucket_bytes``), HSDP's two
    groups and the experts' own data-parallel group are left to ``predict``.
    """
    grad_bytes = params * rc.grad_reduce_bytes
    red = collective_s(rc.grad_reduce_op, grad_bytes)
    gather = collective_s(CollectiveOp.ALLGATHER, params * rc.gather_bytes)
    stage, over = rc.sharding.stage, rc.grad_comm.overlap
    if rc.gather_per_step:  # pipelined FSDP2: one gather per unit, one reduction at the end
        return red, fill_stages * max(0.0, gather - fwd_s)
    if stage >= 3:
        bwd = max(0.0, gather + red - bwd_s) if over else max(0.0, gather - bwd_s) + red
        return m * bwd, m * max(0.0, gather - fwd_s)
    # k buckets of the recipe's bucket_bytes (one without buckets)
    k = max(1, math.ceil(grad_bytes / rc.bucket_bytes)) if rc.bucket_bytes else 1
    exposed = beyond(red, bwd_s, k) if over else red
    if stage == 2:
        exposed *= m
    if stage < 1:
        return exposed, 0.0
    if not rc.param_gather.overlap:
        return exposed, gather
    return exposed, fill_stages * beyond(gather, fwd_s, k)
