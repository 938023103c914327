"""The search's automatic-micro-batch plans and its screen-estimate line
(:mod:`perfmodel.search.predict_parity`), with stand-in reports."""

from __future__ import annotations

from types import SimpleNamespace

from perfmodel.search.predict_parity import (
    analytic_line,
    auto_line,
    drop_auto,
    screen_line,
    with_auto,
)


def _plan(dp: int, mb: int, zero: int = 0, k: int = 1) -> dict[str, int]:
    return {"dp": dp, "microbatch": mb, "zero": zero, "learners_per_gpu": k}


def test_one_auto_plan_per_group_and_run() -> None:
    plans = [_plan(2, 1), _plan(2, 4), _plan(2, 4, zero=1), _plan(4, 8, k=2)]
    meta = [(p, 8, 64) for p in plans] + [(_plan(2, 1), 16, 64)]
    scenarios = [{**p, "gpus": g} for p, g, _ in meta]
    sc, out_meta, explicit = with_auto(scenarios, meta)
    assert sc[: len(scenarios)] == scenarios and explicit[: len(scenarios)] == [None] * 5
    # dp2 zero0 and dp2 zero1 on 8 GPUs, dp2 on 16; none for Crossbow learners (k=2)
    assert [(m[0]["zero"], m[1]) for m in out_meta[5:]] == [(0, 8), (1, 8), (0, 16)]
    assert explicit[5:] == [frozenset({1, 4}), frozenset({4}), frozenset({1})]
    assert all("microbatch" not in s for s in sc[5:]) and sc[7]["gpus"] == 16


def test_auto_plans_dropped_when_refused_or_already_searched() -> None:
    sc = [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}]
    meta = [({}, 8, 64)] * 4
    results = [({"microbatch": 1}, None), ({"microbatch": 16}, None), ({"microbatch": 4}, None)]
    results.append((None, "ConfigError: refused"))
    explicit = [None, frozenset({1, 4}), frozenset({1, 4}), frozenset({1})]
    kept, _, res = drop_auto(sc, meta, results, explicit)
    assert kept == [{"a": 1}, {"a": 2}] and res[1][0] == {"microbatch": 16}


def _cand(plan: dict, stage: str, **reports: dict) -> SimpleNamespace:
    return SimpleNamespace(
        plan=plan,
        stage=stage,
        report=reports[stage],
        reports=reports,
        label=" ".join(f"{k}{v}" for k, v in plan.items()),
    )


def test_lines_name_the_auto_sizes_and_the_screened_rows() -> None:
    auto = _cand(
        {"dp": 4},
        "analytic",
        screen={"iteration_time_s": 1.0, "microbatch": 16},
        analytic={"iteration_time_s": 1.01, "plan": {"microbatch_size": 16}},
    )
    fixed = _cand({"dp": 4, "mb": 8}, "screen", screen={"iteration_time_s": 2.0})
    assert auto_line([auto, fixed]).endswith("chooses it: dp4 -> mb16")
    assert auto_line([fixed]) == ""
    line = screen_line([auto, fixed, fixed, fixed], 3)
    assert line.startswith("rows #2, #3 (screened only) are the closed-form screen's estimates")
    assert (
        "on the 1 plan both evaluated its step time was within 0.99% of the analytic stage's"
        in line
    )
    assert screen_line([auto], 5) == ""


def test_analytic_rows_named_when_the_simulation_ran() -> None:
    sim = _cand(
        {"dp": 2},
        "simulated",
        analytic={"iteration_time_s": 1.0},
        simulated={"iteration_time_s": 1.0},
    )
    ana = _cand({"dp": 4}, "analytic", analytic={"iteration_time_s": 2.0})
    line = analytic_line([sim, ana, ana, ana], 4)
    assert line.startswith(
        "rows #2-#4 (not simulated) are `perfmodel predict --plan LABEL "
        "--fidelity analytic`'s numbers"
    )
    assert line.endswith(
        "on the 1 plan both evaluated its step time was the same as the simulated stage's"
    )
    assert analytic_line([ana, ana], 2) == ""  # no simulated stage: predict's is not named


def test_auto_line_names_a_screen_only_size_as_predicts() -> None:
    """A row only the screen evaluated chose its size on predict's memory
    (``perfmodel.search.screen_memory``; ``test_screen_memory_confirm.py``): the line names it
    as it names a size predict chose, unmarked (before session 17: "(the screen's estimate)")."""
    confirmed = _cand({"dp": 4}, "analytic", analytic={"plan": {"microbatch_size": 16}})
    screened = _cand({"dp": 2}, "screen", screen={"iteration_time_s": 1.0, "microbatch": 6})
    line = auto_line([confirmed, screened])
    assert line.endswith("dp4 -> mb16, dp2 -> mb6")
