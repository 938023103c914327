"""Speed of perfmodel itself: one training-step prediction at scale (not a test).

    python benchmarks/bench_predict.py [--fidelity analytic|simulated|both] [--json OUT.json]

Cases (issue 5): GPT-3 175B on 1024 A100s (DGX A100 x 128, dp=16, tp=8, pp=8, micro-batch 1,
global batch 1536, interleaved-free 1F1B, bf16, Adam, full recomputation) and ResNet-50 on 256 V100s
(DGX-1 x 32, 64 images per GPU, PyTorch DDP). Wall time covers everything ``predict`` does
(topology, workload, lowering, execution, the 1-GPU baseline, the report); each case runs twice
and the second (warm-cache) time is reported too. Record the numbers in ``docs/predict.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

try:
    import perfmodel  # noqa: F401
except ModuleNotFoundError:  # pragma: no cover - source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmodel.api import Scenario, predict

GPT3 = Scenario(
    system="dgx-a100",
    nodes=128,
    model="gpt",
    model_args={"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200},
    global_batch=1536,
    precision="bf16",
    optimizer="adam",
    dp=16,
    tp=8,
    pp=8,
    microbatch=1,
    schedule="1f1b",
    recompute="full",
    software="megatron",
)
RESNET = Scenario(
    system="dgx1-v100", nodes=32, model="resnet50", batch_per_gpu=64, software="pytorch-ddp"
)


def run(sc: Scenario, name: str) -> dict[str, object]:
    t0 = time.perf_counter()
    r = predict(sc)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    predict(sc)
    warm = time.perf_counter() - t0
    tasks = len(r.timeline.graph.tasks) if r.timeline is not None else 0
    out = {
        "case": name,
        "fidelity": r.fidelity,
        "gpus": r.num_gpus,
        "tasks_simulated": tasks,
        "wall_cold_s": round(cold, 3),
        "wall_warm_s": round(warm, 3),
        "iteration_time_s": round(r.iteration_time_s, 4),
        "mfu": round(r.mfu, 3),
        "fits_in_memory": r.fits_in_memory,
    }
    print(
        f"{name:<38}{r.fidelity:<11}{r.num_gpus:>6} GPUs {tasks:>7} tasks  cold {cold:7.2f} s  "
        f"warm {warm:7.2f} s  -> iteration {r.iteration_time_s:.3f} s, MFU {100 * r.mfu:.1f}%"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fidelity", choices=["analytic", "simulated", "both"], default="both")
    ap.add_argument("--json", help="write results as JSON")
    args = ap.parse_args(argv)
    fids = ["analytic", "simulated"] if args.fidelity == "both" else [args.fidelity]
    results = []
    for fid in fids:
        results.append(run(replace(GPT3, fidelity=fid), "GPT-3 175B, 1024 A100, 3D parallel"))
        results.append(run(replace(RESNET, fidelity=fid), "ResNet-50, 256 V100, DDP"))
    if args.json:
        from perfmodel._io import write_json_atomic

        write_json_atomic(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
