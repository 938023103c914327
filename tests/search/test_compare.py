"""Plan search and hardware what-if with an injected toy evaluator (see search_fakes)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from search_fakes import fake_predict, fake_system_predict

from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.search.compare import Objective, objective_score, search_plans
from perfmodel.search.compare_table import format_table
from perfmodel.search.cost import Pricing, parse_prices
from perfmodel.search.plans import ModelFamily, ModelShape, SearchSpace
from perfmodel.search.ranking import best_in_top_k, group_ranking, kendall_tau
from perfmodel.search.system_option import SystemOption, parse_systems
from perfmodel.search.tta import StatisticalEfficiency
from perfmodel.search.whatif import format_whatif, hardware_whatif

SHAPE = ModelShape(num_blocks=32, num_heads=32, family=ModelFamily.TRANSFORMER)
BASE = {"system": "toy", "model": "toy"}


def fast(sc):
    return fake_predict({**sc, "fidelity": "analytic"})


def slow(sc):
    return fake_predict({**sc, "fidelity": "simulated"})


def toy_search(gpus: int, global_batch: int, **kw):
    """``search_plans`` of the toy model for one GPU count and one global batch; by default
    without a screen stage and with the toy analytic evaluator ``fast``."""
    opts = {"shape": SHAPE, "screen": False, "fast_evaluator": fast, **kw}
    return search_plans(BASE, gpus=[gpus], global_batches=[global_batch], **opts)


def brute_force_best(gpus: int, batch: int, space: SearchSpace) -> float:
    from perfmodel.search.plans import enumerate_plans

    best = math.inf
    for p in enumerate_plans(gpus, batch, SHAPE, space).plans:
        r = slow({**BASE, **p, "gpus": gpus, "global_batch": batch})
        if r["fits_in_memory"]:
            best = min(best, r["iteration_time_s"])
    return best


def test_search_finds_the_simulated_best_and_counts_pruning() -> None:
    space = SearchSpace()
    res = toy_search(32, 256, space=space, confirm_k=10_000, budget_s=None, confirm_evaluator=slow)
    assert res.enumerated == len(res.ranked) + sum(res.pruned.values())
    assert res.pruned.get("does not fit in memory", 0) > 0
    # confirming every plan: the ranking's head is the true optimum of the simulated fidelity
    assert res.best.stage == "simulated"
    assert res.best.report["iteration_time_s"] == pytest.approx(brute_force_best(32, 256, space))
    # ranked by the objective, best first
    scores = [c.score for c in res.ranked]
    assert scores == sorted(scores)
    # the two fidelities differ (contention term) but agree largely on the order
    assert 0.5 < res.kendall_tau < 1.0
    table = format_table(res, top=5)
    assert "does not fit in memory" in table and "Kendall tau" in table
    assert table.splitlines()[2].split()[1] == res.best.label.split()[0]


def test_confirm_top_k_only_and_tau_is_one_for_identical_fidelities() -> None:
    res = toy_search(16, 128, confirm_k=6, confirm_evaluator=fast)
    assert [s.name for s in res.stages] == ["analytic", "simulated"]
    assert res.stages[-1].evaluated == 6
    assert res.kendall_tau == pytest.approx(1.0) and res.top1_agrees
    assert all(c.stage == "simulated" for c in res.ranked[:6])
    assert all(c.stage == "analytic" for c in res.ranked[6:])


def test_three_stages_screen_analytic_simulated() -> None:
    def crude(sc):  # a screen that ignores communication entirely
        r = fast(sc)
        return {**r, "iteration_time_s": r["compute_time_s"] + r["bubble_time_s"]}

    res = toy_search(
        32, 256, screen=crude, analytic_k=20, confirm_k=5, budget_s=None, confirm_evaluator=slow
    )
    assert [s.name for s in res.stages] == ["screen", "analytic", "simulated"]
    assert [s.evaluated for s in res.stages][1:] == [20, 5]
    assert [c.stage for c in res.ranked[:6]] == ["simulated"] * 5 + ["analytic"]
    top = res.ranked[0]
    assert set(top.reports) == {"screen", "analytic", "simulated"}
    assert top.scores["analytic"] == pytest.approx(
        top.reports["analytic"]["iteration_time_s"] / 256
    )
    # the analytic stage re-ranks the screen's head: its order follows the analytic score
    analytic = [c for c in res.ranked if c.stage == "analytic"]
    assert [c.score for c in analytic] == sorted(c.score for c in analytic)
    assert -1.0 <= res.stages[1].kendall_tau <= 1.0
    table = format_table(res, top=6)
    assert "rank agreement screen vs analytic over the top 20" in table
    assert "rank agreement analytic vs simulated over the top 5" in table


def test_budget_stops_starting_new_plans() -> None:
    import time

    def sleepy(sc):
        time.sleep(0.05)
        return slow(sc)

    res = toy_search(16, 128, confirm_k=50, budget_s=0.12, confirm_evaluator=sleepy)
    # plans start at about 0, 0.05, 0.10 and 0.15 s: the fourth would start after the budget
    assert 2 <= res.stages[-1].evaluated <= 4
    assert "budget of the later stages is spent" in res.stages[-1].stopped
    res0 = toy_search(16, 128, confirm_k=50, budget_s=0.0, confirm_evaluator=sleepy)
    assert res0.stages[-1].evaluated == 0 and math.isnan(res0.kendall_tau)
    assert res0.ranked[0].stage == "analytic"


def test_predictor_errors_are_pruned_with_reason() -> None:
    def picky(sc):
        if sc["pp"] == 4:
            raise InfeasiblePlanError("pp=4 cannot be placed on this toy", value=4, where="pp")
        return fast(sc)

    res = toy_search(8, 64, confirm_k=0, fast_evaluator=picky)
    reasons = [k for k in res.pruned if k.startswith("InfeasiblePlanError")]
    assert reasons and "pp=4 cannot be placed" in reasons[0]
    assert all(c.plan["pp"] != 4 for c in res.ranked)
    assert math.isnan(res.kendall_tau)


def test_no_feasible_plan_raises_with_reasons() -> None:
    def oom(sc):
        return {**fast(sc), "fits_in_memory": False}

    res = toy_search(8, 64, confirm_k=2, fast_evaluator=oom)
    with pytest.raises(ConfigError, match="no plan is feasible: does not fit in memory"):
        _ = res.best


def test_objectives_tta_and_cost_change_the_winner() -> None:
    # throughput alone prefers the biggest batch; TTA with a small noise scale prefers a smaller one
    kw = dict(
        gpus=[8],
        shape=SHAPE,
        screen=False,
        confirm_k=0,
        fast_evaluator=fast,
        space=SearchSpace(recompute=("none",)),
    )
    thr = search_plans(BASE, global_batches=[16, 64, 256], **kw)
    tta = search_plans(
        BASE,
        global_batches=[16, 64, 256],
        objective="tta",
        stat=StatisticalEfficiency(1e4, 8.0),
        **kw,
    )
    assert thr.best.global_batch == 256
    assert tta.best.global_batch < 256
    for c in tta.ranked[:5]:
        assert c.score == pytest.approx(
            StatisticalEfficiency(1e4, 8.0).time_to_accuracy_s(
                c.global_batch, c.report["iteration_time_s"]
            )
        )
    # cost per sample: fewer GPUs at slightly lower efficiency is cheaper than more GPUs
    cost = search_plans(
        BASE,
        gpus=[8, 32],
        global_batches=[256],
        objective=Objective.COST,
        pricing=Pricing(2.0),
        **{k: v for k, v in kw.items() if k != "gpus"},
    )
    c = cost.best
    assert c.score == pytest.approx(2.0 / 3600 * c.gpus * c.report["iteration_time_s"] / 256)
    with pytest.raises(ConfigError, match="needs a statistical-efficiency model"):
        objective_score({"iteration_time_s": 1.0}, Objective.TTA, gpus=1, global_batch=1)
    with pytest.raises(ConfigError, match="needs a price"):
        objective_score({"iteration_time_s": 1.0}, Objective.COST, gpus=1, global_batch=1)
    with pytest.raises(ConfigError, match="unknown --objective 'speed'"):
        Objective.parse("speed")


def test_search_plot_written(tmp_path: Path) -> None:
    from perfmodel.search.plots import plot_search

    res = toy_search(16, 128, confirm_k=0)
    out = tmp_path / "p.png"
    plot_search(res, out, title="toy")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pricing_and_amortisation() -> None:
    assert Pricing(3.0).cost(4, 1800.0) == pytest.approx(6.0)
    p = Pricing.amortised(purchase_price=8766.0, lifetime_years=1.0, utilization=0.5)
    assert p.price_per_gpu_hour == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="--lifetime-years"):
        Pricing.amortised(100.0, 0.0)
    with pytest.raises(ConfigError, match="price per GPU-hour"):
        Pricing(-1.0)
    assert parse_prices("2,3", ["a", "b"], where="--price-per-gpu-hour") == {"a": 2.0, "b": 3.0}
    with pytest.raises(ConfigError, match="2 values for 3 systems"):
        parse_prices("2,3", ["a", "b", "c"], where="--price-per-gpu-hour")


def test_whatif_speedup_cost_and_deadline(tmp_path: Path) -> None:
    systems = parse_systems("fast,slow,cheap,slow:network=slow-net")
    prices = {
        "fast": Pricing(4.0),
        "slow": Pricing(1.0),
        "cheap": Pricing(0.5),
        "slow:network=slow-net": Pricing(1.0),
    }
    base = {"model": "toy", "batch_per_gpu": 32}
    res = hardware_whatif(
        base,
        systems,
        [1, 2, 4, 8],
        pricing=prices,
        epochs=10,
        dataset_size=1_000_000,
        deadline_s=3600.0,
        evaluator=fake_system_predict,
        gpus_per_node=lambda o: 4,
    )
    pts = {(p.system, p.gpus): p for p in res.points}
    assert pts[("fast", 1)].speedup == pytest.approx(1.0)
    # toy: speedup(g) = g / (1 + overhead (g - 1)); fast overhead 0.02
    assert pts[("fast", 8)].speedup == pytest.approx(8 / 1.14)
    assert pts[("fast", 8)].nodes == 2 and pts[("fast", 4)].nodes == 1
    p = pts[("slow", 4)]
    assert p.epoch_time_s == pytest.approx(1_000_000 / p.throughput_samples_per_s)
    assert p.cost_per_run == pytest.approx(10 * 4 * p.epoch_time_s / 3600 * 1.0)
    # the slower network lowers the speedup of the same system
    assert pts[("slow:network=slow-net", 8)].speedup < pts[("slow", 8)].speedup
    ok = [q for q in res.points if q.run_time_s <= 3600.0]
    assert res.cheapest == min(ok, key=lambda q: (q.cost_per_run, q.run_time_s))
    assert "cheapest within 1.0 h" in res.verdict
    text = format_whatif(res)
    assert "speedup" in text and res.verdict in text
    from perfmodel.search.plots import plot_whatif

    plot_whatif(res, tmp_path / "w.png")
    assert (tmp_path / "w.png").stat().st_size > 1000


def test_whatif_no_option_meets_deadline_and_failures() -> None:
    res = hardware_whatif(
        {"batch_per_gpu": 32},
        parse_systems("slow,nonesuch"),
        [1, 2],
        pricing={"slow": Pricing(1.0)},
        epochs=100,
        dataset_size=10**8,
        deadline_s=60.0,
        evaluator=fake_system_predict,
        gpus_per_node=lambda o: 8,
    )
    assert (
        res.cheapest is None
        and "no option meets" in res.verdict
        and "fastest is slow x2" in res.verdict
    )
    assert "nonesuch x1" in res.failures


def test_system_option_parsing() -> None:
    o = SystemOption.parse("dgx1-v100:network=ib-edr:nics-per-node=2")
    assert o.system == "dgx1-v100" and o.overrides == {"network": "ib-edr", "nics_per_node": 2}
    with pytest.raises(ConfigError, match="not key=value"):
        SystemOption.parse("dgx1-v100:ib-edr")
    with pytest.raises(ConfigError, match="listed twice"):
        parse_systems("a,a")


def test_ranking_metrics() -> None:
    assert kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(2 / 3)
    assert best_in_top_k([5, 4, 3, 2, 1], [1, 2, 3, 4, 5], k=3) is False
    rows = [
        {"group": "a", "predicted": p, "measured": m} for p, m in [(1, 10), (2, 20), (3, 30)]
    ] + [
        {"group": "b", "predicted": p, "measured": m}
        for p, m in [(1, 30), (2, 20), (3, 10), (4, 40)]
    ]
    s = group_ranking(rows, k=1)
    assert len(s.groups) == 2
    # a: tau 1 (3 pairs); b: tau 0 (6 pairs: 3 concordant... computed by scipy)
    tb = kendall_tau([1, 2, 3, 4], [30, 20, 10, 40])
    assert s.weighted_tau == pytest.approx((1.0 * 3 + tb * 6) / 9)
    assert s.top_k_fraction == pytest.approx(0.5)
    assert s.median_regret == pytest.approx((0.0 + 2.0) / 2)


def test_hard_budget_abandons_a_plan_that_runs_too_long() -> None:
    import time

    from search_fakes import picky_predict, sleepy_predict

    t0 = time.perf_counter()
    res = toy_search(
        16,
        128,
        screen=fake_predict,
        analytic_k=0,
        confirm_k=2,
        budget_s=1.0,
        confirm_evaluator=sleepy_predict,
        hard_budget=True,
        fast_evaluator=None,
    )
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.9  # the 3 s simulation was abandoned at the 1 s budget
    assert [s.name for s in res.stages] == ["screen", "simulated"]
    assert res.stages[1].evaluated == 0
    assert "still running when the 1 s budget ran out" in res.stages[1].stopped
    # the plans it meant to simulate are named as ranked by the screen only (issue 27)
    left = res.stages[1].stopped.split("ranked by the screen stage only: ")[1]
    assert left.split(", ") == [c.label for c in res.ranked[:2]]
    # results computed in the worker equal those computed in process; worker errors are notes
    res2 = toy_search(
        16,
        128,
        screen=fake_predict,
        analytic_k=60,
        confirm_k=0,
        budget_s=60.0,
        fast_evaluator=picky_predict,
        hard_budget=True,
    )
    assert any("pp=4 cannot be placed" in n for n in res2.notes)
    done = [c for c in res2.ranked if c.stage == "analytic"]
    assert done and all(c.plan["pp"] != 4 for c in done)
    for c in done[:5]:
        assert c.reports["analytic"] == pytest.approx(dict(fake_predict(c.scenario)))


def test_a_predictor_bug_in_a_later_stage_is_a_note_not_a_crash() -> None:
    def buggy(sc):
        raise NameError("name 'p2p_cache' is not defined")

    res = toy_search(8, 64, confirm_k=2, confirm_evaluator=buggy)
    assert res.stages[-1].evaluated == 0
    # the stage goes down the ranking for plans that run, at most 3 x confirm_k tries
    assert sum("FAILED" in n and "NameError" in n for n in res.notes) == 6
    assert res.ranked and res.ranked[0].stage == "analytic"


def test_whatif_gpus_per_node_of_custom_and_catalogue_systems() -> None:
    pytest.importorskip("perfmodel.api")
    from perfmodel.search.whatif import SystemOption, catalogue_gpus_per_node

    custom = SystemOption.parse("custom:gpus_per_node=4:gpu=v100:intra_node=nvlink2")
    assert catalogue_gpus_per_node(custom) == 4  # was UnknownHardwareError: 'custom'
    dgx = SystemOption.parse("dgx1-v100:network=ib-edr:nics_per_node=4:software=horovod")
    assert catalogue_gpus_per_node(dgx) == 8


def test_screen_reads_schedule_and_recompute_as_predict_does() -> None:
    pytest.importorskip("perfmodel.api")
    from perfmodel.search.screen import PlanScreen

    args = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 512}
    screen = PlanScreen({"system": "dgx-a100", "model": "gpt", "model_args": args})
    plan = {"gpus": 8, "tp": 2, "pp": 2, "global_batch": 16, "microbatch": 1}
    plain = screen({**plan, "schedule": "gpipe", "recompute": "full"})
    spelled = screen({**plan, "schedule": "GPipe", "recompute": "Full"})
    assert spelled["iteration_time_s"] == plain["iteration_time_s"]
    assert spelled["memory_per_gpu_bytes"] == plain["memory_per_gpu_bytes"]
    alias = screen({**plan, "schedule": "pipedream-flush"})
    assert alias == screen({**plan, "schedule": "1f1b"})
    with pytest.raises(ConfigError, match="schedule"):
        screen({**plan, "schedule": "zigzag"})


def test_no_winner_when_every_plan_past_the_screen_is_rejected() -> None:
    """Review mend 1: later stages that reject every plan they try (an NCCL environment the
    screen does not price) leave the screen's estimates, which name no winner."""

    def reject(sc):
        raise ConfigError("NCCL_ALGO=Tree leaves NCCL no algorithm for allgather", value=sc)

    res = toy_search(
        32, 256, screen=fast, analytic_k=3, confirm_k=2, budget_s=None, fast_evaluator=reject
    )
    assert res.ranked and all(c.stage == "screen" for c in res.ranked)
    assert res.unconfirmed is not None and "no plan survived past the screen" in res.unconfirmed
    assert "9 rejected by the analytic stage" in res.unconfirmed  # 3 k tries
    table = format_table(res, top=5, interval=0.8)
    assert "NO WINNER" in table and "wins" not in table and "~" not in table
    assert res.to_dict(top=2)["unconfirmed"] == res.unconfirmed
    # one plan surviving the analytic stage is a ranking again
    ok = toy_search(32, 256, screen=fast, analytic_k=3, confirm_k=0, budget_s=None)
    assert ok.unconfirmed is None and ok.to_dict(top=1)["unconfirmed"] is None


