"""gemm_efficiency keeps the first of equally good candidates and reports the chosen one's
numbers (it builds only the winner's GemmEfficiency, issue 14)."""

from __future__ import annotations

from perfmodel.compute import Tile, gemm_efficiency
from perfmodel.workload.layers import GemmShape


def test_first_of_equal_tiles_wins() -> None:
    """256^3 on 8 SMs: 128x64 and 64x128 tiles both give 8 tiles = 1 full wave, no padding
    (efficiency 1.0 each); the one listed first is chosen."""
    a, b = Tile(128, 64, 1.0), Tile(64, 128, 1.0)
    g = GemmShape(256, 256, 256)
    for tiles, name in (((a, b), "128x64"), ((b, a), "64x128")):
        e = gemm_efficiency(g, sm_count=8, ceiling=1.0, tiles=tiles, k_overhead=0)
        assert (e.tile, e.tiles, e.waves, e.efficiency) == (name, 8, 1.0, 1.0)


def test_split_k_candidate_numbers() -> None:
    """128x128x4096 on 4 SMs, one 128x128 tile: split 1 fills 1/4 wave (0.25), split 2 half a
    wave (0.5 x 0.9 = 0.45), split 4 one wave (0.9): split-K 4 with its own numbers."""
    e = gemm_efficiency(
        GemmShape(128, 128, 4096),
        sm_count=4,
        ceiling=1.0,
        tiles=(Tile(128, 128, 1.0),),
        k_overhead=0,
        split_k_efficiency=0.9,
    )
    assert (e.tile, e.tiles, e.waves, e.wave_utilisation) == ("128x128/splitK4", 4, 1.0, 1.0)
    assert (e.tile_utilisation, e.k_utilisation, e.efficiency) == (1.0, 1.0, 0.9)
