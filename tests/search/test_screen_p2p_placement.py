"""The screen's pipeline sends and rank strides (review of fix21's rank order).

Item 1: every replica of a stage sends at once, so the screen prices the ``tp x min(dp x cp,
gpus_per_node // tp)`` pairs that leave one server together, as the lowering does
(``PipelineLowering.p2p``).
"""

from __future__ import annotations

from typing import Any

import pytest

from perfmodel.search.screen import PlanScreen

GPT = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024}


def _base(system: str, **kw: Any) -> dict[str, Any]:
    return {"system": system, "model": "gpt", "model_args": GPT, "precision": "bf16",
            "optimizer": "adam", "software": "megatron", **kw}  # fmt: skip


def _indices(screen: PlanScreen, nodes: int, pairs: list[tuple[str, str]]) -> list[list[int]]:
    g = screen._topology(nodes).gpus
    return [[g.index(a), g.index(b)] for a, b in pairs]


@pytest.mark.parametrize(("system", "tp", "n", "nodes", "want"), [
    # 2 replicas x 4 tp ranks leave server 0 for server 1 (stride 8)
    ("dgx-h100", 4, 2, 2, [[i, 8 + i] for i in range(8)]),
    # 4 replicas x 2 tp ranks, stride 8, through pcie-8x-server's 2 NICs
    ("pcie-8x-server", 2, 4, 2, [[i, 8 + i] for i in range(8)]),
    # both stages on one server (stride 4): 2 replicas x 2 tp ranks
    ("dgx-h100", 2, 2, 1, [[i, 4 + i] for i in range(4)]),
    # 64 replicas of tp 1 (stride 64): the 8 of one server, priced on two servers
    ("dgx-h100", 1, 64, 2, [[i, 8 + i] for i in range(8)]),
    # tp 16 over two servers: the 8 ranks of the first, one replica
    ("dgx-h100", 16, 2, 2, [[i, 8 + i] for i in range(8)]),
])  # fmt: skip
def test_p2p_pairs_by_hand(system: str, tp: int, n: int, nodes: int, want: list[Any]) -> None:
    screen = PlanScreen(_base(system, precision="fp16"))
    pairs, costs = screen._p2p_pairs(tp, n)
    assert costs is screen._system_costs(nodes)
    assert _indices(screen, nodes, pairs) == want


def test_screen_prices_the_shared_nics() -> None:
    """pcie-8x-server x2, tp2 pp2 dp4: the screen's sends take the eight pairs' time through
    the two NICs, twice or more the single pair the screen priced before."""
    base = _base("pcie-8x-server", precision="fp16")
    screen = PlanScreen(base)
    plan = {"gpus": 16, "tp": 2, "pp": 2, "global_batch": 16, "microbatch": 1}
    got = screen(plan)["breakdown"]["pp_p2p_s"]
    pairs, costs = screen._p2p_pairs(2, 4)
    ratio = costs.transfers_time(pairs, 2**26) / costs.transfers_time(pairs[:1], 2**26)
    assert ratio > 1.5
    lone = PlanScreen(base)
    lone._p2p_pairs = lambda tp, n: (pairs[:1], costs)  # type: ignore[method-assign]
    alone = lone(plan)["breakdown"]["pp_p2p_s"]
    assert got > 1.5 * alone
