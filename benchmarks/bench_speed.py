"""No speed cliffs (issue 27): the off-path cases of the issue, each as ranges over runs. Not a test.

    PYTHONPATH=. python benchmarks/bench_speed.py [--runs 3] [--only CASE ...] [--full-sweep]
        [--json OUT.json]

Every case runs ``--runs`` times (3) and prints the range (min-max) of its wall and CPU seconds;
the 2-core development machine is shared, so CPU time is the steadier number and wall time shows
what a user waits. Fresh processes are timed by ``getrusage`` of the child (bytecode compiled
first, as an installed package has it).

- ``predict``: ``perfmodel predict`` of GPT-3 175B on 1024 A100 (128 DGX A100) with the default
  software (PyTorch DDP, 25 MiB buckets), fp16, plan dp16 tp8 pp8 interleaved v2, micro-batch 1,
  default fidelity (the SimPy step) and the default speedup baseline: the issue's 46 s command
  (target 2 s).
- ``compare``: ``perfmodel compare`` of the same model on 1024 A100 without ``--software``:
  the issue's 31 s command whose simulated stage was cut (target 5 s with it complete); the run
  says how many plans the simulated stage finished and whether it stopped.
- ``presets``: nine distinct GPT-3 175B plans on 1024 A100 (``bench_scale.py``'s: dp, tp, pp,
  micro-batch, schedule and interleave of ``enumerate_plans``, shuffled with seed 0) through
  ``predict(sc, baseline=False)`` with the analytic fidelity, after one warm-up plan, in a fresh
  process per preset (megatron, megatron-core, fsdp, pytorch-ddp; the preset's own ZeRO and
  recomputation defaults): median and slowest CPU ms per new plan (target 5 / 15 ms), and the
  mean with the default speedup baseline.
- ``instructions``: the ``presets`` plans again, counted in instructions instead of seconds
  (``valgrind --tool=callgrind``, ``PYTHONHASHSEED=0``): a fresh process predicts the warm-up
  plan alone, another the warm-up plan and the nine plans (each process collecting in full
  after the warm-up plan, as ``presets`` does), and the difference over nine is the
  mean per new plan, the same on every run (session 21: this box's wall clock swung +-15%
  between passes, more than a 2-5% change). Skipped, saying so, where valgrind is not
  installed; ``--runs`` does not apply.
- ``dp``: pure data parallelism of GPT 1.3B (h 2048, 24 layers, batch 8 per GPU, Megatron preset)
  on 8 -> 16,384 GPUs of DGX A100, analytic, one new point after another in one process (the
  in-process scale series of item 3; target under 2x).
- ``sweep``: analytic ResNet-50 / BERT-Large on DGX-1 V100 clusters, batch 8-256 per GPU, fp32 /
  fp16, SGD / Adam, PyTorch DDP / Horovod, over 5 cluster sizes (1, 50, 100, 150, 200 servers:
  2,560 scenarios) with ``perfmodel sweep --jobs 2`` (joblib) and ``--backend dask --jobs 2``,
  and every size 1-200 with 8 scenarios each (1,600: as many clusters as the whole grid),
  and in one process (``--jobs 1``): scenarios per second, and the 102,400-scenario grid over
  every size 1-200 estimated from the CPU seconds per scenario on two cores (plus 200 cluster
  builds per worker). ``--full-sweep`` runs that whole grid with ``--jobs 2`` instead (target
  10 minutes).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # pragma: no cover - source checkout (after PYTHONPATH: --code)
    sys.path.append(str(ROOT))

GPT3 = (
    "--system dgx-a100 --nodes 128 --gpus 1024 --model gpt --model-arg hidden=12288 "
    "--model-arg heads=96 --model-arg layers=96 --model-arg seq_len=2048 --global-batch 1536 "
    "--precision fp16"
).split()
PREDICT = [
    "predict",
    *GPT3,
    "--plan",
    "dp=16,tp=8,pp=8,microbatch=1,schedule=interleaved,interleave=2",
]
COMPARE = ["compare", *GPT3]
PRESETS = ("megatron", "megatron-core", "fsdp", "pytorch-ddp")
#: New plans timed per preset after the warm-up plan (``presets``, ``instructions``).
NEW_PLANS = 9
PLAN_KEYS = ("dp", "tp", "pp", "microbatch", "schedule", "interleave", "gpus", "global_batch")

SWEEP_AXES = {
    "model": ["resnet50", "bert_large"],
    "batch_per_gpu": list(range(8, 257, 8)),
    "precision": ["fp32", "fp16"],
    "optimizer": ["sgd", "adam"],
    "software": ["pytorch-ddp", "horovod"],
}
SWEEP_SAMPLE_NODES = [1, 50, 100, 150, 200]
SWEEP_FULL_NODES = list(range(1, 201))


#: The checkout whose ``perfmodel`` the children import (``--code``; default this one).
CODE = ROOT


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(CODE), str(ROOT)]))}


def _child(args: list[str], timeout_s: float = 1800) -> tuple[float, float, int, str]:
    """(wall s, CPU s, exit code, stdout) of a fresh process ``python ARGS``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args],
        env=_env(),
        cwd=str(CODE),  # ``python -m`` puts the working folder first on sys.path
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode, proc.stdout


