"""The operand shapes of the convolution and fused-attention benchmarks.

Each benchmark's shape is one value read three ways: the suite names and records it
(:meth:`ConvShape.params`, the measurement's ``params``), a backend allocates its operands and
states the work of one call, and the fit reads it back from a stored measurement
(:meth:`ConvShape.from_params`) to price the same layer with the model. The arithmetic (output
size, FLOP, operand elements) lives here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution: an ``n x c x h x w`` input, ``k`` filters of ``r x s``, one stride and
    one symmetric zero padding for both spatial dimensions (no dilation, no groups).

    Output size ``ho = (h + 2 pad - r) // stride + 1`` (``wo`` likewise with ``w`` and ``s``):
    PyTorch ``torch.nn.Conv2d`` documentation, "Shape", with dilation 1.
    """

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int
    pad: int

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ConvShape:
        """The shape recorded in a measurement's ``params`` (:meth:`params`' names)."""
        return cls(**{name: int(params[name]) for name in cls.__dataclass_fields__})

    def params(self) -> dict[str, int]:
        """The shape as a measurement records it: ``n, c, h, w, k, r, s, stride, pad``."""
        return asdict(self)

    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.pad - self.r) // self.stride + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.pad - self.s) // self.stride + 1

    @property
    def input_elems(self) -> int:
        return self.n * self.c * self.h * self.w

    @property
    def output_elems(self) -> int:
        return self.n * self.k * self.out_h * self.out_w

    @property
    def weight_elems(self) -> int:
        return self.k * self.c * self.r * self.s

    @property
    def flop(self) -> float:
        """Forward FLOP ``2 n k ho wo c r s`` (one multiply and one add per weight tap and output
        element: the direct convolution's work, whatever algorithm the library picks)."""
        return 2.0 * self.n * self.k * self.out_h * self.out_w * self.c * self.r * self.s


@dataclass(frozen=True)
class AttentionShape:
    """Fused scaled-dot-product attention over ``batch x heads`` sequences of ``seq`` tokens,
    ``head_dim`` wide, causal or full.

    FLOP convention of the zoo's attention layer: forward ``4 b h s^2 d`` (``Q K^T`` and
    ``P V``, two FLOP per multiply-add), halved when causal; Dao, "FlashAttention-2" (arXiv
    2307.08691, 2023), section 4.1, counts the same (and the backward as 2.5x the forward).
    """

    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> AttentionShape:
        """The shape recorded in a measurement's ``params`` (a missing ``causal`` is causal)."""
        return cls(
            int(params["batch"]),
            int(params["heads"]),
            int(params["seq"]),
            int(params["head_dim"]),
            bool(params.get("causal", True)),
        )

    def params(self) -> dict[str, Any]:
        """The shape as a measurement records it: ``batch, heads, seq, head_dim, causal``."""
        return asdict(self)

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """``(batch, heads, seq, head_dim)``: the shape of each of Q, K, V and O."""
        return (self.batch, self.heads, self.seq, self.head_dim)

    @property
    def fwd_flop(self) -> float:
        causal = 0.5 if self.causal else 1.0
        return 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim * causal

    def qkvo_bytes(self, itemsize: int) -> float:
        """Bytes of Q, K and V read and O written once, ``itemsize`` bytes per element."""
        return 4.0 * itemsize * self.batch * self.heads * self.seq * self.head_dim
