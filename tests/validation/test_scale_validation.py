"""Validation tier: behaviour at scale (``scale.jsonl``, issue 24).

Rows: InternEvo's InternLM-7B on 8 to 1,024 A100 over 4 x 100 Gb RoCE per node, ZeRO-1 over all
data-parallel ranks, tensor parallelism 1 and 2 (``--software internevo``; mapping and
assumptions in :mod:`perfmodel.accuracy_scale`), and nccl-tests ring all-reduce / all-gather bus
bandwidth at 8 GiB on 16 to 512 DGX B200 (``NCCL_ALGO=Ring``, NCCL 2.29). Every row is predicted
with the analytic executor and its signed error printed; nothing here feeds the model.

Targets (issue 24): InternEvo within 15% at every GPU count, the rings within 10%; per-GPU
throughput must fall with scale.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from perfmodel.accuracy_scale import ScaleResults, scale_results


@pytest.fixture(scope="module")
def results(shared_data: Path) -> ScaleResults:
    path = shared_data / "scale.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found (a checkout older than scale.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return scale_results(rows)


def _series(results: ScaleResults, tp: int) -> list[tuple[int, float, float]]:
    """(GPUs, predicted, measured) of the InternEvo series with tensor parallelism ``tp``."""
    return sorted(
        (int(p.row["hardware"]["gpus"]), p.predicted, p.measured)
        for p in results.training
        if int(p.row["plan"]["tp"]) == tp
    )


def test_scale_rows_report(results: ScaleResults) -> None:
    print("\n=== at scale (scale.jsonl, analytic executor) ===")
    print(f"{'row':36s} {'measured':>9s} {'predicted':>10s} {'error':>7s}  pred/meas vs 8 GPUs")
    for tp in (1, 2):
        series = _series(results, tp)
        p8, m8 = series[0][1], series[0][2]
        for p in results.training:
            if int(p.row["plan"]["tp"]) != tp:
                continue
            n = int(p.row["hardware"]["gpus"])
            rel = next((x / p8, y / m8) for g, x, y in series if g == n)
            print(
                f"{p.row['id']:36s} {p.measured:9.0f} {p.predicted:10.0f} {p.error:+7.1%}  "
                f"{rel[0]:.3f} / {rel[1]:.3f}"
            )
    for p in results.comm:
        print(f"{p.row['id']:36s} {p.measured:9.1f} {p.predicted:10.1f} {p.error:+7.1%}  GB/s")
    for name, done in (("InternEvo", results.training), ("B200 rings", results.comm)):
        e = [p.error for p in done]
        print(
            f"{name:10s} n={len(e):2d}  median |err| {statistics.median(map(abs, e)):6.1%}  "
            f"median signed {statistics.median(e):+6.1%}  worst {max(e, key=abs):+6.1%}"
        )


def test_every_scale_row_is_mapped_and_predicted(results: ScaleResults) -> None:
    assert not results.skipped and not results.failed, (results.skipped, results.failed)
    assert (len(results.training), len(results.comm)) == (16, 10)


@pytest.mark.parametrize("tp", [1, 2])
def test_per_gpu_throughput_falls_with_scale(results: ScaleResults, tp: int) -> None:
    """The stated physical reasons (slowest-GPU wait, ring latency over more ranks, owner
    broadcasts over the whole ZeRO group) make tokens/s per GPU fall from 16 GPUs on, and the
    1,024-GPU rate at least 10% below the 8-GPU one (measured: 44% and 27%)."""
    series = _series(results, tp)
    pred = [p for _, p, _ in series]
    assert all(b <= a for a, b in itertools.pairwise(pred[1:])), pred
    assert pred[-1] < 0.9 * pred[0]


@pytest.mark.xfail(
    strict=True,
    reason="finding: tp=1 at 256-1,024 GPUs stays 20-52% too fast (tp=2: within 17%). "
    "InternEvo's own zero1=-1 / zero1=8 comparison puts 2.7 s of the 1,024-GPU step in the "
    "owner broadcasts over the whole ZeRO group (~160 broadcasts of ~90 MB over 1,024 ranks, "
    "~17 ms each); NCCL's tuner (2.14, the release of the documented image) prices each at "
    "~5 ms with LL128 (4 us per ring step over the network), 0.9 s in all. The per-step "
    "latency this needs (15-19 us) matches NCCL's Simple protocol or an LL128-free network "
    "path (NIC behind the CPU), which the source's server (4 NICs for 8 GPUs, model not "
    "stated) may have; the 8-GPU rows are also 9% fast (compute model)",
)
def test_internevo_within_15_percent(results: ScaleResults) -> None:
    worst = max((p for p in results.training), key=lambda p: abs(p.error))
    assert abs(worst.error) <= 0.15, (worst.row["id"], worst.error)


@pytest.mark.xfail(
    strict=True,
    reason="finding: 4 to 32 DGX B200 reach 38.5-39 GB/s per NDR NIC where NVIDIA states "
    "46-48 GB/s for NCCL over NDR 400 (NVIDIA/nccl-tests#290) and 2 nodes reach 43: predicted "
    "+12-17% on 32-512 GPUs (+6-7% on 16). Ring latency at 8 GiB (NCCL 2.29 tuner, 14 us "
    "network steps, plateau 1.4) is 1-7% of the time; no sourced mechanism for a 10% loss from "
    "3 nodes on was found (rail-local rings meet no spine below 32 nodes)",
)
def test_b200_rings_within_10_percent(results: ScaleResults) -> None:
    worst = max((p for p in results.comm), key=lambda p: abs(p.error))
    assert abs(worst.error) <= 0.10, (worst.row["id"], worst.error)
