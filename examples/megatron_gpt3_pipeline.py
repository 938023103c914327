"""GPT-3 style 3D parallelism: how do pipeline schedules compare, and where does the time go?

    python examples/megatron_gpt3_pipeline.py [--out docs/img]

Predicts a GPT 5.9B-class model (32 layers, h=4096) on two DGX A100 (16 GPUs) with tp=4, pp=4,
dp=1 under GPipe, 1F1B and interleaved 1F1B (v=2), prints iteration time, bubble and activation
memory, and writes a Gantt chart of the interleaved schedule (optionally a Chrome trace) and a speedup curve
for ResNet-50 on DGX-1.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

try:
    import perfmodel  # noqa: F401
except ModuleNotFoundError:  # pragma: no cover - source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfmodel import units
from perfmodel.api import Scenario, predict, predict_curve
from perfmodel.report.trace import plot_gantt, plot_speedup, write_chrome_trace

GPT = Scenario(
    system="dgx-a100",
    nodes=2,
    model="gpt",
    model_args={"layers": 32, "hidden": 4096, "heads": 32, "seq_len": 2048, "vocab": 51200},
    global_batch=16,
    precision="bf16",
    optimizer="adam",
    tp=4,
    pp=4,
    microbatch=1,
    software="megatron",
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/img", help="folder for the PNG figures")
    ap.add_argument("--trace", help="also write a Chrome/Perfetto trace JSON here")
    args = ap.parse_args()
    out = Path(args.out)
    print(
        f"{'schedule':<22}{'iteration':>11}{'bubble':>9}{'exposed comm':>14}{'activations/GPU':>17}"
    )
    reports = {}
    for sched, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        r = predict(replace(GPT, schedule=sched, interleave=v))
        reports[sched] = r
        print(
            f"{sched + (f' v={v}' if v > 1 else ''):<22}{r.iteration_time_s:10.3f}s{100 * r.bubble_time_s / r.iteration_time_s:8.1f}%"
            f"{r.exposed_comm_time_s * 1e3:12.1f}ms{r.memory.activations_bytes / units.GiB:14.2f} GiB"
        )
    r = reports["interleaved"]
    m = GPT.global_batch // (GPT.microbatch or 1)
    plot_gantt(
        r.timeline,
        out / "predict-gantt.png",
        title=f"GPT 32L h4096 on 2 DGX A100, tp=4 pp=4, interleaved 1F1B (v=2), {m} micro-batches",
    )
    if args.trace:
        write_chrome_trace(r.timeline, args.trace)
    curve = predict_curve(
        Scenario(system="dgx1-v100", model="resnet50", batch_per_gpu=64, fidelity="analytic"),
        [1, 2, 4, 8],
    )
    plot_speedup(
        curve, out / "predict-speedup.png", title="ResNet-50 on DGX-1 (PyTorch DDP, fp32, 64/GPU)"
    )
    print(f"wrote {out / 'predict-gantt.png'} and {out / 'predict-speedup.png'}")


if __name__ == "__main__":
    main()
