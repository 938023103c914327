"""The input-pipeline model (perfmodel.host): hand-computed per-step costs, the step bound, the
framework loops, and the issue-17 acceptance case (ResNet-50 ImageNet on a DGX-1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.api import Scenario, predict, resolve, system_costs
from perfmodel.cli import main
from perfmodel.dtypes import Precision
from perfmodel.errors import ConfigError, InfeasiblePlanError
from perfmodel.host.input_pipeline import (
    CIFAR_CPU_S,
    IMAGENET_JPEG_BYTES,
    IMAGENET_JPEG_CPU_S,
    DatasetKind,
    InputPipeline,
    LoaderKind,
    PipelineScope,
    input_pipeline,
)

# ResNet-50 AMP with channels_last on a DGX-1V, as NVIDIA DeepLearningExamples runs it
DGX1 = Scenario(
    system="dgx1-v100",
    model="resnet50",
    batch_per_gpu=256,
    precision="fp16",
    memory_format="nhwc",
    fidelity="analytic",
)


def _pipe(sc: Scenario, samples: float) -> InputPipeline | None:
    r = resolve(sc)
    costs = system_costs(r.topology, Precision.FP16, None, r.preset, r.memory_format)
    return input_pipeline(
        dataset=sc.dataset,
        preset=r.preset.name,
        topology=r.topology,
        gpus=r.topology.gpus[: r.num_gpus],
        replicas=r.plan.dp,
        samples_per_step=samples,
        costs=costs,
        loader=sc.data_loader,
        workers=sc.data_loader_workers,
    )


def test_constants_are_their_sources_arithmetic() -> None:
    # Dell Ready Solutions v1.0: 33% of 40 cores at 2,940 images/s
    assert IMAGENET_JPEG_CPU_S == pytest.approx(4.49e-3, rel=1e-3)
    assert IMAGENET_JPEG_BYTES == pytest.approx(1_448_283_629_516 / 12_811_670, rel=0.01)


def test_dgx1_four_workers_golden() -> None:
    """8 processes x 4 workers on 2 x 20 cores: (40 - 8) / 8 = 4 cores each; 256 samples at
    4.49 ms per core: 256 x 4.49 ms / 4 = 287.35 ms per step."""
    p = _pipe(replace(DGX1, dataset="imagenet-jpeg", data_loader_workers=4), 8 * 256)
    assert p is not None
    assert (p.server_cores, p.pipelines_per_server, p.parallelism) == (40, 8, 4.0)
    assert p.samples_per_pipeline == 256
    assert p.prep_s == pytest.approx(256 * 13.2 / 2940 / 4)
    assert p.overlapped and p.pinned and p.scope is PipelineScope.PER_PROCESS


def test_more_workers_than_cores_are_capped() -> None:
    p8 = _pipe(replace(DGX1, dataset="imagenet-jpeg", data_loader_workers=8), 8 * 256)
    p2 = _pipe(replace(DGX1, dataset="imagenet-jpeg", data_loader_workers=2), 8 * 256)
    assert p8 is not None and p2 is not None
    assert p8.parallelism == 4.0  # 40 cores, 8 training processes
    assert p2.parallelism == 2.0 and p2.prep_s == pytest.approx(2 * p8.prep_s)


def test_copy_shares_the_switch_uplinks() -> None:
    """One GPU copies alone; eight share the DGX-1's PCIe switch uplinks (two GPUs per switch)."""
    one = _pipe(replace(DGX1, gpus=1, dataset="imagenet-jpeg"), 256)
    eight = _pipe(replace(DGX1, dataset="imagenet-jpeg"), 8 * 256)
    assert one is not None and eight is not None
    assert eight.copy_s > one.copy_s > 0


def test_dali_has_no_cpu_cost_and_copies_jpegs() -> None:
    p = _pipe(replace(DGX1, dataset="imagenet-jpeg", data_loader="dali"), 8 * 256)
    q = _pipe(replace(DGX1, dataset="imagenet-jpeg"), 8 * 256)
    assert p is not None and q is not None
    assert p.prep_s == 0.0 and p.loader is LoaderKind.DALI
    # 113 KB JPEGs instead of 602 KB float32 crops
    assert p.copy_s < q.copy_s * IMAGENET_JPEG_BYTES / (224 * 224 * 3 * 4) * 1.5


def test_step_time_rules() -> None:
    base = dict(
        dataset=DatasetKind.CIFAR_MEMORY,
        loader=LoaderKind.PYTORCH,
        scope=PipelineScope.PER_PROCESS,
        pipelines_per_server=1,
        samples_per_pipeline=128,
        workers=4,
        parallelism=4.0,
        server_cores=16,
        cpu_s_per_sample=1e-4,
        prep_s=0.030,
        copy_s=0.002,
    )
    pinned = InputPipeline(**base, overlapped=True, pinned=True)
    pageable = InputPipeline(**base, overlapped=True, pinned=False)
    sync = InputPipeline(**base, overlapped=False, pinned=False)
    assert pinned.step_time(0.020) == pytest.approx(0.030)  # input-bound: max
    assert pinned.step_time(0.050) == pytest.approx(0.050)  # GPU-bound
    assert pageable.step_time(0.050) == pytest.approx(0.052)  # the copy is in the step
    assert sync.step_time(0.050) == pytest.approx(0.082)  # everything adds
    s = pinned.summary(0.020)
    assert s["input_bound"] and s["slowdown"] == pytest.approx(0.5)
    assert "INPUT-BOUND" in pinned.describe(0.020) and "+50%" in pinned.describe(0.020)
    assert "keeps up" in pinned.describe(0.050)


