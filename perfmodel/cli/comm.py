"""``perfmodel comm``: collective costs in nccl-tests terms, and comparison with real logs.

Examples::

    perfmodel comm --system dgx1-v100 --gpus 8 --op allreduce --sizes 1K:4G
    perfmodel comm --system dgx-a100 --nodes 4 --op allgather --sizes 1M:1G --algorithm ring --json
    perfmodel comm --system pcie-8x-server --gpu 1080ti --gpus 4 --op allreduce --sizes 64M --fidelity simulated
    perfmodel comm --compare all_reduce.log --system dgx-h100 --nodes 2 --plot cmp.png

``--gpus G`` is the total number of GPUs of the group: the first ``G`` GPUs in rank order
(server by server); ``--group gpu0,gpu3`` names the members instead. The table prints what nccl-tests prints (time in us, algbw and busbw in
GB/s, decimal) plus the algorithm and protocol the model used.

``--processes per-server`` prices the run as nccl-tests' single-process form (``-g N``, or
``-t N``, for a server's ``N`` GPUs: every rank of a server in one process); the default,
``per-gpu``, is one process per GPU (``mpirun`` / ``srun`` with nccl-tests' default ``-g 1``,
as every torchrun job runs). It decides NCCL's direct pointers between NVLink GPUs
(:func:`perfmodel.comm.p2p_read.p2p_path`). ``--compare`` reads it from the log's ``Pid``
columns unless the flag is given.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
from collections.abc import Callable
from typing import Any

from perfmodel import units
from perfmodel.cli import _types as ty
from perfmodel.cli._common import (
    add_format_args,
    add_interval_arg,
    add_quiet_arg,
    add_system_args,
    add_typed_arg,
    print_json,
    system_from_args,
)
from perfmodel.comm.p2p_read import ProcessLayout, with_process_layout
from perfmodel.comm.params import Algorithm
from perfmodel.errors import ConfigError
from perfmodel.ops import CollectiveOp
from perfmodel.topology import Topology

_OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv")
_ALGOS = tuple(a.value for a in Algorithm)  # the --algorithm help, from the enum


#: Device-name fragments of nccl-tests "Using devices" lines -> catalogue system (for --compare
#: without --system).
def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``comm`` subcommand."""
    p = subparsers.add_parser(
        "comm",
        help="collective communication costs (nccl-tests style) and log comparison",
        description="Predict collective times, algbw and busbw like nccl-tests, or compare a real "
        "nccl-tests log with the prediction.",
    )
    add_system_args(p, required=False)
    add_typed_arg(
        p, "--gpus", ty.positive_int, help="GPUs in the group (default: all GPUs of the system)"
    )
    p.add_argument(
        "--group",
        help="explicit group: comma-separated node ids (GPUs, or a CPU as server/host), "
        "e.g. gpu0,gpu3 (overrides --gpus)",
    )
    p.add_argument("--op", default="allreduce", help=f"collective: {', '.join(_OPS)}")
    p.add_argument(
        "--sizes",
        default="1K:4G",
        help="message sizes MIN:MAX[:FACTOR] (binary suffixes, 1K = 1024)",
    )
    p.add_argument("--algorithm", default="auto", help=f"one of {', '.join(_ALGOS)}")
    p.add_argument("--fidelity", choices=["analytic", "simulated"], default="analytic")
    add_typed_arg(
        p,
        "--processes",
        ty.process_layout,
        metavar="{per-gpu,per-server}",
        help="how the ranks map onto processes: per-gpu (default: one process per GPU, "
        "nccl-tests -g 1 under mpirun/srun, as torchrun jobs run) or per-server (one process "
        "drives a server's GPUs, nccl-tests -g N); with --compare, default: read from the "
        "log's Pid column (per-gpu where it does not say)",
    )
    p.add_argument(
        "--p2p",
        choices=["on", "off"],
        help="force GPU peer-to-peer over PCIe on or off (default: the system file and GPU model; "
        "off = NCCL's SHM transport through host memory, as with NCCL_P2P_DISABLE=1; "
        "on = P2P between all GPUs, as with NCCL_P2P_LEVEL=SYS)",
    )
    add_interval_arg(
        p,
        "prediction interval of each size from the published collective measurements "
        "like it (default 0.8; off: none; docs/intervals.md)",
    )
    p.add_argument(
        "--compare",
        metavar="LOG",
        help="an nccl-tests log (text or -J JSON) to compare; exit status 0 healthy, "
        "3 degraded, 4 nothing to judge (docs/cli.md)",
    )
    add_typed_arg(p, "--plot", ty.png_file, metavar="FILE.png", help="write busbw vs size to a PNG")
    p.add_argument(
        "--link-params",
        metavar="FILE",
        help="link overrides (TOML/JSON: {class: {alpha_us, bandwidth_GBps}})",
    )
    add_format_args(p)
    add_quiet_arg(p)
    p.set_defaults(func=run)


