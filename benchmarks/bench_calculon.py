"""The Calculon reference of issue 14, timed side by side with perfmodel in the same run. Not a test.

    PYTHONPATH=. python benchmarks/bench_calculon.py --calculon PATH [--calculon-python EXE]
        [--runs 5] [--calculon-only] [--json OUT.json]

Calculon (Isaev et al., SC'23; Apache-2.0) is the analytic LLM performance model users compare
us with. Nothing of it is in this repository; get a checkout yourself::

    git clone https://github.com/calculon-ai/calculon && cd calculon
    git checkout caa4b11f8fe1fee3ba57adaacb7590d7deabd053   # the commit issue 14 names
    python3 -m venv --system-site-packages .venv && .venv/bin/pip install pandas psutil numpy

(``calculon/llm/all_executions.py`` imports pandas when the package is imported, so every run of
``bin/calculon`` pays for it.) ``--calculon-python`` defaults to ``PATH/.venv/bin/python`` when it
exists, else to this interpreter. Without ``--calculon`` the script says so and exits 0.
The script uses the API of that era (``Llm.Execution.from_json``, ``Llm(app, logger)``,
``bin/calculon`` passing a logger to its commands); it was run on a copy of Calculon
reassembled from the stored files nearest caa4b11 (``calculon/llm/layers.py`` at caa4b11,
``llm.py`` at c02c5e9), not on a git checkout.

The case is the issue's: GPT-3 175B (Calculon's ``models/gpt3-175B.json``: h 12288, 96 blocks,
96 heads of 128, feed-forward 49152, sequence 2048) on 1024 A100 80 GB (``systems/a100_80g.json``:
NVLink tier of 8, InfiniBand tier) with Megatron's plan (Narayanan et al. 2021, SC'21, Table 1):
tensor 8 on the NVLink tier, pipeline 8 and data 16 on the InfiniBand tier, micro-batch 1, global
batch 1536, 1F1B without interleaving, full activation recomputation, fp16, tensor-parallel
all-reduce (no sequence parallelism), no distributed optimizer, no overlap, no offload. The
execution file is written to a temporary folder (Calculon's execution schema, 23 keys).

Calculon is timed the way ``bench_scale.py`` times perfmodel, CPU time being the steady number on
the shared 2-core machine:

- fresh process: ``bin/calculon llm MODEL EXECUTION SYSTEM OUT.json`` in a new interpreter, median
  of ``--runs`` (5) runs, wall and CPU seconds of the child, bytecode compiled first; the same
  with an empty ``pandas`` module first on the path (``all_executions.py`` imports pandas and
  never uses it: most of Calculon's start-up); and the interpreter + ``import calculon`` alone
  (``python -c "import calculon"``), median of as many.
- new plan in-process: in one Calculon interpreter (a child process, so that perfmodel's imports
  neither help nor burden Calculon's), ``Llm.Execution.from_json`` + ``Llm(app, logger)`` +
  ``compile`` + ``run`` + ``get_stats_json`` for distinct plans, after one warm-up plan, median of
  the first 9 that Calculon accepts. The plans are ``bench_scale``'s (``enumerate_plans`` of
  1024 GPUs, batch 1536, shuffled with seed 0), mapped onto Calculon's execution keys (tensor
  parallelism on the NVLink tier up to 8, on the InfiniBand tier above; ZeRO-1 as
  ``optimizer_sharding``; interleave as ``pipeline_interleaving``); a plan Calculon refuses
  (``Llm.Error``: memory, network tier) is skipped as ``bench_scale`` skips a ``PerfModelError``.
  The logger is at INFO, as ``bin/calculon`` sets it (no debug records are built; the
  arguments of Calculon's debug calls are still computed, as in its own command).
  The first ``import calculon`` of that interpreter is reported too.

perfmodel's side is ``bench_scale.py --only plans cli`` run in this process (its own warm-ups and
medians), so both columns come from the same minute of the same machine.
"""

