"""Training recipes: what a training stack does with precision, sharding and overlap.

A :class:`Recipe` is one immutable value built once (:func:`build_recipe`) from the software
preset, the precision, the optimizer and the plan. Compute (autocast casts, optimizer traffic),
memory (model-state bytes), communication volumes (gradient reduction and parameter gather
bytes) and the lowering (which communication overlaps, on which stream) read it; none of them
re-derives a precision or overlap rule of its own.

Mixed-precision styles (:class:`AmpStyle`), bytes per parameter (``P`` working weights, ``G``
gradient buffer, ``R`` gradient reduction on the wire, ``A`` parameter all-gather on the wire,
``M`` separate FP32 master copy; 16-bit recipes, fp32/tf32 are 4 everywhere with no master):

==============  ===  =====  =====  ===  ===  =========================================
style           P    G      R      A    M    who
==============  ===  =====  =====  ===  ===  =========================================
autocast        4    4      4      4    0    ``torch.autocast`` + DDP (PyTorch AMP docs:
                                             parameters and gradients stay FP32), TF/Keras
                                             ``mixed_float16`` (FP32 variables)
half-model      2    2 / 4  2 / 4  2    4    Megatron-LM (bf16: FP32 ``main_grad`` buffer and
                                             FP32 all-reduce), DeepSpeed fp16/bf16 (grads and
                                             communication in the 16-bit type)
fsdp-policy     4    4      2 / 4  2    0    FSDP2 ``MixedPrecisionPolicy(param_dtype=bf16)``:
                                             FP32 sharded parameters are the master copy,
                                             all-gathered in bf16; reduce in ``reduce_dtype``
==============  ===  =====  =====  ===  ===  =========================================

Model state per parameter is then ``P + G + M + optimizer state`` (mixed-precision Adam: 16 bytes
in every style but half-model with FP32 gradients, 18), sharded per :class:`Sharding`. The
optimizer state is FP32 unless the run says otherwise (:attr:`Recipe.optimizer_dtype`: Adam's
two moments 8 bytes in FP32, 4 in bf16), and ``M`` follows the stack's
:class:`~perfmodel.parallel.stack_choices.MasterCopy` rule: NeMo 1.0's Apex distributed Adam
keeps 2 bytes (the FP32 value's low half) over a bf16 model with FP32 state and none with bf16
state, so Nemotron-4 340B's ``optim.dtype: bf16`` holds ``2 + 2 + 4 / dp`` bytes per parameter
where FP32 state would hold ``2 + 2 + 10 / dp``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfmodel.compute.attention import AttentionBackend
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.pp_layout import PipelineLayout
from perfmodel.parallel.selective import (
    OpCheckpoint,
    SelectiveRecompute,
    mm_products,
    op_checkpoint,
    transformer_blocks,
)
from perfmodel.parallel.software import SoftwarePreset
from perfmodel.parallel.stack_choices import AmpStyle, CrossEntropy, MasterCopy, ParamSync
from perfmodel.workload.kernels import (
    DEFAULT_KERNELS,
    Fp8Recipe,
    Fusion,
    GradClip,
    KernelRecipe,
    OptimizerImpl,
    fp8_linear,
)
from perfmodel.workload.layers import LayerCost, LayerKind, runs_sum
from perfmodel.workload.memory import ModuleRecompute, Optimizer, model_state_bytes

if TYPE_CHECKING:
    from perfmodel.parallel.plan import ParallelismPlan


class Sharding(str, enum.Enum):
    """Model-state sharding over the data-parallel group.

    ``distributed-optimizer`` is Megatron-Core's ``--use-distributed-optimizer``: optimizer state
    and FP32 master weights sharded, gradients reduce-scattered into the full-size FP32 gradient
    buffer (which stays replicated), parameters all-gathered after the step: ZeRO stage 1.
    ``hsdp`` is FSDP's hybrid sharding: stage 3 within shard groups of ``Recipe.shard_group``
    ranks, replicas across them (gradients reduce-scattered in the group, then all-reduced
    across the replicas).
    """

    NONE = "none"
    ZERO1 = "zero-1"
    ZERO2 = "zero-2"
    ZERO3 = "zero-3"
    FSDP = "fsdp"
    HSDP = "hsdp"
    DISTRIBUTED_OPTIMIZER = "distributed-optimizer"

    @property
    def stage(self) -> int:
        """ZeRO stage equivalent (Rajbhandari et al. SC20): what is sharded."""
        return {
            "none": 0,
            "zero-1": 1,
            "distributed-optimizer": 1,
            "zero-2": 2,
            "zero-3": 3,
            "fsdp": 3,
            "hsdp": 3,
        }[self.value]


def fp8_saved_input_delta(
    layers: Sequence[LayerCost],
    act_bytes: float,
    skip: Callable[[LayerCost], bool] | None = None,
) -> float:
    """Change of one micro-batch's saved activation bytes when the blocks' linear layers run in
    Transformer Engine FP8 (negative: fewer bytes).

    Under FP8, TE's ``Linear``, ``LayerNormLinear`` and ``LayerNormMLP`` save the FP8 cast of
    each GEMM's input (1 byte per element) for the weight gradient instead of the 16-bit input
    (TE v1.8 ``transformer_engine/pytorch/module/linear.py``: ``saved_inputmat`` /
    ``saved_inputmat_t`` are the FP8 ``inputmat`` / ``inputmat_t``; ``layernorm_mlp.py`` saves
    the FP8 ``ln_out`` and ``gelu_out``, and the 16-bit ``fc1_out`` its activation needs). The
    zoo counts a linear layer's input at ``act_bytes`` per element, so each block linear's count
    shrinks to ``1 / act_bytes`` of it, except the attention output projection's: its input, the
    attention output, is also kept in 16 bit by the fused attention for its own backward (which
    the zoo counts there), so the FP8 copy comes in addition (``+ 1 / act_bytes``). Layers
    outside the blocks (the LM head, embeddings) stay 16 bit, as Megatron-Core builds them
    without TE, and so does a block's MoE router, whose GEMM is not FP8
    (:func:`~perfmodel.workload.kernels.fp8_linear`).

    >>> from perfmodel.workload.zoo import build_model
    >>> w = build_model("llama", batch_size=1, hidden=64, layers=1, heads=4, kv_heads=2,
    ...                 ffn_hidden=128, vocab=100, seq_len=8, precision="bf16")
    >>> # qkv, fc1 inputs (8 x 64 x 2 B) and fc2's (8 x 128 x 2 B) halved: -512 - 512 - 1024;
    >>> # attn_out's (8 x 64 x 2 B) FP8 copy added: +512
    >>> fp8_saved_input_delta(w.layers, 2)
    -1536.0
    """
    follows_attention: set[tuple[object, ...]] = set()
    for block in transformer_blocks(layers):
        after_attention = False  # memory-bound layers (an eager output copy) may sit between
        for la in block:
            if la.kind is LayerKind.ATTENTION:
                after_attention = True
            elif la.gemm is not None:
                if after_attention and la.kind is LayerKind.LINEAR:
                    follows_attention.add(la.cost_key())
                after_attention = False
    per_el = 1.0 / act_bytes

    def delta(la: LayerCost) -> float:
        if la.block is None or la.kind is not LayerKind.LINEAR or not fp8_linear(la):
            return 0.0
        if skip is not None and skip(la):  # its saved input is not kept (recomputed)
            return 0.0
        if la.cost_key() in follows_attention:
            return la.activation_bytes * per_el
        return -la.activation_bytes * (1.0 - per_el)

    return float(runs_sum(layers, delta))


@dataclass(frozen=True)
class ComputeRecipe:
    """The part of a :class:`Recipe` the compute model reads (one value per precision style,
    shared by every plan, so cost models cached on it are reused across plans).

    ``autocast_casts``: ``ComputeParams.cast_weights_each_step``; ``grad_bytes``: the gradient
    the optimizer step reads; ``working_copy_bytes``: the 16-bit copy it writes (half-model
    stacks; 0 where the kept weights are the FP32 ones); ``optimizer_impl`` and ``grad_clip``:
    how the step runs (:func:`perfmodel.workload.kernels.optimizer_bytes_per_param`); ``fp8``:
    the FP8 recipe (which GEMM passes accumulate in split mode), ``None`` unless FP8;
    ``attention_backend``: ``ComputeParams.attention_backend``; ``fp32_conv_tf32``:
    ``ComputeParams.fp32_conv_tf32`` (FP32 convolutions on TF32 tensor cores where the GPU has
    them, :attr:`Recipe.fp32_conv_tf32`); ``state_bytes``: bytes per element of each
    optimizer state tensor (:attr:`Recipe.optimizer_dtype`); ``weight_bytes``: bytes of the
    weight value the optimizer step reads and writes (:meth:`Recipe.compute`).
    """

    autocast_casts: bool
    grad_bytes: int
    working_copy_bytes: int
    optimizer_impl: OptimizerImpl = OptimizerImpl.FUSED
    grad_clip: GradClip = GradClip.NONE
    fp8: Fp8Recipe | None = None
    attention_backend: AttentionBackend = AttentionBackend.GENERIC
    fp32_conv_tf32: bool = False
    state_bytes: int = 4
    weight_bytes: int = 4


#: Streams communication runs on (a stream is a FIFO: tasks on one stream never overlap).
STREAM_DP = "dp"  # gradient reduction
STREAM_GATHER = "ag"  # parameter all-gather (ZeRO-3/FSDP prefetch, distributed optimizer)
STREAM_TP = "tp"  # tensor-parallel collectives overlapped with GEMMs
STREAM_COMPUTE = "compute"  # collectives on the critical path of the compute stream


@dataclass(frozen=True)
class CommPolicy:
    """Whether one class of communication overlaps compute, and the stream it runs on."""

    overlap: bool
    stream: str

    def describe(self) -> str:
        return f"{'overlapped' if self.overlap else 'exposed'} on stream {self.stream!r}"


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A training recipe: precision, sharding and overlap, as one value.

    Attributes
    ----------
    precision, amp, optimizer, sharding
        The choices the recipe was built from.
    param_bytes
        Bytes per parameter of the weights kept between steps (before sharding).
    grad_bytes
        Bytes per parameter of the gradient buffer.
    grad_reduce_bytes
        Bytes per parameter of the gradient all-reduce / reduce-scatter on the wire.
    gather_bytes
        Bytes per parameter of a parameter all-gather (ZeRO/FSDP) on the wire.
    master_bytes
        Bytes per parameter of a separate master copy (counted with the optimizer state, as
        ZeRO does); 0 when the kept weights are FP32 already, or when the optimizer steps the
        16-bit weights in place (:class:`~perfmodel.parallel.stack_choices.MasterCopy`).
    optimizer_dtype
        The dtype of the optimizer's state tensors (the preset's ``optimizer_dtype``: FP32
        unless the run sets another, e.g. NeMo ``optim.dtype: bf16``).
    activation_offload_layers
        Transformer blocks whose saved activations wait in host memory between their forward
        and backward (the preset's ``activation_offload_layers``, Megatron-Core
        ``cpu_offloading_num_layers``); :func:`~perfmodel.parallel.stage_memory.stage_memory`
        keeps the others' only.
    gather_per_step
        FSDP2 pipelined by ``torch.distributed.pipelining`` (``pp > 1``): each FSDP unit is
        all-gathered once a step, prefetched in its chunk's first forward, and stays gathered
        to the step's end; its gradients accumulate unsharded and are reduce-scattered once,
        after the stage's last backward, not overlapped with it. torchtitan sets
        ``reshard_after_forward = not pp_enabled`` ("to avoid per-microbatch all-gathers",
        ``apply_fsdp``'s default policy, torchtitan 820504e), and PyTorch 2.5-2.6
        ``torch/distributed/pipelining/stage.py`` ``backward_maybe_with_nosync`` turns
        ``set_reshard_after_backward`` and ``set_requires_gradient_sync`` off for every
        backward and runs FSDP's post-backward (reshard and reduce-scatter) after the last.
        FSDP2's copy kernels follow (:meth:`kernels`: the copy-out and copy-in once a step,
        the unsharded gradient accumulated every micro-batch). With interleaving PyTorch
        reduce-scatters each chunk after that chunk's last backward and FSDP2's final callback
        makes the compute stream wait for it; the lowering issues the rank's reduction after
        its last backward (against reductions fully hidden under the later backwards, 0.3-0.4%
        slower on two interleaved GPT-3 175B plans: rev31). The ``fsdp`` preset takes
        torchtitan's ``reshard_after_forward=False`` for pipelining (``fully_shard``'s
        default, ``True``, regathers in every backward). ``False``: ZeRO-3/FSDP gathers every
        unit in every micro-batch's forward and backward and reduces every micro-batch's
        gradients.
    pipeline_layout
        The run's stated pipeline layout (Megatron-Core ``pipeline_model_parallel_layout``,
        :class:`~perfmodel.parallel.pp_layout.PipelineLayout`): which layers each pipeline chunk
        holds; ``None`` (default): chunks balanced on the layers' times
        (:func:`~perfmodel.parallel.partition.partition`).
    autocast_casts
        Whether every step casts weights to 16 bit and runs autocast's FP32 ops
        (``ComputeParams.cast_weights_each_step``).
    grad_comm, param_gather, tp_comm, pp_send
        Overlap policy and stream of gradient buckets, parameter all-gathers, tensor-parallel
        collectives and pipeline sends.
    bucket_bytes, first_bucket_bytes
        Gradient bucket sizes in bytes (``None``: one bucket of all gradients).
    shard_group
        Ranks model state is sharded over under HSDP, ``hsdp x cp``
        (:attr:`~perfmodel.parallel.plan.ParallelismPlan.fsdp_degree`: torchtitan's
        ``dp_shard_cp`` mesh); 0: the whole ``dp x cp`` group.
    grad_reduce_op
        The gradient collective over the data-parallel group: reduce-scatter from ZeRO-1 on,
        all-reduce without sharding or where the stack all-reduces and keeps its shard
        (:attr:`~perfmodel.parallel.software.SoftwarePreset.zero_grad_allreduce`).
    param_sync
        How ZeRO-1/2 parameters reach the other ranks after the step (:class:`ParamSync`).
    selective_recompute
        What ``recompute=selective`` re-runs (:class:`SelectiveRecompute`, the stack's rule;
        or :class:`~perfmodel.workload.memory.ModuleRecompute`, Megatron-Core's
        ``recompute_modules`` as the run names them).
    cross_entropy
        How the loss is computed, for its backward's memory (:class:`CrossEntropy`).
    fp8_saves_fp8_inputs
        Under ``fp8`` the blocks' linear layers save their inputs in FP8 (Transformer Engine;
        :func:`fp8_saved_input_delta`); torchao's float8 linear saves the high-precision input.
    stack_kernels
        The kernels the stack launches (:class:`~perfmodel.workload.kernels.KernelRecipe`,
        one cached FP8 weight cast per micro-batch; :meth:`kernels` gives a step's): its
        ``fusion``, the preset's or ``compile`` when the scenario compiles (``--compile``); its
        ``fp8`` recipe when the precision is FP8 (``--fp8-recipe``, else the preset's default;
        ``None`` otherwise); FSDP2's copy kernels (``fsdp_copies``, FSDP2 stacks; the
        reduce-scatter input's width is :attr:`grad_reduce_bytes`, which :meth:`kernels` sets
        as ``fsdp_reduce_bytes`` when called: this field keeps KernelRecipe's default); the
        copies of the routed rows
        Megatron-Core makes around its experts (``moe_sort_chunks``, ``moe_quant_padding``:
        from the plan's token dispatcher and the FP8 recipe); the preset's ``apex_rms_norm``
        and ``fused_rope``. :attr:`fusion` and :attr:`fp8` read those two.
    optimizer_impl, grad_clip
        How the optimizer step runs and the gradient clipping before it (the preset's).
    fp8_params
        The FP8 linear weights are stored in FP8 (the preset's ``fp8_params`` under a
        Transformer Engine recipe): gathered in FP8, no 16-bit copy beside TE's cache.
    attention_backend
        The fused-attention kernel library of the stack
        (:class:`~perfmodel.compute.attention.AttentionBackend`).
    fp32_conv_tf32
        An FP32 run's convolutions use TF32 tensor cores on GPUs that have them (Ampere and
        newer), as PyTorch runs them by default: ``torch.backends.cudnn.allow_tf32`` defaults
        to ``True`` while ``torch.backends.cuda.matmul.allow_tf32`` defaults to ``False``
        (PyTorch >= 1.12, docs ``notes/cuda.rst`` "TensorFloat-32 (TF32) on Ampere (and later)
        devices"), so matmuls stay FP32. Set for the PyTorch presets (issue 28, item 5).
    sources
        Where the preset's recipe comes from.
    """

    precision: Precision
    amp: AmpStyle
    optimizer: Optimizer
    sharding: Sharding
    param_bytes: int
    grad_bytes: int
    grad_reduce_bytes: int
    gather_bytes: int
    master_bytes: int
    autocast_casts: bool
    grad_comm: CommPolicy
    param_gather: CommPolicy
    tp_comm: CommPolicy
    pp_send: CommPolicy
    bucket_bytes: float | None = None
    first_bucket_bytes: float | None = None
    shard_group: int = 0
    selective_recompute: SelectiveRecompute | ModuleRecompute = SelectiveRecompute.ATTENTION_CORE
    grad_reduce_op: CollectiveOp = CollectiveOp.ALLREDUCE
    param_sync: ParamSync = ParamSync.ALLGATHER
    cross_entropy: CrossEntropy = CrossEntropy.DEFAULT
    fp8_saves_fp8_inputs: bool = False
    stack_kernels: KernelRecipe = DEFAULT_KERNELS
    optimizer_impl: OptimizerImpl = OptimizerImpl.FUSED
    grad_clip: GradClip = GradClip.NONE
    fp8_params: bool = False
    attention_backend: AttentionBackend = AttentionBackend.GENERIC
    fp32_conv_tf32: bool = False
    sources: tuple[str, ...] = ()
    optimizer_dtype: DType = DType.FP32
    activation_offload_layers: int = 0
    pipeline_layout: PipelineLayout | None = None
    gather_per_step: bool = False

    @property
    def fusion(self) -> Fusion:
        """The kernels a block launches (:attr:`stack_kernels`' fusion)."""
        return self.stack_kernels.fusion

    @property
    def fp8(self) -> Fp8Recipe | None:
        """The FP8 recipe (:attr:`stack_kernels`'), ``None`` unless the precision is FP8."""
        return self.stack_kernels.fp8

    @property
    def compute(self) -> ComputeRecipe:
        """What the compute model reads (:class:`ComputeRecipe`).

        The optimizer step reads and writes each state tensor in :attr:`optimizer_dtype` and
        the weight at the precision the optimizer keeps it: a master copy at least as wide as
        the state (:attr:`master_bytes`; FP32, or Apex's full copy in its ``dtype``), written
        back to the 16-bit working weights; Apex ``DistributedFusedAdam``'s 16-bit remainders
        (a master copy narrower than its FP32 state) with the bf16 weight holding the high
        bits, both updated in place (``store_param_remainders``: no separate working copy); no
        master copy: the kept weights themselves (FP32 parameters, or the 16-bit model under
        ``store_params=False``)
        (:class:`~perfmodel.parallel.stack_choices.MasterCopy`).

        >>> from perfmodel.parallel.software import get_preset, with_software_options
        >>> from perfmodel.parallel.plan import ParallelismPlan
        >>> nemo, plan = get_preset("nemo"), ParallelismPlan(dp=2, zero=1)
        >>> c = build_recipe(nemo, Precision.BF16, Optimizer.ADAM, plan).compute
        >>> c.state_bytes, c.weight_bytes, c.working_copy_bytes  # FP32 state, remainders
        (4, 4, 0)
        >>> bf16 = with_software_options(nemo, {"optim.dtype": "bf16"})
        >>> c = build_recipe(bf16, Precision.BF16, Optimizer.ADAM, plan).compute
        >>> c.state_bytes, c.weight_bytes, c.working_copy_bytes  # bf16 state, no master copy
        (2, 2, 0)
        """
        state = self.optimizer_dtype.itemsize
        master = self.master_bytes
        if master == 0:  # the kept weights are the ones updated
            weight, working = self.param_bytes, 0
        elif master < state:  # Apex remainders: the low bits beside the 16-bit weight
            weight, working = master + self.param_bytes, 0
        else:
            weight, working = master, self.param_bytes
        return ComputeRecipe(
            self.autocast_casts,
            self.grad_bytes,
            working,
            self.optimizer_impl,
            self.grad_clip,
            self.fp8,
            self.attention_backend,
            self.fp32_conv_tf32,
            state_bytes=state,
            weight_bytes=weight,
        )

    def kernels(self, microbatches: int = 1) -> KernelRecipe:
        """What a workload of this recipe is built with
        (:class:`~perfmodel.workload.kernels.KernelRecipe`) for a step of ``microbatches``
        micro-batches per replica: the fusion mode, the FP8 recipe, FSDP2's copies (with the
        reduce-scatter input's width, :attr:`grad_reduce_bytes` as it is now; under
        :attr:`gather_per_step` each micro-batch's share of the once-a-step copies,
        ``1 / microbatches``) and the share of a cached FP8 weight cast each micro-batch
        carries (``1 / microbatches``).

        >>> from perfmodel.parallel.software import get_preset
        >>> from perfmodel.parallel.plan import ParallelismPlan
        >>> r = build_recipe(get_preset("megatron-core"), Precision.FP8, Optimizer.ADAM,
        ...                  ParallelismPlan(dp=8))
        >>> k = r.kernels(4)  # FP8 parameters: the weight's transpose, once per step
        >>> k.fusion.value, k.fp8.value, k.weight_cast_share
        ('te', 'te-delayed', 0.125)
        """
        per_mb = 1.0 / max(int(microbatches), 1)  # a once-a-step cost's share of one
        share = 1.0
        if self.fp8 is not None and self.fp8.caches_weights:
            share = per_mb
            if self.fp8_params:  # the weight is FP8 already: only its transpose, 1 + 1 of 4 B
                share *= 0.5
        return replace(
            self.stack_kernels,
            weight_cast_share=share,
            fsdp_reduce_bytes=self.grad_reduce_bytes,
            fsdp_step_share=per_mb if self.gather_per_step else 0.0,
        )

    @property
    def optimizer_state_bytes(self) -> int:
        """Bytes per parameter of the optimizer's state tensors in :attr:`optimizer_dtype`
        (``Optimizer.state_bytes_per_param`` counts them in FP32, 4 bytes each): Adam 8 in
        FP32, 4 in bf16."""
        return self.optimizer.state_bytes_per_param * self.optimizer_dtype.itemsize // 4

    @property
    def state_bytes(self) -> int:
        """Optimizer state plus master-copy bytes per parameter (ZeRO's ``K``).

        >>> from perfmodel.parallel.software import get_preset, with_software_options
        >>> from perfmodel.parallel.plan import ParallelismPlan
        >>> nemo = get_preset("nemo")
        >>> plan = ParallelismPlan(dp=2, zero=1)
        >>> build_recipe(nemo, Precision.BF16, Optimizer.ADAM, plan).state_bytes  # 8 + 2
        10
        >>> bf16 = with_software_options(nemo, {"optim.dtype": "bf16"})
        >>> build_recipe(bf16, Precision.FP8, Optimizer.ADAM, plan).state_bytes  # 4 + 0
        4
        """
        return self.optimizer_state_bytes + self.master_bytes

    def shard_degree(self, dp: int) -> int:
        """Ranks the sharded dense model state is split over: the HSDP shard group, else ``dp``
        (the routed experts': :attr:`~perfmodel.parallel.plan.ParallelismPlan.expert_shard_degree`,
        :meth:`expert_state_bytes`)."""
        return self.shard_group if self.sharding is Sharding.HSDP else dp

    def model_state_bytes(self, params: float, dp: int) -> tuple[float, float, float]:
        """``(weights, gradients, optimizer state)`` bytes per GPU for ``params`` parameters.

        See :func:`perfmodel.workload.memory.model_state_bytes`. Mixed-precision Adam under
        FSDP on 8 GPUs: ``16 x params / 8``.

        >>> from perfmodel.parallel.software import get_preset
        >>> from perfmodel.parallel.plan import ParallelismPlan
        >>> plan = ParallelismPlan(dp=8, fsdp=True)
        >>> r = build_recipe(get_preset("fsdp"), Precision.BF16, Optimizer.ADAM, plan)
        >>> sum(r.model_state_bytes(8e6, 8))
        16000000.0
        """
        return self._state_bytes(params, self.shard_degree(dp))

    def expert_state_bytes(
        self, params: float, plan: ParallelismPlan
    ) -> tuple[float, float, float]:
        """``(weights, gradients, optimizer state)`` bytes per GPU for ``params`` routed-expert
        parameters: as :meth:`model_state_bytes`, sharded over
        :attr:`~perfmodel.parallel.plan.ParallelismPlan.expert_shard_degree` (the expert
        data-parallel group, under HSDP its share within one replica group).

        >>> from perfmodel.parallel.software import get_preset
        >>> from perfmodel.parallel.plan import ParallelismPlan
        >>> plan = ParallelismPlan(dp=4, cp=2, fsdp=True, hsdp=2, ep=4)  # expert shard degree 1
        >>> r = build_recipe(get_preset("torchtitan"), Precision.BF16, Optimizer.ADAM, plan)
        >>> sum(r.expert_state_bytes(8e6, plan))  # 16 B each, unsharded
        128000000.0
        """
        return self._state_bytes(params, plan.expert_shard_degree)

    def _state_bytes(self, params: float, ranks: int) -> tuple[float, float, float]:
        """``(weights, gradients, optimizer state)`` bytes per GPU of ``params`` parameters
        whose state the recipe's sharding stage splits over ``ranks``
        (:func:`perfmodel.workload.memory.model_state_bytes`)."""
        return model_state_bytes(
            params,
            param_bytes=self.param_bytes,
            grad_bytes=self.grad_bytes,
            state_bytes=self.state_bytes,
            stage=self.sharding.stage,
            dp=ranks,
        )

    def describe(self, *, tp: int = 1, pp: int = 1, attention: bool = True) -> list[str]:
        """``predict --explain``'s training-recipe lines: what the run does, leaving out what does
        not run in it (audit15 item 6). The autocast style is named only under 16-bit or FP8
        precision (an FP32/TF32 run casts nothing); parameter gathers and the post-step parameter
        sync only when the model state is sharded (plain DDP has none); tensor-parallel
        collectives only with ``tp > 1``, pipeline sends only with ``pp > 1``, the attention
        backend only for a model with attention (``attention``)."""
        low = self.precision.mixed
        sharded = self.sharding is not Sharding.NONE
        amp = f" ({self.amp.value})" if low else ""
        gather = f"param gather {self.gather_bytes}, " if sharded else ""
        sync = (
            f"; param sync ({self.param_sync.value}) {self.param_gather.describe()}"
            if sharded
            else ""
        )
        lines = [
            f"precision {self.precision.value}{amp}; optimizer {self.optimizer.value}; "
            f"sharding {self.sharding.value}",
            f"bytes/param: weights {self.param_bytes}, grads {self.grad_bytes}, "
            f"grad reduction {self.grad_reduce_bytes}, {gather}master copy {self.master_bytes}, "
            f"optimizer state {self.optimizer_state_bytes} ({self.optimizer_dtype.value})",
            f"grad reduction ({self.grad_reduce_op.value}) {self.grad_comm.describe()}{sync}",
            f"kernels: {self.fusion.value}"
            + (f"; FP8 recipe {self.fp8.value}" if self.fp8 is not None else "")
            + f"; optimizer step {self.optimizer_impl.value}"
            + (f", grad clip {self.grad_clip.value}" if self.grad_clip is not GradClip.NONE else "")
            + ("; FP8 parameters" if self.fp8_params else "")
            + ("; FSDP2 copy-in/copy-out kernels" if self.stack_kernels.fsdp_copies else "")
            + (
                "; units gathered once a step, reduced after the last backward (pipelined FSDP2)"
                if self.gather_per_step
                else ""
            )
            + (
                f"; activations of {self.activation_offload_layers} blocks offloaded to the host"
                if self.activation_offload_layers
                else ""
            ),
            f"autocast casts each step: {'yes' if self.autocast_casts else 'no'}"
            + (
                "; FP32 convolutions in TF32 where the GPU has it (cudnn.allow_tf32 default), "
                "matmuls FP32"
                if self.fp32_conv_tf32
                else ""
            ),
        ]
        streams = []
        if tp > 1:
            streams.append(f"tensor-parallel comm {self.tp_comm.describe()}")
        if pp > 1:
            streams.append(f"pipeline sends {self.pp_send.describe()}")
        if streams:
            lines.append("; ".join(streams))
        if attention:
            lines.append(f"attention backend {self.attention_backend.value}")
        return lines

    def to_dict(self) -> dict[str, object]:
        return {
            "precision": self.precision.value,
            "amp": self.amp.value,
            "optimizer": self.optimizer.value,
            "sharding": self.sharding.value,
            "param_bytes": self.param_bytes,
            "grad_bytes": self.grad_bytes,
            "grad_reduce_bytes": self.grad_reduce_bytes,
            "gather_bytes": self.gather_bytes,
            "master_bytes": self.master_bytes,
            "optimizer_dtype": self.optimizer_dtype.value,
            "optimizer_state_bytes": self.optimizer_state_bytes,
            "activation_offload_layers": self.activation_offload_layers,
            "autocast_casts": self.autocast_casts,
            "grad_comm": {"overlap": self.grad_comm.overlap, "stream": self.grad_comm.stream},
            "param_gather": {
                "overlap": self.param_gather.overlap,
                "stream": self.param_gather.stream,
            },
            "tp_comm": {"overlap": self.tp_comm.overlap, "stream": self.tp_comm.stream},
            "pp_send": {"overlap": self.pp_send.overlap, "stream": self.pp_send.stream},
            "bucket_bytes": self.bucket_bytes,
            "shard_group": self.shard_group,
            "selective_recompute": self.selective_recompute.value,
            "grad_reduce_op": self.grad_reduce_op.value,
            "param_sync": self.param_sync.value,
            "cross_entropy": self.cross_entropy.value,
            "fp8_saves_fp8_inputs": self.fp8_saves_fp8_inputs,
            "fusion": self.fusion.value,
            "fp8_recipe": None if self.fp8 is None else self.fp8.value,
            "optimizer_impl": self.optimizer_impl.value,
            "grad_clip": self.grad_clip.value,
            "fsdp_copies": self.stack_kernels.fsdp_copies,
            "gather_per_step": self.gather_per_step,
            "fp8_params": self.fp8_params,
            "attention_backend": self.attention_backend.value,
            "sources": list(self.sources),
        } | ({"pipeline_layout": self.pipeline_layout.text} if self.pipeline_layout else {})


