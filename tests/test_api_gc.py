"""perfmodel._gc: a prediction runs with fewer young collections and restores the caller's
collector setting (issue 14: the collector took ~15% of a cold ``predict``'s CPU)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from perfmodel import api
from perfmodel._gc import CLI_YOUNG_THRESHOLD, YOUNG_THRESHOLD, fewer_collections


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


@pytest.mark.usefixtures("default_threshold")
def test_the_executable_runs_with_the_cli_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """``perfmodel`` (cli.program, the process ends after the command) raises the young
    threshold to CLI_YOUNG_THRESHOLD; an in-process ``cli.main`` to YOUNG_THRESHOLD; the
    prediction inside keeps the outer setting; both restore the caller's."""
    from perfmodel import cli

    seen = []
    real = api._predict

    def spy(*a, **k):
        seen.append(gc.get_threshold()[0])
        return real(*a, **k)

    monkeypatch.setattr(api, "_predict", spy)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # program() freezes what is left
    argv = ["perfmodel", "--quiet", "predict", "--system", "dgx1-v100", "--model", "mlp"]
    argv += ["--batch-per-gpu", "8", "--gpus", "2", "--fidelity", "analytic"]
    monkeypatch.setattr("sys.argv", argv)
    api._REPORTS.clear()
    assert cli.program() == 0
    api._REPORTS.clear()
    assert cli.main(argv[1:]) == 0
    assert seen[0] == CLI_YOUNG_THRESHOLD and seen[-1] == YOUNG_THRESHOLD
    assert set(seen) == {CLI_YOUNG_THRESHOLD, YOUNG_THRESHOLD}
    assert gc.get_threshold() == (700, 10, 10)