def _model(args: argparse.Namespace, topo: Topology) -> Any:
    from perfmodel.comm import CommCostModel, LinkParams

    lp = None
    if args.link_params:
        from perfmodel._io import load_structured

        data = load_structured(args.link_params)
        if isinstance(data, dict) and "link_params" in data and "device" in data:
            # a profile written by `perfmodel calibrate` (its fitted link parameters)
            data = data["link_params"] or {}
        lp = LinkParams.from_dict(data, where=args.link_params)
    return CommCostModel(topo, lp, fidelity=args.fidelity)


def _group(topo: Topology, gpus: int | None) -> tuple[str, ...]:
    if gpus is None:
        return topo.gpus
    if gpus < 1:
        raise ConfigError(f"--gpus must be >= 1, got {gpus}", value=gpus, where="--gpus")
    if gpus > topo.num_gpus:
        raise ConfigError(
            f"--gpus {gpus}: system {topo.name} has {topo.num_gpus} GPUs (add --nodes)",
            value=gpus,
            where="--gpus",
        )
    return topo.gpus[:gpus]


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(args)
    if not args.system:
        raise ConfigError("give --system (or --compare LOG)", value=None, where="--system")
    from perfmodel.units import parse_size_range

    op = CollectiveOp.parse(args.op)
    topo = system_from_args(args)
    if args.p2p is not None:
        from perfmodel.topology.nccl_p2p import with_nccl_p2p_rule

        # the GPUs now state P2P: the rule of the release in force leaves them alone
        topo = with_nccl_p2p_rule(topo.with_p2p(args.p2p == "on"))
    layout = args.processes or ProcessLayout.PER_GPU
    topo = with_process_layout(topo, layout)
    group = _group(topo, args.gpus)
    if op is CollectiveOp.SENDRECV and args.gpus is None:
        group = group[:2]
    if args.group:
        group = tuple(x.strip() for x in args.group.split(",") if x.strip())
    sizes = parse_size_range(args.sizes)
    model = _model(args, topo)
    results = [model.collective(op, s, group, args.algorithm) for s in sizes]

    def reprice(system: Topology, size: float) -> Any:
        """The same call on ``system`` (a reference's NCCL environment: reference_lines)."""
        return _model(args, system).collective(op, size, group, args.algorithm)

    n = len(group)
    ivs = _intervals(topo, group, op, results, getattr(args, "interval", None))
    if args.json:
        print_json(
            {
                "system": topo.name,
                "gpus": n,
                "processes": layout.value,
                "results": [
                    {**r.to_dict(), **_interval_fields(r, iv)}
                    for r, iv in zip(results, ivs, strict=True)
                ],
                "interval_level": getattr(args, "interval", None),
                "checked_against": reference_lines(topo, op, group, results, reprice),
            }
        )
    elif args.csv:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(
            ["size_bytes", "time_s", "algbw_Bps", "busbw_Bps", "algorithm", "protocol", "fidelity"]
        )
        for r in results:
            w.writerow(
                [int(r.message_bytes), f"{r.time_s:.9g}", f"{r.algbw_Bps:.6g}", f"{r.busbw_Bps:.6g}",
                 r.algorithm.value, r.protocol.value if r.protocol else "", r.fidelity]
            )  # fmt: skip
        sys.stdout.write(buf.getvalue())
    else:
        print(
            f"# perfmodel comm: {op.value} on {topo.name} ({n} GPUs, "
            f"{len({topo.server_of(g) for g in group})} server(s)), algorithm {args.algorithm}, "
            f"fidelity {args.fidelity}"
            + (", one process per server" if layout is ProcessLayout.PER_SERVER else "")
        )
        pct = "" if args.interval is None else f"{100 * args.interval:g}%"
        print(
            f"#{'size':>12} {'count':>13} {'type':>9} {'time':>10} {'algbw':>8} {'busbw':>8}  "
            f"{'algorithm/protocol':<20}" + (f" {'busbw ' + pct:>15}" if pct else "")
        )
        print(
            f"#{'(B)':>12} {'(elements)':>13} {'':>9} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}  "
            f"{'':<20}" + (f" {'(GB/s)':>15}" if pct else "")
        )
        per_rank = op in (CollectiveOp.ALLGATHER, CollectiveOp.REDUCESCATTER, CollectiveOp.ALLTOALL)
        for r, iv in zip(results, ivs, strict=True):
            count = int(r.message_bytes) // 4 // (n if per_rank else 1)
            algo = r.algorithm.value + (f"/{r.protocol.value}" if r.protocol else "")
            rng = ""
            if iv is not None:
                lo, hi = iv.speed(r.busbw_Bps)
                rng = f" {_gbs(lo) + '-' + _gbs(hi):>15}"
            print(
                f" {int(r.message_bytes):>12} {count:>13} {'float':>9} {r.time_s * 1e6:>10.1f} "
                f"{_gbs(r.algbw_Bps):>8} {_gbs(r.busbw_Bps):>8}  {algo:<20}{rng}"
            )
        big = [r.busbw_Bps for r in results]
        print(f"# Avg bus bandwidth    : {statistics.fmean(big) / units.GB:.3f}")
        for line in reference_lines(topo, op, group, results, reprice):
            print(f"# {line}")
        from perfmodel.report.notes import host_memory_notes

        for note in host_memory_notes(topo, group):  # the pairs, as predict names them
            print(f"# {note}")
        for line in _interval_notes(results, ivs, args.interval):
            print(f"# {line}")
    if args.plot:
        from perfmodel.comm.plot import plot_busbw

        plot_busbw(
            args.plot,
            [r.message_bytes for r in results],
            {f"{args.algorithm} ({args.fidelity})": [r.busbw_Bps for r in results]},
            title=f"{op.value}, {topo.name}, {n} GPUs",
        )
        print(f"# plot written to {args.plot}", file=sys.stderr)
    return 0


