"""The embedding's output under sequence parallelism: Megatron-Core scatters it over the
tensor-parallel ranks before the first block (``LanguageModelEmbedding.forward``), so full
recomputation keeps ``s b h / t`` elements of the first block's input, as of every later
block's (:func:`perfmodel.workload.zoo.transformer.scatter_embedding_output`)."""

from __future__ import annotations

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload import build_model
from perfmodel.workload.memory import full_recompute_bytes

SMALL = {"hidden": 64, "layers": 2, "heads": 4, "vocab": 100, "seq_len": 8}


def _first_chunk(name: str, sp: bool, **extra: int) -> list:
    """The layers of a pipeline's first chunk of one block: the embedding and block 0."""
    w = build_model(
        name, batch_size=1, precision="bf16", tp=4, sequence_parallel=sp, **SMALL, **extra
    )
    layers = list(w.layers)
    end = max(i for i, la in enumerate(layers) if la.block == 0)
    return layers[: end + 1]


@pytest.mark.parametrize(
    ("name", "extra", "outside"),
    [
        # token ids (int64) 8 x 8 B for the word and the position table; dropout mask 8 x 64 / 4
        ("gpt", {}, 8 * 8 + 8 * 8 + 8 * 64 // 4),
        # rotary: the word embedding's reduce-scatter is the scatter (token ids 8 x 8 B)
        ("llama", {"ffn_hidden": 128}, 8 * 8),
    ],
)
def test_full_recompute_keeps_the_scattered_embedding(name: str, extra: dict, outside: int) -> None:
    """b=1, s=8, h=64, t=4, bf16: the first block's kept input is 1 x 8/4 x 64 x 2 B = 256 B
    with sequence parallelism (1,024 B, the whole sequence, before embed26), 1,024 B without."""
    kept_sp, _ = full_recompute_bytes(_first_chunk(name, True, **extra), Precision.BF16)
    kept_tp, _ = full_recompute_bytes(_first_chunk(name, False, **extra), Precision.BF16)
    assert kept_sp == outside + 1 * (8 // 4) * 64 * 2
    outside_tp = outside + (8 * 64 - 8 * 64 // 4 if name == "gpt" else 0)  # whole mask
    assert kept_tp == outside_tp + 1 * 8 * 64 * 2


def test_the_scatter_is_the_shape_of_later_blocks_inputs() -> None:
    """The embedding section's last output is the residual stream's shape under sequence
    parallelism (each block's ``residual2``), and the whole sequence without it."""
    for sp, rows in ((True, 2), (False, 8)):
        chunk = _first_chunk("gpt", sp)
        last_outside = [la for la in chunk if la.block is None][-1]
        assert last_outside.name == "embed.dropout"
        assert last_outside.output_shape == (1, rows, 64)
    residual = next(la for la in _first_chunk("gpt", True) if la.name == "layer0.residual2")
    assert residual.output_shape == (1, 2, 64)
