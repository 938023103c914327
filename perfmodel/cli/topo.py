"""``perfmodel topo``: the topology catalogue, analyses, drawings and importers.

Subcommands::

    perfmodel topo list [--json]                         catalogue systems
    perfmodel topo show SYSTEM [--nodes N] [--json]      GPUs, links, bandwidth matrix, bisection,
                                                         NCCL rings, nvidia-smi topo -m matrix
    perfmodel topo draw SYSTEM -o FILE.png               picture of the graph
    perfmodel topo import FILE [--gpu G] [--json]        nvidia-smi text / NCCL XML / JSON
                          [-o box.toml [--force]]        ... written as a system file

``SYSTEM`` may also be given as ``--system`` with every hardware flag of ``perfmodel predict``
(``--system custom --gpu V100-SXM2-16GB --gpus-per-node 4 --intra-node nvlink2``, ``--network``,
``--nics-per-node``, ``--fabric``, ``--oversubscription``, ``--gpu`` for GPU-selectable systems).
Text output uses GB/s (1e9 bytes/s); ``--json`` uses bytes/s and seconds. ``topo show --json``
output is importable with ``topo import``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any

from perfmodel.cli import _types as ty
from perfmodel.cli._common import (
    add_command_group,
    add_system_args,
    add_typed_arg,
    print_json,
    system_from_args,
)
from perfmodel.errors import ConfigError
from perfmodel.topology import Topology, list_systems, load_system
from perfmodel.topology.analysis import (
    bandwidth_matrix,
    bisection_bandwidth,
    format_smi_matrix,
    nvlink_domains,
    smi_matrix,
)
from perfmodel.topology.export import export_dict
from perfmodel.topology.importers import import_topology
from perfmodel.topology.schema import NodeKind, effective_bandwidth
from perfmodel.units import GB

# Above this many GPUs the bandwidth matrix covers the first two servers only (n^2 routes).
MATRIX_GPU_LIMIT = 128


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``topo`` and its subcommands to the top-level parser."""
    sub = add_command_group(
        subparsers,
        "topo",
        help="topologies: list, show, draw, import",
        description="Hardware topologies as graphs: the catalogue, analyses, pictures, importers.",
        commands=("list", "show", "draw", "import"),
    )

    p = sub.add_parser("list", help="catalogue systems", description="List catalogue systems.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser(
        "show",
        help="GPUs, links, bandwidth matrix, bisection of a system",
        description="Show a system: GPUs, links, all-pairs GPU bandwidth (bytes/s), bisection, "
        "NCCL-style rings and the nvidia-smi topo -m matrix.",
    )
    p.add_argument("system_pos", nargs="?", metavar="SYSTEM", help="catalogue name or .toml file")
    add_system_args(p, required=False)
    p.add_argument("--json", action="store_true", help="print JSON (importable by topo import)")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser(
        "draw", help="draw a system to a PNG", description="Draw a system's graph to a PNG file."
    )
    p.add_argument("system_pos", nargs="?", metavar="SYSTEM", help="catalogue name or .toml file")
    add_system_args(p, required=False)
    p.add_argument(
        "-o", "--output", required=True, type=ty.output_file("-o"), help="output file (.png)"
    )
    add_typed_arg(p, "--title", ty.title_text, help="picture title (at most 200 characters)")
    p.set_defaults(func=_cmd_draw)

    p = sub.add_parser(
        "import",
        help="read nvidia-smi topo -m text, NCCL topology XML or JSON",
        description="Import a real machine's topology (format auto-detected) and show it.",
    )
    p.add_argument("file", help="nvidia-smi topo -m output, NCCL_TOPO_DUMP_FILE XML or JSON")
    p.add_argument("--gpu", help="GPU model (needed for nvidia-smi text; overrides XML inference)")
    p.add_argument("--network", help="fabric link technology of the NICs (e.g. ib-hdr)")
    p.add_argument(
        "--p2p-status",
        metavar="FILE",
        help="nvidia-smi topo -p2p r output: GPU pairs not OK communicate through host memory",
    )
    p.add_argument("--json", action="store_true", help="print JSON (importable again)")
    p.add_argument(
        "-o",
        "--output",
        type=ty.output_file("-o", ".toml", ".json"),
        help="write a system file that --system accepts (predict, compare, comm, sweep): "
        "NAME.toml (a topology file stating the import's assumptions) or NAME.json; written "
        "atomically, and an existing file only if perfmodel wrote it (else --force)",
    )
    p.add_argument(
        "--force", action="store_true", help="with -o: replace a file perfmodel did not write"
    )
    p.set_defaults(func=_cmd_import)


