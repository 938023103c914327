"""The screen's pipeline sends and rank strides, as predict places the ranks.

Item 1: every replica of a stage sends at once, so the screen prices the ``min(gpus_per_node,
tp x min(dp x cp, max(1, gpus_per_node // tp)))`` pairs that leave one server together, as the
lowering does (``PipelineLowering.p2p``). Item 2: the strides of the default order (tp, dp,
pp): on two 8-GPU servers with tp=4 dp=2 pp=2 the data-parallel group {0, 4} stays on one
server and the pipeline sends {0..7} -> {8..15} span two. Item 3 (fix22): any placement order
is screened on the groups predict's lowering uses (tensor-, data-, context- and
expert-parallel groups, every stage boundary's sends), and the slowest stage boundary paces
the sends (before, only boundary 0 was priced: NVLink where later boundaries cross servers).
"""

from __future__ import annotations

from typing import Any

import pytest
from screen_spies import record_groups

from perfmodel.parallel.expert import context_groups, expert_groups
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.placement import DEFAULT_ORDER, rank_strides
from perfmodel.pipeline.lower import _step_inputs
from perfmodel.pipeline.resolve import resolve
from perfmodel.scenario import Scenario
from perfmodel.search import screen_ranks
from perfmodel.search.screen import PlanScreen
from perfmodel.search.screen_overlap import ring_representative
from perfmodel.search.screen_ranks import Ranks

GPT = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 1024}


def _base(system: str, **kw: Any) -> dict[str, Any]:
    return {"system": system, "model": "gpt", "model_args": GPT, "precision": "bf16",
            "optimizer": "adam", "software": "megatron", **kw}  # fmt: skip


def _servers(screen: PlanScreen, nodes: int, group: tuple[str, ...]) -> int:
    topo = screen._topology(nodes)
    return len({topo.server_of(g) for g in group})


def _indices(screen: PlanScreen, nodes: int, pairs: list[tuple[str, str]]) -> list[list[int]]:
    g = screen._topology(nodes).gpus
    return [[g.index(a), g.index(b)] for a, b in pairs]


def _default(tp: int, n: int, pp: int) -> Ranks:
    return Ranks.of(DEFAULT_ORDER, n, pp, tp)


def test_default_order_strides_by_hand() -> None:
    """dgx-h100 x2, tp4 dp2 pp2: ranks t + 4 d + 8 s. The screen's own calls are recorded:
    its data-parallel groups (stride tp = 4) stay on one server; its pipeline sends pair
    tensor-parallel rank t of replica d with the same rank of the next stage, 8 apart: the
    eight GPUs of server 0 with those of server 1."""
    dp, cp, tp = 2, 1, 4
    assert ring_representative(dp * cp, tp, 8) == (1, [0, 4])  # the DP group: one server
    screen = PlanScreen(_base("dgx-h100"))
    (sends,) = screen._p2p_boundaries(tp, dp * cp, 2, False, _default(tp, dp * cp, 2))
    pairs, costs = sends
    assert costs is screen._system_costs(2)
    assert _indices(screen, 2, pairs) == [[i, 8 + i] for i in range(8)]
    assert all(_servers(screen, 2, p) == 2 for p in pairs)  # every send crosses servers
    # what the screen itself passes for the plan
    dp_calls: list[tuple[int, int]] = []
    p2p_calls: list[list[tuple[list[tuple[str, str]], Any]]] = []
    dp_time, boundaries = screen._dp_collective_s, screen._p2p_boundaries

    def dp_spy(op: Any, nbytes: float, n: int, stride: int) -> float:
        dp_calls.append((n, stride))
        return dp_time(op, nbytes, n, stride)

    def p2p_spy(*args: Any) -> list[tuple[list[tuple[str, str]], Any]]:
        got = boundaries(*args)
        p2p_calls.append(got)
        return got

    screen._dp_collective_s = dp_spy  # type: ignore[method-assign]
    screen._p2p_boundaries = p2p_spy  # type: ignore[method-assign]
    screen({"gpus": 16, "tp": tp, "pp": 2, "global_batch": 16, "microbatch": 1})
    assert set(dp_calls) == {(dp * cp, tp)}  # the ring_representative above: one server
    assert p2p_calls and all(got == [sends] for got in p2p_calls)


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
    ((pairs, costs),) = screen._p2p_boundaries(tp, n, 2, False, _default(tp, n, 2))
    assert costs is screen._system_costs(nodes)
    assert _indices(screen, nodes, pairs) == want


