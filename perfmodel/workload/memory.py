"""Memory model: weights, gradients, optimizer state, activations and workspace on one GPU.

The pieces are separate functions so that plans can compose them (ZeRO shards the optimizer
state, gradients and weights over data-parallel ranks; a pipeline stage holds the layers of its
blocks and the activations of several in-flight micro-batches).

Bytes per parameter (Rajbhandari et al. 2020, ZeRO, section 3.1; mixed precision per
Micikevicius et al. 2018):

=================  ==========  =====================  ==============================
recipe             weights     gradients              optimizer state
=================  ==========  =====================  ==============================
fp32 / tf32        4           4                      SGD 0, momentum 4, Adam 8
fp16 / bf16 / fp8  2 (+4 fp32  2                      SGD 0, momentum 4, Adam 8
                   master)                            (all fp32)
=================  ==========  =====================  ==============================

so mixed-precision Adam costs the famous ``2 + 2 + 12 = 16`` bytes per parameter. FP8 recipes
(Transformer Engine) keep BF16 working weights; FP8 copies are transient. This table is the
half-model recipe (Megatron, DeepSpeed, ZeRO's accounting), used for single-GPU memory; what each
training stack keeps (autocast's FP32 weights and gradients, FSDP2's FP32 shards, Megatron's FP32
gradient buffer) is its :class:`perfmodel.parallel.recipe.Recipe`, which calls
:func:`model_state_bytes` with its own bytes.

Activations: the sum of every layer's ``activation_bytes`` (what forward keeps for backward), with
three recomputation settings (Korthikanti et al. 2022):

* ``none``: everything is kept.
* ``selective``: attention's ``s x s`` tensors (softmax output, attention dropout mask, the
  context matmul's probability input: ``LayerCost.recomputable_bytes``) are recomputed; for
  fused attention there is nothing to drop.
* ``full``: only each block's input is kept (plus the layers outside blocks), and one block's
  activations are live again during its backward.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from operator import attrgetter

from perfmodel import units
from perfmodel._enum import ParsedEnum, parse_enum, squash
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.workload._net import numel
from perfmodel.workload.kernels import FP32_BYTES, Fp8Recipe, fp8_linear
from perfmodel.workload.layers import (
    KernelClass,
    LayerCost,
    LayerKind,
    StackedLayers,
    Workload,
    distinct_layers,
    layer_runs,
    runs_sum,
)

#: Other names of the optimizers (looked up after lower-casing and dropping ``_`` and ``-``).
_OPTIMIZER_ALIASES = {"sgdmomentum": "momentum", "nesterov": "momentum"}


class Optimizer(
    str,
    ParsedEnum,
    where="--optimizer",
    noun="optimizer",
    normalize=squash,
    aliases=_OPTIMIZER_ALIASES,
):
    """Optimizer whose state lives on the GPU. ``lamb`` keeps Adam's two moments."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"
    ADAMW = "adamw"
    LAMB = "lamb"

    @property
    def state_bytes_per_param(self) -> int:
        """FP32 optimizer-state bytes per parameter (excluding master weights)."""
        return {"sgd": 0, "momentum": 4, "adam": 8, "adamw": 8, "lamb": 8}[self.value]


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
OPTIMIZER_LAMB = Optimizer.LAMB


class Recompute(
    str, ParsedEnum, where="recompute", noun="recompute setting", expected="none, selective or full"
):
    """Activation recomputation setting (Korthikanti et al. 2022)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


# (bound once, as above)
RECOMPUTE_FULL = Recompute.FULL
RECOMPUTE_SELECTIVE = Recompute.SELECTIVE


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU, by kind.

    Attributes
    ----------
    weights_bytes
        Working weights plus FP32 master weights (mixed precision) plus non-trainable buffers.
    gradients_bytes
        Gradient buffers.
    optimizer_bytes
        Optimizer state (momentum, Adam moments).
    activations_bytes
        Activations kept for backward across the in-flight micro-batches, after recomputation.
    workspace_bytes
        cuBLAS/cuDNN workspace, the transient peak of the largest layer, the framework's CUDA
        context and allocator fragmentation reserve.
    """

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.workspace_bytes
        )

    def to_dict(self) -> dict[str, float]:
        d = asdict(self)
        d["total_bytes"] = self.total_bytes
        return d


