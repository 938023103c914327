"""A datasheet-only GPU with no published run of its own (H20) gets its architecture's range;
the range's own note says so (audit15 item 14g: only a separate hardware line did)."""

from __future__ import annotations

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.intervals.answers import interval_lines, step_interval

JOB = dict(model="gpt2", global_batch=64, precision="bf16", optimizer="adamw", gpus=8)


def _interval(**kw: str):
    sc = Scenario(system="dgx-h100", **JOB, **kw)
    rep = predict(sc, baseline=False)
    return rep, step_interval(rep, 0.8, scenario=sc)


def test_datasheet_only_gpu_range_says_it_rests_on_other_gpus() -> None:
    rep, si = _interval(gpu="H20-96GB")
    assert si.warning.startswith("no published run on H20-96GB itself (datasheet-only figures)")
    assert "other Hopper GPUs' runs" in si.warning
    assert any(
        "note: no published run on H20-96GB itself" in line for line in interval_lines(rep, si)
    )


@pytest.mark.parametrize("gpu", [None, "H100-SXM5-80GB"])
def test_measured_gpu_range_has_no_such_note(gpu: str | None) -> None:
    _, si = _interval(**({"gpu": gpu} if gpu else {}))
    assert "itself" not in si.warning
