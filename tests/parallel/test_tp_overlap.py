"""Tensor-parallel overlap by its mechanism (issue 24 cause 5): Transformer Engine userbuffers'
communication kernels hold SMs the GEMMs they overlap lose, and the pipelined reduce-scatters
leave their last chunk after the GEMMs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.software import TP_OVERLAP_UB_H100, get_preset


def _low(software: str, sm_count: int | None = 132) -> SimpleNamespace:
    preset = get_preset(software)
    low = SimpleNamespace(
        preset=preset,
        costs=SimpleNamespace(gpu_spec=SimpleNamespace(sm_count=sm_count)),
    )
    low.slowed = lambda dur, comm: PipelineLowering.slowed(low, dur, comm)  # type: ignore[attr-defined]
    return low


def test_forward_hand_computed() -> None:
    """1 s of GEMMs under 0.4 s of TP communication, forward, 132 SMs: 1/8 of it (0.05 s) is
    the pipelined reduce-scatters' tail; the other 0.35 s hold 10.5 SMs on average, so the
    GEMMs run on 121.5: 1 + 0.35 x 10.5 / 121.5 = 1.030247 s."""
    comp, under, tail = PipelineLowering.tp_overlapped(_low("megatron-core"), "F", 1.0, 0.4)  # type: ignore[arg-type]
    assert (under, tail) == pytest.approx((0.35, 0.05))
    assert comp == pytest.approx(1 + 0.35 * 10.5 / 121.5, rel=1e-12)


def test_backward_hand_computed() -> None:
    """Backward: ring exchanges and bulk overlaps, 28/6 SMs on average, nothing exposed:
    1 + 0.4 x (28/6) / (132 - 28/6)."""
    comp, under, tail = PipelineLowering.tp_overlapped(_low("megatron-core"), "B", 1.0, 0.4)  # type: ignore[arg-type]
    assert (under, tail) == (0.4, 0.0)
    n = 28 / 6
    assert comp == pytest.approx(1 + 0.4 * n / (132 - n), rel=1e-12)


def test_slowdown_capped_by_compute() -> None:
    """Communication longer than the GEMMs slows them for their own length only."""
    comp, _, _ = PipelineLowering.tp_overlapped(_low("megatron-core"), "B", 0.1, 5.0)  # type: ignore[arg-type]
    assert comp == pytest.approx(0.1 * (1 + TP_OVERLAP_UB_H100.slowdown("B", 132)))


def test_fewer_sms_slow_more() -> None:
    """The same communication kernels take a larger share of a smaller GPU."""
    assert TP_OVERLAP_UB_H100.slowdown("F", 108) > TP_OVERLAP_UB_H100.slowdown("F", 132)


def test_overlap_costs_something_end_to_end() -> None:
    """A Megatron-Core TP 4 step with overlap is slower than the same overlap treated as free
    and faster than no overlap (Megatron-LM's exposed TP)."""
    sc = Scenario(
        system="dgx-h100", gpus=8, model="gpt", model_args={"layers": 4, "hidden": 8192,
        "heads": 64, "seq_len": 4096, "vocab": 32000}, global_batch=8, tp=4, microbatch=2,
        precision="bf16", optimizer="adam", software="megatron-core", fidelity="analytic",
    )  # fmt: skip
    real = predict(sc, baseline=False).iteration_time_s
    from dataclasses import replace

    import perfmodel.parallel.software as sw

    free_preset = replace(
        sw.get_preset("megatron-core"),
        tp_overlap=sw.TPOverlap(0.0, 0.0, 0.0, 0.0, "free"),
    )
    sw.PRESETS["megatron-core-free"] = replace(free_preset, name="megatron-core-free")
    try:
        free = predict(replace(sc, software="megatron-core-free"), baseline=False).iteration_time_s
    finally:
        del sw.PRESETS["megatron-core-free"]
    exposed = predict(replace(sc, software="megatron"), baseline=False).iteration_time_s
    assert free < real < exposed