def _topology(args: argparse.Namespace) -> Topology:
    pos = getattr(args, "system_pos", None)
    if pos is not None and args.system is not None and pos != args.system:
        raise ConfigError(
            f"two systems given: {pos!r} and --system {args.system!r}", value=pos, where="SYSTEM"
        )
    args.system = pos or args.system
    if args.system is None:
        raise ConfigError("give a SYSTEM (see `perfmodel topo list`) or --system", where="SYSTEM")
    return system_from_args(args)


# ----------------------------------------------------------------------------------- list


def _intra_summary(topo: Topology) -> str:
    g = topo.graph
    fams: dict[str, int] = {}
    for u, v, d in g.edges(data=True):
        ku, kv = g.nodes[u]["kind"], g.nodes[v]["kind"]
        if NodeKind.GPU in (ku, kv):
            fams[d["tech"]] = fams.get(d["tech"], 0) + 1
    if any(t.startswith("nvswitch") for t in fams):
        return next(t for t in fams if t.startswith("nvswitch"))
    nv = sorted(t for t in fams if t.startswith("nvlink") and t != "nvlink-c2c")
    if nv:
        return nv[0]
    xgmi = sorted(t for t in fams if t.startswith("xgmi"))
    if xgmi:
        return xgmi[0]
    return sorted(fams)[0] if fams else "-"


def _cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for name in list_systems():
        t = load_system(name)
        fab = t.fabric
        rows.append(
            {
                "name": name,
                "gpus": t.num_gpus,
                "gpu": t.gpu_spec().name,
                "intra_node": _intra_summary(t),
                "network": None if fab is None else fab.network,
                "nics_per_node": None if fab is None else fab.nics_per_node,
                "fabric": None if fab is None else fab.topology,
                "description": t.description,
            }
        )
    if args.json:
        print_json(rows)
        return 0
    wn = max(22, *(len(r["name"]) for r in rows))
    wg = max(16, *(len(r["gpu"]) for r in rows))
    wi = max(12, *(len(r["intra_node"]) for r in rows))
    wf = max(9, *(len(r["network"] or "-") for r in rows))
    header = (
        f"{'system':<{wn}} {'GPUs':>4}  {'GPU':<{wg}} {'intra-node':<{wi}} {'network':<{wf}} "
        f"{'NICs':>4}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['name']:<{wn}} {r['gpus']:>4}  {r['gpu']:<{wg}} {r['intra_node']:<{wi}} "
            f"{r['network'] or '-':<{wf}} {r['nics_per_node'] or '-':>4}"
        )
    print(
        "\nGPUs: per server (a rack-scale system is one server: one NVLink domain). "
        "Cloud instances: perfmodel topo show NAME (price, transport); docs/hardware.md"
    )
    return 0


# ----------------------------------------------------------------------------------- show


