"""calibration/scripts/sustained_kernels.py on the CPU with fakes (no GPU, no torch)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from perfmodel.calibration.backends import TelemetrySample

SCRIPT = Path(__file__).resolve().parents[2] / "calibration" / "scripts" / "sustained_kernels.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("sustained_kernels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules[spec.name]


def test_plan_covers_issue_24_item_9(script) -> None:
    kernels = script.plan()
    gemms = [k for k in kernels if k.kind == "gemm"]
    assert len({k.name for k in gemms}) == 6
    assert {k.fmt for k in gemms} == {"bf16", "fp8", "fp8-split"}
    att = [k for k in kernels if k.kind == "attention"]
    assert {k.shape["head_dim"] for k in att} == {64, 128}
    assert {k.shape["backend"] for k in att} == {"flash", "efficient", "cudnn", "math"}
    grouped = {k.name: k for k in kernels if k.kind == "grouped"}
    assert grouped["qwen3-30b-a3b.w1"].shape["experts"] == 128
    # FLOP by hand: Llama-3-8B MLP down at 16384 tokens: 2 x 16384 x 4096 x 14336
    down = next(k for k in gemms if k.name == "llama3-8b.mlp_down")
    assert down.flop == 2 * 16384 * 4096 * 14336
    # Mixtral expert GEMM: every token visits top_k = 2 experts of 4096 -> 14336
    assert grouped["mixtral-8x7b.w1"].flop == 2 * 16384 * 2 * 14336 * 4096


def test_plan_has_the_ring_steps_of_torch_context_parallel(script) -> None:
    ring = {k.name: k for k in script.plan() if k.kind == "ring"}
    assert {k.shape["backend"] for k in ring.values()} == {"flash", "efficient"}
    s = script.RING_LOCAL_TOKENS
    step0 = ring["cp-ring-flash.step0-causal"]
    assert step0.shape["causal"] and step0.shape["q_len"] == step0.shape["k_len"] == s
    kv, q = ring["cp-ring-flash.kv-half"], ring["cp-ring-flash.q-half"]
    assert (kv.shape["q_len"], kv.shape["k_len"], kv.shape["causal"]) == (s, s // 2, False)
    assert (q.shape["q_len"], q.shape["k_len"], q.shape["causal"]) == (s // 2, s, False)
    # FLOP by hand: 32 heads of 128 over 32768 x 32768 causal pairs, forward + 2.5x backward;
    # load balancing gives the unmasked half-steps the same FLOP as the causal step
    assert step0.flop == 4 * 32 * (32768 * 32768 // 2) * 128 * 3.5
    assert kv.flop == q.flop == step0.flop


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_run_plan_holds_each_kernel_and_logs_telemetry(script, tmp_path: Path) -> None:
    clock = FakeClock()

    def make(kernel):
        if kernel.name.startswith("sdpa-cudnn"):
            raise RuntimeError("No available kernel")

        def call() -> float:
            clock.t += 0.125  # each call takes 1/8 s of the window (exact in binary)
            return 2e-3

        return call

    class Tel:
        def read(self):
            return TelemetrySample(1.8e9, 690.0, 0x4)

    every = script.plan()
    cudnn = next(k for k in every if k.name == "sdpa-cudnn.d64")
    kernels = [every[0], every[1], cudnn]
    out = tmp_path / "sustained.jsonl"
    recs = script.run_plan(kernels, make, Tel(), 1.0, out, clock=clock)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3 == len(recs)
    ok = lines[0]
    assert ok["calls"] == 8 and ok["seconds_held"] == 1.0
    assert ok["median_s"] == 2e-3
    assert ok["tflops"] == pytest.approx(kernels[0].flop / 2e-3 / 1e12)
    assert ok["telemetry"]["throttle"] == ["sw_power_cap"]
    assert ok["telemetry"]["sm_clock_mhz"] == 1800.0
    assert lines[2]["error"].startswith("RuntimeError") and lines[2]["tflops"] is None


def test_plan_only_needs_no_gpu(script, capsys) -> None:
    assert script.main(["--plan-only", "--seconds", "1"]) == 0
    assert "llama3-8b.lm_head" in capsys.readouterr().out