def test_workers_zero_loads_synchronously() -> None:
    p = _pipe(replace(DGX1, dataset="imagenet-jpeg", data_loader_workers=0), 8 * 256)
    assert p is not None and not p.overlapped and p.parallelism == 1.0
    assert p.prep_s == pytest.approx(256 * IMAGENET_JPEG_CPU_S)


def test_keras_one_pipeline_for_all_replicas_under_the_gil() -> None:
    sc = Scenario(
        system="dell-c4140-4xv100",
        model="resnet44",
        batch_per_gpu=128,
        software="keras-multi-gpu",
        dataset="cifar-memory",
        data_loader_workers=4,
        fidelity="analytic",
    )
    p = _pipe(sc, 4 * 128)
    assert p is not None
    assert (p.scope, p.pipelines_per_server, p.samples_per_pipeline) == (
        PipelineScope.PER_SERVER,
        1,
        512,
    )
    assert p.parallelism == 1.0 and not p.pinned  # threads share the GIL; feed copies
    assert p.prep_s == pytest.approx(512 * CIFAR_CPU_S[LoaderKind.KERAS])


def test_synthetic_and_unset_change_nothing() -> None:
    assert _pipe(replace(DGX1, dataset="synthetic"), 2048) is None
    a = predict(DGX1, baseline=False)
    b = predict(replace(DGX1, dataset="synthetic"), baseline=False)
    assert a.iteration_time_s == b.iteration_time_s and a.notes == b.notes


def test_bad_input_names_the_value() -> None:
    with pytest.raises(ConfigError, match=r"unknown scenario\.dataset 'imagenet-png'"):
        predict(replace(DGX1, dataset="imagenet-png"), baseline=False)
    with pytest.raises(ConfigError, match="workers must be an integer >= 0, got -1"):
        predict(replace(DGX1, dataset="cifar-memory", data_loader_workers=-1), baseline=False)
    with pytest.raises(ConfigError, match=r"unknown scenario\.data_loader 'opencv'"):
        predict(replace(DGX1, dataset="cifar-memory", data_loader="opencv"), baseline=False)


def test_single_process_stacks_are_refused_across_servers() -> None:
    sc = Scenario(system="dgx1-v100", nodes=2, gpus=16, model="resnet50", batch_per_gpu=64)
    with pytest.raises(InfeasiblePlanError, match="train across servers with horovod"):
        resolve(replace(sc, software="keras-multi-gpu"))
    with pytest.raises(InfeasiblePlanError, match="pytorch-ddp"):
        resolve(replace(sc, software="pytorch-dataparallel"))
    resolve(replace(sc, software="keras-multi-gpu", nodes=1, gpus=8))  # one server: fine


def test_issue17_resnet50_dgx1_input_bound_with_four_workers_not_with_dali() -> None:
    """Done-when of issue 17: 4 loader workers per GPU make the DGX-1 step input-bound (and say
    by how much); DALI lifts the bound. More workers do not: the 40 cores are the limit."""
    gpu_only = predict(DGX1, baseline=False).iteration_time_s
    four = predict(replace(DGX1, dataset="imagenet-jpeg", data_loader_workers=4), baseline=False)
    assert four.iteration_time_s == pytest.approx(256 * IMAGENET_JPEG_CPU_S / 4)
    assert four.iteration_time_s > 1.1 * gpu_only
    note = next(n for n in four.notes if n.startswith("input pipeline"))
    pct = round(100 * (four.iteration_time_s / gpu_only - 1))
    assert "INPUT-BOUND" in note and f"+{pct}%" in note
    dali = predict(replace(DGX1, dataset="imagenet-jpeg", data_loader="dali"), baseline=False)
    assert dali.iteration_time_s == pytest.approx(gpu_only)
    assert any("keeps up" in n for n in dali.notes)
    eight = predict(replace(DGX1, dataset="imagenet-jpeg", data_loader_workers=8), baseline=False)
    assert eight.iteration_time_s == pytest.approx(four.iteration_time_s)


def test_cli_flags_and_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "256"]
    args += ["--precision", "fp16", "--memory-format", "nhwc", "--fidelity", "analytic"]
    assert main([*args, "--dataset", "imagenet-jpeg", "--data-loader-workers", "4"]) == 0
    assert "INPUT-BOUND" in capsys.readouterr().out
    assert main([*args, "--dataset", "imagenet-jpeg", "--data-loader", "dali"]) == 0
    assert "keeps up" in capsys.readouterr().out
    code = main([*args, "--software", "keras-multi-gpu", "--nodes", "2", "--gpus", "16"])
    assert code == 2
    assert "horovod" in capsys.readouterr().err


def test_every_software_preset_has_a_framework_loop() -> None:
    from perfmodel.host.input_pipeline import FRAMEWORK_LOOPS
    from perfmodel.parallel.software import PRESETS

    assert set(FRAMEWORK_LOOPS) == set(PRESETS)


def test_per_server_threaded_loops_are_priced_as_tf_data() -> None:
    from perfmodel.host.input_pipeline import FRAMEWORK_LOOPS, LoaderKind, PipelineScope

    for name, cites in (
        ("tf-mirrored", "tf.data performance guide"),
        ("tf-replicated", "tf.data performance guide"),
        ("cuda-convnet2", "cuda-convnet2 convdata.py"),
        ("crossbow", "Koliousis et al., Crossbow"),
    ):
        loop = FRAMEWORK_LOOPS[name]
        assert (loop.loader, loop.workers, loop.scope) == (
            LoaderKind.TF_DATA,
            None,
            PipelineScope.PER_SERVER,
        )
        assert loop.prefetch and loop.pinned_copy and loop.single_node is None
        assert len(loop.sources) == 1 and loop.sources[0].startswith(cites)
