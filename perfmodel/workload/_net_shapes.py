"""Shape arithmetic of the layer primitives (:mod:`perfmodel.workload._net`): element counts,
convolution output lengths and a windowed attention's kernel shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfmodel.workload.layers import GemmShape
from perfmodel.workload.window import AttentionWindow, WindowKind

Shape = tuple[int, ...]


def _window_gemm(window: AttentionWindow, s: int, head_dim: int, heads: int) -> GemmShape:
    """Kernel shape of a windowed attention over ``s`` queries (:meth:`Net.attention`): blocks of
    ``span`` queries against ``span`` keys (chunks) or ``2 span`` keys (a sliding window)."""
    span = window.span(s)
    keys = span if window.kind is WindowKind.CHUNKED else 2 * span
    return GemmShape(m=span, n=keys, k=head_dim, batch=heads * -(-s // span))


def _sliding_keys(window: AttentionWindow | None, s: int) -> int:
    """Keys each query of a sliding-window attention over ``s`` queries sees, the window's
    span ``min(w, s)`` (:attr:`~perfmodel.workload.layers.LayerCost.sliding_window`); 0 for
    no window or a chunked one (its blocks are whole causal attentions).

    >>> _sliding_keys(AttentionWindow(WindowKind.SLIDING, 128), 4096)
    128
    >>> _sliding_keys(AttentionWindow(WindowKind.CHUNKED, 128), 4096), _sliding_keys(None, 4096)
    (0, 0)
    """
    if window is None or window.kind is not WindowKind.SLIDING:
        return 0
    return window.span(s)


def numel(shape: Sequence[int]) -> int:
    """Number of elements of a tensor of ``shape``.

    >>> numel((2, 3, 4))
    24
    """
    return math.prod(int(d) for d in shape)


def conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Output length of a convolution/pooling along one axis: ``floor((L + 2p - d(k-1) - 1)/s) + 1``.

    >>> conv_out(224, 7, 2, 3)
    112
    """
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


__all__ = ["Shape", "conv_out", "numel"]