def _sharding(preset: SoftwarePreset, plan: ParallelismPlan) -> Sharding:
    """The model-state sharding of ``plan`` under ``preset`` (:func:`build_recipe`).

    An FSDP plan whose shard degree is 1 (the HSDP shard group, else the ``dp x cp`` ranks
    holding the dense weights: one GPU, or ``hsdp=1``) runs unsharded, as the FSDP stacks do:
    torchtitan applies ``fully_shard`` only when ``parallel_dims.fsdp_enabled`` (``dp_shard > 1
    or cp > 1``; ``torchtitan/parallelisms/parallelize_llama.py`` at 3f20451 (2024-12-26), the
    preset's version), else DDP or nothing; FSDP1 clamps any strategy to ``NO_SHARD`` at world
    size 1 (PyTorch ``torch/distributed/fsdp/_init_utils.py`` ``_init_core_state``, 2.x); FSDP2
    ``fully_shard`` on a one-rank mesh skips its all-gather with copy-in/copy-out and its
    reduce-scatter (``FSDPParamGroup.unshard`` / ``wait_for_unshard`` ``world_size == 1``,
    ``_fsdp_collectives.foreach_reduce``; PyTorch PRs 160135 and 162021, 2025). No shard group,
    no collectives, no FSDP2 copy kernels (:attr:`KernelRecipe.fsdp_copies`).
    """
    if plan.fsdp:
        if not plan.fsdp_shards:
            return Sharding.NONE
        return Sharding.HSDP if plan.hsdp else Sharding.FSDP
    if plan.zero == 1 and preset.distributed_optimizer:
        return Sharding.DISTRIBUTED_OPTIMIZER
    return {0: Sharding.NONE, 1: Sharding.ZERO1, 2: Sharding.ZERO2, 3: Sharding.ZERO3}[plan.zero]


