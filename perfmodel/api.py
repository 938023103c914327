"""The prediction API: :class:`Scenario`, :func:`predict`, :func:`predict_curve`.

Used by the CLI (``perfmodel predict``), the examples, plan search and sweeps. Contract in
``docs/design.md`` ("The prediction API"); options documented in ``docs/predict.md``.

>>> sc = Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=64, fidelity="analytic")
>>> r = predict(sc)
>>> r.num_gpus, r.fits_in_memory, 0.5 < r.scaling_efficiency <= 1.0
(8, True, True)
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from perfmodel._gc import fewer_collections
from perfmodel._memo import BoundedMemo
from perfmodel._schema import as_int, as_mapping, as_number, as_str, describe
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError, InfeasiblePlanError, PerfModelError, SchemaError
from perfmodel.host.input_pipeline import InputPipeline, check_single_node, input_pipeline
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.lowering import LoweredStep, StepInputs, lower
from perfmodel.parallel.placement import place
from perfmodel.parallel.plan import DPMode, Hybrid, ParallelismPlan, PipelineSchedule
from perfmodel.parallel.recipe import ComputeRecipe, Recipe, build_recipe
from perfmodel.parallel.straggler import straggler_wait_s
from perfmodel.report.step import StepReport, breakdown, critical_device
from perfmodel.scenario_parse import (
    MAX_BATCH_PER_REPLICA,
    Fidelity,
    ParsedScenario,
    parse_flag,
    parse_scenario,
    pos_int,
)
from perfmodel.search import autobatch
from perfmodel.sim.engine import FlowComm, Timeline, evaluate, simulate
from perfmodel.topology import Topology
from perfmodel.workload.kernels import DEFAULT_KERNELS, Fp8Recipe, KernelRecipe
from perfmodel.workload.layers import distinct_layers
from perfmodel.workload.memory import Optimizer, Recompute

FIDELITIES = tuple(f.value for f in Fidelity)

#: ``workload_fn(batch_size=, precision=, tp=, sequence_parallel=) -> Workload``
WorkloadFn = Callable[..., Any]


@dataclass(frozen=True)
class Scenario:
    """One question: this model, this batch, this plan, this software, on this hardware.

    Keys are the ``perfmodel predict`` flags (see ``docs/predict.md``). Beyond the
    ``docs/design.md`` contract: ``dp_mode`` (data-parallel variant, default from the software
    preset), ``hybrid`` (``one-weird-trick``), ``sync_period`` (local SGD), ``ps_host`` and
    ``ps_shards`` (parameter server), ``placement`` (dimension order, fastest first),
    ``memory_format`` (``nchw``/``nhwc`` convolution layout; ``None`` takes the software preset's
    framework default, :attr:`~perfmodel.parallel.software.SoftwarePreset.memory_format`),
    ``dataset`` (``imagenet-jpeg``, ``cifar-memory``; ``None`` or ``synthetic``: no input pipeline),
    ``data_loader`` and ``data_loader_workers`` (the input pipeline's library and workers per
    pipeline; ``None``: the preset's framework loop, :mod:`perfmodel.host.input_pipeline`).

    ``batch_per_gpu`` is the batch of one data-parallel replica (for Crossbow: of one learner);
    ``global_batch`` is split over the replicas.
    """

    system: str = "dgx1-v100"
    nodes: int = 1
    gpus: int | None = None
    network: str | None = None
    nics_per_node: int | None = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    intra_node: str | None = None
    fabric_topology: str | None = None
    oversubscription: float | None = None
    nccl: str | None = None
    """NCCL release whose P2P level applies (``"2.7"``); ``None``: the default release
    (:func:`perfmodel.topology.importers.with_nccl_p2p_rule`)."""
    model: str = "resnet50"
    model_args: Mapping[str, Any] = field(default_factory=dict)
    batch_per_gpu: int | None = None
    global_batch: int | None = None
    precision: str = "fp32"
    optimizer: str = "sgd"
    dp: int | None = None
    tp: int = 1
    pp: int = 1
    microbatch: int | None = None
    schedule: str = "1f1b"
    interleave: int = 1
    recompute: str = "none"
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism; ``None``: the preset's default (on with ``tp > 1`` for
    ``megatron-core`` and ``torchtitan``, off otherwise; ``SoftwarePreset.sequence_parallel_with_tp``)."""
    zero: int | None = None
    software: str = "pytorch-ddp"
    learners_per_gpu: int = 1
    dataset_size: int | None = None
    calibration: str | None = None
    fidelity: str = "simulated"
    dp_mode: str | None = None
    hybrid: str | None = None
    sync_period: int = 1
    ps_host: str = "cpu"
    ps_shards: int = 1
    placement: str = "tp,pp,dp"
    memory_format: str | None = None
    hsdp: int | None = None
    ep: int = 1
    cp: int = 1
    etp: int | None = None
    cp_comm: str | None = None
    ep_overlap: bool = False
    moe_dispatcher: str | None = None
    """Token dispatcher of expert-parallel layers (``alltoall``, ``deepep``, ``hybridep``,
    ``allgather``; :class:`~perfmodel.parallel.plan.MoEDispatcher`); ``None``: ``alltoall``."""
    dataset: str | None = None
    data_loader: str | None = None
    data_loader_workers: int | None = None
    compile: bool | None = None
    """The model runs under ``torch.compile`` (inductor fuses each block's pointwise chains:
    :class:`~perfmodel.workload.kernels.Fusion`); ``None``: the software preset's kernels
    (eager for the PyTorch presets, Transformer Engine's for Megatron)."""
    fp8_recipe: str | None = None
    """FP8 recipe of ``precision="fp8"`` (``te-delayed``, ``te-current``,
    ``torchao-tensorwise``, ``torchao-rowwise``, ``mxfp8``:
    :class:`~perfmodel.workload.kernels.Fp8Recipe`); ``None``: the software preset's."""
    recompute_modules: str | None = None
    """Megatron-Core's ``recompute_modules`` of a ``recompute="selective"`` run,
    comma-separated (``core_attn``, ``mla_up_proj``, ``mlp``, ``moe_act``:
    :class:`~perfmodel.workload.memory.RecomputeModule`); ``None``: the software preset's
    selective rule."""
    software_options: Mapping[str, Any] = field(default_factory=dict)
    """Knobs of the stack set beside its preset, by name (``--software-option KEY=VALUE``;
    :data:`perfmodel.parallel.software.SOFTWARE_OPTIONS`: ``tp_comm_overlap``,
    ``overlap_grad_comm``, ``overlap_param_gather``, ``grad_reduce_fp32``, ``fp8_params``,
    ``bucket_bytes`` in MiB, or their Megatron/NeMo names); empty: the preset as it is."""

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "scenario") -> Scenario:
        """Build from a mapping with the same keys (``plan = "dp=..,tp=.."`` also accepted).

        Raises
        ------
        ConfigError
            On an unknown key (naming it and the accepted keys).
        """
        from perfmodel.parallel.plan import parse_plan_string

        known = {f.name for f in fields(cls)}
        data = {str(k).replace("-", "_"): v for k, v in dict(d).items()}
        if "plan" in data:
            plan = data.pop("plan")
            if not isinstance(plan, str | Mapping):
                raise SchemaError(
                    f"{where}: plan: expected text such as 'dp=2,tp=4' or a table, "
                    f"got {describe(plan)}",
                    value=plan,
                    where=f"{where}: plan",
                )
            parsed = (
                parse_plan_string(plan, where=f"{where}: plan")
                if isinstance(plan, str)
                else dict(plan)
            )
            for k, v in parsed.items():
                data.setdefault({"microbatch_size": "microbatch"}.get(k, k), v)
        if "microbatch_size" in data:
            data["microbatch"] = data.pop("microbatch_size")
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r}; accepted keys: {', '.join(sorted(known))}",
                value=unknown[0],
                where=where,
            )
        for flag in ("sequence_parallel", "compile"):
            if data.get(flag) is not None:  # null: the preset's default
                data[flag] = parse_flag(data[flag], where=f"{where}: {flag}")
        for key in ("model_args", "software_options"):  # null (JSON) is none
            if key in data:
                args = data[key]
                data[key] = {} if args is None else dict(as_mapping(args, key, where=where))
        for k, v in data.items():
            if k not in ("model_args", "software_options", "sequence_parallel", "compile"):
                data[k] = _check_field_type(k, v, where)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, ``model_args`` as a plain ``dict`` (a shallow copy).

        The value ``dataclasses.asdict`` gives (a field of text, number, flag or ``None`` is
        itself; any other value a deep copy), without its generic walk: a scenario's hash and
        report read it on every prediction (issue 14)."""
        d = {}
        for name in _FIELD_NAMES:
            v = getattr(self, name)
            if name in ("model_args", "software_options"):
                d[name] = dict(v)
            else:
                d[name] = v if v is None or type(v) in _SCALARS else copy.deepcopy(v)
        return d

    def content_hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`to_dict` (stable across runs)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


_FIELD_NAMES = tuple(f.name for f in fields(Scenario))
_SCALARS = frozenset({str, int, float, bool})  # immutable: dataclasses.asdict keeps them as is

# ---------------------------------------------------------------------- resolution helpers

#: The JSON/TOML type each scenario key must have (from the :class:`Scenario` annotations):
#: ``(kind, optional)`` with kind ``"str"``, ``"int"``, ``"float"`` or ``"any"``.
_FIELD_KINDS: dict[str, tuple[str, bool]] = {}


def _check_field_type(key: str, value: Any, where: str) -> Any:
    """A scenario value of the type its field is annotated with, or a :class:`SchemaError`
    naming the key, the value and the type (``system = ["dgx1-v100"]``: expected text). An
    integral float (``4.0`` from JSON) is taken as the integer; a boolean is not an integer;
    ``null`` only where the field may be ``None``."""
    if not _FIELD_KINDS:
        for f in fields(Scenario):
            ann = str(f.type)
            kind = (
                "str" if ann.startswith("str") else "int" if ann.startswith("int")
                else "float" if ann.startswith("float") else "any"
            )  # fmt: skip
            _FIELD_KINDS[f.name] = (kind, "None" in ann)
    kind, optional = _FIELD_KINDS.get(key, ("any", True))
    if value is None and optional:
        return value
    if kind == "str":
        return as_str(value, key, where=where)
    if kind == "int":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return as_int(value, key, where=where)
    if kind == "float":
        if key == "oversubscription":  # the topology files' rule
            from perfmodel.topology.io import MIN_OVERSUBSCRIPTION

            return as_number(value, key, where=where, minimum=MIN_OVERSUBSCRIPTION)
        return as_number(value, key, where=where)
    return value


@lru_cache(maxsize=64)
def _topology(key: tuple[Any, ...]) -> Topology:
    (system, nodes, network, nics, gpu, gpn, intra, fabric, oversub, nccl) = key
    if nccl is not None:  # the stated NCCL release's P2P level (issue 12)
        from perfmodel.topology.nccl_p2p import NcclRelease, with_nccl_p2p_rule

        base = _topology((*key[:-1], None))
        return with_nccl_p2p_rule(base, NcclRelease.parse(nccl, where="scenario.nccl"))
    from perfmodel.topology.builders import build_system

    return build_system(
        system,
        nodes=nodes,
        network=network,
        nics_per_node=nics,
        gpu=gpu,
        gpus_per_node=gpn,
        intra_node=intra,
        fabric_topology=fabric,
        oversubscription=oversub,
    )


def _file_stamp(path: str) -> int | None:
    """Modification time (ns) of ``path``, ``None`` if it cannot be read.

    Part of every cache key that a calibration profile feeds, so a profile rewritten on disk
    (``perfmodel calibrate`` again, a hand edit) is read again instead of served stale.
    """
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None  # load_profile raises its own error naming the file


def _calibrated_device(path: str) -> Topology:
    return _calibrated_device_cached(path, _file_stamp(path))


@lru_cache(maxsize=16)
def _calibrated_device_cached(path: str, _stamp: int | None) -> Topology:
    from perfmodel.calibration import load_profile
    from perfmodel.topology.custom import device_system

    prof = load_profile(path)
    return device_system(prof.device_spec(), source=path)


def topology_of(sc: Scenario) -> Topology:
    """The :class:`Topology` a scenario names (cached per hardware key).

    ``system="calibrated"`` is the single device a calibration profile measured (e.g. the CPU
    of ``perfmodel calibrate --device cpu``), with the spec the profile derives from its fits.
    """
    if sc.system == "calibrated":
        if not sc.calibration:
            raise ConfigError(
                "system 'calibrated' is the device of a calibration profile: give --calibration FILE",
                value=sc.system,
                where="--system",
            )
        return _calibrated_device(str(sc.calibration))
    return _topology(
        (
            sc.system,
            pos_int(sc.nodes, "nodes"),
            sc.network,
            sc.nics_per_node,
            sc.gpu,
            sc.gpus_per_node,
            sc.intra_node,
            sc.fabric_topology,
            sc.oversubscription,
            sc.nccl,
        )
    )


def _freeze(v: Any) -> Any:
    """Hashable form of a model argument (lists become tuples, thawed again in ``_workload``)."""
    if isinstance(v, (list, tuple)):
        return ("__list__", tuple(_freeze(x) for x in v))
    if isinstance(v, dict):
        raise ConfigError(
            f"model argument value {v!r} must be a number, string or list",
            value=v,
            where="model_args",
        )
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "__list__":
        return [_thaw(x) for x in v[1]]
    return v


@lru_cache(maxsize=512)
def _workload(
    model: str,
    batch: int,
    precision: Precision,
    tp: int,
    sp: bool,
    args: tuple[tuple[str, Any], ...],
    parallel: tuple[int, int, int] = (1, 1, 0),
    kernels: KernelRecipe = DEFAULT_KERNELS,
) -> Any:
    """Zoo workload of one rank; ``parallel`` is ``(ep, cp, etp)`` (expert, context and expert
    tensor parallelism, :func:`perfmodel.workload.build_model`), ``kernels`` the training
    stack's (:meth:`perfmodel.parallel.recipe.Recipe.kernels`)."""
    from perfmodel.workload import build_model

    kwargs = {k: _thaw(v) for k, v in args}
    ep, cp, etp = parallel
    extra: dict[str, Any] = {"ep": ep, "cp": cp, "etp": etp} if (ep, cp, etp) != (1, 1, 0) else {}
    if kernels != DEFAULT_KERNELS:
        extra["kernels"] = kernels
    return build_model(
        model, batch_size=batch, precision=precision, tp=tp, sequence_parallel=sp, **extra, **kwargs
    )


