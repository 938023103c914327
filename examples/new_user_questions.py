"""Fifteen questions a new user asks (issue 28's new-user trial), run as a user would (one fresh
``perfmodel`` process per command, ``--json``), with the checks that their answers agree with each
other: a curve row and the single prediction, a compare row and ``predict --plan LABEL``, ``model
maxbatch`` and ``predict``'s memory, a token budget and the step time, an export and its import.

Run from a checkout (about 10-60 s on 2 cores)::

    PYTHONPATH=. python3 examples/new_user_questions.py

Each line is ``OK`` or ``BAD``, the question and the answer; the exit status is 1 when one is BAD.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile

PY = [sys.executable, "-m", "perfmodel"]
ROOT = os.environ.get("PERFMODEL_ROOT") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))
)
ok = []


def run(args: list[str], expect: int = 0) -> str:
    r = subprocess.run([*PY, *args], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != expect:
        raise SystemExit(f"{args}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def js(args: list[str], expect: int = 0):
    return json.loads(run([*args, "--json"], expect))


def check(q: str, cond: bool, detail: str) -> None:
    ok.append(cond)
    print(f"{'OK ' if cond else 'BAD'} {q}: {detail}")


RN = ["--system", "dgx1-v100", "--model", "resnet50", "--batch-per-gpu", "64"]
# 1. speedup of more GPUs
curve = js(["predict", *RN, "--gpus", "1,2,4,8", "--fidelity", "analytic"])
one8 = js(["predict", *RN, "--fidelity", "analytic"])
check(
    "Q1 speedup 1->8 V100",
    curve[-1]["iteration_time_s"] == one8["iteration_time_s"],
    f"{curve[-1]['speedup']:.2f}x at 8 GPUs; curve row = single predict ({one8['speedup']:.2f}x)",
)
# 2. NVLink vs PCIe
wi = js(
    [
        "compare",
        "--systems",
        "dgx1-v100,pcie-8x-server",
        "--model",
        "resnet50",
        "--batch-per-gpu",
        "64",
        "--gpus",
        "1,8",
        "--fidelity",
        "analytic",
    ]
)
pts = {(p["system"], p["gpus"]): p for p in wi["points"]}
check(
    "Q2 NVLink vs PCIe",
    abs(pts[("dgx1-v100", 8)]["iteration_time_s"] - one8["iteration_time_s"]) < 1e-12,
    f"8 GPUs: DGX-1 {pts[('dgx1-v100', 8)]['speedup']:.2f}x vs PCIe server {pts[('pcie-8x-server', 8)]['speedup']:.2f}x",
)
# 3-4. best plan for GPT-3 on 1024 A100, and predict of its label
G3 = [
    "--system",
    "dgx-a100",
    "--nodes",
    "128",
    "--model",
    "gpt",
    "--model-arg",
    "hidden=12288",
    "layers=96",
    "heads=96",
    "seq_len=2048",
    "--global-batch",
    "1536",
    "--precision",
    "fp16",
    "--optimizer",
    "adam",
    "--software",
    "megatron",
]
cmp = js(["compare", *G3, "--top", "3"])
best = cmp["plans"][0]
stage = best["stage"]
check(
    "Q3 GPT-3 best plan",
    best["reports"][stage]["fits_in_memory"],
    f"{best['label']} ({stage} {best['reports'][stage]['iteration_time_s']:.2f} s, MFU {100 * best['reports'][stage]['mfu']:.1f}%)",
)
pred = js(["predict", *G3, "--plan", best["label"], "--fidelity", stage])
check(
    "Q4 predict --plan LABEL = row",
    pred["iteration_time_s"] == best["reports"][stage]["iteration_time_s"]
    and pred["memory_per_gpu_bytes"] == best["reports"][stage]["memory_per_gpu_bytes"],
    f"predict {pred['iteration_time_s']:.4f} s, row {best['reports'][stage]['iteration_time_s']:.4f} s",
)
# 5. Llama-3 70B at 128k on 256 H100
L = [
    "--system",
    "dgx-h100",
    "--nodes",
    "32",
    "--model",
    "llama3_70b",
    "--model-arg",
    "seq_len=131072",
    "--global-batch",
    "64",
    "--software",
    "megatron-core",
    "--precision",
    "bf16",
    "--optimizer",
    "adam",
]
lc = js(["compare", *L, "--cp", "4,8,16,32", "--confirm-k", "1", "--top", "5"])
allfit = all(p["reports"][p["stage"]]["fits_in_memory"] for p in lc["plans"])
check(
    "Q5 Llama-3 70B 128k plans fit",
    allfit and all(" sp" in p["label"] for p in lc["plans"] if "tp1 " not in p["label"]),
    f"best {lc['plans'][0]['label']}; every ranked plan fits; sequence parallel on (Megatron-Core)",
)
none = js(
    [
        "compare",
        *L[:2],
        "--model",
        "llama3_70b",
        "--model-arg",
        "seq_len=131072",
        "--global-batch",
        "8",
        "--precision",
        "bf16",
        "--optimizer",
        "adam",
    ],
    expect=2,
)
check(
    "Q5b on one node",
    none["feasible"] == 0 and any("context parallelism" in h for h in none["hints"]),
    "; ".join(none["hints"])[:160],
)
# 6. largest GPT-2 batch on A100 80GB, consistent with predict
mb = json.loads(
    run(
        [
            "model",
            "maxbatch",
            "gpt2",
            "--gpu",
            "A100-SXM4-80GB",
            "--precision",
            "bf16",
            "--optimizer",
            "adam",
            "--json",
        ]
    )
)
b = mb["batch_size"]
P1 = [
    "predict",
    "--system",
    "dgx-a100",
    "--gpus",
    "1",
    "--model",
    "gpt2",
    "--precision",
    "bf16",
    "--optimizer",
    "adam",
    "--fidelity",
    "analytic",
]
at = js([*P1, "--batch-per-gpu", str(b), "--plan", f"microbatch={b}"])
over = js([*P1, "--batch-per-gpu", str(b + 1), "--plan", f"microbatch={b + 1}"])
check(
    "Q6 maxbatch vs predict",
    at["fits_in_memory"] and not over["fits_in_memory"],
    f"maxbatch {b} ({mb['attention'].split(' (')[0]}); predict fits at {b}, not at {b + 1}",
)
# 7. time to train on a token budget
T = [
    "predict",
    "--system",
    "dgx-h100",
    "--nodes",
    "8",
    "--model",
    "gpt",
    "--model-arg",
    "hidden=2048",
    "layers=24",
    "heads=16",
    "seq_len=2048",
    "--global-batch",
    "512",
    "--precision",
    "bf16",
    "--optimizer",
    "adam",
    "--software",
    "megatron-core",
    "--tokens",
    "300e9",
    "--price-per-gpu-hour",
    "2.5",
    "--fidelity",
    "analytic",
]
tt = js(T)
tb = tt["token_budget"]
steps = math.ceil(300e9 / (512 * 2048))
check(
    "Q7 time to train 300B tokens",
    tb["steps"] == steps and abs(tb["time_to_train_s"] - steps * tt["iteration_time_s"]) < 1e-6,
    f"{tb['time_to_train_s'] / 86400:.1f} days, {tb['gpu_hours']:,.0f} GPU-h, cost {tb['cost']:,.0f}; {tt['tokens_per_s']:,.0f} tokens/s",
)
# 8. ImageNet epoch on 4 DGX A100
ep = js(
    [
        "predict",
        "--system",
        "dgx-a100",
        "--nodes",
        "4",
        "--model",
        "resnet50",
        "--batch-per-gpu",
        "256",
        "--precision",
        "fp16",
        "--memory-format",
        "nhwc",
        "--dataset-size",
        "1281167",
        "--fidelity",
        "analytic",
    ]
)
check(
    "Q8 ImageNet epoch on 32 A100",
    abs(ep["epoch_time_s"] - math.ceil(1281167 / (256 * 32)) * ep["iteration_time_s"]) < 1e-9,
    f"{ep['epoch_time_s']:.0f} s per epoch, {ep['throughput_samples_per_s']:,.0f} images/s",
)
# 9. input bound?
ip = js(
    [
        "predict",
        "--system",
        "dgx1-v100",
        "--model",
        "resnet50",
        "--batch-per-gpu",
        "256",
        "--precision",
        "fp16",
        "--memory-format",
        "nhwc",
        "--dataset",
        "imagenet-jpeg",
        "--data-loader-workers",
        "4",
        "--fidelity",
        "analytic",
    ]
)
check(
    "Q9 input-bound",
    any("INPUT-BOUND" in n for n in ip["printed_notes"]),
    next(n for n in ip["printed_notes"] if "input pipeline" in n)[-60:],
)
# 10. RTX 4090 box: peer-to-peer?
rtx = js(
    [
        "predict",
        "--system",
        "pcie-8x-server",
        "--gpu",
        "RTX-4090",
        "--model",
        "resnet50",
        "--batch-per-gpu",
        "64",
        "--gpus",
        "1,2",
        "--fidelity",
        "analytic",
    ]
)
check(
    "Q10 RTX 4090 P2P",
    not any("host memory" in n for n in rtx[0]["printed_notes"])
    and any("gpu0-gpu1" in n for n in rtx[1]["printed_notes"]),
    f"2 GPUs {rtx[1]['speedup']:.2f}x; note: {next(n for n in rtx[1]['printed_notes'] if 'host memory' in n)[:90]}...",
)
# 11. FSDP vs DDP memory for Llama-2 7B on 8 A100
M = [
    "predict",
    "--system",
    "dgx-a100",
    "--model",
    "llama2_7b",
    "--model-arg",
    "seq_len=4096",
    "--global-batch",
    "8",
    "--precision",
    "bf16",
    "--optimizer",
    "adamw",
    "--fidelity",
    "analytic",
]
ddp = js([*M, "--software", "pytorch-ddp"])
fsdp = js([*M, "--software", "fsdp"])
fc = js(
    [
        "compare",
        "--system",
        "dgx-a100",
        "--model",
        "llama2_7b",
        "--model-arg",
        "seq_len=4096",
        "--global-batch",
        "8",
        "--precision",
        "bf16",
        "--optimizer",
        "adamw",
        "--software",
        "fsdp",
        "--confirm-k",
        "0",
        "--top",
        "3",
    ]
)
check(
    "Q11 FSDP vs DDP memory",
    fsdp["memory_per_gpu_bytes"] < ddp["memory_per_gpu_bytes"]
    and all(p["plan"]["zero"] == 3 for p in fc["plans"] if p["plan"]["dp"] > 1),
    f"DDP {ddp['memory_per_gpu_bytes'] / 2**30:.0f} GiB ({'fits' if ddp['fits_in_memory'] else 'does not fit'}), "
    f"FSDP {fsdp['memory_per_gpu_bytes'] / 2**30:.0f} GiB; FSDP search best {fc['plans'][0]['label']}",
)
# 12. fp32 / tf32 / bf16 on A100 under PyTorch
A = [
    "predict",
    "--system",
    "dgx-a100",
    "--gpus",
    "1",
    "--model",
    "resnet50",
    "--batch-per-gpu",
    "256",
    "--fidelity",
    "analytic",
]
r32, rtf, rbf = (js([*A, "--precision", p]) for p in ("fp32", "tf32", "bf16"))
check(
    "Q12 fp32 = tf32 convs under PyTorch",
    abs(r32["throughput_samples_per_s"] / rtf["throughput_samples_per_s"] - 1) < 0.02
    and rbf["throughput_samples_per_s"] > rtf["throughput_samples_per_s"],
    f"fp32 {r32['throughput_samples_per_s']:.0f}, tf32 {rtf['throughput_samples_per_s']:.0f}, bf16 {rbf['throughput_samples_per_s']:.0f} images/s",
)
# 13. bf16 on V100
err = subprocess.run(
    [*PY, "predict", *RN, "--precision", "bf16"], capture_output=True, text=True, cwd=ROOT
)
f16 = js(["predict", *RN, "--precision", "fp16", "--fidelity", "analytic"])
check(
    "Q13 bf16 on V100",
    err.returncode == 2 and "no BF16" in err.stderr and f16["mfu"] < 1,
    f"refused (exit 2); fp16 instead: {f16['throughput_samples_per_s']:.0f} images/s",
)
# 14. nccl-tests health check
r = subprocess.run(
    [
        *PY,
        "comm",
        "--compare",
        "tests/fixtures/nccl/a3mega-h100-2node-all_reduce.txt",
        "--system",
        "dgx-h100",
        "--nodes",
        "2",
    ],
    capture_output=True,
    text=True,
    cwd=ROOT,
)
check(
    "Q14 nccl-tests health",
    r.returncode == 3 and "DEGRADED" in r.stdout.splitlines()[-1],
    f"exit {r.returncode}: {r.stdout.splitlines()[-1][:100]}",
)
# 15. Chakra round trip
with tempfile.TemporaryDirectory() as d:
    nat = js(
        [
            "predict",
            "--system",
            "dgx-h100",
            "--model",
            "gpt2",
            "--batch-per-gpu",
            "8",
            "--precision",
            "bf16",
            "--fidelity",
            "analytic",
            "--chakra",
            d,
        ]
    )
    imp = js(
        ["model", "import-chakra", f"{d}/perfmodel.0.et", "--system", "dgx-h100", "--gpus", "1,8"]
    )
    got = imp["predictions"][-1]["iteration_time_s"]
    check(
        "Q15 Chakra round trip",
        abs(got / nat["iteration_time_s"] - 1) < 0.02 and imp["params"] == 124439808,
        f"native {nat['iteration_time_s'] * 1e3:.2f} ms, imported {got * 1e3:.2f} ms; params from metadata {imp['params']:,}",
    )
print(f"{sum(ok)} of {len(ok)} consistent")
sys.exit(0 if all(ok) else 1)