# Memory constants, each with its source.
#: CUDA context + framework reserve (PyTorch: ~300-500 MiB for the CUDA context and kernels
#: images on Ampere/Hopper as reported by ``nvidia-smi`` for an idle process).
CUDA_CONTEXT_BYTES = 500 * units.MiB
#: cuBLAS workspace per stream (PyTorch default ``CUBLAS_WORKSPACE_CONFIG`` :4096:8 = 32 MiB on
#: Hopper) plus cuDNN convolution workspace, which frameworks cap at a few hundred MiB.
LIBRARY_WORKSPACE_BYTES = 256 * units.MiB
#: Share of the remaining memory lost to allocator fragmentation (PyTorch caching allocator;
#: typically 5-10 % of reserved memory).
FRAGMENTATION = 0.05


def param_state_bytes(
    params: float, precision: Precision | str, optimizer: Optimizer | str
) -> tuple[float, float, float]:
    """Weights, gradients and optimizer-state bytes for ``params`` parameters.

    Returns
    -------
    (weights_bytes, gradients_bytes, optimizer_bytes)

    Examples
    --------
    Mixed-precision Adam: 2 + 4 (master) weight bytes, 2 gradient bytes, 8 state bytes:

    >>> param_state_bytes(1_000_000, "bf16", "adam")
    (6000000.0, 2000000.0, 8000000.0)
    >>> param_state_bytes(10, "fp32", "sgd")
    (40.0, 40.0, 0.0)
    """
    prec = Precision.parse(precision, where="precision")
    opt = Optimizer.parse(optimizer)
    p = float(params)
    weights = p * prec.param_bytes + (p * 4 if prec.mixed else 0.0)
    grads = p * prec.grad_bytes
    state = p * opt.state_bytes_per_param
    return weights, grads, state


def is_selectively_recomputed(layer: LayerCost) -> bool:
    """True for layers selective recomputation re-runs in backward: the unfused attention core
    (scores matmul, softmax, attention dropout, context matmul; Korthikanti et al. 2022)."""
    return layer.kind in (LayerKind.MATMUL, LayerKind.SOFTMAX) or (
        layer.kind is LayerKind.ELEMENTWISE and layer.name.endswith("attn_dropout")
    )


class RecomputeModule(str, enum.Enum):
    """A Megatron-Core selective-recomputation module (``TransformerConfig.recompute_modules``,
    Megatron-LM 4415119 ``megatron/core/transformer/transformer_config.py``; default
    ``["core_attn"]``), for ``recompute=selective`` with a module list
    (:class:`ModuleRecompute`). Modelled:

    ``core_attn``: the attention core under a checkpoint, whatever its kernel
    (:func:`is_core_attention`): Megatron-Core wraps ``core_attention`` in
    ``tensor_parallel.checkpoint`` (``Attention._checkpointed_attention_forward``; core_v0.8.0
    sets ``checkpoint_core_attention = recompute_granularity == 'selective'``, 4415119 also
    asks for ``"core_attn" in recompute_modules``, its default list), which keeps only its
    arguments (``Q, K, V``) and re-runs the core's forward in backward. Unfused, the scores,
    softmax, dropout and context product re-run and their ``s x s`` tensors are freed
    (Korthikanti et al. 2022); fused (Transformer Engine's ``DotProductAttention``, with its
    context-parallel merge), the fused kernel's forward re-runs and its saved softmax
    statistics (the FP32 log-sum-exp) are freed: ``Q, K, V`` stay as the checkpoint's inputs
    and ``O`` as ``linear_proj``'s input. ``mla_up_proj``: multi-latent attention's
    up-projections (``q_up``, ``kv_up``) and their RoPE (``mla_rope``), output-discarding: the
    query, key and value that the fused attention keeps are freed and rebuilt in backward from
    the latents. ``mlp``: the
    dense MLP submodule, normally checkpointed: its input is kept, its inner activations
    (``fc1``'s output for the activation, the activation's output for ``fc2``) are re-run.
    ``moe_act``: the routed experts' activation, output-discarding: its output (``fc2``'s
    input) is freed and re-run. (``layernorm``, ``moe`` and ``shared_experts`` are not
    modelled: a :class:`ConfigError` says so.)
    """

    CORE_ATTN = "core_attn"
    MLA_UP_PROJ = "mla_up_proj"
    MLP = "mlp"
    MOE_ACT = "moe_act"

    @classmethod
    def parse_list(cls, text: object, *, where: str = "recompute_modules") -> frozenset:
        """Modules from a comma-separated string or a sequence of names (parsed once, at the
        edge); an unknown or unmodelled name raises :class:`ConfigError` naming it."""
        items = text.split(",") if isinstance(text, str) else list(text)  # type: ignore[call-overload]
        out = set()
        for item in items:
            name = str(item).strip()
            if not name:
                continue
            if name in ("layernorm", "moe", "shared_experts"):
                raise ConfigError(
                    f"recompute module {name!r} is not modelled (modelled: "
                    f"{', '.join(m.value for m in cls)})",
                    value=name,
                    where=where,
                )
            out.add(parse_enum(cls, name, where=where, noun="recompute module"))
        if not out:
            raise ConfigError("recompute_modules names no module", value=text, where=where)
        return frozenset(out)


