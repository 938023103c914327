"""One GEMM's efficiency on a GPU: the tile/wave model (:func:`gemm_efficiency`): the tile
the library picks, how many waves of CTAs it launches, split-K below one wave, and the three
quantisation losses. :class:`~perfmodel.compute.model.ComputeModel` applies it to every GEMM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.compute.params import Tile
from perfmodel.workload.layers import GemmShape


@dataclass(frozen=True)
class GemmEfficiency:
    """Outcome of the tile/wave model for one GEMM.

    Attributes
    ----------
    efficiency
        Fraction of the dtype's datasheet peak this GEMM reaches (all factors multiplied).
    tile
        Chosen tile as ``"MxN"`` (with ``/splitK`` when split).
    tiles
        Number of tiles (CTAs) launched.
    waves
        ``tiles / (sm_count x ctas_per_sm)``: below 1 means idle SMs; a fractional last wave
        wastes the rest of that wave.
    tile_utilisation, wave_utilisation, k_utilisation
        The three quantisation factors (1.0 = no loss).
    """

    efficiency: float
    tile: str
    tiles: int
    waves: float
    tile_utilisation: float
    wave_utilisation: float
    k_utilisation: float


#: Shortest reduction slice a split-K factor may leave, elements. An estimate, not fitted: a
#: slice of 256 runs its main loop at ``keff = 256 / (256 + k_overhead)`` = 0.8 with the default
#: 64-element fill/drain (:class:`ComputeParams` ``k_overhead``), and each halving costs a further
#: reduction pass; shorter slices are not searched.
SPLIT_K_MIN_SLICE = 256


#: Largest split-K factor searched (a bound on the search, far above what a below-one-wave grid
#: of a real layer needs).
SPLIT_K_MAX = 1024


def gemm_efficiency(
    gemm: GemmShape,
    *,
    sm_count: int,
    ceiling: float,
    tiles: tuple[Tile, ...],
    k_overhead: float,
    split_k_efficiency: float = 0.9,
) -> GemmEfficiency:
    """Best predicted efficiency of a GEMM over the tile menu and split-K factors.

    For a tile ``tm x tn`` and split factor ``S``::

        T      = ceil(m/tm) ceil(n/tn) batch S                      (tiles)
        pad    = m n batch / (ceil(m/tm) ceil(n/tn) batch tm tn)    (tile quantisation)
        waves  = T / (sm_count ctas_per_sm);  wave = waves / ceil(waves)
        keff   = (k/S) / (k/S + k_overhead)
        eff    = ceiling x tile.efficiency x pad x wave x keff (x split_k_efficiency if S > 1)

    Examples
    --------
    A 1024^3 GEMM on an 80-SM GPU: 256x128 tiles give 32 tiles (0.4 wave); 128x64 tiles at two
    per SM give 128 tiles = 0.8 wave, the best choice:

    >>> e = gemm_efficiency(GemmShape(1024, 1024, 1024), sm_count=80, ceiling=1.0,
    ...                     tiles=(Tile(256, 128, 1.0), Tile(128, 64, 1.0, 2)), k_overhead=0)
    >>> e.tile, e.tiles, round(e.waves, 2), round(e.efficiency, 2)
    ('128x64', 128, 0.8, 0.8)
    """
    m, n, k, batch = max(gemm.m, 1), max(gemm.n, 1), max(gemm.k, 1), max(gemm.batch, 1)
    # the best candidate's numbers; its GemmEfficiency (and tile name) is built once, at the end
    best: tuple[float, Tile, int, int, float, float, float, float] | None = None
    for tile in tiles:
        tm_count, tn_count = math.ceil(m / tile.m), math.ceil(n / tile.n)
        base_tiles = tm_count * tn_count * batch
        pad = (m * n * batch) / (base_tiles * tile.m * tile.n)
        slots = sm_count * tile.ctas_per_sm
        split = 1
        while True:
            t = base_tiles * split
            waves = t / slots
            wave = waves / math.ceil(waves)
            kk = k / split
            keff = kk / (kk + k_overhead)
            eff = ceiling * tile.efficiency * pad * wave * keff
            if split > 1:
                eff *= split_k_efficiency
            if best is None or eff > best[0]:  # the first of equal candidates, as listed
                best = (eff, tile, split, t, waves, pad, wave, keff)
            # split-K only helps while the grid is below one wave and k stays long
            if waves >= 1.0 or k / (split * 2) < SPLIT_K_MIN_SLICE or split >= SPLIT_K_MAX:
                break
            split *= 2
    assert best is not None
    eff, tile, split, t, waves, pad, wave, keff = best
    name = f"{tile.m}x{tile.n}" + (f"/splitK{split}" if split > 1 else "")
    return GemmEfficiency(eff, name, t, waves, pad, wave, keff)


__all__ = ["SPLIT_K_MAX", "SPLIT_K_MIN_SLICE", "GemmEfficiency", "gemm_efficiency"]
