"""Speed at scale (issue 14): the cases of the issue's table and the growth curves. Not a test.

    PYTHONPATH=. python benchmarks/bench_scale.py [--quick] [--only CASE ...] [--json OUT.json]

Cases (every time is the median of distinct questions, wall and CPU seconds of this process or
of the child process; the 2-core development machine is shared, so CPU time is the steadier
number and wall time shows what a user waits):

- ``plans``: GPT-3 175B on 1024 A100 (128 DGX A100, fp16, Adam, Megatron; the plans
  ``enumerate_plans`` gives for global batch 1536), one new plan in-process after one warm-up
  plan: the screen (:class:`perfmodel.search.screen.PlanScreen`) over up to 200 plans, the
  analytic predictor over 9 (``--quick``: 4), and a cached repeat of each (median of 21).
- ``cli``: the same model with Megatron's plan (dp16 tp8 pp8, micro-batch 1, 1F1B, bf16, full
  recomputation) as a fresh ``python -m perfmodel predict --fidelity analytic`` process, 3 runs,
  after ``compileall`` (an installed package has its bytecode; this checkout's environment sets
  ``PYTHONDONTWRITEBYTECODE``).
- ``simulated``: that step simulated with SimPy, and Llama-3 405B on 16,384 H100 (2048 DGX
  H100, tp8 pp16 dp128, the Llama 3 paper's plan) (skipped with ``--quick``).
- ``growth``: the median of three fresh ``predict --fidelity analytic`` processes for GPT 1.3B
  (h 2048, 24 layers, batch 8 per GPU) in pure data parallelism on 8 -> 16,384 GPUs (``--quick``: 8 -> 256), the
  16,384 GPUs also on a fat tree (``--fabric fat-tree``), and for GPT-3 175B with tp8 pp8 and
  growing dp (512 -> 4096 GPUs); the last two skipped with ``--quick``.
- ``nodes``: ``predict --nodes 100000`` and ``topo show dgx1-v100 --nodes 5000`` as fresh
  processes (refused at once above ``MAX_CLUSTER_GPUS``).
- ``compare``: ``perfmodel compare`` of GPT-3 175B on 1024 A100 with the defaults (skipped with
  ``--quick``).
- ``layers``, ``microbatches``: growth curves in-process, analytic and simulated predict of a
  GPT (h 2048) on 16 A100 (tp2 pp4 dp2): 24 -> 96 -> 192 layers, and 8 -> 64 -> 512
  micro-batches per pipeline (``--quick``: the first two points).

The Calculon reference of the issue (commit caa4b11, same machine and session): 1.6 ms per new
plan in-process, 0.34 s as a fresh process. Record the numbers in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import compileall
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
try:
    import perfmodel  # noqa: F401
except ModuleNotFoundError:  # pragma: no cover - source checkout
    sys.path.insert(0, str(ROOT))

from bench_search import BASE175, GPT175  # noqa: E402  (the script folder is on sys.path)

CLI175 = (
    "predict --system dgx-a100 --nodes 128 --model gpt --model-arg layers=96 hidden=12288 "
    "heads=96 seq_len=2048 vocab=51200 --global-batch 1536 --plan dp=16,tp=8,pp=8,microbatch=1,"
    "schedule=1f1b --precision bf16 --optimizer adam --recompute full --software megatron"
)


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall s, CPU s of this process, result) of one call."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def _child(args: list[str], timeout_s: float = 600) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of a fresh ``python -m perfmodel`` process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    rc = subprocess.run(
        [sys.executable, "-m", "perfmodel", "--quiet", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout_s,
        check=False,
    ).returncode
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc


def _plans() -> list[dict[str, Any]]:
    from perfmodel.search.plans import ModelShape, SearchSpace, enumerate_plans

    shape = ModelShape.from_model("gpt", GPT175)
    space = SearchSpace(zero_stages=(1,), recompute=("none",))
    plans = [
        {**p, "gpus": 1024, "global_batch": 1536}
        for p in enumerate_plans(1024, 1536, shape, space).plans
    ]
    random.Random(0).shuffle(plans)
    return plans


def _median_new(ev: Callable[[dict[str, Any]], Any], plans: list[dict[str, Any]]) -> dict:
    from perfmodel.errors import PerfModelError

    ev({**BASE175, **plans[0]})  # warm-up: topology, routing tables, workloads
    # every timed series starts from the same collector state (as pyperf does before each run):
    # otherwise the older-generation collection that earlier cases left pending lands on one of
    # the 9 plans, and which one moves with every change of allocation counts. Collections during
    # the timed calls still count; the mean shows what they cost on average.
    gc.collect()
    walls, cpus = [], []
    for p in plans[1:]:
        try:
            w, c, _ = _timed(lambda p=p: ev({**BASE175, **p}))
        except PerfModelError:
            continue
        walls.append(w)
        cpus.append(c)
    # the cached repeat: median of 21 calls (one call of ~0.1 ms is at the mercy of the
    # shared machine's scheduler and of a garbage collection)
    reps = [_timed(lambda: ev({**BASE175, **plans[1]})) for _ in range(21)]
    rep_w = statistics.median(r[0] for r in reps)
    rep_c = statistics.median(r[1] for r in reps)
    return {
        "n": len(walls),
        "median_wall_ms": 1e3 * statistics.median(walls),
        "median_cpu_ms": 1e3 * statistics.median(cpus),
        "mean_cpu_ms": 1e3 * statistics.fmean(cpus),
        "max_wall_ms": 1e3 * max(walls),
        "repeat_wall_ms": 1e3 * rep_w,
        "repeat_cpu_ms": 1e3 * rep_c,
    }


def case_plans(quick: bool) -> dict[str, Any]:
    from perfmodel.search._eval import analytic_evaluator
    from perfmodel.search.screen import PlanScreen

    plans = _plans()
    out = {
        "screen": _median_new(PlanScreen(BASE175), plans[:201]),
        "analytic": _median_new(analytic_evaluator, plans[: 5 if quick else 10]),
    }
    for k, r in out.items():
        print(
            f"plans     {k:<9} new plan median {r['median_wall_ms']:9.3f} ms wall "
            f"{r['median_cpu_ms']:9.3f} ms CPU (n={r['n']}, mean {r['mean_cpu_ms']:.1f} ms CPU, "
            f"max {r['max_wall_ms']:.0f} ms); "
            f"cached repeat {r['repeat_wall_ms']:.3f} ms wall {r['repeat_cpu_ms']:.3f} ms CPU",
            flush=True,
        )
    return out


def case_cli(quick: bool) -> dict[str, Any]:
    compileall.compile_dir(str(ROOT / "perfmodel"), quiet=1)
    runs = [_child([*CLI175.split(), "--fidelity", "analytic"]) for _ in range(3)]
    out = {
        "median_wall_s": statistics.median(r[0] for r in runs),
        "median_cpu_s": statistics.median(r[1] for r in runs),
        "rc": [r[2] for r in runs],
    }
    imp = [_child_import() for _ in range(3)]
    out["import_cpu_s"] = statistics.median(imp)
    print(
        f"cli       analytic  fresh process {out['median_wall_s']:.2f} s wall "
        f"{out['median_cpu_s']:.2f} s CPU (of which interpreter + imports {out['import_cpu_s']:.2f} s CPU)",
        flush=True,
    )
    return out


def _child_import() -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", "import perfmodel.cli.predict, perfmodel.api"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _predict(d: dict[str, Any]) -> tuple[float, float, Any]:
    from perfmodel.api import Scenario, predict

    sc = Scenario.from_dict(d)
    return _timed(lambda: predict(sc))


LLAMA405 = {
    "system": "dgx-h100",
    "nodes": 2048,
    "model": "llama3_405b",
    "precision": "bf16",
    "optimizer": "adam",
    "software": "megatron",
    # Llama 3 paper (arXiv:2407.21783), Table 4: 16,384 GPUs, TP 8, PP 16, DP 128, 16M tokens
    # of 8,192 per step (2,048 sequences)
    "global_batch": 2048,
    "dp": 128,
    "tp": 8,
    "pp": 16,
    "microbatch": 1,
    "schedule": "1f1b",
}


def _simulated(name: str, d: dict[str, Any]) -> dict[str, Any]:
    """A cold simulated ``predict`` (first of its system in this process), the CPU time of its
    ``simulate`` call alone, and the analytic prediction of the same plan afterwards."""
    import perfmodel.pipeline.evaluate as stage  # predict's simulated fidelity calls stage.simulate

    inner: list[float] = []
    simulate = stage.simulate

    def timed_simulate(*a: Any, **k: Any) -> Any:
        c = time.process_time()
        out = simulate(*a, **k)
        inner.append(time.process_time() - c)
        return out

    stage.simulate = timed_simulate
    try:
        w, c, r = _predict({**d, "fidelity": "simulated"})
    finally:
        stage.simulate = simulate
    _, _, ra = _predict({**d, "fidelity": "analytic"})
    tasks = len(r.timeline.graph.tasks) if r.timeline is not None else 0
    print(
        f"simulated {name}: {w:.2f} s wall {c:.2f} s CPU (simulate {inner[0]:.2f} s CPU), "
        f"{tasks} tasks; iteration {r.iteration_time_s:.3f} s simulated vs "
        f"{ra.iteration_time_s:.3f} s analytic",
        flush=True,
    )
    return {
        "wall_s": w,
        "cpu_s": c,
        "simulate_cpu_s": inner[0],
        "tasks": tasks,
        "iteration_s": r.iteration_time_s,
        "analytic_iteration_s": ra.iteration_time_s,
    }


def case_simulated(quick: bool) -> dict[str, Any]:
    if quick:
        return {}
    args = {**BASE175, "model_args": {**GPT175, "vocab": 51200}, "precision": "bf16"}
    d = {
        **args,
        "global_batch": 1536,
        "dp": 16,
        "tp": 8,
        "pp": 8,
        "microbatch": 1,
        "schedule": "1f1b",
        "recompute": "full",
    }
    return {
        "gpt3_1024_a100": _simulated("GPT-3 1024 A100", d),
        "llama3_405b_16384_h100": _simulated("Llama-3 405B 16384 H100", LLAMA405),
    }


def case_growth(quick: bool) -> dict[str, Any]:
    """Each point the median of three fresh ``predict --fidelity analytic`` processes (cold
    caches, imports included, bytecode compiled first as for ``cli``), stopped after 300 s."""
    compileall.compile_dir(str(ROOT / "perfmodel"), quiet=1)
    out: dict[str, Any] = {"dp": [], "3d": []}
    dp = (
        "predict --system dgx-a100 --model gpt --model-arg hidden=2048 layers=24 heads=16 "
        "seq_len=2048 --batch-per-gpu 8 --precision bf16 --optimizer adam --software megatron "
        "--fidelity analytic"
    ).split()
    for gpus in (8, 64, 256) if quick else (8, 64, 512, 2048, 16384):
        out["dp"].append(_growth_point("dp", gpus, [*dp, "--nodes", str(max(1, gpus // 8))]))
    if not quick:  # the same on a two-level fat tree (820 leaves at 16,384 GPUs) instead of rails
        out["dp_fat_tree"] = [
            _growth_point("dp-ft", 16384, [*dp, "--nodes", "2048", "--fabric", "fat-tree"])
        ]
    if not quick:
        for gpus in (512, 1024, 2048, 4096):
            args = [*CLI175.split(), "--fidelity", "analytic"]
            args[args.index("--nodes") + 1] = str(gpus // 8)
            args[args.index("--global-batch") + 1] = str(1536 * gpus // 1024)
            i = args.index("--plan") + 1
            args[i] = args[i].replace("dp=16", f"dp={gpus // 64}")
            out["3d"].append(_growth_point("3d", gpus, args))
    return out


def _growth_point(kind: str, gpus: int, args: list[str], runs: int = 3) -> dict[str, Any]:
    """Median wall and CPU seconds of ``runs`` fresh processes (one process's time on the
    shared 2-core machine varies by +-20%: a single run cannot tell 1.4x from 1.7x)."""
    samples = []
    for _ in range(runs):
        try:
            samples.append(_child(args, timeout_s=300))
        except subprocess.TimeoutExpired:
            print(f"growth    {kind}  {gpus:>6} GPUs  > 300 s (stopped)", flush=True)
            return {"gpus": gpus, "timeout_s": 300}
    w = statistics.median(x[0] for x in samples)
    c = statistics.median(x[1] for x in samples)
    rc = max(x[2] for x in samples)
    print(
        f"growth    {kind}  {gpus:>6} GPUs  {w:7.2f} s wall {c:7.2f} s CPU, exit {rc} "
        f"(median of {runs})",
        flush=True,
    )
    return {"gpus": gpus, "wall_s": w, "cpu_s": c, "rc": rc}


def case_nodes(quick: bool) -> dict[str, Any]:
    a = _child(
        "predict --system dgx-a100 --nodes 100000 --model gpt --global-batch 1536 "
        "--fidelity analytic".split(),
        timeout_s=120,
    )
    b = _child("topo show dgx1-v100 --nodes 5000".split(), timeout_s=120)
    for name, (w, c, rc) in (("--nodes 100000", a), ("topo show --nodes 5000", b)):
        print(f"nodes     {name:<24} {w:.2f} s wall {c:.2f} s CPU, exit {rc}", flush=True)
    return {"nodes_100000": a, "topo_show_5000": b}


def case_compare(quick: bool) -> dict[str, Any]:
    if quick:
        return {}
    args = (
        "compare --system dgx-a100 --nodes 128 --model gpt --model-arg layers=96 hidden=12288 "
        "heads=96 seq_len=2048 --global-batch 1536 --precision fp16 --optimizer adam "
        "--software megatron"
    ).split()
    w, c, rc = _child(args)
    print(
        f"compare   GPT-3 1024 A100 defaults: {w:.1f} s wall {c:.1f} s CPU, exit {rc}", flush=True
    )
    return {"wall_s": w, "cpu_s": c, "rc": rc}


GROWTH_BASE = {
    "system": "dgx-a100",
    "nodes": 2,
    "model": "gpt",
    "precision": "bf16",
    "optimizer": "adam",
    "software": "megatron",
    "dp": 2,
    "tp": 2,
    "pp": 4,
    "microbatch": 1,
    "schedule": "1f1b",
}


def _growth_curve(name: str, points: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each point a new scenario in this process (the system warmed up by a first prediction
    of another scenario), predicted analytic then simulated, CPU time of each."""
    from perfmodel.api import Scenario, predict

    warm = {**GROWTH_BASE, "model_args": {"layers": 8, "hidden": 1024, "heads": 16}}
    predict(Scenario.from_dict({**warm, "global_batch": 8}), baseline=False)
    out = []
    for label, d in points:
        row: dict[str, Any] = {"point": label}
        for fid in ("analytic", "simulated"):
            sc = Scenario.from_dict({**d, "fidelity": fid})
            w, c, r = _timed(lambda sc=sc: predict(sc, baseline=False))
            row[fid] = {"wall_s": w, "cpu_s": c, "iteration_s": r.iteration_time_s}
        print(
            f"{name:<13} {label:<18} analytic {1e3 * row['analytic']['cpu_s']:8.1f} ms CPU, "
            f"simulated {row['simulated']['cpu_s']:6.2f} s CPU; iteration "
            f"{row['analytic']['iteration_s']:.4f} s / {row['simulated']['iteration_s']:.4f} s",
            flush=True,
        )
        out.append(row)
    return out