@lru_cache(maxsize=64)
def _calibration(path: str, gpu: str | None, _stamp: int | None) -> tuple[Any, Any, float | None]:
    """``(ComputeParams, LinkParams, measured host s per kernel or None)`` of a profile.

    The host cost per kernel of a *training step* is what the model needs
    (``ComputeParams.host_dispatch_s``). A GPU profile's ``launch.eager`` fit times a bare
    1-element kernel, a lower bound (the H100's 9.68 us against 35.55 us per kernel of its
    host-bound training steps), so for torch (GPU) profiles it is not used: their own eager host
    fit over host-bound steps (``fits["host.eager_step"]``, see
    :func:`perfmodel.calibration.runner.finish_profile`) if they have one, else the software
    preset's default applies; a profile of the predicted device itself run with another backend
    (NumPy on the CPU, ``--system calibrated``) has only its own dispatch cost, which is used.
    Cached per (path, GPU, :func:`_file_stamp`).
    """
    from perfmodel.calibration import load_profile

    prof = load_profile(path, gpu=gpu)
    cp = prof.training_compute_params  # burst GEMM peaks capped at sustained rates (issue 24)
    backend = str(prof.provenance.get("backend", ""))
    eager = None
    if "host.eager_step" in prof.fits:  # the profile's own host-bound training steps
        eager = float(prof.fits["host.eager_step"].values["per_kernel_s"])
    elif not backend.startswith("torch"):
        if cp is not None and cp.host_dispatch_s > 0:
            eager = float(cp.host_dispatch_s)
        elif "launch.eager" in prof.fits:
            eager = float(prof.fits["launch.eager"].values["launch_s"])
        else:
            eager = 0.0  # the device's own dispatch is its fitted launch cost (kernel_launch_s)
    return cp, prof.link_params, eager


