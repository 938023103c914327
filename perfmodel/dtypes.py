"""Numeric formats and training precisions."""

from __future__ import annotations

from perfmodel._enum import ParsedEnum
from perfmodel.errors import ConfigError


class DType(str, ParsedEnum, where="dtype"):
    """A number format a GPU executes. Peak rates are listed per DType in the GPU catalogue.

    ``FP32`` is non-tensor-core FP32 (CUDA cores); ``TF32``, ``FP16``, ``BF16`` and ``FP8`` are
    dense tensor-core rates (no structured sparsity) where the GPU has tensor cores, else the
    CUDA-core rate for that format. ``FP6`` and ``FP4`` are the block-scaled 6- and 4-bit tensor
    formats of Blackwell (NVFP4, MXFP6/MXFP4) and AMD CDNA 4 (MXFP6/MXFP4): catalogue peaks
    only, no training :class:`Precision` uses them (OCP Microscaling Formats (MX) v1.0
    specification, 2023: E2M3/E3M2 FP6 and E2M1 FP4 elements, one 8-bit scale per 32 elements).
    """

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    FP6 = "fp6"
    FP4 = "fp4"

    @property
    def bits(self) -> int:
        """Bits per element as stored (TF32 is stored as FP32; FP6/FP4 elements without their
        shared block scale)."""
        return _BITS[self.value]

    @property
    def itemsize(self) -> int:
        """Bytes per element as stored in memory (TF32 is stored as FP32).

        Raises
        ------
        ConfigError
            For the packed sub-byte formats FP6 and FP4 (no whole number of bytes per element:
            read :attr:`bits`).
        """
        bits = _BITS[self.value]
        if bits % 8:
            raise ConfigError(
                f"{self.value} is a packed {bits}-bit format with no whole byte size; use "
                "DType.bits",
                value=self.value,
                where="DType.itemsize",
            )
        return bits // 8


# Enum members the hot paths read, bound once: on CPython 3.11 `EnumType.__getattr__` makes
# each `Enum.MEMBER` read ~1,000 instructions (docs/design.md "Session 26 (speed41a)").
DTYPE_FP32 = DType.FP32
DTYPE_FP8 = DType.FP8
DTYPE_TF32 = DType.TF32


#: Storage bits per element of each :class:`DType` value.
_BITS = {"fp64": 64, "fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "fp6": 6, "fp4": 4}


class Precision(str, ParsedEnum, where="--precision", noun="precision"):
    """A training precision recipe.

    ``fp32``: everything FP32 on CUDA cores. ``tf32``: FP32 storage, matmuls on TF32 tensor cores.
    ``fp16``/``bf16``: mixed precision (Micikevicius et al. 2018): 16-bit activations and matmuls,
    FP32 master weights and optimizer state. ``fp8``: FP8 matmuls (Transformer Engine style) with
    BF16 activations elsewhere and FP32 master weights.
    """

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def matmul_dtype(self) -> DType:
        """The dtype of this recipe's matmuls (:data:`MATMUL_DTYPE`)."""
        return MATMUL_DTYPE[self]

    @property
    def activation_bytes(self) -> int:
        """Bytes per stored activation element."""
        return 4 if self in (PRECISION_FP32, PRECISION_TF32) else 2

    @property
    def param_bytes(self) -> int:
        """Bytes per working-copy parameter (the copy used by forward/backward)."""
        return 4 if self in (PRECISION_FP32, PRECISION_TF32) else 2

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element of the half-model mixed-precision default (FP32 recipes:
        4; mixed: 2). A training stack's own gradient and reduction bytes (autocast: 4,
        Megatron bf16: 4) are its :class:`perfmodel.parallel.recipe.Recipe`'s."""
        return 4 if self in (PRECISION_FP32, PRECISION_TF32) else 2

    @property
    def mixed(self) -> bool:
        """True when FP32 master weights are kept beside 16/8-bit working copies."""
        return self not in (PRECISION_FP32, PRECISION_TF32)


# (bound once, as above)
PRECISION_FP32 = Precision.FP32
PRECISION_TF32 = Precision.TF32


#: :attr:`Precision.matmul_dtype` of each precision, one table (a hot reader such as
#: ``compute.layer_time.layer_matmul_dtype`` indexes it without the property; a ``str`` enum's
#: value string finds its member's entry too)
MATMUL_DTYPE: dict[Precision, DType] = {
    Precision.FP32: DType.FP32,
    Precision.TF32: DType.TF32,
    Precision.FP16: DType.FP16,
    Precision.BF16: DType.BF16,
    Precision.FP8: DType.FP8,
}