def is_core_attention(layer: LayerCost) -> bool:
    """Whether ``layer`` runs inside Megatron-Core's ``core_attention`` module: the unfused core
    (:func:`is_selectively_recomputed`), a fused attention kernel, or the context-parallel
    merge of its ring steps (``<attention>_cp_merge``: Transformer Engine's
    ``AttnFuncWithCPAndKVP2P`` merges inside the same call)."""
    return (
        is_selectively_recomputed(layer)
        or layer.kind is LayerKind.ATTENTION
        or layer.name.endswith("_cp_merge")
    )


def _lse_bytes(layer: LayerCost) -> float:
    """The FP32 log-sum-exp a fused attention ``layer`` saves (``b x heads x s``, 4 bytes; its
    ``cp`` ring steps share one; ``gemm`` is one step's block, batch ``b x heads``), 0 for any
    other layer."""
    if layer.kind is not LayerKind.ATTENTION or layer.gemm is None:
        return 0.0
    g = layer.gemm
    return float(g.batch * g.m * FP32_BYTES)


def _part(layer: LayerCost) -> str:
    """The last part of a zoo layer's name, its FP8 cast's suffix removed (``layer3.q_up``
    and ``layer3.q_up.fp8_cast`` are both ``q_up``)."""
    name = layer.name.removesuffix(".fp8_cast")
    return name.rsplit(".", 1)[-1]


_DENSE_MLP = frozenset({"fc1", "swiglu", "gelu", "relu2", "fc2"})


@dataclass(frozen=True)
class ModuleRecompute:
    """``recompute=selective`` over Megatron-Core's ``recompute_modules``
    (:class:`RecomputeModule`): what each module re-runs in backward (:meth:`share`) and what
    it stops keeping (:meth:`dropped_bytes`), by the zoo's layer names (``q_up``/``kv_up`` of
    multi-latent attention, ``fc1``/activation/``fc2`` of a dense MLP, ``experts_swiglu`` and
    ``experts_fc2`` of routed experts). The same interface as
    :class:`~perfmodel.parallel.recipe.SelectiveRecompute` (``share``, ``share_for``,
    ``kept_bytes``, ``checkpoints_blocks``, ``value``).
    """

    modules: frozenset

    @property
    def value(self) -> str:
        return "modules " + ",".join(sorted(m.value for m in self.modules))

    @property
    def checkpoints_blocks(self) -> bool:
        return False

    def share(self, layer: LayerCost) -> float:
        """1 for a layer a module re-runs in backward (its forward again), else 0."""
        m, part = self.modules, _part(layer)
        if layer.block is None:
            return 0.0
        if RecomputeModule.CORE_ATTN in m and is_core_attention(layer):
            return 1.0
        if RecomputeModule.MLA_UP_PROJ in m and part in ("q_up", "kv_up", "mla_rope"):
            return 1.0
        if RecomputeModule.MLP in m and part in _DENSE_MLP and layer.expert_role is None:
            return 1.0
        if RecomputeModule.MOE_ACT in m and part == "experts_swiglu":
            return 1.0
        return 0.0

    def share_for(self, workload: Workload) -> Callable[[LayerCost], float]:
        return self.share

    def dropped_bytes(self, layer: LayerCost, *, mla: bool) -> float:
        """Saved bytes of ``layer`` the modules free (``mla``: the model's attention is
        multi-latent): the fused attention's Q, K, V under ``mla_up_proj`` (its FP32
        log-sum-exp stays), a dense MLP's saved bytes but its input under ``mlp``, the routed
        experts' ``fc2`` input under ``moe_act``, the unfused attention core's recomputable
        bytes or a fused attention's log-sum-exp under ``core_attn`` (with ``mla_up_proj``:
        all of the fused attention's saved bytes)."""
        m, part = self.modules, _part(layer)
        if layer.block is None:
            return 0.0
        drop = 0.0
        if RecomputeModule.CORE_ATTN in m:
            drop += float(layer.recomputable_bytes) or _lse_bytes(layer)
        if (
            RecomputeModule.MLA_UP_PROJ in m
            and mla
            and layer.kind is LayerKind.ATTENTION
            and layer.gemm is not None
        ):
            drop += max(0.0, layer.activation_bytes - _lse_bytes(layer))
        if RecomputeModule.MLP in m and layer.expert_role is None and part in _DENSE_MLP:
            drop += 0.0 if part == "fc1" else float(layer.activation_bytes)
        if RecomputeModule.MOE_ACT in m and part == "experts_fc2":
            drop += float(layer.activation_bytes)
        return min(drop, float(layer.activation_bytes))

    def kept_bytes(self, layers: Sequence[LayerCost], precision: Precision) -> tuple[float, float]:
        """``(kept, working)`` activation bytes of one micro-batch: every layer's saved bytes
        but what the modules free; while a block's backward runs its freed tensors are live
        again, the largest block's ``working``."""
        mla = any(_part(la) == "kv_up" for la in distinct_layers(layers))
        kept = runs_sum(layers, lambda la: la.activation_bytes - self.dropped_bytes(la, mla=mla))
        per_block: dict[object, float] = {}
        for la in distinct_layers(layers):
            if la.block is not None:
                key = la.name.split(".", 1)[0]
                per_block[key] = per_block.get(key, 0.0) + self.dropped_bytes(la, mla=mla)
        return float(kept), max(per_block.values(), default=0.0)


