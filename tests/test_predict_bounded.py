"""A process predicting distinct scenarios keeps a bounded number of objects (rev28: a library
caller looping ``predict`` kept ~60 more GC-tracked objects a distinct scenario, without end),
and the memos' bounds change no answer (a dropped entry is recomputed, bit for bit)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import replace

import pytest

from perfmodel import api
from perfmodel._memo import BoundedMemo
from perfmodel.api import Scenario, predict
from perfmodel.compute import model as compute_model
from perfmodel.parallel import costs, lower_shortcuts, lowering
from perfmodel.pipeline import baseline, inputs

#: Every memo a prediction fills whose bound is a module constant (and ``baseline.BASELINES``'
#: own, :func:`_caps`).
_BOUNDS = (
    (compute_model, ("GEMM_MEMO_SIZE", "ATTENTION_MEMO_SIZE")),
    (costs, ("PRICES_SIZE", "COMM_MEMO_SIZE", "_LAYER_MEMO_SIZE")),
    (lowering, ("_CHUNKS_SIZE",)),
    (lower_shortcuts, ("_SHARED_CHUNKS_SIZE",)),
    (api, ("_MAX_REPORTS",)),
)


def _caps(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """Every memo of :data:`_BOUNDS` bounded at ``size`` entries."""
    for owner, names in _BOUNDS:
        for name in names:
            monkeypatch.setattr(owner, name, size)
    monkeypatch.setattr(baseline.BASELINES, "size", size)  # the memo in place now


def _empty_memos(monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty memos (restored by ``monkeypatch``), so that a prediction computes what they keep."""
    monkeypatch.setattr(api, "_REPORTS", {})
    monkeypatch.setattr(costs, "_SHARED_COMPUTE", [])
    monkeypatch.setattr(lowering, "_CHUNKS", {})
    monkeypatch.setattr(lower_shortcuts, "_SHARED_CHUNKS", {})
    monkeypatch.setattr(baseline, "BASELINES", BoundedMemo(baseline.BASELINES.size))
    inputs._system_costs.cache_clear()  # its SystemCosts hold the communication memos


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _empty_memos(monkeypatch)
    yield
    inputs._system_costs.cache_clear()


def _mlp(batch: int) -> Scenario:
    return Scenario(system="dgx1-v100", model="mlp", batch_per_gpu=batch, fidelity="analytic")


def _tracked() -> int:
    inputs.zoo_workload.cache_clear()  # an lru_cache of 512 workloads: its own bound
    gc.collect()
    return len(gc.get_objects())


@pytest.mark.usefixtures("fresh")
def test_distinct_predictions_keep_a_bounded_number_of_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # at the shipped bounds the memos fill after ~10,000 such scenarios; bounds of 16 entries
    # show the plateau after a few (unbounded, each scenario kept ~49 objects more)
    _caps(monkeypatch, 16)
    for b in range(1, 121):  # fills every memo
        predict(_mlp(b))
    before = _tracked()
    for b in range(121, 321):
        predict(_mlp(b))
    grown = _tracked() - before

    assert grown < 200, f"{grown} more objects after 200 distinct predictions"


def test_bounds_change_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounds of one entry (every memo drops what it kept at the next new key) against the
    shipped bounds, each from empty memos: the same reports, field for field."""
    # data-parallel rings of two servers share NICs (sharing factors above 1)
    gpt2 = replace(_mlp(4), model="gpt2", nodes=2, tp=2, pp=2, precision="fp16")
    scenarios = [_mlp(8), _mlp(16), replace(_mlp(8), gpus=8), replace(gpt2, software="megatron")]

    def reports() -> list[dict[str, object]]:
        with pytest.MonkeyPatch.context() as m:
            _empty_memos(m)
            out = [predict(sc).to_dict() for sc in scenarios]
            inputs._system_costs.cache_clear()
        return out

    shipped = reports()
    _caps(monkeypatch, 1)
    assert reports() == shipped
