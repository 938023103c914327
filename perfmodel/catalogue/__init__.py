"""Locations of the shipped data folders (topology catalogue, calibration profiles, validation data).

In an installed wheel the repository's ``topologies/``, ``calibration/`` and ``validation/`` folders
are packaged as ``perfmodel.catalogue.<folder>`` (see ``setup.py``);
in a source checkout they are read from the repository root.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path
from typing import Any

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _data_dir(subpackage: str, repo_folder: str) -> Path:
    """The data folder beside the imported package in a source checkout, else the installed
    ``perfmodel.catalogue.<subpackage>``.

    The checkout's folder comes first: an editable install of another checkout (a second
    worktree on ``PYTHONPATH`` while the venv's editable install points at the first) maps
    ``perfmodel.catalogue.<subpackage>`` to *its* folder, so asking importlib first read the
    other checkout's catalogue with this checkout's code. An installed wheel has no such
    folder beside the package (``site-packages/../topologies``) and reads its packaged copy."""
    here = _REPO_ROOT / repo_folder
    if (_REPO_ROOT / "perfmodel" / "catalogue").is_dir() and here.is_dir():
        return here
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


def validation_rows(directory: str | os.PathLike[str] | None, name: str) -> list[dict[str, Any]]:
    """Rows of the validation file ``name`` (JSONL) in ``directory`` (default:
    :func:`validation_dir`); a file path (the ``published.jsonl`` given to ``--published``)
    stands for its folder, so its sibling ``name`` is read. No such file: no rows (a table leaves
    the file's rows out)."""
    from perfmodel._io import read_jsonl

    path = Path(directory) if directory is not None else validation_dir()
    path = path / name if path.is_dir() else path.parent / name
    return read_jsonl(path, where="--published") if path.exists() else []
