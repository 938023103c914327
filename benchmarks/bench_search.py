"""Benchmark: scenarios per second of the comparison layer's evaluators and of the sweep runner.

Not a test. Run ``PYTHONPATH=. python benchmarks/bench_search.py [--quick] [--json out.json]``
(or after ``pip install -e .``) and copy the
table into ``docs/compare.md``. Every number is wall time on this machine, measured after one
warm-up call (the first call of a system builds its topology, routing tables and workloads;
that cost is reported separately as ``first call s``).

Cases (each evaluates distinct plans, so per-plan caches do not hide work):

- ``resnet50-dgx1``: ResNet-50, batch 64/GPU, data parallel over 1..8 V100 (DGX-1).
- ``gpt1.3b-dgxa100``: GPT 1.3B (h=2048, 24 layers), global batch 64, the (tp, pp, micro-batch)
  plans of one DGX A100.
- ``gpt175b-1024``: GPT-3 175B on 128 DGX A100 (1024 GPUs), Megatron-like plans.

Fidelities: ``screen`` (:class:`perfmodel.search.screen.PlanScreen`), ``analytic`` and
``simulated`` (:func:`perfmodel.api.predict`). The sweep rows use a microsecond evaluator to
measure the runner itself (serial vs joblib with 2 processes).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from perfmodel._io import write_json_atomic
from perfmodel.errors import PerfModelError
from perfmodel.search._eval import analytic_evaluator, canonical_key, simulated_evaluator
from perfmodel.search.plans import ModelShape, SearchSpace, enumerate_plans
from perfmodel.search.screen import PlanScreen
from perfmodel.search.sweep import SweepSpec, run_sweep

GPT13 = {"hidden": 2048, "layers": 24, "heads": 16, "seq_len": 2048}
GPT175 = {"hidden": 12288, "layers": 96, "heads": 96, "seq_len": 2048}
BASE175 = {
    "system": "dgx-a100",
    "nodes": 128,
    "model": "gpt",
    "model_args": GPT175,
    "precision": "fp16",
    "optimizer": "adam",
    "software": "megatron",
}


def cases(quick: bool) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    out: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    base = {
        "system": "dgx1-v100",
        "model": "resnet50",
        "precision": "fp16",
        "software": "pytorch-ddp",
    }
    out["resnet50-dgx1"] = (
        base,
        [{"gpus": g, "batch_per_gpu": b} for g in (1, 2, 4, 8) for b in (32, 64, 128)],
    )
    base = {
        "system": "dgx-a100",
        "model": "gpt",
        "model_args": GPT13,
        "precision": "bf16",
        "optimizer": "adam",
        "software": "megatron",
    }
    shape = ModelShape.from_model("gpt", GPT13)
    plans = enumerate_plans(
        8, 64, shape, SearchSpace(zero_stages=(0,), recompute=("none", "full"))
    ).plans
    out["gpt1.3b-dgxa100"] = (base, [{**p, "gpus": 8, "global_batch": 64} for p in plans])
    base = dict(BASE175)
    shape = ModelShape.from_model("gpt", GPT175)
    plans = enumerate_plans(
        1024, 1536, shape, SearchSpace(zero_stages=(1,), recompute=("none",))
    ).plans
    out["gpt175b-1024"] = (base, [{**p, "gpus": 1024, "global_batch": 1536} for p in plans])
    if quick:
        out = {k: (b, s[:6]) for k, (b, s) in out.items()}
    return out


def rate(
    evaluator: Callable[[Mapping[str, Any]], Any],
    base: dict[str, Any],
    scenarios: list[dict[str, Any]],
    budget_s: float,
) -> dict[str, float]:
    t0 = time.perf_counter()
    try:
        evaluator({**base, **scenarios[0]})
    except PerfModelError:
        pass
    first = time.perf_counter() - t0
    n = ok = 0
    t1 = time.perf_counter()
    for sc in scenarios[1:]:
        try:
            evaluator({**base, **sc})
            ok += 1
        except PerfModelError:
            pass
        n += 1
        if time.perf_counter() - t1 > budget_s:
            break
    el = time.perf_counter() - t1
    return {
        "first_call_s": first,
        "n": n,
        "ok": ok,
        "elapsed_s": el,
        "per_s": n / el if el > 0 else float("nan"),
    }


def cheap(sc: Mapping[str, Any]) -> dict[str, Any]:
    """A microsecond evaluator: measures the sweep runner, not the model."""
    x = float(sc.get("x", 0)) + 2 * float(sc.get("y", 0))
    return {"iteration_time_s": 1.0 + x, "throughput_samples_per_s": 1.0 / (1.0 + x)}


def sweep_rate(n_side: int, backend: str, jobs: int) -> dict[str, float]:
    spec = SweepSpec.from_dict(
        {"base": {"model": "toy"}, "axes": {"x": list(range(n_side)), "y": list(range(n_side))}}
    )
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.jsonl")
        t0 = time.perf_counter()
        s = run_sweep(
            spec,
            out,
            backend=backend,
            jobs=jobs,
            evaluator=cheap,
            key_fn=canonical_key,
            progress=None,
        )
        el = time.perf_counter() - t0
    return {"n": s.evaluated, "elapsed_s": el, "per_s": s.evaluated / el}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="few scenarios per case")
    ap.add_argument(
        "--budget", type=float, default=20.0, help="seconds per (case, fidelity) after warm-up"
    )
    ap.add_argument("--skip-simulated-175b", action="store_true", help="skip the slowest cell")
    ap.add_argument("--json", help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    print(f"{'case':<18} {'fidelity':<10} {'first call s':>12} {'plans':>6} {'plans/s':>9}")
    for name, (base, scs) in cases(args.quick).items():
        screen = PlanScreen(base)
        for fid, ev in (
            ("screen", screen),
            ("analytic", analytic_evaluator),
            ("simulated", simulated_evaluator),
        ):
            if fid == "simulated" and name == "gpt175b-1024" and args.skip_simulated_175b:
                continue
            r = rate(ev, base, scs, args.budget)
            results[f"{name}/{fid}"] = r
            print(
                f"{name:<18} {fid:<10} {r['first_call_s']:12.2f} {r['n']:>6} {r['per_s']:9.1f}",
                flush=True,
            )
    for backend, jobs in (("serial", 1), ("joblib", 2)):
        r = sweep_rate(100, backend, jobs)
        results[f"sweep-runner/{backend}{jobs}"] = r
        print(
            f"{'sweep runner':<18} {backend + str(jobs):<10} {'':>12} {r['n']:>6} {r['per_s']:9.0f}"
        )
    if args.json:
        write_json_atomic(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