def system_costs(
    topo: Topology,
    precision: Precision,
    calibration: str | None,
    preset: Any = None,
    memory_format: str | None = None,
    recipe: Recipe | None = None,
) -> SystemCosts:
    """Cost models of ``topo``, cached per (topology, precision, profile, host dispatch cost).

    ``ComputeParams.host_dispatch_s`` follows the software preset
    (:meth:`~perfmodel.parallel.software.SoftwarePreset.host_dispatch_s`): PyTorch eager stacks
    get ``HOST_DISPATCH_S["pytorch-eager"]``, or the profile's own dispatch cost for a profile of
    a non-torch device (see :func:`_calibration`); graph-mode stacks get 0. ``preset=None`` keeps
    the profile's (or the datasheet default's) value. ``memory_format`` (``"nchw"`` or
    ``"nhwc"``, parsed at the edge: :func:`perfmodel.compute.params.parse_memory_format`) sets
    ``ComputeParams.conv_layout``; ``None`` keeps the profile's or default's.
    ``recipe`` (the scenario's training recipe) sets ``ComputeParams.cast_weights_each_step``
    from :attr:`Recipe.autocast_casts`, ``ComputeParams.attention_backend`` from
    :attr:`Recipe.attention_backend` and the optimizer step's bytes; ``None`` keeps them.
    """
    cp = None
    measured = None
    gpu = stamp = None
    if calibration:
        calibration = str(calibration)
        # a device outside the GPU catalogue (system "calibrated") is the profile's own device
        gpu = None if topo.device_specs else topo.gpu_spec().name
        stamp = _file_stamp(calibration)
        cp, _, measured = _calibration(calibration, gpu, stamp)
    if preset is not None:
        host = preset.host_dispatch_s(measured)
    else:
        host = float(cp.host_dispatch_s) if cp is not None else 0.0
    compute = None if recipe is None else recipe.compute  # plan-independent: one cache entry
    return _system_costs(topo, precision, calibration, gpu, stamp, host, memory_format, compute)


@lru_cache(maxsize=256)
def _system_costs(
    topo: Topology,
    precision: Precision,
    calibration: str | None,
    gpu: str | None,
    stamp: int | None,
    host_dispatch_s: float,
    conv_layout: str | None = None,
    recipe: ComputeRecipe | None = None,
) -> SystemCosts:
    """:class:`SystemCosts` of :func:`system_costs` (``Topology`` hashes by identity)."""
    cp = lp = None
    if calibration:
        cp, lp, _ = _calibration(calibration, gpu, stamp)
    casts = None if recipe is None else recipe.autocast_casts
    attention = None if recipe is None else recipe.attention_backend
    tf32_conv = None if recipe is None else recipe.fp32_conv_tf32
    if (
        host_dispatch_s > 0
        or cp is not None
        or conv_layout not in (None, "nhwc")
        or casts is not None
    ):
        from perfmodel.compute import ComputeParams

        base = cp if cp is not None else ComputeParams.for_gpu(topo.gpu_spec())
        cp = replace(
            base,
            host_dispatch_s=host_dispatch_s,
            conv_layout=conv_layout or base.conv_layout,
            cast_weights_each_step=base.cast_weights_each_step if casts is None else casts,
            attention_backend=base.attention_backend if attention is None else attention,
            fp32_conv_tf32=base.fp32_conv_tf32 if tf32_conv is None else tf32_conv,
        )
    return SystemCosts(topo, precision, compute_params=cp, link_params=lp, recipe=recipe)


