"""The interval's ``--json`` fields built in one place
(:func:`perfmodel.intervals.answers.interval_fields`): ``predict --json``, a what-if point and
a systems-search best plan name what a range rests on with the same keys and values (session
14's read: three hand-written copies, the what-if's and the systems search's without the
``interval_kind_*`` and ``interval_capped`` fields predict gives)."""

from __future__ import annotations

import math
from dataclasses import replace

from perfmodel.cli.compare import _interval_json
from perfmodel.intervals.answers import _step_values, interval_fields
from perfmodel.intervals.conformal import interval, record_index
from perfmodel.intervals.features import Quantity
from perfmodel.search.whatif import WhatIfPoint


def _iv():  # a real residual interval of the record, with a physical cap noted
    idx = record_index()
    iv = interval(idx.rows[0].features, Quantity.STEP, idx)
    return replace(iv, r_lo=-0.2, r_hi=0.3, capped="MFU stops at 100%")


def test_the_fields() -> None:
    iv = _iv()
    d = interval_fields(iv)
    assert d["interval_level"] == iv.level and d["interval_basis"] == iv.basis
    assert d["interval_bias"] == math.expm1(iv.bias) and d["interval_bounded"] is iv.bounded
    assert d["interval_capped"] == "MFU stops at 100%"
    assert interval_fields(None) == {"interval_level": None}


def test_predict_whatif_and_systems_search_say_it_alike() -> None:
    iv = _iv()
    want = interval_fields(iv)
    step = _step_values(iv, {"iteration_time_s": 2.0}).to_dict()
    point = WhatIfPoint(
        system="s", gpus=8, nodes=1, iteration_time_s=2.0, throughput_samples_per_s=32.0,
        speedup=None, scaling_efficiency=None, fits_in_memory=True, epoch_time_s=None,
        run_time_s=None, price_per_gpu_hour=None, cost_per_epoch=None, cost_per_run=None,
        meets_deadline=None, interval=iv,
    ).to_dict()  # fmt: skip
    best = _interval_json(iv, {"iteration_time_s": 2.0})
    for out in (step, point, best):
        assert {k: v for k, v in out.items() if k.startswith("interval_")} == want
    lo, hi = 2.0 * math.exp(-0.2), 2.0 * math.exp(0.3)
    for out in (step, point, best):
        assert math.isclose(out["iteration_time_s_low"], lo)
        assert math.isclose(out["iteration_time_s_high"], hi)
    assert _interval_json(None, {}) == {"interval_level": None}