def _range(xs: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(xs), max(xs)
    return (
        fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"
    )


def case_predict(runs: int) -> dict[str, Any]:
    out = [_child(["-m", "perfmodel", "--quiet", *PREDICT]) for _ in range(runs)]
    walls, cpus = [o[0] for o in out], [o[1] for o in out]
    it = re.search(r"iteration time\s+([\d.]+ s)", out[-1][3])
    print(
        f"predict   GPT-3 1024 A100 pytorch-ddp interleaved (simulated): {_range(walls)} s wall, "
        f"{_range(cpus)} s CPU; iteration {it.group(1) if it else '?'}; exit {out[-1][2]}",
        flush=True,
    )
    return {"wall_s": walls, "cpu_s": cpus, "rc": [o[2] for o in out]}


def case_compare(runs: int) -> dict[str, Any]:
    out = [_child(["-m", "perfmodel", "--quiet", *COMPARE]) for _ in range(runs)]
    walls, cpus = [o[0] for o in out], [o[1] for o in out]
    sims = [re.search(r"simulated: (\d+) plans", o[3]) for o in out]
    done = [int(m.group(1)) if m else 0 for m in sims]
    stopped = [("stage stopped" in o[3]) for o in out]
    print(
        f"compare   GPT-3 1024 A100, no --software: {_range(walls)} s wall, {_range(cpus)} s CPU; "
        f"simulated plans {done}, stopped {stopped}",
        flush=True,
    )
    return {"wall_s": walls, "cpu_s": cpus, "simulated_plans": done, "stopped": stopped}


def _preset_scenarios(preset: str) -> list[Any]:
    """The ``presets`` case's scenarios of ``preset``: the warm-up plan, then the plans timed
    (``bench_scale.py``'s, analytic)."""
    sys.path.append(str(ROOT / "benchmarks"))
    from bench_scale import _plans
    from bench_search import BASE175

    from perfmodel.api import Scenario

    fixed = {**BASE175, "software": preset, "fidelity": "analytic"}
    return [Scenario.from_dict({**fixed, **{k: p[k] for k in PLAN_KEYS}}) for p in _plans()]


def _preset_child(preset: str) -> dict[str, Any]:
    """In a fresh process: nine new plans of ``preset``, CPU ms each (no baseline), and the
    same plans again in a second fresh round with the default baseline (mean)."""
    import gc

    from perfmodel.api import predict
    from perfmodel.errors import PerfModelError

    plans = _preset_scenarios(preset)
    out: dict[str, Any] = {}
    for baseline in (False, True):
        predict(plans[0], baseline=baseline)  # warm-up: topology, routes, workloads
        gc.collect()
        cpus = []
        first = 1 if not baseline else 1 + NEW_PLANS  # the baseline round takes the next ones
        for sc in plans[first : first + NEW_PLANS]:
            c = time.process_time()
            try:
                predict(sc, baseline=baseline)
            except PerfModelError:
                continue
            cpus.append(1e3 * (time.process_time() - c))
        out["baseline" if baseline else "new"] = cpus
    return out


def case_presets(runs: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for preset in PRESETS:
        rows = []
        for _ in range(runs):
            _, _, rc, text = _child([__file__, "--_preset", preset])
            if rc != 0:
                print(f"presets   {preset}: child failed (exit {rc})", flush=True)
                break
            rows.append(json.loads(text.strip().splitlines()[-1]))
        if not rows:
            continue
        med = [statistics.median(r["new"]) for r in rows]
        worst = [max(r["new"]) for r in rows]
        base = [statistics.fmean(r["baseline"]) for r in rows]
        print(
            f"presets   {preset:<14} new plan median {_range(med, '{:.1f}')} ms CPU, slowest "
            f"{_range(worst, '{:.1f}')} ms (n={len(rows[0]['new'])}); with the speedup baseline "
            f"mean {_range(base, '{:.1f}')} ms over {NEW_PLANS} more plans",
            flush=True,
        )
        res[preset] = rows
    return res


def _instructions_child(preset: str, n: int) -> None:
    """In a fresh process: the warm-up plan of ``preset``, a full collection (as ``presets``
    collects before its timed plans: otherwise where the collector's first full collection
    after the imports falls moves with every change of allocation counts, ~5 M instructions a
    plan on the mean, session 24), and its next ``n`` plans."""
    import gc

    from perfmodel.api import predict
    from perfmodel.errors import PerfModelError

    for i, sc in enumerate(_preset_scenarios(preset)[: 1 + n]):
        try:
            predict(sc, baseline=False)
        except PerfModelError:
            pass
        if i == 0:
            gc.collect()


def _instructions(preset: str, n: int, valgrind: str) -> int | None:
    """Instructions callgrind collects in a fresh process of :func:`_instructions_child`."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            proc = subprocess.run(
                [valgrind, "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
                 sys.executable, __file__, "--_instructions", preset, "--_n", str(n)],
                env={**_env(), "PYTHONHASHSEED": "0"}, cwd=str(CODE), stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True, timeout=1800, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            print(f"instructions  {preset}: no answer within 1800 s under valgrind", flush=True)
            return None
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not found:
        print(f"instructions  {preset}: exit {proc.returncode}: {proc.stderr[-500:]}", flush=True)
        return None
    return int(found.group(1))


def case_instructions(runs: int) -> dict[str, Any]:
    """Instructions per new plan of each preset (callgrind; deterministic, so one run)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("instructions  skipped: valgrind is not installed", flush=True)
        return {"skipped": "valgrind is not installed"}
    res: dict[str, Any] = {}
    n = NEW_PLANS
    for preset in PRESETS:
        warm, both = _instructions(preset, 0, valgrind), _instructions(preset, n, valgrind)
        if warm is None or both is None:
            continue
        res[preset] = (both - warm) / n
        print(
            f"instructions  {preset:<14} {res[preset] / 1e6:.1f} M instructions per new plan "
            f"(mean of {n} after the warm-up plan; callgrind, PYTHONHASHSEED=0)",
            flush=True,
        )
    return res


def _dp_child() -> dict[str, Any]:
    from perfmodel.api import Scenario, predict

    out = []
    for gpus in (8, 64, 512, 2048, 16384):
        sc = Scenario.from_dict(
            {
                "system": "dgx-a100",
                "nodes": gpus // 8,
                "model": "gpt",
                "model_args": {"hidden": 2048, "layers": 24, "heads": 16, "seq_len": 2048},
                "batch_per_gpu": 8,
                "precision": "bf16",
                "optimizer": "adam",
                "software": "megatron",
                "fidelity": "analytic",
            }
        )
        c = time.process_time()
        predict(sc, baseline=False)
        out.append((gpus, time.process_time() - c))
    return {"points": out}


def case_dp(runs: int) -> dict[str, Any]:
    rows = []
    for _ in range(runs):
        _, _, rc, text = _child([__file__, "--_dp"])
        if rc == 0:
            rows.append(json.loads(text.strip().splitlines()[-1])["points"])
    if not rows:
        return {}
    gpus = [g for g, _ in rows[0]]
    cols = [[r[i][1] for r in rows] for i in range(len(gpus))]
    ratio = [r[-1][1] / r[0][1] for r in rows]
    print(
        "dp        pure DP in one process, "
        + " / ".join(f"{g}: {_range([1e3 * x for x in c], '{:.0f}')}" for g, c in zip(gpus, cols))
        + f" ms CPU; {gpus[-1]} vs {gpus[0]} GPUs {_range(ratio, '{:.1f}')}x",
        flush=True,
    )
    return {"gpus": gpus, "cpu_s": cols, "ratio": ratio}


#: The other axes of the second sample: every cluster size, few scenarios each.
SWEEP_FEW = {
    "model": ["resnet50", "bert_large"],
    "batch_per_gpu": [32, 128],
    "precision": ["fp32", "fp16"],
    "optimizer": ["adam"],
    "software": ["pytorch-ddp"],
}


def _sweep_file(folder: Path, nodes: list[int], axes: dict[str, list[Any]] = SWEEP_AXES) -> Path:
    """The grid file: ``nodes`` last (innermost in the file's order, as one writes it)."""
    lines = ["[base]", 'system = "dgx1-v100"', 'fidelity = "analytic"', "", "[axes]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in axes.items()]
    lines.append(f"nodes = {json.dumps(nodes)}")
    path = folder / f"grid{_grid_size(nodes, axes)}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _grid_size(nodes: list[int], axes: dict[str, list[Any]] = SWEEP_AXES) -> int:
    n = len(nodes)
    for v in axes.values():
        n *= len(v)
    return n


def _sweep_runs(
    grid: Path, n: int, label: str, extra: list[str], runs: int, folder: Path
) -> dict[str, Any] | None:
    """``perfmodel sweep GRID`` ``runs`` times (a new output each time): rate and CPU."""
    walls, cpus = [], []
    for i in range(runs):
        out = folder / f"{grid.stem}-{label.split()[0]}{i}.jsonl"
        w, c, rc, _ = _child(
            ["-m", "perfmodel", "--quiet", "sweep", str(grid), "-o", str(out), *extra]
        )
        if rc != 0:
            print(f"sweep     {label}: exit {rc}", flush=True)
            return None
        walls.append(w)
        cpus.append(c)
    rate = [n / w for w in walls]
    print(
        f"sweep     {n:,} scenarios, {label:<9}: {_range(rate, '{:.0f}')} scenarios/s wall, "
        f"{_range([1e3 * c / n for c in cpus], '{:.2f}')} ms CPU per scenario",
        flush=True,
    )
    return {"wall_s": walls, "cpu_s": cpus}


def case_sweep(runs: int, full: bool = False) -> dict[str, Any]:
    """Two samples of the 102,400-scenario grid: 5 cluster sizes x every other axis (2,560: the
    cost per scenario) and all 200 sizes x 8 scenarios each (1,600: a cluster per 8 rows, as
    many clusters as the whole grid); ``full``: the whole grid with ``--jobs 2``."""
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="perfmodel-bench-sweep-") as tmp:
        folder = Path(tmp)
        sample = _sweep_file(folder, SWEEP_SAMPLE_NODES)
        n = _grid_size(SWEEP_SAMPLE_NODES)
        modes = {
            "serial": ["--jobs", "1"],
            "joblib x2": ["--jobs", "2"],
            "dask x2": ["--backend", "dask", "--jobs", "2"],
        }
        for label, extra in modes.items():
            r = _sweep_runs(sample, n, label, extra, 1 if label == "serial" else runs, folder)
            if r is not None:
                res[label] = r
        sizes = _sweep_file(folder, SWEEP_FULL_NODES, SWEEP_FEW)
        n_sizes = _grid_size(SWEEP_FULL_NODES, SWEEP_FEW)
        r = _sweep_runs(sizes, n_sizes, "joblib x2", ["--jobs", "2"], runs, folder)
        if r is not None:
            res["sizes joblib x2"] = r
        if "joblib x2" in res and r is not None:
            total = _grid_size(SWEEP_FULL_NODES)
            per = min(res["joblib x2"]["cpu_s"]) / n  # CPU s per scenario, clusters shared
            clusters = min(r["cpu_s"]) - per * n_sizes  # the rest: 200 clusters per worker
            est = (total * per + max(clusters, 0.0)) / 2
            print(
                f"sweep     {total:,}-scenario grid (1-200 servers) on two cores, from the two "
                f"samples' CPU, each worker building each cluster once: ~{est / 60:.1f} min",
                flush=True,
            )
            res["estimate_full_s"] = est
        if full:
            grid = _sweep_file(folder, SWEEP_FULL_NODES)
            total = _grid_size(SWEEP_FULL_NODES)
            out = folder / "full.jsonl"
            args = ["-m", "perfmodel", "--quiet", "sweep", str(grid), "-o", str(out)]
            w, c, rc, _ = _child([*args, "--jobs", "2"], timeout_s=7200)
            print(
                f"sweep     {total:,}-scenario grid, --jobs 2: {w / 60:.1f} min wall, "
                f"{c / 60:.1f} min CPU, {total / w:.0f} scenarios/s, exit {rc}",
                flush=True,
            )
            res["full"] = {"wall_s": w, "cpu_s": c, "rc": rc}
    return res


CASES = {
    "predict": case_predict,
    "compare": case_compare,
    "presets": case_presets,
    "instructions": case_instructions,
    "dp": case_dp,
    "sweep": case_sweep,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3, help="runs per case (ranges over them)")
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), help="run these cases")
    ap.add_argument("--full-sweep", action="store_true", help="run the 102,400-scenario grid")
    ap.add_argument("--json", help="write the numbers as JSON")
    ap.add_argument(
        "--code",
        help="time the perfmodel of this checkout instead (e.g. an exported older commit, "
        "for a side-by-side run in the same minutes)",
    )
    ap.add_argument("--_preset", help=argparse.SUPPRESS)
    ap.add_argument("--_dp", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_instructions", help=argparse.SUPPRESS)
    ap.add_argument("--_n", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._instructions:
        _instructions_child(args._instructions, args._n)
        return 0
    if args._preset:
        print(json.dumps(_preset_child(args._preset)))
        return 0
    if args._dp:
        print(json.dumps(_dp_child()))
        return 0
    global CODE
    if args.code:
        CODE = Path(args.code).resolve()
    compileall.compile_dir(str(CODE / "perfmodel"), quiet=1)
    results: dict[str, Any] = {}
    for name, fn in CASES.items():
        if args.only and name not in args.only:
            continue
        results[name] = fn(args.runs, args.full_sweep) if name == "sweep" else fn(args.runs)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