def _intervals(
    topo: Topology, group: tuple[str, ...], op: CollectiveOp, results: Any, level: float | None
) -> list[Any]:
    """Each size's residual interval (:func:`perfmodel.intervals.answers.collective_interval`),
    or ``None`` for each with ``--interval off`` (or a group of no GPU, or no record)."""
    from perfmodel.errors import PerfModelError
    from perfmodel.topology.schema import NodeKind

    gpus = [g for g in group if topo.graph.nodes[g]["kind"] is NodeKind.GPU]
    if level is None or not gpus:
        return [None] * len(results)
    from perfmodel.intervals.answers import collective_interval

    try:
        return [collective_interval(topo, gpus, op.value, r.message_bytes, level) for r in results]
    except PerfModelError:
        return [None] * len(results)


def _interval_fields(r: Any, iv: Any) -> dict[str, Any]:
    """The ``--json`` fields of one size's range (empty without one)."""
    if iv is None:
        return {}
    t_lo, t_hi = iv.time(r.time_s)
    b_lo, b_hi = iv.speed(r.busbw_Bps)
    a_lo, a_hi = iv.speed(r.algbw_Bps)
    return {
        "time_s_low": t_lo,
        "time_s_high": t_hi,
        "busbw_Bps_low": b_lo,
        "busbw_Bps_high": b_hi,
        "algbw_Bps_low": a_lo,
        "algbw_Bps_high": a_hi,
        "interval_basis": iv.basis,
        "interval_warning": iv.warning,
    }


