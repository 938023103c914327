"""The lowering's pure rules (``perfmodel.parallel.lower_pipeline``: :func:`slowed`,
:func:`tp_overlapped`, :func:`host_step_s`), which the plan screen can call without a lowering,
and :class:`PipelineLowering`'s methods that wrap them with a lowering's preset, GPU and plan."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from perfmodel.parallel.lower_pipeline import (
    PipelineLowering,
    host_step_s,
    slowed,
    tp_overlapped,
)
from perfmodel.parallel.software import get_preset

MEGATRON = get_preset("megatron-core")  # with TE userbuffers' TPOverlap
DDP = get_preset("pytorch-ddp")  # without

seconds = st.floats(0.0, 10.0, allow_nan=False)


def test_golden_rules() -> None:
    """Hand-computed: slowdown 0.25 of min(compute, communication); without a TPOverlap (or
    an SM count) all of the TP overlaps, none exposed; the host's split per extra replica."""
    p = replace(DDP, overlap_compute_slowdown=0.25, host_step_s=0.5, host_split_per_sample_s=0.25)
    assert (slowed(p, 2.0, 1.0), slowed(p, 1.0, 4.0), slowed(p, 1.0, -1.0)) == (2.25, 1.25, 1.0)
    assert tp_overlapped(p, 132, "F", 2.0, 1.0) == (2.25, 1.0, 0.0)
    assert tp_overlapped(MEGATRON, 0, "F", 2.0, 1.0) == (slowed(MEGATRON, 2.0, 1.0), 1.0, 0.0)
    assert (host_step_s(p, 1, 8), host_step_s(p, 3, 2)) == (0.5, 1.5)


@given(phase=st.sampled_from(["F", "B"]), dur=seconds, tp=seconds, rs=seconds,
       sms=st.sampled_from([0, 108, 132]))  # fmt: skip
def test_tp_overlapped_splits_the_communication(
    phase: str, dur: float, tp: float, rs: float, sms: int
) -> None:
    """The overlapped and exposed parts add up to the TP seconds (to rounding), neither is
    negative, and the compute is never shorter than without communication."""
    for preset in (MEGATRON, DDP):
        c, under, tail = tp_overlapped(preset, sms, phase, dur, tp, rs)
        assert under >= 0.0 and tail >= 0.0 and c >= dur
        assert abs(under + tail - tp) <= 1e-12 * max(tp, 1.0)


def _view(preset: object, sm_count: int | None, dp: int, per_replica: int) -> SimpleNamespace:
    """What the three methods read of a lowering (as the screen's stand-in gives them); a
    cost model without a GPU datasheet where ``sm_count`` is ``None``."""
    gpu = SimpleNamespace(gpu_spec=SimpleNamespace(sm_count=sm_count))
    return SimpleNamespace(
        preset=preset,
        costs=SimpleNamespace() if sm_count is None else gpu,
        plan=SimpleNamespace(dp=dp),
        inp=SimpleNamespace(batch_per_replica=per_replica),
    )


@given(dur=seconds, tp=seconds, rs=seconds, dp=st.integers(1, 64), n=st.integers(1, 16),
       sms=st.sampled_from([None, 0, 132]))  # fmt: skip
def test_methods_are_the_rules(
    dur: float, tp: float, rs: float, dp: int, n: int, sms: int | None
) -> None:
    """Each method equals its rule, bit for bit, with the lowering's preset, its cost model's
    SM count (0 without a datasheet), its plan's dp and its samples per replica."""
    for preset in (MEGATRON, DDP):
        v = _view(preset, sms, dp, n)
        assert PipelineLowering.slowed(v, dur, tp) == slowed(preset, dur, tp)  # type: ignore[arg-type]
        got = PipelineLowering.tp_overlapped(v, "B", dur, tp, rs)  # type: ignore[arg-type]
        assert got == tp_overlapped(preset, sms or 0, "B", dur, tp, rs)
        assert PipelineLowering.host_step_s(v) == host_step_s(preset, dp, n)  # type: ignore[arg-type]