def show_data(topo: Topology) -> dict[str, Any]:
    """Everything ``topo show --json`` prints (bytes/s, seconds); ``topology`` is importable."""
    g = topo.graph
    gpus = list(topo.gpus)
    matrix_gpus = gpus
    if len(gpus) > MATRIX_GPU_LIMIT:
        first_two = {topo.server_of(gpus[0]), topo.server_of(gpus[-1])}
        matrix_gpus = [x for x in gpus if topo.server_of(x) in first_two]
    m = bandwidth_matrix(topo, matrix_gpus)
    bis = bisection_bandwidth(topo)
    # Ring channels as the communication model builds them (NCCL-style packing inside a server,
    # one NIC per channel across servers); topology.analysis.nccl_rings joins servers on plain
    # GPU-to-GPU routes and under-counts multi-NIC servers.
    from perfmodel.comm import CommCostModel

    rings = CommCostModel(topo).group_info(topo.gpus)
    labels, rows = smi_matrix(topo)
    domains = nvlink_domains(topo)
    trays = sorted({g.nodes[n]["tray"] for n in topo.server_nodes(0) if "tray" in g.nodes[n]})
    kinds: dict[str, int] = {}
    for _, d in g.nodes(data=True):
        kinds[d["kind"].value] = kinds.get(d["kind"].value, 0) + 1
    techs: dict[str, dict[str, Any]] = {}
    for u, v, d in g.edges(data=True):
        t = techs.setdefault(
            d["tech"], {"family": d["family"].value, "edges": 0, "links": 0, "max_edge_Bps": 0.0}
        )
        t["edges"] += 1
        t["links"] += int(d["count"])
        t["max_edge_Bps"] = max(t["max_edge_Bps"], effective_bandwidth(g, u, v))
    return {
        "topology": export_dict(topo),
        "summary": {
            "name": topo.name,
            "description": topo.description,
            "num_nodes": topo.num_nodes,
            "num_gpus": topo.num_gpus,
            "gpus_per_node": topo.gpus_per_node,
            "gpu_model": topo.gpu_spec().name,
            "node_kinds": kinds,
            "links": techs,
            "assumptions": list(topo.meta.get("assumptions", ())),
            "nvlink_domains": [len(d) for d in domains],
            "compute_trays": len(trays),
            "cloud": None if topo.cloud is None else dataclasses.asdict(topo.cloud),
        },
        "gpus": gpus,
        "bandwidth_matrix": {
            "unit": "bytes/s per direction (effective: raw x efficiency); diagonal null",
            "gpus": matrix_gpus,
            "values_Bps": [
                [None if math.isinf(x) else float(x) for x in row] for row in m.tolist()
            ],
        },
        "bisection": {
            "bandwidth_Bps": bis.bandwidth_Bps,
            "method": bis.method.value,
            "partitions_checked": bis.partitions_checked,
            "side_a": list(bis.side_a),
            "side_b": list(bis.side_b),
        },
        "rings": {
            "channels": len(rings.channels),
            "bandwidth_Bps": rings.ring_bw_Bps,
            "per_channel_Bps": rings.ring_bw_Bps / len(rings.channels) if rings.channels else None,
            "orders": [list(c.order) for c in rings.channels],
        },
        "nvidia_smi_topo_m": {"devices": list(labels), "rows": [list(r) for r in rows]},
    }