#: The :class:`Recipe` fields that are the software preset's values as they are
#: (:class:`~perfmodel.parallel.software_preset.SoftwarePreset`, the same names);
#: :func:`build_recipe` derives the others from the preset, precision and plan.
_RECIPE_AS_PRESET = (
    "first_bucket_bytes", "param_sync", "cross_entropy", "optimizer_impl", "grad_clip",
    "attention_backend", "optimizer_dtype", "activation_offload_layers",
)  # fmt: skip


def build_recipe(
    preset: SoftwarePreset,
    precision: Precision,
    optimizer: Optimizer,
    plan: ParallelismPlan,
    *,
    compile: bool | None = None,
    fp8_recipe: Fp8Recipe | None = None,
    recompute_modules: frozenset | None = None,
    pipeline_layout: PipelineLayout | None = None,
) -> Recipe:
    """The recipe of ``preset`` at ``precision`` with ``optimizer`` under ``plan``.

    ``recompute_modules``: Megatron-Core's ``recompute_modules`` of a ``recompute=selective``
    run (:class:`~perfmodel.workload.memory.RecomputeModule`), replacing the preset's rule.
    ``pipeline_layout``: the run's stated pipeline layout (:attr:`Recipe.pipeline_layout`).

    Byte counts follow the module table; overlap policies follow the preset's fields
    (``overlap_grad_comm``, ``overlap_param_gather``, ``tp_comm_overlap``). ZeRO-3/FSDP
    parameter all-gathers always prefetch on their own stream (PyTorch FSDP
    ``BackwardPrefetch.BACKWARD_PRE`` and FSDP2's implicit prefetch; DeepSpeed
    ``stage3_prefetch_bucket_size``), never FIFO behind the gradient reduce-scatter.

    ``compile``: the model runs under ``torch.compile`` (``Fusion.COMPILE``; ``None`` or
    ``False``: the preset's fusion). ``fp8_recipe``: the FP8 recipe of ``precision="fp8"``
    (``None``: the preset's ``fp8_recipe``). FSDP2 stacks gather the weights of FP8 linears in
    FP8 under a recipe that can (torchao tensor-wise): 1 byte per parameter on the wire.

    Raises
    ------
    ConfigError
        ``compile`` on a stack that does not run PyTorch eager modules (Transformer Engine
        stacks), or an FP8 recipe without ``precision="fp8"``.

    >>> from perfmodel.parallel.software import get_preset
    >>> from perfmodel.parallel.plan import ParallelismPlan
    >>> adam = Optimizer.ADAM
    >>> r = build_recipe(get_preset("pytorch-ddp"), Precision.FP16, adam, ParallelismPlan(dp=8))
    >>> r.grad_reduce_bytes, r.autocast_casts  # DDP under autocast all-reduces FP32 gradients
    (4, True)
    >>> r = build_recipe(get_preset("megatron"), Precision.BF16, adam, ParallelismPlan(dp=8))
    >>> r.param_bytes, r.grad_reduce_bytes, r.master_bytes, r.autocast_casts
    (2, 4, 4, False)
    """
    sharding = _sharding(preset, plan)
    fusion = _fusion(preset, compile)
    fp8 = _fp8(preset, precision, fp8_recipe)
    fp8_params = preset.fp8_params and fp8 is not None and fp8.caches_weights
    _check_activation_offload(preset.activation_offload_layers, plan, fusion)
    mixed = precision.mixed
    amp = preset.amp
    p, g, r, a, master = _model_state_bytes(preset, precision, fp8_params)
    fsdp2 = sharding.stage >= 3 and amp is AmpStyle.FSDP_POLICY
    if fsdp2 and mixed and fp8 is not None and fp8.fsdp_fp8_all_gather:
        a = 1  # FP8 all-gather of the FP8 linears' weights (the rest, ~10-15%, in 16 bit)
    if fp8_params:
        a = 1  # the distributed optimizer gathers the FP8 parameters
    dp_on = plan.grad_replicas > 1  # context-parallel ranks reduce gradients with dp
    gather_per_step = fsdp2 and plan.pp > 1  # torch.distributed.pipelining (Recipe's field)
    # pipelined FSDP2 reduce-scatters after the stage's last backward, not under it
    overlap_grads = preset.overlap_grad_comm and dp_on and not gather_per_step
    gather_overlap = sharding.stage >= 3 or (preset.overlap_param_gather and sharding.stage >= 1)
    as_preset = {k: getattr(preset, k) for k in _RECIPE_AS_PRESET}
    as_preset["cross_entropy"] = preset.cross_entropy.for_tp(plan.tp)  # torchtitan loss parallel
    return Recipe(
        **as_preset,
        precision=precision,
        amp=amp,
        optimizer=optimizer,
        sharding=sharding,
        param_bytes=p,
        grad_bytes=g,
        grad_reduce_bytes=r,
        gather_bytes=a,
        master_bytes=master,
        autocast_casts=mixed and amp is AmpStyle.AUTOCAST,
        grad_comm=CommPolicy(overlap_grads, STREAM_DP),
        param_gather=CommPolicy(gather_overlap, STREAM_GATHER if gather_overlap else STREAM_DP),
        tp_comm=CommPolicy(
            preset.tp_comm_overlap and plan.tp > 1,
            STREAM_TP if preset.tp_comm_overlap else STREAM_COMPUTE,
        ),
        pp_send=CommPolicy(True, "send_fwd/send_bwd"),
        bucket_bytes=_bucket_bytes(preset, plan, r),
        shard_group=plan.fsdp_degree if sharding is Sharding.HSDP else 0,
        selective_recompute=(
            ModuleRecompute(recompute_modules) if recompute_modules else preset.selective_recompute
        ),
        grad_reduce_op=(
            CollectiveOp.REDUCESCATTER
            if sharding.stage >= 1 and not (preset.zero_grad_allreduce and sharding.stage == 1)
            else CollectiveOp.ALLREDUCE
        ),
        fp8_saves_fp8_inputs=preset.fp8_saves_fp8_inputs and precision is Precision.FP8,
        stack_kernels=KernelRecipe(
            fusion=fusion,
            fp8=fp8,
            fsdp_copies=fsdp2,
            apex_rms_norm=preset.apex_rms_norm,
            fused_rope=preset.fused_rope,
            **_moe_local_copies(fusion, fp8, plan),
        ),
        fp8_params=fp8_params,
        fp32_conv_tf32=precision is Precision.FP32 and preset.eager,  # PyTorch's cuDNN default
        sources=tuple(preset.sources),
        pipeline_layout=pipeline_layout,
        gather_per_step=gather_per_step,
    )


