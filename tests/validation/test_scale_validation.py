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
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.accuracy_scale import ScaleResults, map_training_row, scale_results
from perfmodel.api import Scenario
from perfmodel.parallel.param_sync import owner_ranks, size_greedy_owner_ranks
from perfmodel.pipeline.lower import step_workload
from perfmodel.pipeline.resolve import resolve
from perfmodel.workload.layers import layer_tensors


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


def test_internevo_within_15_percent(results: ScaleResults) -> None:
    """Issue 24: every InternEvo row within 15% (promoted from xfail once the rows ran the July
    2023 code's apex RMSNorm and flash-attention rotary kernels)."""
    worst = max((p for p in results.training), key=lambda p: abs(p.error))
    assert abs(worst.error) <= 0.15, (worst.row["id"], worst.error)


@pytest.mark.xfail(
    strict=True,
    reason="finding: this cluster moves 38.2-39.9 GB/s per NDR NIC and byte from 8 to 64 DGX "
    "B200 (43.1 on 2, 41.7 on a healthy 4), where the model's ring moves 46 (NDR x 0.92; 1,024 "
    "H100 over 8 x 400G reach 45.6-45.9, NVIDIA/nccl-tests#322): +6% on 16 GPUs, +12-17% on "
    "32-512. The 32-GPU rows ran on nodes the source's own sweeps mark '4n-slow' (healthy 4 "
    "servers: 332 GB/s, not 311). NCCL 2.29.7's ring and tuner have no rule that changes "
    "between 2 and more servers; the fixed cost on 32-64 servers (2.7-6.2 ms from the source's "
    "2/4/8 GiB tables) is NCCL's ring latency (3.4-6.7 ms). Evidence in "
    "perfmodel.accuracy_scale's docstring",
)
def test_b200_rings_within_10_percent(results: ScaleResults) -> None:
    worst = max((p for p in results.comm), key=lambda p: abs(p.error))
    assert abs(worst.error) <= 0.10, (worst.row["id"], worst.error)


def _internevo_row(gpus: int) -> dict[str, object]:
    """A hand-made InternEvo tp=1 row as scale.jsonl states one: micro-batch 2, global batch
    8 x GPUs, 8 GPUs per server on 4 x 100 Gb RoCE."""
    return {
        "id": f"internevo-7b-tp1-zero1all-{gpus}g",
        "kind": "training_scaling",
        "hardware": {"gpus": gpus, "gpus_per_node": 8, "inter_node_link": "4 x 100 Gb/s RoCE"},
        "plan": {"tp": 1, "micro_batch_size": 2},
        "batch": {"global": 8 * gpus},
    }


def test_internevo_rows_take_the_owners_of_the_measuring_code() -> None:
    """The InternEvo rows name the July 2023 config key (``zero_overlap_communication``) and the
    table predates ``ParamBcastSyncHandler`` (2023-08-23): their scenarios use the size-greedy
    owners, and over 1,024 ranks every tensor of the workload then broadcasts alone (more
    broadcasts than the module walk's one per large tensor)."""
    sc = map_training_row(_internevo_row(1024))
    assert isinstance(sc, Scenario)
    assert dict(sc.software_options) == {
        "param_owners": "size-greedy",
        "apex_rms_norm": True,
        "fused_rope": True,
    }
    wl, _ = step_workload(sc, resolve(sc), None)
    params = [p for _, p in layer_tensors(wl.layers, range(len(wl.layers)))]
    assert len(set(size_greedy_owner_ranks(params, 1024))) == len(params)
    assert len(set(owner_ranks(params, 1024))) < len(params)


def test_apex_rms_norm_bytes_golden() -> None:
    """InternLM July 2023 norm per element at bf16 (a = 2): forward cast 2 + 4, apex norm
    4 + 2 = 12 B; backward re-run add (2 + 1) / 2 x 2 = 3, cast 6, norm 6, dx 2 + 4 + 4 = 10,
    dgamma partials 2 + 4 = 6, cast back 4 + 2 = 6: 37 B. At FP32 the casts are not launched."""
    from perfmodel.workload.kernels import APEX_MIXED_RMS_NORM as k

    assert k.fwd_bytes(2) == 12.0 and k.bwd_bytes(2) == 37.0
    assert (k.fwd_kernels(2), k.bwd_kernels(2)) == (2, 7)
    assert (k.fwd_kernels(4), k.bwd_kernels(4)) == (1, 5)


def test_internevo_july_kernels_cut_the_norm_and_rope_time() -> None:
    """The July options replace the eager norm (22 kernels, 128 B per element) and RoPE by the
    extension kernels: the workload's norm and rope bytes fall, its GEMMs stay."""
    sc = map_training_row(_internevo_row(8))
    assert isinstance(sc, Scenario)
    eager = replace(sc, software_options={"param_owners": "size-greedy"})

    def by_kind(s: Scenario) -> dict[str, float]:
        wl, _ = step_workload(s, resolve(s), None)
        out: dict[str, float] = {}
        for layer in wl.layers:
            key = layer.name.rsplit(".", 1)[-1]
            out[key] = out.get(key, 0.0) + layer.fwd_bytes + layer.bwd_bytes
        return out

    july, base = by_kind(sc), by_kind(eager)
    assert july["ln1"] < 0.45 * base["ln1"]
    assert july["rope"] < 0.25 * base["rope"]
    assert july["qkv"] == base["qkv"]
