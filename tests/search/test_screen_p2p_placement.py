"""The screen's pipeline sends and rank strides (review of fix21's rank order).

Item 1: every replica of a stage sends at once, so the screen prices the ``min(gpus_per_node,
tp x min(dp x cp, max(1, gpus_per_node // tp)))`` pairs that leave one server together, as the lowering does
(``PipelineLowering.p2p``). Item 2: the strides of commit c4e37b0 (the default order tp, dp,
pp): on two 8-GPU servers with tp=4 dp=2 pp=2 the data-parallel group {0, 4} stays on one
server and the pipeline neighbours {0, 8} span two. Item 3: an explicit non-default placement
is refused, not screened in the default order.
"""

from __future__ import annotations

from typing import Any

import pytest

from perfmodel.errors import ConfigError
from perfmodel.search.screen import PlanScreen
from perfmodel.search.screen_overlap import ring_representative

GPT = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024}


def _base(system: str, **kw: Any) -> dict[str, Any]:
    return {"system": system, "model": "gpt", "model_args": GPT, "precision": "bf16",
            "optimizer": "adam", "software": "megatron", **kw}  # fmt: skip


def _servers(screen: PlanScreen, nodes: int, group: tuple[str, ...]) -> int:
    topo = screen._topology(nodes)
    return len({topo.server_of(g) for g in group})


def test_default_order_strides_by_hand() -> None:
    """dgx-h100 x2, tp4 dp2 pp2: ranks t + 4 d + 8 s (c4e37b0's strides). The screen's own
    calls are recorded: its data-parallel groups (stride tp = 4) stay on one server, its
    pipeline neighbours (tp x dp x cp = 8 apart) span two. Before c4e37b0 the screen passed
    stride tp x pp = 8 (two servers) and neighbours tp = 4 apart (one)."""
    dp, cp, tp = 2, 1, 4
    assert ring_representative(dp * cp, tp, 8) == (1, [0, 4])  # the DP group: one server
    screen = PlanScreen(_base("dgx-h100"))
    pair, _ = screen._group(2, tp * dp * cp)
    assert _servers(screen, 2, pair) == 2  # the pipeline neighbours: two servers
    g = screen._topology(2).gpus
    assert pair == (g[0], g[8])
    # what the screen itself passes for the plan
    dp_calls: list[tuple[int, int]] = []
    p2p_calls: list[list[tuple[str, str]]] = []
    dp_time, p2p_pairs = screen._dp_collective_s, screen._p2p_pairs

    def dp_spy(op: Any, nbytes: float, n: int, stride: int) -> float:
        dp_calls.append((n, stride))
        return dp_time(op, nbytes, n, stride)

    def p2p_spy(tp_: int, n: int) -> tuple[list[tuple[str, str]], Any]:
        pairs, costs = p2p_pairs(tp_, n)
        p2p_calls.append(pairs)
        return pairs, costs

    screen._dp_collective_s = dp_spy  # type: ignore[method-assign]
    screen._p2p_pairs = p2p_spy  # type: ignore[method-assign]
    screen({"gpus": 16, "tp": tp, "pp": 2, "global_batch": 16, "microbatch": 1})
    assert set(dp_calls) == {(dp * cp, tp)}  # the ring_representative above: one server
    assert p2p_calls and all(_servers(screen, 2, p) == 2 for ps in p2p_calls for p in ps)


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


@pytest.mark.parametrize("where", ["base", "plan"])
def test_non_default_placement_is_refused(where: str) -> None:
    plan: dict[str, Any] = {"gpus": 16, "tp": 4, "pp": 2, "global_batch": 16, "microbatch": 1}
    base = _base("dgx-h100")
    if where == "base":
        base["placement"] = "tp,pp,dp"
    else:
        plan["placement"] = "tp,pp,dp"
    with pytest.raises(ConfigError, match=r"placement=tp,dp,pp only, got placement=tp,pp,dp"):
        PlanScreen(base)(plan)
    # the default order, stated explicitly, is screened
    ok = PlanScreen({**base, "placement": "tp,dp,pp"})({**plan, "placement": "tp,dp,pp"})
    assert ok["breakdown"]["pp_p2p_s"] > 0
