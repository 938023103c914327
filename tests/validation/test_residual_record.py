"""The shipped residual record is what the validation tier computes now, and the README's
interval coverage table is what the record gives (issue 26).

After a model change: ``python3 -m perfmodel validate --published --update-residuals
--update-readme README.md`` regenerates both (the record from the same predictions as the
accuracy table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.accuracy import table_in_readme
from perfmodel.intervals import coverage as cov
from perfmodel.intervals.record import read_record
from perfmodel.intervals.residuals import generate

REPO = Path(__file__).resolve().parents[2]
REGENERATE = (
    "`python3 -m perfmodel validate --published --update-residuals --update-readme README.md`"
)

pytestmark = pytest.mark.validation


@pytest.fixture(scope="module")
def shipped():
    return read_record()


@pytest.fixture(scope="module")
def fresh(shared_data: Path, training):
    return generate(shared_data, training=training)


def test_record_is_not_stale(shipped, fresh) -> None:
    """Same rows, features, sources and groups; predictions and scores to 1e-9 relative."""
    old = {r.row_id: r for r in shipped}
    new = {r.row_id: r for r in fresh}
    assert sorted(old) == sorted(new), (
        f"residual record rows differ (missing {sorted(set(new) - set(old))[:5]}, extra "
        f"{sorted(set(old) - set(new))[:5]}): run {REGENERATE}"
    )
    stale = []
    for rid, n in new.items():
        o = old[rid]
        same = (
            (o.source, o.quantity, o.group, o.metric, o.orientation, o.features, o.series)
            == (n.source, n.quantity, n.group, n.metric, n.orientation, n.features, n.series)
            and o.measured == pytest.approx(n.measured, rel=1e-12)
            and o.predicted == pytest.approx(n.predicted, rel=1e-9)
            and o.score == pytest.approx(n.score, rel=1e-9, abs=1e-12)
        )
        if not same:
            stale.append(f"{rid}: predicted {o.predicted:.6g} -> {n.predicted:.6g}")
    assert not stale, f"{len(stale)} residual rows are stale ({stale[:3]}): run {REGENERATE}"


@pytest.fixture(scope="module")
def table(shipped):
    return cov.coverage_table(shipped)


def test_readme_coverage_table_is_generated(table) -> None:
    readme = (REPO / "README.md").read_text()
    shown = table_in_readme(readme, begin=cov.MARK_BEGIN, end=cov.MARK_END)
    assert shown == cov.to_markdown(table), (
        f"README interval coverage table is stale: run {REGENERATE}"
    )


def test_print_coverage(table) -> None:
    print("\n" + cov.to_text(table))


def test_overall_coverage_of_the_80_percent_range(table) -> None:
    """Issue 26: leave-one-source-out coverage of every validation row in 72-88 %."""
    lo, hi = cov.OVERALL_TARGET
    assert lo <= table.overall.coverage <= hi, cov.to_text(table)


#: Groups covered more often than 95 %: one or a few publications the model predicts much
#: better than the rest of their pool, which nothing else in the record can tell
#: (docs/intervals.md, "How often it holds"; no design of its table reaches them).
OVER_COVERED = {
    "today's stacks, dense (modern.jsonl)": "torchtitan, NeMo and Megatron-Bridge dense rows "
    "(-8..+15%) rise at most 0.086 above the band of the other stacks' 1B+ transformers; the "
    "calibrated upper margin is 0.22-0.25",
    "B200 rings, InfiniBand": "one publication of ten rows within +6..+17%, inside the band of "
    "the other publications' collectives (-13..+268%) even without a margin",
    "InternEvo on 8-1,024 A100 (scale.jsonl)": "one publication of sixteen rows within "
    "-14..+11% (tp=1 +4.5..+10.9%) once the July-2023 kernels and the owner broadcasts' chain on "
    "NCCL's channels are modelled, inside the band (median x1.71) of the other publications' 1B+ "
    "Ampere transformers",
    "collectives, NVLink": "vTrain's DGX-1V all-reduce within -2..+5% from 16 MiB on, inside the "
    "band of the other publications' collectives (-13..+268%) even without a margin",
    "collectives, NVSwitch": "vTrain's DGX A100 all-reduce (+0.1..+137%): its worst row (2 GPUs, "
    "1 MiB, +137%) falls inside once CoreWeave's GB200 NVL72 20-rack 512 MiB row (+104%) widens "
    "the other publications' band (docs/intervals.md)",
}


def _groups() -> list[object]:
    """The groups held to the target: at least ten validation rows (read at collection, no
    coverage computed)."""
    from collections import Counter

    count = Counter(r.group for r in read_record() if r.quantity in cov.BASE)
    out = []
    for group in sorted(g for g, n in count.items() if n >= cov.GROUP_MIN_ROWS):
        marks = []
        if group in OVER_COVERED:
            marks.append(pytest.mark.xfail(strict=True, reason=OVER_COVERED[group]))
        out.append(pytest.param(group, marks=marks, id=group[:40]))
    return out


@pytest.mark.parametrize("group", _groups())
def test_group_coverage(table, group: str) -> None:
    """Issue 26: every group of at least ten rows in 60-95 %."""
    r = next(x for x in table.rows if x.group == group)
    assert r.meets_target, f"{group}: {100 * r.coverage:.0f}% of {r.rows} rows inside"


def test_gb200_nvl72_rows_are_recorded_in_their_own_groups(shipped) -> None:
    """The six CoreWeave GB200 NVL72 all-reduce rows are collective rows of the record, in
    their own coverage groups: one rack (NVSwitch) and 2 / 20 racks (InfiniBand)."""
    from perfmodel.intervals.features import Quantity

    gb200 = {r.row_id: r for r in shipped if r.row_id.startswith("coreweave-gb200")}
    assert len(gb200) == 6
    assert {r.quantity for r in gb200.values()} == {Quantity.COLLECTIVE}
    groups = {rid: r.group for rid, r in gb200.items()}
    assert {g for rid, g in groups.items() if "1rack" in rid} == {"GB200 NVL72, NVSwitch"}
    assert {g for rid, g in groups.items() if "1rack" not in rid} == {"GB200 NVL72, InfiniBand"}
