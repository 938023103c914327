"""``predict --explain``: the kernel classes, the overlap slowdown, exposed communication, host,
idle and the slowest-GPU wait add up to the iteration time, each with its ceiling and source
(:mod:`perfmodel.report.explain`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import perfmodel.api as api
import perfmodel.parallel.software as software
from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.report.explain import RowGroup, achieved_part, kernel_ceilings

LLAMA = {"layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "seq_len": 4096, "vocab": 32000}

SCENARIOS = {
    # one GPU: no communication, no overlap
    "1gpu": Scenario(system="dgx-h100", gpus=1, model="llama", model_args=LLAMA,
                     global_batch=4, microbatch=2, precision="bf16", software="pytorch-ddp",
                     fidelity="analytic"),
    # Megatron-Core TP + PP + distributed optimizer, FP8, TE userbuffers
    "mcore": Scenario(system="dgx-h100", nodes=2, model="llama", model_args=LLAMA,
                      global_batch=32, microbatch=1, precision="fp8", software="megatron-core",
                      tp=2, pp=2, optimizer="adamw", fidelity="analytic"),
    # interleaved pipeline
    "interleaved": Scenario(system="dgx-h100", nodes=2, model="llama", model_args=LLAMA,
                            global_batch=32, microbatch=1, precision="bf16",
                            software="megatron-core", tp=2, pp=2, schedule="interleaved",
                            interleave=2, optimizer="adamw", fidelity="analytic"),
    # torchtitan FSDP with op-level selective recomputation (per-layer shares)
    "torchtitan": Scenario(system="dgx-h100", gpus=8, model="llama", model_args=LLAMA,
                           global_batch=16, microbatch=2, precision="bf16",
                           software="torchtitan", recompute="selective", optimizer="adamw",
                           fidelity="analytic"),
    # the simulated executor (flow-level communication)
    "simulated": Scenario(system="dgx1-v100", gpus=8, model="resnet50", batch_per_gpu=32,
                          precision="fp16", software="pytorch-ddp", fidelity="simulated"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rows_add_up_to_the_iteration_time(name: str) -> None:
    rep = predict(SCENARIOS[name], baseline=False)
    exp = rep.explanation
    assert exp is not None
    assert exp.total_s == pytest.approx(rep.iteration_time_s, rel=1e-9)
    # the kernel classes and the overlap slowdown are the breakdown's compute, on one GPU
    kernels = exp.seconds(RowGroup.KERNELS)
    overlap = exp.seconds(RowGroup.OVERLAP)
    assert kernels + overlap == pytest.approx(rep.breakdown.compute_s, rel=1e-9)
    assert overlap >= 0.0
    assert exp.seconds(RowGroup.OPTIMIZER) == pytest.approx(rep.breakdown.optimizer_s)
    assert exp.seconds(RowGroup.COMM) == pytest.approx(rep.breakdown.exposed_comm_total_s)
    assert exp.seconds(RowGroup.WAIT) == pytest.approx(rep.breakdown.sync_wait_s)
    for row in exp.rows:
        assert row.seconds > 0 and row.ceiling and row.source


def test_one_gpu_has_no_overlap_slowdown() -> None:
    """Nothing communicates on one GPU: the kernel classes are the whole compute."""
    rep = predict(SCENARIOS["1gpu"], baseline=False)
    assert rep.explanation is not None
    assert rep.explanation.seconds(RowGroup.OVERLAP) == pytest.approx(0.0, abs=1e-12)
    assert not [r for r in rep.explanation.rows if r.group is RowGroup.COMM]


def test_overlap_slowdown_is_the_communication_kernels_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the SMs userbuffers hold and without NCCL's slowdown of overlapped compute, the
    compute stream runs the kernels only: the overlap row vanishes."""
    base = predict(SCENARIOS["mcore"], baseline=False)
    assert base.explanation is not None and base.explanation.seconds(RowGroup.OVERLAP) > 0
    preset = software.PRESETS["megatron-core"]
    monkeypatch.setitem(
        software.PRESETS,
        "megatron-core",
        replace(preset, tp_overlap=None, overlap_compute_slowdown=0.0),
    )
    monkeypatch.setattr(api, "_REPORTS", {})  # the report cache keys on the scenario only
    free = predict(SCENARIOS["mcore"], baseline=False)
    assert free.explanation is not None
    assert free.explanation.seconds(RowGroup.OVERLAP) == pytest.approx(0.0, abs=1e-12)


def test_selective_op_recompute_kernel_classes_match_the_lowering() -> None:
    """torchtitan's op-level checkpoint re-runs each block's layers by their own shares
    (``SelectiveRecompute.share_for``); the kernel classes used the layer-alone mean (0.5 of a
    matrix product, all of a norm) and summed to more than the timeline's compute."""
    rep = predict(SCENARIOS["torchtitan"], baseline=False)
    kernels = sum(v for k, v in rep.kernel_classes.items() if k != "optimizer")
    assert kernels <= rep.breakdown.compute_s * (1 + 1e-9)


