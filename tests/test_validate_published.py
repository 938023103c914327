"""``perfmodel validate --published``: the accuracy table from the shipped rows, and the README
block between the accuracy-table markers rewritten from it (the table itself is computed by the
validation tier, ``tests/validation/test_training_validation.py``, which checks the README)."""

from __future__ import annotations

import pytest

import perfmodel.accuracy as acc
from perfmodel.cli import main
from perfmodel.errors import ConfigError
from perfmodel.intervals import coverage as cov

TABLE = acc.AccuracyTable(
    rows=(
        acc.AccuracyRow("training rows", 192, 0.138, 0.683, 0.15, signed=-0.052),
        acc.AccuracyRow("collectives, PCIe", 12, 0.432, -0.638, 0.25, signed=0.432),
        acc.AccuracyRow("scaling efficiency", 56, 3.1, None, 10.0, unit="points", signed=1.4),
        acc.AccuracyRow("ranking", 72, 0.64, None, None, unit="tau", text="tau +0.64"),
    ),
    training_by_interconnect=(("NVLink", 31, 0.087, 0.424),),
)

EXPECTED = """| what | rows | median abs. error | signed median (+ = too fast) | worst | target |
|---|---:|---:|---:|---:|---|
| training rows | 192 | 13.8% | -5.2% | +68.3% | < 15% ✓ |
| collectives, PCIe | 12 | 43.2% | +43.2% | -63.8% | < 25% ✗ |
| scaling efficiency | 56 | 3.1 points | +1.4 points |  | < 10 points ✓ |
| ranking | 72 | tau +0.64 | | | |

By interconnect, training rows: NVLink 8.7% (n=31, worst +42%)."""

COVERAGE = cov.CoverageTable(
    0.8,
    (cov.CoverageRow("training rows", 192, 8, 0.83, 2.26, (0.6, 0.95)),),
    cov.CoverageRow("every validation row", 340, 18, 0.851, 2.27, (0.72, 0.88)),
)

EXPECTED_COVERAGE = """| group | rows | sources | inside the 80% range (held out by source) | median range (high / low) | target |
|---|---:|---:|---:|---:|---|
| training rows | 192 | 8 | 83% | x2.26 | 60%-95% ✓ |
| **every validation row** | 340 | 18 | 85% | x2.27 | 72%-88% ✓ |"""


@pytest.fixture
def fake_table(monkeypatch):
    seen = []

    def fake(rows, training=None, modern=(), scale=(), systems2026=()):
        seen.append((len(rows), len(modern), len(scale), len(systems2026)))
        return TABLE

    monkeypatch.setattr(acc, "accuracy_table", fake)
    monkeypatch.setattr(cov, "coverage_table", lambda record: COVERAGE)
    return seen


