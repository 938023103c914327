"""Defaults a user expects (issue 11 item 4): the automatic micro-batch and the speedup baseline
that fits. Pure logic with hand-made memory curves, then two end-to-end scenarios (analytic)."""

from __future__ import annotations

import math

import pytest

from perfmodel.api import Scenario, predict
from perfmodel.errors import InfeasiblePlanError
from perfmodel.search.autobatch import (
    Baseline,
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


def test_large_model_speedup_is_against_the_smallest_count_that_fits() -> None:
    """Llama-2-13B with Adam: 16 B x 13.0e9 = 208 GB of model state cannot sit on one 80 GB
    A100; FSDP over 4 GPUs holds 52 GB each (plus activations), over 2 GPUs 104 GB does not."""
    sc = Scenario(
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
    r = predict(sc)
    assert r.baseline_gpus == 4
    assert r.scaling_efficiency == pytest.approx(r.speedup * 4 / 32)
    assert any("1 GPU does not fit in memory; 2 GPUs do not either" in d for d in r.defaults)
    assert "vs 4 GPUs" in r.format_table()
    assert not math.isnan(r.speedup)
