"""The transformer stack copies layer 1 for layers >= 2 (speed), kept as layer 1 and a count
(``Net.all_layers``: a ``StackedLayers``); a copy must be the layer ``transformer_layer`` would
have built: same costs, its own name and block index."""

from __future__ import annotations

import pytest

from perfmodel.dtypes import Precision
from perfmodel.workload._net import Net, RankLayout
from perfmodel.workload.zoo.transformer import TransformerConfig, _stack, transformer_layer


@pytest.mark.parametrize("embedded", [False, True])
@pytest.mark.parametrize(
    ("tp", "sp", "gated", "flash", "layers"),
    [(1, False, False, False, 5), (4, True, True, True, 4), (2, False, False, True, 3)],
)
def test_copied_layers_equal_built_layers(
    tp: int, sp: bool, gated: bool, flash: bool, layers: int, embedded: bool
) -> None:
    """``embedded``: an embedding (a weight layer) comes first, so layer 1 is layer 0's copy
    too (``Net.copy_block``); without one, layer 0's first linear has no input gradient and
    layer 1 is built."""
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
    copied = Net(2, prec, RankLayout(tp=tp, sequence_parallel=sp))
    if embedded:
        for net in (built, copied):
            net.embedding("embed", 2, 32, 100, 64, parallel=True)
    for i in range(layers):
        transformer_layer(built, cfg, 2, 32, f"layer{i}")
    built.end_blocks()
    _stack(copied, cfg, 2, 32)
    stacked = copied.all_layers()
    assert stacked == tuple(built.layers)  # names and block indices included
    assert tuple(stacked) == tuple(built.layers)
    assert [la.name for la in stacked] == [la.name for la in built.layers]
    assert copied.buffers == built.buffers
    assert copied.block is None
    assert {la.block for la in stacked} == {*range(layers), *((None,) if embedded else ())}
    layer1 = [la for la in stacked if la.block == 1]
    assert all(la.cost_source() is la for la in layer1)  # a layer of its own, copied or built
    assert stacked[len(stacked) - 1] is stacked[-1]  # a copy is made once, then kept