def block_activation_bytes(layers: Iterable[LayerCost]) -> dict[int | None, float]:
    """Saved activation bytes per block index (``None``: layers outside blocks)."""
    out: dict[int | None, float] = {}
    for layer in layers:
        out[layer.block] = out.get(layer.block, 0.0) + layer.activation_bytes
    return out


def activation_bytes(
    workload: Workload | Iterable[LayerCost],
    recompute: Recompute | str = "none",
    *,
    precision: Precision | str | None = None,
) -> float:
    """Bytes of activations one micro-batch keeps between its forward and its backward.

    ``full`` recomputation keeps each block's input tensor (the output of the layer before the
    block, at the activation element size) plus everything outside blocks, plus the largest
    block's own activations (live again while that block is recomputed for its backward).
    ``precision`` gives the element size when a bare layer list is passed (default: the
    workload's precision; fp32 otherwise). A stack's copies of a block are summed as the
    block times the copies (:func:`~perfmodel.workload.layers.runs_sum`: within 1e-12
    relative of the layer-by-layer sum).

    >>> from perfmodel.workload import build_model
    >>> w = build_model("mlp", batch_size=10, widths=[100, 50, 10])
    >>> activation_bytes(w)  # fp32: fc1 input 10x100, fc2 input 10x50, loss 10x10 probabilities
    6400.0
    """
    if isinstance(workload, Workload):
        layers: Sequence[LayerCost] = workload.layers
        prec = (
            workload.precision
            if precision is None
            else Precision.parse(precision, where="precision")
        )
    else:
        layers = workload if isinstance(workload, StackedLayers) else list(workload)
        prec = (
            Precision.parse(precision, where="precision")
            if precision is not None
            else Precision.FP32
        )
    mode = Recompute.parse(recompute)
    if mode is Recompute.NONE:
        return float(runs_sum(layers, attrgetter("activation_bytes")))
    if mode is Recompute.SELECTIVE:
        return float(runs_sum(layers, lambda la: la.activation_bytes - la.recomputable_bytes))
    kept, working = full_recompute_bytes(layers, prec)
    return kept + working


