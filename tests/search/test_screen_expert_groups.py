"""The screen's tensor-, context- and expert-parallel groups are the lowering's (fix25).

Megatron-Core numbers a stage's expert ranks ``etp`` fastest, then ``ep``, over the stage's
ranks in tensor-parallel-fastest order (:func:`perfmodel.parallel.expert.expert_groups`), so
with expert tensor parallelism ``etp < tp`` an expert-parallel group holds tensor-parallel
ranks before replicas. Before fix25 the screen spaced it by the data stride whatever ``etp``
(dgx-h100 x4, ``etp = 1``: 2.1-8.2x predict's all-to-all of the group) and built the rank's
workload with ``etp = tp`` (the plan's ``etp`` never reached it: 0.27-0.71 of predict's
memory, screen/predict step time 0.47-0.79).
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

import pytest
from screen_spies import record_groups

from perfmodel.ops import CollectiveOp
from perfmodel.parallel.expert import context_groups, expert_groups
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.placement import Placement
from perfmodel.pipeline.lower import _step_inputs
from perfmodel.pipeline.resolve import resolve
from perfmodel.scenario import Scenario
from perfmodel.search.screen import PlanScreen
from perfmodel.search.screen_ranks import Ranks, group_ranks

MOE = {"hidden": 256, "layers": 4, "heads": 8, "kv_heads": 8, "experts": 24, "seq_len": 512}


@pytest.mark.parametrize("order", list(permutations(("tp", "dp", "pp"))))
@pytest.mark.parametrize(("tp", "dp", "pp", "ep", "etp"), [
    (2, 8, 2, 8, 1), (2, 8, 2, 4, 2), (4, 4, 2, 4, 1), (4, 4, 2, 2, 2), (4, 6, 3, 6, 2),
    (8, 2, 2, 4, 4), (1, 8, 2, 4, 1),
])  # fmt: skip
def test_group_ranks_equal_the_lowerings(
    order: tuple[str, str, str], tp: int, dp: int, pp: int, ep: int, etp: int
) -> None:
    """Every placement order, every stage: :func:`group_ranks` gives the first tensor-,
    context- and expert-parallel group the lowering builds from its
    :class:`~perfmodel.parallel.placement.Placement` (ranks as GPU names)."""
    n = dp * pp * tp
    pl = Placement(dp, tp, pp, tuple(str(i) for i in range(n)), order)
    r = Ranks.of(order, dp, pp, tp, etp)
    for s in range(pp):
        assert group_ranks(r, "tp", tp, tp, s) == tuple(map(int, pl.tp_group(0, s)))
        got = group_ranks(r, "ep", ep, tp, s)
        assert got == tuple(map(int, expert_groups(pl, s, ep, etp)[0]))
        assert group_ranks(r, "cp", 2, tp, s) == tuple(map(int, context_groups(pl, s, 2)[0]))
    # etp 0 is tp (Megatron-Core's default)
    assert group_ranks(r._replace(etp=0), "ep", ep, tp) == group_ranks(
        r._replace(etp=tp), "ep", ep, tp
    )


def _lowering(base: dict[str, Any], plan: dict[str, Any]) -> tuple[Any, Any, Any]:
    sc = Scenario.from_dict({**base, **plan, "fidelity": "analytic"})
    r = resolve(sc)
    inp, costs, _ = _step_inputs(sc, r, None)
    return PipelineLowering(inp, costs), r.topology, inp


@pytest.mark.parametrize(("system", "nodes", "plan"), [
    ("dgx-h100", 4, {"gpus": 32, "tp": 2, "ep": 8}),
    ("dgx-h100", 4, {"gpus": 32, "tp": 4, "ep": 4, "pp": 2}),
    ("dgx-h100", 4, {"gpus": 32, "tp": 8, "ep": 4}),
    ("gb200-nvl72", 2, {"gpus": 144, "tp": 4, "ep": 6, "pp": 2}),
    ("gb200-nvl72", 2, {"gpus": 144, "tp": 2, "ep": 8}),
])  # fmt: skip
@pytest.mark.parametrize("etp", ["1", "tp"])
def test_expert_all_to_all_and_workload_equal_predicts(
    system: str, nodes: int, plan: dict[str, int], etp: str
) -> None:
    """MoE plans on dgx-h100 x4 and gb200-nvl72 x2, ``etp`` 1 and ``tp``: the group the
    screen prices the expert all-to-alls on (recorded as it screens the plan) costs what
    predict's first expert group of stage 0 costs on the whole topology, and the rank's
    workload is predict's (its expert GEMMs split ``etp`` ways: equal parameters)."""
    base = {"system": system, "nodes": nodes, "model": "moe", "model_args": MOE,
            "precision": "bf16", "optimizer": "adam", "software": "megatron-core"}  # fmt: skip
    e = plan["tp"] if etp == "tp" else 1
    p = {**plan, "etp": e, "global_batch": 2 * plan["gpus"] // plan["tp"], "microbatch": 1}
    screen = PlanScreen(base)
    asked = record_groups(screen)
    screen(p)
    low, topo, inp = _lowering(base, p)
    real = expert_groups(low.pl, 0, plan["ep"], e)[0]
    index = {g: i for i, g in enumerate(topo.gpus)}
    want = tuple(index[g] for g in real)
    ((grp, costs),) = {ranks: g for ranks, g in asked if ranks == want}.values()
    for nbytes in (2.0**20, 2.0**26):
        got = costs.collective_time(CollectiveOp.ALLTOALL, nbytes, grp)
        assert got == pytest.approx(
            low.costs.collective_time(CollectiveOp.ALLTOALL, nbytes, real), rel=1e-9
        )
    assert {w.params for w in screen._wl_cache.values()} == {inp.workload.params}
