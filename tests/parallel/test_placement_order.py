"""The default rank order (tp, dp, pp: pipeline stages outermost, as Megatron-LM, Megatron-Core,
torchtitan, DeepSpeed and InternEvo lay ranks out) and an explicit order kept.

Golden case by hand: tp=4, pp=2, dp=2 on two 8-GPU servers (16 ranks). Rank of
``(dp d, pp s, tp t)`` in the order tp, dp, pp is ``t + 4 d + 8 s``, so server 0 (ranks 0-7)
holds stage 0 and server 1 (ranks 8-15) stage 1:

- TP groups: ranks {0-3}, {4-7}, {8-11}, {12-15};
- DP groups (one per stage and TP rank): {t, 4 + t} on server 0, {8 + t, 12 + t} on server 1,
  so the gradient reduction runs on NVLink;
- PP groups: {t + 4 d, 8 + t + 4 d}: every pipeline neighbour is on the other server (the NIC).

In the old order tp, pp, dp (rank ``t + 4 s + 8 d``) the DP groups were {t, 8 + t} (across
the NIC) and the pipeline pairs {t, 4 + t} (NVLink).
"""

from __future__ import annotations

from perfmodel.api import resolve, topology_of
from perfmodel.parallel.placement import place
from perfmodel.parallel.plan import ParallelismPlan
from perfmodel.parallel.taskgraph import CommKind
from perfmodel.pipeline.lower import build_step
from perfmodel.scenario import Scenario
from perfmodel.topology import load_system

PLAN = ParallelismPlan(dp=2, tp=4, pp=2)


def _ranks(topo, group: tuple[str, ...]) -> list[int]:  # type: ignore[no-untyped-def]
    return [topo.gpus.index(g) for g in group]


def test_default_order_puts_stages_outermost_by_hand() -> None:
    topo = load_system("dgx-h100", nodes=2)
    pl = place(PLAN, topo)
    assert pl.order == ("tp", "dp", "pp")
    assert _ranks(topo, pl.tp_group(0, 0)) == [0, 1, 2, 3]
    assert _ranks(topo, pl.tp_group(1, 0)) == [4, 5, 6, 7]
    assert _ranks(topo, pl.tp_group(0, 1)) == [8, 9, 10, 11]
    assert _ranks(topo, pl.tp_group(1, 1)) == [12, 13, 14, 15]
    assert _ranks(topo, pl.dp_group(0, 0)) == [0, 4]
    assert _ranks(topo, pl.dp_group(0, 3)) == [3, 7]
    assert _ranks(topo, pl.dp_group(1, 2)) == [10, 14]
    assert _ranks(topo, pl.pp_group(0, 0)) == [0, 8]
    assert _ranks(topo, pl.pp_group(1, 3)) == [7, 15]
    # every data-parallel group inside one server, every pipeline pair across the two
    for s in range(2):
        for t in range(4):
            assert len({topo.server_of(g) for g in pl.dp_group(s, t)}) == 1
    for d in range(2):
        for t in range(4):
            assert len({topo.server_of(g) for g in pl.pp_group(d, t)}) == 2


def test_explicit_old_order_by_hand() -> None:
    topo = load_system("dgx-h100", nodes=2)
    pl = place(PLAN, topo, order=("tp", "pp", "dp"))
    assert _ranks(topo, pl.dp_group(0, 0)) == [0, 8]
    assert _ranks(topo, pl.pp_group(0, 0)) == [0, 4]
    assert _ranks(topo, pl.tp_group(1, 1)) == [12, 13, 14, 15]


def _scenario(**keys: object) -> Scenario:
    base: dict[str, object] = {
        "system": "dgx-h100",
        "nodes": 2,
        "model": "gpt",
        "model_args": {"layers": 4, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000},
        "global_batch": 16,
        "tp": 4,
        "pp": 2,
        "microbatch": 1,
        "precision": "bf16",
        "optimizer": "adam",
        "software": "megatron",
        "fidelity": "analytic",
    }
    return Scenario(**{**base, **keys})  # type: ignore[arg-type]


def _servers_by_kind(sc: Scenario) -> dict[CommKind, set[int]]:
    """Per comm kind, how many servers its groups (and send/recv pairs) span."""
    step, _ = build_step(sc, resolve(sc))
    topo = topology_of(sc)
    out: dict[CommKind, set[int]] = {}
    for t in step.graph.tasks:
        if t.comm is None:
            continue
        for grp in (t.comm.group, *t.comm.siblings):
            out.setdefault(t.comm.kind, set()).add(len({topo.server_of(g) for g in grp}))
    return out


def test_scenario_default_and_explicit_placement() -> None:
    """The lowering takes the default order for a dense plan (no ep) and keeps an explicit one."""
    assert resolve(_scenario()).parsed.placement == ("tp", "dp", "pp")
    default = _servers_by_kind(_scenario())
    assert default[CommKind.DP] == {1} and default[CommKind.PP] == {2}
    old = _servers_by_kind(_scenario(placement="tp,pp,dp"))
    assert resolve(_scenario(placement="tp,pp,dp")).parsed.placement == ("tp", "pp", "dp")
    assert old[CommKind.DP] == {2} and old[CommKind.PP] == {1}
