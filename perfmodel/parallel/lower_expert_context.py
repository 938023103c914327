"""The lowering's expert- and context-parallel emitters: a segment's exposed expert all-to-alls
and ring-attention exchange on the compute stream (:meth:`ExpertContextEmitters.expert_context`,
after the MoE dispatchers' host synchronisation), the groups they run on
(:meth:`~ExpertContextEmitters.expert_context_groups`), the operations whose all-to-alls
``ep_overlap`` cannot hide (:meth:`~ExpertContextEmitters.unpaired`) and the report's notes on
them (:meth:`~ExpertContextEmitters.expert_context_notes`); methods
:class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` inherits and calls. A segment's
expert and context communication itself is priced by :mod:`perfmodel.parallel.segment_comm`.
"""

from __future__ import annotations

from perfmodel.parallel.lowering import Segment
from perfmodel.parallel.plan import Recompute
from perfmodel.parallel.taskgraph import CommSpec, TaskKind
from perfmodel.workload.layers import distinct_layers


class ExpertContextEmitters:
    """Expert- and context-parallel tasks and notes of a
    :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (see the module docstring)."""

    def unpaired(self, s: int) -> frozenset[tuple[str, int, int]]:
        """Stage ``s``'s operations whose expert all-to-alls ``ep_overlap`` cannot hide
        (:func:`~perfmodel.parallel.expert.unpaired_phases`), found on first use."""
        from perfmodel.parallel.expert import unpaired_phases

        got = self._unpaired.get(s)
        if got is None:
            got = self._unpaired[s] = unpaired_phases(self.ops[s])
        return got

    def expert_context_groups(self, s: int) -> dict[str, tuple[tuple[str, ...], ...]]:
        """Stage ``s``'s expert- and context-parallel groups with their server neighbours
        (:mod:`perfmodel.parallel.expert`); empty without ``ep`` / ``cp``."""
        from perfmodel.parallel.expert import context_groups, expert_groups, with_neighbours

        plan, topo = self.plan, getattr(self.costs, "topology", None)
        out: dict[str, tuple[tuple[str, ...], ...]] = {}
        if plan.ep > 1:
            groups = expert_groups(self.pl, s, plan.ep, plan.expert_tp)
            out["ep"] = with_neighbours(groups, topo)
        if plan.cp > 1:
            out["cp"] = with_neighbours(context_groups(self.pl, s, plan.cp), topo)
        return out

    def expert_context(
        self, s: int, phase: str, mb: int, c: int, seg: Segment, deps: list[int]
    ) -> list[int]:
        """A segment's exposed expert all-to-alls and ring-attention exchange
        (:class:`~perfmodel.parallel.lowering.SegmentComm`), on the compute stream after its
        compute: Megatron-Core runs the token dispatcher's all-to-alls between the router and
        the experts without overlap unless ``overlap_moe_expert_parallel_comm`` is set (off by
        default; ``ep_overlap``: the share beyond the partner micro-batch's compute, in full for
        an operation with no partner, :meth:`unpaired`). Before them, in forward (and in the recomputed forward of full
        recomputation), the GPU's wait for the host after the segment's MoE dispatchers
        synchronise (``Segment.host_sync_s``, a host task the next compute waits for)."""
        stall = seg.host_sync_s if phase == "F" or self.plan.recompute is Recompute.FULL else 0.0
        if not seg.ep_cp and not stall:  # the common case (no ep / cp): nothing to emit
            return deps
        paired = not seg.ep_unpaired or (phase, mb, c) not in self.unpaired(s)
        comms = [x for x in seg.ep_cp_of(phase, paired) if x.duration_s > 0]
        if not comms and not stall:
            return deps
        groups = self.ep_cp_groups.setdefault(s, self.expert_context_groups(s))
        k = c * self.P + s
        tid = self.join(s, deps)
        if stall:  # the GPU waits for the host after the dispatchers' synchronisations
            tid = self.b.add(
                TaskKind.HOST,
                self.gpu[s],
                "host-sync",  # not behind the step's whole-step issue task on "host"
                stall,
                [tid],
                label=f"MoE dispatcher host sync {phase}{mb}",
                microbatch=mb,
                chunk=k,
            )
        for x in comms:
            g = groups[x.kind.value]
            tid = self.b.add(
                TaskKind.COLLECTIVE,
                self.gpu[s],
                "compute",
                x.duration_s,
                [tid],
                label=f"{x.kind.value.upper()} {x.op.value} {phase}{mb}",
                microbatch=mb,
                chunk=k,
                comm=CommSpec(x.op, x.message_bytes, g[0], "auto", x.kind, g[1:]),
            )
        return [tid]

    def expert_context_notes(self) -> None:
        """One line per expert / context parallelism: stage 0's transfers per step and what
        of them is exposed (the rest overlaps the attention kernels); for a MoE model, its total
        and active parameters and that model FLOP/s count the active FLOP."""
        plan, wl = self.plan, self.wl
        routed = None
        if wl.total_active_params:  # set for a mixture of experts only (no scan of a dense one)
            routed = next(
                (
                    la
                    for la in distinct_layers(wl.layers)
                    if la.expert_role is not None and la.experts
                ),
                None,
            )
        if routed is not None:
            self.b.notes.append(
                f"mixture of experts: {wl.total_params / 1e9:.1f} B parameters, "
                f"{wl.total_active_params / 1e9:.1f} B active (top_k {routed.top_k} of "
                f"{routed.experts} experts per token); model FLOP/s and MFU count the active FLOP"
            )
        for kind, what, size in (
            (
                "ep",
                "expert parallel (token dispatch/combine all-to-all"
                + (", overlapped with another micro-batch)" if plan.ep_overlap else ")"),
                plan.ep,
            ),
            (
                "cp",
                "context parallel (K/V all-gather, not overlapped)"
                if plan.cp_comm.value == "allgather"
                else "context parallel (ring attention K/V exchange)",
                plan.cp,
            ),
        ):
            if size < 2:
                continue
            comms = [
                x
                for c in range(self.V)
                for seg in self.chunks[c * self.P].segments
                for x in seg.ep_cp
                if x.kind.value == kind
            ]
            full = self.m_step * sum(x.full_s for x in comms)
            exposed = self.m_step * sum(x.duration_s for x in comms)
            if kind == "ep" and plan.ep_overlap and self.m == self.m_step > 1:
                # the operations with no partner expose their all-to-alls in full
                exposed += sum(
                    x.duration_s
                    for phase, _, c in self.unpaired(0)
                    for seg in self.chunks[c * self.P].segments
                    for x in seg.ep_unpaired
                    if x.phase == phase
                ) - sum(
                    x.duration_s
                    for phase, _, c in self.unpaired(0)
                    for seg in self.chunks[c * self.P].segments
                    for x in seg.ep_cp
                    if x.phase == phase and x.kind.value == "ep"
                )
            # stage 0's as lowered, not the breakdown's critical GPU after the schedule
            # (audit15 item 9): the note names which it is
            self.b.notes.append(
                f"{what} over {size} ranks: {full * 1e3:.2f} ms of transfers per step on stage 0, "
                f"{exposed * 1e3:.2f} ms of them exposed on stage 0 as lowered"
                + (
                    ""
                    if kind == "cp" and plan.cp_comm.value == "allgather"
                    else ", the rest under the attention"
                    if kind == "cp"
                    else ", the rest under the other micro-batch's compute"
                    if plan.ep_overlap
                    else " (not overlapped)"
                )
                + f"; the breakdown's 'exposed comm {kind}' is the critical GPU's, after the "
                "schedule"
            )
