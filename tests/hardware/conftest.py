"""Helpers for the hardware tests: write a small catalogue file and parse it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write_toml(tmp_path: Path):
    """Return ``write(text, name="cat.toml") -> Path`` writing a TOML file under ``tmp_path``."""

    def write(text: str, name: str = "cat.toml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
