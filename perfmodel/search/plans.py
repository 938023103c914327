"""Enumerate the valid parallelism plans of a model on a number of GPUs.

A plan is the set of :class:`perfmodel.api.Scenario` keys that say how one step is split:
``dp``, ``tp``, ``pp``, ``microbatch`` (size), ``schedule``, ``interleave``, ``zero``,
``recompute``, ``sequence_parallel`` and ``learners_per_gpu``. The enumerator walks the raw grid
of these knobs and keeps the combinations that are *structurally* valid (Megatron-LM's
constraints, Narayanan et al. SC21 section 3):

- ``dp * tp * pp * cp == gpus``;
- expert parallelism (MoE models): ``ep`` divides the routed experts and ``ep x tp`` divides
  ``dp x cp x tp`` (Megatron-Core MoE parallel folding with expert tensor parallelism equal to
  ``tp``); by default every power of two that does, so EP inside a server and EP across
  servers are both tried;
- context parallelism: ``2 cp`` divides the sequence (causal load balancing); only the
  ``cp_degrees`` asked for (default 1);
- ``tp`` divides the attention heads (and KV heads); CNNs only split their fully-connected
  layers with ``tp`` (Krizhevsky 2014), so by default CNN plans use ``tp = 1``;
- ``pp * interleave`` divides the number of blocks (transformer layers);
- ``dp * learners_per_gpu`` divides the global batch, and the micro-batch size divides the
  per-replica batch (the whole per-replica batch, no accumulation, is always a candidate); the
  interleaved schedule needs the micro-batch count to be a multiple of ``pp`` (Megatron-LM's
  constraint);
- several learners per GPU (Crossbow) only without model parallelism and without ZeRO (model
  averaging is not a sharded gradient all-reduce);
- with ``pp > 1``, no ZeRO stage above the stack's ``pipeline_max_zero`` (DeepSpeed's
  ``PipelineEngine`` refuses ZeRO-2/3 with pipeline parallelism; ``predict`` refuses such a plan,
  :func:`perfmodel.pipeline.resolve.check_pipeline_zero`);
- knobs that cannot matter are not varied (schedule with ``pp = 1``, ZeRO with ``dp x cp = 1``:
  the stacks shard model state over the context-parallel ranks too, so ``dp = 1, cp > 1``
  searches the ZeRO/FSDP stages; sequence parallelism with ``tp = 1``), so no two plans are the
  same computation.

Every rejected raw combination is counted under its reason, so a user sees why a plan they
expected is missing. Whether a plan fits in memory is the predictor's call (it is pruned later,
in :mod:`perfmodel.search.compare`).
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfmodel._ints import divisors
from perfmodel.errors import ConfigError


class ModelFamily(str, enum.Enum):
    TRANSFORMER = "transformer"
    CNN = "cnn"
    OTHER = "other"


@dataclass(frozen=True)
class ModelShape:
    """What plan enumeration needs to know of a model.

    Attributes
    ----------
    num_blocks
        Repeated blocks a pipeline can cut between (transformer layers, ResNet units).
    num_heads, num_kv_heads
        Attention heads (``None`` for models without attention).
    num_experts, seq_len
        Routed experts of a mixture-of-experts model (``None``: dense) and the sequence length
        (``None``: not a sequence model), for ``ep`` and ``cp``.
    family
        :class:`ModelFamily`.
    """

    num_blocks: int
    num_heads: int | None = None
    num_kv_heads: int | None = None
    family: ModelFamily = ModelFamily.OTHER
    num_experts: int | None = None
    seq_len: int | None = None

    @classmethod
    def from_model(cls, name: str, model_args: Mapping[str, Any] | None = None) -> ModelShape:
        """Read the shape from the model zoo.

        Blocks: distinct ``LayerCost.block`` indices of :func:`perfmodel.workload.build_model`
        (batch 1). Heads: the explicit argument, else the zoo entry's fixed/default arguments,
        else the builder's default. Family: the zoo entry's family (``transformer``, ``cnn``).
        """
        import inspect

        from perfmodel.workload import build_model, list_models
        from perfmodel.workload.layers import split_at_copies

        args = dict(model_args or {})
        wl = build_model(name, batch_size=1, **args)
        # a stack's copies are read as its block and their indices (no copy made)
        before, block, copy_ids, after = split_at_copies(wl.layers)
        outside = before + after
        blocks = {layer.block for layer in outside if layer.block is not None} | set(copy_ids)
        info = next((m for m in list_models() if m.name == str(name).lower()), None)

        def arg(key: str) -> Any:
            if key in args:
                return args[key]
            if info is not None:
                for table in (info.fixed, info.defaults):
                    if key in table:
                        return table[key]
                param = inspect.signature(info.builder).parameters.get(key)
                if param is not None and param.default is not inspect.Parameter.empty:
                    return param.default
            return None

        fam_text = str(getattr(info, "family", "")).lower()
        family = {"transformer": ModelFamily.TRANSFORMER, "cnn": ModelFamily.CNN}.get(
            fam_text, ModelFamily.OTHER
        )
        heads = arg("heads") if family is ModelFamily.TRANSFORMER else None
        kv = (arg("kv_heads") or heads) if heads is not None else None
        experts = {
            la.experts for la in outside + block if la.expert_role is not None and la.experts
        }
        seq = wl.tokens_per_sample if family is ModelFamily.TRANSFORMER else None
        return cls(
            num_blocks=max(len(blocks), 1),
            num_heads=int(heads) if heads is not None else None,
            num_kv_heads=int(kv) if kv is not None else None,
            family=family,
            num_experts=max(experts) if experts else None,
            seq_len=int(seq) if seq and seq > 1 else None,
        )


#: ZeRO stages searched when a preset runs no sharding of its own (``zero`` 0 or 1, not FSDP):
#: none, and ZeRO-1 (PyTorch ``ZeroRedundancyOptimizer``, Megatron's distributed optimizer,
#: DeepSpeed stage 1).
UNSHARDED_ZERO_STAGES: tuple[int, ...] = (0, 1)


def preset_zero_stages(preset: Any) -> tuple[int, ...]:
    """The ZeRO stages a software preset's plan search tries by default (issue 28, item 2).

    A preset that shards by default searches its own stage only: ``fsdp``/``torchtitan``
    (FSDP full sharding, ZeRO-3; a ZeRO-1 plan is not an FSDP plan) and ``deepspeed-zero2``/
    ``-zero3``. The others (DDP, Megatron, Megatron-Core's distributed optimizer, DeepSpeed
    stage 1) search :data:`UNSHARDED_ZERO_STAGES`, their own stage first. ``--zero`` widens it.

    >>> from perfmodel.parallel.software import get_preset
    >>> [preset_zero_stages(get_preset(n)) for n in ("fsdp", "deepspeed-zero2", "megatron-core")]
    [(3,), (2,), (1, 0)]
    """
    own = int(preset.zero)
    if preset.fsdp or own >= 2:
        return (own,)
    return (own, *(z for z in UNSHARDED_ZERO_STAGES if z != own))


@dataclass(frozen=True)
class SearchSpace:
    """The knobs to vary and their candidate values.

    ``None`` for ``tp_degrees``/``pp_degrees`` means every divisor of the GPU count that the model
    admits (``tp`` limited to powers of two, as Megatron-LM and NCCL favour, up to ``max_tp``).
    ``None`` for ``zero_stages`` and ``sequence_parallel`` means the software preset's
    (:meth:`for_preset`: :func:`preset_zero_stages`, and sequence parallelism as the preset
    sets it with ``tp > 1``); without a preset, ZeRO 0 and 1 and no sequence parallelism.
    ``pipeline_max_zero`` is the stack's, not a knob: the highest ZeRO stage enumerated with
    ``pp > 1`` (``SoftwarePreset.pipeline_max_zero``, which :meth:`for_preset` copies; ``None``:
    no limit); the stages above it are rejected with pipelining, counted under their reason.
    """

    tp_degrees: tuple[int, ...] | None = None
    pp_degrees: tuple[int, ...] | None = None
    max_tp: int | None = None
    microbatch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    schedules: tuple[str, ...] = ("1f1b", "interleaved")
    interleave: tuple[int, ...] = (2,)
    zero_stages: tuple[int, ...] | None = None
    recompute: tuple[str, ...] = ("none", "selective", "full")
    sequence_parallel: tuple[bool, ...] | None = None
    learners_per_gpu: tuple[int, ...] = (1,)
    cnn_tensor_parallel: bool = False
    ep_degrees: tuple[int, ...] | None = None
    cp_degrees: tuple[int, ...] = (1,)
    pipeline_max_zero: int | None = None

    def __post_init__(self) -> None:
        optional = ("tp_degrees", "pp_degrees", "ep_degrees")  # None: every admissible divisor
        for name in ("microbatch_sizes", "interleave", "learners_per_gpu", "cp_degrees", *optional):
            vals = getattr(self, name)
            if vals is None and name in optional:
                continue
            if not vals or any((not isinstance(v, int)) or v < 1 for v in vals):
                raise ConfigError(
                    f"search space {name} must be positive integers, got {vals!r}",
                    value=vals,
                    where=name,
                )
        limit = self.pipeline_max_zero
        if limit is not None and (isinstance(limit, bool) or limit not in (0, 1, 2, 3)):
            raise ConfigError(
                f"pipeline_max_zero must be a ZeRO stage 0-3 or None, got {limit!r}",
                value=limit,
                where="pipeline_max_zero",
            )
        bad = [z for z in (self.zero_stages or ()) if z not in (0, 1, 2, 3)]
        if bad:
            raise ConfigError(f"ZeRO stages must be 0-3, got {bad}", value=bad, where="zero_stages")
        for name, what, allowed in (
            ("schedules", "schedule(s)", ("gpipe", "1f1b", "interleaved")),
            ("recompute", "recompute value(s)", ("none", "selective", "full")),
        ):
            bad = [v for v in getattr(self, name) if v not in allowed]
            if bad:
                raise ConfigError(
                    f"unknown {what} {bad}; expected {', '.join(allowed)}", value=bad, where=name
                )

    def for_preset(self, preset: Any) -> SearchSpace:
        """This space with the preset's defaults where it leaves a knob ``None``: the ZeRO
        stages of :func:`preset_zero_stages` and the preset's sequence parallelism with
        ``tp > 1`` (``SoftwarePreset.sequence_parallel_with_tp``: on for Megatron-Core and
        torchtitan), so a search explores what that framework runs (issue 28, item 2), and the
        stack's ``pipeline_max_zero`` always (what it refuses is never searched)."""
        from dataclasses import replace

        return replace(
            self,
            pipeline_max_zero=preset.pipeline_max_zero,
            zero_stages=self.zero_stages
            if self.zero_stages is not None
            else preset_zero_stages(preset),
            sequence_parallel=self.sequence_parallel
            if self.sequence_parallel is not None
            else (bool(preset.sequence_parallel_with_tp),),
        )


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class Enumeration:
    """Valid plans and the count of rejected raw combinations by reason."""

    plans: tuple[Mapping[str, Any], ...]
    rejected: Mapping[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.plans)