def full_recompute_bytes(layers: Iterable[LayerCost], precision: Precision) -> tuple[float, float]:
    """``(kept, working)`` activation bytes of one micro-batch under full recomputation.

    ``kept``: each block's input tensor (the output of the layer before the block, at the
    activation element size; for the first block the embedding's, ``s/t x b x h`` under sequence
    parallelism as every later block's, :func:`perfmodel.workload.zoo.transformer.
    scatter_embedding_output`) plus every layer outside blocks, held from forward to backward.
    ``working``: the largest block's own activations, live again only while that block is
    recomputed for its backward; one micro-batch is recomputed at a time, so a pipeline stage
    holds ``in_flight x kept + working`` (Korthikanti et al. 2022, section 4.1: full
    recomputation stores ``2 s b h`` per layer plus one layer's full activations).

    The first block's input counts too where ``layers`` begin with a (pre-norm) block, a
    pipeline chunk after the model's first (:func:`first_block_input_elements`): the tensor
    received from the previous stage, which the first checkpoint saves and the schedule holds
    until the chunk's backward (Megatron-Core core_v0.9.0 ``TransformerBlock._checkpointed_forward`` checkpoints
    from layer 0 of every pipeline rank with ``hidden_states = self.input_tensor``;
    ``schedules.py`` keeps each received ``input_tensor`` in ``input_tensors`` until its
    backward step pops it).
    """
    pieces = layer_runs(layers if isinstance(layers, StackedLayers) else tuple(layers))
    # a piece of n > 1 copies of a block: the block once (each copy's sum is the same float,
    # and no copy is larger than it); its n boundaries each keep the input of a copy, the
    # output of the layer before (for the first copy, the layer before the piece; after that,
    # the block's last layer), added one by one as the layer-by-layer loop does: bit-equal
    per_block = block_activation_bytes(la for block, n in pieces if n == 1 for la in block)
    outside = per_block.pop(None, 0.0)
    copies = [sum(la.activation_bytes for la in block) for block, n in pieces if n > 1]
    a = precision.activation_bytes
    kept_inputs = first_block_input_elements(pieces) * a
    prev: tuple[object, tuple[int, ...]] | None = None  # (block, output shape) of the last layer
    for block, n in pieces:
        if n == 1:
            for la in block:
                if la.block is not None and prev is not None and prev[0] != la.block:
                    kept_inputs += numel(prev[1]) * a
                prev = (la.block, la.output_shape)
            continue
        if prev is not None:  # a copy's block differs from the layer before it (StackedLayers)
            kept_inputs += numel(prev[1]) * a
        inner = numel(block[-1].output_shape) * a
        for _ in range(n - 1):
            kept_inputs += inner
        prev = (layers.copy_blocks()[-1], block[-1].output_shape)  # type: ignore[attr-defined]
    largest = max([*per_block.values(), *copies], default=0.0)
    return float(outside + kept_inputs), float(largest)


def first_block_input_elements(pieces: Sequence[tuple[Sequence[LayerCost], int]]) -> int:
    """Elements of the input of the first block of ``pieces`` (:func:`layer_runs`) when they
    begin with a pre-norm block (its first layer a norm), else 0: where the layer before the
    first block is in the chunk, :func:`full_recompute_bytes` counts its output as the block's
    input. This is what the previous pipeline chunk sends
    (:attr:`perfmodel.parallel.lowering.Chunk.out_bytes`, its last block's output).

    The input is not among the layers, so it is read from the block:

    * a batch norm first (a pre-activation ResNet's ``preact_bn``, a 4-D ``(N, C, H, W)``
      output): batch normalisation maps its input shape to itself, so the input has the norm's
      output shape. The block's output need not: a pre-activation bottleneck that opens a stage
      (``0_conv`` shortcut) widens the channels, one that ends a stage (stride 2) halves the
      spatial size (7 of resnet50v2's 16 blocks change shape);
    * a layer or RMS norm first (every zoo transformer's ``ln1 ... residual2``): the block maps
      the residual stream to itself, so the input has the shape of the block's last layer
      output, ``s/tp x b x h`` under sequence parallelism (the norm's own shape is the full
      sequence there, so it is not used).

    Other blocks (a CNN's convolution first, whose input is the model's input batch or differs
    from its output; post-norm BERT) are not guessed: 0, as before session 18.

    An FSDP2 copy layer that opens the block (``Net._fsdp_copy``, kernel class
    :attr:`~perfmodel.workload.layers.KernelClass.FSDP_COPY`: the unit's all-gather copy-out,
    parameters only, no activation) is not the block's first computing layer: the norm after it
    is read. Before session 20 it hid the received input of every pipeline chunk but the
    first under FSDP2 (torchtitan), one ``s/tp x b x h`` tensor per micro-batch in flight,
    which ``torch.distributed.pipelining`` keeps: ``PipelineStage._prepare_forward_infra``
    receives each micro-batch into its own buffer and ``forward_one_chunk`` keeps it in
    ``fwd_cache`` until that micro-batch's backward (PyTorch 2.6, Dec 2024,
    ``torch/distributed/pipelining/stage.py``).

    >>> from perfmodel.workload import build_model
    >>> w = build_model("gpt", batch_size=1, hidden=64, layers=2, heads=4, vocab=100, seq_len=8)
    >>> first_block_input_elements(layer_runs(w.layers))  # the embedding comes first
    0
    >>> first_block_input_elements(layer_runs([la for la in w.layers if la.block == 1]))
    512
    """
    first: object = None
    out: tuple[int, ...] = ()
    for block, _ in pieces:  # a piece of copies: its first copy, a whole block
        for la in block:
            if first is None and la.kernel_class is KernelClass.FSDP_COPY and la.block is not None:
                continue  # the unit's parameter copies open the block; its norm follows
            if first is None:
                if la.block is None or la.kind is not LayerKind.NORM:
                    return 0
                if len(la.output_shape) == 4:  # batch norm over (N, C, H, W): input shape
                    return numel(la.output_shape)
                first = la.block
            elif la.block != first:
                return numel(out)
            out = la.output_shape
    return numel(out) if first is not None else 0


