"""Issue 15's bad-input trials (``tests/cli/trials.py``), run in this process: every one exits
with its expected status (2 for bad input), prints no traceback and changes no guarded file."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfmodel.cli import main

from .trials import Trial, make_trials


def _cleanup(d: Path) -> None:
    if (d / "ro").exists():
        os.chmod(d / "ro", 0o755)
    shutil.rmtree(d, ignore_errors=True)


def _names() -> list[str]:
    d = Path(tempfile.mkdtemp(prefix="trial-names-"))
    try:
        return [t.name for t in make_trials(d)]
    finally:
        _cleanup(d)


def _digest(p: Path) -> str | None:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Trial]]:
    d = tmp_path_factory.mktemp("trials")
    yield {t.name: t for t in make_trials(d)}
    _cleanup(d)


@pytest.mark.parametrize("name", _names())
def test_trial(name: str, trials: dict[str, Trial], capsys: pytest.CaptureFixture[str]) -> None:
    trial = trials[name]
    before = {p: _digest(p) for p in trial.guarded}
    try:
        rc = main(trial.argv)
    except SystemExit as exc:  # argparse usage errors (unknown flag or choice)
        rc = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert rc == trial.expect, f"{trial.argv}: exit {rc}, stderr: {err[-300:]}"
    assert {p: _digest(p) for p in trial.guarded} == before
    if trial.expect == 2:
        assert err.strip(), "bad input must say why on stderr"