def _interval_notes(results: Any, ivs: list[Any], level: float | None) -> list[str]:
    """What the ranges rest on: each distinct basis once, with the sizes it covers."""
    if level is None:
        return []
    seen: dict[str, list[int]] = {}
    for r, iv in zip(results, ivs, strict=True):
        if iv is not None:
            text = iv.basis + (f"; {iv.warning}" if iv.warning else "")
            seen.setdefault(text, []).append(int(r.message_bytes))
    pct = f"{100 * level:g}%"
    return [
        f"{pct} range of {units.format_bytes(min(sizes))}-{units.format_bytes(max(sizes))}: from "
        f"{text}"
        for text, sizes in seen.items()
    ]


def reference_lines(
    topo: Topology,
    op: CollectiveOp,
    group: tuple[str, ...],
    results: list[Any],
    reprice: Callable[[Topology, float], Any] | None = None,
) -> list[str]:
    """``checked against SOURCE: measured ..., predicted ... (+x%)`` for every published
    measurement of the system (``[[system.reference]]``) this run matches: same collective,
    ranks, servers and size. What the prediction is checked against, never an input.

    A measured run whose NCCL environment (``nccl_env``) differs from this run's
    (``--nccl-env``) is compared like with like: ``reprice(system, bytes)`` prices the same
    call again on the system under the reference's environment
    (:func:`~perfmodel.comm.nccl_env.with_nccl_env`), as that run's NCCL would have chosen;
    without ``reprice`` the line says it is not compared."""
    from perfmodel.comm.nccl_env import NcclEnv, nccl_env_of, with_nccl_env

    nodes = len({topo.server_of(g) for g in group})
    run_env = nccl_env_of(topo)
    out = []
    for ref in topo.references:
        if ref.op is not op or ref.gpus != len(group) or ref.nodes != nodes:
            continue
        env = NcclEnv.parse(ref.nccl_env, where=f"{topo.source}: reference {ref.source}")
        under_env = None
        for r in results:
            if int(r.message_bytes) != ref.message_bytes:
                continue
            under = ""
            if env != run_env:
                if reprice is None:
                    out.append(
                        f"not checked against {ref.source}: that run had "
                        f"{env.text() or 'no NCCL variables'}, this one "
                        f"{run_env.text() or 'none'}"
                    )
                    continue
                if under_env is None:
                    under_env = with_nccl_env(topo, env)
                r = reprice(under_env, r.message_bytes)
                under = f" under its {env.text() or 'default NCCL environment'}"
            err = (r.busbw_Bps / ref.busbw_Bps - 1) * 100
            out.append(
                f"checked against {ref.source}: measured busbw {ref.busbw_Bps / units.GB:.1f} "
                f"GB/s, predicted{under} {r.busbw_Bps / units.GB:.1f} GB/s ({err:+.1f}%, "
                f"{r.algorithm.value})"
            )
    return out


def _gbs(x: float) -> str:
    return f"{x / units.GB:.2f}" if x == x and x != float("inf") else "inf"


