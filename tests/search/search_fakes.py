"""A small, deterministic stand-in for ``perfmodel.api.predict`` used by the search tests.

It is a toy transformer cost model over the plan keys, written so that the tests can compute the
expected best plan independently: compute shrinks with GPUs and grows with recomputation, small
micro-batches run less efficiently, tensor parallelism across servers (tp > 8) is expensive, the
pipeline bubble is ``(pp - 1) / (m v)`` of the compute, the optimizer step is a fixed cost per step, data-parallel all-reduce grows with the
per-rank parameters. Memory: 16 bytes per parameter (ZeRO-1 shards 12 of them over dp) plus
activations of ``pp`` micro-batches in flight. The ``simulated`` fidelity adds a contention term
to communication so the two fidelities disagree a little.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfmodel.errors import InfeasiblePlanError

GIB = 2**30
PARAMS = 1.0e10
MEMORY = 80 * GIB


def fake_predict(sc: Mapping[str, Any]) -> dict[str, Any]:
    gpus = int(sc.get("gpus") or 8)
    tp, pp = int(sc.get("tp", 1)), int(sc.get("pp", 1))
    dp = int(sc.get("dp") or gpus // (tp * pp))
    if dp * tp * pp != gpus:
        raise InfeasiblePlanError(f"dp*tp*pp={dp * tp * pp} != gpus={gpus}", value=gpus)
    gb = int(sc.get("global_batch") or int(sc.get("batch_per_gpu", 8)) * gpus)
    mb = int(sc.get("microbatch") or gb // dp)
    n_micro = gb // (dp * mb)
    v = int(sc.get("interleave", 1))
    rc = {"none": 1.0, "selective": 1.05, "full": 4.0 / 3.0}[sc.get("recompute", "none")]
    flop_per_sample = 6 * PARAMS * 128
    eff = 0.5 * mb / (mb + 1.0)
    compute = gb * flop_per_sample * rc / (gpus * 312e12 * eff)
    tp_bw = 150e9 if tp <= 8 else 12.5e9
    tp_comm = (tp - 1) / tp * gb / dp * 128 * 4096 * 2 * 8 / tp_bw if tp > 1 else 0.0
    dp_comm = 2 * (dp - 1) / dp * PARAMS / (tp * pp) * 2 / 25e9 if dp > 1 else 0.0
    contention = 1.0 + (
        0.15 * (tp > 1) + 0.1 * (dp > 8) if sc.get("fidelity") == "simulated" else 0.0
    )
    comm = (tp_comm + 0.3 * dp_comm) * contention
    bubble = compute * (pp - 1) / (n_micro * v) if pp > 1 else 0.0
    optimizer = PARAMS / (tp * pp) * 16 / 2e12  # per step, independent of the batch
    t = compute + comm + bubble + optimizer
    zero = int(sc.get("zero", 0))
    weights = PARAMS / (tp * pp) * (4 + (12 / dp if zero >= 1 else 12))
    act_factor = {"none": 1.0, "selective": 0.3, "full": 0.05}[sc.get("recompute", "none")]
    acts = mb * min(pp, n_micro) * 2.0e9 / tp * act_factor / pp
    mem = weights + acts
    tput = gb / t
    return {
        "iteration_time_s": t,
        "throughput_samples_per_s": tput,
        "epoch_time_s": (sc["dataset_size"] / tput) if sc.get("dataset_size") else None,
        "compute_time_s": compute,
        "exposed_comm_time_s": comm,
        "bubble_time_s": bubble,
        "memory_per_gpu_bytes": mem,
        "fits_in_memory": mem <= MEMORY,
        "mfu": eff / rc,
    }


def fake_system_predict(sc: Mapping[str, Any]) -> dict[str, Any]:
    """Per-system toy: throughput = g * base / (1 + overhead * (g - 1)), systems differ in both."""
    table = {"fast": (1000.0, 0.02), "slow": (400.0, 0.10), "cheap": (300.0, 0.05)}
    if sc["system"] not in table:
        raise InfeasiblePlanError(f"unknown toy system {sc['system']!r}", value=sc["system"])
    base, overhead = table[sc["system"]]
    if sc.get("network") == "slow-net":
        overhead *= 3
    g = int(sc["gpus"])
    tput = g * base / (1.0 + overhead * (g - 1))
    b = int(sc.get("batch_per_gpu", 32)) * g
    return {
        "iteration_time_s": b / tput,
        "throughput_samples_per_s": tput,
        "epoch_time_s": None,
        "fits_in_memory": True,
    }


def cheap_predict(sc: Mapping[str, Any]) -> dict[str, Any]:
    """Microsecond evaluator for sweep-scale tests; raises for a marked scenario."""
    if sc.get("model") == "broken":
        raise InfeasiblePlanError("model 'broken' cannot be built", value="broken", where="model")
    x = float(sc.get("x", 0)) + 2 * float(sc.get("y", 0))
    return {
        "iteration_time_s": 1.0 + x,
        "throughput_samples_per_s": 1.0 / (1.0 + x),
        "fits_in_memory": True,
    }


def sleepy_predict(sc: Mapping[str, Any]) -> dict[str, Any]:
    """``fake_predict`` that takes 3 s (a simulation too slow for the budget)."""
    import time

    time.sleep(3.0)
    return fake_predict(sc)


def picky_predict(sc: Mapping[str, Any]) -> dict[str, Any]:
    """``fake_predict`` that rejects pipeline depth 4 (an error raised inside a worker)."""
    if sc.get("pp") == 4:
        raise InfeasiblePlanError("pp=4 cannot be placed on this toy", value=4, where="pp")
    return fake_predict(sc)
