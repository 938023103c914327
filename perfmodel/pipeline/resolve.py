"""Resolve: a scenario's typed fields (:func:`~perfmodel.scenario_parse.parse_scenario`) and
its topology become a plan, a batch split and a training recipe (:class:`Resolved`); no timing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from perfmodel._ints import divisors
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError, InfeasiblePlanError, PerfModelError
from perfmodel.hardware import GPUSpec
from perfmodel.host.input_pipeline import check_single_node
from perfmodel.parallel.plan import DPMode, Hybrid, ParallelismPlan
from perfmodel.parallel.recipe import Recipe, build_recipe
from perfmodel.pipeline.inputs import frozen_args, topology_of, zoo_workload
from perfmodel.scenario import Scenario
from perfmodel.scenario_parse import MAX_BATCH_PER_REPLICA, Fidelity, ParsedScenario, parse_scenario
from perfmodel.topology import Topology
from perfmodel.workload.kernels import Fp8Recipe
from perfmodel.workload.memory import Optimizer


def check_precision_runs(spec: Any, precision: Precision, *, where: str = "precision") -> None:
    """Refuse a precision the device cannot run as its framework runs it (``docs/cli.md``: exit
    2). BF16 needs BF16 tensor cores (NVIDIA Ampere and newer; the V100 and T4 datasheets list
    FP16, FP32 and FP64 only): PyTorch's ``torch.autocast(device_type="cuda",
    dtype=torch.bfloat16)`` raises "Current CUDA Device does not support bfloat16" where
    ``torch.cuda.is_bf16_supported()`` is false (``torch/amp/autocast_mode.py``), so a V100
    "bf16" run is not a run to predict (it was accepted at the FP32 rate, MFU 61.9% against the
    FP32 peak; issue 28, item 5). TF32 likewise needs TF32 tensor cores (a TF32 rate in the
    GPU catalogue's ``peak_flops``: NVIDIA Ampere and newer; not Volta, Turing or the CDNA 4
    MI355X): on the others PyTorch's ``allow_tf32`` switches change nothing and the run is FP32,
    so a "tf32" run there is the fp32 run under another name (user21: V100 tf32 was accepted
    and computed as fp32). FP8 before Hopper/Ada and any format the GPU lacks raise from
    :meth:`~perfmodel.hardware.GPUSpec.peak`. A calibrated CPU device is not checked.

    Raises
    ------
    ConfigError
        Naming the GPU, its architecture and what to use instead.
    """
    if getattr(spec, "architecture", "") == "CPU":
        return
    dtype = precision.matmul_dtype
    if dtype is DType.BF16 and DType.BF16 not in spec.peak_flops:
        raise ConfigError(
            f"{spec.name} ({spec.architecture}) has no BF16 tensor cores: bf16 needs an Ampere "
            "or newer GPU (PyTorch's autocast refuses bfloat16 where "
            "torch.cuda.is_bf16_supported() is false); use fp16 (mixed precision) or fp32",
            value=precision.value,
            where=where,
        )
    if dtype is DType.TF32 and DType.TF32 not in spec.peak_flops:
        raise ConfigError(
            f"{spec.name} ({spec.architecture}) has no TF32 tensor cores: tf32 needs a GPU "
            "with them (NVIDIA Ampere or newer; on this one PyTorch's allow_tf32 switches "
            "change nothing and the run is FP32); use fp32 (the same run), or fp16 (mixed "
            "precision)",
            value=precision.value,
            where=where,
        )
    spec.peak(dtype)  # FP8 before Hopper/Ada, BF16 before Volta: the spec's own refusal


@dataclass(frozen=True)
class Resolved:
    """A scenario turned into values: topology, plan, preset, batch split (no timing yet)."""

    topology: Topology
    plan: ParallelismPlan
    preset: Any
    precision: Precision
    num_gpus: int
    batch_per_replica: int
    microbatch: int
    parsed: ParsedScenario  # the scenario's typed fields (parse_scenario)
    fidelity: Fidelity = Fidelity.SIMULATED
    memory_format: str = "nhwc"
    optimizer: Optimizer = Optimizer.SGD
    recipe: Recipe | None = None


#: The :class:`~perfmodel.parallel.plan.ParallelismPlan` fields that are the parsed scenario's
#: values as they are (:class:`~perfmodel.scenario_parse.ParsedScenario`, the same names);
#: :func:`resolve` derives the others (degrees, micro-batch, ZeRO and FSDP, the data-parallel
#: mode, learners).
_PLAN_AS_PARSED = (
    "pp", "schedule", "interleave", "recompute", "sequence_parallel", "sync_period", "ps_host",
    "ps_shards", "hybrid", "hsdp", "ep", "cp", "etp", "cp_comm", "ep_overlap", "moe_dispatcher",
)  # fmt: skip


def resolve(sc: Scenario) -> Resolved:
    """Validate a scenario and derive its plan.

    Every text field is parsed once, first, by
    :func:`~perfmodel.scenario_parse.parse_scenario`; what follows derives values from typed
    ones only: the GPUs used (:func:`_gpus_used`), the plan and batch split
    (:func:`plan_for`) and the training recipe (:func:`recipe_of`).

    Raises
    ------
    ConfigError, InfeasiblePlanError
        Naming the bad number and what would fit.
    """
    p = parse_scenario(sc)
    topo = topology_of(sc)
    check_precision_runs(topo.gpu_spec(), p.precision, where="scenario.precision")
    n = _gpus_used(p, topo, sc.system, sc.nodes)
    preset = p.preset
    check_single_node(preset.name, n, topo.gpus_per_node)
    try:
        plan, bpr = plan_for(p, n)
    except _UnsplitBatch as exc:  # the default plan's refusal: suggest one that is accepted
        raise InfeasiblePlanError(
            exc.args[0] + _fewer_replicas(sc, p, n, exc.value), value=exc.value, where=exc.where
        ) from None
    layout = preset.memory_format if p.memory_format is None else p.memory_format
    recipe = recipe_of(p, plan, topo)
    return Resolved(
        topo, plan, preset, p.precision, n, bpr, plan.microbatch_size, p, p.fidelity, layout,
        p.optimizer, recipe,
    )  # fmt: skip


def plan_for(p: ParsedScenario, n: int) -> tuple[ParallelismPlan, int]:
    """The plan ``predict`` runs a parsed scenario ``p`` with on ``n`` GPUs, and the samples of
    one data-parallel replica per step: the one place the plan is derived from the scenario's
    fields (:func:`resolve` and the search's screen,
    :class:`perfmodel.search.screen.PlanScreen`, both call it).

    The degrees (:func:`_degrees`); the data-parallel mode (the scenario's, else the preset's;
    several learners per GPU without one is Crossbow's); the batch split
    (:func:`_batch_per_replica`); the micro-batch (the scenario's, else one sample with
    pipelining and the whole replica batch without); the ZeRO stage (the scenario's, else the
    preset's), stage 3 under an FSDP preset being FSDP; the other fields as parsed
    (:data:`_PLAN_AS_PARSED`: ``recompute``, and ``schedule``, already interleaved where
    ``interleave > 1`` names it, :func:`~perfmodel.scenario_parse.parse_scenario`).

    Raises
    ------
    InfeasiblePlanError
        Degrees that do not multiply out to ``n``, a batch that does not split over the
        replicas, a micro-batch that does not divide the replica's batch, or a ZeRO stage the
        stack does not run with pipelining (:func:`check_pipeline_zero`).
    ConfigError
        A plan :class:`~perfmodel.parallel.plan.ParallelismPlan` refuses.
    """
    preset = p.preset
    dp, tp = _degrees(p, n)
    learners = p.learners_per_gpu
    mode = p.dp_mode or preset.dp_mode
    if learners > 1 and p.dp_mode is None:
        mode = DPMode.CROSSBOW  # several learners per GPU is Crossbow's synchronous model averaging
    bpr = _batch_per_replica(p, dp, learners, mode)
    mb = p.microbatch
    if mb is None:
        mb = 1 if p.pp > 1 else bpr
    zero = preset.zero if p.zero is None else p.zero
    check_pipeline_zero(preset, zero, p.pp, p.zero is not None)
    plan = ParallelismPlan(
        **{k: getattr(p, k) for k in _PLAN_AS_PARSED},
        dp=dp,
        tp=tp,
        microbatch_size=mb,
        zero=zero if zero != 3 or not preset.fsdp else 0,
        fsdp=preset.fsdp and zero == 3,
        dp_mode=mode,
        learners_per_gpu=learners,
    )
    plan.num_microbatches(bpr)  # raises if the micro-batch does not divide
    return plan, bpr


def check_pipeline_zero(preset: Any, zero: int, pp: int, stated: bool = False) -> None:
    """Refuse a ZeRO stage ``zero`` above what the stack runs with pipeline parallelism
    (``SoftwarePreset.pipeline_max_zero``) when ``pp > 1``: DeepSpeed's ``PipelineEngine``
    asserts ``zero_optimization_stage() < ZeroStageEnum.gradients``, "ZeRO-2 and ZeRO-3 are
    incompatible with pipeline parallelism" (``deepspeed/runtime/pipe/engine.py``), so the
    ``deepspeed-zero2``/``-zero3`` presets with ``pp > 1`` are plans the stack does not run.
    ``stated``: the stage is the scenario's ``zero``, not the preset's.

    >>> from perfmodel.parallel.software import get_preset
    >>> check_pipeline_zero(get_preset("deepspeed-zero1"), 1, 4)  # ZeRO-1 runs with pipelining
    >>> check_pipeline_zero(get_preset("deepspeed-zero3"), 3, 1)  # ZeRO-3 without it
    >>> check_pipeline_zero(get_preset("deepspeed-zero3"), 3, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    perfmodel.errors.InfeasiblePlanError: software deepspeed-zero3 with pp=2: ...

    Raises
    ------
    InfeasiblePlanError
        Naming the stage and where it came from (the scenario's ``zero`` or the preset), the
        software, ``pp``, the limit with its source, and plans that run: ``pp=1``, the highest
        stage allowed, or FSDP (``fsdp``, ``torchtitan``) to shard weights with pipelining.
    """
    limit = preset.pipeline_max_zero
    if pp <= 1 or limit is None or zero <= limit:
        return
    stage = f"zero={zero} (the scenario's)" if stated else f"ZeRO-{zero} (the preset's stage)"
    lower = f"zero={limit}" + (
        f" (software deepspeed-zero{limit})" if _deepspeed_runs(preset.name, limit) else ""
    )
    raise InfeasiblePlanError(
        f"software {preset.name} with pp={pp}: {stage} is refused; the stack "
        + pipeline_zero_limit(preset)
        + f"; use pp=1, or {lower} with pp={pp}"
        + fsdp2_hint(preset, "software fsdp or torchtitan to shard the weights with pipelining"),
        value=zero,
        where="zero" if stated else "software",
    )


def _deepspeed_runs(name: str, limit: int) -> bool:
    """Whether DeepSpeed's preset of ZeRO stage ``limit`` runs that stage with pipelining, so
    that a refusal of stack ``name`` (a DeepSpeed one) may name it: the shipped
    ``deepspeed-zero2`` and ``-zero3`` run at most ZeRO-1 there, so a restated limit of 2 is
    answered by ``zero=2`` alone."""
    from perfmodel.parallel.software import PRESETS

    same = PRESETS.get(f"deepspeed-zero{limit}")
    allowed = None if same is None else same.pipeline_max_zero
    return name.startswith("deepspeed") and limit > 0 and allowed is not None and allowed >= limit


#: The presets that shard weights under pipelining (FSDP2 with ``torch.distributed.pipelining``):
#: what a refusal of ZeRO-2/3 with ``pp > 1`` suggests, unless the refused stack is one of them.
FSDP2_STACKS = ("fsdp", "torchtitan")


def pipeline_zero_limit(preset: Any) -> str:
    """``"runs at most ZeRO-1 with pipeline parallelism (pipeline_max_zero=1; <source>)"``:
    the preset's limit with the source it states (its ``sources`` entry naming
    ``pipeline_max_zero``; a scenario's software option names itself), for predict's refusal
    and the plan search's note alike."""
    limit = preset.pipeline_max_zero
    src = next((s for s in reversed(preset.sources) if "pipeline_max_zero" in s), "")
    return (
        f"runs at most ZeRO-{limit} with pipeline parallelism (pipeline_max_zero={limit}"
        + (f"; {src}" if src else "")
        + ")"
    )


def fsdp2_hint(preset: Any, what: str) -> str:
    """``", or <what>"``: the FSDP2 stacks that shard weights under pipelining, suggested
    unless the refused stack is one of them."""
    return "" if preset.name in FSDP2_STACKS else f", or {what}"


def gpus_beyond_nodes(n: int, have: int, per: int, system: str, nodes: Any) -> InfeasiblePlanError:
    """The refusal of ``n`` GPUs on ``nodes`` servers of ``system`` that have ``have`` GPUs,
    ``per`` on each server (``n > have``): it suggests only what is accepted,
    ``nodes=ceil(n / per)`` while that stays within
    :data:`~perfmodel.topology.cluster.MAX_CLUSTER_GPUS`, else at most the GPUs there are
    (the keys as ``key=value``; the CLI writes them as its flags, ``--nodes 2``:
    :func:`perfmodel.cli.predict_checks.name_the_flags`). ``predict``'s (:func:`_gpus_used`)
    and ``compare``'s, whose explicit ``--nodes`` caps its GPU counts as predict's does."""
    from perfmodel.topology.cluster import MAX_CLUSTER_GPUS

    need = math.ceil(n / per)
    fix = (
        f"use nodes={need}, or at most gpus={have}"
        if need * per <= MAX_CLUSTER_GPUS
        else f"use at most gpus={have} (nodes={need} would be {need * per:,} "
        f"GPUs, above the {MAX_CLUSTER_GPUS:,} perfmodel builds)"
    )
    return InfeasiblePlanError(
        f"gpus={n} but system {system} with nodes={nodes} has {have:,} GPUs "
        f"({per} per server); {fix}",
        value=n,
        where="gpus",
    )


def _gpus_used(p: ParsedScenario, topo: Topology, system: str, nodes: Any) -> int:
    """The GPUs the run uses (``gpus``, default all of the topology's), at most the
    topology's; more is refused naming the system as given (``system``, not the cluster's
    ``dgx-h100x2048``), :func:`gpus_beyond_nodes`."""
    n = p.gpus or topo.num_gpus
    if n > topo.num_gpus:
        raise gpus_beyond_nodes(n, topo.num_gpus, topo.gpus_per_node, system, nodes)
    return n


def _degrees(p: ParsedScenario, n: int) -> tuple[int, int]:
    """``(dp, tp)`` of ``n`` GPUs: ``dp`` the GPUs over ``tp * pp * cp`` unless given (then it
    must multiply out to ``n``); Krizhevsky's one weird trick splits its fully-connected layers
    over all data-parallel GPUs (``tp = dp``)."""
    tp, pp = p.tp, p.pp
    if p.hybrid is Hybrid.ONE_WEIRD_TRICK:
        dp = p.dp or n
        return dp, dp
    cp = p.cp
    rest = tp * pp * cp
    names, sizes = ("tp*pp", f"{tp}*{pp}") if cp == 1 else ("tp*pp*cp", f"{tp}*{pp}*{cp}")
    if n % rest:
        fits = [d for d in divisors(n) if d % pp == 0] if n % pp == 0 else divisors(n)
        raise InfeasiblePlanError(
            f"{names}={rest} does not divide the {n} GPUs; {names} values that divide: {fits}",
            value=rest,
            where="plan",
        )
    dp = p.dp or n // rest
    if dp * rest != n:
        raise InfeasiblePlanError(
            f"dp*{names} = {dp}*{sizes} = {dp * rest} but {n} GPUs are used; "
            f"use dp={n // rest} or gpus={dp * rest}",
            value=dp,
            where="dp",
        )
    return dp, tp


def _batch_per_replica(p: ParsedScenario, dp: int, learners: int, mode: DPMode) -> int:
    """Samples of one data-parallel replica per step: ``batch_per_gpu``, or the global batch
    split over the replicas (and Crossbow's learners, whose batch keys count one learner's
    samples), at most :data:`~perfmodel.scenario_parse.MAX_BATCH_PER_REPLICA`."""
    split = dp * (learners if mode is DPMode.CROSSBOW else 1)
    if p.global_batch is not None:
        gb = p.global_batch
        if gb % split:
            what = f"dp={dp} replicas" + (f" x {learners} learners" if split != dp else "")
            below = gb // split * split
            near = " or ".join(str(b) for b in (below, below + split) if b > 0)
            raise (_UnsplitBatch if split == dp else InfeasiblePlanError)(
                f"global batch {gb} does not split over {what}; global batches that "
                f"do: multiples of {split}, e.g. {near}",
                value=gb,
                where="global_batch",
            )
        bpr = gb // split
    else:
        bpr = p.batch_per_gpu
    if bpr > MAX_BATCH_PER_REPLICA:  # a global batch over few replicas (issue 28, item 11)
        raise InfeasiblePlanError(
            f"global batch {p.global_batch} is {bpr} samples per replica over dp={dp}, above "
            f"the largest batch accepted ({MAX_BATCH_PER_REPLICA}); use more GPUs or a smaller "
            "global batch",
            value=p.global_batch,
            where="global_batch",
        )
    return bpr


class _UnsplitBatch(InfeasiblePlanError):
    """A global batch that does not split over the data-parallel replicas (no learners):
    :func:`resolve` adds :func:`_fewer_replicas`'s hint, which needs the scenario."""


def _fewer_replicas(sc: Scenario, p: ParsedScenario, n: int, gb: int) -> str:
    """The hint of a global batch ``gb`` refused under the default plan, pure data parallelism
    on ``n`` GPUs (no ``dp``, ``tp``, ``pp`` or ``cp`` given; user21: Llama 3 405B on 128
    GPUs): a plan the plan checks accept, and the plan search; ``""`` for a plan the user gave.

    The plan keeps the most replicas that ``gb`` splits over; of those it takes the largest
    ``tp`` within a server (a divisor of the GPUs per node) and ``pp`` for the rest, and only
    one :func:`_accepted` (predict's own checks: the plan, the batch split, the recipe and the
    model's shapes at that ``tp``, e.g. ``tp`` dividing the KV heads; rev27b item 1: ``tp=32``
    was suggested for Llama 3 405B, whose 8 KV heads refuse it). None: the plan search only.
    """
    if p.dp is not None or p.tp != 1 or p.pp != 1 or p.cp != 1:
        return ""
    per = topology_of(sc).gpus_per_node
    fit = ""
    for k in (d for d in divisors(n) if d > 1 and gb % (n // d) == 0):
        tps = [t for t in reversed(divisors(k)) if per % t == 0]
        tp = next((t for t in tps if _accepted(sc, t, k // t)), None)
        if tp is not None:
            pp = k // tp
            plan = f"tp={tp}" + (f" pp={pp}" if pp > 1 else "")
            flag = f"tp={tp}" + (f",pp={pp}" if pp > 1 else "")
            fit = f", e.g. {plan} (--plan {flag}) leaves dp={n // k}"
            break
    return (
        f"; or fewer replicas than the default plan's (pure data parallelism): tensor or "
        f"pipeline parallelism{fit}, and `perfmodel compare` searches plans"
    )


def _accepted(sc: Scenario, tp: int, pp: int) -> bool:
    """Whether ``predict`` accepts ``sc`` with ``tp`` and ``pp``: :func:`resolve` and the
    zoo model's build at that ``tp`` (the shape checks,
    :func:`perfmodel.workload.zoo.transformer.check_config`) raise nothing."""

    try:
        r = resolve(replace(sc, tp=tp, pp=pp))
        args = frozen_args(sc.model_args)
        plan = r.plan
        zoo_workload(
            sc.model, r.microbatch, r.precision, tp, plan.sequence_parallel, args,
            (plan.ep, plan.cp, plan.etp),
        )  # fmt: skip
    except (PerfModelError, TypeError):
        return False
    return True


def recipe_of(p: ParsedScenario, plan: ParallelismPlan, topo: Topology) -> Recipe:
    """The training recipe of the preset, precision, optimizer and plan on ``topo``'s GPU
    (:func:`recipe_on`). ``predict`` (:func:`resolve`) and the search's screen build every
    recipe here."""
    return recipe_on(p, plan, topo.gpu_spec())


def recipe_on(p: ParsedScenario, plan: ParallelismPlan, gpu: GPUSpec) -> Recipe:
    """The training recipe of the preset, precision, optimizer and plan
    (:func:`~perfmodel.parallel.recipe.build_recipe`) on a ``gpu``; MX block-scaled FP8 only on
    a GPU whose catalogue entry states it (``GPUSpec.mxfp8_gemm``: compute capability 10.x
    Blackwell and CDNA 4, after Transformer Engine's ``check_mxfp8_support``) (``model
    maxbatch``, which has a GPU and no system, calls it directly)."""
    recipe = build_recipe(
        p.preset,
        p.precision,
        p.optimizer,
        plan,
        compile=p.compile,
        fp8_recipe=p.fp8_recipe,
        recompute_modules=p.recompute_modules,
        pipeline_layout=p.pipeline_layout,
    )
    if recipe.fp8 is Fp8Recipe.MXFP8 and not gpu.mxfp8_gemm:
        raise ConfigError(
            f"--fp8-recipe mxfp8: MX block-scaled FP8 GEMMs need a GPU that runs them in "
            f"training ({mxfp8_gpus()}), not {gpu.name} ({gpu.architecture}); use te-delayed, "
            "te-current, torchao-tensorwise or torchao-rowwise",
            value="mxfp8",
            where="--fp8-recipe",
        )
    return recipe


def mxfp8_gpus() -> str:
    """The catalogue's GPUs that run MX block-scaled FP8 GEMMs in training
    (``GPUSpec.mxfp8_gemm``), by architecture in catalogue order:
    ``"Blackwell: B200-SXM-180GB, ...; CDNA4: MI355X"``; read from the catalogue, so a GPU
    added with ``mxfp8_gemm = true`` is named without editing this message."""
    from perfmodel.hardware import list_gpus

    by_arch: dict[str, list[str]] = {}
    for spec in list_gpus():
        if spec.mxfp8_gemm:
            by_arch.setdefault(spec.architecture, []).append(spec.name)
    return "; ".join(f"{arch}: {', '.join(names)}" for arch, names in by_arch.items())


#: ROCm TransformerEngine runs its MXFP8 recipe only where this variable is set to anything
#: but ``0`` (``check_mxfp8_support``: "MXFP8 support is not enabled" otherwise;
#: ROCm/TransformerEngine @030b792 ``transformer_engine/pytorch/quantization.py``).
ROCM_MXFP8_ENV = "NVTE_ROCM_ENABLE_MXFP8"


def mxfp8_note(recipe: Recipe | None, gpu: GPUSpec) -> str | None:
    """The note of the ``mxfp8`` FP8 recipe on an AMD GPU: ROCm TransformerEngine needs
    :data:`ROCM_MXFP8_ENV` set (``=1``) to run it, or refuses the recipe; ``None`` elsewhere
    (NVIDIA's Transformer Engine has no such switch)."""
    if recipe is None or recipe.fp8 is not Fp8Recipe.MXFP8 or gpu.vendor != "AMD":
        return None
    return (
        f"note: --fp8-recipe mxfp8 on {gpu.name}: ROCm TransformerEngine runs MXFP8 only with "
        f"{ROCM_MXFP8_ENV}=1 set (any value but 0; its check_mxfp8_support, "
        "ROCm/TransformerEngine @030b792), and refuses the recipe without it"
    )


def fp8_default(r: Resolved) -> str | None:
    """The line stating the FP8 recipe a ``precision="fp8"`` run took from its software preset
    (no ``fp8_recipe`` given), or ``None``."""
    fp8 = None if r.recipe is None else r.recipe.fp8
    if fp8 is None or r.parsed.fp8_recipe is not None:
        return None
    return f"FP8 recipe {fp8.value}, the {r.preset.name} preset's (--fp8-recipe chooses another)"
