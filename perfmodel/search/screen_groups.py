"""The plan screen's communication groups on probe topologies: a stage's tensor-, context- or
expert-parallel group (:meth:`ScreenGroups._group`), every distinct stage boundary's pipeline
sends (:meth:`ScreenGroups._p2p_boundaries`) and a data-parallel collective's seconds
(:meth:`ScreenGroups._dp_collective_s`), each priced by the topology's ``CommCostModel`` on the
fewest servers that hold the group as the plan's placement lays it
(:mod:`perfmodel.search.screen_ranks`). A mixin of :class:`perfmodel.search.screen.PlanScreen`,
which owns the probe topologies (``_topology``), their cost models (``_system_costs``) and the
caches.
"""

from __future__ import annotations

from typing import Any

from perfmodel.ops import CollectiveOp
from perfmodel.search.screen_overlap import ring_extended_s, ring_representative
from perfmodel.search.screen_ranks import Ranks, boundary_probes, group_ranks, probe_group

#: A group's GPU names on a probe topology and that topology's cost model
#: (:meth:`ScreenGroups._group`).
Group = tuple[tuple[str, ...], Any]


class ScreenGroups:
    """Group pricing of :class:`perfmodel.search.screen.PlanScreen` (see the module
    docstring); its host class provides ``_topology(nodes)``, ``_system_costs(nodes)``,
    ``gpus_per_node`` and the caches ``_p2p_cache`` and ``_dp_times``."""

    gpus_per_node: int
    _p2p_cache: dict[tuple[Any, ...], list[tuple[list[tuple[str, str]], Any]]]
    _dp_times: dict[tuple[Any, float, int, int], float]
    _shape_keys: dict[tuple[Ranks, int, int, int], tuple[Any, ...]]

    def _topology(self, nodes: int) -> Any:  # pragma: no cover - the host class's
        raise NotImplementedError

    def _system_costs(self, nodes: int) -> Any:  # pragma: no cover - the host class's
        raise NotImplementedError

    def _group(self, ranks: tuple[int, ...]) -> Group:
        """The group of global ``ranks`` (:func:`perfmodel.search.screen_ranks.group_ranks`:
        the lowering's tensor-, context- or expert-parallel group in the plan's placement) on
        a probe topology of the servers it touches, renumbered in order, each member at its
        local index (:func:`~perfmodel.search.screen_ranks.probe_group`), and that topology's
        cost model. One member per server over more than two servers keeps all of them (a
        ring or all-to-all over two such members is not the group's: 0.46-0.84 of its time on
        dgx-h100 x4 or x8)."""
        local, nodes = probe_group(ranks, self.gpus_per_node)
        g = self._topology(nodes).gpus
        return tuple(g[i] for i in local), self._system_costs(nodes)

    def _groups(self, r: Ranks, kind: str, size: int, tp: int) -> list[Group]:
        """Every stage's first ``kind`` group of ``size`` ranks
        (:func:`~perfmodel.search.screen_ranks.group_ranks`, the placement ``r`` over its
        ``r.stages`` stages) that sits differently on its servers (a distinct
        :func:`~perfmodel.search.screen_ranks.probe_group`), each on its probe topology
        (:meth:`_group`), in stage order: one where every stage's group sits alike. The
        lowering prices each stage on its own groups, and a stage whose per-micro-batch
        collectives are slower paces the pipeline, so the screen charges the slowest
        (:func:`slowest_s`). Where stages straddle servers (72-GPU racks with stages of 16:
        stage 4 on GPUs 64-79) a data-axis group of one stage crosses racks while stage 0's
        does not (gb200-nvl72 x2, tp4 pp9 ep4: the expert all-to-all 1.9x stage 0's, the
        screen 0.82 of predict's step before fix25, 0.99 after)."""
        return [self._group(ranks) for ranks in self._probes(r, kind, size, tp).values()]

    def _probes(
        self, r: Ranks, kind: str, size: int, tp: int
    ) -> dict[tuple[tuple[int, ...], int], tuple[int, ...]]:
        """Each distinct probe of the stages' first ``kind`` groups (:meth:`_groups`) with the
        global ranks of the first stage's group that sits so, in stage order."""
        seen: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}
        for s in range(r.stages):
            ranks = group_ranks(r, kind, size, tp, s)
            seen.setdefault(probe_group(ranks, self.gpus_per_node), ranks)
        return seen

    def _shape_key(self, r: Ranks, tp: int, ep: int, cp: int) -> tuple[Any, ...]:
        """What a stage shape's costs read of the placement ``r``
        (``PlanScreen._parts`` / ``_stage``'s cache keys): ``etp`` (the rank's workload) and
        the distinct probes of the tensor-, expert- and context-parallel groups it prices
        (:meth:`_probes`), so plans whose groups sit alike share layer times (the default
        order's ``(dp, pp)`` splits of one ``tp``: before, keyed by two strides); cached."""
        key = (r, tp, ep, cp)
        hit = self._shape_keys.get(key)
        if hit is None:
            kinds = (("tp", tp), ("ep", ep), ("cp", cp))
            probes = tuple(tuple(self._probes(r, g, n, tp)) if n > 1 else () for g, n in kinds)
            hit = self._shape_keys[key] = (r.etp, probes)
        return hit

    def _p2p_boundaries(
        self, tp: int, n: int, pp: int, wrap: bool, r: Ranks
    ) -> list[tuple[list[tuple[str, str]], Any]]:
        """The pipeline sends of every distinct stage boundary (``n = dp x cp``, the
        placement's :class:`~perfmodel.search.screen_ranks.Ranks` ``r``, ``wrap`` for the
        interleaved schedule's last-to-first boundary:
        :func:`perfmodel.search.screen_ranks.boundary_probes`), each on its probe topology,
        with its cost model; cached. The pairs are the lowering's
        (:meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.p2p`: every replica of a
        stage that fits beside replica 0's ``tp`` ranks on one server sends at once, so on a
        server with fewer NICs than GPUs they share them), at most ``gpus_per_node``; the
        slowest boundary paces the pipeline (``PlanScreen._evaluate``)."""
        key = (tp, n, pp, wrap, r.strides)
        hit = self._p2p_cache.get(key)
        if hit is None:
            hit = []
            for local, nodes in boundary_probes(tp, n, pp, wrap, r, self.gpus_per_node):
                g = self._topology(nodes).gpus
                hit.append(([(g[x], g[y]) for x, y in local], self._system_costs(nodes)))
            self._p2p_cache[key] = hit
        return hit

    def _dp_collective_s(self, op: Any, nbytes: float, n: int, stride: int) -> float:
        """Seconds of ``op`` of ``nbytes`` (nccl-tests convention) over ``n`` data-parallel
        ranks ``stride`` apart (the placement's), priced by the topology's
        ``CommCostModel`` (predict's: NCCL's channels over every NIC of a server, its
        protocols and latencies) on the group itself or, where every server holds the same
        local ranks of it, on its two-server representative
        (:func:`perfmodel.search.screen_overlap.ring_representative`), cached per key: exact on
        two servers; over more a ring extended, blind to NCCL's choice for the whole group (vs
        predict's group on DGX H100: 16 servers one GPU each 3.8x at 64 KiB, 1.16x at 16 MiB,
        1.00x at 1 GiB; 32 GPUs on 4 servers, NVLS tree there: 1.26x / 1.05x / 0.80x)."""
        if n < 2 or nbytes <= 0:
            return 0.0
        key = (op, nbytes, n, stride)
        hit = self._dp_times.get(key)
        if hit is None:
            servers, ranks = ring_representative(n, stride, self.gpus_per_node)
            topo = self._topology(servers)
            res = self._system_costs(servers).comm.collective(
                op, nbytes, tuple(topo.gpus[i] for i in ranks)
            )
            hit = ring_extended_s(float(res.time_s), float(res.latency_s), len(ranks), n)
            self._dp_times[key] = hit
        return hit


def slowest_s(groups: list[Group], op: CollectiveOp, nbytes: float) -> float:
    """Seconds of ``op`` moving ``nbytes`` on the slowest of ``groups``
    (:meth:`ScreenGroups._groups`), each priced by its own cost model."""
    return max(c.collective_time(op, nbytes, g) for g, c in groups)  # type: ignore[no-any-return]


__all__ = ["Group", "ScreenGroups", "slowest_s"]