def _fusion(preset: SoftwarePreset, compile: bool | None) -> Fusion:
    """The kernels the stack launches: the preset's, or ``Fusion.COMPILE`` under
    ``torch.compile`` (only for stacks that run PyTorch eager modules).

    Raises
    ------
    ConfigError
        ``compile`` on a stack that does not run PyTorch eager modules.
    """
    if not compile:
        return preset.fusion
    if not preset.compilable:
        raise ConfigError(
            f"--compile: software preset {preset.name} runs {preset.fusion.value} kernels, "
            "not PyTorch modules torch.compile can fuse; compile applies to the PyTorch "
            "eager presets (pytorch-ddp, fsdp, torchtitan, deepspeed-*)",
            value=preset.name,
            where="--compile",
        )
    return Fusion.COMPILE


def _fp8(
    preset: SoftwarePreset, precision: Precision, fp8_recipe: Fp8Recipe | None
) -> Fp8Recipe | None:
    """The FP8 recipe of a ``precision="fp8"`` run (the stated one, else the preset's);
    ``None`` for any other precision.

    Raises
    ------
    ConfigError
        An FP8 recipe stated without ``precision="fp8"``.
    """
    if precision is Precision.FP8:
        return preset.fp8_recipe if fp8_recipe is None else fp8_recipe
    if fp8_recipe is not None:
        raise ConfigError(
            f"--fp8-recipe {fp8_recipe.value} needs --precision fp8 (got {precision.value})",
            value=fp8_recipe.value,
            where="--fp8-recipe",
        )
    return None


