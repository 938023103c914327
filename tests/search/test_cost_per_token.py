"""Hardware ranked by cost (or energy) per million tokens, with why (issue 25, item 6)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from perfmodel.cli import main
from perfmodel.hardware import get_gpu
from perfmodel.search.cost import Pricing
from perfmodel.search.system_option import parse_systems
from perfmodel.search.whatif import (
    hardware_whatif,
    listed_prices,
    per_million_tokens_lines,
    per_token_figures,
)

#: Tokens/s per GPU of each fake system (a flat scaling: the figures are per GPU).
RATE = {"fast": 4000.0, "slow": 1000.0}


def _fake(sc: Mapping[str, Any]) -> dict[str, Any]:
    g = int(sc["gpus"])
    t = 2.0
    tok = RATE[sc["system"]] * g
    return {
        "iteration_time_s": t,
        "throughput_samples_per_s": tok / 1000.0,
        "tokens_per_s": tok,
        "num_gpus": g,
        "breakdown": {"compute_s": 1.5, "optimizer_s": 0.0},
        "fits_in_memory": True,
    }


def _whatif(prices: dict[str, Pricing], **kw: Any) -> Any:
    """The what-if of the two fake systems at 8 GPUs (``kw``: more keyword arguments)."""
    return hardware_whatif(
        {"model": "toy"},
        parse_systems("fast,slow"),
        [8],
        pricing=prices,
        evaluator=_fake,
        gpus_per_node=lambda o: 8,
        gpu_spec=lambda o: get_gpu("H100-SXM5-80GB"),
        **kw,
    )


def test_cost_per_million_tokens_by_hand() -> None:
    res = _whatif({"fast": Pricing(6.0), "slow": Pricing(1.0)})
    pts = {p.system: p for p in res.points}
    # price x GPUs x 1e6 / (tokens/s x 3600)
    assert pts["fast"].cost_per_million_tokens == pytest.approx(6.0 * 8 * 1e6 / (32000 * 3600))
    assert pts["slow"].cost_per_million_tokens == pytest.approx(1.0 * 8 * 1e6 / (8000 * 3600))
    # energy: 8 x (88 + 612 x 0.75) W x 2 s per 64,000 tokens
    e = 8 * (88 + 612 * 0.75) * 2.0 / (32000 * 2.0) * 1e6 / 3.6e6
    assert pts["fast"].kwh_per_million_tokens == pytest.approx(e)
    text = "\n".join(res.per_million_tokens)
    # slow is cheaper: 1/4 the speed at 1/6 the price
    assert "cheapest per million tokens: slow" in text
    assert "0.25x the tokens/s per GPU" in text and "0.17x the price per GPU-hour" in text
    assert res.to_dict()["per_million_tokens"] == list(res.per_million_tokens)


def test_ranking_follows_the_prices() -> None:
    res = _whatif({"fast": Pricing(3.0), "slow": Pricing(1.0)})
    assert "cheapest per million tokens: fast" in "\n".join(res.per_million_tokens)


def test_without_prices_energy_ranks_and_says_so() -> None:
    res = _whatif({})
    text = "\n".join(res.per_million_tokens)
    assert "no price given: ranked by energy" in text
    assert "give --price-per-gpu-hour" in text


def test_unpriced_systems_are_named() -> None:
    res = _whatif({"slow": Pricing(1.0)})
    text = "\n".join(res.per_million_tokens)
    assert "no price for fast" in text


def test_models_without_tokens_have_no_ranking() -> None:
    assert per_token_figures({"iteration_time_s": 1.0}, None, Pricing(1.0)) == (None, None, None)
    assert per_million_tokens_lines([]) == []


def test_cloud_systems_bring_their_list_price() -> None:
    prices = listed_prices(parse_systems("aws-p5.48xlarge,dgx-h100"))
    assert set(prices) == {"aws-p5.48xlarge"}
    assert prices["aws-p5.48xlarge"].price_per_gpu_hour == pytest.approx(12.29)
    assert "dated" in prices["aws-p5.48xlarge"].source


def test_cli_whatif_ranks_by_cost_per_million_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--systems", "aws-p5.48xlarge,dgx-b200", "--model", "llama3_8b"]
    argv += ["--global-batch", "64", "--gpus", "8", "--precision", "bf16", "--optimizer", "adam"]
    argv += ["--software", "fsdp", "--fidelity", "analytic", "--json"]
    assert main([*argv, "--price-per-gpu-hour=4,5"]) == 0
    d = json.loads(capsys.readouterr().out)
    lines = d["per_million_tokens"]
    assert lines[0].startswith("per million tokens")
    assert any(line.startswith("cheapest per million tokens:") for line in lines)
    pts = {p["system"]: p for p in d["points"]}
    p = pts["dgx-b200"]
    assert p["cost_per_million_tokens"] == pytest.approx(5.0 * 8 * 1e6 / (p["tokens_per_s"] * 3600))
    # no flag: the cloud system's list price, and the other is named as unpriced
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    pts = {p["system"]: p for p in d["points"]}
    assert pts["aws-p5.48xlarge"]["price_per_gpu_hour"] == pytest.approx(12.29)
    assert pts["dgx-b200"]["cost_per_million_tokens"] is None
    assert any("no price for dgx-b200" in x for x in d["per_million_tokens"])


def test_cli_negative_price_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--systems", "dgx-h100,dgx-b200", "--model", "gpt2", "--batch-per-gpu"]
    argv += ["4", "--gpus", "8", "--fidelity", "analytic", "--price-per-gpu-hour=-1,2"]
    assert main(argv) == 2
    assert "price" in capsys.readouterr().err


def _ranged(r_lo: float, r_hi: float, prices: dict[str, Pricing]) -> Any:
    """The what-if of :func:`_whatif` with every step's residual interval ``r_lo`` .. ``r_hi``
    (tests/search/test_whatif_intervals.py's duck-typed interval)."""
    from tests.search.test_whatif_intervals import _Residual

    return _whatif(
        prices, interval=0.8, interval_of=lambda sc, rep, level: _Residual(r_lo, r_hi, level)
    )


def test_energy_per_million_tokens_has_predicts_range() -> None:
    """fix19: the what-if's kWh per million tokens had no range where predict --tokens gives the
    run's energy one (the power model at the step range's ends, report/goodput.energy_range).
    By hand, fast x8: 8,752 J a 2 s step of 64,000 tokens (8 x (88 + 612 x 0.75) W x 2 s); at
    r = -0.2 .. 0.3 the step takes 2 e^-0.2 = 1.637 s .. 2 e^0.3 = 2.700 s, and the ends are the
    miss in busy seconds: 8,752 J -+ 8 x 700 W x the missed seconds."""
    import math

    res = _ranged(-0.2, 0.3, {})
    fast = next(p for p in res.points if p.system == "fast")
    e = 8 * (88 + 612 * 0.75) * 2.0
    lo_j = e - 8 * 700 * (2.0 - 2.0 * math.exp(-0.2))
    hi_j = e + 8 * 700 * (2.0 * math.exp(0.3) - 2.0)
    per = 1e6 / 64000 / 3.6e6
    assert fast.range_of("kwh_per_million_tokens") == pytest.approx((lo_j * per, hi_j * per))
    d = fast.to_dict()
    assert d["kwh_per_million_tokens_low"] == pytest.approx(lo_j * per)
    assert d["kwh_per_million_tokens_high"] == pytest.approx(hi_j * per)
    assert "energy" not in d
    json.dumps(res.to_dict())
    no_iv = next(p for p in _whatif({}).points if p.system == "fast")
    assert no_iv.range_of("kwh_per_million_tokens") is None
    assert "kwh_per_million_tokens_low" not in no_iv.to_dict()


def test_ranked_by_energy_the_ranges_judge_the_order() -> None:
    """Unpriced, the what-if ranks by energy: the energies' ranges now say whether they separate
    the first two, in the cost ranking's words (intervals/wording), and mark a tie with ``~``
    in the kWh column. fast x8 uses a quarter of slow's energy per token; at r = +-0.25 the
    ranges do not overlap, at r = +-1.5 they do (slow's short end idles down to 314 J)."""
    narrow = "\n".join(_ranged(-0.25, 0.25, {}).per_million_tokens)
    assert "least energy per million tokens: fast" in narrow
    assert "beyond the model's error: the two 80% ranges do not overlap" in narrow
    assert "~" not in narrow
    wide = _ranged(-1.5, 1.5, {}).per_million_tokens
    text = "\n".join(wide)
    assert "within the model's error: the two 80% ranges overlap" in text
    slow = next(line for line in wide if line.lstrip().startswith("slow"))
    assert slow.rstrip().endswith("~")
    assert "  ~: its 80% energy range overlaps the least energy's (a statistical tie)" in wide
    # priced, the cost ranks and its range judges, as before
    priced = "\n".join(
        _ranged(-0.25, 0.25, {"fast": Pricing(6.0), "slow": Pricing(1.0)}).per_million_tokens
    )
    assert "cheapest per million tokens: slow" in priced and "energy range" not in priced


def test_each_point_builds_its_step_energy_once(monkeypatch) -> None:
    """fix19 built each point's step energy twice (:func:`per_token_figures` and the caller
    again); it now builds it once and the point's kWh is read off the energy it keeps."""
    import perfmodel.report.goodput as goodput

    calls = []
    real = goodput.step_energy

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(k.get("num_gpus"))
        return real(*a, **k)

    monkeypatch.setattr(goodput, "step_energy", counted)
    res = _whatif({"fast": Pricing(6.0)})
    assert len(calls) == len(res.points) == 2
    for p in res.points:
        assert p.energy is not None
        assert p.kwh_per_million_tokens == p.energy.kwh_per_million_tokens


def test_whatif_point_kwh_is_its_energys_and_keeps_its_json_place() -> None:
    """``WhatIfPoint.kwh_per_million_tokens`` is read from its :class:`StepEnergy` (one place
    for the expression ``whatif`` and ``compare --systems`` repeated); ``to_dict`` writes it
    after ``cost_per_million_tokens``, as the field it was. 8 GPUs x 400 W x 2 s = 6,400 J a
    step of 16,000 tokens: 4e8 J per million tokens, 111.1 kWh."""
    from perfmodel.report.goodput import PowerModel, StepEnergy
    from perfmodel.search.whatif import WhatIfPoint

    energy = StepEnergy(8, 2.0, 0.5, 400.0, PowerModel("H100", 700.0, 100.0), 16_000.0)
    kw = dict(
        system="s", gpus=8, nodes=1, iteration_time_s=2.0, throughput_samples_per_s=32.0,
        speedup=None, scaling_efficiency=None, fits_in_memory=True, epoch_time_s=None,
        run_time_s=None, price_per_gpu_hour=None, cost_per_epoch=None, cost_per_run=None,
        meets_deadline=None, tokens_per_s=8000.0, cost_per_million_tokens=1.5,
    )  # fmt: skip
    point = WhatIfPoint(**kw, energy=energy)  # type: ignore[arg-type]
    assert point.kwh_per_million_tokens == pytest.approx(6400.0 / 16_000 * 1e6 / 3.6e6)
    d = point.to_dict()
    keys = list(d)
    assert keys[keys.index("cost_per_million_tokens") + 1] == "kwh_per_million_tokens"
    assert keys[keys.index("kwh_per_million_tokens") + 1] == "price_source"
    assert d["kwh_per_million_tokens"] == point.kwh_per_million_tokens
    assert WhatIfPoint(**kw).to_dict()["kwh_per_million_tokens"] is None  # type: ignore[arg-type]