def enumerate_plans(
    gpus: int,
    global_batch: int,
    shape: ModelShape,
    space: SearchSpace | None = None,
) -> Enumeration:
    """All structurally valid plans for ``gpus`` GPUs and a global batch.

    Parameters
    ----------
    gpus
        GPUs the plan occupies.
    global_batch
        Samples per optimisation step over all replicas.
    shape
        :class:`ModelShape` of the model.
    space
        :class:`SearchSpace` (default: the default space).

    Returns
    -------
    Enumeration
        Plans as scenario-key dicts (``dp, tp, pp, microbatch, schedule, interleave, zero,
        recompute, sequence_parallel, learners_per_gpu, ep, cp``), and rejection counts by
        reason.

    Examples
    --------
    >>> shape = ModelShape(num_blocks=4, num_heads=4, family=ModelFamily.TRANSFORMER)
    >>> space = SearchSpace(microbatch_sizes=(1,), schedules=("1f1b",), zero_stages=(0,),
    ...                     recompute=("none",))
    >>> plans = enumerate_plans(4, 8, shape, space).plans
    >>> sorted({(p["tp"], p["pp"]) for p in plans})
    [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1)]
    >>> sorted({p["microbatch"] for p in plans if p["dp"] == 2})  # 1, and the whole batch of 4
    [1, 4]
    """
    sp = space or SearchSpace()
    if not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(
            f"gpus must be a positive integer, got {gpus!r}", value=gpus, where="gpus"
        )
    if not isinstance(global_batch, int) or global_batch < 1:
        raise ConfigError(
            f"global batch must be a positive integer, got {global_batch!r}",
            value=global_batch,
            where="global_batch",
        )
    rejected: Counter[str] = Counter()
    plans: list[dict[str, Any]] = []
    tp_cands = (
        list(sp.tp_degrees)
        if sp.tp_degrees is not None
        else [d for d in divisors(gpus) if _is_pow2(d)]
    )
    is_cnn = shape.family is ModelFamily.CNN
    for tp in tp_cands:
        if gpus % tp:
            rejected["tp does not divide the GPU count"] += 1
            continue
        if sp.max_tp is not None and tp > sp.max_tp:
            rejected[f"tp above max_tp={sp.max_tp}"] += 1
            continue
        if tp > 1 and is_cnn and not sp.cnn_tensor_parallel:
            rejected["tp > 1 on a CNN (enable cnn_tensor_parallel)"] += 1
            continue
        if shape.num_heads is not None and shape.num_heads % tp:
            rejected["tp does not divide the attention heads"] += 1
            continue
        if shape.num_kv_heads is not None and shape.num_kv_heads % tp:
            rejected["tp does not divide the KV heads"] += 1
            continue
        for cp in sp.cp_degrees:
            if cp > 1 and (shape.seq_len is None or shape.seq_len % (2 * cp)):
                rejected["cp must divide the sequence in 2 x cp chunks"] += 1
                continue
            if (gpus // tp) % cp:
                rejected["cp does not divide GPUs / tp"] += 1
                continue
            rest = gpus // (tp * cp)
            pp_cands = list(sp.pp_degrees) if sp.pp_degrees is not None else divisors(rest)
            for pp in pp_cands:
                if rest % pp:
                    rejected["pp does not divide GPUs / (tp x cp)"] += 1
                    continue
                if pp > shape.num_blocks or shape.num_blocks % pp:
                    rejected["pp does not divide the model's blocks"] += 1
                    continue
                dp = rest // pp
                for ep in _expert_degrees(dp, tp, cp, shape, sp, rejected):
                    for plan in _inner_plans(dp, tp, pp, cp, global_batch, shape, sp, rejected):
                        plans.append({**plan, "ep": ep, "cp": cp})
    return Enumeration(tuple(plans), dict(rejected))


def _expert_degrees(
    dp: int, tp: int, cp: int, shape: ModelShape, sp: SearchSpace, rejected: Counter[str]
) -> list[int]:
    """Expert-parallel degrees for one ``(dp, tp, cp)``: 1 for dense models; else the asked
    (or power-of-two) degrees that divide the experts and whose ``ep x tp`` divides
    ``dp x cp x tp``."""
    if not shape.num_experts:
        return [1]
    experts = shape.num_experts
    cands = (
        list(sp.ep_degrees)
        if sp.ep_degrees is not None
        else [e for e in divisors(experts) if _is_pow2(e)]
    )
    out = []
    for ep in cands:
        if experts % ep:
            rejected["ep must divide experts"] += 1
        elif (dp * cp) % ep:
            rejected["ep x etp must divide dp x cp x tp"] += 1
        else:
            out.append(ep)
    return out


def _inner_plans(
    dp: int,
    tp: int,
    pp: int,
    cp: int,
    global_batch: int,
    shape: ModelShape,
    sp: SearchSpace,
    rejected: Counter[str],
) -> Iterator[dict[str, Any]]:
    """The plans of one ``(dp, tp, pp, cp)``: learners, micro-batch sizes, schedules, ZeRO
    stages, recomputation and sequence parallelism.

    ZeRO stages other than 0 are searched wherever the dense weights have replicas, ``dp x cp >
    1`` (:attr:`~perfmodel.parallel.plan.ParallelismPlan.grad_replicas`), not only at ``dp > 1``:
    the stacks shard model state over the context-parallel ranks too. torchtitan applies FSDP when
    ``dp_shard > 1 or cp > 1``, over the flattened ``dp_shard_cp`` mesh
    (``torchtitan/parallelisms/parallelize_llama.py`` and ``parallel_dims.py`` at 3f20451,
    2024-12-27, the preset's pin; ``ParallelDims.fsdp_enabled`` and the ``fsdp`` mesh of
    ``dp_shard x cp`` ranks in ``torchtitan/distributed/parallel_dims.py`` at b5bcd76,
    2026-08-21); Megatron-Core's distributed optimizer shards over the data-parallel group with
    context parallelism (``dp_cp_group``, ``megatron/core/optimizer/__init__.py`` at d98e8a6,
    2026-08-22). So FSDP at ``dp = 1, cp = 8`` (torchtitan's "FSDP 1, CP 8" benchmark rows) is
    enumerated.
    """
    learners = sp.learners_per_gpu if (tp == 1 and pp == 1) else (1,)
    n_multi = sum(1 for k in sp.learners_per_gpu if k > 1)
    if (tp > 1 or pp > 1) and n_multi:
        rejected["learners_per_gpu > 1 with model parallelism"] += n_multi
    if pp == 1:
        scheds: list[tuple[str, int]] = [("1f1b", 1)]
    else:
        scheds = []
        for s in sp.schedules:
            if s == "interleaved":
                scheds.extend(("interleaved", v) for v in sp.interleave if v > 1)
            else:
                scheds.append((s, 1))
    zeros = (sp.zero_stages or UNSHARDED_ZERO_STAGES) if dp * cp > 1 else (0,)
    limit = sp.pipeline_max_zero if pp > 1 else None  # the stack's refusal (predict's too)
    seq_par = (sp.sequence_parallel or (False,)) if tp > 1 else (False,)
    for k in learners:
        if global_batch % (dp * k):
            rejected["dp x learners does not divide the global batch"] += 1
            continue
        per_replica = global_batch // (dp * k)
        if k > 1:
            mbs = [per_replica]
        else:
            mbs = sorted({m for m in sp.microbatch_sizes if m <= per_replica} | {per_replica})
        if not mbs:
            rejected["no micro-batch size fits the per-replica batch"] += 1
            continue
        for mb in mbs:
            if per_replica % mb:
                rejected["micro-batch size does not divide the per-replica batch"] += 1
                continue
            n_micro = per_replica // mb
            # Crossbow's model averaging is not a ZeRO-shardable all-reduce of gradients
            zs = (0,) if k > 1 else zeros
            for (sched, v), zero, rc, sqp in itertools.product(scheds, zs, sp.recompute, seq_par):
                if limit is not None and zero > limit:
                    rejected[PIPELINE_ZERO_REASON] += 1
                    continue
                if sched == "interleaved":
                    if shape.num_blocks % (pp * v):
                        rejected["pp x interleave does not divide the model's blocks"] += 1
                        continue
                    if n_micro % pp:
                        rejected["interleaved schedule needs micro-batches a multiple of pp"] += 1
                        continue
                yield {
                    "dp": dp,
                    "tp": tp,
                    "pp": pp,
                    "microbatch": mb,
                    "schedule": sched,
                    "interleave": v,
                    "zero": zero,
                    "recompute": rc,
                    "sequence_parallel": sqp,
                    "learners_per_gpu": k,
                }


#: The reason a ZeRO stage above the stack's ``pipeline_max_zero`` is rejected with ``pp > 1``.
PIPELINE_ZERO_REASON = "ZeRO stage above what the stack runs with pp > 1 (pipeline_max_zero)"


def pipeline_zero_note(rejected: Mapping[str, int], preset: Any) -> str:
    """Why plans with ``pp > 1`` are missing and what runs instead, for a search that found no
    plan (``perfmodel compare``'s error): ``""`` unless the enumeration rejected some under
    :data:`PIPELINE_ZERO_REASON`.

    >>> from perfmodel.parallel.software import get_preset
    >>> print(pipeline_zero_note({PIPELINE_ZERO_REASON: 18}, get_preset("deepspeed-zero3")))
    ... # doctest: +ELLIPSIS
    18 plans with pp > 1 not enumerated: deepspeed-zero3 runs at most ZeRO-1 with pipeline ...
    >>> pipeline_zero_note({PIPELINE_ZERO_REASON: 18}, get_preset("fsdp"))  # no limit stated
    ''
    """
    n = int(rejected.get(PIPELINE_ZERO_REASON, 0))
    limit = preset.pipeline_max_zero
    if not n or limit is None:
        return ""
    from perfmodel.pipeline.resolve import fsdp2_hint, pipeline_zero_limit

    stages = ",".join(map(str, range(limit + 1)))
    return (
        f"{n} plans with pp > 1 not enumerated: {preset.name} {pipeline_zero_limit(preset)}; "
        f"try --pp 1, --zero {stages}"
        + fsdp2_hint(preset, "--software fsdp or torchtitan (sharded weights with pipelining)")
    )


def describe_plan(plan: Mapping[str, Any], preset: Any = None) -> str:
    """Short label such as ``"dp8 tp8 pp16 mb1 1f1b"``: a complete plan, which
    ``perfmodel predict --plan`` reads back (:func:`perfmodel.parallel.plan.parse_plan_string`).

    Knobs at their plain default are left out (``zero0``, ``rc=none``, no ``sp``); with the
    ``preset`` the plan runs under, a knob whose preset default differs is always written, so
    the label with the same ``--software`` reproduces the plan (issue 28, item 1): ``zero0``
    under a preset that shards (Megatron-Core's distributed optimizer, FSDP, DeepSpeed), and
    ``nosp`` with ``tp > 1`` under a preset that turns sequence parallelism on.

    >>> describe_plan({"dp": 2, "tp": 4, "pp": 2, "microbatch": 1, "schedule": "interleaved",
    ...                "interleave": 2, "zero": 1, "recompute": "full"})
    'dp2 tp4 pp2 mb1 interleaved(v=2) zero1 rc=full'
    >>> from perfmodel.parallel.software import get_preset
    >>> describe_plan({"dp": 2, "tp": 8, "pp": 1, "microbatch": 1, "zero": 0,
    ...                "sequence_parallel": False}, get_preset("megatron-core"))
    'dp2 tp8 pp1 mb1 zero0 nosp'
    """
    parts = [f"dp{plan.get('dp')}", f"tp{plan.get('tp', 1)}", f"pp{plan.get('pp', 1)}"]
    if plan.get("cp", 1) > 1:
        parts.append(f"cp{plan['cp']}")
    if plan.get("ep", 1) > 1:
        parts.append(f"ep{plan['ep']}")
    if plan.get("microbatch") is not None:
        parts.append(f"mb{plan['microbatch']}")
    if plan.get("pp", 1) > 1:
        sched = plan.get("schedule", "1f1b")
        parts.append(f"{sched}(v={plan.get('interleave', 1)})" if sched == "interleaved" else sched)
    zero = int(plan.get("zero") or 0)
    if zero or (preset is not None and int(preset.zero) != 0):
        parts.append(f"zero{zero}")
    if plan.get("recompute", "none") != "none":
        parts.append(f"rc={plan['recompute']}")
    if plan.get("sequence_parallel"):
        parts.append("sp")
    elif (
        preset is not None
        and preset.sequence_parallel_with_tp
        and int(plan.get("tp", 1)) > 1
        and plan.get("sequence_parallel") is not None
    ):
        parts.append("nosp")
    if plan.get("learners_per_gpu", 1) > 1:
        parts.append(f"learners={plan['learners_per_gpu']}")
    return " ".join(parts)


PLAN_KEYS: tuple[str, ...] = (
    "dp",
    "tp",
    "pp",
    "microbatch",
    "schedule",
    "interleave",
    "zero",
    "recompute",
    "sequence_parallel",
    "learners_per_gpu",
    "ep",
    "cp",
)


def parse_int_list(
    text: str | Sequence[int], *, where: str, maximum: int | None = None
) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)`` with a :class:`ConfigError` naming the flag on bad input
    (not an integer, below 1, above ``maximum``, or more than 19 digits: refused before
    ``int()`` converts it).

    >>> parse_int_list("1, 2,4", where="--gpus")
    (1, 2, 4)
    """
    if not isinstance(text, str):
        return tuple(int(v) for v in text)
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if len(item.lstrip("+-")) > 19:
            raise ConfigError(
                f"{where}: {item[:24]}... ({len(item)} digits) is not a count perfmodel reads",
                value=item[:24],
                where=where,
            )
        try:
            v = int(item)
        except ValueError as exc:
            raise ConfigError(
                f"{where}: {item!r} is not an integer", value=item, where=where
            ) from exc
        if v < 1:
            raise ConfigError(f"{where}: {v} must be positive", value=v, where=where)
        if maximum is not None and v > maximum:
            raise ConfigError(f"{where}: {v} is above {maximum}", value=v, where=where)
        out.append(v)
    if not out:
        raise ConfigError(f"{where}: empty list", value=text, where=where)
    return tuple(out)