def _model_state_bytes(
    preset: SoftwarePreset, precision: Precision, fp8_params: bool
) -> tuple[int, int, int, int, int]:
    """Bytes per parameter ``(parameter, gradient, gradient reduction, parameter gather,
    master copy)`` of the preset's mixed-precision style (the module table above): FP32
    parameters under autocast or full precision; 16-bit model with FP32 or 16-bit gradients
    and the optimizer's master copy (:class:`MasterCopy`) for half-model stacks; FP32 shards
    gathered in 16 bit under the FSDP2 mixed-precision policy."""
    amp = preset.amp
    half = precision.param_bytes  # 2 under mixed precision, 4 otherwise
    if not precision.mixed or amp is AmpStyle.AUTOCAST:  # FP32 parameters; autocast casts per op
        return 4, 4, 4, 4, 0
    if amp is AmpStyle.HALF_MODEL:
        g = 4 if (preset.fp32_grads_bf16 and precision is not Precision.FP16) else half
        model_dtype = DType.FP16 if precision is Precision.FP16 else DType.BF16
        master = preset.master_copy.bytes_per_param(
            model_dtype, preset.optimizer_dtype, fp8_params=fp8_params
        )
        return half, g, g, half, master
    # FSDP2 mixed-precision policy
    return 4, 4, 4 if preset.fp32_grad_reduce else half, half, 0


