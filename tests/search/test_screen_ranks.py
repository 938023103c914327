"""The screen's stage-boundary probes (:mod:`perfmodel.search.screen_ranks`), by hand."""

from __future__ import annotations

from perfmodel.parallel.placement import DEFAULT_ORDER
from perfmodel.search.screen_ranks import Ranks, boundary_probes, p2p_rank_pairs, probe_pairs


def test_boundaries_by_hand_with_the_interleaved_wrap() -> None:
    """4-GPU servers, tp2 dp1 pp4 (default order: stage s on GPUs 2s, 2s + 1): boundary 0-1
    inside server 0, 1-2 across, 2-3 inside server 1 (the same kind as 0-1, priced once);
    the interleaved schedule adds the last-to-first boundary (stage 0 with stage 3, across,
    GPUs 0-1 with 6-7: its own kind)."""
    strides = Ranks.of(DEFAULT_ORDER, 1, 4, 2)
    assert strides == (2, 2, 1, 0, 4)
    inside = (((0, 2), (1, 3)), 1)
    across = (((2, 4), (3, 5)), 2)
    assert boundary_probes(2, 1, 4, False, strides, 4) == [inside, across]
    wrap = (((0, 6), (1, 7)), 2)
    assert boundary_probes(2, 1, 4, True, strides, 4) == [inside, across, wrap]


def test_nvl72_stages_of_16() -> None:
    """72-GPU racks, tp4 dp4 pp9: stage s on GPUs 16s..16s+15; boundary 3 (48-63 to 64-79)
    sends GPUs 56-63 to rack 1 (GPUs 72-79) and the rest inside rack 0; its probe spans two
    racks with the partners of 56-63 renumbered to rack 1's first GPUs."""
    strides = Ranks.of(DEFAULT_ORDER, 4, 9, 4)
    pairs = p2p_rank_pairs(4, 4, 3, 4, strides, 72)
    assert pairs == [(48 + i, 64 + i) for i in range(16)]
    local, nodes = probe_pairs(pairs, 72)
    assert nodes == 2 and local[-1] == (63, 72 + 7)
    kinds = boundary_probes(4, 4, 9, False, strides, 72)
    # 0-1, 1-2, 2-3 in rack 0; 3-4 and 4-5 (GPUs 64-79 to 80-95) straddle; 5-6.. in rack 1:
    # each at its own GPUs (distinct probes), the racks renumbered
    assert [n for _, n in kinds] == [1, 1, 1, 2, 2, 1, 1, 1]
    assert kinds[5][0][0] == (8, 24)  # GPU 80 (rack 1's 9th) to GPU 96
