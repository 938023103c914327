"""Local attention windows: sliding-window and chunked causal attention.

Two ways today's decoders limit the keys a query attends to, both on top of the causal mask:

* **sliding** (Beltagy et al. 2020, Longformer; Jiang et al. 2023, Mistral 7B; OpenAI 2025,
  gpt-oss): query ``i`` attends to keys ``i - w + 1 .. i``, the ``w`` most recent positions
  itself included (HF ``sliding_window = w``; Megatron-Core ``window_size = (w - 1, 0)``, as
  Megatron-Bridge's gpt-oss bridge sets it);
* **chunked** (Meta 2025, Llama 4 ``attention_chunk_size``): the sequence is cut into chunks of
  ``c`` positions and a query attends causally within its own chunk only.

Cost convention (the one of :meth:`perfmodel.workload._net.Net.attention`): the work of a fused
kernel is the number of query-key pairs it computes, written as a fraction of the ``S x S`` score
matrix of a sequence of ``S`` positions in the continuous approximation the causal mask already
uses (causal = ``1/2``, not ``(S + 1) / 2S``):

* sliding, ``w < S``: ``(S w - w^2 / 2) / S^2`` (every query sees ``w`` keys, minus the triangle
  the first ``w`` queries lack); ``w = S`` gives ``1/2``;
* chunked, ``S = k c + r``: ``(k c^2 / 2 + r^2 / 2) / S^2`` (``k`` causal chunks and a causal
  remainder); ``c >= S`` gives ``1/2``.

A window at least as long as the sequence changes nothing (:meth:`AttentionWindow.limits`).
FlashAttention-2/3 and cuDNN skip the key tiles wholly outside a local window
(FlashAttention ``window_size=(left, right)``, Dao-AILab/flash-attention 2.3+; cuDNN "sliding
window" masks), so the fused kernel's FLOP and time follow the pairs; its saved tensors (``Q,
K, V`` and the log-sum-exp) do not depend on the window.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel._enum import ParsedEnum
from perfmodel.errors import ConfigError


class WindowKind(str, ParsedEnum, where="window"):
    """How a local attention window is laid out (see the module docstring)."""

    SLIDING = "sliding"
    CHUNKED = "chunked"


@dataclass(frozen=True)
class AttentionWindow:
    """A sliding window of ``size`` keys, or chunks of ``size`` positions.

    >>> w = AttentionWindow(WindowKind.SLIDING, 128)
    >>> w.pairs_fraction(4096)  # (4096 x 128 - 128^2 / 2) / 4096^2
    0.03076171875
    >>> AttentionWindow(WindowKind.CHUNKED, 8192).pairs_fraction(8192)  # one whole chunk
    0.5

    Raises
    ------
    ConfigError
        For a size below 1 (naming it).
    """

    kind: WindowKind
    size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", WindowKind.parse(self.kind))
        size = self.size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(
                f"attention window size must be an integer >= 1, got {size!r}",
                value=size,
                where=f"{self.kind.value} window",
            )

    def limits(self, seq: int) -> bool:
        """Whether the window drops any key of a causal attention over ``seq`` positions."""
        return self.size < seq

    def pairs_fraction(self, seq: int) -> float:
        """Query-key pairs computed over ``seq^2`` (``1/2`` where the window does not limit)."""
        s, w = float(seq), float(self.size)
        if not self.limits(seq):
            return 0.5
        if self.kind is WindowKind.SLIDING:
            return (s * w - w * w / 2.0) / (s * s)
        full, rest = divmod(seq, self.size)
        return (full * w * w / 2.0 + rest * rest / 2.0) / (s * s)

    def span(self, seq: int) -> int:
        """Positions one block of queries of the kernel sweeps: ``min(size, seq)``."""
        return min(self.size, seq)

    def label(self) -> str:
        return f"{self.kind.value} {self.size}"


__all__ = ["AttentionWindow", "WindowKind"]
