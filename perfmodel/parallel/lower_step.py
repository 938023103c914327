"""Lower one training step to a :class:`~perfmodel.parallel.taskgraph.TaskGraph`: :func:`lower`
dispatches on the plan's data-parallel mode and hybrid to the emitters
(:mod:`perfmodel.parallel.lower_pipeline` for all-reduce data parallelism, ZeRO/FSDP, tensor,
pipeline, expert and context parallelism and Krizhevsky's hybrid;
:mod:`perfmodel.parallel.lower_dp_variants` for the other data-parallel modes), which build on
the pieces of :mod:`perfmodel.parallel.lowering`.
"""

from __future__ import annotations

from perfmodel.errors import InfeasiblePlanError
from perfmodel.parallel.costs import Costs
from perfmodel.parallel.lower_dp_variants import lower_dp_variant
from perfmodel.parallel.lower_pipeline import PipelineLowering, lower_pipeline
from perfmodel.parallel.lowering import LoweredStep, StepInputs
from perfmodel.parallel.memory import PlanMemory
from perfmodel.parallel.plan import (
    DPMode,
    Hybrid,
)


def lower(
    inp: StepInputs, costs: Costs, *, coarse: bool = True, hidden: bool = True
) -> LoweredStep:
    """Lower one training step; dispatches on the plan's data-parallel mode and hybrid.
    ``coarse=False``: the executors run the fine pipeline graph (one task pair per segment;
    :meth:`perfmodel.parallel.lower_pipeline.PipelineLowering.coarsenable`); ``hidden=False``:
    no analytic graph with summarised collectives (a step the SimPy replay runs:
    :meth:`~perfmodel.parallel.lower_hidden.HiddenCollectives.hidden_backward`)."""
    mode = _mode(inp)
    if mode is None or mode is DPMode.ALLREDUCE:
        return lower_pipeline(
            inp, costs, one_weird_trick=mode is None, coarse=coarse, hidden=hidden
        )
    return lower_dp_variant(inp, costs, mode)


def lower_memory(
    inp: StepInputs, costs: Costs, *, coarse: bool = True, hidden: bool = True
) -> tuple[PlanMemory, ...]:
    """``lower(inp, costs, coarse=coarse, hidden=hidden).memory`` without the task graph where
    the plan lowers through :class:`~perfmodel.parallel.lower_pipeline.PipelineLowering` (the
    per-stage memory of an auto-size probe, :func:`perfmodel.pipeline.autosize.auto_microbatch`;
    issue 27: most of a probe's lowering was its graph, which the probe never reads).

    The same value, bit for bit: :meth:`PipelineLowering.memory
    <perfmodel.parallel.lower_pipeline.PipelineLowering.memory>` reads only what the
    constructor sets (the chunks, plan, recipe, costs, inputs and the tied copy; the schedule's
    peak in flight is a function of the plan) and no state the graph's emitters change, which
    is why :meth:`~perfmodel.parallel.lower_pipeline.PipelineLowering.lower` may already compute
    it before any graph (a periodic step's graph is lowered when first read). Every refusal of
    the plan (:class:`~perfmodel.errors.InfeasiblePlanError`: the mode check here, the
    partition and the interleaved schedule's micro-batch count in the constructor) is raised as
    :func:`lower` raises it. The other data-parallel modes are lowered whole."""
    mode = _mode(inp)
    if mode is None or mode is DPMode.ALLREDUCE:
        return PipelineLowering(
            inp,
            costs,
            one_weird_trick=mode is None,
            coarse=coarse,
            hidden=hidden,
        ).memory()
    return lower_dp_variant(inp, costs, mode).memory


def _mode(inp: StepInputs) -> DPMode | None:
    """The data-parallel mode :func:`lower` dispatches on (``None``: Krizhevsky's hybrid);
    raises for another mode than all-reduce with tensor or pipeline parallelism."""
    plan = inp.plan
    if plan.hybrid is Hybrid.ONE_WEIRD_TRICK:
        return None
    mode = plan.dp_mode if plan.dp > 1 else DPMode.ALLREDUCE
    if mode is not DPMode.ALLREDUCE and (plan.tp > 1 or plan.pp > 1):
        raise InfeasiblePlanError(
            f"data-parallel mode {mode.value} is modelled for pure data parallelism; got "
            f"tp={plan.tp}, pp={plan.pp} (use tp=1,pp=1 or mode=allreduce)",
            value=mode.value,
            where="dp_mode",
        )
    return mode


__all__ = ["lower", "lower_memory"]
