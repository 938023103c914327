"""The lowering's data-parallel emitters: the collectives over a stage's data-parallel group and
the end of a stage's step, each a method
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits and calls.

* :meth:`DataParallelEmitters.dp_collective` (priced by :meth:`~DataParallelEmitters.dp_time`,
  described by :meth:`~DataParallelEmitters.dp_spec`): one collective over the stage's
  data-parallel group, HSDP's shard group or its replica group, the TP siblings sharing links;
* :meth:`DataParallelEmitters.gather` and :meth:`~DataParallelEmitters.param_sync_s`: ZeRO-3/FSDP
  parameter all-gathers, or owner broadcasts where the recipe syncs parameters so;
* :meth:`DataParallelEmitters.reduce_gradients`: a segment's gradient reduction (HSDP:
  reduce-scatter in the shard group, then all-reduce across the replicas);
* :meth:`DataParallelEmitters.finish_stage` and :meth:`~DataParallelEmitters.tied_embedding`:
  the reduction that did not overlap, the tied embedding's gradient, the optimizer step over the
  stage's (sharded) parameters and ZeRO-1/2's parameter all-gather after it.

The methods read the lowering's state (``self.plan``, ``self.rc``, ``self.dp_groups``...), set by
``PipelineLowering.__init__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.lowering import Chunk, Segment, ring_share
from perfmodel.parallel.param_sync import owners_by_rule, tensor_owner_bytes
from perfmodel.parallel.placement import Placement
from perfmodel.parallel.recipe import ParamSync, Recipe
from perfmodel.parallel.taskgraph import CommKind, CommSpec, GraphBuilder, TaskKind
from perfmodel.workload.layers import layer_tensors

_EXPERT = attrgetter("expert_params")


class DataParallelEmitters:
    """Data-parallel collectives and the end of a stage's step of a
    :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (see the module docstring)."""

    def dp_collective(
        self,
        s: int,
        op: CollectiveOp,
        nbytes: float,
        deps: list[int],
        label: str,
        kind: CommKind = CommKind.DP,
        stream: str | None = None,
        group: str = "dp",
        duration_s: float | None = None,
    ) -> int:
        """A collective over stage ``s``'s data-parallel group (with its TP siblings sharing
        links), on the gradient stream unless ``stream`` is given; ``group`` "shard" or
        "replica" takes the HSDP shard group or the replica group instead; ``duration_s``
        replaces the collective model's time (a series of collectives priced by the caller)."""
        if duration_s is None:  # the memo's hit inline (FSDP: ~10^5 calls per plan)
            duration_s = self._dp_time.get((op, nbytes, s, group))
            if duration_s is None:
                duration_s = self.dp_time(s, op, nbytes, group)
        dur = duration_s + self.preset.fusion_wait_s
        spec = self._dp_specs.get((op, nbytes, s, group, kind))
        if spec is None:
            spec = self.dp_spec(s, op, nbytes, kind, group)
        tid = self.b.add(
            TaskKind.COLLECTIVE,
            self.gpu[s],
            stream or self.rc.grad_comm.stream,
            dur,
            deps,
            label=label,
            comm=spec,
        )
        self.comm_dur[tid] = dur
        return tid

    def dp_time(self, s: int, op: CollectiveOp, nbytes: float, group: str = "dp") -> float:
        """The collective model's time of ``op`` of ``nbytes`` over stage ``s``'s ``group``
        (:meth:`dp_collective`) with its TP siblings sharing links, without the fusion wait;
        a pure function of its key, asked once per lowering."""
        key = (op, nbytes, s, group)
        duration_s = self._dp_time.get(key)
        if duration_s is None:
            groups = self._dp_flat(s, group)
            costs = self.costs
            by_key = getattr(costs, "concurrent_key", None)
            if by_key is None:  # a cost model without shared values (tests)
                duration_s = costs.concurrent_time(op, nbytes, groups, self.alg)
            else:
                duration_s = self._dp_keyed(s, group, op, nbytes, groups)
            self._dp_time[key] = duration_s
        return duration_s

    def _dp_keyed(
        self,
        s: int,
        group: str,
        op: CollectiveOp,
        nbytes: float,
        groups: tuple[tuple[str, ...], ...],
    ) -> float:
        """:meth:`dp_time` through ``SystemCosts.concurrent_keyed``: the stage's key
        (``SystemCosts.concurrent_key``, asked before the stage's first collective and, where
        none was known, once after it) shares the value with earlier stages and plans whose
        groups have the same key (issue 27: a pipeline's stages price the same collectives on
        translated groups). A stage with no key after its first collective is priced as
        before (``()``: asked no more)."""
        keys = self._dp_keys
        costs: Any = self.costs
        sk = keys.get((s, group))
        if sk is None:  # an earlier stage's key where this stage is that one moved
            sk = self.stage_shift.key(s, group, keys, lambda r: self._dp_flat(r, group))
            if sk is not None:
                keys[(s, group)] = sk
        if sk is None:
            sk = costs.concurrent_key(groups, self.alg)
            if sk is None:  # not known yet: priced as before, asked once more after
                duration_s: float = costs.concurrent_time(op, nbytes, groups, self.alg)
                sk = keys[(s, group)] = costs.concurrent_key(groups, self.alg) or ()
                if sk:
                    costs.concurrent_keyed(op, nbytes, groups, self.alg, sk)  # kept for others
                return duration_s
            keys[(s, group)] = sk
        if not sk:
            return costs.concurrent_time(op, nbytes, groups, self.alg)
        return costs.concurrent_keyed(op, nbytes, groups, self.alg, sk)

    def _dp_flat(self, s: int, group: str) -> tuple[tuple[str, ...], ...]:
        """Stage ``s``'s ``group`` and its siblings, as :meth:`dp_time` prices them."""
        main, sibs = self._dp_group(s, group)
        return (main, *sibs)

    def dp_spec(self, s: int, op: CollectiveOp, nbytes: float, kind: CommKind = CommKind.DP,
                group: str = "dp") -> CommSpec:  # fmt: skip
        """The (frozen, shared) :class:`CommSpec` of a collective over stage ``s``'s group."""
        # one spec per collective of the stage's groups: FSDP lowers a gather and a
        # reduce-scatter per block and micro-batch (~10^5 specs for GPT-3 175B), each a new
        # object for the garbage collector to walk in every cached report
        spec_key = (op, nbytes, s, group, kind)
        spec = self._dp_specs.get(spec_key)
        if spec is None:
            main, sibs = self._dp_group(s, group)
            wait = self.preset.fusion_wait_s
            spec = self._dp_specs[spec_key] = CommSpec.built(
                op, nbytes, main, self.alg, kind, sibs, wait
            )
        return spec

    def _dp_group(self, s: int, which: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
        """``(group, sibling groups)`` of stage ``s``: the data-parallel group, or under HSDP
        the shard group (``shard_group`` consecutive replicas, one server with the default
        placement) or the replica group (every ``shard_group``-th replica, across servers)."""
        full, sibs = self.dp_groups[s], self.dp_sibs[s]
        if which == "dp":
            return full, sibs
        g = self.rc.shard_group
        if which == "shard":
            return full[:g], tuple(x[:g] for x in sibs)
        others = tuple(full[i::g] for i in range(1, g)) + tuple(x[::g] for x in sibs)
        return full[::g], others

    def gather(self, s: int, ch: Chunk, i: int, label: str, after: list[int] | None = None) -> int:
        """Parameter all-gather of segment ``i`` of chunk ``ch`` on the recipe's gather
        stream, prefetched one segment ahead (it may start once the compute two segments back
        has finished), or, given ``after``, launched once those tasks are done
        (:meth:`gather_deps`); owner broadcasts where the recipe syncs parameters so
        (:meth:`param_sync_s`)."""
        hist = self.gather_hist[s]
        if after is not None:
            dep = after
        else:
            dep = [hist[-2]] if len(hist) >= 2 else []
        nbytes = ch.segments[i].params * self.rc.gather_bytes
        op, dur = CollectiveOp.ALLGATHER, None
        if self.rc.param_sync is ParamSync.OWNER_BROADCAST and not self.by_unit:  # ZeRO-1/2's
            op, dur = CollectiveOp.BROADCAST, self.param_sync_s(s, ch.segment_ids(i))
        return self.dp_collective(
            s,
            op,
            nbytes,
            dep,
            label,
            CommKind.ZERO,
            self.rc.param_gather.stream,
            "shard" if self.hsdp else "dp",
            dur,
        )

    def param_sync_s(self, s: int, layer_ids: Sequence[int]) -> float:
        """Seconds of the owner broadcasts that bring stage ``s``'s layers ``layer_ids`` to every
        data-parallel rank (:mod:`perfmodel.parallel.param_sync`; owners by the preset's
        ``param_owners`` rule), the TP siblings' broadcasts sharing the links."""
        owners = self._owners.get(s)
        if owners is None:
            ids = sorted({i for c in range(self.V) for i in self.chunks[c * self.P + s].layer_ids})
            tensors = layer_tensors(self.wl.layers, ids)
            ranks = owners_by_rule(
                self.preset.param_owners, [p for _, p in tensors], len(self.dp_groups[s])
            )
            owners = self._owners[s] = (tensors, ranks)
        groups = self._dp_flat(s, "dp")
        return sum(
            self.costs.concurrent_time(CollectiveOp.BROADCAST, b, groups, self.alg)
            for b in tensor_owner_bytes(layer_ids, owners[0], owners[1], self.rc.gather_bytes)
        )

    def reduce_gradients(self, s: int, seg: Segment, deps: list[int], label: str) -> float:
        """Reduce ``seg``'s gradients over the data-parallel group (HSDP: reduce-scatter in the
        shard group, then all-reduce of the shard across the replicas, FSDP2's order); returns
        the communication time that runs under the next segment.

        Under HSDP the routed experts are FSDP2-wrapped on their own 2-D mesh ``(dp_replicate,
        efsdp)`` and the dense weights on ``(dp_replicate, fsdp)`` (``edp_mesh`` in
        ``torchtitan/models/deepseek_v3/parallelize.py`` and ``apply_fsdp`` in
        ``torchtitan/distributed/fsdp.py`` at b5bcd76): each is reduce-scattered over its own
        shard dimension, then all-reduced over ``dp_replicate``.

        * The shard group's reduce-scatter carries ``(params - expert + expert x
          ring_share(k, S)) x grad_reduce_bytes``: the dense gradients over the
          ``S = shard_group`` ranks and the experts' over their ``k =``
          :attr:`~perfmodel.parallel.plan.ParallelismPlan.expert_shard_degree` (efsdp) ranks,
          priced in the one collective over the shard group with their bytes scaled to the
          ``(k - 1) / k`` a ring moves (:func:`~perfmodel.parallel.lowering.ring_share`; none at
          ``k = 1``: each rank holds its experts whole; all at ``k = S``, ``ep = 1``). The efsdp
          group's own placement and its call's latency are not simulated separately (it lies
          within a replica group's ranks, one server with the default placement), as in
          :func:`~perfmodel.parallel.lowering.expert_grad_share`.
        * The replicas' all-reduce carries each rank's shard: ``((params - expert) /
          shard_group + expert / k) x grad_reduce_bytes``."""
        rc = self.rc
        if not self.hsdp:
            nbytes = self.reduced_params(seg.params, seg.expert_params) * rc.grad_reduce_bytes
            g = self.dp_collective(s, self._grad_op(), nbytes, deps, label)
            self.grad_comm[s].append(g)
            return self.comm_dur[g]
        rs, ar = self._hsdp_reduce(s, seg.params, seg.expert_params, deps, label)
        return self.comm_dur[rs] + self.comm_dur[ar]

    def _hsdp_reduce(
        self, s: int, params: float, expert: float, deps: list[int], label: str
    ) -> tuple[int, int]:
        """HSDP's reduction of ``params`` gradients (``expert`` of them routed experts') on
        stage ``s`` after ``deps`` (:meth:`reduce_gradients`' sizes): the shard group's
        reduce-scatter and the replicas' all-reduce after it, both appended to the stage's
        gradient collectives; returns their task ids."""
        rc = self.rc
        k = self.plan.expert_shard_degree
        dense = params - expert
        rs_params = dense + expert * ring_share(k, rc.shard_group)
        rs = self.dp_collective(
            s,
            CollectiveOp.REDUCESCATTER,
            rs_params * rc.grad_reduce_bytes,
            deps,
            label,
            group="shard",
        )
        shard = dense / rc.shard_group + expert / k
        ar = self.dp_collective(
            s,
            CollectiveOp.ALLREDUCE,
            shard * rc.grad_reduce_bytes,
            [rs],
            f"{label} replicas",
            group="replica",
        )
        self.grad_comm[s] += [rs, ar]
        return rs, ar

    def reduced_params(self, params: float, expert: float) -> float:
        """Parameters whose gradients the dense data-parallel collective carries: the routed
        experts' count :func:`~perfmodel.parallel.lowering.expert_grad_share` of theirs."""
        if not expert or self.expert_share == 1.0:
            return params
        return params - expert * (1.0 - self.expert_share)

    def _grad_op(self) -> CollectiveOp:
        return self.rc.grad_reduce_op  # reduce-scatter from ZeRO-1 on, unless the stack keeps it

    def tied_embedding(self) -> None:
        """A tied word embedding: the last stage (which holds the last chunk) keeps a copy,
        whose gradient is all-reduced with the first stage."""
        P = self.P
        if P > 1:
            if self.tied[P - 1]:
                _embedding_grad_allreduce(
                    self.b,
                    self.costs,
                    self.pl,
                    self.rc,
                    self.tied[P - 1],
                    self.last_compute,
                    self.grad_comm,
                )

    def stage_params(self, s: int) -> int:
        """Parameters stage ``s`` holds (its chunks plus a tied embedding's copy)."""
        return sum(self.chunks[c * self.P + s].params for c in range(self.V)) + self.tied[s]

    def sharded_params(self, s: int, stage_params: float) -> float:
        """Parameters stage ``s``'s optimizer updates: with ZeRO/FSDP sharding the dense ones
        over the ``dp x cp`` replicas (HSDP: the shard group) and the routed experts' over the
        expert data-parallel group (:attr:`ParallelismPlan.expert_shard_degree`: ``expert_dp``,
        under HSDP its share within a replica group), as Megatron-Core's distributed optimizer
        shards each over the group that reduces its gradients."""
        rc, plan = self.rc, self.plan
        if rc.sharding.stage < 1:
            return stage_params
        expert = self.stage_expert_params(s)
        return (stage_params - expert) / rc.shard_degree(
            plan.grad_replicas
        ) + expert / plan.expert_shard_degree

    def stage_expert_params(self, s: int) -> int:
        """Routed experts' parameters among stage ``s``'s (its segments'
        :attr:`~perfmodel.parallel.lowering.Segment.expert_params`, which cover its chunks'
        layers: an integer sum, the same in any order)."""
        chunks, P = self.chunks, self.P  # per chunk in C (a pp2 chunk: ~150 segments)
        return sum(sum(map(_EXPERT, chunks[c * P + s].segments)) for c in range(self.V))

    def finish_stage(self, s: int) -> None:
        """Stage ``s`` after its last backward: the tied copy's gradient (overlapped stacks),
        the gradient reduction that did not overlap (one collective of all the stage's
        gradients; HSDP: :meth:`_hsdp_reduce`'s reduce-scatter and all-reduce), the optimizer
        step over the stage's (sharded) parameters and ZeRO-1/2's parameter all-gather after
        it."""
        rc, b = self.rc, self.b
        stage_params = self.stage_params(s)
        if self.dp_on and self.overlap and self.tied[s]:  # the copy's gradient, after backward
            nbytes = self.tied[s] * rc.grad_reduce_bytes
            self.grad_comm[s].append(
                self.dp_collective(
                    s, self._grad_op(), nbytes, [self.last_compute[s]], "grad tied embedding"
                )
            )
        if self.dp_on and not self.overlap and self.hsdp:  # HSDP's pair, as reduce_gradients
            deps = [self.last_compute[s]]
            self._hsdp_reduce(s, stage_params, self.stage_expert_params(s), deps, "grad all")
        elif self.dp_on and not self.overlap:
            nbytes = (
                self.reduced_params(stage_params, self.stage_expert_params(s))
                * rc.grad_reduce_bytes
            )
            self.grad_comm[s].append(
                self.dp_collective(s, self._grad_op(), nbytes, [self.last_compute[s]], "grad all")
            )
        opt_params = self.sharded_params(s, stage_params)
        issue = [self.issue_tid[s]] if self.issue_tid[s] >= 0 else []
        t_opt = b.add(
            TaskKind.OPTIMIZER,
            self.gpu[s],
            "compute",
            self.costs.optimizer_time(opt_params, self.inp.optimizer),
            [self.last_compute[s], *self.grad_comm[s], *issue],
            label="optimizer",
        )
        if self.dp_on and 1 <= rc.sharding.stage <= 2 and not self.gather_early:
            op, dur = CollectiveOp.ALLGATHER, None
            if rc.param_sync is ParamSync.OWNER_BROADCAST:
                ids = [i for c in range(self.V) for i in self.chunks[c * self.P + s].layer_ids]
                op, dur = CollectiveOp.BROADCAST, self.param_sync_s(s, ids)
            self.dp_collective(
                s,
                op,
                stage_params * rc.gather_bytes,
                [t_opt],
                "param all-gather" if dur is None else "param owner broadcasts",
                CommKind.ZERO,
                rc.param_gather.stream,
                duration_s=dur,
            )


def _embedding_grad_allreduce(
    b: GraphBuilder,
    costs: Costs,
    pl: Placement,
    rc: Recipe,
    params: int,
    last_compute: list[int],
    grad_comm: list[list[int]],
) -> None:
    """All-reduce of a tied word embedding's gradient between the first and the last pipeline
    stage (each TP rank with its own shard; Megatron-LM ``_allreduce_embedding_grads``), after
    both stages' backward; both stages' optimizers wait for it."""
    P = len(last_compute)
    groups = [(pl.gpu(0, 0, t), pl.gpu(0, P - 1, t)) for t in range(pl.tp)]
    nbytes = params * rc.grad_reduce_bytes
    dur = costs.concurrent_time(CollectiveOp.ALLREDUCE, nbytes, groups)
    spec = CommSpec.built(
        CollectiveOp.ALLREDUCE, nbytes, groups[0], "auto", CommKind.PP, tuple(groups[1:]), 0.0
    )
    tid = b.add(
        TaskKind.COLLECTIVE,
        pl.gpu(0, P - 1, 0),
        "dp",
        dur,
        [last_compute[0], last_compute[P - 1]],
        label="embedding grad all-reduce",
        comm=spec,
    )
    grad_comm[0].append(tid)
    grad_comm[P - 1].append(tid)
    b.notes.append(
        f"tied word embedding: the last stage holds a copy ({params} parameters); its gradient is "
        "all-reduced with the first stage after backward"
    )