def test_screen_prices_on_the_stated_nccl_release_and_environment() -> None:
    """Review mend 1: the screen's systems carry every hardware field predict() reads, the NCCL
    release and environment included."""
    from perfmodel.api import Scenario, topology_of
    from perfmodel.search.screen import PlanScreen

    base = {
        "system": "dgx-h100",
        "model": "gpt2",
        "nccl": "2.26",
        "nccl_env": ("NCCL_ALGO=Tree",),
    }
    topo = PlanScreen(base)._topology(2)
    sc = Scenario.from_dict({k: base[k] for k in ("system", "nccl", "nccl_env")} | {"nodes": 2})
    assert topo is topology_of(sc)  # the one topology predict() builds
    assert topo.meta["nccl_env"].variables == (("NCCL_ALGO", "Tree"),)


def test_a_stage_past_the_previous_survivors_compares_only_what_both_scored() -> None:
    """Review mend 1: the simulated stage, going past the one plan the analytic stage kept,
    reaches screen-only plans; its rank agreement is over plans both stages scored (was a
    KeyError on ``scores["analytic"]``)."""
    kept: list[str] = []

    def picky(sc):
        key = repr(sorted(sc.items()))
        if not kept:
            kept.append(key)
        if key != kept[0]:
            raise ConfigError("rejected", value=sc)
        return fast(sc)

    res = toy_search(
        32, 256, screen=fast, analytic_k=3, confirm_k=3, budget_s=None,
        fast_evaluator=picky, confirm_evaluator=slow,
    )  # fmt: skip
    assert [s.evaluated for s in res.stages] == [res.stages[0].evaluated, 1, 3]
    assert res.unconfirmed is None and res.best.stage == "simulated"


def test_no_memory_hints_when_no_plan_ran_out_of_memory() -> None:
    """Plans all rejected (an NCCL environment, say) and some folded as "same time and
    memory" are not out of memory: no "no plan fits in GPU memory" hints (the fold's reason
    matched "memory")."""
    from perfmodel.search.compare import oom_hints

    pruned = {
        "rejected by the analytic stage": 10,
        "equivalent to a simpler plan (same time and memory)": 5,
    }
    assert oom_hints(SHAPE, SearchSpace(), pruned, BASE, [16]) == ()
    assert oom_hints(SHAPE, SearchSpace(), {"does not fit in memory": 1}, BASE, [16])
