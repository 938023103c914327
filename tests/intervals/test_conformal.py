"""The interval method on hand-made residual records whose quantiles are known
(:mod:`perfmodel.intervals.conformal`), and its invariants."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from perfmodel.errors import ConfigError
from perfmodel.intervals import conformal as cf
from perfmodel.intervals.coverage import leave_one_source_out
from perfmodel.intervals.features import Interconnect, KernelFeatures, Quantity, StepFeatures
from perfmodel.intervals.record import ResidualRow

GEMM = KernelFeatures("V100-SXM2-16GB", "Volta", "DeepBench GEMM", "fp16")
CONV = KernelFeatures("V100-SXM2-16GB", "Volta", "DeepBench conv", "fp16")


def row(rid: str, source: str, r: float, *, feats=GEMM, score=None, orientation=1) -> ResidualRow:
    """A kernel row whose speed residual is ``r`` (predicted ``e^r`` against measured 1; a time
    row stores the inverse)."""
    pred = math.exp(r * orientation)
    return ResidualRow(
        rid, "f", source, Quantity.KERNEL, "g", "x", orientation, pred, 1.0, feats, score=score
    )


def test_speed_residual_is_signed_by_speed() -> None:
    rate = ResidualRow("a", "f", "s", Quantity.KERNEL, "g", "rate", 1, 1.2, 1.0, GEMM)
    time = ResidualRow("b", "f", "s", Quantity.KERNEL, "g", "time", -1, 1.2, 1.0, GEMM)
    assert rate.speed_residual == pytest.approx(math.log(1.2))  # predicted too fast
    assert time.speed_residual == pytest.approx(-math.log(1.2))  # a longer time: too slow
    assert time.signed_error == pytest.approx(0.2)


def test_weighted_quantile_golden() -> None:
    v = [0.3, 0.1, 0.2, 0.4]
    assert cf.weighted_quantile(v, [1] * 4, 0.25) == 0.1  # ceil(0.25 * 4) = 1st
    assert cf.weighted_quantile(v, [1] * 4, 0.26) == 0.2
    assert cf.weighted_quantile(v, [1] * 4, 1.0) == 0.4
    assert cf.weighted_quantile(v, [1, 1, 1, 5], 0.5) == 0.4  # 0.4 carries 5/8 of the weight
    assert cf.weighted_quantile(v, [1] * 4, 0.0) == -math.inf
    assert cf.weighted_quantile(v, [1] * 4, 1.0001) == math.inf


def test_every_publication_weighs_alike() -> None:
    rows = [row("a", "A", 0.0), row("b", "A", 0.1), row("c", "A", 0.2), row("d", "B", 0.5)]
    assert cf.source_weights(rows) == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    med, lo, hi = cf.pool_stats(rows)
    # cumulative weights 1/6, 2/6, 3/6, 1: the median is A's third row, the 90 % is B's
    assert (med, lo, hi) == pytest.approx((0.2, 0.0, 0.5))


def _twenty() -> list[ResidualRow]:
    """20 publications of one row each, residual i/100 and scores (i/1000, i/1000)."""
    return [row(str(i), f"S{i}", i / 100, score=(i / 1000, i / 1000)) for i in range(20)]


def test_interval_golden_on_a_hand_made_record() -> None:
    """Band: the 2nd and 18th of 20 equally weighted residuals (0.01, 0.17); margins: the
    ceil(0.945 * 20) = 19th smallest score (0.018) at level 0.8 with K = 20 publications."""
    index = cf.RecordIndex(_twenty())
    iv = cf.interval(GEMM, Quantity.KERNEL, index, 0.8)
    assert (iv.pool.band_lo, iv.pool.band_hi) == pytest.approx((0.01, 0.17))
    assert (iv.r_lo, iv.r_hi) == pytest.approx((0.01 - 0.018, 0.17 + 0.018))
    assert iv.sources == 20 and iv.bounded
    low, high = iv.speed(100.0)  # a rate predicted 100: the truth is below when r > 0
    assert (low, high) == pytest.approx((100 * math.exp(-0.188), 100 * math.exp(0.008)))
    t_lo, t_hi = iv.time(2.0)
    assert (t_lo, t_hi) == pytest.approx((2 * math.exp(-0.008), 2 * math.exp(0.188)))
    assert iv.basis == "20 published kernel measurements (20 sources) like this one (Volta, " \
        "DeepBench GEMM, fp16)"  # fmt: skip
    assert iv.warning == ""


def test_a_level_the_publications_cannot_bound_takes_the_largest_scores() -> None:
    """(1 - 0.05)(1 + 1/20) > 1: a 90 % range needs 19 publications of scores below it, the
    record has 20 but its rank 20 * 0.9975 rounds past the last: the largest scores stand in."""
    index = cf.RecordIndex(_twenty())
    iv = cf.interval(GEMM, Quantity.KERNEL, index, 0.95)
    assert not iv.bounded
    assert (iv.r_lo, iv.r_hi) == pytest.approx((0.01 - 0.019, 0.17 + 0.019))


def test_scores_hold_their_own_publication_out(monkeypatch) -> None:
    """Three publications with one row each (0, 0.1, 0.3): each row's band is the other two's
    (weights 1/2 each: 10 % and 90 % quantiles are the smaller and the larger)."""
    monkeypatch.setattr(cf, "MIN_EFFECTIVE_ROWS", 2.0)
    rows = [row("a", "A", 0.0), row("b", "B", 0.1), row("c", "C", 0.3)]
    scored = cf.with_scores(rows)
    assert [r.score for r in scored] == [
        pytest.approx((0.1 - 0.0, 0.0 - 0.3)),
        pytest.approx((0.0 - 0.1, 0.1 - 0.3)),
        pytest.approx((0.0 - 0.3, 0.3 - 0.1)),
    ]


def test_pool_backs_off_to_fewer_features(monkeypatch) -> None:
    """Two publications of GEMM rows make a pool; a convolution question with one publication
    of its own kind falls back to the architecture's rows... no such level for kernels: to the
    kernel's rows, then to every kernel row, and says "few"."""
    monkeypatch.setattr(cf, "MIN_EFFECTIVE_ROWS", 2.0)
    rows = [row("a", "A", 0.0), row("b", "B", 0.1), row("c", "C", 0.3, feats=CONV)]
    index = cf.RecordIndex(cf.with_scores(rows))
    gemm = index.pool(GEMM, Quantity.KERNEL)
    assert gemm.matched == ("architecture", "kernel", "precision") and gemm.sources == 2
    conv = index.pool(CONV, Quantity.KERNEL)
    assert conv.matched == () and conv.sources == 3  # every kernel row
    iv = cf.interval(CONV, Quantity.KERNEL, index)
    assert iv.warning == "few validation runs like this one"
    assert iv.basis.startswith("3 published kernel measurements of every kind")


