"""What a training stack chooses, as enums: its mixed-precision style (:class:`AmpStyle`), how it
computes the language-model loss (:class:`CrossEntropy`) and how a ZeRO-1/2 stack brings every
rank the updated parameters (:class:`ParamSync`).

Software presets (:mod:`perfmodel.parallel.software`) name them; the training recipe
(:mod:`perfmodel.parallel.recipe`) applies them. Both import this module, which imports neither.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from perfmodel.workload.layers import LayerCost, LayerKind


class AmpStyle(str, enum.Enum):
    """How a stack keeps weights and gradients under mixed precision (see the module table)."""

    AUTOCAST = "autocast"
    HALF_MODEL = "half-model"
    FSDP_POLICY = "fsdp-policy"


class CrossEntropy(str, enum.Enum):
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
    """

    DEFAULT = "default"
    EAGER_FP32 = "eager-fp32"

    def transient_bytes(self, layers: Sequence[LayerCost]) -> float:
        """Bytes live beside the saved ones at the loss's backward: twice the loss layers'
        saved FP32 log-probabilities for ``eager-fp32``; 0 for ``default`` (covered by the
        generic output-and-gradient pair)."""
        if self is CrossEntropy.DEFAULT:
            return 0.0
        return 2.0 * sum(la.activation_bytes for la in layers if la.kind is LayerKind.LOSS)


class ParamSync(str, enum.Enum):
    """How a ZeRO-1/2 stack brings every rank the parameters the other ranks updated.

    ``allgather``: one all-gather of the shards (Megatron-Core's distributed optimizer,
    DeepSpeed). ``owner-broadcast``: each owner rank broadcasts its updated parameters to the
    group, one NCCL broadcast per owner (InternEvo's ``HybridZeroOptimizer.broadcast_params``;
    :mod:`perfmodel.parallel.param_sync`).
    """

    ALLGATHER = "allgather"
    OWNER_BROADCAST = "owner-broadcast"


__all__ = ["AmpStyle", "CrossEntropy", "ParamSync"]
