"""Parallelism plans: frozen, validated values.

A :class:`ParallelismPlan` says how one training step is split over GPUs: data parallelism
(``dp`` replicas, in one of the :class:`DPMode` variants), tensor parallelism (``tp`` ranks
splitting each layer, Megatron-LM style) and pipeline parallelism (``pp`` stages, with a
:class:`PipelineSchedule`), plus activation recomputation and ZeRO/FSDP sharding.

Rank layout (the frameworks' default: Megatron-LM's ``initialize_model_parallel``, Megatron-Core's
``RankGenerator`` "tp-cp-ep-dp-pp", torchtitan's mesh, DeepSpeed's pipe/data/model axes): global
rank ``r = tp_rank + tp * (dp_rank + dp * pp_rank)``, so tensor-parallel groups are consecutive
ranks (inside one server when ``tp <= gpus_per_node``), then data-parallel replicas, then pipeline
stages outermost. :mod:`perfmodel.parallel.placement` maps ranks onto GPUs (and takes any other
order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfmodel._enum import ParsedEnum, dashed
from perfmodel._ints import divisors
from perfmodel._record import FlatRecord
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.workload.memory import Recompute  # one enum for the plan and the memory model

#: Other names accepted for the plan enums' values (looked up after ``_`` is read as ``-``).
_DP_MODE_ALIASES = {
    "ps": "parameter-server",
    "ar": "allreduce",
    "ddp": "allreduce",
    "asgd": "async",
}
_SCHEDULE_ALIASES = {"pipedream-flush": "1f1b", "interleaved-1f1b": "interleaved"}
_HYBRID_ALIASES = {"owt": "one-weird-trick", "krizhevsky": "one-weird-trick"}
_CP_COMM_ALIASES = {"p2p": "ring", "all-gather": "allgather"}
_MOE_DISPATCHER_ALIASES = {
    "all-to-all": "alltoall",
    "all-gather": "allgather",
    "flex": "deepep",
    "flex-deepep": "deepep",
    "flex-hybridep": "hybridep",
    "hybrid-ep": "hybridep",
    "deep-ep": "deepep",
}


class DPMode(str, ParsedEnum, where="dp_mode", normalize=dashed, aliases=_DP_MODE_ALIASES):
    """How data-parallel replicas combine their gradients.

    ``allreduce``
        Synchronous all-reduce of gradient buckets overlapped with backward (PyTorch DDP,
        Li et al. VLDB 2020; Horovod tensor fusion, Sergeev & Del Balso 2018; tf MirroredStrategy).
    ``parameter-server``
        Workers push gradients to and pull parameters from ``ps_shards`` servers hosted on the
        CPU or on GPUs (Li et al. OSDI 2014; TF ``ParameterServerStrategy``).
    ``cpu-merge``
        Replicas on GPUs, weights kept and merged on the host CPU every step (Keras
        ``multi_gpu_model(cpu_merge=True)``).
    ``gpu-merge``
        Single-process replication from GPU 0 every step: broadcast parameters, scatter the
        batch, gather outputs, reduce gradients to GPU 0 (PyTorch ``nn.DataParallel``).
    ``async``
        Asynchronous SGD through a parameter server (Dean et al. 2012, Downpour): no barrier;
        throughput plus the staleness distribution of applied gradients.
    ``local-sgd``
        Each replica takes ``sync_period`` local steps, then models are averaged by an
        all-reduce (Lin et al. ICLR 2020, "Don't use large mini-batches, use local SGD").
    ``crossbow``
        ``learners_per_gpu`` independent small-batch learners per GPU and synchronous model
        averaging every step (Koliousis et al. VLDB 2019, Crossbow).
    """

    ALLREDUCE = "allreduce"
    PARAMETER_SERVER = "parameter-server"
    CPU_MERGE = "cpu-merge"
    GPU_MERGE = "gpu-merge"
    ASYNC = "async"
    LOCAL_SGD = "local-sgd"
    CROSSBOW = "crossbow"


class PipelineSchedule(
    str, ParsedEnum, where="schedule", normalize=dashed, aliases=_SCHEDULE_ALIASES
):
    """Pipeline schedules.

    ``gpipe``: all forwards then all backwards (Huang et al. NeurIPS 2019). ``1f1b``: one forward
    one backward after a warm-up of ``p - rank - 1`` forwards (PipeDream-Flush, Narayanan et al.
    2021). ``interleaved``: 1F1B over ``v`` model chunks per device (Narayanan et al. SC21 s2.2).
    """

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"


class Hybrid(
    str, ParsedEnum, where="hybrid", normalize=dashed, aliases=_HYBRID_ALIASES, unset="none"
):
    """Hybrid layouts that are not a plain ``dp x tp x pp`` grid.

    ``one-weird-trick``: Krizhevsky 2014: convolutional layers data parallel over all GPUs,
    fully-connected layers model parallel over the same GPUs (``tp == dp``, the whole machine).
    """

    NONE = "none"
    ONE_WEIRD_TRICK = "one-weird-trick"


class CPComm(
    str, ParsedEnum, where="cp_comm", normalize=dashed, aliases=_CP_COMM_ALIASES, unset="ring"
):
    """How context-parallel ranks exchange keys and values (plan key ``cp_comm``).

    ``ring`` (default): ring attention, each step's K/V chunk sent to the next rank while the
    current chunk's attention runs (Megatron-Core ``cp_comm_type="p2p"``, its default).
    ``allgather``: the K/V of the whole sequence are all-gathered across the ``cp`` group before
    attention and dK/dV reduce-scattered after it in backward, not overlapped with attention.
    Source: Megatron-Core ``TransformerConfig.cp_comm_type`` docstring (same text in Transformer
    Engine's ``DotProductAttention``, TE 1.x/2.x): '"p2p": ... P2P is async and can be overlapped
    with attention compute. "all_gather": All-gather to get full sequence of KV before
    attention. The all-gather is not async, and cannot be overlapped.' (``a2a`` / ``a2a+p2p``,
    Ulysses-style, are not modelled.)
    """

    RING = "ring"
    ALLGATHER = "allgather"


class MoEDispatcher(
    str,
    ParsedEnum,
    where="moe_dispatcher",
    normalize=dashed,
    aliases=_MOE_DISPATCHER_ALIASES,
    unset="alltoall",
):
    """How routed tokens reach their experts and come back (plan key ``moe_dispatcher``;
    Megatron-Core ``--moe-token-dispatcher-type`` and ``--moe-flex-dispatcher-backend``,
    ``megatron/core/transformer/moe/token_dispatcher.py`` and the MoE README's "Token
    Dispatching" table at Megatron-LM 4415119, the Megatron-Core of Megatron-Bridge 21d102f).

    ``alltoall`` (default; the dispatcher Megatron-Bridge's Qwen3 and DeepSeek-V3 recipes set,
    ``src/megatron/bridge/recipes/{qwen/qwen3_moe,deepseek/deepseek_v3}.py`` at 21d102f):
    ``MoEAlltoAllTokenDispatcher``, an NCCL all-to-all of every (token, expert) row, so a token
    routed to two experts of one rank travels twice. ``deepep`` / ``hybridep``: the flex
    dispatcher with DeepEP or HybridEP kernels (DeepEP README: "removes redundant tokens during
    cross-node communication"): a token travels once to each rank that holds one of its
    experts and, across servers, once over RDMA to each server, then over NVLink inside it
    (:func:`perfmodel.parallel.expert.dispatch_share`). ``allgather``:
    ``MoEAllGatherTokenDispatcher``, every rank gathers the tokens of its expert-parallel group
    and keeps its experts' rows; the combine is a reduce-scatter.
    """

    ALLTOALL = "alltoall"
    DEEPEP = "deepep"
    HYBRIDEP = "hybridep"
    ALLGATHER = "allgather"

    @property
    def deduplicates(self) -> bool:
        """Whether a token is sent once per destination rank / server (the flex backends)."""
        return self in (MoEDispatcher.DEEPEP, MoEDispatcher.HYBRIDEP)


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
DISPATCHER_ALLGATHER = MoEDispatcher.ALLGATHER
DISPATCHER_ALLTOALL = MoEDispatcher.ALLTOALL


class PSHost(str, ParsedEnum, where="ps_host", normalize=dashed):
    """Where parameter-server shards live."""

    CPU = "cpu"
    GPU = "gpu"


@dataclass(frozen=True)
class ParallelismPlan(FlatRecord):
    """How one training step is split over GPUs (validated on construction; its JSON form:
    :class:`~perfmodel._record.FlatRecord`, every field a number, flag, ``None`` or enum).

    Attributes
    ----------
    dp, tp, pp
        Data-parallel replicas, tensor-parallel ranks per layer, pipeline stages. With
        ``hybrid=one-weird-trick`` ``tp`` equals ``dp`` and both span the same GPUs.
    microbatch_size
        Samples per micro-batch on one replica (``None``: the whole per-replica batch, one
        micro-batch).
    schedule, interleave
        Pipeline schedule and model chunks per device (``interleave > 1`` only with
        ``interleaved``).
    recompute, sequence_parallel, zero, fsdp
        Activation recomputation; Megatron sequence parallelism (Korthikanti et al. 2022);
        ZeRO stage 0-3 (Rajbhandari et al. SC20); FSDP full sharding (Zhao et al. VLDB 2023,
        traffic and memory as ZeRO-3).
    cp_comm
        Context-parallel K/V exchange (:class:`CPComm`): ``ring`` (default) or ``allgather``.
    moe_dispatcher
        Token dispatcher of the expert-parallel layers (:class:`MoEDispatcher`): ``alltoall``
        (default), ``deepep``, ``hybridep`` or ``allgather``.
    ep_overlap
        Expert all-to-alls of one micro-batch on their own stream beside another micro-batch's
        compute (Megatron-Core ``--overlap-moe-expert-parallel-comm``, "combined 1F1B"; off by
        default as there); see :func:`perfmodel.parallel.expert.ep_overlap_exposed_s`.
    ep, etp, cp
        Expert parallelism (routed experts split over ``ep`` ranks; Megatron-Core
        ``--expert-model-parallel-size``), expert tensor parallelism (``etp``, each expert's GEMMs
        split over ``etp`` ranks; ``--expert-tensor-parallel-size``, 0 = ``tp`` as Megatron-Core's
        default) and context parallelism (``cp`` ranks each hold ``1/cp`` of every sequence;
        ``--context-parallel-size``). The world is ``dp x tp x pp x cp``; expert groups fold over
        the ``tp x cp x dp`` ranks of a pipeline stage (Megatron-Core "MoE parallel folding",
        Liu et al. 2025, arXiv:2504.14960), so ``ep`` need not divide ``dp``: ``ep x etp`` must
        divide ``dp x cp x tp``, and the experts' data-parallel group is what remains,
        ``dp x cp x tp / (ep x etp)`` (:attr:`expert_dp`).
    hsdp
        FSDP hybrid sharding (PyTorch ``fully_shard`` over a 2-D mesh / FSDP1
        ``ShardingStrategy.HYBRID_SHARD``): model state sharded over groups of ``hsdp``
        data-parallel ranks (typically one server) times their ``cp`` context-parallel ranks
        (:attr:`fsdp_degree`) and replicated across the ``dp / hsdp`` groups; 0 (default) shards
        over all ``dp x cp`` ranks (:attr:`grad_replicas`). ``hsdp`` is torchtitan's
        ``data_parallel_shard_degree`` (``dp / hsdp`` its ``data_parallel_replicate_degree``).
    dp_mode, learners_per_gpu, sync_period, ps_host, ps_shards
        The data-parallel variant and its knobs (see :class:`DPMode`).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    microbatch_size: int | None = None
    schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B
    interleave: int = 1
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    zero: int = 0
    fsdp: bool = False
    dp_mode: DPMode = DPMode.ALLREDUCE
    learners_per_gpu: int = 1
    sync_period: int = 1
    ps_host: PSHost = PSHost.CPU
    ps_shards: int = 1
    hybrid: Hybrid = Hybrid.NONE
    hsdp: int = 0
    ep: int = 1
    cp: int = 1
    etp: int = 0
    cp_comm: CPComm = CPComm.RING
    ep_overlap: bool = False
    moe_dispatcher: MoEDispatcher = MoEDispatcher.ALLTOALL

    def __post_init__(self) -> None:
        for name in (
            "dp",
            "tp",
            "pp",
            "ep",
            "cp",
            "interleave",
            "learners_per_gpu",
            "sync_period",
            "ps_shards",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InfeasiblePlanError(
                    f"plan {name}={v!r} must be a positive integer", value=v, where=name
                )
        if self.microbatch_size is not None and (
            not isinstance(self.microbatch_size, int) or self.microbatch_size < 1
        ):
            raise InfeasiblePlanError(
                f"plan microbatch={self.microbatch_size!r} must be a positive integer",
                value=self.microbatch_size,
                where="microbatch",
            )
        if self.zero not in (0, 1, 2, 3):
            raise InfeasiblePlanError(
                f"zero={self.zero!r}: ZeRO stage must be 0, 1, 2 or 3",
                value=self.zero,
                where="zero",
            )
        if self.interleave > 1 and self.schedule is not PipelineSchedule.INTERLEAVED:
            raise InfeasiblePlanError(
                f"interleave={self.interleave} needs schedule=interleaved "
                f"(got {self.schedule.value}); use interleave=1 or schedule=interleaved",
                value=self.interleave,
                where="interleave",
            )
        if self.schedule is PipelineSchedule.INTERLEAVED and self.pp < 2:
            raise InfeasiblePlanError(
                "schedule=interleaved needs pp >= 2", value=self.pp, where="pp"
            )
        if self.sequence_parallel and self.tp < 2:
            raise InfeasiblePlanError(
                "sequence parallelism needs tp >= 2 (it splits the tensor-parallel group's "
                f"non-GEMM work); got tp={self.tp}",
                value=self.tp,
                where="sequence_parallel",
            )
        if self.hybrid is Hybrid.ONE_WEIRD_TRICK:
            if self.pp != 1 or self.tp != self.dp:
                raise InfeasiblePlanError(
                    f"hybrid=one-weird-trick spreads convolutions (data parallel) and "
                    f"fully-connected layers (model parallel) over the same GPUs: it needs "
                    f"tp == dp and pp == 1, got dp={self.dp}, tp={self.tp}, pp={self.pp}; "
                    f"use dp={self.dp},tp={self.dp},pp=1",
                    value=(self.dp, self.tp, self.pp),
                    where="hybrid",
                )
        if self.dp_mode is DPMode.CROSSBOW and self.learners_per_gpu < 1:
            raise InfeasiblePlanError("crossbow needs learners_per_gpu >= 1")
        if self.learners_per_gpu > 1 and self.dp_mode is not DPMode.CROSSBOW:
            raise InfeasiblePlanError(
                f"learners_per_gpu={self.learners_per_gpu}: several learners per GPU are "
                f"Crossbow's (dp_mode crossbow, or no dp_mode); dp_mode "
                f"{self.dp_mode.value} runs one learner per GPU",
                value=self.learners_per_gpu,
                where="learners_per_gpu",
            )
        if self.hsdp:
            if not self.fsdp or self.hsdp < 1 or self.dp % self.hsdp:
                fits = divisors(self.dp)
                raise InfeasiblePlanError(
                    f"hsdp={self.hsdp}: hybrid sharding needs FSDP (--software fsdp or "
                    f"torchtitan) and a shard group that divides dp={self.dp}; shard groups that "
                    f"divide: {fits}",
                    value=self.hsdp,
                    where="hsdp",
                )
        self._check_expert_context()
        if (self.zero or self.fsdp) and self.dp_mode is not DPMode.ALLREDUCE:
            raise InfeasiblePlanError(
                f"ZeRO/FSDP shard over synchronous data parallelism; dp_mode={self.dp_mode.value} "
                "is not compatible (use dp_mode=allreduce or zero=0)",
                value=self.dp_mode.value,
                where="zero",
            )

    def _check_expert_context(self) -> None:
        """Feasibility of ``ep``, ``etp`` and ``cp`` (see the class docstring)."""
        if not isinstance(self.etp, int) or isinstance(self.etp, bool) or self.etp < 0:
            raise InfeasiblePlanError(
                f"plan etp={self.etp!r} must be a positive integer (0: equal to tp)",
                value=self.etp,
                where="etp",
            )
        if (self.ep > 1 or self.cp > 1) and (
            self.dp_mode is not DPMode.ALLREDUCE or self.hybrid is not Hybrid.NONE
        ):
            raise InfeasiblePlanError(
                f"ep/cp are modelled with synchronous all-reduce data parallelism and no hybrid "
                f"layout; got dp_mode={self.dp_mode.value}, hybrid={self.hybrid.value}",
                value=(self.ep, self.cp),
                where="ep" if self.ep > 1 else "cp",
            )
        if self.ep_overlap and (
            self.ep < 2
            or self.recompute is Recompute.FULL
            or (self.pp > 1 and self.schedule is not PipelineSchedule.INTERLEAVED)
        ):
            # Megatron-Core combined 1F1B: needs expert parallelism, no full recomputation,
            # and virtual pipeline stages when pipelining (moe_a2a_overlap user guide)
            raise InfeasiblePlanError(
                f"ep_overlap needs ep > 1, recompute other than full and, with pp > 1, "
                f"schedule=interleaved; got ep={self.ep}, recompute={self.recompute.value}, "
                f"pp={self.pp}, schedule={self.schedule.value}",
                value=self.ep_overlap,
                where="ep_overlap",
            )
        fold = self.dp * self.cp * self.tp
        if fold % (self.ep * self.expert_tp):
            fits = [e for e in range(1, fold + 1) if fold % (e * self.expert_tp) == 0]
            raise InfeasiblePlanError(
                f"ep={self.ep} x etp={self.expert_tp} must divide dp x cp x tp = "
                f"{self.dp}x{self.cp}x{self.tp} = {fold} (expert groups fold over the "
                f"tensor, context and data-parallel ranks of a stage); ep values that fit: "
                f"{fits[:16]}" + ("" if self.expert_tp == 1 else "; or set etp=1"),
                value=self.ep,
                where="ep",
            )
        shard_fold = self.hsdp * self.cp * self.tp
        if self.fsdp and self.hsdp and shard_fold % (self.ep * self.expert_tp):
            # torchtitan's efsdp = dp_shard x cp x tp / ep must be whole (its ParallelDims
            # _validate at b5bcd76); Megatron-Core asserts expert_dp % instances == 0
            raise InfeasiblePlanError(
                f"hsdp={self.hsdp}: ep={self.ep} x etp={self.expert_tp} must divide the shard "
                f"group's hsdp x cp x tp = {self.hsdp}x{self.cp}x{self.tp} = {shard_fold} "
                f"(hybrid sharding shards the experts within one replica group)",
                value=(self.hsdp, self.ep),
                where="hsdp",
            )

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size: ``etp``, or ``tp`` when 0 (Megatron-Core default)."""
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """Data-parallel size of the expert weights: ``dp x cp x tp / (ep x etp)`` (the expert
        gradients are reduced and the expert optimizer state sharded over it)."""
        return self.dp * self.cp * self.tp // (self.ep * self.expert_tp)

    @property
    def expert_shard_degree(self) -> int:
        """Ranks a sharded plan splits the routed experts' model state over: :attr:`expert_dp`,
        under HSDP divided by the ``dp / hsdp`` replica groups (``expert_dp / (grad_replicas /
        fsdp_degree)`` = ``hsdp x cp x tp / (ep x etp)``, exact: a plan whose ``ep x etp`` does
        not divide ``hsdp x cp x tp`` is refused), since hybrid sharding shards the experts
        within a replica group and replicates them across the groups as it does the dense
        weights.

        torchtitan shards the experts over the ``efsdp`` mesh dimension of size ``dp_shard x cp
        x tp / ep`` in the sparse mesh ``(pp, dp_replicate, efsdp, ep)``
        (``torchtitan/distributed/parallel_dims.py`` ``build_mesh`` at b5bcd76, 2026-08-21),
        which is ``hsdp x cp x tp / (ep x etp)`` here at ``etp = 1`` (``dp_shard`` is ``hsdp``).
        torchtitan refuses an ``ep`` that does not divide ``dp_shard x cp x tp`` (``_validate``
        there), and so does this plan's check.

        >>> ParallelismPlan(dp=4, cp=2, fsdp=True, hsdp=2, ep=4).expert_shard_degree  # 2 // 2
        1
        >>> ParallelismPlan(dp=8, fsdp=True, hsdp=4, ep=2).expert_shard_degree  # 4 // 2
        2
        >>> ParallelismPlan(dp=4, cp=2, fsdp=True, ep=4).expert_shard_degree  # expert_dp
        2
        """
        if self.fsdp and self.hsdp:
            return self.expert_dp // (self.grad_replicas // self.fsdp_degree)
        return self.expert_dp

    @property
    def grad_replicas(self) -> int:
        """Ranks holding the same dense weights: ``dp x cp`` (context-parallel ranks hold a
        replica and reduce gradients with the data-parallel ones, Megatron-Core's
        data-parallel-with-context-parallel group)."""
        return self.dp * self.cp

    @property
    def num_gpus(self) -> int:
        """GPUs the plan occupies: ``dp * tp * pp * cp`` (``dp`` for one-weird-trick)."""
        if self.hybrid is Hybrid.ONE_WEIRD_TRICK:
            return self.dp
        return self.dp * self.tp * self.pp * self.cp

    @property
    def fsdp_degree(self) -> int:
        """Ranks an FSDP plan shards the dense model state over: ``hsdp x cp`` under hybrid
        sharding, else :attr:`grad_replicas` (``dp x cp``); 1 without FSDP.

        torchtitan shards over the context-parallel ranks too: FSDP's mesh is the flattened
        ``dp_shard_cp`` (``dp_shard x cp`` ranks, context-parallel rank fastest), 2-D
        ``(dp_replicate, dp_shard_cp)`` under HSDP, and FSDP runs whenever ``dp_shard > 1 or cp >
        1`` (``torchtitan/parallelisms/parallel_dims.py`` ``build_mesh`` and
        ``parallelize_llama.py`` at 3f20451, 2024-12-27; ``ParallelDims.fsdp_enabled`` and the
        ``fsdp`` mesh of size ``dp_shard * cp`` in ``torchtitan/distributed/parallel_dims.py`` at
        b5bcd76, 2026-08-21).

        >>> ParallelismPlan(dp=4, cp=2, fsdp=True, hsdp=2).fsdp_degree
        4
        >>> ParallelismPlan(dp=1, cp=8, fsdp=True).fsdp_degree
        8
        """
        if not self.fsdp:
            return 1
        return self.hsdp * self.cp if self.hsdp else self.grad_replicas

    @property
    def fsdp_shards(self) -> bool:
        """Whether this FSDP plan shards model state: ``fsdp`` with a :attr:`fsdp_degree` above
        1 (``hsdp x cp`` under HSDP, else :attr:`grad_replicas`; ``dp = 1, cp > 1`` shards over
        the context-parallel ranks, as torchtitan does). An FSDP plan of shard degree 1
        (``dp = cp = 1`` whatever its TP and PP, e.g. ``dp=1 tp=8`` on 8 GPUs; or ``hsdp=1``
        without context parallelism) runs unsharded, as the FSDP stacks do
        (torchtitan ``parallel_dims.fsdp_enabled`` at 3f20451; FSDP1's ``NO_SHARD`` clamp at world size 1;
        FSDP2's world-size-1 fast path: :func:`perfmodel.parallel.recipe.build_recipe`), so its
        label, recipe and interval features say so.

        Its precision stays the preset's mixed-precision policy (16-bit weights cast at module
        boundaries, no autocast casts), as torchtitan runs it now: since 00b7f56 (2026-04-09,
        PR 2900) it applies ``fully_shard`` with ``MixedPrecisionPolicy`` at ``dp_shard = 1``
        too (still so at b5bcd76, 2026-08-21). Between 0b44d4c (2025-06-16, PR 1303,
        ``maybe_enable_amp``) and then, a one-GPU / DDP run trained under ``torch.autocast``
        and a TP or PP run without FSDP in FP32; before 0b44d4c (the preset's Dec 2024 pin,
        3f20451) every run without FSDP trained in FP32."""
        return self.fsdp_degree > 1

    @property
    def shard_stage(self) -> int:
        """Effective ZeRO stage (FSDP full sharding counts as 3)."""
        return 3 if self.fsdp else self.zero

    def num_microbatches(self, batch_per_replica: int) -> int:
        """Micro-batches per replica and step; raises if the micro-batch does not divide."""
        mb = self.microbatch_size or batch_per_replica
        if batch_per_replica % mb:
            fits = divisors(batch_per_replica)
            raise InfeasiblePlanError(
                f"micro-batch size {mb} does not divide the per-replica batch "
                f"{batch_per_replica}; divisors that fit: {fits[:12]}",
                value=mb,
                where="microbatch",
            )
        return batch_per_replica // mb

    def describe(self) -> str:
        parts = [f"dp={self.dp}", f"tp={self.tp}", f"pp={self.pp}"]
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
            if self.cp_comm is not CPComm.RING:
                parts.append(f"cp_comm={self.cp_comm.value}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
            if self.ep_overlap:
                parts.append("ep_overlap=true")
            if self.moe_dispatcher is not MoEDispatcher.ALLTOALL:
                parts.append(f"moe_dispatcher={self.moe_dispatcher.value}")
        if self.etp and self.etp != self.tp:
            parts.append(f"etp={self.etp}")
        if self.pp > 1:
            parts.append(f"schedule={self.schedule.value}")
            if self.interleave > 1:
                parts.append(f"interleave={self.interleave}")
        if self.microbatch_size:
            parts.append(f"microbatch={self.microbatch_size}")
        if self.dp > 1 and self.dp_mode is not DPMode.ALLREDUCE:
            parts.append(f"mode={self.dp_mode.value}")
        if self.fsdp_shards or (self.zero and not self.fsdp):
            parts.append("fsdp" if self.fsdp else f"zero={self.zero}")
        if self.hsdp:
            parts.append(f"hsdp={self.hsdp}")
        if self.recompute is not Recompute.NONE:
            parts.append(f"recompute={self.recompute.value}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.hybrid is not Hybrid.NONE:
            parts.append(self.hybrid.value)
        return ",".join(parts)


_PLAN_KEYS = {
    "dp": "dp",
    "tp": "tp",
    "pp": "pp",
    "microbatch": "microbatch_size",
    "mb": "microbatch_size",
    "schedule": "schedule",
    "interleave": "interleave",
    "v": "interleave",
    "mode": "dp_mode",
    "dp_mode": "dp_mode",
    "learners": "learners_per_gpu",
    "sync_period": "sync_period",
    "k": "sync_period",
    "ps_host": "ps_host",
    "ps_shards": "ps_shards",
    "hybrid": "hybrid",
    "zero": "zero",
    "hsdp": "hsdp",
    "ep": "ep",
    "cp": "cp",
    "etp": "etp",
    "cp_comm": "cp_comm",
    "ep_overlap": "ep_overlap",
    "moe_dispatcher": "moe_dispatcher",
    "dispatcher": "moe_dispatcher",
    "recompute": "recompute",
    "rc": "recompute",
    "sequence_parallel": "sequence_parallel",
    "sp": "sequence_parallel",
    "learners_per_gpu": "learners_per_gpu",
}


_FLAGS = {"true": True, "1": True, "on": True, "false": False, "0": False, "off": False}

#: Compact tokens of ``perfmodel compare``'s plan labels (``dp2 tp4 pp2 cp16 mb1
#: interleaved(v=2) zero1 rc=full sp``): a key and an integer run together.
_COMPACT = re.compile(r"(dp|tp|pp|cp|ep|etp|mb|zero|hsdp)(\d{1,19})")
#: ``interleaved(v=N)``: the interleaved schedule with ``N`` chunks per device.
_INTERLEAVED = re.compile(r"interleaved\(v=(\d{1,19})\)")


def parse_plan_string(text: str, *, where: str = "--plan") -> dict[str, object]:
    """Parse a plan into scenario keys: ``key=value`` items (``"dp=4,tp=2,pp=2,microbatch=1,
    schedule=1f1b,interleave=2"``) or ``perfmodel compare``'s labels (``"dp2 tp4 pp2 cp16 mb1
    interleaved(v=2) zero1 rc=full sp"``), items separated by commas or spaces (issue 28,
    item 1: a compare row pasted into ``predict --plan`` is that plan).

    Compact tokens: ``dpN tpN ppN cpN epN etpN mbN zeroN hsdpN``, a schedule (``1f1b``,
    ``gpipe``, ``interleaved`` or ``interleaved(v=N)``), ``sp``/``nosp`` (sequence parallelism
    on/off), ``fsdp`` (ZeRO-3 under an FSDP preset), a hybrid layout (``one-weird-trick``).
    A key given twice with different values is refused.

    >>> parse_plan_string("dp=2,tp=4")
    {'dp': 2, 'tp': 4}
    >>> parse_plan_string("dp2 tp4 pp2 mb1 interleaved(v=2) zero1 rc=full nosp")  # doctest: +NORMALIZE_WHITESPACE
    {'dp': 2, 'tp': 4, 'pp': 2, 'microbatch_size': 1, 'schedule': 'interleaved',
     'interleave': 2, 'zero': 1, 'recompute': 'full', 'sequence_parallel': False}
    """
    out: dict[str, object] = {}

    def put(key: str, value: object, item: str) -> None:
        if key in out and out[key] != value:
            raise ConfigError(
                f"{where}: {item!r} contradicts {key}={out[key]!r} earlier in the plan",
                value=item,
                where=where,
            )
        out[key] = value

    for item in re.split(r"[,\s]+", str(text)):
        if not item:
            continue
        low = item.lower()
        if "=" not in item or _INTERLEAVED.fullmatch(low):
            m = _COMPACT.fullmatch(low)
            iv = _INTERLEAVED.fullmatch(low)
            if m is not None:
                key = _PLAN_KEYS["microbatch" if m.group(1) == "mb" else m.group(1)]
                put(key, int(m.group(2)), item)
            elif iv is not None:
                put("schedule", "interleaved", item)
                put("interleave", int(iv.group(1)), item)
            elif low in ("1f1b", "gpipe", "interleaved", "pipedream-flush"):
                put("schedule", low, item)
            elif low in ("sp", "nosp"):
                put("sequence_parallel", low == "sp", item)
            elif low == "fsdp":
                put("zero", 3, item)
            elif low in {h.value for h in Hybrid if h is not Hybrid.NONE}:
                put("hybrid", low, item)
            else:
                raise ConfigError(
                    f"{where} item {item!r} is neither key=value (keys: "
                    f"{', '.join(sorted(_PLAN_KEYS))}) nor a plan word (dp8, tp4, mb1, 1f1b, "
                    "interleaved(v=2), zero1, sp, nosp, ...)",
                    value=item,
                    where=where,
                )
            continue
        k, v = (part.strip() for part in item.split("=", 1))
        key = _PLAN_KEYS.get(k.lower())
        if key is None:
            raise ConfigError(
                f"{where}: unknown key {k!r}; expected one of {', '.join(sorted(_PLAN_KEYS))}",
                value=k,
                where=where,
            )
        if key in (
            "schedule",
            "dp_mode",
            "ps_host",
            "hybrid",
            "cp_comm",
            "recompute",
            "moe_dispatcher",
        ):
            put(key, v, item)
        elif key in ("ep_overlap", "sequence_parallel"):
            flag = _FLAGS.get(v.lower())
            if flag is None:
                raise ConfigError(f"{where}: {k}={v!r} must be true or false", value=v, where=where)
            put(key, flag, item)
        else:
            if not re.fullmatch(r"[+-]?\d{1,19}", v):
                raise ConfigError(f"{where}: {k}={v!r} is not an integer", value=v, where=where)
            put(key, int(v), item)
    return out
