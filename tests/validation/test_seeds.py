"""The founding cases (``../shared/data/seeds.jsonl``): predicted vs measured, with the
acceptance tolerances of issue 5. Known misses are marked ``xfail(strict=True)`` with the
finding that explains them, so they are reported on every run and flagged when they start to
pass; the printed table shows every number.

Predictions come from ``examples/seeds.py`` (the same code the examples print); measured values
are read from the seed rows here, never copied into the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import seeds


def _row(rows: list[dict], rid: str) -> dict:
    return next(r for r in rows if r["id"] == rid)


def _mmss(text: str) -> float:
    m, s = text.split(":")
    return 60 * int(m) + int(s)


@pytest.fixture(scope="module")
def ctepower_epochs() -> dict[int, float]:
    return {
        n: seeds.predict(seeds.ctepower_scenario("resnet50v2", n, 256)).epoch_time_s
        for n in (1, 2, 4)
    }


def test_print_seed_table(seed_rows: list[dict], ctepower_epochs: dict[int, float]) -> None:
    print("\n=== seed cases: predicted vs measured ===")
    for n in (1, 2, 4):
        meas = _row(seed_rows, f"seed-ctepower-rn50v2-{n}g")["value"]
        print(
            f"CTE-POWER ResNet50V2 epoch {n} GPU: measured {meas:.0f} s, predicted {ctepower_epochs[n]:.1f} s ({100 * (ctepower_epochs[n] / meas - 1):+.1f}%)"
        )
    for r in seeds.navid() + seeds.krizhevsky()[0] + [seeds.dettmers_40gbe()]:
        print(
            f"{r.case}: measured {r.measured:.4g}, predicted {r.predicted:.4g} ({100 * r.error:+.1f}%)"
        )
    for sw, row in seeds.iris().items():
        print(
            f"Iris ResNet-44 {sw}: "
            + ", ".join(
                f"{n} GPUs {v:.2f}x" if isinstance(v, float) else f"{n} GPUs refused"
                for n, v in row.items()
            )
        )
    sc = seeds.ctepower_scaling()
    print(
        "speedups 1/2/4 GPUs: ResNet50V2",
        [round(x, 2) for x in sc["resnet50v2"]],
        "ResNet152V2",
        [round(x, 2) for x in sc["resnet152v2"]],
    )


@pytest.mark.parametrize(
    "n",
    [1, 2, 4],
)
def test_ctepower_resnet50v2_epoch_within_15_percent(
    seed_rows: list[dict], ctepower_epochs: dict[int, float], n: int
) -> None:
    meas = _row(seed_rows, f"seed-ctepower-rn50v2-{n}g")["value"]
    assert ctepower_epochs[n] == pytest.approx(meas, rel=0.15)


@pytest.mark.parametrize(
    "n",
    [
        2,
        pytest.param(
            4,
            marks=pytest.mark.xfail(
                strict=True,
                reason="predicted 3.49x vs measured 3.75x: the MirroredStrategy host split cost fitted on MareNostrum 5 (x86 + PCIe hosts) over-charges the POWER9 node, whose CPU-GPU links are NVLink",
            ),
        ),
    ],
)
def test_ctepower_scaling_shape(
    seed_rows: list[dict], ctepower_epochs: dict[int, float], n: int
) -> None:
    """Speedups on 2 and 4 GPUs within 0.15x of the measured 45/24 and 45/12."""
    m = {k: _row(seed_rows, f"seed-ctepower-rn50v2-{k}g")["value"] for k in (1, n)}
    assert ctepower_epochs[1] / ctepower_epochs[n] == pytest.approx(m[1] / m[n], abs=0.15)


@pytest.mark.xfail(
    strict=True,
    reason="finding: with the MirroredStrategy per-sample host cost fitted on MareNostrum 5, where the "
    "same author's ResNet152V2 scales BETTER than ResNet50V2 (3.3x vs 2.8x on 4 GPUs), the model "
    "predicts the same on CTE-POWER; the seed's plot-only statement (152 worse) is not reproduced. "
    "The input pipeline is not the cause: tf.data over the AC922's 40 cores prepares a 4-GPU step "
    "of CIFAR-10 in 1.6 ms (ResNet50V2) / 0.8 ms (ResNet152V2) beside GPU steps of 241 / 319 ms "
    "(test_ctepower_input_pipeline_keeps_up), and an input bound would hurt the lighter ResNet50V2 "
    "more, not ResNet152V2",
)
def test_resnet152v2_scales_worse_than_resnet50v2() -> None:
    sc = seeds.ctepower_scaling()
    assert sc["resnet152v2"][2] < sc["resnet50v2"][2] - 0.1


def test_navid_keras_small_cnn_speedup(seed_rows: list[dict]) -> None:
    t1, t2 = _row(seed_rows, "seed-navid-mnist-keras-2g")["value"]
    pred = seeds.navid_epoch_time(1, mnist=True) / seeds.navid_epoch_time(2, mnist=True)
    assert pred == pytest.approx(t1 / t2, abs=0.15)


@pytest.mark.xfail(
    strict=True,
    reason="finding: the input pipeline is not the cause (one DataLoader, 4 workers, prepares the "
    "global batch of 128 in 2 ms beside a 25 ms GPU step; the same global batch on 1 and 2 GPUs, so "
    "an input bound could only pull the ratio toward 1.0, never to 1.29). "
    "nn.DataParallel's per-step broadcast + reduce of 80 MB over PCIe (~13 ms) "
    "exceeds half of the predicted 25 ms step, so 0.93x is predicted; the measured 1.29x needs a "
    "1-GPU step of ~50 ms, which the model gives without FP32 Winograd (55 ms, 1.28x). Whether "
    "cuDNN 7.1 on a 1080 Ti used Winograd for 32x32 CIFAR maps needs a Pascal measurement (the "
    "datasheet factor 3.0 is from V100 DeepBench rows; the H100 measures 1.07)",
)
def test_navid_pytorch_vgg19bn_speedup(seed_rows: list[dict]) -> None:
    t1, t2 = (_mmss(v) for v in _row(seed_rows, "seed-navid-vgg19bn-cifar10-pytorch-2g")["value"])
    pred = seeds.navid_epoch_time(1, mnist=False) / seeds.navid_epoch_time(2, mnist=False)
    assert pred == pytest.approx(t1 / t2, abs=0.15)


def test_ctepower_input_pipeline_keeps_up() -> None:
    """tf.data over the POWER9 node's cores is far faster than the GPU step (both models, 4 GPUs)."""
    from dataclasses import replace

    for model, batch in (("resnet50v2", 256), ("resnet152v2", 128)):
        sc = replace(seeds.ctepower_scenario(model, 4, batch), dataset="cifar-memory")
        r = seeds.predict(sc, baseline=False)
        assert any("GPU-bound (input pipeline keeps up)" in n for n in r.notes)


