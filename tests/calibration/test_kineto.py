"""Kineto (PyTorch profiler) traces -> per-layer times."""

from __future__ import annotations

import gzip
import json

import pytest
from calibration_testlib import FIXTURES

from perfmodel.calibration.kineto import Phase, read_trace, summarize_trace, time_by_kind
from perfmodel.errors import ParseError

TRACE = FIXTURES / "trace_mlp_cuda.json.gz"
EXPECTED = FIXTURES / "trace_mlp_cuda.expected.json"


def _x(name, cat, ts, dur, tid=1, **args):
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": tid,
        "args": args,
    }


def synthetic_trace() -> list[dict]:
    """Two layers forward on thread 1, their backward on the autograd thread 2, an optimizer."""
    return [
        _x("layer:fc1|Linear", "user_annotation", 0, 10),
        _x("aten::addmm", "cpu_op", 1, 8, **{"Sequence number": 11}),
        _x("cudaLaunchKernel", "cuda_runtime", 2, 1, correlation=1),
        _x("layer:relu|ReLU", "user_annotation", 12, 5),
        _x("aten::relu", "cpu_op", 13, 3, **{"Sequence number": 12}),
        _x("cudaLaunchKernel", "cuda_runtime", 14, 1, correlation=2),
        _x(
            "autograd::engine::evaluate_function: ReluBackward0",
            "cpu_op",
            30,
            5,
            tid=2,
            **{"Sequence number": 12},
        ),
        _x("cudaLaunchKernel", "cuda_runtime", 31, 1, tid=2, correlation=3),
        _x(
            "autograd::engine::evaluate_function: AddmmBackward0",
            "cpu_op",
            40,
            9,
            tid=2,
            **{"Sequence number": 11},
        ),
        _x("cudaLaunchKernel", "cuda_runtime", 41, 1, tid=2, correlation=4),
        _x("cudaLaunchKernel", "cuda_runtime", 43, 1, tid=2, correlation=5),
        _x("optimizer", "user_annotation", 60, 10),
        _x("cudaLaunchKernel", "cuda_runtime", 61, 1, correlation=6),
        _x("cudaMemsetAsync", "cuda_runtime", 80, 1, correlation=7),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "ts": 5,
            "dur": 20.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "relu",
            "ts": 26,
            "dur": 2.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "relu_bwd",
            "ts": 32,
            "dur": 3.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 3},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "dgrad",
            "ts": 45,
            "dur": 15.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 4},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "wgrad",
            "ts": 61,
            "dur": 16.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 5},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "sgd",
            "ts": 78,
            "dur": 4.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 6},
        },
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "memset",
            "ts": 83,
            "dur": 1.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": 7},
        },
    ]


def test_synthetic_trace_attribution():
    s = summarize_trace(synthetic_trace())
    got = {(x.layer, x.phase): (round(x.time_s * 1e6, 3), x.events) for x in s.layers}
    assert got[("fc1", Phase.FORWARD)] == (20.0, 1)
    assert got[("relu", Phase.FORWARD)] == (2.0, 1)
    assert got[("relu", Phase.BACKWARD)] == (3.0, 1)
    assert got[("fc1", Phase.BACKWARD)] == (31.0, 2)  # dgrad + wgrad via the sequence number
    assert got[("optimizer", Phase.OPTIMIZER)] == (4.0, 1)
    assert got[("other", Phase.OTHER)] == (1.0, 1)
    assert s.device_busy_s == pytest.approx(61e-6)
    assert s.span_s == pytest.approx(79e-6)
    kinds = time_by_kind(s)
    assert kinds["linear"] == pytest.approx(51e-6) and kinds["activation"] == pytest.approx(5e-6)


def test_trace_without_layer_ranges_is_a_parse_error(tmp_path):
    with pytest.raises(ParseError, match="layer:"):
        summarize_trace([_x("aten::mm", "cpu_op", 0, 1)])
    bad = tmp_path / "t.json"
    bad.write_text('{"something": 1}')
    with pytest.raises(ParseError, match="traceEvents"):
        read_trace(bad)


def test_h100_fixture_trace_matches_what_the_gpu_run_derived():
    """The committed trace (a small MLP step traced on the H100) imports to the same per-layer
    times the step runner derived on the device."""
    expected = {
        m["key"].rsplit("/", 2)[-2:][0] + "/" + m["params"]["phase"]: m["time_s"]
        for m in json.loads(EXPECTED.read_text())
        if m["kind"] == "step_layer"
    }
    s = summarize_trace(TRACE)
    assert s.on_device
    got = {f"{x.layer}/{x.phase.value}": x.time_s for x in s.layers}
    assert set(got) == set(expected)
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, rel=1e-9), k
    # three Linear layers forward and backward, the loss, the optimizer
    linear = [x for x in s.layers if x.module == "Linear"]
    assert {x.phase for x in linear} == {Phase.FORWARD, Phase.BACKWARD} and len(linear) == 6
    assert s.total(Phase.OPTIMIZER) > 0
    raw = json.loads(gzip.decompress(TRACE.read_bytes()))
    assert "traceEvents" in raw and any(e.get("cat") == "kernel" for e in raw["traceEvents"])
