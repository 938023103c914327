"""Concurrent sends: routes and max-min rates are cached per set of pairs (they do not depend
on the bytes), so a second message size is priced from the cache exactly as from scratch."""

from __future__ import annotations

from perfmodel.comm import CommCostModel
from perfmodel.topology import load_system


def test_second_size_from_cache_equals_fresh_model() -> None:
    topo = load_system("dgx-a100", nodes=2)
    pairs = [(topo.gpus[i], topo.gpus[8 + i]) for i in range(8)]
    model = CommCostModel(topo)
    model.transfers_time(pairs, 1e6)
    assert len(model.transfers._cache) == 1
    for nbytes in (6.29e6, 1.0, 3e9):
        assert model.transfers_time(pairs, nbytes) == CommCostModel(topo).transfers_time(
            pairs, nbytes
        )
    assert len(model.transfers._cache) == 1
    # 8 sends through 8 HDR NICs (23 GB/s goodput each): 1 GB takes alpha + 1e9 / 23e9
    (alpha, rate), *_ = model.transfers._cache[tuple(pairs)]
    assert rate == 23e9
    assert model.transfers_time(pairs, 1e9) == alpha + 1e9 / 23e9
