"""Helpers for tests that compare two ways of computing a step report (periodic extension vs
the whole schedule, coarse vs fine lowering): a small GPT scenario and a field-by-field check."""

from __future__ import annotations

import math

from perfmodel.api import Scenario

#: The software options of a stack that runs ZeRO-2/3 with pipeline parallelism
#: (``SoftwarePreset.pipeline_max_zero`` lifted). DeepSpeed's ``PipelineEngine`` refuses it, so
#: ``deepspeed-zero3`` with ``pp > 1`` is refused unless a scenario states it; the tests of the
#: lowering's per-micro-batch gathers under pipelining (the path ``deepspeed-zero3`` lowers) do.
PIPELINED_ZERO: dict[str, object] = {"pipeline_max_zero": 3}

#: ``deepspeed-zero3`` on a stack stating it runs ZeRO-3 with pipelining (scenario keys).
ZERO3_LIFTED: dict[str, object] = {
    "software": "deepspeed-zero3",
    "software_options": PIPELINED_ZERO,
}

#: The presets whose ZeRO-2/3 DeepSpeed's pipeline engine refuses with ``pp > 1``.
DEEPSPEED_SHARDED = ("deepspeed-zero2", "deepspeed-zero3")


def pipelined_zero(software: str, pp: int) -> dict[str, object]:
    """``{"software_options": PIPELINED_ZERO}`` for a DeepSpeed ZeRO-2/3 preset with ``pp > 1``
    (a stack that runs it), else ``{}``: the keys a test adds to keep lowering such a plan."""
    return {"software_options": PIPELINED_ZERO} if software in DEEPSPEED_SHARDED and pp > 1 else {}


def gpt_scenario(**kw: object) -> Scenario:
    """A GPT on DGX A100, dp2 tp2 pp2, micro-batch 1, 1F1B, bf16 Adam, analytic; ``kw`` adds or
    overrides any field (``model_args``, ``global_batch`` and ``software`` at least)."""
    base: dict[str, object] = dict(
        system="dgx-a100",
        model="gpt",
        dp=2,
        tp=2,
        pp=2,
        microbatch=1,
        schedule="1f1b",
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
    )
    return Scenario.from_dict({**base, **kw})


def drawn_plan(
    *,
    model_args: dict,
    global_batch: int,
    software: str,
    nodes: int,
    tp: int,
    pp: int,
    mb: int,
    interleaved: bool,
    recompute: str,
    **kw: object,
) -> Scenario | None:
    """The plan a hypothesis test drew, on ``nodes`` DGX A100 servers with data parallelism over
    the rest of the GPUs (:func:`gpt_scenario`); ``None`` where the draw is not a plan (more
    model-parallel GPUs than there are, an interleaved schedule without a pipeline, sequence
    parallelism without TP), for the caller to ``assume`` away. A DeepSpeed ZeRO-2/3 draw with
    ``pp > 1`` states a stack that runs it (:func:`pipelined_zero`), so the draws keep
    exercising the per-micro-batch gathers under pipelining."""
    gpus = 8 * nodes
    if tp * pp > gpus or (interleaved and pp == 1) or (kw.get("sequence_parallel") and tp == 1):
        return None
    return gpt_scenario(
        model_args=model_args,
        global_batch=global_batch,
        software=software,
        nodes=nodes,
        dp=gpus // (tp * pp),
        tp=tp,
        pp=pp,
        microbatch=mb,
        schedule="interleaved" if interleaved else "1f1b",
        interleave=2 if interleaved else 1,
        recompute=recompute,
        **pipelined_zero(software, pp),
        **kw,
    )


def plan_draws(
    software: list[str],
    *,
    recompute: tuple[str, ...] = ("none", "full", "selective"),
    mb: tuple[int, ...] = (1, 2, 4),
    global_batch: tuple[int, ...] = (32, 64),
    sequence_parallel: bool = False,
    nodes: tuple[int, ...] = (1, 2),
) -> object:
    """A hypothesis strategy for :func:`drawn_plan`'s keywords (all but ``model_args``): one of
    ``software``, pp 1/2/4, tp 1/2/8, 1F1B or interleaved, ``recompute``, micro-batch ``mb``,
    ``nodes`` servers (1 or 2), ``global_batch``, and sequence parallelism on or off if asked."""
    from hypothesis import strategies as st

    fields = dict(
        software=st.sampled_from(software),
        pp=st.sampled_from([1, 2, 4]),
        tp=st.sampled_from([1, 2, 8]),
        interleaved=st.booleans(),
        recompute=st.sampled_from(recompute),
        mb=st.sampled_from(mb),
        nodes=st.sampled_from(nodes),
        global_batch=st.sampled_from(global_batch),
    )
    if sequence_parallel:
        fields["sequence_parallel"] = st.booleans()
    return st.fixed_dictionaries(fields)


def assert_close(a: object, b: object, rel: float = 1e-9, path: str = "") -> None:
    """Every float of two nested dicts / lists equal to ``rel`` relative (absolute 1e-15),
    everything else exactly; ``path`` names the first difference."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), path
        for k in a:
            assert_close(a[k], b[k], rel, f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, rel, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(a, bool):
        assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-15), (path, a, b)
    else:
        assert a == b, (path, a, b)