from __future__ import annotations

import argparse
import compileall
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Megatron's plan for GPT-3 175B on 1024 A100 in Calculon's execution schema (see the docstring).
MEGATRON_EXECUTION: dict[str, Any] = {
    "num_procs": 1024,
    "tensor_par": 8,
    "pipeline_par": 8,
    "data_par": 16,
    "tensor_par_net": 0,
    "pipeline_par_net": 1,
    "data_par_net": 1,
    "batch_size": 1536,
    "microbatch_size": 1,
    "datatype": "float16",
    "fused_activation": True,
    "attention_type": "multihead",
    "activation_recompute": "full",
    "pipeline_interleaving": 1,
    "optimizer_sharding": False,
    "tensor_par_comm_type": "ar",
    "tensor_par_overlap": "none",
    "seq_par_ag_redo": False,
    "data_par_overlap": False,
    "weight_offload": False,
    "activations_offload": False,
    "optimizer_offload": False,
    "training": True,
}
MODEL_FILE = "models/gpt3-175B.json"
SYSTEM_FILE = "systems/a100_80g.json"
#: GPUs of one node, the size of ``a100_80g.json``'s NVLink tier (network 0)
NVLINK_TIER_GPUS = 8
#: perfmodel's recompute names -> Calculon's ``activation_recompute``
RECOMPUTE = {"none": "none", "selective": "attn_only", "full": "full"}
PLANS_TIMED = 9


def calculon_execution(plan: dict[str, Any]) -> dict[str, Any] | None:
    """Calculon's execution keys for one of ``bench_scale``'s plans (``None``: not expressible).

    Parameters
    ----------
    plan
        ``dp``, ``tp``, ``pp``, ``microbatch``, ``interleave``, ``zero``, ``recompute``,
        ``sequence_parallel``, ``ep``, ``cp``, ``gpus``, ``global_batch`` as
        ``perfmodel.search.plans.enumerate_plans`` gives them.
    """
    if plan.get("ep", 1) != 1 or plan.get("cp", 1) != 1 or plan["recompute"] not in RECOMPUTE:
        return None
    tp, dp = plan["tp"], plan["dp"]
    return {
        **MEGATRON_EXECUTION,
        "num_procs": plan["gpus"],
        "tensor_par": tp,
        "pipeline_par": plan["pp"],
        "data_par": dp,
        "tensor_par_net": 0 if tp <= NVLINK_TIER_GPUS else 1,
        "batch_size": plan["global_batch"],
        "microbatch_size": plan["microbatch"],
        "activation_recompute": RECOMPUTE[plan["recompute"]],
        "pipeline_interleaving": plan.get("interleave", 1),
        "optimizer_sharding": plan.get("zero", 0) >= 1 and dp > 1,
        "tensor_par_comm_type": "rs_ag" if plan.get("sequence_parallel") else "ar",
    }