def workspace_bytes(workload: Workload) -> float:
    """Transient memory: library workspace, the CUDA context, and the largest layer's temporary
    output-plus-gradient pair (forward output and backward input gradient live at once)."""
    a = workload.precision.activation_bytes
    peak_layer = 0.0
    for la in distinct_layers(workload.layers):  # a stack's copies have its block's shapes
        peak_layer = max(peak_layer, 2.0 * numel(la.output_shape) * a)
    return CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES + peak_layer


def fp8_weight_cache_bytes(
    layers: Sequence[LayerCost], fp8: Fp8Recipe | None, *, replaces_bytes: float = 0.0
) -> float:
    """Bytes of the FP8 weight copies an FP8 recipe keeps between micro-batches on one rank:
    :meth:`~perfmodel.workload.kernels.Fp8Recipe.weight_cache_bytes_per_param` (Transformer
    Engine: the FP8 weight and its transpose, 2 bytes; MXFP8 with its block scales) times the
    parameters of the layers whose GEMMs run in FP8
    (:func:`~perfmodel.workload.kernels.fp8_linear`); 0 without FP8 or for torchao (transient
    casts). A stack's copies of a block are counted once each (:func:`runs_sum`).
    ``replaces_bytes``: bytes per parameter of the 16-bit weight the FP8 copies replace when
    the parameters are stored in FP8 (Megatron ``--fp8-param-gather``, NeMo ``fp8_params``):
    Hopper's FP8 weight and transpose then take the 16-bit weight's 2 bytes (no extra).

    >>> from perfmodel.workload.kernels import Fp8Recipe
    >>> from perfmodel.workload.layers import GemmShape
    >>> fc = LayerCost(name="fc", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
    ...                bwd_weight_flop=1.0, params=1000, fwd_bytes=1.0, bwd_bytes=1.0,
    ...                activation_bytes=0.0, output_shape=(1,), gemm=GemmShape(1, 10, 100))
    >>> fp8_weight_cache_bytes([fc], Fp8Recipe.TE_DELAYED), fp8_weight_cache_bytes([fc], None)
    (2000.0, 0.0)
    """
    if fp8 is None:
        return 0.0
    per = fp8.weight_cache_bytes_per_param() - replaces_bytes
    if per <= 0:
        return 0.0
    return per * runs_sum(layers, lambda la: float(la.params) if fp8_linear(la) else 0.0)


