"""A software preset's value: :class:`SoftwarePreset` (the knobs of one training stack) and
:class:`TPOverlap` (how a stack overlaps its tensor-parallel collectives), with the constants
their defaults cite.

The catalogue of named presets (:data:`perfmodel.parallel.software.PRESETS`), the per-run
options and their parsing live in :mod:`perfmodel.parallel.software`, which imports these names
(import them from there). Every number cites where it comes from; numbers marked *estimate* are
orders of magnitude from the cited description, not fits to any validation row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from perfmodel import units
from perfmodel.comm.p2p_read import ProcessLayout
from perfmodel.compute.attention import AttentionBackend
from perfmodel.compute.params import HOST_DISPATCH_S
from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError
from perfmodel.parallel.plan import DPMode
from perfmodel.parallel.selective import SelectiveRecompute
from perfmodel.parallel.stack_choices import (
    AmpStyle,
    CrossEntropy,
    MasterCopy,
    ParamOwners,
    ParamSync,
)
from perfmodel.workload.kernels import Fp8Recipe, Fusion, GradClip, OptimizerImpl
from perfmodel.workload.memory import ModuleRecompute

#: Fractional slowdown of a compute kernel while a communication kernel runs on the same GPU.
#: NCCL runs its collectives as CUDA kernels occupying one SM per channel (NCCL_MIN/MAX_NCHANNELS;
#: typically 8-16 channels on 80-132-SM GPUs, i.e. ~10% of SMs) and competes for HBM bandwidth.
#: Compute loses at most that SM share; we take half of ~10% (not all kernels are SM-bound).
#: Estimate from the NCCL documentation (environment variables NCCL_MIN_NCHANNELS) and
#: Rashidi et al. ISCA 2021 ("Enabling compute-communication overlap", which reports
#: compute slowdowns of this order when NCCL shares the SMs). Named, documented, overridable.
COMM_OVERLAP_COMPUTE_SLOWDOWN = 0.05


@dataclass(frozen=True)
class TPOverlap:
    """Transformer Engine userbuffers' overlap of the tensor-parallel collectives with the GEMMs
    of a transformer layer (Megatron-Core ``tp_comm_overlap`` with sequence parallelism), by its
    mechanism rather than a flat share.

    Each of a layer's collectives is overlapped by a method with its own SM budget (TE
    ``ub_cfgs``): ``ring_exchange`` (the all-gathers before the QKV and FC1 GEMMs, and in
    backward before the projection's and FC2's data gradients) moves chunks peer to peer and
    holds 1 SM while the GEMM runs in ``tp`` chunks; ``pipeline`` (the reduce-scatters after the
    projection and FC2 in forward) splits the GEMM into ``num_splits`` chunks and reduces each
    chunk's output on ``num_sm`` SMs that the GEMM gives up (``set_sm_margin``), the last
    chunk's reduction left exposed after the GEMM; ``bulk`` (the backward's all-gather of the
    saved input and reduce-scatter of the data gradient beside the weight-gradient GEMM) runs
    its ``num_sm`` SMs beside the GEMM.

    A ``pipeline`` overlap with ``set_sm_margin`` launches its GEMM chunks on ``SMs -
    num_sm`` SMs for the GEMM's whole length, not only while its reduce-scatter runs
    (Transformer Engine v1.8 ``transformer_engine/pytorch/csrc/comm_gemm_overlap.h``:
    ``_math_sms = set_sm_margin ? multiProcessorCount - num_comm_sm : multiProcessorCount``,
    passed to every chunk of ``split_overlap_rs``); the ``bulk`` and ``ring_exchange`` methods
    (``set_sm_margin`` 0) take SMs only while their kernels run.

    Attributes
    ----------
    fwd_comm_sms, bwd_comm_sms
        SMs the communication kernels take from a GEMM while they run, averaged over the
        phase's collectives (each of a layer's sequence-parallel collectives moves the same
        ``s b h`` bytes); a pipelined reduce-scatter's kernels run on the SMs its GEMM gave up
        and take none.
    fwd_margin_sms
        SMs the forward's reduce-scattered GEMMs give up for their whole length (the
        ``pipeline`` methods' ``num_sm`` with ``set_sm_margin``), averaged over those GEMMs.
    fwd_exposed, bwd_exposed
        Share of the phase's TP communication time left after its GEMMs: the pipelined
        reduce-scatters' last chunk, ``1 / num_splits`` of two of the forward's four.
    source
        Where the SM counts come from.
    """

    fwd_comm_sms: float
    bwd_comm_sms: float
    fwd_exposed: float
    bwd_exposed: float
    source: str
    fwd_margin_sms: float = 0.0

    def slowdown(self, phase: str, sm_count: int) -> float:
        """Fractional slowdown of a GEMM while the phase's communication kernels run beside it:
        it keeps ``sm_count - n`` of the ``sm_count`` SMs, so takes ``n / (sm_count - n)``
        longer (SM-bound GEMMs).

        >>> round(TP_OVERLAP_UB_H100.slowdown("F", 132), 4), round(TP_OVERLAP_UB_H100.slowdown("B", 132), 4)
        (0.0038, 0.0366)
        """
        n = self.fwd_comm_sms if phase == "F" else self.bwd_comm_sms
        return n / max(sm_count - n, 1.0)

    def margin_slowdown(self, phase: str, sm_count: int) -> float:
        """Fractional slowdown of a reduce-scattered GEMM of the phase over its whole length:
        it runs on ``sm_count - m`` SMs (``m = fwd_margin_sms`` forward, none backward), so
        takes ``m / (sm_count - m)`` longer.

        >>> round(TP_OVERLAP_UB_H100.margin_slowdown("F", 132), 4)  # 20 of 132 SMs: 20 / 112
        0.1786
        """
        m = self.fwd_margin_sms if phase == "F" else 0.0
        return m / max(sm_count - m, 1.0)

    def exposed(self, phase: str) -> float:
        """Share of the phase's TP communication left exposed after its GEMMs."""
        return self.fwd_exposed if phase == "F" else self.bwd_exposed