def _bucket_bytes(preset: SoftwarePreset, plan: ParallelismPlan, reduce_bytes: int) -> int:
    """Gradient bucket size in bytes: the preset's bytes, or its parameter / element count
    (Megatron-Core: ``max(bucket_params, bucket_params_per_dp * dp)``) at the reduction's
    bytes per element."""
    if preset.bucket_params is not None:
        return max(preset.bucket_params, preset.bucket_params_per_dp * plan.dp) * reduce_bytes
    if preset.bucket_elements is not None:
        return preset.bucket_elements * reduce_bytes
    return preset.bucket_bytes


def _check_activation_offload(layers: int, plan: ParallelismPlan, fusion: Fusion) -> None:
    """Megatron-Core's conditions for activation CPU offloading
    (``TransformerConfig.__post_init__``, Megatron-LM d98e8a64 ``megatron/core/transformer/
    transformer_config.py``): a Transformer Engine stack (the offload is TE's
    ``get_cpu_offload_context`` around its modules), no pipeline parallelism, no activation
    recomputation.

    Raises
    ------
    ConfigError
        ``layers > 0`` on a stack that does not run Transformer Engine modules, with ``pp > 1``
        or with recomputation, naming both.
    """
    from perfmodel.parallel.plan import Recompute

    if layers <= 0:
        return
    where = "--software-option activation_offload_layers"
    if fusion is not Fusion.TE:
        raise ConfigError(
            f"activation_offload_layers={layers} needs a Transformer Engine stack (--software "
            f"megatron-core or nemo; this stack runs {fusion.value} kernels): the offload is "
            "Megatron-Core's cpu_offloading_num_layers around TE modules",
            value=layers,
            where=where,
        )
    if plan.pp > 1:
        raise ConfigError(
            f"activation_offload_layers={layers} needs pp=1 (got pp={plan.pp}): Megatron-Core "
            "has no CPU offloading with pipeline parallelism",
            value=layers,
            where=where,
        )
    if plan.recompute is not Recompute.NONE:
        raise ConfigError(
            f"activation_offload_layers={layers} needs recompute=none (got "
            f"{plan.recompute.value}): Megatron-Core's CPU offloading does not run with "
            "activation recomputation",
            value=layers,
            where=where,
        )