def _step_row(rid: str, source: str, r: float, arch: str, params: float) -> ResidualRow:
    f = StepFeatures(
        f"{arch}-GPU", arch, Interconnect.NVSWITCH, "megatron", "megatron", "bf16",
        "transformer", params, ("dp",), 8,
    )  # fmt: skip
    return ResidualRow(rid, "f", source, Quantity.STEP, "g", "x", 1, math.exp(r), 1.0, f)


def test_a_large_model_pools_with_large_models_before_its_gpus_small_ones(monkeypatch) -> None:
    """A 7B transformer on Ampere, where the other publications ran only BERT-sized models on
    Ampere: its pool is the 1B+ transformers of two publications on Hopper (residuals 0.0 and
    0.1), not Ampere's small ones (-0.5 and -0.4) (before the size class it was the latter)."""
    monkeypatch.setattr(cf, "MIN_EFFECTIVE_ROWS", 2.0)
    rows = [
        _step_row("a", "A", -0.5, "Ampere", 110e6),
        _step_row("b", "B", -0.4, "Ampere", 340e6),
        _step_row("c", "C", 0.0, "Hopper", 8e9),
        _step_row("d", "D", 0.1, "Hopper", 70e9),
    ]
    index = cf.RecordIndex(rows)
    big = replace(rows[0].features, params=7e9)
    pool = index.pool(big, Quantity.STEP)
    assert pool.matched == ("model_kind", "size_class") and pool.sources == 2
    assert (pool.band_lo, pool.band_hi) == pytest.approx((0.0, 0.1))
    assert cf.describe_basis(pool, Quantity.STEP) == (
        "2 published runs (2 sources) like this one (dense transformers, 1B+ parameters)"
    )
    # a small model on Ampere keeps the architecture's small ones
    small = index.pool(replace(big, params=125e6), Quantity.STEP)
    assert {"architecture", "size_class"} <= set(small.matched)
    assert (small.band_lo, small.band_hi) == pytest.approx((-0.5, -0.4))