def _compare(args: argparse.Namespace) -> int:
    from perfmodel.comm.nccl_tests import health_check, read_nccl_tests

    log = read_nccl_tests(args.compare, op=args.op if args.op != "allreduce" else None)
    op = log.op or CollectiveOp.parse(args.op)
    guessed = ""
    if not args.system:
        from perfmodel.comm.nccl_tests import guess_system

        dev = " ".join(log.devices)
        name = guess_system(log.devices)
        if name is None:
            raise ConfigError(
                f"{args.compare}: cannot tell the system from the log's devices ({dev or 'none listed'}); give --system",
                value=dev,
                where="--system",
            )
        args.system = name
        if args.nodes is None and log.nodes > 1:  # a --nodes given (1 too) wins
            args.nodes = log.nodes
        guessed = " (guessed from the log's devices; give --system to choose)"
    layout, layout_note = _log_layout(args.processes, log)
    topo = with_process_layout(system_from_args(args), layout)
    ranks = args.gpus or log.ranks or topo.num_gpus
    group = _group(topo, ranks)
    if args.group:
        group = tuple(x.strip() for x in args.group.split(",") if x.strip())
    model = _model(args, topo)
    rows = []
    for row in log.rows:
        pred = model.collective(op, row.size_bytes, group, args.algorithm)
        err = (
            (pred.busbw_Bps - row.busbw_Bps) / row.busbw_Bps * 100
            if row.busbw_Bps > 0
            else float("nan")
        )
        terr = (pred.time_s - row.time_s) / row.time_s * 100
        rows.append((row, pred, err, terr))
    verdict = health_check([r for r, *_ in rows], [p.time_s for _, p, _, _ in rows])
    if args.json:
        print_json(
            {
                "log": str(args.compare),
                "system": topo.name,
                "gpus": len(group),
                "op": op.value,
                "processes": layout.value,
                "processes_from": layout_note,
                "skipped_lines": [s.__dict__ for s in log.skipped],
                "error_convention": "time_error_pct = predicted / measured - 1 (x100)",
                "verdict": verdict.text,
                "health": verdict.health.value,
                "exit_status": verdict.exit_status,
                "rows": [
                    {
                        "size_bytes": r.size_bytes,
                        "measured_time_s": r.time_s,
                        "predicted_time_s": p.time_s,
                        "measured_busbw_Bps": r.busbw_Bps,
                        "predicted_busbw_Bps": p.busbw_Bps,
                        "time_error_pct": t,
                        "measured_inplace_time_s": r.inplace_time_s,
                        "algorithm": p.algorithm.value,
                        "protocol": p.protocol.value if p.protocol else None,
                    }
                    for r, p, _, t in rows
                ],
            }
        )
    else:
        print(f"# {args.compare}: {op.value}, {len(group)} ranks on {topo.name}{guessed}")
        print(f"# processes: {layout.value} ({layout_note})")
        print(
            "# time err = predicted / measured - 1 (out-of-place time): negative = the machine is "
            "slower than the model expects; in-place = the log's in-place time"
        )
        print(
            f"#{'size':>12} {'meas us':>10} {'in-pl us':>10} {'pred us':>10} {'meas busbw':>11} {'pred busbw':>11} {'time err':>9}  algorithm"
        )
        for r, p, _, t in rows:
            algo = p.algorithm.value + (f"/{p.protocol.value}" if p.protocol else "")
            inpl = f"{r.inplace_time_s * 1e6:>10.1f}" if r.inplace_time_s else f"{'-':>10}"
            print(
                f" {r.size_bytes:>12} {r.time_s * 1e6:>10.1f} {inpl} {p.time_s * 1e6:>10.1f} "
                f"{_gbs(r.busbw_Bps):>11} {_gbs(p.busbw_Bps):>11} {t:>+8.1f}%  {algo}"
            )
        large = [abs(t) for r, _, _, t in rows if r.size_bytes >= 64 * units.MiB]
        if large:
            print(
                f"# median |time error| for sizes >= 64 MiB: {statistics.median(large):.1f}% ({len(large)} sizes)"
            )
        for s in log.skipped:
            print(f"# skipped line {s.line}: {s.reason}: {s.text.strip()[:60]}")
        print(verdict.text)
    if args.plot:
        from perfmodel.comm.plot import plot_busbw

        plot_busbw(
            args.plot,
            [r.size_bytes for r, _, _, _ in rows],
            {"predicted": [p.busbw_Bps for _, p, _, _ in rows]},
            measured=([r.size_bytes for r, _, _, _ in rows], [r.busbw_Bps for r, _, _, _ in rows]),
            title=f"{op.value}, {len(group)} ranks, {topo.name}: measured vs predicted",
        )
        print(f"# plot written to {args.plot}", file=sys.stderr)
    # a script acts on the status: 0 healthy, 3 degraded, 4 nothing to judge (docs/cli.md)
    return verdict.exit_status


def _log_layout(flag: ProcessLayout | None, log: Any) -> tuple[ProcessLayout, str]:
    """The compared run's process layout and where it came from: ``--processes`` when given,
    else the log's ``Pid`` column (:attr:`~perfmodel.comm.nccl_tests.NcclTestsLog.processes`),
    else one process per GPU."""
    if flag is not None:
        return flag, "--processes"
    found = log.processes
    if found is not None:
        return found, "the log's Pid column"
    if log.rank_processes:
        return ProcessLayout.PER_GPU, (
            "the log's processes drive some but not all of a server's GPUs; priced as one "
            "process per GPU (mixed layouts not modelled)"
        )
    return ProcessLayout.PER_GPU, "the default: the log lists no Pid"
