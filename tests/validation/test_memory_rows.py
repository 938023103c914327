"""The memory validation rows (``perfmodel.intervals.memory.MEMORY_ROWS``): their stored
predictions are what the memory model predicts now (regenerate them with it), and every row
whose publication states its peak memory is among them."""

from __future__ import annotations

import json

import pytest

from perfmodel.intervals.memory import MEMORY_ROWS, MEMORY_UNDER


@pytest.fixture(scope="module")
def tt_rows(shared_data) -> list[dict]:
    path = shared_data / "modern.jsonl"
    if not path.exists():
        pytest.fail(f"{path} not found: the memory rows' source ships with the data")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["id"].startswith("tt-2412-")]


def test_stored_predictions_are_the_memory_models(tt_rows) -> None:
    from perfmodel.accuracy_modern import dense_results, moe_cp_results

    done = [*dense_results(tt_rows).done, *moe_cp_results(tt_rows).done]
    got = {d.row["id"]: round(d.memory_gib, 2) for d in done}
    stored = {r.row_id: r.predicted_gib for r in MEMORY_ROWS}
    assert got == stored, "regenerate MEMORY_ROWS' predictions (perfmodel/intervals/memory.py)"


def test_margin_is_the_largest_measured_under_prediction() -> None:
    worst = max(MEMORY_ROWS, key=lambda r: r.under)
    assert worst.row_id == "tt-2412-t5-405b-512g-1f1b"
    assert MEMORY_UNDER == pytest.approx(82.5 / 67.00 - 1)
    assert min(r.under for r in MEMORY_ROWS) > -0.012  # never over-predicts by more than 1.2%
