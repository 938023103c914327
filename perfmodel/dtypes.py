"""Numeric formats and training precisions."""

from __future__ import annotations

import enum

from perfmodel._enum import parse_enum


class DType(str, enum.Enum):
    """A number format a GPU executes. Peak rates are listed per DType in the GPU catalogue.

    ``FP32`` is non-tensor-core FP32 (CUDA cores); ``TF32``, ``FP16``, ``BF16`` and ``FP8`` are
    dense tensor-core rates (no structured sparsity) where the GPU has tensor cores, else the
    CUDA-core rate for that format.
    """

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def itemsize(self) -> int:
        """Bytes per element as stored in memory (TF32 is stored as FP32)."""
        return {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}[self.value]

    @classmethod
    def parse(cls, text: str | DType, *, where: str = "dtype") -> DType:
        return parse_enum(cls, text, where=where)


class Precision(str, enum.Enum):
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
        return {
            "fp32": DType.FP32,
            "tf32": DType.TF32,
            "fp16": DType.FP16,
            "bf16": DType.BF16,
            "fp8": DType.FP8,
        }[self.value]

    @property
    def activation_bytes(self) -> int:
        """Bytes per stored activation element."""
        return 4 if self in (Precision.FP32, Precision.TF32) else 2

    @property
    def param_bytes(self) -> int:
        """Bytes per working-copy parameter (the copy used by forward/backward)."""
        return 4 if self in (Precision.FP32, Precision.TF32) else 2

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element of the half-model mixed-precision default (FP32 recipes:
        4; mixed: 2). A training stack's own gradient and reduction bytes (autocast: 4,
        Megatron bf16: 4) are its :class:`perfmodel.parallel.recipe.Recipe`'s."""
        return 4 if self in (Precision.FP32, Precision.TF32) else 2

    @property
    def mixed(self) -> bool:
        """True when FP32 master weights are kept beside 16/8-bit working copies."""
        return self not in (Precision.FP32, Precision.TF32)

    @classmethod
    def parse(cls, text: str | Precision, *, where: str = "--precision") -> Precision:
        return parse_enum(cls, text, where=where, noun="precision")
