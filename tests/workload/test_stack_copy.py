"""The transformer stack copies layer 1 for layers >= 2 (speed); the copy must be the layer
``transformer_layer`` would have built: same costs, its own name and block index."""

from __future__ import annotations

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net
from perfmodel.workload.zoo.transformer import TransformerConfig, _stack, transformer_layer


@pytest.mark.parametrize(
    ("tp", "sp", "gated", "flash", "layers"),
    [(1, False, False, False, 5), (4, True, True, True, 4), (2, False, False, True, 3)],
)
def test_copied_layers_equal_built_layers(
    tp: int, sp: bool, gated: bool, flash: bool, layers: int
) -> None:
    cfg = TransformerConfig(
        hidden=64,
        layers=layers,
        heads=8,
        kv_heads=4,
        ffn_hidden=256,
        seq_len=32,
        vocab=100,
        gated_mlp=gated,
        flash_attention=flash,
    )
    prec = Precision.parse("bf16")
    built = Net(2, prec, tp=tp, sequence_parallel=sp)
    for i in range(layers):
        transformer_layer(built, cfg, 2, 32, f"layer{i}")
    built.end_blocks()
    copied = Net(2, prec, tp=tp, sequence_parallel=sp)
    _stack(copied, cfg, 2, 32)
    assert copied.layers == built.layers  # names and block indices included
    assert copied.buffers == built.buffers
    assert copied.block is None
    assert {la.block for la in copied.layers} == set(range(layers))
