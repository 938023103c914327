"""The transformer stack copies layer 1 for layers >= 2 (speed), kept as layer 1 and a count
(``Net.all_layers``: a ``StackedLayers``); a copy must be the layer ``transformer_layer`` would
have built: same costs, its own name and block index."""

from __future__ import annotations

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net, RankLayout
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
    built = Net(2, prec, RankLayout(tp=tp, sequence_parallel=sp))
    for i in range(layers):
        transformer_layer(built, cfg, 2, 32, f"layer{i}")
    built.end_blocks()
    copied = Net(2, prec, RankLayout(tp=tp, sequence_parallel=sp))
    _stack(copied, cfg, 2, 32)
    stacked = copied.all_layers()
    assert stacked == tuple(built.layers)  # names and block indices included
    assert tuple(stacked) == tuple(built.layers)
    assert [la.name for la in stacked] == [la.name for la in built.layers]
    assert copied.buffers == built.buffers
    assert copied.block is None
    assert {la.block for la in stacked} == set(range(layers))
    assert stacked[len(stacked) - 1] is stacked[-1]  # a copy is made once, then kept
