"""Defaults a user expects (issue 11 item 4): the automatic micro-batch and the speedup baseline
that fits. Pure logic with hand-made memory curves, then two end-to-end scenarios (analytic)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, predict
from perfmodel.errors import InfeasiblePlanError
from perfmodel.pipeline.autobatch import (
    Baseline,
    affine_limit,
    baseline_gpu_counts,
    choose_microbatch,
    fitting_baseline,
    microbatch_candidates,
)
from perfmodel.units import GiB


def test_candidates_keep_pp_microbatches() -> None:
    assert microbatch_candidates(12, 1) == [1, 2, 3, 4, 6, 12]
    assert microbatch_candidates(12, 4) == [1, 2, 3]  # 12 / 3 = 4 micro-batches for 4 stages
    assert microbatch_candidates(2, 4) == [1]  # fewer samples than stages: 1


def test_choose_largest_that_fits_with_few_evaluations() -> None:
    calls: list[int] = []

    def fits(mb: int) -> bool:
        calls.append(mb)
        return 20.0 + 7.0 * mb <= 80.0  # static 20 GiB + 7 GiB per sample on 80 GiB: mb <= 8

    c = choose_microbatch(64, 1, fits)
    assert c is not None and c.microbatch == 8
    assert "64 samples per replica = 8 micro-batches of 8; 16 does not fit" in c.reason
    assert len(calls) <= 3  # bisection over 7 divisors
    c16 = choose_microbatch(64, 16, fits)
    assert c16 is not None and c16.microbatch == 4  # 64 / 4 = 16 micro-batches
    none = choose_microbatch(64, 1, lambda mb: False)
    assert none is not None
    assert none.microbatch == 1 and "not even micro-batch 1 fits" in none.reason
    assert choose_microbatch(1, 1, lambda mb: False) is None  # nothing to choose
    assert choose_microbatch(6, 4, lambda mb: True) is None  # only 1 leaves >= 4 micro-batches


def _bisection(batch: int, pp: int, fits) -> int:  # the search before issue 14, for reference
    cands = microbatch_candidates(batch, pp)
    lo, hi, best = 0, len(cands) - 1, -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(cands[mid]):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return cands[max(best, 0)]


@settings(max_examples=300, deadline=None)
@given(
    batch=st.integers(2, 720),
    pp=st.sampled_from([1, 1, 2, 4, 8]),
    static=st.floats(0.0, 90.0),
    per_sample=st.floats(0.01, 40.0),
    bend=st.floats(0.0, 0.5),
    noise=st.sampled_from([None, 0.0, 0.3, 3.0]),
)
def test_guided_search_chooses_what_the_bisection_chose(
    batch: int, pp: int, static: float, per_sample: float, bend: float, noise: float | None
) -> None:
    """issue 14: probing where the last probe's memory points returns the bisection's size for
    any monotone memory curve, whatever the estimates (exact, off by a factor, absent), and
    with an exact affine estimate closes the bracket within 3 probes."""

    def used(mb: int) -> float:  # GiB: static + activations, a little convex (workspace)
        return static + per_sample * mb * (1.0 + bend * mb / batch)

    calls: list[int] = []

    def fits(mb: int) -> bool:
        calls.append(mb)
        return used(mb) <= 80.0

    def limit(mb: int) -> float | None:
        if noise is None:
            return None
        exact = (80.0 - static) / per_sample if bend == 0 else (80.0 - static) / per_sample / 2
        return exact * (1.0 + noise) if mb % 2 else exact / (1.0 + noise)

    n = len(microbatch_candidates(batch, pp))
    c = choose_microbatch(batch, pp, fits, limit)
    if n == 1:
        assert c is None
        return
    assert c is not None and c.microbatch == _bisection(batch, pp, lambda mb: used(mb) <= 80.0)
    assert len(calls) <= 2 * math.ceil(math.log2(n + 1)) + 1
    calls.clear()
    exact = choose_microbatch(batch, pp, fits, lambda mb: (80.0 - static) / per_sample)
    assert exact is not None and exact.microbatch == c.microbatch
    if bend == 0:
        assert len(calls) <= 3


def test_guided_search_cuts_the_baseline_probe() -> None:
    """The speedup baseline of GPT-3 175B (tp8 pp8 on 64 A100, 96 samples per replica):
    candidates 1, 2, 3, 4, 6, 8, 12; 4 fits, 6 does not. A bisection probes 4, 8, 6; the
    estimate from the probe of 4 names 4 itself, so 6 closes the bracket: 2 probes."""
    calls: list[int] = []

    def fits(mb: int) -> bool:
        calls.append(mb)
        return 40.0 + 7.5 * mb <= 80.0  # fits up to 5.33 samples

    c = choose_microbatch(96, 8, fits, lambda mb: (80.0 - 40.0) / 7.5)
    assert c is not None and c.microbatch == 4 and calls == [4, 6]
    # the estimate from per-stage memory: 50 GiB with 20 GiB of activations at micro-batch 4
    # leaves 80 - 30 = 50 GiB, 2.5 x the activations: 10 samples
    stage = type("M", (), {"total_bytes": 50.0, "activations_bytes": 20.0, "capacity_bytes": 80.0})
    assert affine_limit(4, [stage]) == pytest.approx(10.0)


def test_an_infeasible_probe_restarts_the_bisection() -> None:
    """No estimate for a probed size (``limit`` None: the plan cannot run at that size, not a
    memory answer) restarts the search as the bisection: its probes and its size. Candidates
    1, 2, 3, 4, 6, 8, 12; memory fits up to 6.5 samples but 6 is infeasible."""
    calls: list[int] = []

    def fits(mb: int) -> bool:
        calls.append(mb)
        return mb != 6 and mb <= 6.5

    c = choose_microbatch(96, 8, fits, lambda mb: None if mb == 6 else 6.5)
    assert c is not None and c.microbatch == 4 == _bisection(96, 8, fits)
    assert calls[:2] == [4, 6] and calls[2:5] == [4, 8, 6]  # guided, then the bisection


def test_baseline_counts() -> None:
    assert baseline_gpu_counts(32, 8) == [8, 16]
    assert baseline_gpu_counts(32, 1) == [2, 4, 8, 16]
    assert baseline_gpu_counts(8, 8) == []


def test_fitting_baseline_cases() -> None:
    def run(k: int) -> tuple[float, bool]:
        if k == 2:
            raise InfeasiblePlanError("does not divide", value=k, where="gpus")
        return 10.0 * k, k >= 8

    assert fitting_baseline((5.0, True), [2, 4], run, this_run=(16, 150.0, True)) == Baseline(
        1, 5.0
    )
    b = fitting_baseline((5.0, False), [2, 4, 8], run, this_run=(16, 150.0, True))
    assert (b.gpus, b.throughput_samples_per_s) == (8, 80.0)
    assert b.note == "1 GPU does not fit in memory; 4 GPUs do not either"
    own = fitting_baseline((5.0, False), [2, 4], run, this_run=(16, 150.0, True))
    assert (own.gpus, own.throughput_samples_per_s) == (16, 150.0)
    assert "this run is the smallest GPU count that fits" in (own.note or "")
    stuck = fitting_baseline((5.0, False), [4, 8], run, this_run=(16, 150.0, False))
    assert stuck.gpus == 1 and "nor does this run" in (stuck.note or "")


def test_issue_gpt_example_fits_with_an_automatic_microbatch() -> None:
    """issue 11: dgx-h100 x2, gpt h2048 l24 a16 s2048, global batch 512, bf16, Adam printed
    155 GiB -> DOES NOT FIT with the whole per-replica batch of 32 as one micro-batch."""
    sc = Scenario(
        system="dgx-h100",
        nodes=2,
        model="gpt",
        model_args={"hidden": 2048, "layers": 24, "heads": 16, "seq_len": 2048},
        global_batch=512,
        precision="bf16",
        optimizer="adam",
        software="pytorch-ddp",  # stated: the automatic micro-batch is the first default
        fidelity="analytic",
    )
    r = predict(sc)
    assert r.fits_in_memory
    assert r.plan["microbatch_size"] == 8
    assert r.defaults and r.defaults[0].startswith("micro-batch 8 chosen automatically")
    assert "default         micro-batch 8" in r.format_table()
    # 16 does not fit: activations double, the workspace does not shrink; 19.6 GiB of model
    # state and buffers + 2 x 28.7 GiB + 6.4 GiB = 83.5 GiB > 80 GiB
    m = r.memory
    static = m.total_bytes - m.activations_bytes - m.workspace_bytes
    assert static + 2 * m.activations_bytes + m.workspace_bytes > 80 * GiB
    assert m.total_bytes <= 80 * GiB
    assert r.baseline_gpus == 1  # 512 samples fit one GPU with gradient accumulation
    assert r.defaults[1].startswith("the 1-GPU baseline runs micro-batch 8 chosen automatically")
    assert "(512 samples per replica = 64 micro-batches of 8" in r.defaults[1]


#: Llama-2-13B, FSDP over 4 DGX A100 (32 GPUs), bf16 Adam: 16 B x 13.0e9 = 208 GB of model state
LLAMA13_FSDP_32 = Scenario(
    system="dgx-a100",
    nodes=4,
    model="llama2_13b",
    model_args={"seq_len": 512},
    software="fsdp",
    batch_per_gpu=1,
    precision="bf16",
    optimizer="adam",
    fidelity="analytic",
)


def test_large_model_speedup_is_against_the_smallest_count_that_fits() -> None:
    """Llama-2-13B with Adam: 16 B x 13.0e9 = 208 GB of model state cannot sit on one 80 GB
    A100 (80 GiB = 85.9 GB); FSDP over 4 GPUs holds 52 GB each (plus activations), over 2 GPUs 104 GB does not."""
    sc = LLAMA13_FSDP_32
    r = predict(sc)
    assert r.baseline_gpus == 4
    assert r.scaling_efficiency == pytest.approx(r.speedup * 4 / 32)
    assert any("1 GPU does not fit in memory; 2 GPUs do not either" in d for d in r.defaults)
    assert "vs 4 GPUs" in r.format_table()
    assert not math.isnan(r.speedup)


def test_one_gpu_baseline_is_skipped_only_where_its_model_state_cannot_fit(monkeypatch) -> None:
    """issue 14: the 1-GPU baseline's prediction is skipped when its model state alone exceeds
    the GPU (its throughput is then unused); the report is the one of the full path. Llama-2-13B
    with mixed-precision Adam: 16 B x 13.0e9 = 208 GB of state > 80 GiB; the lowered 1-GPU step
    holds at least those bytes. A 24-layer 2048-wide GPT (1.3e9 parameters, 21 GB) may fit:
    not skipped."""
    import perfmodel.api as api
    import perfmodel.pipeline.baseline as baseline
    from perfmodel.pipeline.lower import step_workload

    sc = LLAMA13_FSDP_32
    r = api.resolve(sc)
    assert baseline._one_gpu_state_exceeds_memory(sc, r)
    one = predict(api.baseline_scenario(sc, r), baseline=False)
    assert not one.fits_in_memory
    m = one.memory
    b_r = api.resolve(api.baseline_scenario(sc, r))
    wl, _ = step_workload(api.baseline_scenario(sc, r), b_r, None)
    bound = sum(b_r.recipe.model_state_bytes(sum(la.params for la in wl.layers), 1))
    assert m.weights_bytes + m.grads_bytes + m.optimizer_bytes >= bound > 80 * GiB
    assert bound == pytest.approx(16 * 13.0e9, rel=0.01)
    calls: list[int] = []
    real = baseline._baseline_throughput
    monkeypatch.setattr(
        baseline, "_baseline_throughput", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    monkeypatch.setattr(api, "_REPORTS", {})  # no cached report answers in place of the skip
    skipped = predict(sc)
    assert calls == []  # the 1-GPU baseline was not predicted (review)
    monkeypatch.setattr(api, "_REPORTS", {})
    monkeypatch.setattr(baseline, "_one_gpu_state_exceeds_memory", lambda sc, r: False)
    full = predict(sc)
    assert calls == [1]
    assert skipped.to_dict() == full.to_dict()
    small = Scenario(
        system="dgx-a100",
        model="gpt",
        model_args={"hidden": 2048, "layers": 24, "heads": 16, "seq_len": 2048},
        gpus=8,
        global_batch=64,
        precision="bf16",
        optimizer="adam",
        fidelity="analytic",
    )
    monkeypatch.undo()
    assert not baseline._one_gpu_state_exceeds_memory(small, api.resolve(small))