def _run_child(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one child process, which must exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _medians(samples: list[tuple[float, float]]) -> dict[str, float]:
    return {
        "median_wall_s": statistics.median(s[0] for s in samples),
        "median_cpu_s": statistics.median(s[1] for s in samples),
        "n": len(samples),
    }


def calculon_fresh(checkout: Path, python: str, runs: int) -> dict[str, Any]:
    """Median wall and CPU seconds of ``runs`` fresh ``bin/calculon llm`` processes on Megatron's
    plan, and of ``runs`` fresh ``python -c "import calculon"`` (interpreter + imports), ``-c
    "import pandas"`` (pandas + numpy, which ``all_executions.py`` imports) and ``-c pass``."""
    compileall.compile_dir(str(checkout / "calculon"), quiet=1)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "execution.json"
        exe.write_text(json.dumps(MEGATRON_EXECUTION))
        out = Path(tmp) / "stats.json"
        cmd = [python, str(checkout / "bin" / "calculon"), "llm"]
        cmd += [str(checkout / MODEL_FILE), str(exe), str(checkout / SYSTEM_FILE), str(out)]
        run = _medians([_run_child(cmd, env, cwd=tmp) for _ in range(runs)])
        stats = json.loads(out.read_text())
        # the same with an empty module in pandas' place: all_executions.py imports pandas
        # and never uses it, so this is Calculon's cost without that one unused import
        stub = Path(tmp) / "stub"
        stub.mkdir()
        (stub / "pandas.py").write_text("")
        env_stub = {**env, "PYTHONPATH": os.pathsep.join([str(stub), str(checkout)])}
        run_stub = _medians([_run_child(cmd, env_stub, cwd=tmp) for _ in range(runs)])
    imports = {
        name: _medians([_run_child([python, "-c", code], env) for _ in range(runs)])
        for name, code in (
            ("calculon", "import calculon"),
            ("pandas", "import pandas"),
            ("empty", "pass"),
        )
    }
    return {
        "run": run,
        "run_pandas_stubbed": run_stub,
        "imports": imports,
        "total_time_s": stats["total_time"],
        "sample_rate": stats["sample_rate"],
        "mem_tier1_gib": stats["proc_mem_tier1_cap_req"] / 2**30,
    }


def calculon_new_plans(checkout: Path, python: str, plans: list[dict[str, Any]]) -> dict[str, Any]:
    """Run :func:`_inprocess_child` in Calculon's interpreter on ``plans`` (JSON over stdin)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [python, str(Path(__file__).resolve()), "--inprocess-child", str(checkout)]
    done = subprocess.run(
        cmd, env=env, input=json.dumps(plans), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def _inprocess_child(checkout: Path) -> None:
    """In a Calculon interpreter: time ``import calculon``, then one warm-up plan and the first
    ``PLANS_TIMED`` accepted plans of stdin's list; print the numbers as JSON."""
    import logging

    plans = json.loads(sys.stdin.read())
    t, c = time.perf_counter(), time.process_time()
    import calculon  # the import is what is timed

    import_wall, import_cpu = time.perf_counter() - t, time.process_time() - c
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_scale import _timed  # after the timed import (perfmodel brings numpy)

    llm = calculon.Llm
    app = llm.Application(calculon.read_json_file(str(checkout / MODEL_FILE)))
    syst = calculon.System(calculon.read_json_file(str(checkout / SYSTEM_FILE)))
    log = logging.getLogger("bench_calculon")
    log.setLevel(logging.INFO)

    def evaluate(exe_json: dict[str, Any]) -> dict[str, Any]:
        model = llm(app, log)
        model.compile(syst, llm.Execution.from_json(exe_json))
        model.run(syst)
        return model.get_stats_json(False)

    executions = [e for e in (calculon_execution(p) for p in plans) if e is not None]
    warm = evaluate(MEGATRON_EXECUTION)  # warm-up: Megatron's plan, also the answer shown
    gc.collect()  # the same collector state as bench_scale's timed series start from
    walls: list[float] = []
    cpus: list[float] = []
    refused = 0
    for exe_json in executions:
        if len(walls) == PLANS_TIMED:
            break
        try:
            w, c, _ = _timed(lambda e=exe_json: evaluate(e))
        except (llm.Error, AssertionError):
            refused += 1
            continue
        walls.append(w)
        cpus.append(c)
    print(
        json.dumps(
            {
                "import_wall_s": import_wall,
                "import_cpu_s": import_cpu,
                "n": len(walls),
                "refused": refused,
                "median_wall_ms": 1e3 * statistics.median(walls),
                "median_cpu_ms": 1e3 * statistics.median(cpus),
                "max_wall_ms": 1e3 * max(walls),
                "megatron_total_time_s": warm["total_time"],
            }
        )
    )


def _default_python(checkout: Path) -> str:
    venv = checkout / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calculon", type=Path, help="a Calculon checkout (see above)")
    ap.add_argument("--calculon-python", help="interpreter with Calculon's dependencies")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per median (5)")
    ap.add_argument("--calculon-only", action="store_true", help="skip perfmodel's side")
    ap.add_argument("--json", help="write the numbers as JSON")
    ap.add_argument("--inprocess-child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inprocess_child is not None:
        _inprocess_child(args.inprocess_child)
        return 0
    if args.calculon is None:
        print(
            "bench_calculon: no --calculon PATH given, nothing timed. Clone "
            "https://github.com/calculon-ai/calculon at caa4b11 (see --help) and pass its path."
        )
        return 0
    checkout = args.calculon.resolve()
    if not (checkout / "bin" / "calculon").is_file():
        print(f"bench_calculon: {checkout} has no bin/calculon: not a Calculon checkout")
        return 2
    python = args.calculon_python or _default_python(checkout)

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_scale  # perfmodel is imported only when it is timed

    out: dict[str, Any] = {"calculon": {"checkout": str(checkout), "python": python}}
    if not args.calculon_only:
        out["perfmodel"] = {
            "plans": bench_scale.case_plans(quick=False),
            "cli": bench_scale.case_cli(quick=False),
        }
    out["calculon"]["new_plan"] = calculon_new_plans(checkout, python, bench_scale._plans())
    out["calculon"]["fresh"] = cal = calculon_fresh(checkout, python, args.runs)
    print(
        f"calculon  Megatron plan: {cal['total_time_s']:.3f} s per step, "
        f"{cal['mem_tier1_gib']:.1f} GiB, {cal['sample_rate']:.1f} samples/s",
        flush=True,
    )
    _table(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


def _table(out: dict[str, Any]) -> None:
    cal = out["calculon"]
    new, fresh = cal["new_plan"], cal["fresh"]
    pm = out.get("perfmodel")
    rows = [
        (
            "new plan in-process, median (ms)",
            (
                f"analytic {pm['plans']['analytic']['median_wall_ms']:.2f} wall "
                f"{pm['plans']['analytic']['median_cpu_ms']:.2f} CPU (n={pm['plans']['analytic']['n']}); "
                f"screen {pm['plans']['screen']['median_cpu_ms']:.3f} CPU"
            )
            if pm
            else "-",
            f"{new['median_wall_ms']:.2f} wall {new['median_cpu_ms']:.2f} CPU "
            f"(n={new['n']}, {new['refused']} refused)",
        ),
        (
            "fresh process (s)",
            f"{pm['cli']['median_wall_s']:.3f} wall {pm['cli']['median_cpu_s']:.3f} CPU (n=3)"
            if pm
            else "-",
            f"{fresh['run']['median_wall_s']:.3f} wall {fresh['run']['median_cpu_s']:.3f} CPU "
            f"(n={fresh['run']['n']})",
        ),
        (
            "  same, unused pandas import stubbed",
            "-",
            f"{fresh['run_pandas_stubbed']['median_wall_s']:.3f} wall "
            f"{fresh['run_pandas_stubbed']['median_cpu_s']:.3f} CPU",
        ),
        (
            "interpreter + imports (s CPU)",
            f"{pm['cli']['import_cpu_s']:.3f}" if pm else "-",
            f"{fresh['imports']['calculon']['median_cpu_s']:.3f} (empty interpreter "
            f"{fresh['imports']['empty']['median_cpu_s']:.3f}, with pandas alone "
            f"{fresh['imports']['pandas']['median_cpu_s']:.3f}; import calculon in-process "
            f"{new['import_cpu_s']:.3f})",
        ),
    ]
    print(f"\n{'case (GPT-3 175B, 1024 A100)':<38} | {'perfmodel':<60} | Calculon")
    for name, ours, theirs in rows:
        print(f"{name:<38} | {ours:<60} | {theirs}")


if __name__ == "__main__":
    sys.exit(main())
