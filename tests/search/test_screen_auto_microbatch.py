"""The screen runs a plan without a micro-batch at the micro-batch ``predict`` runs it with.

Before wave 14 the screen took :func:`perfmodel.pipeline.resolve.plan_for`'s default (one sample
with pipelining) where ``predict`` auto-sizes (the largest micro-batch that fits,
:func:`perfmodel.pipeline.autosize.auto_microbatch`): gpt2 on 2 DGX A100, megatron-core, global
batch 64, ``dp4 tp2 pp2``: the screen said 145 ms at micro-batch 1, predict 68 ms at 8. The
search itself always names a micro-batch (every enumerated plan has one), so ``compare``'s rows
were and are unaffected; a plan handed to the screen without one now gets predict's rule
(:func:`perfmodel.pipeline.autobatch.choose_microbatch`, the one function both call).
"""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.search.screen import PlanScreen

BASE = {
    "system": "dgx-a100",
    "nodes": 2,
    "gpus": 16,
    "model": "gpt2",
    "precision": "bf16",
    "optimizer": "adam",
    "software": "megatron-core",
    "global_batch": 64,
}

PLANS = [
    {"dp": 4, "tp": 2, "pp": 2},
    {"dp": 2, "tp": 2, "pp": 4, "schedule": "interleaved", "interleave": 3},
    {"dp": 8, "tp": 2, "pp": 1},  # the whole replica batch fits: kept, as predict keeps it
]


@pytest.fixture(scope="module")
def screen() -> PlanScreen:
    return PlanScreen(BASE)


def _predicted_microbatch(base: dict, plan: dict) -> int:
    rep = predict(Scenario.from_dict({**base, **plan, "fidelity": "analytic"}), baseline=False)
    return int(rep.plan["microbatch_size"])


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: "dp{dp} tp{tp} pp{pp}".format(**p))
def test_screen_runs_predicts_microbatch(screen: PlanScreen, plan: dict) -> None:
    """Without a micro-batch the screen's estimate is its estimate at predict's micro-batch
    (every report key equal), and it names the micro-batch where it chose one."""
    mb = _predicted_microbatch(BASE, plan)
    auto = screen(plan)
    given = screen({**plan, "microbatch": mb})
    chosen = auto.pop("microbatch", None)
    note = auto.pop("microbatch_default", None)
    assert auto == given
    if plan["pp"] > 1:
        assert chosen == mb and mb > 1
        assert note is not None and f"{mb}" in note
    else:
        assert chosen is None and note is None


def test_named_microbatch_unchanged(screen: PlanScreen) -> None:
    """A plan naming its micro-batch (every plan the search enumerates) is estimated as given,
    without the auto-size keys."""
    rep = screen({"dp": 4, "tp": 2, "pp": 2, "microbatch": 1})
    assert "microbatch" not in rep and "microbatch_default" not in rep
    assert rep["iteration_time_s"] > screen({"dp": 4, "tp": 2, "pp": 2})["iteration_time_s"]


def test_whole_batch_too_large_is_split() -> None:
    """Without pipelining, a replica batch that does not fit is split as predict splits it."""
    base = {**BASE, "nodes": 1, "gpus": 8, "global_batch": 8 * 256}
    plan = {"dp": 8, "tp": 1, "pp": 1}
    mb = _predicted_microbatch(base, plan)
    assert mb < 256
    rep = PlanScreen(base)(plan)
    assert rep["microbatch"] == mb
    assert rep["fits_in_memory"]