def test_markdown(fake_table, capsys) -> None:
    assert main(["validate", "--published", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == EXPECTED + "\n\n" + EXPECTED_COVERAGE
    # the shipped published, modern, scale and 2026-systems rows
    assert fake_table == [(518, 56, 26, 34)]


def test_signed_median_is_signed_by_speed() -> None:
    """A time 25 % too long is a run predicted 25 % too slow: -25 %, the magnitude of the
    median absolute error column; a rate 25 % too high is +25 %."""
    assert acc.speed_signed(0.25, -1) == -0.25 and acc.speed_signed(0.25, 1) == 0.25
    assert acc._signed_median([0.25, 0.10, -0.30], [-1, 1, -1]) == pytest.approx(0.10)


def test_update_readme_between_markers(fake_table, tmp_path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# title\n\nbefore\n{acc.MARK_BEGIN}\nold table\n{acc.MARK_END}\nmiddle\n"
        f"{cov.MARK_BEGIN}\nold coverage\n{cov.MARK_END}\nafter\n"
    )
    assert main(["validate", "--published", "--update-readme", str(readme)]) == 0
    text = readme.read_text()
    assert text == (
        f"# title\n\nbefore\n{acc.MARK_BEGIN}\n{EXPECTED}\n{acc.MARK_END}\nmiddle\n"
        f"{cov.MARK_BEGIN}\n{EXPECTED_COVERAGE}\n{cov.MARK_END}\nafter\n"
    )
    assert acc.table_in_readme(text) == EXPECTED
    assert acc.table_in_readme(text, begin=cov.MARK_BEGIN, end=cov.MARK_END) == EXPECTED_COVERAGE
    out = capsys.readouterr().out
    assert f"accuracy and interval coverage tables written to {readme}" in out
    assert "< 25% MISSED" in out  # the terminal form


def test_readme_without_coverage_markers_keeps_its_text(fake_table, tmp_path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"{acc.MARK_BEGIN}\nold table\n{acc.MARK_END}\nafter\n")
    assert main(["validate", "--published", "--update-readme", str(readme)]) == 0
    assert readme.read_text() == f"{acc.MARK_BEGIN}\n{EXPECTED}\n{acc.MARK_END}\nafter\n"
    assert f"accuracy table written to {readme}" in capsys.readouterr().out


def test_update_residuals_writes_the_record(fake_table, tmp_path, monkeypatch, capsys) -> None:
    """The record is generated from the table's own training predictions and written where
    asked; the coverage printed is the new record's."""
    from perfmodel.intervals import record as rec
    from perfmodel.intervals import residuals
    from perfmodel.intervals.features import KernelFeatures, Quantity

    row = rec.ResidualRow(
        "r1", "published.jsonl", "S", Quantity.KERNEL, "g", "time", -1, 1.0, 1.1,
        KernelFeatures("V100-SXM2-16GB", "Volta", "gemm", "fp16"), score=(0.0, 0.0),
    )  # fmt: skip
    seen = {}

    def fake_generate(directory=None, *, training=None):
        seen["training"] = training
        return (row,)

    monkeypatch.setattr(acc, "training_results", lambda rows: "TRAINING")
    monkeypatch.setattr(residuals, "generate", fake_generate)
    out = tmp_path / "residuals.jsonl"
    assert main(["validate", "--published", "--update-residuals", str(out)]) == 0
    assert rec.parse_record(out.read_text()) == (row,)
    assert seen["training"] == "TRAINING"
    assert f"residual record written to {out} (1 rows)" in capsys.readouterr().out


def test_update_residuals_needs_published_alone(tmp_path, capsys) -> None:
    args = ["validate", "--profile", "p.json", "-o", str(tmp_path), "--update-residuals"]
    assert main(args) == 2
    assert "--update-residuals go with --published alone" in capsys.readouterr().err


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


def test_modern_rows_beside_published(tmp_path) -> None:
    assert acc.load_modern(tmp_path) == []  # no modern.jsonl: the table leaves its rows out
    (tmp_path / "published.jsonl").write_text('{"id": "a", "kind": "x"}\n')
    (tmp_path / "modern.jsonl").write_text('{"id": "m"}\n')
    assert acc.load_modern(tmp_path) == [{"id": "m"}]
    assert acc.load_modern(tmp_path / "published.jsonl") == [{"id": "m"}]  # its sibling
    assert len(acc.load_modern()) == 56  # the shipped copy


def test_scale_rows_beside_published(tmp_path) -> None:
    assert acc.load_scale(tmp_path) == []  # no scale.jsonl: the table leaves its rows out
    (tmp_path / "published.jsonl").write_text('{"id": "a", "kind": "x"}\n')
    (tmp_path / "scale.jsonl").write_text('{"id": "s"}\n')
    assert acc.load_scale(tmp_path) == [{"id": "s"}]
    assert acc.load_scale(tmp_path / "published.jsonl") == [{"id": "s"}]  # its sibling
    assert len(acc.load_scale()) == 26  # the shipped copy


def test_scale_rows_in_the_table(monkeypatch) -> None:
    """Median |error| and worst signed error of the InternEvo and the B200 ring rows
    (hand-computed); targets 15 % and 10 % (issue 24)."""
    import perfmodel.accuracy_scale as sc

    def pred(m, p):
        return sc.ScalePrediction({"id": "x"}, p, m)

    # training: +10 %, -20 %, +30 % -> median 20 %, worst +30 %; rings: +5 % -> 5 %, +5 %
    fake = sc.ScaleResults((pred(100, 110), pred(100, 80), pred(10, 13)), (pred(200, 210),))
    monkeypatch.setattr(sc, "scale_results", lambda rows: fake)
    assert acc._scale_rows([]) == []  # no scale rows: no table rows
    train, ring = acc._scale_rows([{"id": "x"}])
    assert (train.rows, train.median, train.worst, train.target) == (
        3,
        pytest.approx(0.2),
        pytest.approx(0.3),
        0.15,
    )
    assert train.what.startswith("at scale: InternEvo")
    assert (ring.rows, ring.median, ring.worst, ring.target) == (
        1,
        pytest.approx(0.05),
        pytest.approx(0.05),
        0.10,
    )


def test_modern_rows_in_the_table(monkeypatch) -> None:
    """Median |error| and worst signed error of each group (hand-computed), target 15 %."""
    import perfmodel.accuracy_modern as am

    def res(*pairs):  # (measured, predicted) tokens/s/GPU
        return am.ModernResults(
            tuple(am.ModernPrediction({"measured": m}, p, 1.0, True) for m, p in pairs)
        )

    # dense: +50 %, -10 %, +20 % -> median 20 %, worst +50 %; MoE/CP: -30 % -> 30 %, -30 %
    monkeypatch.setattr(am, "dense_results", lambda rows: res((100, 150), (100, 90), (50, 60)))
    monkeypatch.setattr(am, "moe_cp_results", lambda rows: res((200, 140)))
    assert acc._modern_rows([]) == []  # no modern rows: no table rows
    dense, moe = acc._modern_rows([{"id": "x"}])
    assert (dense.rows, dense.median, dense.worst, dense.target) == (
        3,
        pytest.approx(0.2),
        0.5,
        0.15,
    )
    assert dense.what.startswith("today's stacks, dense (modern.jsonl")
    assert (moe.rows, moe.median, moe.worst, moe.target) == (
        1,
        pytest.approx(0.3),
        pytest.approx(-0.3),
        0.15,
    )
    assert "8-1,024 GPUs" in moe.what


def test_readme_has_the_markers() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = acc.table_in_readme(text)
    assert "| training throughput / iteration time, all judged rows |" in block
    assert "| today's stacks, dense (modern.jsonl" in block
    assert "| mixture-of-experts and context-parallel rows (modern.jsonl" in block


def test_systems2026_rows_beside_published(tmp_path) -> None:
    assert acc.load_systems2026(tmp_path) == []  # no systems2026.jsonl: no table row
    (tmp_path / "published.jsonl").write_text('{"id": "a", "kind": "x"}\n')
    (tmp_path / "systems2026.jsonl").write_text('{"id": "g"}\n')
    assert acc.load_systems2026(tmp_path) == [{"id": "g"}]
    assert acc.load_systems2026(tmp_path / "published.jsonl") == [{"id": "g"}]  # its sibling
    assert len(acc.load_systems2026()) == 34  # the shipped copy


def test_systems2026_row_in_the_table(monkeypatch) -> None:
    """Median |error| and worst signed error of the 2026-systems rows (hand-computed), 15 %."""
    import perfmodel.accuracy_2026 as a26
    import perfmodel.accuracy_modern as am

    def res(*pairs):  # (measured, predicted) tokens/s/GPU
        return am.ModernResults(
            tuple(am.ModernPrediction({"measured": m}, p, 1.0, True) for m, p in pairs)
        )

    # -20 %, +5 %, +40 % -> median 20 %, worst +40 %
    monkeypatch.setattr(a26, "results", lambda rows: res((100, 80), (200, 210), (10, 14)))
    assert acc._systems2026_rows([]) == []
    (row,) = acc._systems2026_rows([{"id": "x"}])
    assert (row.rows, row.median, row.worst, row.target) == (
        3,
        pytest.approx(0.2),
        pytest.approx(0.4),
        0.15,
    )
    assert row.what.startswith("2026 systems")
