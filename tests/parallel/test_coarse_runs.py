"""Runs of segments as one task where a chunk is refused only for some segments' long
overlapped TP collectives (issue 27 item 2: ``PipelineLowering.coarse_runs``). The report equals
the fine lowering's and the whole-chunk-only coarse lowering's (the summation order of the
durations), the runs split at the refused segments, and a refused segment stays as it was."""

from __future__ import annotations

import functools

import pytest
from report_compare import assert_close, gpt_scenario
from test_coarse_lowering import _inputs

import perfmodel.api as api
import perfmodel.pipeline.lower as lower_stage
from perfmodel.api import Scenario, predict
from perfmodel.parallel import lower_step
from perfmodel.parallel.lower_pipeline import PipelineLowering
from perfmodel.parallel.lowering import Segment

# GPT-3's width (4 blocks): the first forward segment (the embedding and the first layers of
# block 0, one gradient bucket) all-reduces more over tp 8 than it computes
GPT = {"layers": 4, "hidden": 12288, "heads": 96, "seq_len": 2048}

CASES = {
    "pp1": {},
    "pp2": dict(pp=2, nodes=4),
    "interleaved": dict(pp=2, nodes=4, schedule="interleaved", interleave=2),
    "recompute-sp": dict(recompute="full", sequence_parallel=True),
    "selective": dict(recompute="selective"),
    "zero2": dict(zero=2),  # the forwards only
}


def _scenario(**kw: object) -> Scenario:
    base = {
        "model_args": GPT,
        "global_batch": 32,
        "software": "megatron-core",
        "tp": 8,
        "pp": 1,
        "dp": 2,
        "nodes": 2,
        "microbatch": 2,
    }
    return gpt_scenario(**{**base, **kw})


def _report(sc: Scenario, monkeypatch: pytest.MonkeyPatch, *, coarse: bool, runs: bool):
    with monkeypatch.context() as m:
        m.setattr(lower_stage, "lower", functools.partial(lower_step.lower, coarse=coarse))
        m.setattr(api, "_REPORTS", {})
        if not runs:
            m.setattr(PipelineLowering, "coarse_runs", lambda self, s, ph, mb, ch: None)
        seen: list[int] = []
        orig = PipelineLowering.coarse_runs

        def spy(self, s, phase, mb, ch):
            got = orig(self, s, phase, mb, ch)
            seen.append(got is not None)
            return got

        if runs:
            m.setattr(PipelineLowering, "coarse_runs", spy)
        rep = predict(sc, baseline=False)
        return rep, sum(seen)


@pytest.mark.parametrize("name", sorted(CASES))
def test_runs_equal_fine_and_whole_chunk_lowering(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(**CASES[name])
    fine, _ = _report(sc, monkeypatch, coarse=False, runs=False)
    whole, _ = _report(sc, monkeypatch, coarse=True, runs=False)
    got, merged = _report(sc, monkeypatch, coarse=True, runs=True)
    assert merged > 0, "the first segment's TP outlasts its compute: runs merged"
    assert_close(got.to_dict(), fine.to_dict())
    assert_close(got.to_dict(), whole.to_dict())
    assert got.timeline.graph.tasks == fine.timeline.graph.tasks  # what shows tasks: fine


def test_simulated_runs_equal_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = _scenario(fidelity="simulated")
    fine, _ = _report(sc, monkeypatch, coarse=False, runs=False)
    got, merged = _report(sc, monkeypatch, coarse=True, runs=True)
    assert merged > 0
    assert_close(got.to_dict(), fine.to_dict())


def test_runs_split_at_refused_segments() -> None:
    """Hand check: segments fit, fit, long, fit, fit, fit -> a run of 2, the long one, a run
    of 3, each run's seconds summed in forward order; the long segment itself."""
    low = PipelineLowering(*_inputs(_scenario()), coarse=True)
    low.gathers_left = [0] * low.P  # as after the first micro-batch's gathers
    ch = low.chunks[0]
    assert low.tp_overlap and low.tp_stream != "compute"

    def seg(f: float, tp: float) -> Segment:
        return Segment(f, 2 * f, 0.5 * f, tp, tp, 1, 1.0, 1.0, tp_rs_fwd_s=0.25 * f)

    segs = [seg(1.0, 0.5), seg(2.0, 1.0), seg(1.0, 2.2), seg(4.0, 1.0), seg(1.0, 0.1), seg(2, 0)]
    chunk = type(ch)(**{**ch.__dict__, "segments": tuple(segs)})
    assert not low.coarsenable(0, "F", 1, chunk)
    runs = low.coarse_runs(0, "F", 1, chunk)
    assert runs == ((3.0, 1.5, 7.5, 1.5, 0.75), segs[2], (7.0, 1.1, 17.5, 1.1, 1.75))
    # the backward: the long segment's 2.2 s fit under its 2.5 s backward (2 + 0.5
    # recomputed), so the whole chunk is coarse (coarsenable), not split
    assert low.coarsenable(0, "B", 1, chunk)
    # nothing to merge: refused
    two = type(ch)(**{**ch.__dict__, "segments": (segs[0], segs[2], segs[3])})
    assert low.coarse_runs(0, "F", 1, two) is None
    # the last micro-batch's backward reduces gradients bucket by bucket: refused
    assert low.coarse_runs(0, "B", low.m - 1, chunk) is None


def test_gpt3_megatron_core_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: GPT-3 175B on 1024 A100, Megatron-Core, dp64 tp8 pp2 mb2."""
    sc = Scenario.from_dict(
        dict(
            system="dgx-a100",
            nodes=128,
            gpus=1024,
            model="gpt",
            model_args={"hidden": 12288, "heads": 96, "layers": 96, "seq_len": 2048},
            global_batch=1536,
            precision="fp16",
            optimizer="adam",
            software="megatron-core",
            dp=64,
            tp=8,
            pp=2,
            microbatch=2,
            fidelity="analytic",
        )
    )
    whole, _ = _report(sc, monkeypatch, coarse=True, runs=False)
    got, merged = _report(sc, monkeypatch, coarse=True, runs=True)
    assert merged > 0
    assert_close(got.to_dict(), whole.to_dict())