@pytest.fixture(scope="module")
def iris() -> dict[str, dict[int, float | str]]:
    return seeds.iris()


@pytest.mark.parametrize("n", [4, 8, 12])
def test_iris_pytorch_scales_best(iris: dict[str, dict[int, float | str]], n: int) -> None:
    """Iris cluster (ResNet-44, CIFAR-10): PyTorch > Horovod from 4 GPUs on (speedup over each
    stack's own single GPU)."""
    assert iris["pytorch-ddp"][n] > iris["horovod"][n]


def test_iris_keras_scales_worst_on_one_server(iris: dict[str, dict[int, float | str]]) -> None:
    """Keras multi_gpu_model splits the training but not the loading: below Horovod on 4 GPUs."""
    assert iris["horovod"][4] > iris["keras-multi-gpu"][4]
    assert iris["keras-multi-gpu"][4] < 2.0  # one input pipeline for all replicas
    notes = seeds.iris_input_notes()
    assert "INPUT-BOUND" in notes["keras-multi-gpu"]
    assert "keeps up" in notes["pytorch-ddp"] and "keeps up" in notes["horovod"]


@pytest.mark.parametrize("n", [8, 12])
def test_iris_keras_beyond_one_server_only_through_horovod(
    iris: dict[str, dict[int, float | str]], n: int
) -> None:
    refusal = iris["keras-multi-gpu"][n]
    assert isinstance(refusal, str) and "horovod" in refusal and "one server" in refusal


@pytest.mark.xfail(
    strict=True,
    reason="finding: the measured points lie outside McCandlish's model family: T(32)/T(64) = "
    "1134/361 = 3.1, but S(32)/S(64) = (1 + B/32)/(1 + B/64) < 2 for any B_noise and a step of 32 "
    "samples is never slower than one of 64, so T(32)/T(64) < 2. Fits without the optimum's row "
    "are therefore unstable and, with perfmodel's step time (2.1 ms + 0.105 ms/sample on the Titan "
    "X: the GPU is 87% busy at B = 128; CIFAR-10 from memory through tf.data keeps up), put the "
    "optimum at 1024. The measured curve implies a fixed per-step cost of ~270 samples' worth "
    "(data-only fit a/b = 77.7/0.288), 13x the GPU model's 20: a per-step host cost of the 2019 "
    "TensorFlow loop that the graph-mode presets do not carry (kept as calibrated, issue 17)",
)
def test_crossbow_optimum_batch_within_factor_1_5(seed_rows: list[dict]) -> None:
    measured = {
        r["batch"]["global"]: float(r["value"])
        for r in seed_rows
        if r["kind"] == "time_to_accuracy" and "crossbow" in r["id"]
    }
    best_measured = min(measured, key=measured.__getitem__)
    predicted, _ = seeds.crossbow_optimum(measured)
    assert best_measured / 1.5 <= predicted <= best_measured * 1.5


@pytest.fixture(scope="module")
def kriz() -> tuple[list, dict[int, float]]:
    return seeds.krizhevsky()


@pytest.mark.parametrize(
    "n",
    [4, 8],
)
def test_krizhevsky_hybrid_within_15_percent(
    seed_rows: list[dict], kriz: tuple[list, dict[int, float]], n: int
) -> None:
    meas = _row(seed_rows, f"seed-krizhevsky-hybrid-{n}g")["value"]
    pred = next(r.predicted for r in kriz[0] if f", {n} K20" in r.case)
    assert pred == pytest.approx(meas, rel=0.15)


def test_krizhevsky_hybrid_beats_pure_data_parallelism(kriz: tuple[list, dict[int, float]]) -> None:
    hybrid = {4: kriz[0][0].predicted, 8: kriz[0][1].predicted}
    for n in (4, 8):
        assert hybrid[n] > kriz[1][n]


def test_dettmers_gradient_transfer_estimate(seed_rows: list[dict]) -> None:
    """Back-of-envelope 0.75 ms (4 MB at 40 Gbit/s = 0.8 ms raw); ours adds link efficiency and latency."""
    meas_ms = _row(seed_rows, "seed-dettmers-dp-gradient-40gbe")["value"]
    pred = seeds.dettmers_40gbe().predicted
    assert 0.8 * meas_ms * 1e-3 < pred < 1.6 * meas_ms * 1e-3
