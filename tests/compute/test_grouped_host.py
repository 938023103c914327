"""Host issue time of a grouped GEMM's per-expert launches (Transformer Engine
``multi_stream_cublas_gemm``: one cuBLASLt call per local expert) and the GPU's wait after a MoE
dispatcher's synchronisation when those launches outrun the GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.api import Scenario, resolve
from perfmodel.compute import HOST_DISPATCH_S, ComputeModel, ComputeParams
from perfmodel.compute.params import HOST_LAUNCH_SHARE
from perfmodel.hardware import get_gpu
from perfmodel.parallel.expert import dispatcher_sync_stall_s
from perfmodel.pipeline.lower import build_step, step_workload
from perfmodel.workload import build_model
from perfmodel.workload.layers import ExpertRole

GPU = get_gpu("H100-SXM5-80GB")
EAGER = HOST_DISPATCH_S["pytorch-eager"]


def _model(host_s: float) -> ComputeModel:
    return ComputeModel(
        GPU, ComputeParams.for_gpu(GPU, cast_weights_each_step=False, host_dispatch_s=host_s)
    )


def _fc1(experts_local: int):
    w = build_model(
        "qwen3_30b_a3b", batch_size=1, seq_len=4096, ep=128 // experts_local, layers=1,
        precision="bf16",
    )  # fmt: skip
    fc1 = next(la for la in w.layers if la.name.endswith("experts_fc1"))
    assert fc1.expert_role is ExpertRole.EXPERT and fc1.gemm.batch == experts_local
    return fc1


def test_share_is_the_bare_launch_over_the_fitted_kernel() -> None:
    # 9.68 us (launch/tiny-op) over 35.55 us (HOST_DISPATCH_S), both on the lent H100's host
    assert HOST_LAUNCH_SHARE * 35.55 == pytest.approx(9.68)
    assert EAGER * HOST_LAUNCH_SHARE == pytest.approx(9.68e-6)


def test_grouped_host_golden() -> None:
    """8 local experts: the module call is the layer's modelled kernels; 7 more GEMM launches
    forward (7 x 9.68 us = 67.76 us) and 7 more in each backward pass (input and weight
    gradients: 135.52 us), against the same layer with one expert per GEMM call."""
    cm = _model(EAGER)
    fc1 = _fc1(8)
    t = cm.layer_time(fc1, "bf16")
    one = cm.layer_time(replace(fc1, expert_role=None), "bf16")  # not grouped: one launch
    assert t.host_fwd_s - one.host_fwd_s == pytest.approx(7 * 9.68e-6)
    assert (t.host_s - t.host_fwd_s) - (one.host_s - one.host_fwd_s) == pytest.approx(
        2 * 7 * 9.68e-6
    )
    # the GPU side is the grouped GEMM's own (perfmodel.compute.grouped): unchanged here
    assert t.fwd_s == cm.layer_time(fc1, "bf16").fwd_s


def test_graph_mode_has_no_per_expert_host_cost() -> None:
    """A captured CUDA graph replays its launches without the host (host_dispatch_s = 0)."""
    t = _model(0.0).layer_time(_fc1(16), "bf16")
    assert t.host_s == 0.0 and t.host_fwd_s == 0.0


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), st.sampled_from([2, 4, 8]))
def test_more_local_experts_never_cost_less_host(local: int, factor: int) -> None:
    cm = _model(EAGER)
    few = cm.layer_time(_fc1(local), "bf16")
    many = cm.layer_time(_fc1(min(128, local * factor)), "bf16")
    assert many.host_s >= few.host_s and many.host_fwd_s >= few.host_fwd_s


SMALL = {
    "hidden": 256, "layers": 2, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "top_k": 2,
    "seq_len": 256, "vocab": 1024,
}  # fmt: skip


def _moe(experts: int, software: str = "megatron-core") -> Scenario:
    return Scenario(system="dgx-h100", gpus=1, model="moe", model_args={**SMALL,
                    "experts": experts}, batch_per_gpu=2, microbatch=1, precision="bf16",
                    software=software, fidelity="analytic")  # fmt: skip


def test_host_bound_expert_launches_stall_the_gpu_after_the_sync() -> None:
    """A tiny MoE whose 64 local experts' launches take longer to issue than the GPU takes to
    run them: the GPU's wait after each dispatcher's synchronisation is the flow shop's lead of
    the run from the dispatch, by hand from the layers' host and GPU times, and it includes the
    per-expert launches (it is larger than the same run priced with one launch per GEMM)."""
    sc = _moe(64)
    r = resolve(sc)
    step, costs = build_step(sc, r)
    w, _ = step_workload(sc, r, None)
    runs: list[list[tuple[float, float]]] = []
    flat: list[list[tuple[float, float]]] = []
    share = HOST_LAUNCH_SHARE * EAGER
    for la in w.layers:
        if la.expert_role is ExpertRole.DISPATCH:
            runs.append([])
            flat.append([])
        if runs:
            h, g = costs.layer_host_time(la)[0], costs.layer_time(la)[0]
            runs[-1].append((h, g))
            grouped = la.expert_role is ExpertRole.EXPERT and la.gemm is not None
            extra = (la.gemm.batch - 1) * share if grouped and la.gemm.batch > 1 else 0.0
            flat[-1].append((h - extra, g))
    expected = sum(dispatcher_sync_stall_s(run) for run in runs)
    without = sum(dispatcher_sync_stall_s(run) for run in flat)
    syncs = [t for t in step.graph.tasks if t.label.startswith("MoE dispatcher host sync F")]
    assert syncs and syncs[0].duration_s == pytest.approx(expected)
    assert expected > without + 63 * share  # at least one expert GEMM's extra launches exposed


@pytest.mark.parametrize("experts", [4, 16])
def test_more_local_experts_step_not_faster(experts: int) -> None:
    from perfmodel.api import predict

    few = predict(_moe(experts), baseline=False).iteration_time_s
    many = predict(_moe(4 * experts), baseline=False).iteration_time_s
    assert many >= few
