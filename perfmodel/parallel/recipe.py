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
in every style but half-model with FP32 gradients, 18), sharded per :class:`Sharding`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfmodel.dtypes import Precision
from perfmodel.workload.layers import LayerCost, LayerKind
from perfmodel.workload.memory import Optimizer, is_selectively_recomputed, model_state_bytes

if TYPE_CHECKING:
    from perfmodel.parallel.plan import ParallelismPlan
    from perfmodel.parallel.software import SoftwarePreset


class AmpStyle(str, enum.Enum):
    """How a stack keeps weights and gradients under mixed precision (see the module table)."""

    AUTOCAST = "autocast"
    HALF_MODEL = "half-model"
    FSDP_POLICY = "fsdp-policy"


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


class SelectiveRecompute(str, enum.Enum):
    """What ``recompute=selective`` re-runs in backward, per stack.

    ``attention-core``: the attention scores, softmax, dropout and context products (Korthikanti
    et al. 2022; Megatron ``--recompute-granularity selective``); nothing for fused attention.
    ``op``: torchtitan's default ``selective_ac_option = "op"`` (torchtitan Dec 2024
    ``parallelize_llama.py``, ``_save_list``): inside each transformer block the outputs of matrix
    products and of SDPA are saved except every second matrix product, so half the linear layers'
    forward and every cheaper op (norms, activations, elementwise) are re-run; fused attention is
    not. Memory is counted as ``attention-core`` (an over-estimate for ``op``).
    """

    ATTENTION_CORE = "attention-core"
    OP = "op"

    def share(self, layer: LayerCost) -> float:
        """Fraction of ``layer``'s forward re-run in its backward.

        >>> from perfmodel.workload.layers import LayerCost, LayerKind
        >>> fc = LayerCost(name="fc", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
        ...                bwd_weight_flop=1.0, params=1, fwd_bytes=1.0, bwd_bytes=1.0,
        ...                activation_bytes=1.0, output_shape=(1,), block=0)
        >>> SelectiveRecompute.OP.share(fc), SelectiveRecompute.ATTENTION_CORE.share(fc)
        (0.5, 0.0)
        """
        if self is SelectiveRecompute.ATTENTION_CORE:
            return 1.0 if is_selectively_recomputed(layer) else 0.0
        if layer.block is None or layer.kind is LayerKind.ATTENTION:
            return 0.0
        if layer.kind in (LayerKind.LINEAR, LayerKind.MATMUL):
            return 0.5
        return 1.0


@dataclass(frozen=True)
class ComputeRecipe:
    """The part of a :class:`Recipe` the compute model reads (one value per precision style,
    shared by every plan, so cost models cached on it are reused across plans).

    ``autocast_casts``: ``ComputeParams.cast_weights_each_step``; ``grad_bytes``: the gradient
    the optimizer step reads; ``working_copy_bytes``: the 16-bit copy it writes (half-model
    stacks; 0 where the kept weights are the FP32 ones); ``fp32_conv_tf32``:
    ``ComputeParams.fp32_conv_tf32`` (FP32 convolutions on TF32 tensor cores where the GPU has
    them, :attr:`Recipe.fp32_conv_tf32`).
    """

    autocast_casts: bool
    grad_bytes: int
    working_copy_bytes: int
    fp32_conv_tf32: bool = False


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
        Bytes per parameter of a separate FP32 master copy (counted with the optimizer state,
        as ZeRO does); 0 when the kept weights are FP32 already.
    autocast_casts
        Whether every step casts weights to 16 bit and runs autocast's FP32 ops
        (``ComputeParams.cast_weights_each_step``).
    grad_comm, param_gather, tp_comm, pp_send
        Overlap policy and stream of gradient buckets, parameter all-gathers, tensor-parallel
        collectives and pipeline sends.
    bucket_bytes, first_bucket_bytes
        Gradient bucket sizes in bytes (``None``: one bucket of all gradients).
    shard_group
        Ranks model state is sharded over under HSDP (0: the whole data-parallel group).
    selective_recompute
        What ``recompute=selective`` re-runs (:class:`SelectiveRecompute`).
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
    selective_recompute: SelectiveRecompute = SelectiveRecompute.ATTENTION_CORE
    fp32_conv_tf32: bool = False
    sources: tuple[str, ...] = ()

    @property
    def compute(self) -> ComputeRecipe:
        """What the compute model reads (:class:`ComputeRecipe`)."""
        working = self.param_bytes if self.master_bytes else 0
        return ComputeRecipe(self.autocast_casts, self.grad_bytes, working, self.fp32_conv_tf32)

    @property
    def state_bytes(self) -> int:
        """Optimizer state plus FP32 master bytes per parameter (ZeRO's ``K``)."""
        return self.optimizer.state_bytes_per_param + self.master_bytes

    def shard_degree(self, dp: int) -> int:
        """Ranks the sharded model state is split over: the HSDP shard group, else ``dp``."""
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
        return model_state_bytes(
            params,
            param_bytes=self.param_bytes,
            grad_bytes=self.grad_bytes,
            state_bytes=self.state_bytes,
            stage=self.sharding.stage,
            dp=self.shard_degree(dp),
        )

    def describe(self) -> list[str]:
        """Human-readable lines (``predict --explain``)."""
        return [
            f"precision {self.precision.value} ({self.amp.value}); optimizer {self.optimizer.value}; "
            f"sharding {self.sharding.value}",
            f"bytes/param: weights {self.param_bytes}, grads {self.grad_bytes}, "
            f"grad reduction {self.grad_reduce_bytes}, param gather {self.gather_bytes}, "
            f"FP32 master {self.master_bytes}, optimizer state {self.optimizer.state_bytes_per_param}",
            f"autocast casts each step: {'yes' if self.autocast_casts else 'no'}"
            + (
                "; FP32 convolutions in TF32 where the GPU has it (cudnn.allow_tf32 default), "
                "matmuls FP32"
                if self.fp32_conv_tf32
                else ""
            ),
            f"grad reduction {self.grad_comm.describe()}; param all-gather "
            f"{self.param_gather.describe()}",
            f"tensor-parallel comm {self.tp_comm.describe()}; pipeline sends "
            f"{self.pp_send.describe()}",
        ]

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
            "sources": list(self.sources),
        }


