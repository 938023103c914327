"""Which GPUs the plan screen's pipeline sends pair, in the plan's placement.

Pure rank arithmetic for :class:`perfmodel.search.screen.PlanScreen`: the plan's rank strides
and expert tensor parallelism as one value (:class:`Ranks`), the global ranks of a stage's
tensor-, context- and expert-parallel groups as the lowering builds them
(:func:`group_ranks`), the global rank pairs of each stage boundary's sends, as the lowering
pairs them (:meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.p2p` over
:class:`perfmodel.parallel.placement.Placement`'s tensor-parallel groups), and the small probe
topologies the screen prices a group (:func:`probe_group`) or each distinct boundary on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from perfmodel.parallel.placement import rank_strides

#: GPU index pairs on a probe topology and the probe's server count (:func:`probe_pairs`).
Probe = tuple[tuple[tuple[int, int], ...], int]


class Ranks(NamedTuple):
    """Where a plan's ranks sit: its placement's rank strides in
    :func:`perfmodel.parallel.placement.rank_strides`' order ``(dp, pp, tp)`` (``dp`` the
    stride of the ``dp x cp`` axis, context-parallel rank fastest), the plan's expert
    tensor-parallel size ``etp`` as stated (``0``: equal to ``tp``, Megatron-Core's default;
    :attr:`perfmodel.parallel.plan.ParallelismPlan.etp`), which the expert groups' spacing
    and the rank's workload read, and its pipeline ``stages``, whose groups the screen
    prices (:meth:`perfmodel.search.screen_groups.ScreenGroups._groups`).

    >>> Ranks.of(("tp", "dp", "pp"), 4, 2, 2, 1)
    Ranks(dp=2, pp=8, tp=1, etp=1, stages=2)
    """

    dp: int
    pp: int
    tp: int
    etp: int = 0
    stages: int = 1

    @classmethod
    def of(cls, order: tuple[str, ...], dp: int, pp: int, tp: int, etp: int = 0) -> Ranks:
        """The strides of ``order`` (fastest first) for ``dp`` (the plan's ``dp x cp``),
        ``pp`` and ``tp`` ranks (:func:`~perfmodel.parallel.placement.rank_strides`),
        ``etp`` and ``pp`` stages."""
        return cls(*rank_strides(order, dp, pp, tp), etp, pp)

    @property
    def strides(self) -> tuple[int, int, int]:
        """The ``(dp, pp, tp)`` rank strides."""
        return self.dp, self.pp, self.tp


def group_ranks(r: Ranks, kind: str, size: int, tp: int, stage: int = 0) -> tuple[int, ...]:
    """Global ranks of stage ``stage``'s first ``kind`` group of ``size`` ranks, as the
    lowering builds it from its :class:`~perfmodel.parallel.placement.Placement`:
    ``"tp"`` ``tp_group(0, stage)``; ``"cp"`` ``cp`` consecutive data-axis ranks
    (:func:`perfmodel.parallel.expert.context_groups`); ``"ep"`` the stage's ranks in
    ``tp``-fastest, then data-axis order taken every ``etp`` (``etp`` fastest, then ``ep``:
    :func:`perfmodel.parallel.expert.expert_groups`, Megatron-Core's expert rank order), so
    member ``k`` is the stage's ``k x etp``-th rank: data index ``k etp // tp``,
    tensor-parallel rank ``k etp mod tp``. With ``etp = tp`` that is ``size`` replicas
    the data stride apart; with ``etp = 1`` the tensor-parallel ranks first.

    >>> r = Ranks.of(("tp", "dp", "pp"), 8, 1, 2, 1)  # tp 2, dp 8: strides (2, 16, 1)
    >>> group_ranks(r, "ep", 4, 2), group_ranks(r._replace(etp=2), "ep", 4, 2)
    ((0, 1, 2, 3), (0, 2, 4, 6))
    >>> group_ranks(Ranks.of(("dp", "tp", "pp"), 8, 1, 2, 1), "ep", 4, 2)  # dp fastest
    (0, 8, 1, 9)
    """
    base = stage * r.pp
    if kind == "tp":
        return tuple(base + t * r.tp for t in range(size))
    if kind == "cp":
        return tuple(base + c * r.dp for c in range(size))
    etp = (r.etp or tp) if kind == "ep" else tp
    return tuple(base + (k * etp // tp) * r.dp + (k * etp % tp) * r.tp for k in range(size))


def _renumbered(ranks: Iterable[int], gpus_per_node: int) -> tuple[dict[int, int], int]:
    """``(server -> its probe's first GPU index, servers)``: the servers ``ranks`` touch
    (rank ``r`` on server ``r // gpus_per_node``) renumbered in order."""
    servers = sorted({r // gpus_per_node for r in ranks})
    return {sv: i * gpus_per_node for i, sv in enumerate(servers)}, len(servers)


def probe_group(ranks: Sequence[int], gpus_per_node: int) -> tuple[tuple[int, ...], int]:
    """A group's global ranks as GPU indices of a probe topology, and its server count: the
    servers the group touches renumbered in order, each member at its local index (as
    :func:`probe_pairs`: the servers are alike, so which of them the group touches, not where
    they sit, sets its time).

    >>> probe_group((0, 8, 16, 24), 8), probe_group((0, 12, 24, 36), 8)
    (((0, 8, 16, 24), 4), ((0, 12, 16, 28), 4))
    """
    at, n = _renumbered(ranks, gpus_per_node)
    return tuple(at[r // gpus_per_node] + r % gpus_per_node for r in ranks), n


def p2p_rank_pairs(
    tp: int, n: int, s_from: int, s_to: int, r: Ranks, gpus_per_node: int
) -> list[tuple[int, int]]:
    """Global rank pairs of the pipeline sends from stage ``s_from`` to ``s_to``: rank ``t``
    of replica ``d``'s tensor-parallel group with the same rank of the other stage, for
    ``d < min(n, max(1, gpus_per_node // tp))`` and every ``t < tp``, as
    :meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.p2p` pairs them (its
    ``tp_group`` slices), at most ``gpus_per_node`` pairs (one server's sends when
    ``tp > gpus_per_node``). ``r``: the placement's rank strides (:class:`Ranks`),
    ``n = dp x cp``.

    >>> p2p_rank_pairs(2, 2, 0, 1, Ranks(2, 4, 1), 8)  # tp, dp, pp (default): stages 4 apart
    [(0, 4), (1, 5), (2, 6), (3, 7)]
    >>> p2p_rank_pairs(2, 2, 0, 1, Ranks(4, 2, 1), 8)  # tp, pp, dp: stages 2 apart
    [(0, 2), (1, 3), (4, 6), (5, 7)]
    """
    s_dp, s_pp, s_tp = r.strides
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
    at, n = _renumbered((r for pair in pairs for r in pair), gpn)
    local = tuple((at[a // gpn] + a % gpn, at[b // gpn] + b % gpn) for a, b in pairs)
    return local, n


def boundary_probes(
    tp: int, n: int, pp: int, wrap: bool, r: Ranks, gpus_per_node: int
) -> list[Probe]:
    """The distinct probes (:func:`probe_pairs`) of a pipeline's stage boundaries, in the
    order first met: boundary ``s`` sends from stage ``s`` to ``s + 1``
    (:func:`p2p_rank_pairs`), and ``wrap`` (the interleaved schedule, whose last stage sends
    its chunk's output to the first) adds the boundary of stages ``0`` and ``pp - 1`` (priced
    from stage 0, the screen's sends being alike both ways). Where stages do not fill whole
    servers some boundaries stay inside one and others cross (a DGX with stages of 4 GPUs,
    an NVL72 rack of 72 with stages of 16): each such kind is one probe.

    >>> [nodes for _, nodes in boundary_probes(2, 2, 4, False, Ranks(2, 4, 1), 8)]  # 0-3 | 4-7 |
    [1, 2]
    """
    ends = [(s, s + 1) for s in range(pp - 1)]
    if wrap and pp > 2:
        ends.append((0, pp - 1))
    seen: dict[Probe, None] = {}
    for a, b in ends:
        seen.setdefault(
            probe_pairs(p2p_rank_pairs(tp, n, a, b, r, gpus_per_node), gpus_per_node), None
        )
    return list(seen)


__all__ = [
    "Probe",
    "Ranks",
    "boundary_probes",
    "group_ranks",
    "p2p_rank_pairs",
    "probe_group",
    "probe_pairs",
]
