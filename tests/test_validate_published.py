"""``perfmodel validate --published``: the accuracy table from the shipped rows, and the README
block between the accuracy-table markers rewritten from it (the table itself is computed by the
validation tier, ``tests/validation/test_training_validation.py``, which checks the README)."""

from __future__ import annotations

import pytest

import perfmodel.accuracy as acc
from perfmodel.cli import main
from perfmodel.errors import ConfigError

TABLE = acc.AccuracyTable(
    rows=(
        acc.AccuracyRow("training rows", 192, 0.138, 0.683, 0.15),
        acc.AccuracyRow("collectives, PCIe", 12, 0.432, -0.638, 0.25),
        acc.AccuracyRow("scaling efficiency", 56, 3.1, None, 10.0, unit="points"),
        acc.AccuracyRow("ranking", 72, 0.64, None, None, unit="tau", text="tau +0.64"),
    ),
    training_by_interconnect=(("NVLink", 31, 0.087, 0.424),),
)

EXPECTED = """| what | rows | median abs. error | worst | target |
|---|---:|---:|---:|---|
| training rows | 192 | 13.8% | +68.3% | < 15% ✓ |
| collectives, PCIe | 12 | 43.2% | -63.8% | < 25% ✗ |
| scaling efficiency | 56 | 3.1 points |  | < 10 points ✓ |
| ranking | 72 | tau +0.64 | | |

By interconnect, training rows: NVLink 8.7% (n=31, worst +42%)."""


@pytest.fixture
def fake_table(monkeypatch):
    seen = []

    def fake(rows, training=None):
        seen.append(len(rows))
        return TABLE

    monkeypatch.setattr(acc, "accuracy_table", fake)
    return seen


def test_markdown(fake_table, capsys) -> None:
    assert main(["validate", "--published", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == EXPECTED
    assert fake_table == [518]  # the shipped published.jsonl


def test_update_readme_between_markers(fake_table, tmp_path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{acc.MARK_BEGIN}\nold table\n{acc.MARK_END}\nafter\n")
    assert main(["validate", "--published", "--update-readme", str(readme)]) == 0
    text = readme.read_text()
    assert text == f"# title\n\nbefore\n{acc.MARK_BEGIN}\n{EXPECTED}\n{acc.MARK_END}\nafter\n"
    assert acc.table_in_readme(text) == EXPECTED
    out = capsys.readouterr().out
    assert f"accuracy table written to {readme}" in out
    assert "< 25% MISSED" in out  # the terminal form


def test_readme_without_markers_is_a_config_error(fake_table, tmp_path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    assert main(["validate", "--published", "--update-readme", str(readme)]) == 2
    assert "accuracy-table markers" in capsys.readouterr().err


def test_published_dir_and_missing_file(tmp_path) -> None:
    (tmp_path / "published.jsonl").write_text('{"id": "a", "kind": "x"}\n\n')
    assert acc.load_published(tmp_path) == [{"id": "a", "kind": "x"}]
    with pytest.raises(ConfigError, match="not found"):
        acc.load_published(tmp_path / "nothing")


def test_readme_has_the_markers() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "| training throughput / iteration time, all judged rows |" in acc.table_in_readme(text)