def model_state_bytes(
    params: float,
    *,
    param_bytes: float,
    grad_bytes: float,
    state_bytes: float,
    stage: int = 0,
    dp: int = 1,
) -> tuple[float, float, float]:
    """``(weights, gradients, optimizer state)`` bytes per GPU of ``params`` parameters.

    ``param_bytes``, ``grad_bytes`` and ``state_bytes`` (optimizer state including any FP32
    master copy, ZeRO's ``K``) are bytes per parameter; ZeRO stage ``>= 1`` divides the state
    by ``dp``, stage ``>= 2`` also the gradients, stage 3 (FSDP full sharding) also the weights
    (Rajbhandari et al. SC20, section 5 and Figure 1: ``(2 + 2 + K) Psi / N_d`` at stage 3).

    >>> model_state_bytes(1e6, param_bytes=2, grad_bytes=2, state_bytes=12, stage=3, dp=8)
    (250000.0, 250000.0, 1500000.0)
    """
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"zero stage must be 0-3, got {stage}", value=stage, where="zero")
    p = float(params)
    weights = p * param_bytes / (dp if stage >= 3 else 1)
    grads = p * grad_bytes / (dp if stage >= 2 else 1)
    state = p * state_bytes / (dp if stage >= 1 else 1)
    return weights, grads, state


def sharded_param_state_bytes(
    params: float,
    precision: Precision,
    optimizer: Optimizer | str,
    *,
    zero_stage: int = 0,
    dp: int = 1,
) -> tuple[float, float, float]:
    """``(weights, gradients, optimizer state)`` bytes per GPU under ZeRO sharding over ``dp``.

    ZeRO (Rajbhandari et al., SC20): stage 1 shards the optimizer state, including the FP32
    master weights of mixed precision, stage 2 also the gradients, stage 3 also the working
    weights; FSDP's full sharding is stage 3. Unsharded (stage 0) the master copy is counted
    with the weights, as :func:`param_state_bytes` does. The per-recipe form (autocast, FSDP2
    policies, FP32 gradient buffers) is :meth:`perfmodel.parallel.recipe.Recipe.model_state_bytes`.

    >>> from perfmodel.dtypes import Precision
    >>> sharded_param_state_bytes(1e6, Precision.BF16, "adam", zero_stage=1, dp=4)
    (2000000.0, 2000000.0, 3000000.0)
    >>> sum(sharded_param_state_bytes(8e6, Precision.BF16, "adam", zero_stage=3, dp=8))  # 16 B/8
    16000000.0
    """
    if zero_stage == 0:
        return param_state_bytes(params, precision, optimizer)
    opt = Optimizer.parse(optimizer)
    return model_state_bytes(
        params,
        param_bytes=precision.param_bytes,
        grad_bytes=precision.grad_bytes,
        state_bytes=opt.state_bytes_per_param + (4 if precision.mixed else 0),
        stage=zero_stage,
        dp=dp,
    )


def memory_breakdown(
    workload: Workload,
    *,
    optimizer: Optimizer | str = "sgd",
    recompute: Recompute | str = "none",
    in_flight_microbatches: int = 1,
    zero_stage: int = 0,
    dp: int = 1,
) -> MemoryBreakdown:
    """Memory of one GPU training ``workload`` (a whole model or one pipeline stage's layers).

    Parameters
    ----------
    optimizer
        ``sgd``, ``momentum``, ``adam`` (``adamw``, ``lamb`` like Adam).
    recompute
        ``none``, ``selective`` or ``full``.
    in_flight_microbatches
        Micro-batches whose activations are alive at once (1F1B pipeline: up to the number of
        stages on the first stage).
    zero_stage, dp
        ZeRO (Rajbhandari et al. 2020): stage 1 shards optimizer state over ``dp`` ranks, stage 2
        also gradients, stage 3 also weights.

    Examples
    --------
    >>> from perfmodel.workload import build_model
    >>> w = build_model("mlp", batch_size=1, widths=[1000, 1000])  # 1,001,000 params
    >>> m = memory_breakdown(w, optimizer="adam")
    >>> m.weights_bytes, m.gradients_bytes, m.optimizer_bytes
    (4004000.0, 4004000.0, 8008000.0)
    """
    if in_flight_microbatches < 1:
        raise ConfigError(
            f"in_flight_microbatches must be >= 1, got {in_flight_microbatches}",
            value=in_flight_microbatches,
            where="in_flight_microbatches",
        )
    if zero_stage not in (0, 1, 2, 3):
        raise ConfigError(
            f"zero stage must be 0-3, got {zero_stage}", value=zero_stage, where="zero"
        )
    if dp < 1:
        raise ConfigError(f"dp must be >= 1, got {dp}", value=dp, where="dp")
    params, per_mb_acts, ws = _workload_sums(workload, recompute)
    weights, grads, state = sharded_param_state_bytes(
        params, workload.precision, optimizer, zero_stage=zero_stage, dp=dp
    )
    weights += workload.buffers * 4.0
    acts = per_mb_acts * in_flight_microbatches
    subtotal = weights + grads + state + acts + ws
    ws += FRAGMENTATION * subtotal
    return MemoryBreakdown(weights, grads, state, acts, ws)


