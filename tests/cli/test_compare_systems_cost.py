"""``compare --systems --search --objective cost``: the table's cost per sample is the search's
own cost score (one formula), so the rows rank as the search ranked the plans."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from perfmodel.cli.compare_systems import cost_per_sample
from perfmodel.search.compare import Objective, objective_score
from perfmodel.search.cost import Pricing


@pytest.mark.parametrize(
    ("report", "gpus", "global_batch", "price"),
    [
        ({"iteration_time_s": 0.7}, 72, 1536, 2.5),
        ({"iteration_time_s": 7.490169645919807}, 1024, 256, 7.24),
        ({"iteration_time_s": 1.25, "samples_per_step": 96}, 8, 64, 3.0),
    ],
)
def test_table_cost_is_the_search_cost_score(
    report: dict[str, float], gpus: int, global_batch: int, price: float
) -> None:
    best = SimpleNamespace(report=report, gpus=gpus, global_batch=global_batch)
    score = objective_score(
        report, Objective.COST, gpus=gpus, global_batch=global_batch, pricing=Pricing(price)
    )
    assert cost_per_sample(best, price) == score  # bit-equal: the same formula, not a copy
    samples = report.get("samples_per_step", global_batch)
    assert score == pytest.approx(price * gpus * report["iteration_time_s"] / 3600.0 / samples)
