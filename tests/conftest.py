"""Shared fixtures: where the published validation data live."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    """``../shared/data`` beside the checkout (or ``$PERFMODEL_SHARED_DATA``), if present."""
    env = os.environ.get("PERFMODEL_SHARED_DATA")
    for cand in ([Path(env)] if env else []) + [
        REPO.parent / "shared" / "data",
        REPO / "shared" / "data",
    ]:
        if (cand / "published.jsonl").exists():
            return cand
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    d = shared_data_dir()
    if d is None:
        pytest.skip("published measurements (../shared/data) not found; set PERFMODEL_SHARED_DATA")
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
