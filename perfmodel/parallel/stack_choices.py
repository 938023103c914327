"""What a training stack chooses, as enums: its mixed-precision style (:class:`AmpStyle`), how it
computes the language-model loss (:class:`CrossEntropy`), how a ZeRO-1/2 stack brings every
rank the updated parameters (:class:`ParamSync`, with :class:`ParamOwners` saying which rank owns
which tensor when owners broadcast) and where its optimizer keeps the master copy of 16-bit
weights (:class:`MasterCopy`).

Software presets (:mod:`perfmodel.parallel.software`) name them; the training recipe
(:mod:`perfmodel.parallel.recipe`) applies them. Both import this module, which imports neither.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from perfmodel._enum import ParsedEnum
from perfmodel._schema import FLAG_WORDS
from perfmodel.dtypes import DType
from perfmodel.workload.layers import LayerCost, LayerKind, runs_sum


class AmpStyle(str, enum.Enum):
    """How a stack keeps weights and gradients under mixed precision (see the module table)."""

    AUTOCAST = "autocast"
    HALF_MODEL = "half-model"
    FSDP_POLICY = "fsdp-policy"


#: Megatron-Core's ``cross_entropy_fusion_impl`` names of the :class:`CrossEntropy` members.
_CROSS_ENTROPY_ALIASES = {"te": "te-fused", "native": "default"}


class CrossEntropy(str, ParsedEnum, where="cross_entropy", aliases=_CROSS_ENTROPY_ALIASES):
    """How a stack computes the language-model loss, for the memory of its backward.

    ``default``: what the zoo's loss layer states (it saves the FP32 probabilities of the
    logits); the backward's largest transient is the generic pair of a layer's output and its
    gradient (:func:`~perfmodel.parallel.stage_memory.stage_memory`), which for the LM head is the
    16-bit logits and their gradient (Megatron's vocab-parallel cross entropy computes the
    gradient in place in the saved FP32 softmax and casts it back to 16 bit).

    ``eager-fp32``: PyTorch ``F.cross_entropy`` on logits upcast with ``.float()`` (torchtitan
    9dec370 ``train.py`` ``loss_fn``; the 16-bit logits are freed before backward, ``del
    pred``): ``log_softmax`` saves its FP32 output, and in backward ``nll_loss``'s FP32 gradient
    and ``log_softmax``'s FP32 input gradient are live with it, two more FP32 tensors of the
    logits' size (:meth:`transient_bytes`).

    ``te-fused``: Transformer Engine's ``parallel_cross_entropy`` (Megatron-Core
    ``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl='te'``, which the
    Megatron-Bridge performance scripts set, ``scripts/performance/utils/overrides.py`` at
    21d102f5; Megatron-Core's own default is ``'native'``, the FP32 softmax of ``default``).
    Its Triton forward computes the loss in FP32 registers and writes the logits' gradient in
    place into the 16-bit logits, the one tensor it saves (TE v2.12 ``transformer_engine/
    pytorch/cross_entropy.py`` ``CrossEntropyFunction``: ``ctx.save_for_backward(inp)``; the
    gradient is upcast to the input's dtype): the loss keeps the logits at the activation size
    instead of FP32 probabilities (:meth:`saved_delta_bytes`), and no logits-sized tensor is
    made in its backward or the LM head's (whose output gradient is that saved tensor):
    :attr:`logits_in_place`.

    ``loss-parallel``: ``eager-fp32`` under tensor parallelism in torchtitan, which turns on
    loss parallel whenever TP > 1 (torchtitan 9dec370 ``torchtitan/parallelisms/
    parallel_dims.py`` L119-120 ``return self.tp > 1 and self.enable_loss_parallel``, with
    train.py L57 ``enable_loss_parallel=not job_config.training.disable_loss_parallel``;
    ``torchtitan/utils.py`` ``get_train_context`` L196-201 enters
    ``torch.distributed.tensor.parallel.loss_parallel()``) and keeps the logits sharded over
    the vocabulary: ``log_softmax`` saves the same vocabulary-sharded FP32 log-probabilities,
    and the backward of ``nll_loss`` and ``log_softmax`` fused by loss parallel returns
    ``(grad_input + torch.exp(x)) * grad_output``, ``grad_input = torch.zeros_like(x)`` with the
    targets' -1 scattered in (PyTorch ``torch/distributed/tensor/parallel/
    loss.py`` ``_nll_loss_and_log_softmax_backward``, 2.5-2.6): three FP32 tensors of the
    logits' size live beside the saved ones (:meth:`transient_bytes`), where ``eager-fp32``
    makes two. :meth:`for_tp` selects it.

    ``parse`` also reads Megatron-Core's ``cross_entropy_fusion_impl`` names (``te``: ``te-fused``;
    ``native``: ``default``):

    >>> CrossEntropy.parse("te"), CrossEntropy.parse("eager-fp32")
    (<CrossEntropy.TE_FUSED: 'te-fused'>, <CrossEntropy.EAGER_FP32: 'eager-fp32'>)
    """

    DEFAULT = "default"
    EAGER_FP32 = "eager-fp32"
    TE_FUSED = "te-fused"
    LOSS_PARALLEL = "loss-parallel"

    def for_tp(self, tp: int) -> CrossEntropy:
        """The loss a run of this stack computes with tensor-parallel degree ``tp``:
        ``eager-fp32`` (torchtitan's ``loss_fn``) becomes ``loss-parallel`` when ``tp > 1``
        (torchtitan enables loss parallel whenever TP is on, see the class docstring); the
        others stay.

        >>> CrossEntropy.EAGER_FP32.for_tp(8).value, CrossEntropy.EAGER_FP32.for_tp(1).value
        ('loss-parallel', 'eager-fp32')
        """
        if self is CrossEntropy.EAGER_FP32 and tp > 1:
            return CrossEntropy.LOSS_PARALLEL
        return self

    @property
    def logits_in_place(self) -> bool:
        """The loss's backward writes the logits' gradient into the saved logits (no
        output-and-gradient pair of the LM head's output size)."""
        return self is CROSS_ENTROPY_TE_FUSED

    def transient_bytes(self, layers: Sequence[LayerCost]) -> float:
        """Bytes live beside the saved ones at the loss's backward: twice the loss layers'
        saved FP32 log-probabilities for ``eager-fp32``, three times for ``loss-parallel``; 0
        for ``default`` (covered by the generic output-and-gradient pair) and ``te-fused`` (in
        place)."""
        if self is CrossEntropy.EAGER_FP32:
            times = 2.0
        elif self is CrossEntropy.LOSS_PARALLEL:
            times = 3.0
        else:
            return 0.0
        return times * sum(la.activation_bytes for la in layers if la.kind is LayerKind.LOSS)

    def saved_delta_bytes(self, layers: Sequence[LayerCost], act_bytes: float) -> float:
        """Change of the loss layers' saved bytes against the zoo's count (FP32 probabilities,
        4 bytes per logit): ``te-fused`` keeps the logits at ``act_bytes`` per element
        (``(act_bytes / 4 - 1)`` of the count); 0 for the others.

        >>> from perfmodel.workload.layers import LayerCost, LayerKind, runs_sum
        >>> loss = LayerCost(name="loss", kind=LayerKind.LOSS, fwd_flop=0.0, bwd_input_flop=0.0,
        ...                  bwd_weight_flop=0.0, params=0, fwd_bytes=0.0, bwd_bytes=0.0,
        ...                  activation_bytes=4.0 * 1000, output_shape=(1,))
        >>> CrossEntropy.TE_FUSED.saved_delta_bytes([loss], 2), CrossEntropy.DEFAULT.saved_delta_bytes([loss], 2)
        (-2000.0, 0.0)
        """
        if self is not CROSS_ENTROPY_TE_FUSED:
            return 0.0
        saved = runs_sum(
            layers, lambda la: la.activation_bytes if la.kind is LayerKind.LOSS else 0.0
        )
        return float(saved * (act_bytes / 4.0 - 1.0))


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
CROSS_ENTROPY_TE_FUSED = CrossEntropy.TE_FUSED


class ParamSync(str, enum.Enum):
    """How a ZeRO-1/2 stack brings every rank the parameters the other ranks updated.

    ``allgather``: one all-gather of the shards (Megatron-Core's distributed optimizer,
    DeepSpeed). ``owner-broadcast``: each owner rank broadcasts its updated parameters to the
    group, one NCCL broadcast per owner (InternEvo's ``HybridZeroOptimizer.broadcast_params``;
    :mod:`perfmodel.parallel.param_sync`).
    """

    ALLGATHER = "allgather"
    OWNER_BROADCAST = "owner-broadcast"


#: InternEvo's ``overlap_sync_param`` flag read as the owner rule it selects, in every spelling
#: a flag takes (:data:`perfmodel._schema.FLAG_WORDS`: true/yes/on/1, false/no/off/0).
_PARAM_OWNERS_ALIASES = {
    word: "module-walk" if on else "size-greedy" for word, on in FLAG_WORDS.items()
}


class ParamOwners(str, ParsedEnum, where="param_owners", aliases=_PARAM_OWNERS_ALIASES):
    """Which rank of the ZeRO group owns (updates, then broadcasts) each parameter tensor, for
    :attr:`ParamSync.OWNER_BROADCAST` (:mod:`perfmodel.parallel.param_sync`).

    ``module-walk``: InternEvo's ``ParamBcastSyncHandler`` (added 2023-08-23, InternEvo
    ``3266432``; used when ``hybrid_zero_optimizer.overlap_sync_param`` is on, the default of
    ``configs/7B_sft.py`` at ``34fc28d7``): tensors in module order, a rank taking tensors until
    its count passes 1.01 x the average share (:func:`~perfmodel.parallel.param_sync.owner_ranks`).

    ``size-greedy``: ``HybridZeroOptimizer._partition_param_list`` without that handler (every
    InternEvo/InternLM release before it, e.g. the initial commit ``fa7337b`` of 2023-07-06,
    ``internlm/solver/optimizer/hybrid_zero_optim.py`` lines 272-290; at ``34fc28d7`` with
    ``overlap_sync_param=False``): tensors by size, largest first, each to the rank holding the
    fewest elements so far
    (:func:`~perfmodel.parallel.param_sync.size_greedy_owner_ranks`).

    ``parse`` also reads InternEvo's ``overlap_sync_param`` as written, in any flag spelling
    (``true``/``on``/``1``: module walk, ``false``/``off``/``0``: size greedy):

    >>> ParamOwners.parse("false"), ParamOwners.parse("module-walk")
    (<ParamOwners.SIZE_GREEDY: 'size-greedy'>, <ParamOwners.MODULE_WALK: 'module-walk'>)
    """

    MODULE_WALK = "module-walk"
    SIZE_GREEDY = "size-greedy"


class MasterCopy(str, enum.Enum):
    """Where a half-model stack's optimizer keeps the higher-precision copy of the 16-bit
    weights it updates (:meth:`bytes_per_param`).

    ``fp32``: a separate FP32 copy, 4 bytes per parameter, whatever the optimizer state's
    dtype: Megatron-LM's ``Float16OptimizerWithFloat16Params`` and Megatron-Core's distributed
    optimizer (FP32 ``main_param`` shards; core_r0.8.0 has no other ``main_params`` dtype),
    DeepSpeed's ZeRO optimizers (FP32 partitioned master weights).

    ``apex-distributed-adam``: Apex ``DistributedFusedAdam`` as NeMo 1.0 builds it
    (``MegatronBaseModel.setup_optimization``, NVIDIA/NeMo r2.0.0rc1 / v2.0.0
    ``nemo/collections/nlp/models/language_modeling/megatron_base_model.py``, where
    ``optim.store_params`` is not set): ``store_params=False`` when the optimizer ``dtype`` is
    the model's (the Adam kernel reads and writes the 16-bit weights themselves: no copy);
    ``store_param_remainders=True`` for an FP32 optimizer over a bf16 model (the 16 low bits of
    each FP32 master value as int16, 2 bytes, the bf16 weight holding the high 16); otherwise
    (``fp8_params``, an FP16 model, a 16-bit state of the other format) ``store_params=True``:
    a full copy in the optimizer dtype (Apex ``DistributedFusedAdam.StateBucket.params_shard``,
    ``dtype=self.dtype``, NVIDIA/apex f3f04924 ``apex/contrib/optimizers/
    distributed_fused_adam.py``).
    """

    FP32 = "fp32"
    APEX_DISTRIBUTED_ADAM = "apex-distributed-adam"

    def bytes_per_param(self, model: DType, state: DType, *, fp8_params: bool = False) -> int:
        """Bytes per parameter of the master copy, before sharding, for a ``model`` dtype
        (the 16-bit weights: bf16 under bf16 and FP8 training, fp16 under fp16) and an
        optimizer ``state`` dtype.

        >>> apex = MasterCopy.APEX_DISTRIBUTED_ADAM
        >>> apex.bytes_per_param(DType.BF16, DType.FP32), apex.bytes_per_param(DType.BF16, DType.BF16)
        (2, 0)
        >>> apex.bytes_per_param(DType.FP16, DType.FP32), MasterCopy.FP32.bytes_per_param(DType.BF16, DType.BF16)
        (4, 4)
        """
        if self is MasterCopy.FP32:
            return 4
        if fp8_params:
            return state.itemsize
        if state is model:
            return 0
        if state is DType.FP32 and model is DType.BF16:
            return 2
        return state.itemsize


__all__ = ["AmpStyle", "CrossEntropy", "MasterCopy", "ParamSync"]
