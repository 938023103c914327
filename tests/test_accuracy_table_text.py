"""The accuracy table's two renderings (``perfmodel validate --published`` and its
``--markdown`` / README form), golden strings written by hand for every kind of row: a percent
row meeting its target, one missing it, one without target or worst, a points row and a rank
(``tau``) row."""

from __future__ import annotations

from perfmodel.accuracy import AccuracyRow, AccuracyTable, to_markdown, to_text

TABLE = AccuracyTable(
    rows=(
        AccuracyRow("steps", 12, 0.042, -0.09, 0.15, signed=0.013),
        AccuracyRow("kernels", 3, 0.25, 0.5, 0.2, signed=-0.2),
        AccuracyRow("speedup", 7, 0.99, None, None),
        AccuracyRow("efficiency", 5, 1.25, 9.0, 5.0, unit="points", signed=-1.3),
        AccuracyRow("ranking", 72, 0.0, None, None, unit="tau", text="tau +0.36"),
    ),
    training_by_interconnect=(("NVLink", 31, 0.089, 0.40), ("PCIe", 27, 0.143, -0.7)),
)


def test_markdown_cells_of_every_kind_of_row() -> None:
    assert to_markdown(TABLE).splitlines() == [
        "| what | rows | median abs. error | signed median (+ = too fast) | worst | target |",
        "|---|---:|---:|---:|---:|---|",
        "| steps | 12 | 4.2% | +1.3% | -9.0% | < 15% ✓ |",
        "| kernels | 3 | 25.0% | -20.0% | +50.0% | < 20% ✗ |",
        "| speedup | 7 | 99.0% |  |  |  |",
        "| efficiency | 5 | 1.2 points | -1.3 points |  | < 5 points ✓ |",
        "| ranking | 72 | tau +0.36 | | | |",
        "",
        "By interconnect, training rows: NVLink 8.9% (n=31, worst +40%), "
        "PCIe 14.3% (n=27, worst -70%).",
    ]


def test_text_columns_of_every_kind_of_row() -> None:
    assert to_text(TABLE).splitlines() == [
        "what         rows              median        signed     worst  target",
        "steps          12                4.2%         +1.3%     -9.0%  < 15% ok",
        "kernels         3               25.0%        -20.0%    +50.0%  < 20% MISSED",
        "speedup         7               99.0%                          ",
        "efficiency      5          1.2 points   -1.3 points            < 5 points ok",
        "ranking        72  tau +0.36",
        "training rows by interconnect: NVLink 8.9% (n=31, worst +40%), "
        "PCIe 14.3% (n=27, worst -70%)",
    ]