def case_layers(quick: bool) -> list[dict[str, Any]]:
    """GPT (h 2048, 16 heads, seq 2048) on 16 A100 (tp2 pp4 dp2, 32 micro-batches of 1) with
    24 -> 96 -> 192 layers (``--quick``: 24 -> 96)."""
    args = {"hidden": 2048, "heads": 16, "seq_len": 2048}
    points = [
        (f"{n} layers", {**GROWTH_BASE, "model_args": {**args, "layers": n}, "global_batch": 64})
        for n in ((24, 96) if quick else (24, 96, 192))
    ]
    return _growth_curve("layers", points)


def case_microbatches(quick: bool) -> list[dict[str, Any]]:
    """The same GPT with 24 layers and 8 -> 64 -> 512 micro-batches per pipeline (global batch
    16 -> 1024; ``--quick``: 8 -> 64)."""
    args = {"hidden": 2048, "heads": 16, "seq_len": 2048, "layers": 24}
    points = [
        (
            f"{m} micro-batches",
            {**GROWTH_BASE, "model_args": args, "global_batch": 2 * m},
        )
        for m in ((8, 64) if quick else (8, 64, 512))
    ]
    return _growth_curve("microbatches", points)


CASES = {
    "plans": case_plans,
    "cli": case_cli,
    "simulated": case_simulated,
    "growth": case_growth,
    "nodes": case_nodes,
    "compare": case_compare,
    "layers": case_layers,
    "microbatches": case_microbatches,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small cases only (about a minute)")
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), help="run these cases")
    ap.add_argument("--json", help="write the numbers as JSON")
    args = ap.parse_args(argv)
    results = {
        name: fn(args.quick) for name, fn in CASES.items() if not args.only or name in args.only
    }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
