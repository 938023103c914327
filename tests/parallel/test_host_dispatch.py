"""Software presets set the eager host-dispatch floor; DataParallel dispatch counts backward
kernels; SystemCosts honours its fidelity."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from perfmodel.api import Scenario, predict, resolve, system_costs
from perfmodel.compute.params import HOST_DISPATCH_S
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError
from perfmodel.parallel.costs import SystemCosts
from perfmodel.parallel.host_lead import step_kernels
from perfmodel.parallel.plan import DPMode, ParallelismPlan
from perfmodel.parallel.software import PRESETS, get_preset
from perfmodel.topology import load_system
from perfmodel.workload.layers import LayerCost, LayerKind, Workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_synthetic import FakeCosts, lower_synthetic

PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "h100-sxm5-80gb.json"
EAGER = {
    "pytorch-ddp",
    "pytorch-apex",
    "pytorch-dataparallel",
    "fsdp",
    "deepspeed-zero1",
    "deepspeed-zero2",
    "deepspeed-zero3",
    "nemo",
    "megatron",
    "megatron-core",
    "torchtitan",
    "internevo",
}


def test_pytorch_presets_are_eager_graph_modes_are_not() -> None:
    for name, p in PRESETS.items():
        want = HOST_DISPATCH_S["pytorch-eager"] if name in EAGER else 0.0
        assert p.eager is (name in EAGER), name
        assert p.host_dispatch_s() == want, name
        # a measured eager cost replaces the default only for eager stacks
        assert p.host_dispatch_s(5e-6) == (5e-6 if name in EAGER else 0.0), name
    with pytest.raises(ConfigError, match="dispatch_mode"):
        dataclasses.replace(get_preset("pytorch-ddp"), dispatch_mode="jax")


def _sc(software: str, **kw: object) -> Scenario:
    base = dict(
        system="dgx-h100",
        gpus=1,
        model="resnet50",
        batch_per_gpu=8,
        precision="bf16",
        fidelity="analytic",
        software=software,
    )
    base.update(kw)
    return Scenario(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("software", "want"),
    [
        ("pytorch-ddp", HOST_DISPATCH_S["pytorch-eager"]),
        ("megatron", HOST_DISPATCH_S["pytorch-eager"]),
        ("horovod", 0.0),
    ],
)
def test_pipeline_compute_params_follow_the_preset(software: str, want: float) -> None:
    r = resolve(_sc(software))
    costs = system_costs(r.topology, r.precision, None, r.preset)
    assert costs.compute.params.host_dispatch_s == pytest.approx(want)


def test_eager_floor_slows_small_batches_only() -> None:
    # same plan and comm (one GPU); pytorch-ddp (eager) vs tf-replicated (graph), both in
    # channels_last so that only the host differs (PyTorch's default is NCHW)
    def run(s: str, **kw: object) -> object:
        return predict(_sc(s, memory_format="nhwc", **kw), baseline=False)

    small = [run(s) for s in ("pytorch-ddp", "tf-replicated")]
    assert small[0].iteration_time_s > 1.05 * small[1].iteration_time_s
    # the GPU time is the same; the eager host issue is what the GPU waits for
    assert small[0].compute_time_s == pytest.approx(small[1].compute_time_s)
    assert small[0].breakdown.host_s > 0 and small[1].breakdown.host_s == 0
    # a large batch: the GPU outruns the host after the first kernels; only their issue (the
    # step's start lead, under 0.5 % here) is the host's
    big = [run(s, batch_per_gpu=256) for s in ("pytorch-ddp", "tf-replicated")]
    # the optimizer steps differ (torch.optim's foreach SGD makes more passes than TF's fused
    # per-variable update); the rest of the step is the same once the GPU is the bottleneck
    assert big[0].breakdown.optimizer_s > big[1].breakdown.optimizer_s
    # and the eager step's start lead (its first kernels' issue), under 0.5 % here
    rest = [b.iteration_time_s - b.breakdown.optimizer_s for b in big]
    assert 0 < rest[0] - rest[1] < 5e-3 * rest[1]


def test_host_issue_task_per_pipeline_stage() -> None:
    """Each stage's host issues its own chunks' kernels for every micro-batch."""
    sc = _sc("megatron", model="gpt", model_args={"layers": 4, "hidden": 256, "heads": 4,
             "seq_len": 128}, batch_per_gpu=None, global_batch=8, gpus=2, pp=2,
             microbatch=1)  # fmt: skip
    r = resolve(sc)
    from perfmodel.pipeline.lower import build_step

    step, costs = build_step(sc, r)
    issue = [t for t in step.graph.tasks if t.label == "kernel issue (eager host)"]
    assert len(issue) == 2 and {t.device for t in issue} == set(step.graph.devices)
    h = costs.compute.params.host_dispatch_s
    assert all(t.duration_s > 8 * h for t in issue)  # 8 micro-batches, several kernels each


@pytest.mark.skipif(not PROFILE.exists(), reason="H100 profile not in this checkout")
def test_gpu_profile_bare_launch_is_not_the_training_host_cost() -> None:
    """A torch (GPU) profile's ``launch.eager`` times a bare 1-element kernel (9.68 us on the
    H100 host), a lower bound for a training step's ops (35.55 us per modelled kernel, fitted on
    the same host's host-bound steps): the preset's training value is used; the rest of the
    calibrated parameters are kept."""
    from perfmodel.calibration import load_profile

    prof = load_profile(PROFILE)
    assert prof.fits["launch.eager"].values["launch_s"] < 0.5 * HOST_DISPATCH_S["pytorch-eager"]
    for software, want in (
        ("pytorch-ddp", HOST_DISPATCH_S["pytorch-eager"]),
        ("tf-replicated", 0.0),
    ):
        r = resolve(_sc(software, calibration=str(PROFILE)))
        costs = system_costs(r.topology, r.precision, str(PROFILE), r.preset)
        assert costs.compute.params.host_dispatch_s == pytest.approx(want)
        assert costs.compute.params.memory_efficiency == pytest.approx(
            prof.compute_params.memory_efficiency
        )


def test_cpu_profile_keeps_its_own_dispatch_cost() -> None:
    """On the profiled device itself with another framework (NumPy on the CPU) the profile's
    own dispatch cost is the only one that applies."""
    cpu = PROFILE.parent / "cpu-dev-amd-epyc-1thread.json"
    if not cpu.exists():
        pytest.skip("CPU profile not in this checkout")
    from perfmodel.calibration import load_profile

    prof = load_profile(cpu)
    sc = Scenario(system="calibrated", calibration=str(cpu), model="mlp",
                  model_args={"widths": [64, 64, 10]}, batch_per_gpu=8, fidelity="analytic")  # fmt: skip
    r = resolve(sc)
    costs = system_costs(r.topology, r.precision, str(cpu), r.preset)
    assert costs.compute.params.host_dispatch_s == pytest.approx(
        prof.compute_params.host_dispatch_s
    )


def _layer(i: int, kernels: int, bwd_kernels: int | None) -> LayerCost:
    return LayerCost(
        name=f"l{i}",
        kind=LayerKind.LINEAR,
        fwd_flop=1e9,
        bwd_input_flop=1e9,
        bwd_weight_flop=1e9,
        params=1000,
        fwd_bytes=0.0,
        bwd_bytes=0.0,
        activation_bytes=1e6,
        output_shape=(1, 1000),
        block=i,
        kernels=kernels,
        bwd_kernels=bwd_kernels,
    )


def test_dataparallel_dispatch_counts_backward_kernels() -> None:
    layers = (_layer(0, 2, 5), _layer(1, 1, None), _layer(2, 3, 0))
    assert [step_kernels(x) for x in layers] == [7, 3, 3]
    wl = Workload("k", layers, 1, Precision.FP32, 3000)
    dp = 4
    step = lower_synthetic(
        ParallelismPlan(dp=dp, dp_mode=DPMode.GPU_MERGE),
        wl,
        FakeCosts(bandwidth_Bps=1e9),
        batch_per_replica=1,
        software="pytorch-dataparallel",
    )
    (host,) = [t for t in step.graph.tasks if "GIL" in t.label]
    per_op = get_preset("pytorch-dataparallel").dispatch_per_op_s
    assert host.duration_s == pytest.approx(dp * (7 + 3 + 3) * per_op)


def test_system_costs_fidelity_reaches_the_comm_model() -> None:
    topo = load_system("dgx1-v100")
    for fid in ("analytic", "simulated"):
        c = SystemCosts(topo, Precision.FP32, fidelity=fid)
        assert c.comm.fidelity == fid
    with pytest.raises(ConfigError, match="fidelity"):
        SystemCosts(topo, Precision.FP32, fidelity="exact")
    group = topo.gpus[:4]
    from perfmodel.ops import CollectiveOp

    a = SystemCosts(topo, Precision.FP32).collective_time(CollectiveOp.ALLREDUCE, 64e6, group)
    s = SystemCosts(topo, Precision.FP32, fidelity="simulated").collective_time(
        CollectiveOp.ALLREDUCE, 64e6, group
    )
    assert s > 0 and a > 0 and s == pytest.approx(a, rel=0.5)