def check_precision_runs(spec: Any, precision: Precision, *, where: str = "precision") -> None:
    """Refuse a precision the device cannot run as its framework runs it (``docs/cli.md``: exit
    2). BF16 needs BF16 tensor cores (NVIDIA Ampere and newer; the V100 and T4 datasheets list
    FP16, FP32 and FP64 only): PyTorch's ``torch.autocast(device_type="cuda",
    dtype=torch.bfloat16)`` raises "Current CUDA Device does not support bfloat16" where
    ``torch.cuda.is_bf16_supported()`` is false (``torch/amp/autocast_mode.py``), so a V100
    "bf16" run is not a run to predict (it was accepted at the FP32 rate, MFU 61.9% against the
    FP32 peak; issue 28, item 5). FP8 before Hopper/Ada and any format the GPU lacks raise from
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
    spec.peak(dtype)  # FP8 before Hopper/Ada, BF16 before Volta: the spec's own refusal


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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


def resolve(sc: Scenario) -> Resolved:
    """Validate a scenario and derive its plan.

    Every text field is parsed once, first, by
    :func:`~perfmodel.scenario_parse.parse_scenario`; what follows derives values from typed
    ones only.

    Raises
    ------
    ConfigError, InfeasiblePlanError
        Naming the bad number and what would fit.
    """
    p = parse_scenario(sc)
    topo = topology_of(sc)
    check_precision_runs(topo.gpu_spec(), p.precision, where="scenario.precision")
    n = p.gpus or topo.num_gpus
    if n > topo.num_gpus:
        per = topo.gpus_per_node
        raise InfeasiblePlanError(
            f"gpus={n} but system {topo.name} with nodes={sc.nodes} has {topo.num_gpus} GPUs; "
            f"use nodes={math.ceil(n / per)} or gpus<={topo.num_gpus}",
            value=n,
            where="gpus",
        )
    preset = p.preset
    check_single_node(preset.name, n, topo.gpus_per_node)
    tp, pp = p.tp, p.pp
    if p.hybrid is Hybrid.ONE_WEIRD_TRICK:
        dp = p.dp or n
        tp = dp
    else:
        cp = p.cp
        rest = tp * pp * cp
        names, sizes = ("tp*pp", f"{tp}*{pp}") if cp == 1 else ("tp*pp*cp", f"{tp}*{pp}*{cp}")
        if n % rest:
            fits = [d for d in _divisors(n) if d % pp == 0] if n % pp == 0 else _divisors(n)
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
    learners = p.learners_per_gpu
    mode = p.dp_mode or preset.dp_mode
    if learners > 1 and p.dp_mode is None:
        mode = DPMode.CROSSBOW  # several learners per GPU is Crossbow's synchronous model averaging
    # Crossbow: the batch keys count one learner's samples; a global batch covers all learners
    split = dp * (learners if mode is DPMode.CROSSBOW else 1)
    if p.global_batch is not None:
        gb = p.global_batch
        if gb % split:
            what = f"dp={dp} replicas" + (f" x {learners} learners" if split != dp else "")
            raise InfeasiblePlanError(
                f"global batch {gb} does not split over {what}; global batches that "
                f"do: multiples of {split}, e.g. {max(split, gb // split * split)} or "
                f"{(gb // split + 1) * split}",
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
    mb = p.microbatch
    if mb is None:
        mb = 1 if pp > 1 else bpr
    zero = preset.zero if p.zero is None else p.zero
    plan = ParallelismPlan(
        dp=dp,
        tp=tp,
        pp=pp,
        microbatch_size=mb,
        schedule=p.schedule,
        interleave=p.interleave,
        recompute=p.recompute,
        sequence_parallel=p.sequence_parallel,
        zero=zero if zero != 3 or not preset.fsdp else 0,
        fsdp=preset.fsdp and zero == 3,
        dp_mode=mode,
        learners_per_gpu=learners,
        sync_period=p.sync_period,
        ps_host=p.ps_host,
        ps_shards=p.ps_shards,
        hybrid=p.hybrid,
        hsdp=p.hsdp,
        ep=p.ep,
        cp=p.cp,
        etp=p.etp,
        cp_comm=p.cp_comm,
        ep_overlap=p.ep_overlap,
        moe_dispatcher=p.moe_dispatcher,
    )
    plan.num_microbatches(bpr)  # raises if the micro-batch does not divide
    layout = preset.memory_format if p.memory_format is None else p.memory_format
    recipe = build_recipe(
        preset,
        p.precision,
        p.optimizer,
        plan,
        compile=p.compile,
        fp8_recipe=p.fp8_recipe,
        recompute_modules=p.recompute_modules,
    )
    if recipe.fp8 is Fp8Recipe.MXFP8 and topo.gpu_spec().architecture != "Blackwell":
        raise ConfigError(
            f"--fp8-recipe mxfp8: MX block-scaled FP8 GEMMs need a Blackwell GPU, not "
            f"{topo.gpu_spec().name} ({topo.gpu_spec().architecture}); use te-delayed, "
            "te-current, torchao-tensorwise or torchao-rowwise",
            value="mxfp8",
            where="--fp8-recipe",
        )
    return Resolved(
        topo, plan, preset, p.precision, n, bpr, mb, p, p.fidelity, layout, p.optimizer, recipe
    )


def _build_step(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None = None
) -> tuple[LoweredStep, SystemCosts]:
    calib = None if _host_only_profile(sc.calibration) else sc.calibration
    costs = system_costs(r.topology, r.precision, calib, r.preset, r.memory_format, r.recipe)
    plan = r.plan
    wl, batch = _step_workload(sc, r, workload_fn)
    order = r.parsed.placement
    if plan.ep > 1 and sc.placement == Scenario.placement:
        # Megatron-Core's rank order (parallel_state "tp-cp-ep-dp-pp"): pipeline stages
        # outermost, so a stage's expert-parallel group fills servers before it spans NICs
        order = ("tp", "dp", "pp")
    # the topology's first GPUs: place's default when the plan uses them all (no check of an
    # explicit list, 1,024 names against the topology's for GPT-3 on 1024 A100)
    gpus = None if plan.num_gpus == r.num_gpus else r.topology.gpus[: r.num_gpus]
    placement = place(plan, r.topology, gpus=gpus, order=order)
    inp = StepInputs(
        plan=plan,
        preset=r.preset,
        placement=placement,
        workload=wl,
        batch_per_replica=r.batch_per_replica
        * (plan.learners_per_gpu if plan.dp_mode is DPMode.CROSSBOW else 1),
        optimizer=r.optimizer,
        capacity_bytes=float(r.topology.gpu_spec().memory_bytes),
        recipe=r.recipe,
    )
    if plan.dp_mode is DPMode.CROSSBOW:
        inp = replace(inp, plan=replace(plan, microbatch_size=batch))
    return replace(lower(inp, costs), tokens_per_sample=wl.tokens_per_sample), costs


def _run(
    step: LoweredStep, fidelity: Fidelity, topo: Topology, costs: SystemCosts
) -> tuple[Timeline, str]:
    if fidelity is Fidelity.ANALYTIC:
        return evaluate(step.graph), "analytic"
    lp = costs.link_params
    return simulate(
        step.graph, network_factory=lambda env: FlowComm(env, topo, lp, model=costs.comm)
    ), "simulated"


def _step_workload(sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None) -> tuple[Any, int]:
    """The workload of one micro-batch on one tensor-parallel rank, and that micro-batch."""
    plan = r.plan
    args = tuple(sorted((str(k), _freeze(v)) for k, v in dict(sc.model_args).items()))
    wl_tp = plan.tp  # one-weird-trick: tp = dp splits the FC layers over all GPUs
    batch = r.microbatch
    if plan.dp_mode is DPMode.CROSSBOW and plan.learners_per_gpu > 1:
        batch = r.microbatch * plan.learners_per_gpu
    if workload_fn is not None:
        wl = workload_fn(
            batch_size=batch,
            precision=r.precision,
            tp=wl_tp,
            sequence_parallel=plan.sequence_parallel,
        )
    else:
        try:
            wl = _workload(
                sc.model,
                batch,
                r.precision,
                wl_tp,
                plan.sequence_parallel,
                args,
                (plan.ep, plan.cp, plan.etp),
                DEFAULT_KERNELS
                if r.recipe is None
                else r.recipe.kernels(r.batch_per_replica // batch),
            )
        except TypeError as exc:  # unhashable model argument value
            raise ConfigError(
                f"model_args: {exc}", value=dict(sc.model_args), where="model_args"
            ) from exc
    return wl, batch


def _baseline_throughput(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None
) -> tuple[float, bool, tuple[str, ...]]:
    """1-GPU baseline throughput (samples/s), whether it fits in GPU memory, and the defaults
    chosen for it (its automatic micro-batch). Kept per baseline scenario in
    :data:`_BASELINES` (zoo models; :func:`_baseline_value`)."""
    b_sc = baseline_scenario(sc, r)
    return _baseline_value(
        b_sc,
        workload_fn,
        lambda: _baseline_fields(predict(b_sc, workload_fn=workload_fn, _baseline=True)),
        "1",
    )


def _baseline_fields(rep: StepReport) -> tuple[float, bool, tuple[str, ...]]:
    return rep.throughput_samples_per_s, rep.fits_in_memory, rep.defaults


def _baseline_value(
    b_sc: Scenario,
    workload_fn: WorkloadFn | None,
    make: Callable[[], tuple[float, bool, tuple[str, ...]]],
    kind: str,
) -> tuple[float, bool, tuple[str, ...]]:
    """``make()`` (a speedup baseline's throughput, fit and chosen defaults) of baseline
    scenario ``b_sc``, kept in :data:`_BASELINES` by its content hash, the profile's file stamp
    and ``kind`` (``"1"``: the 1-GPU baseline, ``"k"``: a k-GPU candidate): every plan, cluster
    size or sweep row with the same baseline reads it (issue 27; the report cache holds 256
    whole reports, which a sweep's rows push out). Computed every time for a model of the
    caller's (``workload_fn``)."""
    if workload_fn is not None:
        return make()
    stamp = _file_stamp(str(b_sc.calibration)) if b_sc.calibration else None
    return _BASELINES.get((b_sc.content_hash(), stamp, kind), make)


def _one_gpu_state_exceeds_memory(sc: Scenario, r: Resolved) -> bool:
    """Whether the model state of the 1-GPU baseline (:func:`baseline_scenario`) alone exceeds
    its GPU's memory, so that it fits at no micro-batch: ``recipe.model_state_bytes(P, 1)``
    (weights, gradients, optimizer state of all ``P`` parameters of the zoo model; none of them
    a routed expert) ``> capacity``. The lowering's one stage holds these bytes plus tied
    copies, non-trainable buffers, activations, workspace and communication buffers, none negative
    (:func:`perfmodel.parallel.lowering.stage_memory`), so its ``fits`` is then false too;
    decided without lowering the step (issue 14: GPT-3 175B needs 2.8 TB of Adam state; the
    1-GPU prediction was ~10 ms of a fresh ``predict``). ``False`` when it cannot say."""
    b_sc = baseline_scenario(sc, r)
    b_r = resolve(b_sc)
    rc = b_r.recipe
    if rc is None or b_r.plan.pp != 1 or b_r.num_gpus != 1:
        return False
    wl, _ = _step_workload(b_sc, b_r, None)
    if wl.is_moe:  # a zoo MoE has routed experts (and its routing layers) or no expert role
        return False
    state = sum(rc.model_state_bytes(wl.params, b_r.plan.grad_replicas))  # a stack read once
    return state > float(b_r.topology.gpu_spec().memory_bytes)


def _speedup_baseline(
    sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None, this_run: tuple[int, float, bool]
) -> autobatch.Baseline:
    """One GPU, or the smallest GPU count that fits when one GPU does not
    (:func:`perfmodel.search.autobatch.fitting_baseline`)."""
    replica = r.plan.tp * r.plan.pp * r.plan.cp

    def run(k: int) -> tuple[float, bool]:
        k_sc = autobatch.scaled_baseline(
            sc,
            k,
            batch_per_replica=r.batch_per_replica,
            replica_gpus=replica,
            gpus_per_node=r.topology.gpus_per_node,
        )
        thr, fits, _ = _baseline_value(
            k_sc,
            workload_fn,
            lambda: _baseline_fields(predict(k_sc, workload_fn=workload_fn, baseline=False)),
            "k",
        )
        return thr, fits

    if this_run[2] and workload_fn is None and _one_gpu_state_exceeds_memory(sc, r):
        # the 1-GPU throughput is then unused (fitting_baseline): its prediction is skipped
        thr1, fits1, chosen = math.nan, False, ()
    else:
        thr1, fits1, chosen = _baseline_throughput(sc, r, workload_fn)
    counts = autobatch.baseline_gpu_counts(r.num_gpus, replica)
    base = autobatch.fitting_baseline((thr1, fits1), counts, run, this_run=this_run)
    # how the 1-GPU baseline runs, chosen for it (its micro-batch; not its other defaults,
    # which the run's own say)
    chosen = tuple(c for c in chosen if c.startswith("micro-batch"))
    if base.gpus == 1 and fits1 and chosen:
        base = dataclasses.replace(base, note="the 1-GPU baseline runs " + "; ".join(chosen))
    return base


def _auto_microbatch(
    sc: Scenario,
    r: Resolved,
    workload_fn: WorkloadFn | None,
    defaults: list[str],
) -> tuple[Scenario, Resolved, LoweredStep, SystemCosts]:
    """The scenario's step, lowered; without a micro-batch, with pipelining or when the whole
    per-replica batch does not fit: the largest micro-batch that fits
    (:func:`perfmodel.search.autobatch.choose_microbatch`), its reason appended to
    ``defaults``. Crossbow learners keep their batch.

    Each micro-batch size is lowered at most once: with pipelining the resolved default (1)
    is not lowered before the search (the search picks the step it returns), and a size the
    search probes twice, or the default it probes, reuses its lowering (issue 14: the speedup
    baseline's one-replica prediction is such a search)."""
    auto = sc.microbatch is None and r.plan.dp_mode is not DPMode.CROSSBOW
    if auto and not r.preset.gradient_accumulation:  # the stack runs the whole batch at once
        step, costs = _build_step(sc, r, workload_fn)
        if not all(m.fits for m in step.memory):
            defaults.append(
                f"{r.preset.name} does not accumulate gradients (SoftwarePreset."
                f"gradient_accumulation): the whole per-replica batch of {r.batch_per_replica} "
                "runs at once; give a smaller batch, or a micro-batch to model accumulation"
            )
        return sc, r, step, costs
    if not auto:
        return sc, r, *_build_step(sc, r, workload_fn)
    built: dict[int, tuple[Scenario, Resolved, LoweredStep, SystemCosts]] = {}
    if r.plan.pp == 1:  # the whole batch as one micro-batch stays when it fits
        step, costs = _build_step(sc, r, workload_fn)
        if all(m.fits for m in step.memory):
            return sc, r, step, costs
        built[r.microbatch] = (sc, r, step, costs)

    def fits(mb: int) -> bool:
        """Whether every stage fits in GPU memory with micro-batch ``mb`` (lowered, not run;
        an infeasible plan does not fit); the lowered step is kept for the chosen size."""
        if mb not in built:
            mb_sc = replace(sc, microbatch=mb)
            try:
                mb_r = resolve(mb_sc)
                mb_step, mb_costs = _build_step(mb_sc, mb_r, workload_fn)
            except InfeasiblePlanError:
                return False
            built[mb] = (mb_sc, mb_r, mb_step, mb_costs)
        return all(m.fits for m in built[mb][2].memory)

    def limit(mb: int) -> float | None:
        """The largest micro-batch estimated to fit from the probe of ``mb`` (guides the next
        probe only; ``None`` for an infeasible size)."""
        hit = built.get(mb)
        return None if hit is None else autobatch.affine_limit(mb, hit[2].memory)

    # the interleaved schedule refuses micro-batch counts pp does not divide: such a size is
    # infeasible between feasible ones, fits is not monotone there, and only the bisection's
    # probes give the bisection's answer
    interleaved = r.plan.schedule is PipelineSchedule.INTERLEAVED and r.plan.pp > 1
    choice = autobatch.choose_microbatch(
        r.batch_per_replica, r.plan.pp, fits, None if interleaved else limit
    )
    if choice is not None:
        defaults.append(choice.note())
    if choice is None or choice.microbatch == r.microbatch:
        # the scenario as given (micro-batch unset); a probe of the same size lowered the same
        # step (_build_step reads the resolved micro-batch, not the scenario's field)
        hit = built.get(r.microbatch)
        return (sc, r, hit[2], hit[3]) if hit else (sc, r, *_build_step(sc, r, workload_fn))
    if choice.microbatch in built:
        return built[choice.microbatch]
    sc = replace(sc, microbatch=choice.microbatch)
    r = resolve(sc)
    step, costs = _build_step(sc, r, workload_fn)
    return sc, r, step, costs


def predict(
    sc: Scenario,
    *,
    workload_fn: WorkloadFn | None = None,
    baseline: bool = True,
    _baseline: bool = False,
) -> StepReport:
    """Predict one training step of ``sc``.

    ``workload_fn(batch_size=, precision=, tp=, sequence_parallel=) -> Workload`` replaces the
    zoo lookup of ``sc.model`` (a model of your own built from ``perfmodel.workload`` layers);
    ``sc.model`` is then only its name in reports.

    ``baseline=False`` skips the 1-GPU baseline prediction (:func:`baseline_scenario`): the
    report's ``speedup`` and ``scaling_efficiency`` are then ``None``, everything else is the
    same. Plan search and sweeps that only rank step times save one prediction per call.
    Baseline throughputs of zoo models are cached per baseline scenario
    (:meth:`Scenario.content_hash`), so scenarios sharing a baseline compute it once; so are
    whole reports (the last 256; :class:`StepReport` is immutable), so a repeated question of a
    sweep or search costs a hash and a lookup.

    Returns a :class:`~perfmodel.report.step.StepReport`; a plan that does not fit in GPU
    memory is reported with ``fits_in_memory=False`` (not raised).

    Raises
    ------
    ConfigError, InfeasiblePlanError
        Bad input, or a plan that does not divide the GPUs, layers, heads or batch.
    """
    key = None
    if workload_fn is None:  # zoo model: the scenario and the profile's stamp decide the report
        stamp = _file_stamp(str(sc.calibration)) if sc.calibration else None
        key = f"{sc.content_hash()}:{stamp}:{baseline}:{_baseline}"
        hit = _REPORTS.get(key)
        if hit is not None:
            return hit
    with fewer_collections():  # perfmodel._gc: ~15% of a cold prediction's CPU was collector
        report = _predict(
            sc,
            r=resolve(sc),
            workload_fn=workload_fn,
            baseline=baseline and not _baseline,
            is_baseline=_baseline,
        )
    if key is not None:
        if len(_REPORTS) >= _MAX_REPORTS:
            _REPORTS.pop(next(iter(_REPORTS)), None)  # oldest first
        _REPORTS[key] = report
    return report


#: Speedup baselines of zoo-model scenarios (:func:`_baseline_value`): ``(throughput, fits,
#: defaults)`` by (baseline scenario content hash, profile stamp, kind); small values, so many
#: (a sweep's rows have as many distinct baselines as model, batch, precision and software
#: combinations).
_BASELINES: BoundedMemo[tuple[str, int | None, str], tuple[float, bool, tuple[str, ...]]] = (
    BoundedMemo(65_536)
)

#: Reports of zoo-model scenarios by content hash, profile stamp and baseline flags (StepReport is
#: immutable, so a repeated question is answered by the same value); at most ``_MAX_REPORTS``.
_REPORTS: dict[str, StepReport] = {}
_MAX_REPORTS = 256


def _predict(
    sc: Scenario,
    *,
    r: Resolved,
    workload_fn: WorkloadFn | None,
    baseline: bool,
    is_baseline: bool = False,
) -> StepReport:
    """:func:`predict` without its report cache (``is_baseline``: the prediction is another
    one's speedup baseline, whose choices that run states itself)."""
    defaults: list[str] = []  # choices made for the user, printed with the reason
    fp8 = None if r.recipe is None else r.recipe.fp8
    if fp8 is not None and r.parsed.fp8_recipe is None and not is_baseline:
        defaults.append(
            f"FP8 recipe {fp8.value}, the {r.preset.name} preset's (--fp8-recipe chooses another)"
        )
    sc, r, step, costs = _auto_microbatch(sc, r, workload_fn, defaults)
    timeline, fidelity = _run(step, r.fidelity, r.topology, costs)
    T_gpu = max(timeline.makespan_s, step.min_period_s)
    if T_gpu <= 0:
        raise PerfModelError(f"predicted a non-positive iteration time {T_gpu!r} for {sc.model}")
    dev = critical_device(timeline)  # the GPU the breakdown and the kernel classes read
    bd = breakdown(timeline, dev, period_s=T_gpu)
    # a synchronous step waits for its slowest GPU (perfmodel.parallel.straggler)
    wait = straggler_wait_s(bd.compute_s, step.num_gpus)
    T = T_sync = T_gpu + wait
    notes, feed = step.graph.notes, _input_pipeline(sc, r, step, costs)
    notes = (*notes, *hardware_notes(r.topology), *_host_memory_notes(r.topology, r.num_gpus))
    if feed is not None:  # the host's input pipeline bounds (prefetch) or lengthens the step
        notes = (*notes, feed.describe(T))
        T = feed.step_time(T)
    samples = step.samples_per_step
    thr = samples / T
    if T != T_sync or wait:  # beyond the simulated period: idle (breakdown's rule), the wait
        bd = replace(bd, bubble_s=bd.bubble_s + (T - T_sync), sync_wait_s=wait)
    worst = max(step.memory, key=lambda m: m.total_bytes)
    peak_dtype = r.precision.matmul_dtype
    if _tf32_convolutions(sc, r, workload_fn):
        peak_dtype = DType.TF32  # the convolutions' math, which the step's FLOP are
        notes = (*notes, TF32_CONV_NOTE)
    peak = float(r.topology.gpu_spec().peak(peak_dtype))
    per_gpu_flops = step.model_flop_per_step / T / step.num_gpus
    if peak > 0 and per_gpu_flops > peak:  # say why, instead of a bare 156% (issue 28)
        notes = (
            *notes,
            "note: MFU above 100%: it counts the model's FLOP as direct convolutions; the "
            "device runs them as fewer operations (Winograd/FFT, ComputeParams."
            f"winograd_speedup), so they beat its {peak_dtype.value} GEMM peak of "
            f"{peak / 1e12:.3g} TFLOP/s",
        )
    epoch = None
    if r.parsed.dataset_size is not None:
        epoch = math.ceil(r.parsed.dataset_size / samples) * T
    speedup = eff = None
    base_gpus = 1
    if r.plan.recompute is Recompute.SELECTIVE and r.recipe is not None:
        wl, _ = _step_workload(sc, r, workload_fn)
        rule = r.recipe.selective_recompute
        if not any(rule.share(la) > 0 for la in distinct_layers(wl.layers)):
            defaults.append(  # a silent no-op before (issue 28, item 6)
                f"recompute=selective re-runs nothing for {sc.model}: {r.preset.name}'s selective "
                f"recomputation ({rule.value}) re-runs no layer of it (fused or no attention); "
                "--recompute full re-runs whole blocks"
            )
    fits = all(m.fits for m in step.memory)
    if baseline and not fits:  # a run that cannot start has no speedup (issue 28, item 3)
        defaults.append("no speedup: this run does not fit in GPU memory")
    elif baseline:
        base = _speedup_baseline(sc, r, workload_fn, (step.num_gpus, thr, fits))
        base_gpus = base.gpus
        speedup = thr / base.throughput_samples_per_s
        eff = speedup * base.gpus / step.num_gpus
        if base.note:
            against = "" if base.gpus == 1 else f"speedup against {base.gpus} GPUs: "
            defaults.append(against + base.note)
    classes, stage = _kernel_classes(step, r, costs, bd.optimizer_s, sc, workload_fn, dev)
    device = "CPU" if r.topology.gpu_spec().architecture == "CPU" else "GPU"
    explanation = _explanation(bd, classes, T, r, costs, step, stage, device)
    plan_d = r.plan.to_dict()
    plan_d["describe"] = r.plan.describe()
    plan_d["software"] = r.preset.name
    plan_d["memory_format"] = r.memory_format
    if r.recipe is not None:
        plan_d["recipe"] = r.recipe.to_dict()
    return StepReport(
        iteration_time_s=T,
        throughput_samples_per_s=thr,
        samples_per_step=samples,
        num_gpus=step.num_gpus,
        breakdown=bd,
        memory=worst,
        memory_per_stage=step.memory,
        model_flops_per_gpu_per_s=per_gpu_flops,
        mfu=per_gpu_flops / peak if peak > 0 else 0.0,
        epoch_time_s=epoch,
        speedup=speedup,
        scaling_efficiency=eff,
        fidelity=fidelity,
        plan=plan_d,
        scenario=sc.to_dict(),
        staleness=dict(step.staleness),
        notes=notes,
        timeline=timeline,
        baseline_gpus=base_gpus,
        defaults=tuple(defaults),
        tokens_per_sample=step.tokens_per_sample,
        device=device,
        kernel_classes=classes,
        explanation=explanation,
    )


def hardware_notes(topology: Topology) -> tuple[str, ...]:
    """What a report says about the hardware itself: a GPU whose figures are datasheet only
    (:func:`perfmodel.hardware.gpus.datasheet_note`), the cloud instance a system names
    (its transport and dated list price, :class:`perfmodel.topology.model.CloudSpec`), and the
    assumptions an imported machine's system file states (``[system] assumptions``)."""
    from perfmodel.hardware.gpus import datasheet_note

    out = []
    note = datasheet_note(topology.gpu_spec())
    if note is not None:
        out.append(note)
    if topology.cloud is not None:
        out.append(topology.cloud.describe())
    stated = topology.meta.get("assumptions")
    if stated:  # an imported machine (topo import -o): what the import could not know
        n = len(stated)
        out.append(
            f"hardware: {topology.source} is an imported machine (perfmodel topo import); it "
            f"rests on {n} stated assumption{'s' if n != 1 else ''}, e.g. {stated[0]!r} "
            f"(perfmodel topo show {topology.source} lists them)"
        )
    return tuple(out)


def gpus_per_host(topology: Topology) -> int:
    """GPUs one host (operating system) drives: a server's GPUs, or one compute tray's in a
    rack-scale server whose nodes name their tray (GB200 NVL72: 4 of 72); what the per-server
    failure rate of :class:`perfmodel.report.goodput.Reliability` is charged per."""
    g = topology.graph
    trays = {g.nodes[n]["tray"] for n in topology.server_nodes(0) if "tray" in g.nodes[n]}
    per = topology.gpus_per_node
    return max(1, per // len(trays)) if len(trays) > 1 else per


def checkpoint_bytes(sc: Scenario, report: StepReport | None = None) -> float:
    """Bytes of one training checkpoint of the scenario's model: its parameters times the
    recipe's weight, FP32 master and optimizer-state bytes per parameter (gradients are not
    saved), 14 per parameter for BF16 with Adam (:mod:`perfmodel.report.goodput`)."""
    if report is not None and report.scenario:
        sc = Scenario.from_dict(report.scenario)
    r = resolve(sc)
    wl, _ = _step_workload(sc, r, None)
    params = float(wl.total_params or wl.params * r.plan.tp)
    rc = r.recipe
    per_param = (rc.param_bytes + rc.state_bytes) if rc is not None else r.precision.param_bytes
    return params * per_param


def run_estimate(
    sc: Scenario,
    report: StepReport,
    tokens: float,
    *,
    pricing: Any = None,
    reliability: Any = None,
    storage: Any = None,
    interval_s: float | None = None,
) -> Any:
    """Energy, cost and goodput of training ``tokens`` tokens at ``report``'s step time
    (:class:`perfmodel.report.goodput.RunEstimate`): the ideal time of
    :meth:`StepReport.token_budget`, interruptions at the
    :class:`~perfmodel.report.goodput.Reliability` rates over the report's GPUs and hosts
    (:func:`gpus_per_host`), checkpoints of :func:`checkpoint_bytes` on
    :class:`~perfmodel.report.goodput.Storage`, Daly's interval (or ``interval_s``), and the
    step's energy (:func:`perfmodel.report.goodput.step_energy`).

    Raises
    ------
    ConfigError
        A non-sequence model, a bad budget, or a non-positive rate, bandwidth or interval.
    """
    from perfmodel.report.goodput import RunEstimate, goodput, step_energy

    budget = report.token_budget(tokens, pricing)
    topo = topology_of(Scenario.from_dict(report.scenario) if report.scenario else sc)
    hosts = math.ceil(report.num_gpus / gpus_per_host(topo))
    step_s = report.iteration_time_s
    g = goodput(
        ideal_s=budget.time_s,
        step_s=step_s,
        gpus=report.num_gpus,
        nodes=hosts,
        checkpoint_bytes=checkpoint_bytes(sc, report),
        reliability=reliability,
        storage=storage,
        interval_s=interval_s,
    )
    b = report.breakdown
    energy = step_energy(
        topo.gpu_spec(),
        num_gpus=report.num_gpus,
        iteration_time_s=step_s,
        busy_s=b.compute_s + b.optimizer_s,
        tokens_per_step=float(report.samples_per_step * report.tokens_per_sample),
    )
    return RunEstimate(
        tokens=float(tokens),
        goodput=g,
        energy=energy,
        steps=budget.steps,
        price_per_gpu_hour=None if pricing is None else pricing.price_per_gpu_hour,
        price_source="" if pricing is None else budget.price_source,
    )


def _kernel_classes(
    step: LoweredStep,
    r: Resolved,
    costs: SystemCosts,
    optimizer_s: float,
    sc: Scenario,
    workload_fn: WorkloadFn | None,
    device: str,
) -> tuple[dict[str, float], int]:
    """Kernel seconds of one step by class on the pipeline stage of ``device`` (the critical
    GPU the breakdown reads; where the lowering does not say which stage a GPU runs, the stage
    with the most kernel time) and that stage's index
    (:func:`perfmodel.compute.model.kernel_class_seconds`), with its recomputation (full:
    every block's forward again; selective: the recipe's per-layer shares, as the lowering
    charged them) and the breakdown's ``optimizer`` seconds; empty (stage -1) when the lowering
    recorded no stage layers."""
    from perfmodel.compute.model import kernel_class_seconds
    from perfmodel.parallel.plan import Recompute

    if not step.stage_layers:
        return {}, -1
    plan = r.plan
    rc = r.recipe
    share = None
    if plan.recompute is Recompute.FULL:
        share = lambda la: 1.0 if la.block is not None else 0.0  # noqa: E731
    elif plan.recompute is Recompute.SELECTIVE and rc is not None:
        # the per-layer shares the lowering charged (torchtitan's op-level checkpoint knows
        # each block's matrix products, SelectiveRecompute.share_for), not the layer-alone mean
        share = rc.selective_recompute.share_for(_step_workload(sc, r, workload_fn)[0])

    def of(chunks: Sequence[Any]) -> dict[str, float]:
        return kernel_class_seconds(
            chunks,
            costs.layer_detail,
            r.precision,
            microbatches=step.microbatches,
            recompute_share=share,
        )

    if device in step.stage_devices:
        stage = step.stage_devices.index(device)
        best = of(step.stage_layers[stage])
    else:
        stage, best = -1, {}
        for i, chunks in enumerate(step.stage_layers):
            got = of(chunks)
            if stage < 0 or sum(got.values()) > sum(best.values()):
                stage, best = i, got
    if optimizer_s > 0:
        best["optimizer"] = best.get("optimizer", 0.0) + optimizer_s
    return best, stage


def _optimizer_text(rc: Recipe | None) -> str:
    """How the recipe's optimizer step runs, for the explanation's optimizer row."""
    if rc is None:
        return "fused optimizer step"
    from perfmodel.workload.kernels import GradClip

    clip = "" if rc.grad_clip is GradClip.NONE else f" after {rc.grad_clip.value} clipping"
    return f"{rc.optimizer_impl.value} {rc.optimizer.value} step{clip}"


def _explanation(
    bd: Any,
    classes: dict[str, float],
    T: float,
    r: Resolved,
    costs: SystemCosts,
    step: LoweredStep,
    stage: int,
    device: str,
) -> Any:
    """The step's :class:`~perfmodel.report.explain.StepExplanation` (``predict --explain``),
    ``None`` without kernel classes. The attention ceiling is the one of the stage's first
    fused attention layer (the blocks of a stack share its shape)."""
    from perfmodel.report.explain import StepContext, explain_step, kernel_ceilings
    from perfmodel.workload.layers import LayerKind, layer_runs

    if not classes:
        return None
    attention = None
    if "attention" in classes and stage >= 0:
        for chunk in step.stage_layers[stage]:
            la = next(
                (
                    la
                    for block, _ in layer_runs(chunk)
                    for la in block
                    if la.kind is LayerKind.ATTENTION and la.gemm is not None
                ),
                None,
            )
            if la is not None:
                attention = costs.compute.attention(la)
                break
    params = costs.compute.params
    rc = r.recipe
    ceilings = kernel_ceilings(
        classes,
        params,
        costs.gpu_spec,
        attention=attention,
        fusion="eager" if rc is None else rc.fusion.value,
        fp8=None if rc is None else rc.fp8,
        optimizer=_optimizer_text(rc),
    )
    plan = r.plan
    tuner = costs.comm.tuner
    ctx = StepContext(
        preset=r.preset,
        num_gpus=step.num_gpus,
        pp=plan.pp,
        interleave=plan.interleave,
        microbatches=step.microbatches,
        schedule=plan.schedule.value,
        nccl_release=str(tuner.release),
        nccl_source=str(tuner.source),
        host_dispatch_s=params.host_dispatch_s,
        sm_count=params.sm_count,
    )
    return explain_step(bd, classes, T, ceilings, ctx, device=device)


#: Printed with an FP32 CNN prediction under a PyTorch preset on a GPU with TF32 (issue 28).
TF32_CONV_NOTE = (
    "note: fp32 as PyTorch runs it: convolutions on TF32 tensor cores "
    "(torch.backends.cudnn.allow_tf32 defaults to True), matmuls in FP32 "
    "(torch.backends.cuda.matmul.allow_tf32 defaults to False); MFU against the TF32 peak"
)


def _tf32_convolutions(sc: Scenario, r: Resolved, workload_fn: WorkloadFn | None) -> bool:
    """Whether an FP32 run of a zoo CNN does its convolutions in TF32: the recipe says so
    (:attr:`~perfmodel.parallel.recipe.Recipe.fp32_conv_tf32`, the PyTorch presets) and the
    GPU has TF32 tensor cores (Ampere and newer)."""
    if workload_fn is not None or r.recipe is None or not r.recipe.fp32_conv_tf32:
        return False
    if DType.TF32 not in r.topology.gpu_spec().peak_flops:
        return False
    from perfmodel.workload.zoo import get_model_info

    try:
        return get_model_info(sc.model).family == "cnn"
    except PerfModelError:
        return False


@lru_cache(maxsize=64)
def _host_memory_notes(topo: Topology, num_gpus: int) -> tuple[str, ...]:
    """:func:`perfmodel.report.notes.host_memory_notes` of the run's GPUs (the topology's
    first ``num_gpus``), cached per topology (hashed by identity) and count: notes are data on
    the report, so every view prints them (issue 28, item 4)."""
    from perfmodel.report.notes import host_memory_notes

    return host_memory_notes(topo, topo.gpus[:num_gpus])


def chakra_metadata(sc: Scenario, report: StepReport) -> dict[str, object]:
    """What an exported Chakra trace says of its run (``perfmodel_<key>`` metadata,
    :func:`perfmodel.report.chakra.write_chakra`), so ``model import-chakra`` of perfmodel's own
    export needs no ``--gpu``, ``--params``, ``--batch`` or ``--precision`` (issue 28, item 9):
    the GPU, the model's and one tensor-parallel rank's parameters, the precision and the
    gradient bytes on the wire per parameter, the software preset, the plan's degrees, the
    per-replica batch and the micro-batch."""
    sc = Scenario.from_dict(report.scenario) if report.scenario else sc
    r = resolve(sc)
    plan = r.plan
    out: dict[str, object] = {
        "gpu": r.topology.gpu_spec().name,
        "model": sc.model,
        "precision": r.precision.value,
        "software": r.preset.name,
        "dp": plan.dp,
        "tp": plan.tp,
        "pp": plan.pp,
        "cp": plan.cp,
        "ep": plan.ep,
        "batch_per_replica": r.batch_per_replica,
        "microbatch": r.microbatch,
    }
    if r.recipe is not None:
        out["grad_reduce_bytes"] = r.recipe.grad_reduce_bytes
    try:  # the zoo model's parameters: whole model, and one tensor-parallel rank's shard
        wl, _ = _step_workload(sc, r, None)
        out["rank_params"] = int(wl.params)
        out["model_params"] = int(wl.total_params or wl.params * plan.tp)
    except PerfModelError:
        pass
    return out


@lru_cache(maxsize=16)
def _host_profile(path: str, _stamp: int | None) -> tuple[bool, Mapping[Any, float]]:
    """``(input only, per-sample costs)`` of a calibration profile's ``input`` measurements
    (``calibrate --only input``); cached per (path, :func:`_file_stamp`)."""
    from perfmodel.calibration.profile import read_profile
    from perfmodel.host.measure import input_costs_of, input_only

    ms = read_profile(path).measurements
    return input_only(ms), input_costs_of(ms)


def _host_only_profile(path: str | None) -> bool:
    """A ``calibrate --only input`` profile: the host loader's costs only, for any system."""
    return bool(path) and _host_profile(str(path), _file_stamp(str(path)))[0]


def _input_pipeline(
    sc: Scenario, r: Resolved, step: LoweredStep, costs: SystemCosts
) -> InputPipeline | None:
    """The scenario's input pipeline (:mod:`perfmodel.host.input_pipeline`); ``None`` when the
    data are synthetic (``dataset`` unset or ``synthetic``)."""
    if r.parsed.dataset is None:
        return None
    measured = None
    if sc.calibration:  # per-sample costs measured on the user's CPU (calibrate --only input)
        measured = _host_profile(str(sc.calibration), _file_stamp(str(sc.calibration)))[1]
    return input_pipeline(
        dataset=r.parsed.dataset,
        preset=r.preset.name,
        topology=r.topology,
        gpus=r.topology.gpus[: r.num_gpus],
        replicas=r.plan.dp,
        samples_per_step=step.samples_per_step,
        costs=costs,
        loader=r.parsed.data_loader,
        workers=sc.data_loader_workers,
        cpu_s_per_sample=measured,
    )


def baseline_scenario(sc: Scenario, r: Resolved | None = None) -> Scenario:
    """One GPU of the same system, model and software: the reference of ``speedup``.

    What stays fixed follows the batch key the scenario uses. ``global_batch`` with pure data
    parallelism is *strong scaling*: the baseline runs the whole global batch on one GPU (the
    1-GPU row of a ``--global-batch`` curve), so the speedup is the ratio of the rows.
    ``batch_per_gpu`` (and Krizhevsky's hybrid, and Crossbow learners) is *weak scaling*: the
    baseline runs one replica's batch. Model-parallel plans: the global batch divided by the GPUs
    (at least 1), the samples one GPU handles. The baseline uses the analytic executor (one GPU
    has no contention).
    """
    r = r or resolve(sc)
    n = r.num_gpus
    plan = r.plan
    strong = (
        sc.global_batch is not None
        and plan.tp == 1
        and plan.pp == 1
        and plan.cp == 1
        and plan.hybrid is not Hybrid.ONE_WEIRD_TRICK
        and plan.learners_per_gpu == 1
    )
    if strong:
        per_gpu = r.batch_per_replica * plan.dp
    elif (plan.tp == 1 and plan.pp == 1) or plan.hybrid is Hybrid.ONE_WEIRD_TRICK:
        per_gpu = r.batch_per_replica
    else:
        per_gpu = max(1, r.batch_per_replica * plan.dp // n)
    return replace(
        sc,
        gpus=1,
        nodes=1,
        dp=None,
        tp=1,
        pp=1,
        microbatch=None,
        schedule="1f1b",
        interleave=1,
        sequence_parallel=False,
        zero=0,
        hybrid=None,
        dp_mode=None,
        hsdp=None,
        ep=1,
        cp=1,
        etp=None,
        cp_comm=None,
        ep_overlap=False,
        moe_dispatcher=None,
        batch_per_gpu=per_gpu,
        global_batch=None,
        fidelity="analytic",
        software=sc.software,  # zero=0: an FSDP preset runs unsharded, same recipe
    )


def predict_curve(
    sc: Scenario, gpus: Sequence[int], *, workload_fn: WorkloadFn | None = None
) -> list[StepReport]:
    """Predictions for each GPU count (speedup vs 1 GPU of the same system).

    Keeps ``tp``/``pp`` and lets ``dp`` follow the GPU count; adds servers when a count exceeds
    one server's GPUs. Points that do not fit in memory come back with ``fits_in_memory=False``.
    """
    topo1 = topology_of(replace(sc, nodes=1))
    p = parse_scenario(sc)
    owt = p.hybrid is Hybrid.ONE_WEIRD_TRICK
    min_nodes = p.nodes
    out: list[StepReport] = []
    for g in gpus:
        gi = pos_int(g, "gpus")
        nodes = max(min_nodes, math.ceil(gi / topo1.gpus_per_node))
        tp = gi if owt else sc.tp
        out.append(
            predict(replace(sc, gpus=gi, nodes=nodes, dp=None, tp=tp), workload_fn=workload_fn)
        )
    return out


__all__ = [
    "FIDELITIES",
    "Fidelity",
    "Scenario",
    "StepReport",
    "baseline_scenario",
    "predict",
    "predict_curve",
    "resolve",
    "system_costs",
    "topology_of",
]
