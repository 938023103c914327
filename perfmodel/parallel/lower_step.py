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
from perfmodel.parallel.lower_pipeline import lower_pipeline
from perfmodel.parallel.lowering import LoweredStep, StepInputs
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
    plan = inp.plan
    if plan.hybrid is Hybrid.ONE_WEIRD_TRICK:
        return _lower_pipeline(inp, costs, one_weird_trick=True, coarse=coarse, hidden=hidden)
    mode = plan.dp_mode if plan.dp > 1 else DPMode.ALLREDUCE
    if mode is not DPMode.ALLREDUCE and (plan.tp > 1 or plan.pp > 1):
        raise InfeasiblePlanError(
            f"data-parallel mode {mode.value} is modelled for pure data parallelism; got "
            f"tp={plan.tp}, pp={plan.pp} (use tp=1,pp=1 or mode=allreduce)",
            value=mode.value,
            where="dp_mode",
        )
    if mode is DPMode.ALLREDUCE:
        return _lower_pipeline(inp, costs, coarse=coarse, hidden=hidden)
    return _lower_dp_variant(inp, costs, mode)


def _lower_pipeline(
    inp: StepInputs,
    costs: Costs,
    *,
    one_weird_trick: bool = False,
    coarse: bool = True,
    hidden: bool = True,
) -> LoweredStep:
    """``allreduce``-mode plans: :class:`perfmodel.parallel.lower_pipeline.PipelineLowering`
    (imported here: it builds on this module's chunks and memory)."""

    return lower_pipeline(inp, costs, one_weird_trick=one_weird_trick, coarse=coarse, hidden=hidden)


def _lower_dp_variant(inp: StepInputs, costs: Costs, mode: DPMode) -> LoweredStep:
    """Parameter server, CPU/GPU merge, async, local SGD and Crossbow (tp = pp = 1):
    :mod:`perfmodel.parallel.lower_dp_variants`, one emitter per mode."""

    return lower_dp_variant(inp, costs, mode)


__all__ = ["lower"]
