"""The published measurements ship with the repository (``validation/``), so a fresh clone runs
the validation tier; a ``../shared/data`` beside the checkout, where present, must equal them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from perfmodel.catalogue import validation_dir

# the root conftest (``import conftest`` would find a sub-folder's under --import-mode=importlib)
_spec = importlib.util.spec_from_file_location(
    "_root_conftest", Path(__file__).with_name("conftest.py")
)
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
REPO, shared_data_dir, sibling_shared_data = (
    _conftest.REPO,
    _conftest.shared_data_dir,
    _conftest.sibling_shared_data,
)

FILES = ("published.jsonl", "seeds.jsonl", "modern.jsonl", "scale.jsonl")


def test_shipped_copy_is_the_default(monkeypatch) -> None:
    # a fresh clone: no PERFMODEL_SHARED_DATA, no ../shared (never read by the default)
    monkeypatch.delenv("PERFMODEL_SHARED_DATA", raising=False)
    d = shared_data_dir()
    assert d == REPO / "validation" == validation_dir()
    assert all((d / f).exists() for f in FILES)


def test_env_var_points_elsewhere(tmp_path) -> None:
    assert shared_data_dir(env=str(tmp_path)) == tmp_path


def test_shipped_rows_are_complete() -> None:
    counts = {}
    for f in FILES:
        rows = [json.loads(x) for x in (validation_dir() / f).read_text().splitlines() if x.strip()]
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), f"duplicate ids in {f}"
        assert all(r.get("source") for r in rows), f"a row of {f} has no source"
        counts[f] = len(rows)
    assert counts == {
        "published.jsonl": 518,
        "seeds.jsonl": 15,
        "modern.jsonl": 56,
        "scale.jsonl": 26,
    }


def test_systems2026_rows_ship_with_their_sources() -> None:
    """``systems2026.jsonl`` (issue 25: the GB300 / GB200 / B300 rows) ships in the package
    data beside the others; every row names its source (repository, commit, path, table row)
    and the measured tokens/s per GPU; it is not in ``../shared/data`` (the lead's copy)."""
    rows = [
        json.loads(x)
        for x in (validation_dir() / "systems2026.jsonl").read_text().splitlines()
        if x.strip()
    ]
    assert len(rows) == 34 and len({r["id"] for r in rows}) == 34
    for r in rows:
        assert (
            "@21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6 docs/performance-summary.md" in r["source"]
        )
        assert r["metric"] == "tokens_per_s_per_gpu" and r["measured"] > 0
        assert {"gpu", "gpus", "gpus_per_node", "interconnect"} <= set(r["system"])
        assert {"tp", "pp", "cp", "ep", "micro_batch", "global_batch"} <= set(r["parallel"])


def test_shipped_copy_equals_shared_when_present() -> None:
    sib = sibling_shared_data()
    if sib is None:
        pytest.skip("no ../shared/data beside the checkout (a fresh clone): nothing to compare")
    for f in FILES:
        assert (validation_dir() / f).read_bytes() == (sib / f).read_bytes(), (
            f"validation/{f} differs from {sib / f}: copy the new rows into validation/"
        )
