"""Per-layer costs: the unit of a :class:`Workload`. Pure numbers, no time.

All quantities are for **one micro-batch of the workload's batch size on one rank** (after
any tensor-parallel sharding the workload was built with).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp


class LayerKind(str, enum.Enum):
    CONV = "conv"
    LINEAR = "linear"  # dense GEMM with weights
    MATMUL = "matmul"  # activation x activation GEMM (unfused attention scores / context)
    ATTENTION = "attention"  # fused attention kernel (FlashAttention-style): no s x s matrix stored
    EMBEDDING = "embedding"
    NORM = "norm"  # batch norm, layer norm, RMS norm
    ACTIVATION = "activation"  # relu, gelu, swiglu gate ...
    POOL = "pool"
    ELEMENTWISE = "elementwise"  # residual add, dropout, scaling
    SOFTMAX = "softmax"
    LOSS = "loss"  # softmax cross-entropy
    OTHER = "other"


class ExpertRole(str, enum.Enum):
    """Part a layer plays in a mixture-of-experts block, for an expert-parallel lowering.

    ``ROUTER``: the gate (scores every token against every expert; replicated). ``DISPATCH``:
    permutation of the routed tokens to their experts (becomes the all-to-all under expert
    parallelism). ``EXPERT``: grouped GEMMs and activation of the routed experts (weights shard
    by ep). ``COMBINE``: un-permutation and the probability-weighted sum of the ``top_k``
    outputs (the return all-to-all under expert parallelism).
    """

    ROUTER = "router"
    DISPATCH = "dispatch"
    EXPERT = "expert"
    COMBINE = "combine"


@dataclass(frozen=True)
class GemmShape:
    """The main matrix product of a layer in the forward pass: ``(m x k) @ (k x n)``, ``batch`` times.

    For a convolution, the implicit-GEMM view: ``m = N*H_out*W_out``, ``n = C_out``,
    ``k = C_in*R*S/groups`` (Chetlur et al. 2014, cuDNN).
    """

    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flop(self) -> float:
        """``2 m n k batch`` (one FMA = 2 FLOP)."""
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True)
class CommPoint:
    """A collective a layer issues inside forward or backward (tensor/sequence parallelism).

    ``message_bytes`` follows the nccl-tests convention of :class:`perfmodel.ops.CollectiveOp`;
    ``group`` names the parallel dimension it runs over (``"tp"``).
    """

    op: CollectiveOp
    message_bytes: float
    group: str = "tp"


@dataclass(frozen=True)
class MeasuredTime:
    """Forward and backward device time of one layer, measured on ``gpu`` (a catalogue name),
    seconds, for one micro-batch."""

    fwd_s: float
    bwd_s: float
    gpu: str


@dataclass(frozen=True)
class LayerCost:
    """Cost of one layer for one micro-batch on one rank.

    Attributes
    ----------
    fwd_flop, bwd_input_flop, bwd_weight_flop
        FLOP of the forward pass, the input-gradient (dgrad) and the weight-gradient (wgrad).
    params
        Trainable parameters held by this rank for this layer.
    fwd_bytes, bwd_bytes
        Device-memory bytes read plus written by the forward and by the backward kernels.
    activation_bytes
        Bytes saved in forward for use in backward (what recomputation frees).
    output_shape
        Shape of the output tensor (including the batch dimension).
    gemm
        The main GEMM for the efficiency model (``None`` for non-GEMM layers).
    fwd_comm, bwd_comm
        Collectives this layer issues (tensor parallelism), in order.
    block
        Index of the repeated block (transformer layer, ResNet stage unit) or ``None``; pipeline
        partitioning cuts between blocks.
    kernels
        Number of kernel launches in forward (backward counted as about twice).
    recomputable_bytes
        Part of ``activation_bytes`` that selective recomputation drops (the ``s x s``
        attention tensors, Korthikanti et al. 2022); added after the original fields.
    bwd_kernels
        Kernel launches of the backward (input- plus weight-gradient), or ``None`` for the
        legacy rule (``kernels`` per backward pass). The zoo sets it from the per-layer kernel
        counts of PyTorch 2.11 eager traces on an H100 (``calibration/h100-sxm5-80gb/``); the
        compute model uses it for launch overhead and the host-dispatch floor.
    autocast_fp32
        Under PyTorch autocast this layer's activations move in FP32: ``layer_norm`` (and
        ``rms_norm``) are on autocast's float32 op list, and the residual stream of a pre-norm
        transformer stays FP32 (the embedding output is FP32 and FP32 + BF16 promotes). The
        compute model scales the layer's bytes by ``4 / activation_bytes`` when
        ``ComputeParams.cast_weights_each_step`` (autocast) applies; Megatron-style 16-bit
        training keeps 16-bit activations.
    casts_input
        A linear layer whose input comes from an ``autocast_fp32`` layer (a layer norm): under
        autocast the input is cast to 16 bit in forward and its gradient back to FP32 in
        backward (one kernel and ``el (4 + a)`` bytes each way).
    """

    name: str
    kind: LayerKind
    fwd_flop: float
    bwd_input_flop: float
    bwd_weight_flop: float
    params: int
    fwd_bytes: float
    bwd_bytes: float
    activation_bytes: float
    output_shape: tuple[int, ...]
    gemm: GemmShape | None = None
    fwd_comm: tuple[CommPoint, ...] = ()
    bwd_comm: tuple[CommPoint, ...] = ()
    block: int | None = None
    kernels: int = 1
    recomputable_bytes: float = 0.0
    bwd_kernels: int | None = None
    autocast_fp32: bool = False
    casts_input: bool = False
    conv_window: tuple[int, int, int, int, int, int] | None = None
    """Convolutions: ``(kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w)``, which
    decides the algorithms cuDNN can use (Winograd needs 3x3, stride 1, no dilation); ``None``
    when not known (a layer imported or built by hand)."""
    expert_role: ExpertRole | None = None
    """Mixture-of-experts layers: the part this layer plays (:class:`ExpertRole`); ``None`` for
    dense layers."""
    experts: int = 0
    """``EXPERT`` layers: routed experts whose weights ``params`` holds (all of them: memory and
    gradient traffic are for the total); FLOP and bytes are for the ``top_k`` experts each
    token visits."""
    top_k: int = 0
    """``EXPERT`` layers: experts each token is routed to."""

    @property
    def active_params(self) -> int:
        """Parameters one token uses: ``params x top_k / experts`` for a routed-expert layer,
        else ``params`` (every expert holds the same share of ``params``)."""
        if self.experts:
            return self.params // self.experts * self.top_k
        return self.params

    measured: MeasuredTime | None = None
    """Device time measured for this layer (imported from a trace,
    :mod:`perfmodel.calibration.trace_workload`): the compute model returns it instead of a
    prediction, on the GPU it was measured on only."""

    @property
    def bwd_flop(self) -> float:
        return self.bwd_input_flop + self.bwd_weight_flop

    @property
    def total_flop(self) -> float:
        return self.fwd_flop + self.bwd_flop

    def relabelled(self, name: str, block: int | None) -> LayerCost:
        """This layer under another ``name`` and ``block`` index, every cost field shared.

        Equal to ``dataclasses.replace(self, name=name, block=block)`` at a tenth of its cost
        (no field is re-validated: they are this layer's), for copying a repeated block. The
        copy remembers the layer it was made from (:meth:`cost_source`, not a field: equality,
        hashing and ``repr`` ignore it), so a cost model prices the copies of a block once.
        """
        new = object.__new__(LayerCost)
        d = self.__dict__
        new.__dict__.update(d, name=name, block=block, _cost_source=d.get("_cost_source", self))
        return new

    def cost_source(self) -> LayerCost:
        """The layer this one was copied from by :meth:`relabelled` (itself if none): the same
        :meth:`cost_key`, so the same time on any GPU."""
        return self.__dict__.get("_cost_source", self)

    def cost_key(self) -> tuple[Any, ...]:
        """Every field except ``name`` and ``block``: the layer's value as a cost model sees it.

        Two layers with equal keys take the same time on any GPU (the blocks of a transformer
        stack differ only in their index), so cost models cache by this key and an identical
        block is costed once. Returns a tuple of the remaining fields in declaration order.
        """
        return _cost_fields(self)


_cost_fields = attrgetter(*(f.name for f in fields(LayerCost) if f.name not in ("name", "block")))


@dataclass(frozen=True)
class Workload:
    """A model at a given micro-batch size, precision and tensor-parallel degree.

    Attributes
    ----------
    batch_size
        Samples per micro-batch on one (data-parallel) rank.
    sample_unit
        What a sample is (``"images"``, ``"sequences"``); ``tokens_per_sample`` gives tokens.
    total_params
        Parameters of the whole model (all tensor-parallel ranks), for reports and DP traffic.
    model_args
        The arguments the zoo builder was called with (for reports and rebuilding).
    buffers
        Non-trainable numbers kept with the weights on one rank (batch-norm running statistics;
        Keras counts them as non-trainable parameters). Added after the original fields.
    """

    name: str
    layers: tuple[LayerCost, ...]
    batch_size: int
    precision: Precision
    total_params: int
    sample_unit: str = "samples"
    tokens_per_sample: int = 1
    tp: int = 1
    sequence_parallel: bool = False
    model_args: dict[str, object] = field(default_factory=dict)
    buffers: int = 0
    total_active_params: int | None = None
    """Parameters of the whole model one token uses (mixture of experts: the ``top_k`` routed
    experts of each MoE layer, plus every dense layer); ``None``: ``total_params`` (dense)."""

    @property
    def active_params_total(self) -> int:
        """Whole-model parameters one token uses (``total_params`` for a dense model)."""
        return self.total_params if self.total_active_params is None else self.total_active_params

    @property
    def is_moe(self) -> bool:
        """The model has routed-expert layers."""
        return any(layer.experts for layer in self.layers)

    @property
    def all_experts_flop(self) -> float:
        """Forward + backward FLOP of one micro-batch on one rank if every token visited every
        expert (the dense equivalent of the total parameters): routed-expert layers scaled by
        ``experts / top_k``. Equals :attr:`total_flop` for a dense model."""
        return sum(
            layer.total_flop * (layer.experts / layer.top_k if layer.experts else 1.0)
            for layer in self.layers
        )

    @property
    def params(self) -> int:
        """Parameters held by one rank (after tensor-parallel sharding)."""
        return sum(layer.params for layer in self.layers)

    @property
    def active_params(self) -> int:
        """Parameters of one rank that one token uses (:attr:`LayerCost.active_params`)."""
        return sum(layer.active_params for layer in self.layers)

    @property
    def fwd_flop(self) -> float:
        return sum(layer.fwd_flop for layer in self.layers)

    @property
    def total_flop(self) -> float:
        """Forward + backward FLOP of one micro-batch on one rank (no recomputation)."""
        return sum(layer.total_flop for layer in self.layers)
