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
    "predicts the same on CTE-POWER; the seed's plot-only statement (152 worse) is not reproduced",
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
    reason="finding: nn.DataParallel's per-step broadcast + reduce of 80 MB over PCIe (~13 ms) "
    "exceeds half of the predicted 25 ms step, so 0.93x is predicted; the measured 1.29x needs a "
    "1-GPU step of ~50 ms, which the model gives without FP32 Winograd (55 ms, 1.28x). Whether "
    "cuDNN 7.1 on a 1080 Ti used Winograd for 32x32 CIFAR maps needs a Pascal measurement (the "
    "datasheet factor 3.0 is from V100 DeepBench rows; the H100 measures 1.07)",
)
def test_navid_pytorch_vgg19bn_speedup(seed_rows: list[dict]) -> None:
    t1, t2 = (_mmss(v) for v in _row(seed_rows, "seed-navid-vgg19bn-cifar10-pytorch-2g")["value"])
    pred = seeds.navid_epoch_time(1, mnist=False) / seeds.navid_epoch_time(2, mnist=False)
    assert pred == pytest.approx(t1 / t2, abs=0.15)


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
