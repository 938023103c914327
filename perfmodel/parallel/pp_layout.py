"""A stated pipeline layout: which layers each pipeline chunk holds, as Megatron-Core's
``pipeline_model_parallel_layout`` string says (``--pipeline-model-parallel-layout``;
NVIDIA/Megatron-LM ``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
``PipelineParallelLayerLayout``).

Grammar (Megatron-Core's ``parse_str_to_list``): ``|`` ends a chunk, ``E`` is the embedding,
``t`` one decoder layer (a transformer block), ``m`` one multi-token-prediction depth, ``L`` the
loss (final norm, output layer and loss); ``x*N`` repeats one character ``N`` times,
``(...)*N`` repeats a group, commas are cosmetic. Chunk ``s`` of ``pp x v`` runs on pipeline
rank ``s % pp`` as its virtual stage ``s // pp`` (Megatron-Core's
``layout[vpp_rank * pp + pp_rank]``), which is how
:func:`~perfmodel.parallel.partition.partition`'s chunks are placed too.

>>> lay = parse_pipeline_layout("Et*4|(t*4|)*14tmL")
>>> len(lay.stages), lay.stages[0], lay.stages[-1], lay.counts("t")[:3]
(16, 'Etttt', 'tmL', (4, 4, 4))
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.workload.layers import Workload

#: The layer characters of Megatron-Core's layout strings (``char2layer_type``).
LAYER_CHARS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}

_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_ONE = re.compile(r"(.)\*(\d+)")
#: Repeats larger than this are refused (a typo, not a model: the largest zoo model has 126).
_MAX_REPEAT = 4096


@dataclass(frozen=True)
class PipelineLayout:
    """A parsed layout: ``text`` as given and ``stages``, each chunk's layer characters
    unrolled, in layer order (chunk ``s`` on pipeline rank ``s % pp``)."""

    text: str
    stages: tuple[str, ...]

    def counts(self, char: str) -> tuple[int, ...]:
        """How many ``char`` layers (``E``, ``t``, ``m``, ``L``) each chunk holds."""
        return tuple(s.count(char) for s in self.stages)


def parse_pipeline_layout(text: object, *, where: str = "pipeline_layout") -> PipelineLayout:
    """``text`` (Megatron-Core's layout string) as a :class:`PipelineLayout`.

    Raises
    ------
    ConfigError
        A character outside ``E t m L | ( ) * , digits``, an unbalanced group, an empty
        chunk, no or several ``E``/``L``, ``E`` not first or ``L`` not last, an ``m`` before a
        ``t``; the message names the value.
    """
    raw = str(text).strip()

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{where}={raw!r}: {why}", value=text, where=where)

    s = raw.replace(",", "").replace(" ", "")
    if not s:
        raise bad("empty layout; e.g. 'Et*4|(t*4|)*14tmL'")
    for pattern in (_GROUP, _ONE):
        while True:
            m = pattern.search(s)
            if m is None:
                break
            n = int(m.group(2))
            if n > _MAX_REPEAT:
                raise bad(f"repeat *{n} exceeds {_MAX_REPEAT}")
            s = s[: m.start()] + m.group(1) * n + s[m.end() :]
    stray = sorted(set(s) - set(LAYER_CHARS) - {"|"})
    if stray:
        raise bad(
            f"unknown layer characters {stray} (unbalanced group or a '*' without a count?); "
            "known: E (embedding), t (decoder layer), m (MTP depth), L (loss), '|' between chunks"
        )
    stages = tuple(s.split("|"))
    if any(not st for st in stages):
        raise bad("a chunk holds no layer ('||' or a trailing '|')")
    flat = "".join(stages)
    if flat.count("E") != 1 or flat[0] != "E":
        raise bad("the embedding 'E' must be the first layer, exactly once")
    if flat.count("L") != 1 or flat[-1] != "L":
        raise bad("the loss 'L' must be the last layer, exactly once")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise bad("decoder layers 't' must come before the MTP layers 'm'")
    return PipelineLayout(raw, stages)


def _mtp_depth(name: str) -> str | None:
    """``mtp<k>`` of an MTP layer's name (``mtp0.layer.q_up``), else ``None``."""
    head = name.split(".", 1)[0]
    return head if re.fullmatch(r"mtp\d+", head) else None


def layout_chunks(
    layout: PipelineLayout,
    workload: Workload,
    spans: Sequence[tuple[int, int, bool]],
    k: int,
    *,
    where: str = "pipeline_layout",
) -> list[list[int]]:
    """The layer ids of each of the ``k`` chunks ``layout`` states, over ``workload``'s units
    ``spans`` (``(start, end, has a block)``, :func:`~perfmodel.parallel.partition.partition`'s
    units): block-less units before the first decoder block go with ``E``, the decoder blocks
    one per ``t`` in order, block-less units after a block with that block's chunk (after the
    last block: with ``L``), and each MTP depth's units (layers named ``mtp<k>.*``) with its
    ``m``.

    Raises
    ------
    InfeasiblePlanError
        The layout's chunks are not ``k`` (``pp x interleave``), or its ``t`` / ``m`` counts are
        not the model's decoder blocks / MTP depths.
    """
    layers = workload.layers
    if len(layout.stages) != k:
        raise InfeasiblePlanError(
            f"{where}={layout.text!r} states {len(layout.stages)} chunks but the plan runs "
            f"{k} (pp x interleave)",
            value=layout.text,
            where=where,
        )
    mtp: dict[str, list[tuple[int, int]]] = {}
    decoders: list[list[tuple[int, int]]] = []  # each block with the block-less units after it
    head: list[tuple[int, int]] = []  # block-less units before the first block
    for a, b, has in spans:
        depth = _mtp_depth(layers[a].name) if has else None
        if depth is not None:
            mtp.setdefault(depth, []).append((a, b))
        elif has:
            decoders.append([(a, b)])
        elif decoders:
            decoders[-1].append((a, b))
        else:
            head.append((a, b))
    n_t, n_m = sum(layout.counts("t")), sum(layout.counts("m"))
    if n_t != len(decoders) or n_m != len(mtp):
        raise InfeasiblePlanError(
            f"{where}={layout.text!r} places {n_t} decoder layers 't' and {n_m} MTP depths "
            f"'m'; model {workload.name} has {len(decoders)} and {len(mtp)}",
            value=layout.text,
            where=where,
        )
    tail = decoders[-1][1:] if decoders else []  # the final norm, output layer and loss
    if decoders:
        decoders[-1] = decoders[-1][:1]
    parts: list[list[int]] = []
    di, mtps = iter(decoders), iter(mtp.values())
    for stage in layout.stages:
        spans_of: list[tuple[int, int]] = []
        for ch in stage:
            spans_of += (
                head if ch == "E" else tail if ch == "L" else next(di if ch == "t" else mtps)
            )
        parts.append(sorted(i for a, b in spans_of for i in range(a, b)))
        if not parts[-1]:
            raise InfeasiblePlanError(
                f"{where}={layout.text!r}: chunk {len(parts) - 1} ({stage!r}) holds no layer "
                f"of model {workload.name}",
                value=layout.text,
                where=where,
            )
    return parts


__all__ = ["LAYER_CHARS", "PipelineLayout", "layout_chunks", "parse_pipeline_layout"]
