"""How the search screen (:class:`perfmodel.search.screen.PlanScreen`) reads a workload's
layers: a stack read without making its copies (:class:`BlockLayout`), the per-micro-batch sums
it keeps of the block stack and of the layers around it (:data:`SUMS`, :class:`StackParts`),
and the first and last pipeline stage's layers (:func:`first_stage_layers`,
:func:`last_stage_layers`) as slices of the workload's layers where they can be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from perfmodel.workload.layers import split_at_copies

#: The per-micro-batch sums the screen keeps of a run of layers, in this order: forward,
#: backward (recomputation included), expert/context side communication exposed, host issue,
#: the forward's and the backward's tensor-parallel collectives, and the forward seconds of
#: the GEMMs a tensor-parallel reduce-scatter follows.
SUMS = ("fwd", "bwd", "side", "host", "tp_fwd", "tp_bwd", "rs_fwd")


def busy_s(sums: Sequence[float]) -> float:
    """Per-micro-batch seconds of :data:`SUMS` ``sums`` on the compute path, every collective
    after its compute: forward, backward, side and tensor-parallel communication."""
    return sums[0] + sums[1] + sums[2] + sums[4] + sums[5]


@dataclass(frozen=True)
class StackParts:
    """Per-micro-batch :data:`SUMS` seconds of the whole block stack, of the layers before it
    and after it, for one (mb, tp, recompute, sp) shape; shared by every ``pp`` (a stage holds
    ``1/pp`` of the blocks)."""

    blocks: tuple[int, ...]
    block: tuple[float, ...]
    pre: tuple[float, ...]
    post: tuple[float, ...]
    pre_layers: tuple[Any, ...]
    spans: dict[int, tuple[int, int, int]]  # block -> (first position, last + 1, its layers)
    p2p_bytes: float
    block_params: float
    pre_params: float
    post_params: float
    params: float
    all_layers: Sequence[Any]  # the workload's layers (a StackedLayers: copies unmade)
    flop: float


def last_stage_layers(pt: StackParts, keep: Sequence[int]) -> Sequence[Any]:
    """The last stage's layers: the blocks ``keep`` (the model's last ones) and every layer
    after them (final norm, LM head, loss); a slice of the workload's layers when they are its
    tail (a stack's copies stay unmade), else the tuple of them."""
    kept = set(keep)
    lo = min(pt.spans[b][0] for b in kept)
    spans = sorted(pt.spans[b] for b in kept)
    contiguous = all(a[1] == b[0] and a[1] - a[0] == a[2] for a, b in pairwise(spans))
    others_before = all(hi <= lo for b, (_, hi, _) in pt.spans.items() if b not in kept)
    if contiguous and others_before and spans[-1][1] - spans[-1][0] == spans[-1][2]:
        return pt.all_layers[lo:]  # read from the spans: no layer (no copy) is made
    return tuple(la for la in pt.all_layers[lo:] if la.block is None or la.block in kept)


def first_stage_layers(pt: StackParts, keep: Sequence[int]) -> Sequence[Any]:
    """The first stage's layers: those before the blocks, then the layers of the blocks
    ``keep``, in order. When they are the model's first layers (the kept blocks fill the
    positions after the leading layers), a slice of the workload's layers (a stack's copies
    stay unmade), else the tuple of them."""
    end = len(pt.pre_layers)
    for lo, hi, n in sorted(pt.spans[b] for b in keep):
        if lo != end or hi - lo != n:  # a gap, or a block with other layers inside it
            kept = set(keep)
            return pt.pre_layers + tuple(la for la in pt.all_layers if la.block in kept)
        end = hi
    return pt.all_layers[:end]


@dataclass(frozen=True)
class BlockLayout:
    """A workload's layers as the screen reads them: the layers before a stack's copies
    (``head``) and after them (``tail``) one by one, the copies as their block (``template``)
    and indices (``copy_ids``, at positions ``start:stop``); every block's layers
    (``by_block``) and its span ``[first position, last position + 1, layers]``."""

    head: tuple[Any, ...]
    template: tuple[Any, ...]
    copy_ids: Any
    tail: tuple[Any, ...]
    start: int
    stop: int
    by_block: dict[int, Any]
    spans: dict[int, list[int]]

    @classmethod
    def of(cls, layers: Sequence[Any]) -> BlockLayout:
        head, template, copy_ids, tail = split_at_copies(layers)
        if any(la.block in copy_ids for la in head + tail):  # a copy's index used elsewhere
            head, template, copy_ids, tail = tuple(layers), (), range(0), ()
        start = len(head)
        stop = start + len(copy_ids) * len(template)
        by_block: dict[int, Any] = {}
        spans: dict[int, list[int]] = {}  # block -> [first position, last position + 1, layers]
        for off, seq in ((0, head), (stop, tail)):
            for i, la in enumerate(seq, off):
                if la.block is not None:
                    by_block.setdefault(la.block, []).append(la)
                    span = spans.setdefault(la.block, [i, i + 1, 0])
                    span[1] = i + 1
                    span[2] += 1
            if off == 0:  # the copies come between head and tail, in block order
                p = len(template)
                for j, b in enumerate(copy_ids):
                    by_block[b] = template
                    spans[b] = [start + j * p, start + (j + 1) * p, p]
        return cls(head, template, copy_ids, tail, start, stop, by_block, spans)


__all__ = ["SUMS", "BlockLayout", "StackParts", "busy_s", "first_stage_layers", "last_stage_layers"]
