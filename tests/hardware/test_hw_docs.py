"""docs/hardware.md lists every catalogue entry with its current numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel import units
from perfmodel.hardware import list_cpus, list_gpus, list_links

DOC = Path(__file__).resolve().parents[2] / "docs" / "hardware.md"


@pytest.fixture(scope="module")
def doc_text() -> str:
    if not DOC.exists():
        pytest.skip("docs/hardware.md not present (installed package)")
    return DOC.read_text()


def test_every_entry_is_documented(doc_text: str) -> None:
    for spec in (*list_gpus(), *list_links(), *list_cpus()):
        assert f"`{spec.name}`" in doc_text, spec.name


def test_documented_gpu_rows_match_catalogue(doc_text: str) -> None:
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in doc_text.splitlines()
        if line.startswith("| `")
    }
    for gpu in list_gpus():
        cells = [c.strip() for c in rows[gpu.name].split("|")[1:-1]]
        assert cells[3] == str(gpu.sm_count), gpu.name
        assert cells[4] == f"{gpu.memory_bytes / units.GiB:.0f}", gpu.name
        assert cells[5] == f"{gpu.memory_bandwidth_Bps / units.GB:.0f}", gpu.name