def _print_show(topo: Topology) -> None:
    data = show_data(topo)
    s = data["summary"]
    fab = topo.fabric
    print(f"{s['name']}: {s['description']}")
    print(
        f"  {s['num_gpus']} GPUs ({s['gpu_model']}), {s['num_nodes']} node(s) x "
        f"{s['gpus_per_node']} GPUs"
        + (
            ""
            if fab is None
            else f"; fabric {fab.network} {fab.topology}, {fab.nics_per_node} NIC(s)/node"
            + (f", {fab.oversubscription:g}:1" if fab.oversubscription != 1 else "")
        )
    )
    print("  nodes: " + ", ".join(f"{k} {n}" for k, n in s["node_kinds"].items()))
    print("  " + _domains_line(s["nvlink_domains"], s["compute_trays"]))
    if topo.cloud is not None:
        print("  " + topo.cloud.describe())
    for a in s["assumptions"]:
        print(f"  assumption: {a}")
    from perfmodel.topology.nccl_p2p import nccl_p2p_rule_note

    rule = nccl_p2p_rule_note(topo, topo.gpus)
    if rule:
        print(f"  {rule}")
    print("\nLinks (effective bandwidth per direction of the widest edge):")
    for tech, t in sorted(s["links"].items(), key=lambda kv: -kv[1]["max_edge_Bps"]):
        print(
            f"  {tech:<14} {t['family']:<11} {t['edges']:>4} edges {t['links']:>5} links  "
            f"{t['max_edge_Bps'] / GB:8.1f} GB/s"
        )
    bm = data["bandwidth_matrix"]
    names = bm["gpus"]
    if len(names) <= 16:
        print("\nGPU pair bandwidth, GB/s (1e9 bytes/s) per direction, bottleneck of the route:")
        short = [n.replace("/gpu", ":") if "/" in n else n.replace("gpu", "") for n in names]
        w = max(6, *(len(x) + 1 for x in short))
        print(" " * w + "".join(f"{x:>{w}}" for x in short))
        for lab, row in zip(short, bm["values_Bps"], strict=True):
            cells = "".join(f"{'-':>{w}}" if v is None else f"{v / GB:>{w}.1f}" for v in row)
            print(f"{lab:<{w}}{cells}")
    else:
        vals = [v for row in bm["values_Bps"] for v in row if v is not None]
        print(
            f"\nGPU pair bandwidth over {len(names)} GPUs: min {min(vals) / GB:.1f}, "
            f"max {max(vals) / GB:.1f} GB/s per direction (full matrix: --json)"
        )
    b = data["bisection"]
    print(
        f"\nBisection bandwidth: {b['bandwidth_Bps'] / GB:.1f} GB/s per direction "
        f"({b['method']}, {b['partitions_checked']} partitions; min cut between "
        f"{_short_list(b['side_a'])} and the rest)"
    )
    r = data["rings"]
    print(
        f"NCCL-style rings: {r['channels']} channel(s) x {r['per_channel_Bps'] / GB:.1f} GB/s = "
        f"{r['bandwidth_Bps'] / GB:.1f} GB/s; ring 0: {_short_list(r['orders'][0])}"
    )
    tray = " compute tray 0 (each tray runs its own OS)," if s["compute_trays"] > 1 else ""
    print(f"\nnvidia-smi topo -m (server 0,{tray} computed from the graph):")
    print(format_smi_matrix(topo).split("\nLegend:")[0].rstrip())


def _domains_line(sizes: list[int], trays: int) -> str:
    """``NVLink domain: 1 x 72 GPUs (18 compute trays)`` for server 0's domain sizes."""
    counts: dict[int, int] = {}
    for n in sizes:
        counts[n] = counts.get(n, 0) + 1
    parts = ", ".join(f"{c} x {n} GPU{'s' if n != 1 else ''}" for n, c in counts.items())
    word = "domain" if len(sizes) == 1 else "domains"
    line = f"NVLink {word} per server: {parts}"
    if max(sizes, default=0) <= 1:
        line += " (no NVLink or Infinity Fabric between GPUs)"
    if trays > 1:
        line += f"; {trays} compute trays of {sum(sizes) // trays} GPUs in the domain"
    return line


def _short_list(items: list[str], limit: int = 8) -> str:
    return " ".join(items) if len(items) <= limit else " ".join(items[:limit]) + " ..."


def _cmd_show(args: argparse.Namespace) -> int:
    topo = _topology(args)
    if args.json:
        print_json(show_data(topo), indent=1)
    else:
        _print_show(topo)
    return 0


# ----------------------------------------------------------------------------------- draw


def _cmd_draw(args: argparse.Namespace) -> int:
    from perfmodel.topology.draw import draw_topology

    topo = _topology(args)
    out = draw_topology(topo, args.output, title=args.title)
    print(f"wrote {out}")
    return 0