def _moe_local_copies(
    fusion: Fusion, fp8: Fp8Recipe | None, plan: ParallelismPlan
) -> dict[str, bool]:
    """:class:`~perfmodel.workload.kernels.KernelRecipe`'s ``moe_sort_chunks`` and
    ``moe_quant_padding`` of a plan: what
    Megatron-Core (Transformer Engine stacks) does around its experts at Megatron-LM 4415119.
    The all-to-all dispatcher regroups the received rows by local expert (expert parallelism
    only); the experts pad to the quantized GEMM's alignment under FP8 unless the Hybrid-EP
    dispatcher padded in its permutation (``moe_utils.skip_routed_expert_padding``) or DeepEP's
    permutation aligned them (``_DeepepManager.get_permuted_hidden_states_by_experts``,
    ``permute(..., align_size=...)``)."""
    from perfmodel.parallel.plan import MoEDispatcher

    if fusion is not Fusion.TE:
        return {"moe_sort_chunks": False, "moe_quant_padding": False}
    nccl = plan.moe_dispatcher in (MoEDispatcher.ALLTOALL, MoEDispatcher.ALLGATHER)
    return {
        "moe_sort_chunks": plan.ep > 1 and plan.moe_dispatcher is MoEDispatcher.ALLTOALL,
        "moe_quant_padding": fp8 is not None and nccl,
    }