def _workload_sums(workload: Workload, recompute: Recompute | str) -> tuple[int, float, float]:
    """``(workload.params, activation_bytes(workload, recompute), workspace_bytes(workload))``,
    kept on the (immutable) workload object per ``recompute``: a plan search asks for the
    memory of the same stage under many data-parallel degrees and ZeRO stages (issue 14)."""
    memo = workload.__dict__.setdefault("_memory_sums", {})
    hit = memo.get(recompute)
    if hit is None:
        hit = memo[recompute] = (
            workload.params,
            activation_bytes(workload, recompute),
            workspace_bytes(workload),
        )
    return hit


@dataclass(frozen=True)
class MaxBatchResult:
    """Largest micro-batch that fits, with the memory breakdown at that batch.

    Attributes
    ----------
    batch_size
        Largest per-GPU batch that fits (0 when not even one sample fits).
    breakdown
        Memory at ``batch_size`` (at batch 1 when nothing fits).
    capacity_bytes
        Usable device memory assumed (``memory_bytes x memory_fraction``).
    """

    batch_size: int
    breakdown: MemoryBreakdown
    capacity_bytes: float

    def to_dict(self) -> dict[str, object]:
        return {
            "batch_size": self.batch_size,
            "capacity_bytes": self.capacity_bytes,
            "breakdown": self.breakdown.to_dict(),
        }


def max_batch_size(
    model: str,
    gpu: object,
    precision: Precision | str = "fp32",
    optimizer: Optimizer | str = "sgd",
    *,
    recompute: Recompute | str = "none",
    tp: int = 1,
    sequence_parallel: bool = False,
    memory_fraction: float = 1.0,
    limit: int = 1 << 20,
    memory: Callable[[Workload], MemoryBreakdown] | None = None,
    **model_args: object,
) -> MaxBatchResult:
    """Largest per-GPU micro-batch of zoo model ``model`` whose memory fits on ``gpu``.

    Memory grows monotonically with the batch (activations and the largest transient are
    linear in it), so a doubling search followed by bisection finds the exact largest batch.

    Parameters
    ----------
    model
        Zoo name; ``model_args`` as for :func:`perfmodel.workload.build_model`.
    gpu
        A :class:`perfmodel.hardware.GPUSpec` or catalogue name.
    memory_fraction
        Share of the device memory usable (default all of it; the breakdown already reserves
        the CUDA context, library workspace and fragmentation).
    limit
        Largest batch tried.
    memory
        The memory of one workload (default :func:`memory_breakdown` with ``optimizer`` and
        ``recompute``); ``perfmodel model maxbatch`` passes the training recipe's accounting,
        the one ``predict`` uses.

    Examples
    --------
    >>> r = max_batch_size("mlp", "V100-SXM2-16GB", widths=[1000, 1000])
    >>> r.batch_size > 1000
    True
    """
    from perfmodel.hardware import get_gpu
    from perfmodel.workload.zoo import build_model

    spec = get_gpu(gpu)  # type: ignore[arg-type]
    if not 0 < memory_fraction <= 1:
        raise ConfigError(
            f"memory_fraction must be in (0, 1], got {memory_fraction}",
            value=memory_fraction,
            where="memory_fraction",
        )
    capacity = spec.memory_bytes * memory_fraction

    def at(batch: int) -> MemoryBreakdown:
        w = build_model(
            model,
            batch_size=batch,
            precision=precision,
            tp=tp,
            sequence_parallel=sequence_parallel,
            **model_args,
        )
        if memory is not None:
            return memory(w)
        return memory_breakdown(w, optimizer=optimizer, recompute=recompute)

    first = at(1)
    if first.total_bytes > capacity:
        return MaxBatchResult(0, first, capacity)
    lo, lo_mem = 1, first
    hi = 2
    while hi <= limit:
        m = at(hi)
        if m.total_bytes > capacity:
            break
        lo, lo_mem = hi, m
        hi *= 2
    else:
        return MaxBatchResult(lo, lo_mem, capacity)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        m = at(mid)
        if m.total_bytes > capacity:
            hi = mid
        else:
            lo, lo_mem = mid, m
    return MaxBatchResult(lo, lo_mem, capacity)