def test_a_gpu_without_rows_is_outside_the_validated_range() -> None:
    index = cf.RecordIndex(_twenty())
    mi300 = KernelFeatures("MI300X", "CDNA3", "DeepBench GEMM", "fp16")
    iv = cf.interval(mi300, Quantity.KERNEL, index)
    assert iv.outside
    assert iv.warning == "outside the validated range: no published run on MI300X (CDNA3)"


def test_no_row_at_all_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no row"):
        cf.RecordIndex([]).pool(GEMM, Quantity.KERNEL)


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5, float("nan")])
def test_level_must_be_a_fraction(level: float) -> None:
    with pytest.raises(ConfigError, match="between 0 and 1"):
        cf.interval(GEMM, Quantity.KERNEL, cf.RecordIndex(_twenty()), level)


@settings(max_examples=40, deadline=None)
@example(
    [0, 0.5, -0.5, 0, 0.5, -0.5, 0, 1, 0, -1, 0.5, 0.5, 1, 0, 0, 0, -0.5, 0, -1, 0.5],
    0.0,
    0.3,
    0.05,
)
@given(
    st.lists(st.floats(-1, 1, allow_nan=False), min_size=20, max_size=30),
    st.floats(-0.5, 0.5, allow_nan=False),
    st.floats(0.3, 0.9),
    st.floats(0.01, 0.05),
)
def test_invariants(residuals: list[float], shift: float, level: float, step: float) -> None:
    """Intervals nest with the level, follow a shift of every residual and score-free record,
    and do not depend on the order of the rows. The example: margins below the band's half
    width at levels 0.3 and 0.35 used to collapse each interval to its crossed bounds'
    midpoint (0.25, then 0.0: not nested); each bound now stops at the pool's median."""
    rows = [row(str(i), f"S{i % 7}", r) for i, r in enumerate(residuals)]
    scored = cf.with_scores(rows)
    index = cf.RecordIndex(scored)
    a = cf.interval(GEMM, Quantity.KERNEL, index, level)
    b = cf.interval(GEMM, Quantity.KERNEL, index, min(level + step, 0.95))
    assert b.r_lo <= a.r_lo + 1e-12 and a.r_hi <= b.r_hi + 1e-12
    moved = cf.RecordIndex(cf.with_scores([row(r.row_id, r.source, e + shift) for r, e in
                                           zip(rows, residuals, strict=True)]))  # fmt: skip
    c = cf.interval(GEMM, Quantity.KERNEL, moved, level)
    assert (c.r_lo, c.r_hi) == pytest.approx((a.r_lo + shift, a.r_hi + shift), abs=1e-9)
    backwards = cf.RecordIndex(cf.with_scores(rows[::-1]))
    d = cf.interval(GEMM, Quantity.KERNEL, backwards, level)
    assert (d.r_lo, d.r_hi) == pytest.approx((a.r_lo, a.r_hi))


def test_coverage_of_exchangeable_publications_is_near_nominal() -> None:
    """60 publications of 4 rows, each publication biased by its own draw (sd 0.1) and rows
    scattered around it (sd 0.05): held out one publication at a time, the 80 % range holds
    about 80 % of the rows (a method that ignored the publications' bias would cover ~50 %)."""
    rng = random.Random(26)
    rows = []
    for s in range(60):
        bias = rng.gauss(0.0, 0.1)
        rows += [row(f"{s}-{i}", f"S{s}", bias + rng.gauss(0.0, 0.05)) for i in range(4)]
    cov = leave_one_source_out(rows, 0.8)
    share = sum(c.inside for c in cov) / len(cov)
    assert 0.72 <= share <= 0.90, share