# ----------------------------------------------------------------------------------- import


def _cmd_import(args: argparse.Namespace) -> int:
    topo = import_topology(args.file, gpu=args.gpu, network=args.network)
    if getattr(args, "p2p_status", None):
        from perfmodel._io import read_text
        from perfmodel.topology.importers import parse_p2p_status

        text = read_text(args.p2p_status, where="--p2p-status")  # regular UTF-8 file, else exit 2
        topo = topo.with_p2p_denied(parse_p2p_status(text, source=str(args.p2p_status)))
    written = None
    if getattr(args, "output", None):
        written = write_imported_system(topo, args.file, args.output, force=args.force)
        topo = load_system(str(written))  # what --system reads back from it
    if args.json:
        print_json(show_data(topo), indent=1)
    else:
        _print_show(topo)
    if written is not None:
        print(
            f"wrote {written}: use it as --system {written} (predict, compare, comm, sweep); "
            "edit its [[link]] tables or assumptions as you measure",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0


def import_assumptions(topo: Topology) -> list[str]:
    """The import's assumptions plus what it could not know about the network: the NIC speed
    (no default fabric: multi-node predictions need ``--network``) or the NICs themselves."""
    out = [str(a) for a in topo.meta.get("assumptions", ())]
    nics = sum(1 for n in topo.server_nodes(0) if topo.graph.nodes[n]["kind"] is NodeKind.NIC)
    if topo.fabric is None and nics:
        out.append(
            f"NIC speed unknown ({nics} NIC(s) in the input, no link technology stated): no "
            "default fabric; give --network (e.g. ib-ndr) to topo import or to predict for "
            "--nodes > 1"
        )
    elif not nics:
        out.append("no NIC in the input: a single server; --nodes > 1 needs a NIC to join servers")
    return out


def write_imported_system(topo: Topology, source: str, output: str, *, force: bool) -> Any:
    """Write an imported machine as ``output`` (``.toml``: a topology file with its
    :func:`import_assumptions`; ``.json``: :func:`export_dict` with them), atomically, never
    replacing a file perfmodel did not write unless ``force``; return the path."""
    import dataclasses
    import datetime
    from pathlib import Path

    from perfmodel.topology.export import server_description
    from perfmodel.topology.files import write_system_file

    out = Path(output)
    assumptions = import_assumptions(topo)
    topo = dataclasses.replace(topo, meta={**topo.meta, "assumptions": tuple(assumptions)})
    if out.suffix.lower() == ".json":
        return _write_json_system(topo, out, force=force)
    desc = server_description(topo, name=out.stem, source=str(out))
    header = f"from {source} on {datetime.date.today().isoformat()}"
    return write_system_file(desc, out, header=header, force=force)


def _write_json_system(topo: Topology, out: Any, *, force: bool) -> Any:
    """:func:`export_dict` of ``topo`` at ``out`` (atomically; an existing file only if it is a
    perfmodel export, or ``force``)."""
    from perfmodel._io import os_error_message, write_json_atomic
    from perfmodel.errors import FileAccessError
    from perfmodel.topology.export import EXPORT_FORMAT

    if out.exists() and not force:
        try:
            old = json.loads(out.read_text(encoding="utf-8"))
            ours = isinstance(old, dict) and (
                old.get("format") == EXPORT_FORMAT
                or (
                    isinstance(old.get("topology"), dict)
                    and old["topology"].get("format") == EXPORT_FORMAT
                )
            )
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise FileAccessError(
                f"-o {out}: the file exists and is not a perfmodel topology export; give "
                "--force to replace it, or another name",
                value=str(out),
                where="-o",
            )
    data = {**export_dict(topo), "name": out.stem}
    try:
        write_json_atomic(out, data)
    except OSError as exc:
        raise FileAccessError(
            f"-o {out}: {os_error_message(exc)}", value=str(out), where="-o"
        ) from exc
    return out
