"""``predict``'s range lines (``intervals.answers.interval_lines``): one line per rate with both
ends, in the report's order and layout; MFU only where the report states one."""

import math
from types import SimpleNamespace

from perfmodel.intervals.answers import StepInterval, interval_lines

KEYS = ("iteration_time_s", "throughput_samples_per_s", "tokens_per_s_per_gpu", "mfu")


def _si(low, high, *, bias=0.0, bounded=True, warning=""):
    residual = SimpleNamespace(
        level=0.8, basis="12 rows", warning=warning, bias=bias, bounded=bounded, sources=2
    )
    return StepInterval(residual, low, high)  # type: ignore[arg-type]


def test_every_range_with_both_ends_in_the_reports_layout():
    low = dict(zip(KEYS, (0.0125, 1234.56, 98765.4, 0.4123), strict=True), epoch_time_s=3.5)
    high = dict(zip(KEYS, (0.02, 2000.0, 123456.7, 0.5), strict=True), epoch_time_s=7.25)
    lines = interval_lines(SimpleNamespace(mfu=0.45), _si(low, high, bias=math.log(1.1)))
    assert lines == [
        "80% range    (from 12 rows)",
        "  iteration time  12.50 ms - 20.00 ms",
        "  throughput      1,234.6 - 2,000.0 samples/s",
        "  tokens/s/GPU    98,765 - 123,457",
        "  MFU             41.2% - 50.0%",
        "  epoch time      3.500 s - 7.250 s",
        "  runs like this one were predicted 10% too fast (median); the range is their spread,"
        " held out one publication at a time (docs/intervals.md)",
    ]


def test_a_missing_end_drops_the_line_and_no_mfu_without_the_reports_own():
    low = dict(zip(KEYS, (0.0125, 1.0, None, 0.4), strict=True), epoch_time_s=None)
    high = dict(zip(KEYS, (0.02, 2.0, 5.0, 0.5), strict=True), epoch_time_s=None)
    lines = interval_lines(
        SimpleNamespace(mfu=0.0),
        _si(low, high, bias=-0.2, bounded=False, warning="no rows on this GPU"),
    )
    assert lines == [
        "80% range    (from 12 rows)",
        "  iteration time  12.50 ms - 20.00 ms",
        "  throughput      1.0 - 2.0 samples/s",
        f"  runs like this one were predicted {100 * -math.expm1(-0.2):.0f}% too slow (median);"
        " the range is their spread, held out one publication at a time (docs/intervals.md)",
        "  note: 2 publications cannot bound a 80% range; the widest they give stands in",
        "  note: no rows on this GPU",
    ]
