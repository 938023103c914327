"""A :class:`~perfmodel.scenario.Scenario` parsed once, at the edge, into typed values.

``Scenario`` keeps what the user wrote (the ``perfmodel predict`` flags, a scenario file's keys,
a sweep axis): text such as ``precision="bf16"``, ``schedule="1f1b"``, ``placement="tp,dp,pp"``.
:func:`parse_scenario` turns every such field into its type (enums, the
:class:`~perfmodel.parallel.software.SoftwarePreset`, positive integers, a placement order) in
one step, raising a typed :class:`~perfmodel.errors.ConfigError` that names the field
(``where="scenario.<field>"``). :func:`perfmodel.api.resolve` calls it once; everything below
``api.py`` (``parallel/``, ``compute/``, the recipe and the lowering) receives typed values only
(``docs/design.md``, "Strings from files and flags are parsed into typed values once, at the
edge").

>>> from perfmodel.scenario import Scenario
>>> p = parse_scenario(Scenario(precision="BF16", optimizer="AdamW", schedule="pipedream-flush",
...                             batch_per_gpu=8, placement="tp, dp, pp"))
>>> p.precision.value, p.optimizer.value, p.schedule.value, p.placement
('bf16', 'adamw', '1f1b', ('tp', 'dp', 'pp'))
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfmodel._enum import parse_enum
from perfmodel.compute.params import parse_memory_format
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.host.input_pipeline import DatasetKind, LoaderKind, parse_dataset, parse_loader
from perfmodel.parallel.placement import DEFAULT_ORDER
from perfmodel.parallel.plan import (
    CPComm,
    DPMode,
    Hybrid,
    MoEDispatcher,
    PipelineSchedule,
    PSHost,
    Recompute,
)
from perfmodel.parallel.pp_layout import PipelineLayout, parse_pipeline_layout
from perfmodel.parallel.software import SoftwarePreset, get_preset, with_software_options
from perfmodel.workload.kernels import Fp8Recipe
from perfmodel.workload.memory import Optimizer, RecomputeModule

if TYPE_CHECKING:
    from perfmodel.scenario import Scenario


class Fidelity(str, enum.Enum):
    """How :func:`perfmodel.api.predict` executes the task graph."""

    SIMULATED = "simulated"  # SimPy, communication replayed as flows on the topology's links
    ANALYTIC = "analytic"  # list schedule with closed-form communication times (fast path)


#: Largest batch of one data-parallel replica a scenario may ask for, samples (2**20).
#: Published large-batch training stops well below it: 65,536 images globally for ImageNet
#: (Ying et al. 2018, "Image Classification at Supercomputer Scale", TPU v3 pod) and for BERT
#: (You et al. ICLR 2020, LAMB), so one replica never needs more; above it the automatic
#: micro-batch search walks ever larger accumulation loops (a batch of 10**7 per GPU took over
#: a minute). Refused at parse time, naming the flag or key (issue 28, item 11).
MAX_BATCH_PER_REPLICA = 2**20

#: Largest global batch, samples: :data:`MAX_BATCH_PER_REPLICA` on each GPU of the largest
#: cluster accepted (:data:`perfmodel.topology.cluster.MAX_CLUSTER_GPUS`, 16,384 = 2**14).
MAX_GLOBAL_BATCH = MAX_BATCH_PER_REPLICA * 2**14


@dataclass(frozen=True)
class ParsedScenario:
    """Every text field of a scenario as its type (no derivation: the plan is built from this
    by :func:`perfmodel.api.resolve`, which knows the topology).

    Integers are positive where the scenario requires it (``None`` where the field may be
    unset); ``zero`` is the ZeRO stage as given (``None``: the preset's); ``hsdp`` is 0 when
    unset (shard over all of ``dp``), and ``etp`` 0 (expert tensor parallelism = ``tp``); ``schedule`` is already ``interleaved`` when
    ``interleave > 1`` names it; ``dp_mode`` is ``None`` when the preset's applies;
    ``memory_format`` is ``"nhwc"``/``"nchw"`` or ``None`` (the preset's); ``dataset`` and
    ``data_loader`` are ``None`` when unset (no input pipeline; the preset's loader);
    ``cp_comm`` is ``CPComm.RING`` when unset and ``ep_overlap`` must be a bool;
    ``moe_dispatcher`` is ``MoEDispatcher.ALLTOALL`` when unset; ``compile`` is ``None`` when
    unset (the preset's kernels) and ``fp8_recipe`` ``None`` when unset (the preset's FP8 recipe
    under ``precision="fp8"``).
    """

    fidelity: Fidelity
    precision: Precision
    optimizer: Optimizer
    preset: SoftwarePreset
    nodes: int
    gpus: int | None
    dp: int | None
    tp: int
    pp: int
    batch_per_gpu: int | None
    global_batch: int | None
    microbatch: int | None
    schedule: PipelineSchedule
    interleave: int
    recompute: Recompute
    sequence_parallel: bool
    zero: int | None
    learners_per_gpu: int
    dp_mode: DPMode | None
    hybrid: Hybrid
    sync_period: int
    ps_host: PSHost
    ps_shards: int
    hsdp: int
    ep: int
    cp: int
    etp: int
    cp_comm: CPComm
    ep_overlap: bool
    moe_dispatcher: MoEDispatcher
    placement: tuple[str, str, str]
    memory_format: str | None
    dataset_size: int | None
    dataset: DatasetKind | None
    data_loader: LoaderKind | None
    compile: bool | None = None
    fp8_recipe: Fp8Recipe | None = None
    recompute_modules: frozenset | None = None
    pipeline_layout: PipelineLayout | None = None


def _where(name: str) -> str:
    return f"scenario.{name}"


def _integral(v: Any) -> int | None:
    """``v`` as an int where it is an integral number (an int, an integral float or a numpy
    integer; never a bool or text), else ``None``: the integers of a :class:`Scenario`.

    >>> _integral(4.0), _integral(4.5), _integral(True), _integral("4"), _integral(float("inf"))
    (4, None, None, None, None)
    """
    if isinstance(v, bool):
        return None
    try:
        iv = int(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: inf
        return None
    return iv if iv == v else None


def pos_int(v: Any, name: str, *, allow_none: bool = False) -> int | None:
    """``v`` as a positive int (:func:`_integral`: an integral float or numpy integer too;
    never a bool).

    ``name`` is the scenario field, named in the error as ``scenario.<name>``.

    >>> pos_int(4.0, "tp"), pos_int(None, "gpus", allow_none=True)
    (4, None)
    """
    if v is None and allow_none:
        return None
    iv = _integral(v)
    if iv is not None and iv >= 1:
        return iv
    where = _where(name)
    raise ConfigError(f"{where} must be a positive integer, got {v!r}", value=v, where=where)


def batch_int(
    v: Any, name: str, *, allow_none: bool = False, limit: int | None = None
) -> int | None:
    """:func:`pos_int` of a batch key, at most ``limit`` samples (default
    :data:`MAX_BATCH_PER_REPLICA`).

    >>> batch_int(64, "batch_per_gpu")
    64
    >>> batch_int(2**40, "batch_per_gpu")
    Traceback (most recent call last):
    ...
    perfmodel.errors.ConfigError: scenario.batch_per_gpu 1099511627776 is above the largest batch accepted, 1048576 samples (2**20)
    """
    iv = pos_int(v, name, allow_none=allow_none)
    cap = MAX_BATCH_PER_REPLICA if limit is None else limit
    if iv is not None and iv > cap:
        where = _where(name)
        raise ConfigError(
            f"{where} {iv} is above the largest batch accepted, {cap} samples "
            f"(2**{cap.bit_length() - 1})",
            value=v,
            where=where,
        )
    return iv


def parse_placement(text: object, *, where: str = _where("placement")) -> tuple[str, str, str]:
    """A placement order (``"tp,dp,pp"``, fastest first) as a tuple of the three dimensions.

    >>> parse_placement("tp, pp,dp")
    ('tp', 'pp', 'dp')

    Raises
    ------
    ConfigError
        If the text is not a permutation of ``tp,dp,pp``.
    """
    if isinstance(text, str):
        order = tuple(s.strip() for s in text.split(","))
    else:
        order = tuple(str(s) for s in text)  # type: ignore[attr-defined]
    if sorted(order) != sorted(DEFAULT_ORDER):
        raise ConfigError(
            f"placement order {','.join(order)!r} must be a permutation of {','.join(DEFAULT_ORDER)}",
            value=text,
            where=where,
        )
    return order  # type: ignore[return-value]


def _zero(v: Any) -> int | None:
    """``v`` as a ZeRO stage 0-3 (:func:`_integral`: never a bool or text), or ``None``.

    >>> _zero(2.0), _zero(None)
    (2, None)
    """
    if v is None:
        return None
    iv = _integral(v)
    if iv is not None and 0 <= iv <= 3:
        return iv
    raise ConfigError(f"zero={v!r}: ZeRO stage must be 0, 1, 2 or 3", value=v, where=_where("zero"))


def _flag(v: Any, name: str) -> bool:
    """``v`` if it is ``True`` or ``False``: a :class:`Scenario` holds real booleans (text from
    files and axes is converted at the edge by :func:`perfmodel._schema.parse_flag`)."""
    if not isinstance(v, bool):
        where = _where(name)
        raise ConfigError(f"{where} must be true or false, got {v!r}", value=v, where=where)
    return v


def nccl_env_pairs(value: Any, *, where: str = "scenario.nccl_env") -> tuple[tuple[str, str], ...]:
    """A scenario's ``nccl_env`` as sorted ``(name, value)`` pairs, checked by NCCL's rules
    (:meth:`perfmodel.comm.nccl_env.NcclEnv.of`: any form a scenario states it in, a parsed
    ``NcclEnv`` included; a :class:`~perfmodel.errors.ConfigError` naming the variable and
    ``where``); ``None`` is none.

    >>> nccl_env_pairs(["NCCL_PROTO=^LL128", "NCCL_NVLS_ENABLE=0"])
    (('NCCL_NVLS_ENABLE', '0'), ('NCCL_PROTO', '^LL128'))
    >>> nccl_env_pairs(nccl_env_pairs(["NCCL_PROTO=^LL128"]))  # idempotent
    (('NCCL_PROTO', '^LL128'),)
    """
    from perfmodel.comm.nccl_env import NcclEnv

    return NcclEnv.of(value, where=where).variables


def parse_scenario(sc: Scenario) -> ParsedScenario:
    """All of ``sc``'s string -> type conversion, in one place (see the module docstring).

    Raises
    ------
    ConfigError
        Naming the field (``where="scenario.<field>"``) and the value.
    """
    if (sc.batch_per_gpu is None) == (sc.global_batch is None):
        raise ConfigError(
            "give exactly one of batch_per_gpu (--batch-per-gpu) and global_batch (--global-batch)",
            value=(sc.batch_per_gpu, sc.global_batch),
            where="batch",
        )
    interleave = pos_int(sc.interleave, "interleave")
    schedule = PipelineSchedule.parse(sc.schedule, where=_where("schedule"))
    if interleave > 1 and schedule is PipelineSchedule.ONE_F_ONE_B:
        schedule = PipelineSchedule.INTERLEAVED  # interleave=v > 1 names the interleaved 1F1B
    mf = sc.memory_format
    preset = with_software_options(
        get_preset(sc.software, where=_where("software")),
        dict(sc.software_options or {}),
        where=_where("software_options"),
    )
    tp = pos_int(sc.tp, "tp")
    return ParsedScenario(
        fidelity=parse_enum(Fidelity, sc.fidelity, where=_where("fidelity"), noun="fidelity"),
        precision=Precision.parse(sc.precision, where=_where("precision")),
        optimizer=Optimizer.parse(sc.optimizer, where=_where("optimizer")),
        preset=preset,
        nodes=pos_int(sc.nodes, "nodes"),
        gpus=pos_int(sc.gpus, "gpus", allow_none=True),
        dp=pos_int(sc.dp, "dp", allow_none=True),
        tp=tp,
        pp=pos_int(sc.pp, "pp"),
        batch_per_gpu=batch_int(sc.batch_per_gpu, "batch_per_gpu", allow_none=True),
        global_batch=batch_int(
            sc.global_batch, "global_batch", allow_none=True, limit=MAX_GLOBAL_BATCH
        ),
        microbatch=batch_int(sc.microbatch, "microbatch", allow_none=True),
        schedule=schedule,
        interleave=interleave,
        recompute=Recompute.parse(sc.recompute, where=_where("recompute")),
        sequence_parallel=(
            preset.sequence_parallel_with_tp and tp > 1
            if sc.sequence_parallel is None
            else _flag(sc.sequence_parallel, "sequence_parallel")
        ),
        zero=_zero(sc.zero),
        learners_per_gpu=pos_int(sc.learners_per_gpu, "learners_per_gpu"),
        dp_mode=DPMode.parse(sc.dp_mode, where=_where("dp_mode")) if sc.dp_mode else None,
        hybrid=Hybrid.parse(sc.hybrid, where=_where("hybrid")),
        sync_period=pos_int(sc.sync_period, "sync_period"),
        ps_host=PSHost.parse(sc.ps_host, where=_where("ps_host")),
        ps_shards=pos_int(sc.ps_shards, "ps_shards"),
        hsdp=pos_int(sc.hsdp, "hsdp", allow_none=True) or 0,
        ep=pos_int(sc.ep, "ep"),
        cp=pos_int(sc.cp, "cp"),
        etp=pos_int(sc.etp, "etp", allow_none=True) or 0,
        cp_comm=CPComm.parse(sc.cp_comm, where=_where("cp_comm")),
        ep_overlap=_flag(sc.ep_overlap, "ep_overlap"),
        moe_dispatcher=MoEDispatcher.parse(sc.moe_dispatcher, where=_where("moe_dispatcher")),
        placement=parse_placement(sc.placement),
        memory_format=None
        if mf is None
        else parse_memory_format(mf, where=_where("memory_format")),
        dataset_size=pos_int(sc.dataset_size, "dataset_size", allow_none=True),
        dataset=None if sc.dataset is None else parse_dataset(sc.dataset, where=_where("dataset")),
        data_loader=None
        if sc.data_loader is None
        else parse_loader(sc.data_loader, where=_where("data_loader")),
        compile=None if sc.compile is None else _flag(sc.compile, "compile"),
        fp8_recipe=None
        if sc.fp8_recipe is None
        else Fp8Recipe.parse(sc.fp8_recipe, where=_where("fp8_recipe")),
        recompute_modules=_recompute_modules(sc),
        pipeline_layout=None
        if sc.pipeline_layout is None
        else parse_pipeline_layout(sc.pipeline_layout, where=_where("pipeline_layout")),
    )


def _recompute_modules(sc: Any) -> frozenset | None:
    """Megatron-Core ``recompute_modules`` of a ``recompute=selective`` scenario (``None``:
    the software preset's selective rule)."""
    if sc.recompute_modules is None:
        return None
    if Recompute.parse(sc.recompute, where=_where("recompute")) is not Recompute.SELECTIVE:
        raise ConfigError(
            f"recompute_modules={sc.recompute_modules!r} needs recompute=selective "
            f"(got {sc.recompute!r})",
            value=sc.recompute_modules,
            where=_where("recompute_modules"),
        )
    return RecomputeModule.parse_list(sc.recompute_modules, where=_where("recompute_modules"))


__all__ = [
    "MAX_BATCH_PER_REPLICA",
    "MAX_GLOBAL_BATCH",
    "Fidelity",
    "ParsedScenario",
    "batch_int",
    "parse_placement",
    "parse_scenario",
    "pos_int",
]