def default_recipe(plan: ParallelismPlan, precision: Precision, optimizer: Optimizer) -> Recipe:
    """The recipe used where no software preset is named (hand-built :class:`StepInputs` in
    tests, legacy callers): half-model mixed precision (16-bit weights and gradients, FP32
    master in the optimizer, ZeRO's own accounting), no overlap, sharding from the plan.

    >>> from perfmodel.parallel.plan import ParallelismPlan
    >>> r = default_recipe(ParallelismPlan(dp=4, zero=3), Precision.BF16, Optimizer.ADAM)
    >>> r.param_bytes, r.grad_bytes, r.state_bytes, r.sharding.stage
    (2, 2, 12, 3)
    """
    plain = SoftwarePreset(
        name="plain",
        dp_mode=plan.dp_mode,
        amp=AmpStyle.HALF_MODEL,
        sources=("ZeRO (Rajbhandari et al. SC20) section 3.1 mixed-precision accounting",),
    )
    return build_recipe(plain, precision, optimizer, plan)


__all__ = [
    "AmpStyle",
    "CommPolicy",
    "ComputeRecipe",
    "CrossEntropy",
    "MasterCopy",
    "OpCheckpoint",
    "ParamSync",
    "Recipe",
    "SelectiveRecompute",
    "Sharding",
    "build_recipe",
    "default_recipe",
    "fp8_saved_input_delta",
    "mm_products",
    "op_checkpoint",
]