#: TE userbuffers on H100 as NeMo and Megatron-Bridge configure it: the medians over the nine
#: H100 ``ub_cfg_h100_*`` files of NeMo-Framework-Launcher 24.07 (0b1a110c,
#: ``launcher_scripts/conf/training/tp_overlap/``; the same values as Megatron-Bridge's
#: ``training/comm_overlap.py`` ``userbuffers_*_h100_*``): forward QKV and FC1 all-gathers by
#: ring exchange (1 SM while they run), projection reduce-scatter pipelined on 24 SMs and FC2's
#: on 16, both in 4 splits with ``set_sm_margin: 1``: those GEMMs run on 132 - 24 and 132 - 16
#: SMs throughout, (24 + 16) / 2 = 20 SMs, and their reduce-scatters take nothing more; the
#: ring exchanges (1 + 0 + 1 + 0) / 4 = 0.5 SMs averaged over the forward's four collectives;
#: 2 x (1/4) / 4 = 1/8 of the forward's TP time exposed; backward QKV dgrad bulk 4, QKV wgrad
#: bulk 16, FC1 dgrad bulk 2, FC1 wgrad bulk 4 (``set_sm_margin: 0``: while they run),
#: projection and FC2 dgrad ring exchange 1 each: 28 / 6 = 4.67 SMs, nothing exposed. GEMM
#: chunking's own efficiency loss (chunks of ``M / tp`` or ``M / 4`` rows) is not modelled.
TP_OVERLAP_UB_H100 = TPOverlap(
    fwd_comm_sms=0.5,
    bwd_comm_sms=28 / 6,
    fwd_exposed=0.125,
    bwd_exposed=0.0,
    source="TE userbuffers ub_cfgs, NeMo-Framework-Launcher 24.07 ub_cfg_h100_* medians; "
    "pipelined reduce-scatter GEMMs on SMs - num_sm (TE v1.8 comm_gemm_overlap.h _math_sms)",
    fwd_margin_sms=20.0,
)

#: PyTorch eager dispatch cost per operator (CPU side), about 10 us: H. He, "Making Deep Learning
#: Go Brrrr From First Principles" (2022), "overhead" section (PyTorch executes on the order of
#: 100k operators per second). Used where dispatch is serialised (nn.DataParallel threads share
#: the GIL).
PYTORCH_DISPATCH_PER_OP_S = 10 * units.us


