"""perfmodel calibrate --device cpu --only input: per-sample loader costs measured here and used
by predictions through --calibration."""

from __future__ import annotations

from types import SimpleNamespace

from perfmodel.api import Scenario, predict
from perfmodel.cli import main
from perfmodel.host.input_pipeline import DatasetKind, LoaderKind
from perfmodel.host.measure import input_costs_of, input_only, measure_input_costs


def test_measure_covers_every_cpu_path() -> None:
    costs = measure_input_costs(samples=8, repeats=1)
    assert set(costs) == {
        (DatasetKind.IMAGENET_JPEG, LoaderKind.PYTORCH),
        (DatasetKind.IMAGENET_JPEG, LoaderKind.KERAS),
        (DatasetKind.CIFAR_MEMORY, LoaderKind.PYTORCH),
        (DatasetKind.CIFAR_MEMORY, LoaderKind.TF_DATA),
        (DatasetKind.CIFAR_MEMORY, LoaderKind.KERAS),
    }
    assert all(v > 0 for v in costs.values())
    # decoding a 500x375 JPEG costs more than augmenting a 32x32 array
    jpeg = costs[(DatasetKind.IMAGENET_JPEG, LoaderKind.PYTORCH)]
    assert jpeg > costs[(DatasetKind.CIFAR_MEMORY, LoaderKind.PYTORCH)]


def test_profile_measurements_to_costs() -> None:
    def m(kind: str, **params: str) -> SimpleNamespace:
        return SimpleNamespace(
            kind=SimpleNamespace(value=kind), params=params, timing=SimpleNamespace(median_s=2e-3)
        )

    ms = [m("input", dataset="imagenet-jpeg", loader="pytorch"), m("gemm")]
    assert input_costs_of(ms) == {(DatasetKind.IMAGENET_JPEG, LoaderKind.PYTORCH): 2e-3}
    assert not input_only(ms) and input_only(ms[:1])


def test_input_only_profile_feeds_a_gpu_prediction(tmp_path, capsys) -> None:
    out = tmp_path / "host.json"
    args = ["calibrate", "--device", "cpu", "--only", "input", "--budget", "20s", "-o", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    sc = Scenario(
        system="dgx1-v100",
        model="resnet50",
        batch_per_gpu=64,
        fidelity="analytic",
        dataset="imagenet-jpeg",
        data_loader_workers=4,
    )
    r = predict(Scenario(**{**sc.to_dict(), "calibration": str(out)}), baseline=False)
    note = next(n for n in r.notes if n.startswith("input pipeline"))
    default = next(n for n in predict(sc, baseline=False).notes if n.startswith("input pipeline"))
    assert "4.49 ms/sample/core" in default and "4.49 ms/sample/core" not in note
    # the GPU side is the datasheet model either way: an input-only profile fits any system
    gpu_only = predict(Scenario(**{**sc.to_dict(), "dataset": None}), baseline=False)
    assert r.iteration_time_s >= gpu_only.iteration_time_s * (1 - 1e-12)
