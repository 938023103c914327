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


#: Exponent ``p`` of :func:`gemm_roofline_time`'s smooth maximum of a tensor-core GEMM's
#: compute and memory times. A documented one-parameter fit over kernel benchmarks, no training
#: row: the mean ``|log(model / measured)|`` over 50 GEMMs on Hopper, each predicted at the burst
#: rates of a short benchmark (``ComputeParams.for_gpu(burst=True)``, as the microbenchmark rows
#: of :mod:`perfmodel.compute.validation`), scanned over ``p`` = 2.0-6.0 in steps of 0.25: the 28
#: FP8 rows of the DeepGEMM README's tables (deepseek-ai/DeepGEMM 327ec92, H800: dense "normal"
#: GEMMs at M = 64, 128 and 4096, grouped contiguous and grouped masked layouts) and the 22
#: ``m x 4096 x 4096`` GEMMs, ``m`` = 1-1,024 in BF16 and 16-1,024 in FP8 (cuBLAS through ``torch.matmul``
#: and ``torch._scaled_mm``) of this repository's H100 calibration log
#: (``calibration/h100-sxm5-80gb/log.txt``). The mean falls from 0.131 for the sharp roofline
#: (``p`` = infinity) to 0.1005 at ``p`` = 2.75 and 0.1014 at 3 (2.5-3.25 within 0.003; with the
#: sustained rates the minimum is at 3.0); 3 is kept. Near the ridge point a tile's operand stream
#: and its tensor-core main loop do not overlap perfectly (DRAM latency under load exposes stalls
#: of the stage pipeline): the roofline is an upper bound that kernels approach only far from the
#: ridge (Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4)). DeepGEMM's masked layout
#: shows it at equal tiles and waves (``get_best_configs`` picks 128 tiles of 256 x 128 for all
#: three): 1,233 -> 1,040 -> 932 TFLOP/s at 1,024 -> 512 -> 256 rows per weight matrix
#: (4096 x 7168), while its DRAM stream, 0.9-2.1 TB/s, stays below the bandwidth roof.
#: ``tools/fit_gemm_overlap.py`` re-runs the scan from the shipped data
#: (``calibration/kernels/deepgemm-327ec92-h800-fp8.json`` and the calibration log);
#: ``tests/compute/test_gemm_overlap_fit.py`` fails when the model moves the optimum off this value.
GEMM_OVERLAP_EXPONENT = 3.0


def gemm_roofline_time(
    compute_s: float, memory_s: float, exponent: float = GEMM_OVERLAP_EXPONENT
) -> float:
    """Time of a GEMM pass whose compute takes ``compute_s`` and memory traffic ``memory_s``.

    The smooth maximum ``(compute_s**p + memory_s**p) ** (1/p)`` (``p`` =
    :data:`GEMM_OVERLAP_EXPONENT`): the sharp roofline ``max(compute_s, memory_s)`` far from
    the ridge (either time more than twice the other costs at most 4% at ``p`` = 3), ``2**(1/p)``
    times it at the ridge (26% at ``p`` = 3).

    Examples
    --------
    >>> gemm_roofline_time(10.0, 0.0), gemm_roofline_time(0.0, 4.0)
    (10.0, 4.0)
    >>> round(gemm_roofline_time(10.0, 10.0), 3), round(gemm_roofline_time(10.0, 5.0), 3)
    (12.599, 10.4)
    >>> gemm_roofline_time(10.0, 5.0, exponent=float("inf"))
    10.0
    """
    hi, lo = max(compute_s, memory_s), min(compute_s, memory_s)
    if hi <= 0.0:
        return 0.0
    if exponent == float("inf"):
        return hi
    return hi * (1.0 + (lo / hi) ** exponent) ** (1.0 / exponent)


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

    A tile is skipped without its candidates when the best so far reaches its bound
    ``ceiling x tile.efficiency x max(split_k_efficiency, 1)`` (a branch and bound; the answer
    is the full search's bit for bit): with ``k_overhead >= 0`` the factors ``pad``, ``wave``
    and ``keff`` are at most 1, and a correctly rounded product of ``x >= 0`` by a factor
    ``<= 1`` is at most ``x`` (rounding is monotonic and ``x`` is representable), so no
    candidate of the tile exceeds the bound, and only a strictly better candidate replaces the
    best. ``tests/compute/test_gemm_best.py`` compares it with the full search.

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
    prune = k_overhead >= 0.0  # keff <= 1: the bound below holds
    split_gain = max(split_k_efficiency, 1.0)
    for tile in tiles:
        ce = ceiling * tile.efficiency
        if prune and best is not None and 0.0 <= ce and best[0] >= ce * split_gain:
            continue  # no candidate of this tile beats the best (see the docstring)
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
            eff = ce * pad * wave * keff  # ((ceiling x tile.efficiency) x pad) x ...
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


__all__ = [
    "GEMM_OVERLAP_EXPONENT",
    "SPLIT_K_MAX",
    "SPLIT_K_MIN_SLICE",
    "GemmEfficiency",
    "gemm_efficiency",
    "gemm_roofline_time",
]
