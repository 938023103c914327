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
    the pipelined reduce-scatters' tail; the other 0.35 s the ring exchanges hold 0.5 SMs on
    average (1 SM for two of the four collectives), so the GEMMs run on 131.5 meanwhile; the
    0.4 s of reduce-scattered GEMMs run on 132 - 20 SMs throughout (set_sm_margin):
    1 + 0.35 x 0.5 / 131.5 + 0.4 x 20 / 112 = 1.072759 s."""
    low = _low("megatron-core")
    comp, under, tail = PipelineLowering.tp_overlapped(low, "F", 1.0, 0.4, 0.4)  # type: ignore[arg-type]
    assert (under, tail) == pytest.approx((0.35, 0.05))
    assert comp == pytest.approx(1 + 0.35 * 0.5 / 131.5 + 0.4 * 20 / 112, rel=1e-12)
    # without reduce-scattered GEMMs (none in the segment) only the ring exchanges' SMs
    comp0, _, _ = PipelineLowering.tp_overlapped(low, "F", 1.0, 0.4)  # type: ignore[arg-type]
    assert comp0 == pytest.approx(1 + 0.35 * 0.5 / 131.5, rel=1e-12)


def test_margin_applies_to_the_reduce_scattered_gemms_only() -> None:
    """The SM margin lasts as long as the reduce-scattered GEMMs, not as the communication,
    and never more than the segment; backward GEMMs keep every SM (bulk overlaps take SMs only
    while they run)."""
    low = _low("megatron-core")
    short, _, _ = PipelineLowering.tp_overlapped(low, "F", 1.0, 0.001, 0.4)  # type: ignore[arg-type]
    assert short - 1.0 == pytest.approx(0.4 * 20 / 112 + 0.000875 * 0.5 / 131.5, rel=1e-9)
    capped, _, _ = PipelineLowering.tp_overlapped(low, "F", 0.1, 0.001, 5.0)  # type: ignore[arg-type]
    assert capped == pytest.approx(0.1 + 0.1 * 20 / 112 + 0.000875 * 0.5 / 131.5, rel=1e-9)
    back, _, _ = PipelineLowering.tp_overlapped(low, "B", 1.0, 0.4, 0.4)  # type: ignore[arg-type]
    back0, _, _ = PipelineLowering.tp_overlapped(low, "B", 1.0, 0.4)  # type: ignore[arg-type]
    assert back == back0


def test_segments_carry_their_reduce_scattered_gemm_time() -> None:
    """``Segment.tp_rs_fwd_s`` is the forward time of the layers a TP reduce-scatter follows:
    with sequence parallelism, each block's attention projection and second MLP matrix."""
    from perfmodel.api import resolve
    from perfmodel.parallel.lowering import _tp_reduce_scattered
    from perfmodel.pipeline.lower import build_step

    sc = Scenario(
        system="dgx-h100", gpus=8, model="gpt", model_args={"layers": 2, "hidden": 2048,
        "heads": 16, "seq_len": 2048, "vocab": 32000}, global_batch=8, tp=4, microbatch=2,
        precision="bf16", optimizer="adam", software="megatron-core", fidelity="analytic",
    )  # fmt: skip
    r = resolve(sc)
    _step, costs = build_step(sc, r, None)
    from perfmodel.pipeline.lower import step_workload

    wl, _ = step_workload(sc, r, None)
    rs = [la for la in wl.layers if _tp_reduce_scattered(la)]
    assert sorted({la.name.split(".")[-1] for la in rs}) == ["attn_out", "fc2"]
    want = sum(costs.layer_time(la)[0] for la in rs)
    from perfmodel.parallel.lowering import build_chunk
    from perfmodel.parallel.placement import place

    ch = build_chunk(
        wl,
        tuple(range(len(wl.layers))),
        costs,
        r.plan,
        place(r.plan, r.topology).tp_group(0, 0),
        bucket_bytes=None,
        first_bucket_bytes=None,
        by_block=False,
    )
    assert sum(seg.tp_rs_fwd_s for seg in ch.segments) == pytest.approx(want, rel=1e-12)


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
        tp_overlap=sw.TPOverlap(0.0, 0.0, 0.0, 0.0, "free", fwd_margin_sms=0.0),
    )
    sw.PRESETS["megatron-core-free"] = replace(free_preset, name="megatron-core-free")
    try:
        free = predict(replace(sc, software="megatron-core-free"), baseline=False).iteration_time_s
    finally:
        del sw.PRESETS["megatron-core-free"]
    exposed = predict(replace(sc, software="megatron"), baseline=False).iteration_time_s
    assert free < real < exposed
