"""``perfmodel model import-chakra TRACE``: a Chakra ET or Kineto trace of one rank as a workload.

::

    perfmodel model import-chakra calibration/h100-sxm5-80gb/trace-gpt2-bf16-b8-seq-len1024.json.gz \\
        --params 124439808 --batch 8 --precision bf16 --system dgx-h100 --gpus 1,2,4,8
    perfmodel model import-chakra run/perfmodel.0.et --system dgx-h100 --gpus 1,8  # its own export

Prints the imported layers' measured forward and backward time; with ``--system`` (a system with
the traced GPU) it predicts the step on ``--gpus`` of it (data parallelism of the traced batch per
GPU), the speedup curve included. See :mod:`perfmodel.calibration.trace_workload`.
"""

from __future__ import annotations

import argparse
from typing import Any

from perfmodel.cli import _types as ty
from perfmodel.cli._common import (
    PRECISIONS,
    add_documented_command,
    add_system_args,
    add_typed_arg,
    print_json,
    system_flags,
)
from perfmodel.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = add_documented_command(
        sub,
        "import-chakra",
        "a Chakra ET (.et) or Kineto trace (.json[.gz]) of one rank as a workload; predict its scale-out",
        __doc__,
    )
    p.add_argument("trace", help="Chakra ET (.et) or PyTorch profiler trace (.json, .json.gz)")
    add_typed_arg(
        p,
        "--params",
        ty.positive_int,
        help="trainable parameters (when the trace has no all-reduce)",
    )
    add_typed_arg(
        p,
        "--batch",
        ty.batch_int,
        help="samples per GPU in the traced step (default: a perfmodel export's own)",
    )
    p.add_argument(
        "--precision",
        help=f"{'|'.join(PRECISIONS)} of the traced run (default: a perfmodel export's own, "
        "else fp32)",
    )
    add_system_args(p, required=False)  # its --gpu: the GPU the trace was recorded on
    p.add_argument(
        "--gpus", default="1", help="GPU counts to predict, e.g. 1,2,4,8 (with --system)"
    )
    p.add_argument("--software", help="software preset (default pytorch-ddp)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.calibration.trace_workload import import_trace

    t = import_trace(args.trace, gpu=args.gpu, params=args.params, precision=args.precision)
    meta = t.meta or {}
    precision = args.precision or str(meta.get("precision") or "fp32")
    micro = args.batch or meta.get("microbatch")
    if micro is None:
        raise ConfigError(
            f"{args.trace}: the trace does not state its batch; give --batch",
            value=args.trace,
            where="--batch",
        )
    batch = int(meta.get("batch_per_replica") or micro) if args.batch is None else args.batch
    out: dict[str, Any] = {
        "source": t.source,
        "gpu": t.gpu,
        "layers": len(t.layers),
        "fwd_s": t.fwd_s,
        "bwd_s": t.bwd_s,
        "not_imported_s": t.not_imported_s,
        "params": t.params,
        "params_source": t.params_source,
        "tp": t.tp,
        "batch": batch,
        "microbatch": int(micro),
        "precision": precision,
    }
    reports = []
    if args.system:
        from perfmodel.api import Scenario, predict_curve
        from perfmodel.search.plans import parse_int_list

        counts = list(parse_int_list(str(args.gpus), where="--gpus"))
        system = system_flags(args)
        sc = Scenario(
            **system,
            model=f"trace:{t.source.rsplit('/', 1)[-1]}",
            batch_per_gpu=batch,
            microbatch=int(micro) if int(micro) != batch else None,
            tp=t.tp,
            precision=precision,
            software=args.software or str(meta.get("software") or "pytorch-ddp"),
            fidelity="analytic",
        )
        bad = [g for g in counts if g % t.tp]
        if bad:
            raise ConfigError(
                f"--gpus {','.join(map(str, bad))}: the trace is one rank of tp={t.tp}, so every "
                f"GPU count is a multiple of {t.tp}",
                value=args.gpus,
                where="--gpus",
            )
        fn = t.workload_fn(int(micro), sc.model)
        if t.tp == 1:
            reports = predict_curve(sc, counts, workload_fn=fn)
        else:  # a shard has no 1-GPU run to be the speedup's baseline
            import dataclasses
            import math

            from perfmodel.api import predict, topology_of

            per = topology_of(dataclasses.replace(sc, nodes=1)).gpus_per_node
            reports = [
                predict(
                    dataclasses.replace(sc, gpus=g, nodes=max(sc.nodes, math.ceil(g / per))),
                    workload_fn=fn,
                    baseline=False,
                )
                for g in counts
            ]
        out["predictions"] = [r.to_dict() for r in reports]
    if args.json:
        print_json(out)
        return 0
    what = "layers" if t.layer_params is None else "segments (perfmodel's export)"
    print(
        f"{t.source}: {len(t.layers)} {what} measured on {t.gpu}, forward {t.fwd_s * 1e3:.2f} ms, "
        f"backward {t.bwd_s * 1e3:.2f} ms per micro-batch of {micro} (batch {batch} per GPU) "
        f"(not imported: {t.not_imported_s * 1e3:.2f} ms of optimizer/unattributed kernels)"
    )
    shard = (
        f" on this rank, one of tp={t.tp} (a shard: predicted with tp={t.tp})" if t.tp > 1 else ""
    )
    print(f"parameters {t.params:,}{shard} ({t.params_source})")
    if int(meta.get("pp", 1) or 1) > 1:  # type: ignore[call-overload]
        print(
            f"note: the trace is one pipeline stage of pp={meta['pp']}: the prediction runs that "
            "stage's layers alone (no pipeline)"
        )
    if reports:
        print(
            f"{'GPUs':>5} {'iter time (ms)':>15} {'samples/s':>11} {'speedup':>8} {'exp. comm (ms)':>15}"
        )
        for r in reports:
            speedup = "-" if r.speedup is None else f"{r.speedup:.2f}x"
            print(
                f"{r.num_gpus:>5} {r.iteration_time_s * 1e3:15.2f} {r.throughput_samples_per_s:11.1f} "
                f"{speedup:>8} {r.exposed_comm_time_s * 1e3:15.2f}"
            )
    return 0
