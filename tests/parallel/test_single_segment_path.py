"""forward()/backward()'s short path for a chunk of one plain segment (Megatron's preset) emits
exactly the tasks of the general path (the segment loop with its refusals)."""

from __future__ import annotations

import pytest
from report_compare import gpt_scenario
from test_coarse_lowering import _inputs  # type: ignore[import-not-found]

from perfmodel.parallel.lower_pipeline import PipelineLowering

GPT = {"layers": 8, "hidden": 1024, "heads": 16, "seq_len": 512, "vocab": 8000}
# a chunk smaller than PyTorch DDP's 1 MiB first bucket: one segment whose gradients are reduced
# (overlapped) in the last micro-batch's backward
TINY = {"layers": 4, "hidden": 64, "heads": 4, "seq_len": 128, "vocab": 500}

CASES = {
    "megatron-pp2": dict(software="megatron"),
    "megatron-interleaved": dict(
        software="megatron", schedule="interleaved", interleave=2, global_batch=16
    ),
    "megatron-recompute-sp": dict(
        software="megatron", recompute="full", sequence_parallel=True, pp=4, tp=2, dp=1
    ),
    "megatron-pp1": dict(software="megatron", pp=1, dp=4),
    "deepspeed-zero1": dict(software="deepspeed-zero1", pp=2, tp=1, dp=4),
    "tied-two-servers": dict(software="megatron", nodes=2, dp=4, pp=4, tp=1),
    "ddp-one-bucket": dict(software="pytorch-ddp", model_args=TINY),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("coarse", [False, True])
def test_short_path_equals_general(name: str, coarse: bool) -> None:
    sc = gpt_scenario(**{"model_args": GPT, "global_batch": 32, **CASES[name]})
    inp = _inputs(sc)
    fast = PipelineLowering(*inp, coarse=coarse, hidden=coarse)
    assert any(x is not None for x in fast.plain_single), "the case takes the short path"
    if "bucket" in name:  # and reduces gradients on it
        assert fast.overlap and fast.dp_on
    slow = PipelineLowering(*inp, coarse=coarse, hidden=coarse)
    slow.plain_single = [None] * len(slow.plain_single)
    a, b = fast.graph(), slow.graph()
    assert a.tasks == b.tasks and a.devices == b.devices and a.notes == b.notes
