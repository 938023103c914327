"""A closed-form screening model: rank thousands of plans in seconds, before the real predictor.

Why a third fidelity: ``predict(fidelity="analytic")`` lowers every plan to a task graph on the
full topology (for 1024 GPUs about 0.1-2 s per plan after a first call that builds routing tables
for tens of seconds), too slow for the ~1000 plans of a large search. The screen reuses the same
component models, but evaluates one representative rank per pipeline stage in closed form:

- **workload**: each plan's rank workload is the one ``predict`` builds, from the same cache
  (:func:`perfmodel.pipeline.inputs.zoo_workload`): the tensor-, expert- and
  context-parallel shard of one micro-batch, built with the kernels of the plan's training
  recipe (:meth:`perfmodel.parallel.recipe.Recipe.kernels` for its ``m`` micro-batches: the
  stack's fusion mode, eager PyTorch, ``torch.compile`` or Transformer Engine; the FP8
  recipe's cast and amax kernels and the cached weight cast's share of each micro-batch;
  FSDP2's copies; Megatron-Core's MoE permutation copies). The recipe is built as ``predict``
  builds it (:func:`perfmodel.pipeline.resolve.recipe_of`) for the plan ``predict`` derives
  (:func:`perfmodel.pipeline.resolve.plan_for`: the preset's ZeRO stage where the plan
  states none, ZeRO-3 as FSDP under an FSDP preset, the default micro-batch, ``interleave >
  1`` as the interleaved schedule, the recomputation) from the fields typed by ``predict``'s
  parse (:func:`perfmodel.scenario_parse.parse_scenario`): the software preset
  with its ``software_options``, the precision, optimizer, ``compile`` (``--compile``), FP8
  recipe, ``cp_comm`` and MoE dispatcher. Plans of equal kernels share workloads and layer
  times. Megatron-Core's ``recompute_modules`` are not read: the screen's selective
  recomputation is the default rule (``is_selectively_recomputed``).
- **compute**: ``ComputeModel.layer_time`` of every layer of that workload, per micro-batch; a
  stage holds ``blocks / pp`` blocks plus the layers outside blocks of the first or last stage
  (the slower of the two is the pipeline's bottleneck stage). Recomputation adds the forward
  of the recomputed layers to the backward (``ComputeModel.workload_time`` rules).
- **expert / context parallelism** (``ep``, ``cp``): expert all-to-alls timed on the
  lowering's expert-parallel group (Megatron-Core's order, ``etp`` fastest: with ``etp = tp``
  ``ep`` replicas the data stride apart, ``tp`` by default; with ``etp < tp`` tensor-parallel
  ranks first), exposed in full; ring attention's exchange on ``cp`` replicas, exposed
  beyond the attention as the lowering exposes it
  (:func:`perfmodel.parallel.segment_comm.cp_pass_exposed_s`: the cost model's unequal ring
  steps, the base's ``cp_comm``, the stack's implementation, each pass its own formula); both
  in the ``tp_comm_s`` column. The exchange's bytes are the stack's: PyTorch's ring (K/V
  repeated to every query head, FP32 dK/dV permutes in backward) for eager and compiled
  stacks, Transformer Engine's (the K/V heads only) for its stacks (megatron, megatron-core,
  nemo). Gradients are reduced over ``dp x cp`` ranks; the experts' smaller expert
  data-parallel group is left to ``predict`` (its sharded state is in the memory).
- **tensor-parallel collectives**: every ``LayerCost.fwd_comm``/``bwd_comm`` timed by the
  topology's ``CommCostModel`` on a representative group (consecutive GPUs in the default
  order, ``tp`` fastest, crossing servers when ``tp`` > GPUs per server), per phase; full
  recomputation repeats the forward collectives in the backward. Where the plan's recipe
  overlaps them (``Recipe.tp_comm``: Megatron-Core ``tp_comm_overlap``) each phase is split
  by the lowering's own rule
  (:func:`perfmodel.parallel.lower_pipeline.tp_overlapped`: the preset's
  :class:`~perfmodel.parallel.software.TPOverlap`, Transformer Engine userbuffers' SMs, the
  reduce-scattered GEMMs' margin, the exposed tail) and run as the lowering's segment runs
  it, ``max(slowed compute, overlapped) + tail``; otherwise after the compute.
- **pipeline fill and drain** (Narayanan et al. SC21, section 2.2, ``(pp - 1) / v``
  stage-micro-batch times for equal stages): the bottleneck stage waits for one
  micro-batch's forward and backward through every other stage, so the bubble is the other
  ``pp - 1`` stages' micro-batch times (the first, the last and ``pp - 2`` stages of blocks,
  each with its collectives after its compute) over ``v`` interleaved chunks, in units of
  the bottleneck's overlapped micro-batch time: ``pp - 1`` of it for equal stages.
- **rank order**: the plan's ``placement`` (default ``tp,dp,pp``, pipeline stages outermost):
  every group below is the lowering's in it (:class:`~perfmodel.search.screen_ranks.Ranks`,
  :func:`~perfmodel.search.screen_ranks.group_ranks`): the tensor-, expert- and
  context-parallel groups of every stage, the slowest pacing
  (:meth:`~perfmodel.search.screen_groups.ScreenGroups._groups`), and stage 0's
  data-parallel group (a later stage's slower reduction runs in the drain: predict hides it).
- **pipeline point-to-point**: each micro-batch sends its boundary activation forward and its
  gradient back, ``1/tp`` of it per tensor-parallel rank (Megatron's scatter/gather
  optimisation, SC21 section 4.1), the ``min(gpus_per_node, tp x min(dp x cp,
  max(1, gpus_per_node // tp)))`` pairs of one server sending at once (every replica of a
  stage sends, sharing the server's NICs, as the lowering prices them), every distinct stage
  boundary priced (``PlanScreen._p2p_boundaries``) and the slowest pacing the pipeline:
  ``(m + pp - 1) * v`` exposed transfers of each direction at its time (no overlap: an upper
  bound).
- **data-parallel communication** as the plan's recipe runs it
  (:func:`perfmodel.search.screen_overlap.dp_exposed`: ``grad_reduce_op`` of
  ``grad_reduce_bytes``, gathers of ``gather_bytes``, ``sharding``, the ``grad_comm`` /
  ``param_gather`` overlap, ``bucket_bytes``), over ``dp x cp`` ranks the placement's data
  stride apart (``tp`` by default), priced by the topology's ``CommCostModel`` on the group, or
  (every server holding the same local ranks of it) on two servers of it extended as a ring
  extends (``PlanScreen._dp_collective_s``): ZeRO-3/FSDP
  gathers before every micro-batch's forward and backward and reduce-scatters in its
  backward, each phase exposing what it moves beyond its compute (pipelined FSDP2,
  ``Recipe.gather_per_step``: gathers once beside the first forward, reduces once after the
  last backward, in full); ZeRO-2 reduce-scatters
  every micro-batch; ZeRO-0/1 reduce once after the last micro-batch; overlapped reductions
  and ZeRO-1/2's parameter all-gather (beside the next step's first forward; without
  interleaving, ``pp`` stages' in series along the fill) expose at least their last bucket
  (:func:`~perfmodel.search.screen_overlap.beyond`), the rest beyond the compute; not
  overlapped, in full.
- **host** (eager stacks): the host step (the framework loop, the batch split:
  :func:`~perfmodel.parallel.lower_pipeline.host_step_s`) and the issue of ``m`` micro-batches
  of the stage's kernels; the GPU starts after the issue lead
  (:func:`perfmodel.parallel.host_lead.issue_lead`, the first stage's operation order) and the
  optimizer waits for the last issue: ``host step + max(lead + GPU path, issue)`` (predict's
  host tasks), a host-bound step showing the collectives the GPU waits for after the lead.
- **optimizer**: ``ComputeModel.optimizer_time`` of the rank's parameters (sharded by ZeRO).
- **memory**: the larger of the first stage (embedding) and, with pipelining, the last stage
  (head and loss over the vocabulary), each by ``predict``'s own accounting
  (:func:`perfmodel.parallel.stage_memory.stage_memory`: the recipe's model state, the
  routed experts' over the expert data-parallel group, FP8 weight caches, activations as the
  plan's recomputation and the recipe's loss keep them, the largest transient, context
  parallelism's gathered K/V, ZeRO-3/FSDP's two gathered units or FSDP2-under-pipelining's
  whole gathered stage, gradient-bucket buffers when gradients are reduced, the last stage's
  copy of a tied embedding, fragmentation) on the screened stage's layers, its segments the
  FSDP units (:func:`perfmodel.parallel.partition.unit_ids`), for the stage's peak in-flight
  (micro-batch, chunk) sets of the schedule
  (:func:`perfmodel.parallel.schedule.stage_peak_in_flight`, Narayanan et al. SC21); an
  interleaved stage's ``v`` chunks as the lowering cuts them
  (:func:`perfmodel.search.screen_memory.interleaved_chunks`; before session 17 one chunk,
  up to 16% above ``predict``). What stays simplified: the stage's layers are the screen's
  layout (``blocks / pp`` blocks plus the embedding or the head), not the lowering's
  cost-balanced partition of unequal blocks, and Megatron-Core's ``recompute_modules`` are not
  read; so a pipeline of unequal blocks
  (:func:`~perfmodel.search.screen_memory.equal_blocks`) and an estimate near the capacity
  (:data:`~perfmodel.search.screen_memory.CONFIRM_BAND`) take ``predict``'s own memory
  (:func:`~perfmodel.search.screen_memory.predict_memory`), and whether a plan fits, and which
  micro-batch a plan without one runs (:mod:`perfmodel.pipeline.autobatch`), is ``predict``'s
  answer. Session 11
  (screenmem): the screen's own sum left out the gathered FSDP units (FSDP, 8 GPUs: 210 MB +
  fragmentation, 2.45 vs 2.65 GiB) and the tied embedding's last-stage copy (interleaved
  Megatron-Core: 360 MB + fragmentation, 1.93 vs 2.27 GiB), so ``compare`` showed "fits"
  for plans ``predict`` found out of memory.

What it leaves out (the analytic and simulated fidelities have it): contention between
concurrent groups on shared links (the TP siblings of a data-parallel group included),
uneven stage partitioning beyond the first/last stage, per-segment overlap (the TP split and
the buckets' exposure are applied to the stage's sums, the same while each segment's
communication is shorter than its compute), the first bucket's own size, HSDP's two-level
reduction, the experts' data-parallel group, the interleaved schedule's order of chunk
reductions, the host's per-operation issue after the lead with pipelining (the lead of an
interleaved stage is priced on the whole stage), and Megatron-Core's combined 1F1B. It is
used to *order* plans, and the search checks its order against ``predict`` on the top
candidates (Kendall's tau is reported).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.intervals.memory import stage_tight
from perfmodel.parallel.straggler import straggler_wait_s
from perfmodel.pipeline.inputs import frozen_args
from perfmodel.pipeline.resolve import plan_for, recipe_of
from perfmodel.search.plans import PLAN_KEYS
from perfmodel.search.screen_groups import ScreenGroups, slowest_s
from perfmodel.search.screen_layout import (
    SUMS,
    BlockLayout,
    StackParts,
    busy_s,
    first_stage_layers,
    last_stage_layers,
)
from perfmodel.search.screen_memory import (
    equal_blocks,
    interleaved_chunks,
    near_capacity,
    plan_stage_memory,
    predict_memory,
)
from perfmodel.search.screen_overlap import dp_exposed, stage_issue_lead_s, tp_phase_s
from perfmodel.search.screen_ranks import Ranks


@dataclass(frozen=True)
class _StageCosts:
    """Per-micro-batch costs of the bottleneck stage of one (mb, tp, pp, recompute) shape."""

    fwd_s: float
    bwd_s: float
    side_s: float  # expert all-to-alls and ring attention's exposed exchange
    tp_fwd_s: float  # the forward's tensor-parallel collectives
    tp_bwd_s: float  # the backward's (and a fully recomputed forward's)
    rs_fwd_s: float  # forward seconds of the GEMMs a tensor-parallel reduce-scatter follows
    p2p_bytes: float
    stage_params: float
    stage_workload: Any  # the workload with the first stage's layers (memory_breakdown's input)
    model_flop_per_microbatch: float
    host_s: float = 0.0  # eager host issue of one micro-batch of the stage's kernels
    last_workload: Any = None  # the last stage's layers (head and loss), with pipelining
    # the other pp - 1 stages' per-micro-batch times over the bottleneck stage's (pp - 1 for
    # equal stages): the pipeline's fill and drain
    others_over_max: float = 0.0


#: Scenario fields each plan states (the search's :data:`~perfmodel.search.plans.PLAN_KEYS`,
#: the GPUs, batch, recomputed modules and data-parallel mode), and the fidelity, which the
#: screen does not read: left out of the base's parse, which types the fields every plan shares.
_PLAN_FIELDS = frozenset(
    {
        *PLAN_KEYS,
        "gpus",
        "recompute_modules",
        "dp_mode",
        "fidelity",
        "batch_per_gpu",
        "global_batch",
    }
)


def _parsed_base(base: Mapping[str, Any]) -> Any:
    """The fields every plan of ``base`` shares, typed by the parse ``predict`` runs
    (:func:`perfmodel.scenario_parse.parse_scenario`): the software preset with its
    ``software_options``, the precision, optimizer, ``compile``, FP8 recipe, ``cp_comm`` and
    MoE dispatcher. The plan's own fields (:data:`_PLAN_FIELDS`) are each plan's and left out;
    the parse needs a batch, so the base is parsed with one sample per GPU, which none of the
    fields read here depends on. Unset (``None``) fields take the scenario's defaults.

    Raises
    ------
    ConfigError
        A shared field ``predict`` would refuse (naming it, ``where="scenario.<field>"``).
    """
    from perfmodel.scenario import Scenario
    from perfmodel.scenario_parse import parse_scenario

    shared = {k: v for k, v in base.items() if k not in _PLAN_FIELDS and v is not None}
    return parse_scenario(Scenario.from_dict({**shared, "batch_per_gpu": 1}))


def _parsed_plan(base: Mapping[str, Any], scenario: Mapping[str, Any]) -> Any:
    """The base with one plan's fields (``scenario``), typed by the parse ``predict`` runs
    (:func:`perfmodel.scenario_parse.parse_scenario`: ``interleave > 1`` names the interleaved
    schedule, the preset's sequence parallelism, ...), for
    :func:`perfmodel.pipeline.resolve.plan_for`. A global batch, where given, is the plan's
    batch (``batch_per_gpu`` then left out); ``recompute_modules`` and the fidelity are not
    read by the screen (its selective recomputation is the preset's rule) and left out.
    Unset (``None``) fields take the scenario's defaults."""
    from perfmodel.scenario import Scenario
    from perfmodel.scenario_parse import parse_scenario

    drop = {"fidelity", "recompute_modules"}
    merged = {**base, **scenario}
    if merged.get("global_batch") is not None:
        drop.add("batch_per_gpu")
    fields = {k: v for k, v in merged.items() if k not in drop and v is not None}
    return parse_scenario(Scenario.from_dict(fields))


class PlanScreen(ScreenGroups):
    """Closed-form plan evaluator with the evaluator interface (scenario dict -> report dict).

    Parameters
    ----------
    base
        Scenario keys shared by the plans: ``system`` (and fabric overrides), ``model``,
        ``model_args``, ``precision``, ``optimizer``.

    Notes
    -----
    One instance caches workloads, layer times and probe topologies, so evaluating many plans
    of the same model and system is cheap. Not picklable into workers by design: the search
    runs it in the calling process.
    """

    fidelity = "screen"
    #: :meth:`_memory` keeps :meth:`_fuller_stage` per (plan, replica batch, strides); ``False``:
    #: computed at every call (the direct path, which ``tests/search/test_screen_cache.py``
    #: compares with)
    MEMO_MEMORY = True

    def __init__(self, base: Mapping[str, Any]) -> None:
        self.base = dict(base)
        self.model = str(self.base.get("model", ""))
        if not self.model:
            raise ConfigError("the screen needs a 'model'", where="model")
        self.model_args = dict(self.base.get("model_args") or {})
        # the base's fields typed as predict types them: the preset with its options, the
        # precision, optimizer, --compile, FP8 recipe, cp_comm and MoE dispatcher
        self.parsed = _parsed_base(self.base)
        self._topos: dict[int, Any] = {}
        one = self._topology(1)
        self.precision = self.parsed.precision
        self.optimizer = self.parsed.optimizer
        self.preset = self.parsed.preset
        from perfmodel.parallel.plan import ParallelismPlan

        # the training recipe's bytes, autocast casts and kernels, as predict builds it
        self.recipe = recipe_of(self.parsed, ParallelismPlan(), one)
        # the context-parallel exchange as predict lowers it: the base's cp_comm, the stack's
        # implementation (the recipe's fusion: the preset's, or torch.compile's under --compile)
        from perfmodel.parallel.expert import CPImpl

        self.cp_comm = self.parsed.cp_comm
        self.cp_impl = CPImpl.for_fusion(self.recipe.fusion)
        self._args = frozen_args(self.model_args)
        self._costs: dict[int, Any] = {}
        # keys: (batch, tp, sp, ep, cp, kernels, etp); _stage's and _parts' arguments,
        # ``kernels`` the index of a KernelRecipe, ``strides`` the plan's Ranks (the
        # placement's rank strides and etp)
        self._wl_cache: dict[tuple[int, int, bool, int, int, int, int], Any] = {}
        self._stage_cache: dict[tuple[Any, ...], _StageCosts] = {}
        self._parts_cache: dict[tuple[Any, ...], StackParts] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._recipes: dict[Any, Any] = {}  # ParallelismPlan -> its Recipe
        self._kernel_ids: dict[tuple[Any, int], int] = {}  # (plan, micro-batches) -> kernels
        # KernelRecipe by index; 0: the base's recipe at one micro-batch
        self._kernels: list[Any] = [self.recipe.kernels(1)]
        self._dp_times: dict[tuple[Any, float, int, int], float] = {}  # _dp_collective_s
        self._p2p_cache: dict[tuple[Any, ...], list[tuple[list[tuple[str, str]], Any]]] = {}
        self._shape_keys: dict[tuple[Ranks, int, int, int], tuple[Any, ...]] = {}  # _shape_key
        self._tp_over: dict[tuple[str, float, float, float], float] = {}  # _phase_s
        self._leads: dict[tuple[Any, ...], tuple[_StageCosts, float]] = {}  # _issue_lead_s
        self.gpus_per_node = one.gpus_per_node
        self.capacity_bytes = float(one.gpu_spec().memory_bytes)
        self.peak_flops = float(one.gpu_spec().peak(self.precision.matmul_dtype))
        # _memory's: id(StackParts) -> equal_blocks; (id, pp, v, stage) -> interleaved_chunks
        # workloads; a scenario's repr -> predict_memory
        self._layouts: dict[Any, Any] = {}
        # _memory's: (plan, per_replica, strides) -> _fuller_stage
        self._stage_mems: dict[tuple[Any, int, Ranks], tuple[Any, bool]] = {}

    # -------------------------------------------------------------- probes
    def _topology(self, nodes: int) -> Any:
        topo = self._topos.get(nodes)
        if topo is None:
            from perfmodel.api import Scenario, topology_of
            from perfmodel.scenario import HARDWARE_FIELDS

            # every hardware field predict() reads, the NCCL release and environment included
            keys = tuple(f for f in HARDWARE_FIELDS if f != "nodes")
            sc = Scenario.from_dict(
                {k: self.base[k] for k in keys if k in self.base} | {"nodes": nodes}
            )
            topo = topology_of(sc)
            self._topos[nodes] = topo
        return topo

    def _system_costs(self, nodes: int) -> Any:
        c = self._costs.get(nodes)
        if c is None:
            # The same cost models predict() uses: the software preset's host-dispatch cost
            # (PyTorch eager) and memory format, and the calibration profile, if the base
            # scenario names one.
            from perfmodel.api import system_costs
            from perfmodel.compute.params import parse_memory_format

            preset = self.preset
            calibration = self.base.get("calibration")
            fmt = self.base.get("memory_format")
            layout = parse_memory_format(fmt) if fmt else preset.memory_format
            c = system_costs(
                self._topology(nodes), self.precision, calibration, preset, layout, self.recipe
            )
            self._costs[nodes] = c
        return c

    def _dp_s(
        self,
        rc: Any,
        st: _StageCosts,
        n: int,
        stride: int,
        pp: int,
        m: int,
        phases: tuple[float, float],
        schedule: str,
    ) -> float:
        """Data-parallel seconds exposed per step of the stage ``st`` over ``n = dp x cp``
        ranks ``stride`` apart (the placement's data-parallel stride: ``tp`` in the default
        order, pipeline stages outermost) beside micro-batches of ``phases`` (forward,
        backward) seconds
        (:func:`perfmodel.search.screen_overlap.dp_exposed`, :meth:`_dp_collective_s`).
        Context-parallel ranks reduce the dense gradients with the replicas; the experts'
        smaller expert data-parallel group is not told apart here. Without interleaving every
        stage gathers its parameters as its first forward starts, so the pipeline's fill
        waits for ``pp`` such gathers in series (pipelined FSDP2's with interleaving too)."""
        if n < 2 or st.stage_params <= 0:
            return 0.0
        from perfmodel.parallel.plan import PipelineSchedule

        # pipelined FSDP2 gathers as each chunk starts, interleaved or not (no aligned launch)
        aligned = schedule == PipelineSchedule.INTERLEAVED.value and not rc.gather_per_step
        fill = pp if pp > 1 and not aligned else 1

        def coll(op: Any, nbytes: float) -> float:
            return self._dp_collective_s(op, nbytes, n, stride)

        return sum(dp_exposed(rc, st.stage_params, m, phases[0], phases[1], coll, fill))

    # -------------------------------------------------------------- workload
    def _workload(
        self, batch: int, tp: int, sp: bool, ep: int = 1, cp: int = 1, kern: int = 0, etp: int = 0
    ) -> Any:
        """The workload of one rank as ``predict`` builds it
        (:func:`perfmodel.pipeline.inputs.zoo_workload`, the same cache): ``batch`` samples,
        the tensor-, expert- and context-parallel shard (the plan's expert tensor parallelism
        ``etp`` as stated, 0 = ``tp``; before fix25 the base's, always 0: a plan's ``etp`` is
        not a shared field), the kernels ``self._kernels[kern]`` (index 0: the base's recipe
        at one micro-batch)."""
        key = (batch, tp, sp, ep, cp, kern, etp)
        hit = self._wl_cache.get(key)
        if hit is not None:
            return hit
        from perfmodel.pipeline.inputs import zoo_workload

        try:
            hit = zoo_workload(
                self.model,
                batch,
                self.precision,
                tp,
                sp,
                self._args,
                (ep, cp, etp),
                self._kernels[kern],
            )
        except TypeError as exc:  # unhashable model argument value, as predict says it
            raise ConfigError(
                f"model_args: {exc}", value=self.model_args, where="model_args"
            ) from exc
        self._wl_cache[key] = hit
        return hit

    def _parts(
        self, mb: int, tp: int, recompute: str, sp: bool, ep: int = 1, cp: int = 1, kern: int = 0,
        *, strides: Ranks,
    ) -> StackParts:  # fmt: skip
        """Per-micro-batch sums of the blocks, the layers before and after them (no ``pp``).

        A stack (:class:`~perfmodel.workload.layers.StackedLayers`) is read as the layers
        outside its copies and its block with the copies' indices
        (:func:`~perfmodel.workload.layers.split_at_copies`): no copy is made, and every sum
        adds the same numbers in the same order as a layer-by-layer loop (a copy prices as
        its block: equal cost fields), so the reports are bit-equal to reading the layers one
        by one (``tests/search/test_screen_stack.py``). ``strides``: the plan's
        :class:`~perfmodel.search.screen_ranks.Ranks` (:meth:`_times`)."""
        key = (mb, tp, recompute, sp, ep, cp, kern, self._shape_key(strides, tp, ep, cp))
        hit = self._parts_cache.get(key)
        if hit is not None:
            return hit
        wl = self._workload(mb, tp, sp, ep, cp, kern, strides.etp)
        times = self._times(tp, recompute, ep, cp, strides)
        # The blocks, read without making a stack's copies (whole_copies): the layers before
        # the copies and after them one by one, the copies as their block and its indices.
        # Every sum below adds the same numbers in the same order as a layer-by-layer loop.
        layers = wl.layers
        lay = BlockLayout.of(layers)
        head, template, copy_ids, tail = lay.head, lay.template, lay.copy_ids, lay.tail
        start, stop, by_block, spans = lay.start, lay.stop, lay.by_block, lay.spans
        # identical blocks (equal LayerCost.cost_key of every layer) are costed once
        per_kind: dict[tuple[Any, ...], tuple[float, ...]] = {}
        per_obj: dict[int, tuple[float, ...]] = {}  # the copies: one key
        block_sum = [0.0] * len(SUMS)
        for blk in by_block.values():
            t = per_obj.get(id(blk))
            if t is None:
                kind = tuple(la.cost_key() for la in blk)
                t = per_kind.get(kind)
                if t is None:
                    t = per_kind[kind] = times(blk)
                per_obj[id(blk)] = t
            for i in range(len(SUMS)):
                block_sum[i] += t[i]
        first_block = min((s[0] for s in spans.values()), default=0)
        last_block = max((s[1] for s in spans.values()), default=0) - 1
        pre = tuple(layers[:first_block])  # before the copies: no copy made
        post = tuple(layers[last_block + 1 :])  # after them

        def each(value: Any, blocks_only: bool) -> Any:
            """``value`` of every layer in order (of the block layers only), the copies'
            from their block: the numbers a layer-by-layer loop reads, no copy made."""
            ends = [
                [la for la in seq if la.block is not None] if blocks_only else seq
                for seq in (head, tail)
            ]
            block = [value(la) for la in template]
            copies = chain.from_iterable(repeat(block, len(copy_ids)))
            return chain(map(value, ends[0]), copies, map(value, ends[1]))

        if start <= last_block < stop:
            boundary = template[(last_block - start) % len(template)].output_shape
        else:
            boundary = layers[last_block].output_shape  # layers[-1] when there are no blocks
        hit = self._parts_cache[key] = StackParts(
            blocks=tuple(sorted(by_block)),
            block=tuple(block_sum),
            pre=times(pre),
            post=times(post),
            pre_layers=pre,
            spans={b: (s[0], s[1], s[2]) for b, s in spans.items()},
            p2p_bytes=float(math.prod(boundary)) * self.precision.activation_bytes,
            block_params=float(sum(each(attrgetter("params"), True))),
            pre_params=float(sum(la.params for la in pre)),
            post_params=float(sum(la.params for la in post)),
            params=float(wl.params),
            all_layers=layers,
            flop=sum(each(attrgetter("total_flop"), False)) * tp,  # whole model, all TP ranks
        )
        return hit

    def _times(
        self, tp: int, recompute: str, ep: int, cp: int, strides: Ranks
    ) -> Callable[[Sequence[Any]], tuple[float, ...]]:
        """``times(layers) ->`` the :data:`~perfmodel.search.screen_layout.SUMS` seconds of one
        micro-batch of ``layers``: recomputation charged per ``recompute``, the tensor-parallel
        collectives of a ``tp`` group per phase, expert all-to-alls in full and ring attention
        beyond the attention it hides under, each on the slowest of the stages' first groups
        of its kind (:meth:`~perfmodel.search.screen_groups.ScreenGroups._groups`) as the
        lowering builds them in the plan's placement (``strides``, its
        :class:`~perfmodel.search.screen_ranks.Ranks`;
        :func:`~perfmodel.search.screen_ranks.group_ranks`: the expert group in Megatron-Core's
        ``etp``-fastest order, so with ``etp < tp`` its members are tensor-parallel ranks before
        they are replicas; before fix25 always replicas the data stride apart, 2.1-8.2x the
        all-to-all of predict's group for ``etp = 1`` on dgx-h100 x4)."""
        costs = self._system_costs(1)
        from perfmodel.parallel.lowering import _tp_reduce_scattered
        from perfmodel.parallel.segment_comm import cp_pass_exposed_s
        from perfmodel.workload.memory import is_selectively_recomputed

        tp_groups = self._groups(strides, "tp", tp, tp) if tp > 1 else []
        other = {g: self._groups(strides, g, n, tp) for g, n in (("ep", ep), ("cp", cp)) if n > 1}

        def side_comm(la: Any, lf: float, lb: float) -> float:
            """Expert all-to-alls in full, ring attention beyond the attention it hides under
            (the lowering's exposure: :func:`~perfmodel.parallel.segment_comm.
            cp_pass_exposed_s`, the cost model's ring steps, each pass its own formula)."""
            t = 0.0
            ratio = costs.ring_step_ratio(la) if "cp" in other else (1.0, 1.0)
            for k, (points, busy) in enumerate(((la.fwd_comm, lf), (la.bwd_comm, lb))):
                ring: list[tuple[Any, float]] = []
                for c in points:
                    if c.group in other:
                        d = slowest_s(other[c.group], c.op, c.message_bytes)
                        if c.group == "cp":
                            ring.append((c.op, d))
                        else:
                            t += d
                if ring:
                    t += cp_pass_exposed_s(
                        ring, busy, cp, ratio[k], self.cp_comm, self.cp_impl, backward=k == 1
                    )
            return t

        def times(layers: Sequence[Any]) -> tuple[float, ...]:
            """:data:`~perfmodel.search.screen_layout.SUMS` seconds of ``layers``: forward,
            backward (recomputation in it), expert/context side communication, host issue, the
            forward's and the backward's tensor-parallel collectives (the recomputed forward's
            in the backward's, as :func:`~perfmodel.parallel.lowering.build_chunk` books them)
            and the forward of the GEMMs a tensor-parallel reduce-scatter follows
            (``Segment.tp_rs_fwd_s``)."""
            f = b = c = h = tf = tb = rs = 0.0
            for la in layers:
                lf, lbi, lbw = costs.layer_time(la)
                if other:
                    c += side_comm(la, lf, lbi + lbw)
                hf, hb = costs.layer_host_time(la)
                f += lf
                b += lbi + lbw
                h += hf + hb
                full = recompute == "full" and la.block is not None
                if full or (recompute == "selective" and is_selectively_recomputed(la)):
                    b += lf
                    h += hf
                if tp > 1:
                    if _tp_reduce_scattered(la):
                        rs += lf
                    for pt in la.fwd_comm:
                        if pt.group == "tp":
                            d = slowest_s(tp_groups, pt.op, pt.message_bytes)
                            tf += d
                            if full:  # the recomputed forward re-runs its TP collectives
                                tb += d
                    for pt in la.bwd_comm:
                        if pt.group == "tp":
                            tb += slowest_s(tp_groups, pt.op, pt.message_bytes)
            return f, b, c, h, tf, tb, rs

        return times

    def _stage(
        self,
        mb: int,
        tp: int,
        pp: int,
        recompute: str,
        sp: bool,
        ep: int = 1,
        cp: int = 1,
        kern: int = 0,
        *,
        strides: Ranks,
    ) -> _StageCosts:
        """The bottleneck stage's costs of one shape (``strides``: :meth:`_times`), cached."""
        key = (mb, tp, pp, recompute, sp, ep, cp, kern, self._shape_key(strides, tp, ep, cp))
        hit = self._stage_cache.get(key)
        if hit is not None:
            return hit
        pt = self._parts(mb, tp, recompute, sp, ep, cp, kern, strides=strides)
        blocks = pt.blocks
        if pp > max(len(blocks), 1):
            raise InfeasiblePlanError(
                f"pp={pp} exceeds the model's {len(blocks)} blocks", value=pp, where="pp"
            )
        host = SUMS.index("host")
        bh, ph, qh = pt.block[host], pt.pre[host], pt.post[host]
        n_blocks = max(len(blocks), 1)
        per_stage_blocks = n_blocks / pp
        stage_host = bh * (per_stage_blocks / n_blocks) + max(ph, qh)
        others = 0.0
        if pp == 1:
            stage_host = bh + ph + qh
            sums = tuple(x + y + z for x, y, z in zip(pt.block, pt.pre, pt.post, strict=True))
            first_layers = pt.all_layers
        else:
            share = per_stage_blocks / n_blocks
            # the slower of the first stage (embedding) and the last stage (head, loss), by
            # compute and communication (host issue is the step floor's, below)
            first = tuple(x * share + y for x, y in zip(pt.block, pt.pre, strict=True))
            last = tuple(x * share + y for x, y in zip(pt.block, pt.post, strict=True))
            sums = max(first, last, key=busy_s)
            # the stages between them hold blocks only
            total = busy_s(first) + busy_s(last) + (pp - 2) * share * busy_s(pt.block)
            top = busy_s(sums)
            others = (total - top) / top if top > 0 else float(pp - 1)
            first_layers = first_stage_layers(pt, blocks[: max(1, round(per_stage_blocks))])
        stage_params = pt.block_params / pp + max(pt.pre_params, pt.post_params)
        if pp == 1:
            stage_params = pt.params
        # one object per stage shape: memory_breakdown memoises its sums on the workload object
        wl = self._workload(mb, tp, sp, ep, cp, kern, strides.etp)
        stage_wl = replace(wl, layers=first_layers)
        last_wl = None
        if pp > 1:  # the head and the loss over the vocabulary live on the last stage
            last_wl = replace(
                wl, layers=last_stage_layers(pt, blocks[-max(1, round(per_stage_blocks)) :])
            )
        f, b, side, _, tf, tb, rs = sums
        hit = self._stage_cache[key] = _StageCosts(
            f, b, side, tf, tb, rs, pt.p2p_bytes, float(stage_params), stage_wl, pt.flop,
            stage_host, last_wl, others,
        )  # fmt: skip
        return hit

    def _plan_recipe(self, plan: Any) -> Any:
        """The training recipe ``predict`` builds for ``plan``
        (:func:`perfmodel.pipeline.resolve.recipe_of`: the base's ``--compile``, FP8 recipe and
        MoE dispatcher; its refusals, such as activation offloading with recomputation),
        cached per plan (every field of it is the recipe's input)."""
        hit = self._recipes.get(plan)
        if hit is None:
            hit = self._recipes[plan] = recipe_of(self.parsed, plan, self._topology(1))
        return hit

    def _kernel_id(self, plan: Any, m: int) -> int:
        """Index in ``self._kernels`` of the kernels ``predict`` builds ``plan``'s workload with
        (:meth:`~perfmodel.parallel.recipe.Recipe.kernels` of the plan's recipe for ``m``
        micro-batches per replica); equal kernels share an index, so plans of different shapes
        share workloads and layer times."""
        key = (plan, m)
        hit = self._kernel_ids.get(key)
        if hit is None:
            kernels = self._plan_recipe(plan).kernels(m)
            try:
                hit = self._kernels.index(kernels)
            except ValueError:
                hit = len(self._kernels)
                self._kernels.append(kernels)
            self._kernel_ids[key] = hit
        return hit

    def _phase_s(self, overlap: bool, phase: str, dur: float, tp_s: float, rs_s: float) -> float:
        """:func:`perfmodel.search.screen_overlap.tp_phase_s` on the screen's preset and cost
        model, cached per argument."""
        if tp_s <= 0:
            return dur
        key = (overlap, phase, dur, tp_s, rs_s)
        hit = self._tp_over.get(key)
        if hit is None:
            costs = self._system_costs(1)
            hit = tp_phase_s(self.preset, costs, overlap, phase, dur, tp_s, rs_s)
            self._tp_over[key] = hit
        return hit

    def _issue_lead_s(
        self, st: _StageCosts, rc: Any, schedule: str, pp: int, m: int, v: int, recompute: str
    ) -> float:
        """Seconds the eager host issues before the first stage's GPU can run its step without
        waiting (:func:`perfmodel.search.screen_overlap.stage_issue_lead_s`), at most its issue
        time; cached per stage shape, schedule and the recipe's selective-recomputation
        policy (what it reads).

        Without pipelining the order is ``m`` identical forward-backward pairs, whose lead is
        the first pair's plus ``m - 1`` times what each pair's issue outruns its GPU time
        (``issue_lead``'s running maximum over a periodic sequence), so it is asked for one
        and two micro-batches and extended to ``m``: exact, and one call per stage shape."""
        if pp == 1 and m > 2:
            one = self._issue_lead_s(st, rc, schedule, pp, 1, v, recompute)
            two = self._issue_lead_s(st, rc, schedule, pp, 2, v, recompute)
            return min(one + (m - 1) * (two - one), m * st.host_s)
        key = (id(st), rc.selective_recompute, schedule, pp, m, v, recompute)
        hit = self._leads.get(key)
        if hit is not None:
            return hit[1]
        lead = stage_issue_lead_s(
            self._system_costs(1), st.stage_workload, rc, schedule, pp, m, v, recompute
        )
        lead = min(lead, m * st.host_s)
        self._leads[key] = (st, lead)  # st kept: its id stays its own
        return lead

    def _memory(
        self, plan: Any, per_replica: int, strides: Ranks, fields: Mapping[str, Any]
    ) -> Any:
        """The memory :meth:`_evaluate` states for ``plan`` (``per_replica`` samples a replica,
        ``fields`` its scenario dict): the fuller of its first and last stage
        (:func:`~perfmodel.search.screen_memory.plan_stage_memory` with this screen's cost
        model, optimizer and capacity; an interleaved stage's chunks as the lowering cuts them,
        :func:`~perfmodel.search.screen_memory.interleaved_chunks`): ``predict``'s function of
        the same layers where the lowering cuts the pipeline as the screen lays it out (equal
        blocks, :func:`~perfmodel.search.screen_memory.equal_blocks`, or no pipelining). Where
        it does not, or where the estimate lies near the capacity
        (:func:`~perfmodel.search.screen_memory.near_capacity`), ``predict``'s own memory
        (:func:`~perfmodel.search.screen_memory.predict_memory` of ``fields`` with the plan's
        micro-batch), so that whether it fits is ``predict``'s answer.

        Raises
        ------
        InfeasiblePlanError
            A micro-batch that does not divide the replica's batch, or an interleaved
            schedule's micro-batch count that ``pp`` does not divide (predict's refusals), or
            what ``predict`` refuses a plan near capacity with.
        """
        key = (plan, per_replica, strides)
        hit = self._stage_mems.get(key) if self.MEMO_MEMORY else None
        if hit is None:
            hit = self._fuller_stage(plan, per_replica, strides)
            if self.MEMO_MEMORY:
                self._stage_mems[key] = hit
        mem, equal = hit
        if (plan.pp > 1 and not equal) or near_capacity(mem.total_bytes, self.capacity_bytes):
            from perfmodel.parallel.plan import DPMode

            crossbow = plan.dp_mode is DPMode.CROSSBOW
            mb = {} if crossbow else {"microbatch": plan.microbatch_size}
            merged = {k: v for k, v in {**self.base, **fields, **mb}.items() if v is not None}
            key2 = repr(sorted(merged.items()))  # an auto-size probe and its explicit plan: once
            if key2 not in self._layouts:
                self._layouts[key2] = predict_memory(merged)
            mem = self._layouts[key2]
        return mem

    def _fuller_stage(self, plan: Any, per_replica: int, strides: Ranks) -> tuple[Any, bool]:
        """:meth:`_memory`'s own estimate of ``plan`` (the fuller of its first and last stage)
        and whether the pipeline's blocks are equal
        (:func:`~perfmodel.search.screen_memory.equal_blocks`): a function of ``plan``,
        ``per_replica`` and ``strides`` alone (and of this screen's caches, each keyed by
        what it reads), so :meth:`_memory` keeps it per ``(plan, per_replica, strides)``
        (``MEMO_MEMORY``): an auto-sized plan's micro-batch probes
        (:meth:`_auto_microbatch`) are the explicit plans of the same micro-batch, 874 of
        the 2,452 calls of issue 27's ``compare`` (GPT-3 175B on 1024 A100) repeats. The
        scenario's other fields are read only where ``predict``'s own memory is asked
        (:meth:`_memory`, after this), so the memo answers with the same object the direct
        path computes: ``tests/search/test_screen_cache.py`` compares every report with
        the switch off.

        Raises
        ------
        InfeasiblePlanError
            An interleaved schedule's micro-batch count that ``pp`` does not divide.
        """
        from perfmodel.parallel.plan import DPMode, PipelineSchedule
        from perfmodel.parallel.schedule import check_interleaved

        m = plan.num_microbatches(per_replica)
        interleaved = plan.schedule is PipelineSchedule.INTERLEAVED and plan.pp > 1
        if interleaved:
            check_interleaved(plan.pp, m)
        crossbow = plan.dp_mode is DPMode.CROSSBOW
        k = plan.learners_per_gpu if crossbow else 1
        shape = (
            plan.microbatch_size * k,
            plan.tp,
            plan.recompute.value,
            plan.sequence_parallel,
            plan.ep,
            plan.cp,
            self._kernel_id(plan, m),
        )
        st = self._stage(*shape[:2], plan.pp, *shape[2:], strides=strides)
        rc = self._plan_recipe(plan)
        pt = self._parts(*shape, strides=strides)

        def stage_mem(workload: Any, stage: int) -> Any:
            chunks = None
            if interleaved:  # cached per stage shape (pt lives in _parts_cache: its id is its)
                key = (id(pt), plan.pp, plan.interleave, stage)
                chunks = self._layouts.get(key)
                if chunks is None:
                    cut = interleaved_chunks(pt, *key[1:])
                    chunks = [replace(workload, layers=c) for c in cut] if cut else ()
                    self._layouts[key] = chunks
            return plan_stage_memory(
                workload,
                plan,
                rc,
                stage=stage,
                m=m,
                costs=self._system_costs(1),
                optimizer=self.optimizer,
                capacity_bytes=self.capacity_bytes,
                chunks=chunks or None,
            )

        mem = max(
            (
                stage_mem(wl, stage)
                for wl, stage in ((st.stage_workload, 0), (st.last_workload, plan.pp - 1))
                if wl is not None
            ),
            key=attrgetter("total_bytes"),
        )
        equal = self._layouts.get(id(pt))
        if equal is None:
            equal = self._layouts[id(pt)] = equal_blocks(pt)
        # an interleaved stage the screen could not cut as the lowering does (its estimate has
        # no per-chunk counts): predict confirms it, as it does unequal blocks
        cut = not interleaved or all(
            self._layouts.get((id(pt), plan.pp, plan.interleave, s)) for s in (0, plan.pp - 1)
        )
        return mem, bool(equal) and cut

    def _auto_microbatch(
        self, plan: Any, per_replica: int, strides: Ranks, fields: Mapping[str, Any]
    ) -> tuple[Any, str | None]:
        """``plan`` with the micro-batch ``predict`` runs a plan without one, and the reason
        predict states for it (``None`` where the derived one stays): the rule of
        :func:`perfmodel.pipeline.autosize.auto_microbatch` (the whole replica batch where it
        fits without pipelining or the stack does not accumulate gradients, Crossbow's
        learners keep theirs; else the largest that fits,
        :func:`perfmodel.pipeline.autobatch.choose_microbatch`, the one function both call),
        on the screen's memory (:meth:`_memory`: ``predict``'s own near capacity, so the choice
        is ``predict``'s). Before, the screen ran such a plan at :func:`plan_for`'s default
        (micro-batch 1 with pipelining) where predict ran the largest that fits."""
        from perfmodel.parallel.plan import DPMode
        from perfmodel.pipeline.autobatch import choose_microbatch

        if plan.dp_mode is DPMode.CROSSBOW or not self.preset.gradient_accumulation:
            return plan, None

        def fits(mb: int) -> bool:
            try:
                mem = self._memory(replace(plan, microbatch_size=mb), per_replica, strides, fields)
            except InfeasiblePlanError:
                return False
            return bool(mem.fits)

        if plan.pp == 1 and fits(plan.microbatch_size):  # the whole batch, as one micro-batch
            return plan, None
        choice = choose_microbatch(per_replica, plan.pp, fits)
        if choice is None:
            return plan, None
        return replace(plan, microbatch_size=choice.microbatch), choice.note()

    # -------------------------------------------------------------- evaluate
    def __call__(self, scenario: Mapping[str, Any]) -> dict[str, Any]:
        """Estimate one plan; returns the report keys the search reads (a repeated plan is
        answered from a per-instance cache, as a fresh copy)."""
        key = repr(sorted(scenario.items()))
        hit = self._results.get(key)
        if hit is None:
            hit = self._results[key] = self._evaluate(scenario)
        return {**hit, "breakdown": dict(hit["breakdown"])}

    def _evaluate(self, scenario: Mapping[str, Any]) -> dict[str, Any]:
        from perfmodel.parallel.plan import DPMode

        # the plan predict runs (one derivation: the preset's ZeRO, FSDP, the micro-batch,
        # the interleaved schedule, recomputation), with predict's checks of the batch split
        gpus = int({**self.base, **scenario}["gpus"])
        parsed = _parsed_plan(self.base, scenario)
        plan, per_replica = plan_for(parsed, gpus)
        # the rank strides of the plan's placement, as predict places it (placement.place),
        # and its etp: the groups below are the ones predict's lowering prices
        strides = Ranks.of(tuple(parsed.placement), plan.dp * plan.cp, plan.pp, plan.tp, plan.etp)
        chosen = None  # without a micro-batch: predict's choice (the search always names one)
        if parsed.microbatch is None:
            plan, chosen = self._auto_microbatch(plan, per_replica, strides, scenario)
        dp, tp, pp, ep, cp = plan.dp, plan.tp, plan.pp, plan.ep, plan.cp
        # learners share a GPU under Crossbow only (predict runs any other mode as one learner)
        k = plan.learners_per_gpu if plan.dp_mode is DPMode.CROSSBOW else 1
        mb, v = plan.microbatch_size, plan.interleave
        samples = per_replica * dp * k  # the global batch
        m = plan.num_microbatches(per_replica)
        schedule, recompute = plan.schedule.value, plan.recompute.value
        sp = plan.sequence_parallel
        rc = self._plan_recipe(plan)
        # the kernels predict builds this plan's workload with (fusion, FP8 casts, FSDP2's
        # copies, the FP8 weight cast's share of each of the m micro-batches)
        kern = self._kernel_id(plan, m)
        st = self._stage(mb * k, tp, pp, recompute, sp, ep, cp, kern, strides=strides)
        # each phase's tensor-parallel collectives after its compute, or beside it as the
        # recipe overlaps them (Megatron-Core tp_comm_overlap: the lowering's split)
        overlap = rc.tp_comm.overlap
        seg_f = self._phase_s(overlap, "F", st.fwd_s, st.tp_fwd_s, st.rs_fwd_s)
        seg_b = self._phase_s(overlap, "B", st.bwd_s, st.tp_bwd_s, 0.0)
        comm_mb = (seg_f - st.fwd_s) + (seg_b - st.bwd_s) + st.side_s  # exposed per micro-batch
        t_mb = st.fwd_s + st.bwd_s + comm_mb
        compute = m * (st.fwd_s + st.bwd_s)
        # the bottleneck stage waits for the others' forward (fill) and backward (drain) of
        # one micro-batch: for unequal stages the sum of theirs, not (pp - 1) of its own
        bubble = st.others_over_max / v * t_mb if pp > 1 else 0.0
        p2p = 0.0
        if pp > 1:
            # Megatron's scatter/gather optimisation (SC21 section 4.1): each TP rank sends 1/tp
            # the slowest stage boundary paces the pipeline: every send priced at its time
            nbytes = st.p2p_bytes / tp
            sends = self._p2p_boundaries(tp, dp * cp, pp, v > 1, strides)
            slowest = max(costs.transfers_time(pairs, nbytes) for pairs, costs in sends)
            p2p = (m + pp - 1) * v * 2 * slowest
        dp_s = self._dp_s(rc, st, dp * cp, strides.dp, pp, m, (seg_f, seg_b), schedule)
        opt_params = st.stage_params / (dp * cp if rc.sharding.stage >= 1 else 1)
        optimizer = self._system_costs(1).optimizer_time(opt_params, self.optimizer)
        t = compute + m * comm_mb + bubble + p2p + dp_s
        # eager stacks: the host issues the step's kernels ahead of the GPU, which starts after
        # the issue lead; the optimizer waits for the last issue (predict's host tasks)
        host = m * st.host_s
        gpu_s = t
        if host > 0:
            from perfmodel.parallel.lower_pipeline import host_step_s

            lead = self._issue_lead_s(st, rc, schedule, pp, m, v, recompute)
            t = host_step_s(self.preset, dp, per_replica) + max(lead + t, host)
        host_exposed = t - gpu_s
        t += optimizer
        # the slowest GPU paces the synchronous step, as predict charges it
        wait = straggler_wait_s(compute, gpus)
        t += wait
        mem = self._memory(plan, per_replica, strides, scenario)
        model_flops = st.model_flop_per_microbatch * m * dp * cp * k / t / gpus
        auto = {} if chosen is None else {"microbatch": mb, "microbatch_default": chosen}
        return {
            **auto,
            "iteration_time_s": t,
            "throughput_samples_per_s": samples / t,
            "samples_per_step": samples,
            "compute_time_s": compute,
            "exposed_comm_time_s": m * comm_mb + p2p + dp_s,
            "bubble_time_s": bubble,
            "optimizer_time_s": optimizer,
            "memory_per_gpu_bytes": float(mem.total_bytes),
            "fits_in_memory": bool(mem.fits),
            "memory_tight": stage_tight([mem]),  # predict's rule, on its fullest stage
            "model_flops_per_gpu_per_s": model_flops,
            "mfu": model_flops / self.peak_flops if self.peak_flops > 0 else None,
            "fidelity": "screen",
            "breakdown": {
                "compute_s": compute,
                "tp_comm_s": m * comm_mb,
                "pp_p2p_s": p2p,
                "dp_comm_exposed_s": dp_s,
                "bubble_s": bubble,
                "optimizer_s": optimizer,
                "host_s": host_exposed,
                "sync_wait_s": wait,
            },
        }


__all__ = ["PlanScreen"]