def test_screen_prices_the_shared_nics() -> None:
    """pcie-8x-server x2, tp2 pp2 dp4: the screen's sends take the eight pairs' time through
    the two NICs, twice or more the single pair the screen priced before."""
    base = _base("pcie-8x-server", precision="fp16")
    screen = PlanScreen(base)
    plan = {"gpus": 16, "tp": 2, "pp": 2, "global_batch": 16, "microbatch": 1}
    got = screen(plan)["breakdown"]["pp_p2p_s"]
    ((pairs, costs),) = screen._p2p_boundaries(2, 4, 2, False, _default(2, 4, 2))
    ratio = costs.transfers_time(pairs, 2**26) / costs.transfers_time(pairs[:1], 2**26)
    assert ratio > 1.5
    lone = PlanScreen(base)
    lone._p2p_boundaries = lambda *a: [(pairs[:1], costs)]  # type: ignore[method-assign]
    alone = lone(plan)["breakdown"]["pp_p2p_s"]
    assert got > 1.5 * alone


def _predict_side(base: dict[str, Any], plan: dict[str, Any]) -> tuple[Any, Any]:
    """The lowering predict builds for ``base`` + ``plan`` (analytic), and its topology."""
    sc = Scenario.from_dict({**base, **plan, "fidelity": "analytic"})
    r = resolve(sc)
    inp, costs, _ = _step_inputs(sc, r, None)
    return PipelineLowering(inp, costs), r.topology


