"""The input-pipeline model against published real-data vs synthetic-data training throughput.

Source: tensorflow/tensorflow @5984ffefd320, ``tensorflow/docs_src/performance/benchmarks.md``,
"Details for NVIDIA DGX-1 (NVIDIA Tesla P100)", tables "Training synthetic data" and "Training
real data" (tf_cnn_benchmarks 9165a70, ImageNet on local SSD, May 2017). Same hardware, same
software, same batch; only the input differs: the ratio ``real / synthetic`` isolates the input
pipeline (JPEG decode and augmentation on the host, tf_cnn_benchmarks' own threaded pipeline) from
the GPU model's own error. The synthetic rows are ``published.jsonl``'s ``tfbench-dgx1p100-*`` and
are mapped exactly as the training tier maps them; the real-data values are transcribed below.
"Training AlexNet with real data on 8 GPUs was excluded ... due to it maxing out the input
pipeline" (the source), so that row is judged as "input-bound" only.

Predicted ratio: ``predict(dataset="imagenet-jpeg") / predict()`` of the same scenario (the preset's
tf.data loop: one pipeline per server over all cores; 4.49 ms per image per core).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_training_validation as tv

from perfmodel.api import predict

#: "Training real data", DGX-1 P100 (images/s); None: not measured ("maxing out the input pipeline")
REAL_DATA: dict[tuple[str, int], float | None] = {
    ("inceptionv3", 1): 142,
    ("inceptionv3", 2): 278,
    ("inceptionv3", 4): 551,
    ("inceptionv3", 8): 1079,
    ("resnet-50", 1): 218,
    ("resnet-50", 2): 425,
    ("resnet-50", 4): 853,
    ("resnet-50", 8): 1630,
    ("resnet-152", 1): 91.4,
    ("resnet-152", 2): 179,
    ("resnet-152", 4): 359,
    ("resnet-152", 8): 708,
    ("alexnet", 1): 2890,
    ("alexnet", 2): 4448,
    ("alexnet", 4): 7105,
    ("alexnet", 8): None,
    ("vgg16", 1): 154,
    ("vgg16", 2): 284,
    ("vgg16", 4): 534,
    ("vgg16", 8): 898,
}


@pytest.fixture(scope="module")
def ratios(
    published_rows: list[dict],
) -> dict[tuple[str, int], tuple[float | None, float, float]]:
    """(model, GPUs) -> (measured real/synthetic, predicted real/synthetic, predicted real)."""
    synth = {r["id"]: r for r in published_rows if r["id"].startswith("tfbench-dgx1p100-")}
    out = {}
    for (model, n), real in REAL_DATA.items():
        row = synth[f"tfbench-dgx1p100-{model}-{n}g"]
        m = tv.map_row(row)
        assert not isinstance(m, str), m
        base = predict(m.scenario, baseline=False).throughput_samples_per_s
        fed = predict(replace(m.scenario, dataset="imagenet-jpeg"), baseline=False)
        measured = None if real is None else real / float(row["value"])
        out[(model, n)] = (
            measured,
            fed.throughput_samples_per_s / base,
            fed.throughput_samples_per_s,
        )
    return out


def test_print_input_validation_table(ratios) -> None:
    print("\n=== input pipeline: real / synthetic data throughput, DGX-1 P100 (TF benchmarks) ===")
    print(
        f"{'model':<12}{'GPUs':>5}{'ratio meas':>11}{'pred':>7}{'error':>8}"
        f"{'real img/s meas':>17}{'pred':>8}"
    )
    errs = []
    for (model, n), (meas, pred, real_pred) in ratios.items():
        real = REAL_DATA[(model, n)]
        if meas is None:
            print(
                f"{model:<12}{n:>5}{'max-out':>11}{pred:7.3f}{'':>8}{'-':>17}{real_pred:8.0f}"
                "  (source: input pipeline maxed out)"
            )
            continue
        errs.append(pred / meas - 1)
        print(
            f"{model:<12}{n:>5}{meas:11.3f}{pred:7.3f}{100 * (pred / meas - 1):+7.1f}%"
            f"{real:17.0f}{real_pred:8.0f}"
        )
    print(
        f"rows {len(errs)}, median |error| {100 * statistics.median(abs(e) for e in errs):.1f}%, "
        f"worst {100 * max(errs, key=abs):+.1f}%"
    )


def test_median_ratio_error_small(ratios) -> None:
    errs = [abs(p / m - 1) for m, p, _ in ratios.values() if m is not None]
    assert statistics.median(errs) < 0.05


def test_alexnet_eight_gpus_is_input_bound(ratios) -> None:
    """The source could not measure it: the input pipeline maxed out. The model says so too."""
    assert ratios[("alexnet", 8)][1] < 0.7


def test_heavy_models_are_not_input_bound(ratios) -> None:
    for model in ("inceptionv3", "resnet-50", "resnet-152", "vgg16"):
        for n in (1, 2, 4, 8):
            assert ratios[(model, n)][1] > 0.99, (model, n)


@pytest.mark.xfail(
    strict=True,
    reason="finding: AlexNet with real data loses 21% on 2 GPUs (4,448 vs 5,658 images/s) although "
    "4 GPUs show the pipeline delivers >= 7,105 images/s, so the 2-GPU loss is not the decode "
    "throughput the model bounds ((2 x 16 - 1) cores / 4.49 ms = 6,904 images/s; on 4 GPUs the "
    "model predicts 6,904 real against 7,105 measured, -3%). Likewise VGG16 loses 17% on 8 GPUs at "
    "only 1,081 images/s. These losses come from something else the host does per step (not "
    "modelled: the pipeline's threads and the per-GPU feeding share the cores)",
)
def test_alexnet_two_gpus_within_10_percent(ratios) -> None:
    meas, pred, _ = ratios[("alexnet", 2)]
    assert pred == pytest.approx(meas, rel=0.10)