def test_ceilings_name_the_gpu_and_backend() -> None:
    rep = predict(SCENARIOS["mcore"], baseline=False)
    assert rep.explanation is not None
    rows = {r.key: r for r in rep.explanation.rows}
    # H100: FP8 sustained 1,354 TFLOP/s of 1,979 (0.684), backward passes split (x 0.870)
    assert rows["gemm:fp8"].ceiling.startswith("0.684 x 1,979 TFLOP/s fp8 peak = 1,354 TFLOP/s")
    assert "input-gradient and weight-gradient passes at x0.870" in rows["gemm:fp8"].ceiling
    assert "H100-SXM5-80GB fp8 ceiling (measured)" in rows["gemm:fp8"].source
    assert rows["attention"].ceiling.startswith("cudnn: ")
    assert "FlashAttention-3" in rows["attention"].source
    # memory-bound: the measured 2,524 GB/s of 3,350
    assert rows["norm"].ceiling.startswith("0.753 x 3.35 TB/s = 2.52 TB/s")
    assert "memory_bandwidth_achieved_GBps" in rows["norm"].source
    # 16 GPUs: E[max of 16 standard normals] = 1.77 (Blom)
    assert "E[max of 16] 1.77" in rows["slowest-GPU wait"].ceiling
    assert "pipeline fill and drain: 1f1b over 2 stages" in rows["idle"].ceiling


def test_kernel_ceilings_without_a_measured_rate_cite_the_default() -> None:
    """A datasheet-only GPU's GEMMs run at ``tensor_core_efficiency`` and its memory at the
    default efficiency; the sources say so."""
    from perfmodel.compute import ComputeParams
    from perfmodel.hardware import get_gpu

    gpu = get_gpu("V100-SXM2-16GB")
    c = kernel_ceilings(["gemm:fp16", "norm"], ComputeParams.for_gpu(gpu), gpu)
    assert c["gemm:fp16"].text.startswith("0.760 x 125 TFLOP/s fp16 peak = 95 TFLOP/s")
    assert "tensor_core_efficiency 0.76" in c["gemm:fp16"].source
    assert c["norm"].text.startswith("0.800 x 0.90 TB/s = 0.72 TB/s")
    assert "default 0.80" in c["norm"].source


def test_achieved_part_picks_one_labelled_part() -> None:
    from perfmodel.hardware import get_gpu

    h100 = get_gpu("H100-SXM5-80GB")
    assert achieved_part(h100, "sustained").startswith("sustained: MEASURED on the H200 SXM")
    assert "burst" not in achieved_part(h100, "memory_bandwidth_achieved_GBps")
    assert achieved_part(None, "burst") == ""


def _argv(extra: list[str]) -> list[str]:
    return [
        "predict", "--system", "dgx-h100", "--nodes", "2", "--model", "llama",
        *(a for k, v in LLAMA.items() for a in ("--model-arg", f"{k}={v}")),
        "--global-batch", "32", "--plan", "tp=2,pp=2,microbatch=1", "--precision", "fp8",
        "--software", "megatron-core", "--optimizer", "adamw", "--fidelity", "analytic",
        *extra,
    ]  # fmt: skip


def test_cli_explain_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_argv(["--explain"])) == 0
    text = capsys.readouterr().out
    assert "where the step goes (critical GPU; the rows add up to the iteration time):" in text
    for key in ("gemm:fp8", "attention", "fp8_cast", "overlap slowdown", "comm:tp", "idle"):
        assert f"\n  {key} " in text
    assert "sources:\n  [1] " in text
    assert main(_argv(["--explain", "--json"])) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["explain"]["rows"]
    assert sum(r["seconds"] for r in rows) == pytest.approx(out["iteration_time_s"], rel=1e-9)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, rel=1e-9)
    assert {r["group"] for r in rows} >= {"kernels", "overlap", "comm", "idle", "wait"}
    assert main(_argv(["--json"])) == 0  # without --explain the JSON stays as it was
    assert "explain" not in json.loads(capsys.readouterr().out)


def test_model_show_prints_the_classes_with_ceilings(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["model", "show", "llama", "--batch", "1", "--gpu", "H100-SXM5-80GB",
            "--precision", "bf16", *(a for k, v in LLAMA.items() for a in ("--model-arg", f"{k}={v}"))]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "kernel classes (one micro-batch: forward + backward + SGD step, eager kernels):" in text
    assert "0.763 x 989 TFLOP/s bf16 peak = 755 TFLOP/s" in text
    assert main([*argv, "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    classes, ceilings = totals["kernel_classes"], totals["kernel_class_ceilings"]
    assert set(classes) == set(ceilings)
    # the classes are the micro-batch's graph-mode step: forward, backward, SGD
    step = totals["fwd_s"] + totals["bwd_s"] + totals["optimizer_sgd_s"]
    assert sum(classes.values()) == pytest.approx(step, rel=1e-9)
