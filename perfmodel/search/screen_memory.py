"""The memory side of the search screen (:class:`perfmodel.search.screen.PlanScreen`): a stage's
memory by ``predict``'s own accounting (:func:`plan_stage_memory`), an interleaved stage's
chunks as ``predict``'s lowering cuts them (:func:`interleaved_chunks`), and ``predict``'s own
memory of a plan (:func:`predict_memory`), with which the screen confirms every estimate that
lies near the GPU's capacity (:data:`CONFIRM_BAND`, :func:`near_capacity`).

Why (issue 5: ``perfmodel compare`` and ``perfmodel predict`` contradicted each other on the same
plan): the screen's memory was an estimate of ``predict``'s, and near capacity the two decided
differently whether a plan fits and which micro-batch a plan without one runs. GPT-3 175B on
512 A100 (Megatron, fp16, Adam), dp4 tp8 pp16 interleaved (v=2) rc=full mb8, global batch 1536:
the screen's 87.15 GiB (out of memory, pruned) against ``predict``'s 77.89 GiB (fits); without
``mb``, the screen's mb6 against ``predict``'s mb8. The screen counted an interleaved stage as
one chunk, where the lowering's chunks after the first kept no input of their first block: one
block input per chunk more, times the in-flight micro-batches (9.25 GiB there).
:func:`interleaved_chunks` gives ``stage_memory`` the lowering's chunks, so both sums are one
function of the same layers. (Session 18: a chunk that begins with a block keeps that block's
input, the tensor it receives from the previous stage, as Megatron does
(:func:`perfmodel.workload.memory.first_block_input_elements`); ``predict`` now says 87.15 GiB
there, does not fit, and runs mb6; the screen still says what it says; 88.82 GiB since mem30b
counts each chunk's activations at its own in-flight count.)
What is still the screen's own layout (``blocks / pp`` blocks plus the embedding or the head,
not the lowering's cost-balanced partition of unequal blocks) is confirmed near capacity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from perfmodel.search.screen_layout import (
    BlockLayout,
    StackParts,
    first_stage_layers,
    last_stage_layers,
)

#: A screen estimate within this fraction of the GPU's capacity (``|bytes / capacity - 1| <=
#: CONFIRM_BAND``) is replaced by ``predict``'s own memory of the plan (:func:`predict_memory`)
#: before the screen decides whether it fits or which micro-batch it runs. A safety net: where
#: the blocks are equal the screen's memory is ``predict``'s function of the same layers
#: (measured session 17, fix24: bit-equal for all 2,164 plans naming their micro-batch of 2,667
#: screened of seven GPT-3 / GPT 1.3B / Llama / Qwen configurations, Megatron, Megatron-Core,
#: NeMo, PyTorch DDP, FSDP, torchtitan; main17 was up to 16% above, its one fit flip 3.4% from
#: the capacity), and unequal blocks with pipelining are always confirmed (:func:`equal_blocks`);
#: the band catches what the screen types otherwise than ``predict`` and was not measured, at
#: 19 confirmations of 1,602 plans for the README's GPT-3 search (5%: 105, 0.3 s more CPU).
CONFIRM_BAND = 0.01


def near_capacity(total_bytes: float, capacity_bytes: float, band: float = CONFIRM_BAND) -> bool:
    """Whether a screen estimate of ``total_bytes`` lies within ``band`` of ``capacity_bytes``
    (``|total / capacity - 1| <= band``), where :func:`predict_memory` confirms it.

    >>> near_capacity(79.5, 80.0), near_capacity(80.5, 80.0), near_capacity(77.89, 80.0)
    (True, True, False)
    """
    return capacity_bytes > 0 and abs(total_bytes / capacity_bytes - 1.0) <= band


def predict_memory(fields: Mapping[str, Any]) -> Any:
    """The memory ``perfmodel predict`` states for the scenario ``fields`` (a scenario dict with
    its micro-batch): its fullest stage's :class:`~perfmodel.parallel.memory.PlanMemory`, from
    the lowering's per-stage memory without its task graph
    (:func:`perfmodel.pipeline.lower.step_memory`, what predict's own micro-batch probes read).
    Every stage has the same capacity, so the fullest fits exactly when every stage does.

    Raises
    ------
    ConfigError, InfeasiblePlanError
        What ``predict`` refuses the scenario with.
    """
    from perfmodel.pipeline.lower import step_memory
    from perfmodel.pipeline.resolve import resolve
    from perfmodel.scenario import Scenario

    drop = {"fidelity"}
    if fields.get("global_batch") is not None:
        drop.add("batch_per_gpu")
    kept = {k: v for k, v in fields.items() if k not in drop and v is not None}
    sc = Scenario.from_dict({**kept, "fidelity": "analytic"}, where="scenario")
    return max(step_memory(sc, resolve(sc)), key=attrgetter("total_bytes"))


def equal_blocks(pt: StackParts) -> bool:
    """Whether every block of ``pt``'s workload costs the same, layer by layer
    (:meth:`~perfmodel.workload.layers.LayerCost.cost_key`; a stack's copies are their block):
    then the lowering cuts a pipeline into equal runs of blocks
    (:func:`perfmodel.parallel.partition.partition`), the screen's own layout. Unequal blocks
    (gpt-oss's alternating sliding-window attention, dense layers before MoE ones) are cut where
    their times balance, which the screen's ``blocks / pp`` layout is not: gpt_oss_20b on 8 H100
    with pipelining, the screen's memory 13% below ``predict``'s to 3% above."""
    blocks = {id(b): b for b in BlockLayout.of(pt.all_layers).by_block.values()}
    kinds = {tuple(la.cost_key() for la in blk) for blk in blocks.values()}
    return len(kinds) <= 1


def _block_layers(pt: StackParts, keep: Sequence[int]) -> Sequence[Any]:
    """The layers of the blocks ``keep`` (consecutive, in order): a slice of the workload's
    layers where the blocks fill consecutive positions (a stack's copies stay unmade), else the
    tuple of them."""
    spans = sorted(pt.spans[b] for b in keep)
    lo, end = spans[0][0], spans[0][0]
    for a, hi, n in spans:
        if a != end or hi - a != n:
            kept = set(keep)
            return tuple(la for la in pt.all_layers if la.block in kept)
        end = hi
    return pt.all_layers[lo:end]


def interleaved_chunks(pt: StackParts, pp: int, v: int, stage: int) -> list[Sequence[Any]] | None:
    """The ``v`` chunks of pipeline stage ``stage`` of an interleaved schedule as the lowering
    cuts equal blocks (:func:`perfmodel.parallel.partition.partition`: ``pp x v`` chunks of
    ``blocks / (pp v)`` blocks, chunk ``c pp + stage`` on stage ``stage``, the embedding with
    the model's first chunk and the head with its last); ``None`` where ``pp x v`` does not
    divide the blocks (the screen's one-chunk stage then stands)."""
    blocks = pt.blocks
    k = pp * v
    if not blocks or len(blocks) % k:
        return None
    per = len(blocks) // k
    out: list[Sequence[Any]] = []
    for c in range(v):
        g = c * pp + stage
        keep = blocks[g * per : (g + 1) * per]
        if g == 0:
            out.append(first_stage_layers(pt, keep))
        elif g == k - 1:
            out.append(last_stage_layers(pt, keep))
        else:
            out.append(_block_layers(pt, keep))
    return out


def plan_stage_memory(
    workload: Any,
    plan: Any,
    rc: Any,
    *,
    stage: int,
    m: int,
    costs: Any,
    optimizer: Any,
    capacity_bytes: float,
    chunks: Sequence[Any] | None = None,
) -> Any:
    """Memory of pipeline stage ``stage`` holding ``workload``'s layers under ``plan`` and the
    training recipe ``rc`` with ``m`` micro-batches per step: ``predict``'s own accounting
    (:func:`perfmodel.parallel.stage_memory.stage_memory`), its segments the FSDP units
    (:func:`perfmodel.parallel.partition.unit_ids`) under ZeRO-3/FSDP, the gradient buckets'
    buffers when gradients are reduced and the last stage's copy of a tied embedding. The
    stage's chunks are ``chunks`` (an interleaved stage's ``v`` chunks, :func:`interleaved_chunks`,
    as ``workload`` with each chunk's layers, each holding the schedule's peak in-flight
    (micro-batch, chunk) sets as the lowering counts them), else the stage as one chunk holding
    ``1/v`` of that peak (each in-flight set the stage's mean chunk). The screen (:meth:`PlanScreen._memory
    <perfmodel.search.screen.PlanScreen._memory>`) and ``perfmodel model maxbatch`` read it;
    ``costs`` is the cost model (``stage_memory`` reads its precision)."""
    from perfmodel.parallel.lowering import Chunk, Segment
    from perfmodel.parallel.partition import unit_ids
    from perfmodel.parallel.plan import PipelineSchedule
    from perfmodel.parallel.schedule import chunk_moments, stage_peak_in_flight
    from perfmodel.parallel.stage_memory import (
        stage_buffer_bytes,
        stage_memory,
        tied_embedding_params,
    )

    def chunk(wl: Any) -> Any:
        layers = wl.layers
        if rc.sharding.stage >= 3:  # the lowering's segments: one per FSDP unit
            sizes = [sum(layers[i].params for i in u) for u in unit_ids(layers)]
        else:
            sizes = [int(wl.params)]
        segs = tuple(Segment(0.0, 0.0, 0.0, 0.0, 0.0, int(n), 0.0, 0.0) for n in sizes)
        return Chunk(segs, 0.0, 0.0, 0, layers)

    pp = plan.pp
    v = plan.interleave if plan.schedule is PipelineSchedule.INTERLEAVED else 1
    peak = stage_peak_in_flight(plan.schedule, pp, m, stage, v) if pp > 1 else 1
    if chunks is None:
        parts = [chunk(workload)]
        in_flight = peak / v if pp > 1 else 1
        layers = workload.layers
    else:
        parts = [chunk(c) for c in chunks]
        in_flight = peak
        layers = [la for c in chunks for la in c.layers] if workload.buffers else ()
    # the schedule's moments where the stage's chunks are the lowering's (one chunk: v = 1)
    exact = pp > 1 and (chunks is not None or v == 1) and (v > 1 or rc.gather_per_step)
    moments = chunk_moments(plan.schedule, pp, m, stage, v, rc.gather_per_step) if exact else None
    tied = tied_embedding_params(parts[-1].layers) if pp > 1 and stage == pp - 1 else 0
    return stage_memory(
        parts,
        plan=plan,
        costs=costs,
        optimizer=optimizer,
        in_flight=in_flight,
        capacity_bytes=capacity_bytes,
        comm_buffer_bytes=float(rc.bucket_bytes or 0.0) if plan.grad_replicas > 1 else 0.0,
        buffer_bytes=stage_buffer_bytes(workload, layers) if workload.buffers else 0.0,
        recipe=rc,
        tied_params=tied,
        moments=moments,
        microbatches=m,
    )


__all__ = [
    "CONFIRM_BAND",
    "equal_blocks",
    "interleaved_chunks",
    "near_capacity",
    "plan_stage_memory",
    "predict_memory",
]