def _run_screen(
    base: dict[str, Any], plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[PlanScreen, dict[str, Any], dict[str, list[list[int]]], list[Any]]:
    """Screen ``plan``, recording its groups as global rank lists (from rank 0) and the
    global rank pairs of every boundary's sends."""
    screen = PlanScreen(base)
    groups: dict[str, list[list[int]]] = {"group": [], "dp": []}
    sends: list[Any] = []
    group, dp_time, rank_pairs = screen._group, screen._dp_collective_s, screen_ranks.p2p_rank_pairs

    def group_spy(ranks: tuple[int, ...]) -> Any:
        groups["group"].append(list(ranks))
        return group(ranks)

    def dp_spy(op: Any, nbytes: float, n: int, stride: int) -> float:
        groups["dp"].append([i * stride for i in range(n)])
        return dp_time(op, nbytes, n, stride)

    def pairs_spy(*args: Any) -> list[tuple[int, int]]:
        got = rank_pairs(*args)
        sends.append((args[2], args[3], got))
        return got

    screen._group = group_spy  # type: ignore[method-assign]
    screen._dp_collective_s = dp_spy  # type: ignore[method-assign]
    monkeypatch.setattr(screen_ranks, "p2p_rank_pairs", pairs_spy)
    return screen, screen(plan), groups, sends


@pytest.mark.parametrize("order", ["tp,dp,pp", "tp,pp,dp", "dp,tp,pp", "pp,tp,dp", "dp,pp,tp"])
@pytest.mark.parametrize("where", ["base", "plan"])
def test_groups_equal_predicts(order: str, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """dgx-h100 x4, tp2 dp2 cp2 pp4 (32 GPUs), every placement order, stated in the base or
    in the plan: the screen's tensor-parallel, context-parallel and data-parallel groups and
    every stage boundary's sends are the ones predict's lowering builds from its
    :class:`~perfmodel.parallel.placement.Placement` (stage 0's first groups, the sends'
    pairs of ``PipelineLowering.p2p``), and the sends' time is the slowest boundary's that
    predict prices on the whole topology. Before fix22 a non-default order was refused."""
    base = _base("dgx-h100", nodes=4, model_args={**GPT, "layers": 8})
    plan: dict[str, Any] = {"gpus": 32, "tp": 2, "pp": 4, "cp": 2, "global_batch": 32,
                            "microbatch": 1}  # fmt: skip
    (base if where == "base" else plan)["placement"] = order
    screen, rep, groups, sends = _run_screen(base, plan, monkeypatch)
    low, topo = _predict_side(base, plan)
    pl = low.pl
    index = {g: i for i, g in enumerate(topo.gpus)}

    def ranks(group: tuple[str, ...]) -> list[int]:
        return [index[g] for g in group]

    # every stage's tp group, then its cp group, one per way it sits on its servers (fix25:
    # before, stage 0's only)
    want: list[list[int]] = []
    for kind in (
        [pl.tp_group(0, s) for s in range(4)],
        [context_groups(pl, s, 2)[0] for s in range(4)],
    ):
        seen: dict[Any, list[int]] = {}
        for g in kind:
            seen.setdefault(screen_ranks.probe_group(ranks(g), 8), ranks(g))
        want += seen.values()
    assert groups["group"] == want
    assert {tuple(g) for g in groups["dp"]} == {tuple(ranks(pl.dp_group(0, 0)))}
    # every boundary's sends, pair for pair (pp 4: boundaries 0-1, 1-2, 2-3)
    assert sorted((a, b) for a, b, _ in sends) == [(0, 1), (1, 2), (2, 3)]
    slowest = 0.0
    nbytes = 2.0**20
    for a, b, got in sends:
        _, spec = low.p2p(a, b, nbytes)
        assert got == [(index[x], index[y]) for x, y in (spec.group, *spec.siblings)]
        slowest = max(slowest, low.costs.transfers_time([spec.group, *spec.siblings], nbytes))
    screened = max(
        c.transfers_time(p, nbytes) for p, c in screen._p2p_boundaries(*_args(screen, plan, pl))
    )
    assert screened == pytest.approx(slowest, rel=1e-9)
    assert rep["breakdown"]["pp_p2p_s"] > 0


def _args(screen: PlanScreen, plan: dict[str, Any], pl: Any) -> tuple[Any, ...]:
    """``_p2p_boundaries``' arguments for a placed plan (not interleaved)."""
    return pl.tp, pl.dp, pl.pp, False, Ranks(*pl._strides)


def _probe_servers(probes: list[tuple[list[tuple[str, str]], Any]]) -> list[int]:
    """The servers each probe's sends touch."""
    return [len({c.topology.server_of(g) for pr in p for g in pr}) for p, c in probes]


def test_slowest_boundary_paces_the_sends() -> None:
    """dgx-h100 x2, tp2 dp2 pp4 (default order, stages of 4 GPUs): boundary 0 (GPUs 0-3 to
    4-7) and 2 (8-11 to 12-15) stay inside a server on NVLink, boundary 1 (4-7 to 8-11)
    crosses servers. The sends are priced at boundary 1's time, as predict's lowering prices
    that boundary on the whole topology; before fix22 the screen priced boundary 0 only."""
    base = _base("dgx-h100", nodes=2, model_args={**GPT, "layers": 8})
    plan = {"gpus": 16, "tp": 2, "pp": 4, "global_batch": 16, "microbatch": 1}
    screen = PlanScreen(base)
    probes = screen._p2p_boundaries(2, 2, 4, False, _default(2, 2, 4))
    assert _probe_servers(probes) == [1, 2]
    nbytes = 2.0**22
    inside, across = (c.transfers_time(p, nbytes) for p, c in probes)
    assert across > 2 * inside  # the NIC, not NVLink
    low, _ = _predict_side(base, plan)
    assert low.p2p_split  # each TP rank sends 1/tp of the activation it is given
    predicted = [low.p2p(s, s + 1, 2 * nbytes)[0] for s in range(3)]
    assert predicted[1] == pytest.approx(across, rel=1e-9)
    assert predicted[0] == pytest.approx(inside, rel=1e-9)
    # the report: (m + pp - 1) x 2 sends of the boundary activation, 1/tp per rank, at the
    # slowest boundary's time
    rep = screen(plan)
    st = next(iter(screen._stage_cache.values()))
    per_rank = st.p2p_bytes / 2
    want = (8 + 4 - 1) * 2 * max(c.transfers_time(p, per_rank) for p, c in probes)
    assert rep["breakdown"]["pp_p2p_s"] == want
    first_only = (8 + 4 - 1) * 2 * probes[0][1].transfers_time(probes[0][0], per_rank)
    assert rep["breakdown"]["pp_p2p_s"] > 2 * first_only


def test_nvl72_boundary_across_racks() -> None:
    """gb200-nvl72 x2 (two 72-GPU racks), tp4 dp4 pp9 (stages of 16 GPUs): boundaries 0-2
    stay in rack 0, boundary 3 (GPUs 48-63 to 64-79) sends half its pairs to rack 1,
    boundaries 4-7 again stay in rack 1 (its GPUs 72-143) except where they straddle: the
    screen's probes are those kinds, and the slowest is a cross-rack one."""
    screen = PlanScreen(_base("gb200-nvl72", nodes=2, model_args={**GPT, "layers": 18}))
    probes = screen._p2p_boundaries(4, 4, 9, False, _default(4, 4, 9))
    nodes = _probe_servers(probes)
    assert nodes[0] == 1 and 2 in nodes
    nbytes = 2.0**22
    times = [c.transfers_time(p, nbytes) for p, c in probes]
    assert max(times) > 2 * times[0]


def test_tensor_parallel_group_outside_the_data_axis() -> None:
    """dgx-h100 x4, placement dp,pp,tp (tp outermost), dp2 pp4 tp4: the tensor-parallel
    group is GPUs 0, 8, 16, 24, one per server. The screen prices its all-reduce on four
    servers with one member each, as predict's group on the whole topology costs it; before
    fix22 (an order the screen now reads) the shortcut for such groups kept two members,
    whose price was over 10% lower."""
    from perfmodel.ops import CollectiveOp

    screen = PlanScreen(_base("dgx-h100", nodes=4))
    s_tp = rank_strides(("dp", "pp", "tp"), 2, 4, 4)[2]
    assert s_tp == 8
    grp, costs = screen._group(tuple(i * s_tp for i in range(4)))
    assert len(grp) == 4 and _servers(screen, 4, grp) == 4
    g = screen._topology(4).gpus
    whole = tuple(g[i * s_tp] for i in range(4))  # predict's tp_group(0, 0) on 4 servers
    op, nbytes = CollectiveOp.ALLREDUCE, 2.0**24
    want = screen._system_costs(4).collective_time(op, nbytes, whole)
    assert costs.collective_time(op, nbytes, grp) == pytest.approx(want, rel=1e-9)
    # the screen asks for the whole group when it screens the plan
    calls: list[tuple[Any, ...]] = []
    group = screen._group

    def spy(*args: Any) -> Any:
        calls.append(args)
        return group(*args)

    screen._group = spy  # type: ignore[method-assign]
    plan = {"gpus": 32, "tp": 4, "pp": 4, "global_batch": 16, "microbatch": 1}
    screen({**plan, "placement": "dp,pp,tp"})
    # every stage's (GPUs 2s + 8t): local GPU 2s of each server, each its own probe
    assert calls == [(tuple(2 * s + 8 * t for t in range(4)),) for s in range(4)]


_DP_OPS = ("ALLREDUCE", "REDUCESCATTER", "ALLGATHER")


@pytest.mark.parametrize(("nodes", "tp", "pp", "dp", "order"), [
    (3, 2, 3, 4, "tp,pp,dp"),  # stride 6: members 0, 6, 12, 18 on three servers
    (3, 1, 3, 8, "tp,pp,dp"),  # stride 3: three, three and two members per server
    (5, 1, 5, 8, "pp,tp,dp"),  # stride 5
    (2, 4, 2, 2, "tp,dp,pp"),  # the default order (stride 4), one server: unchanged
    (5, 1, 2, 20, "tp,dp,pp"),  # the default order, 20 ranks on 8 + 8 + 4 GPUs of 3 servers
    (5, 2, 2, 10, "tp,dp,pp"),  # stride 2: 4 + 4 + 2 ranks
])  # fmt: skip
def test_dp_collective_seconds_equal_predicts(
    nodes: int, tp: int, pp: int, dp: int, order: str
) -> None:
    """The seconds the screen gives the data-parallel collectives of the plan, for the
    (ranks, stride) the screen itself asks when it screens the plan, equal predict's
    ``collective_time`` on its real data-parallel group (``dp_group(0, 0)``) on the whole
    topology. Before mend22 a stride that does not divide the server's 8 GPUs was priced on
    one server (NVLink): 0.15 of predict's all-reduce for stride 6, 1.75x for stride 3; an
    uneven last server (mend25) on its two full servers extended: 0.44-0.66 of it."""
    from perfmodel.ops import CollectiveOp

    layers = {3: 12, 5: 20}.get(pp, 8)
    base = _base("dgx-h100", nodes=nodes, model_args={**GPT, "layers": layers})
    plan = {"gpus": tp * pp * dp, "tp": tp, "pp": pp, "global_batch": dp * pp * 4,
            "microbatch": 1, "placement": order}  # fmt: skip
    screen = PlanScreen(base)
    asked: set[tuple[int, int]] = set()
    dp_time = screen._dp_collective_s

    def spy(op: Any, nbytes: float, n: int, stride: int) -> float:
        asked.add((n, stride))
        return dp_time(op, nbytes, n, stride)

    screen._dp_collective_s = spy  # type: ignore[method-assign]
    screen(plan)
    low, _ = _predict_side(base, plan)
    real = low.pl.dp_group(0, 0)
    ((n, stride),) = asked
    assert n == len(real) == dp
    for name in _DP_OPS:
        op = getattr(CollectiveOp, name)
        for nbytes in (2.0**20, 2.0**28):
            want = low.costs.collective_time(op, nbytes, real)
            assert dp_time(op, nbytes, n, stride) == pytest.approx(want, rel=1e-9), name


def test_context_and_expert_groups_one_per_server() -> None:
    """dgx-h100 x4, tp8 cp4 (the default order): the context-parallel group, and an
    expert-parallel group of 4 along the same data axis, are GPUs 0, 8, 16, 24, one per
    server. The group the screen prices them on (recorded as it screens the plan) costs
    what predict's real groups cost on the whole topology for every collective they run;
    before mend22 two members on two servers stood for them (all-to-all 0.58-0.84,
    all-gather 0.46-0.66 of the group's time)."""
    from perfmodel.ops import CollectiveOp

    base = _base("dgx-h100", nodes=4)
    plan = {"gpus": 32, "tp": 8, "cp": 4, "global_batch": 8, "microbatch": 1}
    screen = PlanScreen(base)
    got = record_groups(screen)
    screen(plan)
    low, _ = _predict_side(base, plan)
    real = context_groups(low.pl, 0, 4)[0]
    assert real == expert_groups(low.pl, 0, 4, 8)[0]
    (grp, costs), *_ = [g for key, g in got if key == (0, 8, 16, 24)]
    assert _servers(screen, 4, grp) == 4
    for name in ("ALLTOALL", "ALLGATHER", "REDUCESCATTER", "ALLREDUCE"):
        op = getattr(CollectiveOp, name)
        for nbytes in (2.0**20, 2.0**26):
            want = low.costs.collective_time(op, nbytes, real)
            assert costs.collective_time(op, nbytes, grp) == pytest.approx(want, rel=1e-9)
