"""Locations of the shipped data folders (topology catalogue, calibration profiles, validation data).

In an installed wheel the repository's ``topologies/``, ``calibration/`` and ``validation/`` folders
are packaged as ``perfmodel.catalogue.<folder>`` (see ``setup.py``);
in a source checkout they are read from the repository root.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _data_dir(subpackage: str, repo_folder: str) -> Path:
    try:
        files = importlib.resources.files(f"perfmodel.catalogue.{subpackage}")
        path = Path(str(files))
        if path.is_dir():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return _REPO_ROOT / repo_folder


def topologies_dir() -> Path:
    """Folder holding the catalogue's topology files (``*.toml``)."""
    return _data_dir("topologies", "topologies")


def calibration_dir() -> Path:
    """Folder holding recorded calibration profiles (``*.json``)."""
    return _data_dir("calibration", "calibration")


def validation_dir() -> Path:
    """Folder holding the published measurements (``published.jsonl``, ``seeds.jsonl``, ...)."""
    return _data_dir("validation", "validation")