def _sharding(preset: SoftwarePreset, plan: ParallelismPlan) -> Sharding:
    if plan.fsdp:
        return Sharding.HSDP if plan.hsdp else Sharding.FSDP
    if plan.zero == 1 and preset.distributed_optimizer:
        return Sharding.DISTRIBUTED_OPTIMIZER
    return {0: Sharding.NONE, 1: Sharding.ZERO1, 2: Sharding.ZERO2, 3: Sharding.ZERO3}[plan.zero]


def build_recipe(
    preset: SoftwarePreset,
    precision: Precision,
    optimizer: Optimizer,
    plan: ParallelismPlan,
) -> Recipe:
    """The recipe of ``preset`` at ``precision`` with ``optimizer`` under ``plan``.

    Byte counts follow the module table; overlap policies follow the preset's fields
    (``overlap_grad_comm``, ``overlap_param_gather``, ``tp_comm_overlap``). ZeRO-3/FSDP
    parameter all-gathers always prefetch on their own stream (PyTorch FSDP
    ``BackwardPrefetch.BACKWARD_PRE`` and FSDP2's implicit prefetch; DeepSpeed
    ``stage3_prefetch_bucket_size``), never FIFO behind the gradient reduce-scatter.

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
    mixed = precision.mixed
    amp = preset.amp
    half = precision.param_bytes  # 2 under mixed precision, 4 otherwise
    if not mixed or amp is AmpStyle.AUTOCAST:  # FP32 parameters; autocast casts per op
        p = g = r = a = 4
        master = 0
    elif amp is AmpStyle.HALF_MODEL:
        p = a = half
        g = r = 4 if (preset.fp32_grads_bf16 and precision is not Precision.FP16) else half
        master = 4
    else:  # FSDP2 mixed-precision policy
        p = g = 4
        a = half
        r = 4 if preset.fp32_grad_reduce else half
        master = 0
    dp_on = plan.grad_replicas > 1  # context-parallel ranks reduce gradients with dp
    overlap_grads = preset.overlap_grad_comm and dp_on
    gather_overlap = sharding.stage >= 3 or (preset.overlap_param_gather and sharding.stage >= 1)
    bucket = preset.bucket_bytes
    if preset.bucket_params is not None:
        bucket = max(preset.bucket_params, preset.bucket_params_per_dp * plan.dp) * r
    elif preset.bucket_elements is not None:
        bucket = preset.bucket_elements * r
    return Recipe(
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
        bucket_bytes=bucket,
        first_bucket_bytes=preset.first_bucket_bytes,
        shard_group=plan.hsdp if plan.fsdp else 0,
        selective_recompute=preset.selective_recompute,
        fp32_conv_tf32=precision is Precision.FP32 and preset.eager,  # PyTorch's cuDNN default
        sources=tuple(preset.sources),
    )


def default_recipe(plan: ParallelismPlan, precision: Precision, optimizer: Optimizer) -> Recipe:
    """The recipe used where no software preset is named (hand-built :class:`StepInputs` in
    tests, legacy callers): half-model mixed precision (16-bit weights and gradients, FP32
    master in the optimizer, ZeRO's own accounting), no overlap, sharding from the plan.

    >>> from perfmodel.parallel.plan import ParallelismPlan
    >>> r = default_recipe(ParallelismPlan(dp=4, zero=3), Precision.BF16, Optimizer.ADAM)
    >>> r.param_bytes, r.grad_bytes, r.state_bytes, r.sharding.stage
    (2, 2, 12, 3)
    """
    from perfmodel.parallel.software import SoftwarePreset

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
    "Recipe",
    "SelectiveRecompute",
    "Sharding",
    "build_recipe",
    "default_recipe",
]
