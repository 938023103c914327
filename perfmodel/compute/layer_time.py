"""A layer's predicted time (:class:`LayerTime`, :class:`Bound`) and a step's kernel seconds by
class (:func:`kernel_class_seconds`, keyed by :func:`class_key`: GEMMs by the format
:func:`layer_matmul_dtype` runs them in).

:class:`perfmodel.compute.model.ComputeModel` prices the layers; this module holds the value it
returns and the per-class split the reports read (``StepReport.kernel_classes``). The names are
imported by :mod:`perfmodel.compute.model` too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from perfmodel._frozen import from_fields
from perfmodel.dtypes import MATMUL_DTYPE, DType, Precision
from perfmodel.workload.kernels import fp8_linear
from perfmodel.workload.layers import KernelClass, LayerCost, layer_runs

from .params import ComputeParams


class Bound(str, enum.Enum):
    """What limits a layer: arithmetic or memory traffic (launch overhead is reported apart)."""

    COMPUTE = "compute"
    MEMORY = "memory"


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
BOUND_COMPUTE = Bound.COMPUTE
BOUND_MEMORY = Bound.MEMORY


@dataclass(frozen=True)
class LayerTime:
    """Predicted time of one layer on one GPU, seconds.

    Attributes
    ----------
    fwd_s, bwd_input_s, bwd_weight_s
        Forward, input-gradient and weight-gradient time (each includes launch overhead).
    bound
        Whether the forward pass is limited by arithmetic or by memory traffic.
    efficiency
        Fraction of the datasheet peak reached by the forward GEMM (``None`` without a GEMM).
    waves
        Waves of tiles of the forward GEMM (``None`` without a GEMM): below 1 the GPU is not
        full, which is what makes small per-GPU batches slow.
    tile
        Tile (and split-K) choice of the forward GEMM.
    host_bound
        True when issuing the layer's kernels on the host (``kernels x
        ComputeParams.host_dispatch_s``) takes longer than running them: where a whole step is
        made of such layers the GPU waits for the CPU.
    host_s
        Host issue time of all the layer's kernels (0 when ``host_dispatch_s`` is 0); not part
        of ``fwd_s``/``bwd_s``.
    host_fwd_s
        The forward kernels' share of ``host_s`` (what recomputation issues again).
    cast_s, cast_fwd_s
        The autocast cast kernels' share of the pass times (forward and backward; of the
        forward alone: what recomputation runs again): kernels of their own
        (:meth:`ComputeModel.layer_time`), for a step's per-class breakdown.
    """

    fwd_s: float
    bwd_input_s: float
    bwd_weight_s: float
    bound: Bound
    efficiency: float | None = None
    waves: float | None = None
    tile: str | None = None
    host_bound: bool = False
    host_s: float = 0.0
    host_fwd_s: float = 0.0
    cast_s: float = 0.0
    cast_fwd_s: float = 0.0

    @property
    def bwd_s(self) -> float:
        return self.bwd_input_s + self.bwd_weight_s

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s


#: :class:`LayerTime`'s field names in declaration order (:func:`layer_time_of`)
_FIELDS = tuple(f.name for f in fields(LayerTime))

#: Whether :func:`layer_time_of` makes the instance's dictionary at once (``False``:
#: ``LayerTime.__init__`` always, the reference ``tests/compute/test_layer_time_of.py``
#: compares against)
FAST_BUILD = True


def layer_time_of(**values: Any) -> LayerTime:
    """``LayerTime(**values)`` without the frozen dataclass's twelve ``object.__setattr__``
    calls (~25 k instructions, a sixth of a new layer's price, issue 27).

    Where ``values`` names every field in declaration order, the new instance's ``__dict__``
    is ``values`` itself: the dictionary ``__init__`` leaves (the same keys in the same order,
    the same value objects; :class:`LayerTime` has no ``__post_init__``), so equality,
    hashing, ``repr``, pickling and every reader see the same value. Otherwise (or with
    :data:`FAST_BUILD` off) ``__init__``, with its ``TypeError`` for a wrong name."""
    if FAST_BUILD and tuple(values) == _FIELDS:
        return from_fields(LayerTime, values)
    return LayerTime(**values)


def layer_matmul_dtype(layer: LayerCost, precision: Precision) -> DType:
    """Format of ``layer``'s products under ``precision``.

    FP8 training runs the weight GEMMs in FP8 (:func:`perfmodel.workload.kernels.fp8_linear`:
    linear and convolution layers but the LM head, ``LayerCost.keep_16bit``, and the MoE
    router) and the attention products (fused attention, unfused scores/context) in BF16:
    Transformer Engine's ``fp8_dpa=False`` default (TE 1.x-2.x; Megatron-Core/NeMo FP8 recipes)
    and torchao ``convert_to_float8_training``, which swaps ``nn.Linear`` modules only
    (torchtitan float8, which filters out ``output``). Every other precision uses its
    ``matmul_dtype`` throughout.

    >>> from perfmodel.workload.layers import LayerCost, LayerKind
    >>> att = LayerCost(name="attn", kind=LayerKind.ATTENTION, fwd_flop=1.0, bwd_input_flop=1.0,
    ...                 bwd_weight_flop=0.0, params=0, fwd_bytes=1.0, bwd_bytes=1.0,
    ...                 activation_bytes=1.0, output_shape=(1,))
    >>> layer_matmul_dtype(att, Precision.FP8).value, layer_matmul_dtype(att, Precision.FP16).value
    ('bf16', 'fp16')
    """
    if precision == Precision.FP8 and not fp8_linear(layer):  # ``==``: also the string "fp8"
        return DType.BF16
    return MATMUL_DTYPE[precision]


def fp8_ceiling(params: ComputeParams, *, split_accumulation: bool) -> float:
    """Large-GEMM ceiling (fraction of the FP8 peak) of an FP8 GEMM pass, with fast or with
    split (promoted) accumulation (:attr:`perfmodel.workload.kernels.Fp8Recipe.
    split_accumulation` says which passes use which).

    The one place FP8 GEMM ceilings are read: the GPU's FP8 ceiling
    (:meth:`ComputeParams.gemm_ceiling`), times ``ComputeParams.fp8_split_accumulation`` (the
    GPU's split-over-fast rate) for a split-accumulation pass.
    """
    return params.gemm_ceiling(DType.FP8, split_accumulation=split_accumulation)


def class_key(layer: LayerCost, precision: Precision) -> str:
    """The per-class breakdown key of ``layer``'s kernels: ``"gemm:<dtype>"`` for GEMMs (the
    dtype :func:`layer_matmul_dtype` runs them in), else its :class:`~perfmodel.workload.
    layers.KernelClass` value (``"attention"``, ``"norm"``, ``"rope"``, ``"fp8_cast"``...).

    >>> from perfmodel.workload.layers import GemmShape, LayerCost, LayerKind
    >>> fc = LayerCost(name="fc", kind=LayerKind.LINEAR, fwd_flop=1.0, bwd_input_flop=1.0,
    ...                bwd_weight_flop=1.0, params=1, fwd_bytes=1.0, bwd_bytes=1.0,
    ...                activation_bytes=1.0, output_shape=(1,), gemm=GemmShape(1, 1, 1))
    >>> class_key(fc, Precision.FP8), class_key(fc, Precision.BF16)
    ('gemm:fp8', 'gemm:bf16')
    """
    k = layer.klass
    if k is KernelClass.GEMM:
        return f"gemm:{layer_matmul_dtype(layer, precision).value}"
    return k.value


def kernel_class_seconds(
    chunks: Iterable[Sequence[LayerCost]],
    layer_time: Callable[[LayerCost], LayerTime],
    precision: Precision,
    *,
    microbatches: int = 1,
    recompute_share: Callable[[LayerCost], float] | None = None,
) -> dict[str, float]:
    """Kernel seconds of one step on one GPU by class (:func:`class_key`): every layer of
    ``chunks`` (one pipeline stage's model chunks) run forward and backward ``microbatches``
    times, plus ``recompute_share(layer)`` of its forward again (activation recomputation);
    the autocast casts inside a GEMM layer's time (``LayerTime.cast_s``) go to ``"cast"``.

    A stack's copies of a block are priced once and counted (:func:`~perfmodel.workload.
    layers.layer_runs`). Launch overheads are in their layers' classes. The sum is the
    stage's kernel time: the compute of its timeline without communication slowdowns,
    host waits or pipeline bubbles (``StepReport.breakdown`` has those).
    """
    out: dict[str, float] = {}
    m = float(microbatches)
    for chunk in chunks:
        for block, n in layer_runs(chunk):
            for la in block:
                t = layer_time(la)
                share = recompute_share(la) if recompute_share is not None else 0.0
                total = t.fwd_s * (1.0 + share) + t.bwd_s
                cast = t.cast_s + share * t.cast_fwd_s
                key = class_key(la, precision)
                out[key] = out.get(key, 0.0) + m * n * (total - cast)
                if cast > 0:
                    out["cast"] = out.get("cast", 0.0) + m * n * cast
    return out
