"""How far the memory model's "fits" can be trusted: its measured error on published peaks.

A plan "fits" when its predicted peak per GPU is at most the GPU's capacity
(:attr:`perfmodel.parallel.memory.PlanMemory.fits`); that rule stays. But the prediction has an
error, and a plan predicted at 79.5 of 80 GiB is a coin toss, not a fit. This module holds the
memory validation rows, the published peak memory per GPU of runs the validation tier predicts,
and derives from their residuals the margin a "fits" is reported with (audit15 item 8):

- :data:`MEMORY_ROWS`: every ``modern.jsonl`` row whose publication states its peak memory per
  GPU: the torchtitan team's Llama 3.1 benchmark on 96 GB H100 (``pytorch/torchtitan
  @820504e2 benchmarks/llama3_h100_202412_torchtitan.md``, Tables 1-6, column "Memory(GiB)";
  "the maximum across all GPUs", stable over the run; torchtitan's memory monitor logs the
  peak active and the peak reserved memory, and the tables do not say which they show), with
  perfmodel's prediction of the same row
  (``memory_per_gpu_bytes`` of :func:`perfmodel.accuracy_modern.dense_results` /
  :func:`~perfmodel.accuracy_modern.moe_cp_results`). The predictions are generated, never
  edited: ``tests/validation/test_memory_rows.py`` recomputes them and fails when the memory
  model moves (then update them here, in the same commit).
- :data:`MEMORY_UNDER`: the largest ``published / predicted - 1`` over the rows (the memory model
  under-predicts, never over-predicts by more than 1.1 %): a plan whose predicted peak times
  ``1 + MEMORY_UNDER`` exceeds the capacity is within the model's measured error of it, and is
  reported as "fits (tight: ...)" (:func:`tight`). The largest, not a quantile: 18 rows of one
  publication are one setup's errors, too few to say how often a new setup errs more; the
  worst measured is what the record can state.

Nothing here changes a prediction or what counts as fitting; it is a statement of the error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Where :data:`MEMORY_ROWS`' published values come from.
MEMORY_SOURCE = (
    "torchtitan's Llama 3.1 benchmark on 96 GB H100 (benchmarks/llama3_h100_202412_torchtitan.md, "
    "Tables 1-6)"
)

#: :data:`MEMORY_SOURCE` in a few words, for the text "fits (tight: ...)".
MEMORY_SHORT = "torchtitan Llama 3.1 runs on H100"


@dataclass(frozen=True)
class MemoryRow:
    """One published peak memory per GPU against perfmodel's prediction (GiB)."""

    row_id: str
    published_gib: float
    predicted_gib: float

    @property
    def under(self) -> float:
        """``published / predicted - 1``: how much more the run used than predicted."""
        return self.published_gib / self.predicted_gib - 1.0


#: The memory validation rows: ``modern.jsonl`` row id, the published "Memory(GiB)" of its table
#: row (:data:`MEMORY_SOURCE`), perfmodel's prediction (GiB, rounded to 0.01; generated, checked
#: by ``tests/validation/test_memory_rows.py``).
MEMORY_ROWS: tuple[MemoryRow, ...] = (
    MemoryRow("tt-2412-t1-8b-8g-fsdp", 82.4, 77.42),
    MemoryRow("tt-2412-t1-8b-8g-fsdp-compile", 77.0, 77.42),
    MemoryRow("tt-2412-t1-8b-8g-fsdp-compile-fp8", 76.8, 76.39),
    MemoryRow("tt-2412-t2-8b-fsdp8-cp1", 83.9, 80.22),
    MemoryRow("tt-2412-t2-8b-fsdp4-cp2", 84.2, 81.27),
    MemoryRow("tt-2412-t2-8b-fsdp2-cp4", 84.0, 82.32),
    MemoryRow("tt-2412-t2-8b-fsdp1-cp8", 84.5, 84.42),
    MemoryRow("tt-2412-t3-8b-128g-fsdp", 67.0, 62.69),
    MemoryRow("tt-2412-t3-8b-128g-fsdp-compile", 62.0, 62.69),
    MemoryRow("tt-2412-t3-8b-128g-fsdp-compile-fp8", 61.8, 61.67),
    MemoryRow("tt-2412-t4-70b-256g-2d", 71.9, 65.99),
    MemoryRow("tt-2412-t4-70b-256g-2d-asynctp", 67.6, 65.99),
    MemoryRow("tt-2412-t5-405b-512g-1f1b", 82.5, 67.00),
    MemoryRow("tt-2412-t5-405b-512g-interleaved", 72.7, 63.98),
    MemoryRow("tt-2412-t6-405b-512g-fsdp8-cp1", 75.3, 67.00),
    MemoryRow("tt-2412-t6-405b-512g-fsdp4-cp2", 75.9, 67.53),
    MemoryRow("tt-2412-t6-405b-512g-fsdp2-cp4", 77.1, 68.05),
    MemoryRow("tt-2412-t6-405b-512g-fsdp1-cp8", 84.9, 69.10),
)


def largest_under(rows: Sequence[MemoryRow]) -> float:
    """The largest ``published / predicted - 1`` of ``rows``.

    >>> largest_under([MemoryRow("a", 150.0, 100.0), MemoryRow("b", 95.0, 100.0)])
    0.5
    """
    return max(r.under for r in rows)


#: The memory model's largest measured under-prediction of a published peak (a fraction; the
#: 512-GPU Llama 3.1 405B 1F1B row, 82.5 GiB published against 67.00 predicted: +23.1 %; 65.16
#: and +26.6 % until mem30c counted torch.distributed.pipelining's per-micro-batch receive buffers
#: and the received inputs' kept ``.grad``; 63.43 and +30.1 % until mem30b counted the last
#: stage's kept logits (``output_chunks``) and loss parallel; until embed26 the 70B 2D row's
#: +20.6 %, when the stage holding the embedding kept its output whole under full recomputation
#: with sequence parallelism: 70.78 GiB there).
MEMORY_UNDER = largest_under(MEMORY_ROWS)


def tight(total_bytes: float, capacity_bytes: float, under: float = MEMORY_UNDER) -> bool:
    """Whether a plan that fits (``total_bytes <= capacity_bytes``) is within the memory
    model's measured error of the capacity: ``total_bytes * (1 + under) > capacity_bytes``.

    >>> tight(70e9, 80e9, 0.2), tight(60e9, 80e9, 0.2), tight(90e9, 80e9, 0.2)
    (True, False, False)
    """
    return total_bytes <= capacity_bytes < total_bytes * (1.0 + under)


def tight_text(under: float = MEMORY_UNDER, rows: int = len(MEMORY_ROWS)) -> str:
    """Why a fit is tight, in words: the margin and where it comes from."""
    return (
        f"within the memory model's error of capacity: published peaks ran up to "
        f"{100 * under:.0f}% above its predictions, {rows} {MEMORY_SHORT}; docs/intervals.md"
    )


def stage_tight(stages: Sequence[Mapping[str, float]] | Sequence[object]) -> bool:
    """:func:`tight` of the fullest of a plan's stages (``PlanMemory`` values, or their
    ``to_dict``); ``False`` where any stage does not fit (that is not a tight fit)."""
    pairs = [
        (s["total_bytes"], s["capacity_bytes"])
        if isinstance(s, Mapping)
        else (s.total_bytes, s.capacity_bytes)  # type: ignore[attr-defined]
        for s in stages
    ]
    if not pairs or any(t > c for t, c in pairs):
        return False
    return any(tight(t, c) for t, c in pairs)
