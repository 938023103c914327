"""gemm_efficiency keeps the first of equally good candidates and reports the chosen one's
numbers (it builds only the winner's GemmEfficiency, issue 14); its branch and bound gives the
full search's answer (issue 27)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from perfmodel.compute import Tile, gemm_efficiency
from perfmodel.compute.gemm import SPLIT_K_MAX, SPLIT_K_MIN_SLICE
from perfmodel.compute.params import _SIMT_TILES, _TC_TILES
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


def _full_search(
    gemm: GemmShape,
    *,
    sm_count: int,
    ceiling: float,
    tiles: tuple[Tile, ...],
    k_overhead: float,
    split_k_efficiency: float,
) -> tuple[float, str, int, float, float, float, float]:
    """The tile/wave search without the branch and bound: every candidate of every tile
    listed, then the first of the largest (the formulas of :func:`gemm_efficiency`'s
    docstring, in its order of operations); the reference it must equal bit for bit."""
    m, n, k, b = (max(v, 1) for v in (gemm.m, gemm.n, gemm.k, gemm.batch))
    listed = []
    for tile in tiles:
        grid = math.ceil(m / tile.m) * math.ceil(n / tile.n) * b
        pad = (m * n * b) / (grid * tile.m * tile.n)
        splits = [1]  # split-K doubles while below one wave and the slices stay long
        while (
            grid * splits[-1] / (sm_count * tile.ctas_per_sm) < 1.0
            and k / (splits[-1] * 2) >= SPLIT_K_MIN_SLICE
            and splits[-1] < SPLIT_K_MAX
        ):
            splits.append(splits[-1] * 2)
        for s in splits:
            waves = grid * s / (sm_count * tile.ctas_per_sm)
            wave, keff = waves / math.ceil(waves), k / s / (k / s + k_overhead)
            eff = ceiling * tile.efficiency * pad * wave * keff
            eff = eff * split_k_efficiency if s > 1 else eff
            name = f"{tile.m}x{tile.n}" + (f"/splitK{s}" if s > 1 else "")
            listed.append((eff, name, grid * s, waves, pad, wave, keff))
    return max(listed, key=lambda c: c[0])  # the first of equal maxima


def test_branch_and_bound_equals_full_search() -> None:
    """The skipped tiles never change the answer: 3,000 random GEMMs (tall, wide, tiny, batched)
    on random SM counts, against the default menus and shuffled menus with efficiencies above
    and below 1 (one negative), a negative ceiling, ``split_k_efficiency`` above and below 1 and
    negative or zero ``k_overhead`` (where the bound is not used); every field of the result
    equal."""
    rng = random.Random(27)
    menus = [_TC_TILES, _SIMT_TILES]
    for _ in range(6):
        menu = list(_TC_TILES + _SIMT_TILES)
        rng.shuffle(menu)
        menus.append(tuple(replace(t, efficiency=rng.uniform(0.3, 1.2)) for t in menu[:7]))
    # a tile of negative efficiency (or a negative ceiling) has a negative bound, which a best
    # candidate may exceed in the wrong direction: never pruned (rev24-a)
    menus.append((replace(_TC_TILES[0], efficiency=-0.2), *_TC_TILES[1:]))
    for _ in range(3000):
        dims = [rng.choice((1, 7, 64, 96, 128, 3141, 12288)) * rng.randint(1, 40) for _ in "mnk"]
        g = GemmShape(*dims, rng.choice((1, 1, 2, 6, 48)))
        kw = {
            "sm_count": rng.choice((8, 80, 108, 132)),
            "ceiling": rng.choice((0.787, 1.0, 0.9, -0.5)),
            "tiles": rng.choice(menus),
            "k_overhead": rng.choice((0.0, 64.0, 419.0, -0.5)),
            "split_k_efficiency": rng.choice((0.9, 1.0, 1.1)),
        }
        e = gemm_efficiency(g, **kw)
        got = (e.efficiency, e.tile, e.tiles, e.waves)
        got += (e.tile_utilisation, e.wave_utilisation, e.k_utilisation)
        assert got == _full_search(g, **kw), (g, kw)


def test_bound_counts_a_split_gain_above_one() -> None:
    """A split-K gain above 1 raises a tile's bound: 128x128x4096 on 4 SMs, where split-K 4
    fills one wave; the first tile reaches 1.0 x 1.1, which is above the second tile's
    efficiency 1.05 but below its split candidate 1.05 x 1.1, which wins."""
    tiles = (Tile(128, 128, 1.0), Tile(128, 128, 1.05))
    kw = {"sm_count": 4, "ceiling": 1.0, "tiles": tiles, "k_overhead": 0.0}
    e = gemm_efficiency(GemmShape(128, 128, 4096), split_k_efficiency=1.1, **kw)
    assert (e.tile, e.efficiency) == ("128x128/splitK4", 1.05 * 1.1)
    assert e.efficiency == _full_search(GemmShape(128, 128, 4096), split_k_efficiency=1.1, **kw)[0]
