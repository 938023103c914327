"""Which GPUs the plan screen's pipeline sends pair, in the plan's placement.

Pure rank arithmetic for :class:`perfmodel.search.screen.PlanScreen`: the global rank pairs of
each stage boundary's sends, as the lowering pairs them
(:meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.p2p` over
:class:`perfmodel.parallel.placement.Placement`'s tensor-parallel groups), and the small probe
topology the screen prices each distinct boundary on.
"""

from __future__ import annotations

from collections.abc import Sequence

#: GPU index pairs on a probe topology and the probe's server count (:func:`probe_pairs`).
Probe = tuple[tuple[tuple[int, int], ...], int]


def p2p_rank_pairs(
    tp: int, n: int, s_from: int, s_to: int, strides: tuple[int, int, int], gpus_per_node: int
) -> list[tuple[int, int]]:
    """Global rank pairs of the pipeline sends from stage ``s_from`` to ``s_to``: rank ``t``
    of replica ``d``'s tensor-parallel group with the same rank of the other stage, for
    ``d < min(n, max(1, gpus_per_node // tp))`` and every ``t < tp``, as
    :meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.p2p` pairs them (its
    ``tp_group`` slices), at most ``gpus_per_node`` pairs (one server's sends when
    ``tp > gpus_per_node``). ``strides``: the placement's ``(dp, pp, tp)`` rank strides
    (:func:`perfmodel.parallel.placement.rank_strides`), ``n = dp x cp``.

    >>> p2p_rank_pairs(2, 2, 0, 1, (2, 4, 1), 8)  # tp, dp, pp (default): stages 4 apart
    [(0, 4), (1, 5), (2, 6), (3, 7)]
    >>> p2p_rank_pairs(2, 2, 0, 1, (4, 2, 1), 8)  # tp, pp, dp: stages 2 apart
    [(0, 2), (1, 3), (4, 6), (5, 7)]
    """
    s_dp, s_pp, s_tp = strides
    pairs = [
        (d * s_dp + t * s_tp + s_from * s_pp, d * s_dp + t * s_tp + s_to * s_pp)
        for d in range(min(n, max(1, gpus_per_node // tp)))
        for t in range(tp)
    ]
    return pairs[:gpus_per_node]


def probe_pairs(pairs: Sequence[tuple[int, int]], gpus_per_node: int) -> Probe:
    """Global rank pairs as GPU indices of a probe topology, and its server count: the
    servers the pairs touch renumbered in order (rank ``r`` is GPU ``r mod gpus_per_node`` of
    server ``r // gpus_per_node``, the topology's server-major order). The servers are alike,
    so which of them a boundary's pairs touch, not where they sit, sets its time.

    >>> probe_pairs([(4, 8), (5, 9)], 8)  # inside server 0 to server 1
    (((4, 8), (5, 9)), 2)
    >>> probe_pairs([(0, 32), (1, 33)], 8)  # server 0 to server 4: renumbered 1
    (((0, 8), (1, 9)), 2)
    """
    gpn = gpus_per_node
    servers = sorted({r // gpn for pair in pairs for r in pair})
    at = {sv: i * gpn for i, sv in enumerate(servers)}
    local = tuple((at[a // gpn] + a % gpn, at[b // gpn] + b % gpn) for a, b in pairs)
    return local, len(servers)


def boundary_probes(
    tp: int, n: int, pp: int, wrap: bool, strides: tuple[int, int, int], gpus_per_node: int
) -> list[Probe]:
    """The distinct probes (:func:`probe_pairs`) of a pipeline's stage boundaries, in the
    order first met: boundary ``s`` sends from stage ``s`` to ``s + 1``
    (:func:`p2p_rank_pairs`), and ``wrap`` (the interleaved schedule, whose last stage sends
    its chunk's output to the first) adds the boundary of stages ``0`` and ``pp - 1`` (priced
    from stage 0, the screen's sends being alike both ways). Where stages do not fill whole
    servers some boundaries stay inside one and others cross (a DGX with stages of 4 GPUs,
    an NVL72 rack of 72 with stages of 16): each such kind is one probe.

    >>> [nodes for _, nodes in boundary_probes(2, 2, 4, False, (2, 4, 1), 8)]  # 0-3 | 4-7 | 8-
    [1, 2]
    """
    ends = [(s, s + 1) for s in range(pp - 1)]
    if wrap and pp > 2:
        ends.append((0, pp - 1))
    seen: dict[Probe, None] = {}
    for a, b in ends:
        seen.setdefault(
            probe_pairs(p2p_rank_pairs(tp, n, a, b, strides, gpus_per_node), gpus_per_node), None
        )
    return list(seen)


__all__ = ["Probe", "boundary_probes", "p2p_rank_pairs", "probe_pairs"]
