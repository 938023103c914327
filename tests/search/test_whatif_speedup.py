"""The what-if's speedup is predict's (audit15 item 4): one figure, one stated basis."""

from __future__ import annotations

from typing import Any

import pytest
from search_fakes import fake_system_predict

from perfmodel.api import Scenario, predict
from perfmodel.search.system_option import parse_systems
from perfmodel.search.whatif import OWN_REF_BASIS, format_whatif, hardware_whatif

BASE = {
    "model": "gpt2",
    "global_batch": 64,
    "precision": "bf16",
    "optimizer": "adamw",
    "software": "fsdp",
}


def test_whatif_speedup_and_basis_are_predicts() -> None:
    # before ux16a the what-if divided by its own 1-GPU row (7.30x) where predict said 7.27x
    # against its unsharded analytic baseline: the same run, two speedups. Since fix16a (FSDP
    # does not shard on one GPU) the baseline is the 1-GPU row's run, so predict's speedup is
    # also the ratio of the two rows
    res = hardware_whatif(BASE, parse_systems("dgx-h100"), [1, 8])
    for p in res.points:
        rep = predict(Scenario(**BASE, system="dgx-h100", gpus=p.gpus))
        assert p.iteration_time_s == rep.iteration_time_s
        assert p.speedup == rep.speedup and p.scaling_efficiency == rep.scaling_efficiency
        assert p.speedup_basis == rep.speedup_basis and p.baseline_gpus == rep.baseline_gpus
    p8 = next(p for p in res.points if p.gpus == 8)
    assert p8.speedup == pytest.approx(
        p8.throughput_samples_per_s / res.points[0].throughput_samples_per_s, rel=1e-9
    )
    text = format_whatif(res)
    assert f"dgx-h100 x8: speedup against {p8.speedup_basis}" in text
    assert p8.to_dict()["speedup_basis"] == p8.speedup_basis


def test_whatif_without_a_report_speedup_states_its_own_basis() -> None:
    res = hardware_whatif(
        {"model": "toy", "batch_per_gpu": 32},
        parse_systems("fast"),
        [2, 4],
        evaluator=fake_system_predict,
        gpus_per_node=lambda o: 4,
    )
    assert {p.speedup_basis for p in res.points} == {OWN_REF_BASIS}
    assert f"fast x2/4: speedup against {OWN_REF_BASIS}" in format_whatif(res)


def test_own_one_gpu_run_is_evaluated_once_per_option() -> None:
    """An evaluator without predict's speedup: each option's own 1-GPU run is evaluated once,
    not once per GPU count (last read: it was re-run for every count)."""
    calls: list[int] = []

    def counting(sc: Any) -> Any:
        calls.append(int(sc["gpus"]))
        return fake_system_predict(sc)

    hardware_whatif(
        {"model": "toy", "batch_per_gpu": 32},
        parse_systems("fast,slow"),
        [2, 4, 8],
        evaluator=counting,
        gpus_per_node=lambda o: 8,
    )
    assert calls.count(1) == 2  # one per option
    assert sorted(calls) == [1, 1, 2, 2, 4, 4, 8, 8]