@dataclass(frozen=True, kw_only=True)
class SoftwarePreset:
    """Knobs of one training stack.

    Every field but ``name``, ``dp_mode`` and ``sources`` has a default (the plain synchronous
    stack: one bucket after backward, no host costs, no sharding); presets state what differs.

    Attributes
    ----------
    name
        Preset name (``--software``).
    dp_mode
        Default data-parallel variant.
    bucket_bytes
        Gradient bucket (fusion buffer) size in bytes; ``None``: one bucket of all gradients.
    first_bucket_bytes
        Size of the first (last-layer) bucket, PyTorch DDP's small first bucket.
    overlap_grad_comm
        Whether bucket all-reduces start during backward.
    fusion_cycle_s
        Horovod's background-thread cycle: a ready tensor waits on average half a cycle.
    comm_algorithm
        Algorithm passed to the collective model (``auto``, ``ring``, ``tree``).
    host_step_s
        Per-step host time on the critical path (framework loop, callbacks), seconds.
    dispatch_per_op_s
        CPU dispatch cost per kernel, serialised over replicas when the stack is single-process
        multi-threaded (nn.DataParallel); 0 where dispatch runs ahead asynchronously.
    zero, fsdp
        Sharding the stack applies by default.
    overlap_compute_slowdown
        See :data:`COMM_OVERLAP_COMPUTE_SLOWDOWN`.
    host_split_per_sample_s
        Host time per sample of the *other* replicas, spent every step before compute starts
        (``c (dp - 1) batch_per_replica``): single-process multi-replica stacks that split and
        copy the global batch on the host. See :data:`TF_MIRRORED_SPLIT_PER_SAMPLE_S`.
    dispatch_mode
        How the framework issues kernels, a key of
        :data:`perfmodel.compute.params.HOST_DISPATCH_S`: ``"pytorch-eager"`` for the PyTorch
        stacks (every op dispatched from Python, which sets the per-layer host floor
        ``ComputeParams.host_dispatch_s``, see :meth:`SoftwarePreset.host_dispatch_s`),
        ``"none"`` for graph-mode stacks and those whose framework the preset does not fix
        (TensorFlow graphs, Horovod, cuda-convnet2, Crossbow): no host floor.
    amp
        Mixed-precision style (:class:`~perfmodel.parallel.recipe.AmpStyle`): ``autocast``
        (default: ``torch.autocast``/Keras policies, FP32 weights and gradients, casts every
        step), ``half-model`` (Megatron, DeepSpeed: 16-bit model, FP32 master in the optimizer)
        or ``fsdp-policy`` (FSDP2 ``MixedPrecisionPolicy``).
    fp32_grads_bf16
        half-model stacks: bf16/fp8 runs accumulate and reduce gradients in FP32 (Megatron-LM
        ``arguments.py``: bf16 sets ``accumulate_allreduce_grads_in_fp32``).
    fp32_grad_reduce
        fsdp-policy stacks: ``reduce_dtype=float32`` (else the reduction runs in bf16).
    overlap_param_gather
        ZeRO-1/2 and distributed-optimizer parameter all-gathers overlap the next forward
        (Megatron-Core ``overlap_param_gather``); ZeRO-3/FSDP gathers always prefetch.
    tp_comm_overlap
        Tensor-parallel collectives overlap the GEMMs (Transformer Engine userbuffers,
        Megatron-Core ``tp_comm_overlap``).
    tp_overlap
        How that overlap costs compute (:class:`TPOverlap`: SMs held by the communication
        kernels, exposed tails); ``None``: ``overlap_compute_slowdown`` of the overlapped time.
    distributed_optimizer
        ``zero=1`` is Megatron-Core's distributed optimizer (FP32 gradient buffer replicated).
    bucket_params, bucket_params_per_dp
        Megatron-Core bucket size in parameters: ``max(bucket_params, bucket_params_per_dp x
        dp)``; bytes follow the recipe's gradient-reduction bytes.
    bucket_elements
        Bucket size in elements (DeepSpeed ``reduce_bucket_size``); bytes follow the recipe.
    selective_recompute
        What ``recompute=selective`` re-runs on this stack
        (:class:`~perfmodel.parallel.recipe.SelectiveRecompute`, or Megatron-Core's default
        ``recompute_modules`` as a :class:`~perfmodel.workload.memory.ModuleRecompute`).
    cross_entropy
        How the stack computes the loss, for the memory of its backward
        (:class:`~perfmodel.parallel.recipe.CrossEntropy`).
    fp8_saves_fp8_inputs
        Under FP8 the transformer blocks' GEMM inputs are saved for backward in FP8
        (Transformer Engine; :func:`~perfmodel.parallel.recipe.fp8_saved_input_delta`).
    master_copy
        half-model stacks: where the optimizer keeps the master copy of the 16-bit weights
        (:class:`~perfmodel.parallel.stack_choices.MasterCopy`: a separate FP32 copy, or Apex
        ``DistributedFusedAdam``'s rule under NeMo, whose bytes follow :attr:`optimizer_dtype`).
    optimizer_dtype
        The dtype of the optimizer's state tensors (Adam's two moments; momentum): FP32 on
        every stack by default (``torch.optim``, Apex and TE fused Adam, Megatron-Core
        core_r0.8.0, DeepSpeed); a run may keep them in 16 bit (NeMo ``optim.dtype: bf16``,
        Apex ``DistributedFusedAdam(dtype=torch.bfloat16)``; Megatron-Core's later
        ``exp_avg_dtype``): ``--software-option optimizer_dtype=bf16``.
    activation_offload_layers
        Transformer blocks whose saved activations go to host memory after their forward and
        come back for their backward (Megatron-Core ``cpu_offloading_num_layers`` with
        ``cpu_offloading_activations``, Transformer Engine ``get_cpu_offload_context``): 0 on
        every preset; the Megatron-Bridge GB200/GB300 Megatron-FSDP Llama 3 70B recipes set
        20-40 (``--software-option cpu_offloading_num_layers=20``).
    gradient_accumulation
        The stack can split a replica's batch into micro-batches and accumulate their gradients
        before one optimizer step (PyTorch ``no_sync``/DDP, Megatron ``--micro-batch-size``,
        DeepSpeed ``gradient_accumulation_steps``, FSDP, Horovod ``backward_passes_per_step``),
        so ``predict`` may choose a micro-batch that fits. ``False`` for the TensorFlow/Keras
        graph stacks and cuda-convnet2 (Keras 2 ``Model.fit`` under ``MirroredStrategy`` and
        tf_cnn_benchmarks run one optimizer step per batch, with no accumulation setting): the
        whole per-replica batch runs at once, and a batch that does not fit is reported so
        (issue 28, item 6).
    sequence_parallel_with_tp
        Sequence parallelism is on whenever ``tp > 1`` unless the scenario says otherwise
        (``Scenario.sequence_parallel``): the stack's recipes turn it on with tensor parallelism.
    zero_grad_allreduce
        ZeRO-1 all-reduces the gradients over the data-parallel group and each rank keeps its
        shard of the sum (InternEvo), instead of reduce-scattering them.
    param_sync
        How ZeRO-1/2 parameters reach the other ranks after the step
        (:class:`~perfmodel.parallel.recipe.ParamSync`: all-gather, or one broadcast per owner).
    param_owners
        Which rank owns each tensor when owners broadcast
        (:class:`~perfmodel.parallel.stack_choices.ParamOwners`): InternEvo's module walk
        (``overlap_sync_param`` on, the default since 2023-08), or its size-greedy partition
        (``overlap_sync_param`` off, and every release before the walk existed).
    fusion
        The kernels a transformer block launches (:class:`~perfmodel.workload.kernels.Fusion`):
        ``eager`` (PyTorch eager, the default), ``te`` (Megatron with Transformer Engine /
        Megatron's fused kernels). ``Scenario.compile`` turns a compilable stack to ``compile``.
    apex_rms_norm, fused_rope
        Norms and rotary embeddings run as CUDA extensions beside the fusion mode's other
        kernels (:class:`~perfmodel.workload.kernels.KernelRecipe`; InternLM July 2023).
    fp8_recipe
        The FP8 recipe ``--precision fp8`` assumes on this stack
        (:class:`~perfmodel.workload.kernels.Fp8Recipe`; ``--fp8-recipe`` chooses another):
        Transformer Engine delayed scaling for the Megatron and DeepSpeed stacks, torchao
        tensor-wise dynamic scaling for the PyTorch-native ones.
    optimizer_impl, grad_clip
        How the optimizer step runs (:class:`~perfmodel.workload.kernels.OptimizerImpl`:
        ``fused``, the default, or ``torch.optim``'s ``foreach``) and the gradient clipping
        before it (:class:`~perfmodel.workload.kernels.GradClip`).
    fp8_params
        Under a Transformer Engine FP8 recipe the model's linear weights are stored in FP8
        (Megatron ``--fp8-param-gather``, NeMo ``fp8_params``): the optimizer writes them in FP8,
        the distributed optimizer all-gathers them in FP8, and no 16-bit copy is kept beside
        TE's transpose.
    attention_backend
        Fused-attention kernel library the stack runs
        (:class:`~perfmodel.compute.attention.AttentionBackend`): ``sdpa`` for PyTorch's
        ``scaled_dot_product_attention`` with PyTorch 2.5.1-2.8's backend choice
        (:func:`perfmodel.compute.attention.resolve`), ``cudnn`` for Transformer Engine's fused
        attention, ``generic`` where the stack does not fix it (the fitted or default pair).
    processes
        How the stack maps a server's GPUs onto processes
        (:class:`~perfmodel.comm.p2p_read.ProcessLayout`): one process per GPU (the default:
        torchrun-launched PyTorch DDP / FSDP / Megatron / DeepSpeed / torchtitan / NeMo,
        ``horovodrun -np N``), or one process driving every GPU of its server (in-graph
        replication: TensorFlow ``MirroredStrategy`` and tf_cnn_benchmarks'
        ``variable_update=replicated``, PyTorch ``nn.DataParallel``, Keras ``multi_gpu_model``).
        NCCL gives same-process P2P connections direct pointers up to release 2.22
        (:func:`~perfmodel.comm.p2p_read.p2p_path`); the system costs price the stack's
        collectives on the topology stamped with this layout
        (:func:`perfmodel.pipeline.inputs.system_costs`).
    even_pipeline_split
        Pipeline stages need equal numbers of blocks (Megatron-LM asserts ``num_layers`` divisible
        by the pipeline size); ``False``: uneven splits as even as possible (torchtitan
        ``generate_split_points``).
    pipeline_max_zero
        The highest ZeRO stage the stack runs with pipeline parallelism (``pp > 1``); ``None``:
        no limit. DeepSpeed's ``PipelineEngine`` asserts ``zero_optimization_stage() <
        ZeroStageEnum.gradients``, "ZeRO-2 and ZeRO-3 are incompatible with pipeline
        parallelism" (deepspeedai/DeepSpeed ``deepspeed/runtime/pipe/engine.py``), so its presets
        say 1: a plan above it is refused (:func:`perfmodel.pipeline.resolve.plan_for`) and plan
        search never enumerates it (:meth:`perfmodel.search.plans.SearchSpace.for_preset`). A
        scenario may restate it (``--software-option pipeline_max_zero=3``) for a stack that
        lifts the limit.
    sources
        Where the values come from.
    """

    name: str
    dp_mode: DPMode
    bucket_bytes: float | None = None
    first_bucket_bytes: float | None = None
    overlap_grad_comm: bool = False
    fusion_cycle_s: float = 0.0
    comm_algorithm: str = "auto"
    host_step_s: float = 0.0
    dispatch_per_op_s: float = 0.0
    zero: int = 0
    fsdp: bool = False
    overlap_compute_slowdown: float = COMM_OVERLAP_COMPUTE_SLOWDOWN
    sources: tuple[str, ...]
    host_split_per_sample_s: float = 0.0
    dispatch_mode: str = "none"
    amp: AmpStyle = AmpStyle.AUTOCAST
    fp32_grads_bf16: bool = False
    fp32_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    distributed_optimizer: bool = False
    bucket_params: float | None = None
    bucket_params_per_dp: float = 0.0
    bucket_elements: float | None = None
    selective_recompute: SelectiveRecompute | ModuleRecompute = SelectiveRecompute.ATTENTION_CORE
    zero_grad_allreduce: bool = False
    param_sync: ParamSync = ParamSync.ALLGATHER
    param_owners: ParamOwners = ParamOwners.MODULE_WALK
    cross_entropy: CrossEntropy = CrossEntropy.DEFAULT
    fp8_saves_fp8_inputs: bool = False
    master_copy: MasterCopy = MasterCopy.FP32
    optimizer_dtype: DType = DType.FP32
    activation_offload_layers: int = 0
    tp_overlap: TPOverlap | None = None
    processes: ProcessLayout = ProcessLayout.PER_GPU
    even_pipeline_split: bool = True
    sequence_parallel_with_tp: bool = False
    fusion: Fusion = Fusion.EAGER
    apex_rms_norm: bool = False
    fused_rope: bool = False
    fp8_recipe: Fp8Recipe = Fp8Recipe.TE_DELAYED
    optimizer_impl: OptimizerImpl = OptimizerImpl.FUSED
    grad_clip: GradClip = GradClip.NONE
    fp8_params: bool = False
    attention_backend: AttentionBackend = AttentionBackend.GENERIC
    gradient_accumulation: bool = True
    pipeline_max_zero: int | None = None

    def __post_init__(self) -> None:
        limit = self.pipeline_max_zero
        if limit is not None and (isinstance(limit, bool) or limit not in (0, 1, 2, 3)):
            raise ConfigError(
                f"software preset {self.name}: pipeline_max_zero must be a ZeRO stage 0-3 or "
                f"None (no limit), got {limit!r}",
                value=limit,
                where=f"preset {self.name}",
            )
        if self.dispatch_mode not in HOST_DISPATCH_S:
            raise ConfigError(
                f"software preset {self.name}: unknown dispatch_mode {self.dispatch_mode!r}; "
                f"expected one of {', '.join(HOST_DISPATCH_S)}",
                value=self.dispatch_mode,
                where=f"preset {self.name}",
            )

    @cached_property
    def fusion_wait_s(self) -> float:
        """Mean wait of a ready tensor for Horovod's background cycle, seconds: half of
        :attr:`fusion_cycle_s` (a tensor becomes ready uniformly within a cycle); 0 for stacks
        without one. Cached: the lowering reads it per data-parallel collective (~10^5 per
        FSDP plan), where a property call costs ~27 ns more than the attribute."""
        return self.fusion_cycle_s / 2

    @property
    def eager(self) -> bool:
        """True when the stack dispatches every kernel from Python (PyTorch eager)."""
        return self.dispatch_mode == "pytorch-eager"

    @property
    def compilable(self) -> bool:
        """Whether ``torch.compile`` applies: a PyTorch eager stack whose blocks are PyTorch
        modules (not Transformer Engine's)."""
        return self.eager and self.fusion is Fusion.EAGER

    @property
    def memory_format(self) -> str:
        """Convolution memory format a script on this stack gets unless it asks for another.

        ``"nchw"`` for the PyTorch stacks: tensors are contiguous NCHW by default and
        ``channels_last`` is opt-in (PyTorch tutorial "Channels Last Memory Format"), so tensor-core
        convolutions pay cuDNN's layout transposes (``ComputeParams.conv_layout``). ``"nhwc"``
        otherwise: Keras/TensorFlow default to ``data_format="channels_last"`` and the other
        stacks are not PyTorch (no transposes charged). ``Scenario.memory_format`` overrides it.

        >>> from perfmodel.parallel.software import get_preset
        >>> get_preset("pytorch-ddp").memory_format, get_preset("tf-mirrored").memory_format
        ('nchw', 'nhwc')
        """
        return "nchw" if self.eager else "nhwc"

    def host_dispatch_s(self, measured_eager_s: float | None = None) -> float:
        """Host time per kernel of a training step for ``ComputeParams.host_dispatch_s``, s.

        Eager stacks: ``measured_eager_s`` when given (a calibration profile's own measurement
        for its device, see :func:`perfmodel.api.system_costs`), else
        ``HOST_DISPATCH_S[dispatch_mode]`` (PyTorch eager: 35.55 us, fitted on host-bound H100
        training steps). Graph-mode stacks: 0 (not host-bound), whatever was measured.

        >>> from perfmodel.parallel.software import get_preset
        >>> round(get_preset("pytorch-ddp").host_dispatch_s() * 1e6, 2)
        35.55
        >>> get_preset("fsdp").host_dispatch_s(8e-6), get_preset("tf-replicated").host_dispatch_s(8e-6)
        (8e-06, 0.0)
        """
        if not self.eager:
            return float(HOST_DISPATCH_S[self.dispatch_mode])
        if measured_eager_s is not None and measured_eager_s >= 0:
            return float(measured_eager_s)
        return float(HOST_DISPATCH_S[self.dispatch_mode])

    def with_overrides(self, **kw: object) -> SoftwarePreset:
        return replace(self, **kw)  # type: ignore[arg-type]
