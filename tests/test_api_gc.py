"""perfmodel._gc: a prediction runs with fewer young collections and restores the caller's
collector setting (issue 14: the collector took ~15% of a cold ``predict``'s CPU)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from perfmodel import api
from perfmodel._gc import YOUNG_THRESHOLD, fewer_collections


@pytest.fixture
def default_threshold() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's default
    yield
    gc.set_threshold(*old)


@pytest.mark.usefixtures("default_threshold")
def test_raised_inside_restored_after_nesting() -> None:
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        with fewer_collections():
            assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)  # the outer call still runs
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("default_threshold")
def test_a_callers_own_setting_is_kept() -> None:
    for mine in ((100_000, 5, 5), (0, 10, 10)):  # already higher; collection disabled
        gc.set_threshold(*mine)
        with fewer_collections():
            assert gc.get_threshold() == mine
        assert gc.get_threshold() == mine
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        gc.set_threshold(1234, 10, 10)  # changed by someone else meanwhile: theirs stays
    assert gc.get_threshold() == (1234, 10, 10)


@pytest.mark.usefixtures("default_threshold")
def test_predict_runs_with_the_raised_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = api._predict

    def spy(*a, **k):  # api._predict's signature
        seen.append(gc.get_threshold()[0])
        return real(*a, **k)

    monkeypatch.setattr(api, "_predict", spy)
    api._REPORTS.clear()
    sc = api.Scenario(system="dgx1-v100", model="mlp", batch_per_gpu=8, gpus=1, fidelity="analytic")
    api.predict(sc, baseline=False)
    assert seen == [YOUNG_THRESHOLD] and gc.get_threshold() == (700, 10, 10)
