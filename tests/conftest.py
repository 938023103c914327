"""Shared fixtures: where the published validation data live (``validation/`` in the repository)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfmodel.catalogue import validation_dir

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir(env: str | None = None) -> Path:
    """The published measurements the validation tier reads.

    ``$PERFMODEL_SHARED_DATA`` (``env``) when set, to try a new set of rows; otherwise the copy
    shipped in the repository (``validation/``, installed as ``perfmodel.catalogue.validation``),
    so that a fresh clone reproduces the accuracy table. A ``../shared/data`` beside the checkout
    is not read here; ``tests/test_validation_data.py`` checks that it equals the shipped copy.
    """
    env = os.environ.get("PERFMODEL_SHARED_DATA") if env is None else env
    if env:
        return Path(env)
    return validation_dir()


def sibling_shared_data() -> Path | None:
    """``../shared/data`` beside the checkout (the project's working copy of the rows), if any."""
    cand = REPO.parent / "shared" / "data"
    return cand if (cand / "published.jsonl").exists() else None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    d = shared_data_dir()
    if not (d / "published.jsonl").exists():
        pytest.fail(f"published measurements not found in {d} (PERFMODEL_SHARED_DATA?)")
    return d


@pytest.fixture(scope="session")
def published_rows(shared_data: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (shared_data / "published.jsonl").read_text().splitlines()
        if line.strip()
    ]


@pytest.fixture(scope="session")
def seed_rows(shared_data: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (shared_data / "seeds.jsonl").read_text().splitlines()
        if line.strip()
    ]
