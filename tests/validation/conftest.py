"""The training rows' predictions, computed once per session (the training tier and the README
accuracy-table check share them)."""

from __future__ import annotations

import pytest

from perfmodel.accuracy import TrainingResults, training_results


@pytest.fixture(scope="session")
def training(published_rows: list[dict]) -> TrainingResults:
    return training_results(published_rows)
