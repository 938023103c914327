"""``perfmodel hw``: browse the hardware catalogue (GPUs, link technologies, host CPUs).

Subcommands::

    perfmodel hw gpus  [--json]     table of GPU models (dense peaks, memory, bandwidth)
    perfmodel hw links [--json]     table of link technologies (per direction)
    perfmodel hw cpus  [--json]     table of host CPUs (per socket)
    perfmodel hw show NAME [--json] one GPU, link or CPU with every field and its sources

Tables print human units (GiB, GB/s, TFLOPS, us); ``--json`` prints SI units (bytes, bytes/s,
FLOP/s, seconds) as the library uses them. An unknown name is one line on stderr naming it and
the closest catalogue names, exit code 2.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Sequence
from typing import Any

from perfmodel import units
from perfmodel.cli import error_exit
from perfmodel.cli._common import add_command_group, print_json
from perfmodel.dtypes import DType
from perfmodel.errors import UnknownHardwareError
from perfmodel.hardware import (
    CPUSpec,
    GPUSpec,
    LinkTech,
    get_cpu,
    get_gpu,
    get_link,
    list_cpus,
    list_gpus,
    list_links,
)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``hw`` and its subcommands to the top-level parser."""
    sub = add_command_group(
        subparsers,
        "hw",
        help="hardware catalogue: GPUs, links, CPUs",
        description="Browse the hardware catalogue. Every number has a source "
        "(perfmodel hw show NAME).",
        commands=("gpus", "links", "cpus", "show"),
    )
    for name, helptext, func in (
        ("gpus", "table of GPU models", _cmd_gpus),
        ("links", "table of link technologies", _cmd_links),
        ("cpus", "table of host CPUs (per socket)", _cmd_cpus),
    ):
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("--json", action="store_true", help="print JSON in SI units")
        p.set_defaults(func=func)
    show = sub.add_parser(
        "show", help="one GPU, link or CPU with its sources", description="Show one entry."
    )
    show.add_argument("name", help="GPU, link technology or CPU name or alias")
    show.add_argument("--json", action="store_true", help="print JSON in SI units")
    show.set_defaults(func=_cmd_show)


# ----------------------------------------------------------------------------------- tables


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


def _peak(gpu: GPUSpec, dtype: DType) -> str:
    value = gpu.peak_flops.get(dtype)
    if value is None:
        return "-"
    tf = value / units.TFLOPS
    return f"{tf:.0f}" if tf >= 10_000 else f"{tf:.4g}"


def _gpu_links(gpu: GPUSpec) -> str:
    """The GPU-to-GPU links column: ``18x gen5`` (NVLink), ``7x IF 64`` (AMD Infinity Fabric,
    GB/s per link per direction) or ``-``."""
    if gpu.nvlink_links:
        return f"{gpu.nvlink_links}x gen{gpu.nvlink_gen}"
    if gpu.infinity_fabric_links and gpu.infinity_fabric_link_Bps:
        return f"{gpu.infinity_fabric_links}x IF {gpu.infinity_fabric_link_Bps / units.GB:.4g}"
    return "-"


def _print_catalogue(
    args: argparse.Namespace,
    entries: Sequence[Any],
    header: Sequence[str],
    row: Callable[[Any], Sequence[str]],
    notes: str,
) -> int:
    """A catalogue table (``hw gpus``, ``links``, ``cpus``): with ``--json`` every entry's fields
    in SI units, else one row per entry in human units and the notes under the table."""
    if args.json:
        print_json([e.to_dict() for e in entries])
        return 0
    print(_table(header, [row(e) for e in entries]))
    print(notes)
    return 0


def _gpu_row(g: GPUSpec) -> tuple[str, ...]:
    return (
        g.name + (" *" if g.datasheet_only else ""),
        g.architecture,
        g.form_factor,
        str(g.sm_count),
        _fmt(g.memory_bytes, units.GiB, 0),
        _fmt(g.memory_bandwidth_Bps, units.GB, 0),
        *(_peak(g, d) for d in DType),
        _gpu_links(g),
        f"gen{g.pcie_gen}" if g.pcie_gen else "-",
    )


def _cmd_gpus(args: argparse.Namespace) -> int:
    header = (
        "name", "arch", "form", "SMs", "mem GiB", "mem GB/s", "fp64", "fp32", "tf32",
        "fp16", "bf16", "fp8", "fp6", "fp4", "GPU links", "PCIe",
    )  # fmt: skip
    notes = (
        "\nPeaks: dense TFLOPS (no sparsity); fp16/bf16/tf32/fp8 on tensor cores with FP32\n"
        "accumulate where present; fp6/fp4 the block-scaled formats (NVFP4, MXFP6/MXFP4).\n"
        "GPU links: NVLink count x generation, or Infinity Fabric (IF) links x GB/s per direction.\n"
        "* datasheet only: no training run or calibration profile has checked perfmodel on it.\n"
        "Sources: perfmodel hw show NAME."
    )
    return _print_catalogue(args, list_gpus(), header, _gpu_row, notes)


def _link_row(lk: LinkTech) -> tuple[str, ...]:
    return (
        lk.name,
        lk.family.value,
        lk.protocol or "-",
        _fmt(lk.bandwidth_Bps, units.GB, 3),
        f"{lk.efficiency:.2f}",
        _fmt(lk.effective_bandwidth_Bps, units.GB, 3),
        _fmt(lk.latency_s, units.us, 2),
        ", ".join(lk.aliases) or "-",
    )


def _cmd_links(args: argparse.Namespace) -> int:
    header = ("name", "family", "protocol", "raw GB/s", "eff", "eff GB/s", "latency us", "aliases")
    notes = "\nBandwidth per direction per link (or switch port), after line coding."
    return _print_catalogue(args, list_links(), header, _link_row, notes)


def _cpu_row(c: CPUSpec) -> tuple[str, ...]:
    return (
        c.name,
        c.architecture,
        str(c.cores),
        _fmt(c.base_clock_hz, units.GHz, 2),
        _fmt(c.peak_fp32_flops, units.GFLOPS, 0),
        str(c.memory_channels),
        _fmt(c.memory_bandwidth_Bps, units.GB, 1),
        f"{c.pcie_lanes}x gen{c.pcie_gen}",
        f"{c.socket_links}x {c.socket_link}",
    )


def _cmd_cpus(args: argparse.Namespace) -> int:
    header = (
        "name", "arch", "cores", "base GHz", "fp32 GFLOPS", "mem ch", "mem GB/s", "PCIe",
        "socket link",
    )  # fmt: skip
    notes = "\nOne socket per row; peak FP32 at the base clock (cores x clock x FLOP/cycle)."
    return _print_catalogue(args, list_cpus(), header, _cpu_row, notes)


# ------------------------------------------------------------------------------------- show


def _lookup(name: str) -> GPUSpec | LinkTech | CPUSpec:
    """Find ``name`` among GPUs, links and CPUs; UnknownHardwareError with close matches."""
    for getter in (get_gpu, get_link, get_cpu):
        try:
            return getter(name)
        except UnknownHardwareError:
            continue
    canonical = {
        key.lower(): spec.name
        for spec in (*list_gpus(), *list_links(), *list_cpus())
        for key in (spec.name, *spec.aliases)
    }
    close = difflib.get_close_matches(str(name).lower(), list(canonical), n=8, cutoff=0.5)
    names = list(dict.fromkeys(canonical[c] for c in close))[:4]
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    raise UnknownHardwareError(
        f"unknown hardware name {name!r}: not a GPU, link or CPU in the catalogue{hint}",
        value=name,
        where="perfmodel hw show",
    )


def _describe(spec: GPUSpec | LinkTech | CPUSpec) -> list[str]:
    lines: list[str]
    if isinstance(spec, GPUSpec):
        lines = [
            f"GPU {spec.name}  ({spec.vendor} {spec.architecture}, {spec.form_factor})",
            f"  SMs                {spec.sm_count}",
            f"  boost clock        {_fmt(spec.boost_clock_hz, units.GHz, 3)} GHz",
            f"  memory             {spec.memory_bytes} bytes ({units.format_bytes(spec.memory_bytes)})",
            f"  memory bandwidth   {_fmt(spec.memory_bandwidth_Bps, units.GB, 1)} GB/s",
            f"  L2                 {units.format_bytes(spec.l2_bytes) if spec.l2_bytes else '-'}",
            f"  TDP                {_fmt(spec.tdp_w, 1.0, 0)} W",
            f"  NVLink             {spec.nvlink_links} links, gen {spec.nvlink_gen or '-'}",
            *(
                [
                    f"  Infinity Fabric    {spec.infinity_fabric_links} links x "
                    f"{_fmt(spec.infinity_fabric_link_Bps, units.GB, 1)} GB/s per direction"
                ]
                if spec.infinity_fabric_links
                else []
            ),
            f"  PCIe               gen {spec.pcie_gen or '-'}",
            "  dense peaks        "
            + ", ".join(
                f"{d.value} {v / units.TFLOPS:.4g} TFLOPS" for d, v in spec.peak_flops.items()
            ),
            *(
                [
                    f"  {label:<18} "
                    + ", ".join(
                        f"{f.value} {v / units.TFLOPS:.4g} TFLOPS" for f, v in rates.items()
                    )
                    for label, rates in (
                        ("sustained GEMM", spec.sustained_flops),
                        ("burst GEMM", spec.burst_flops),
                    )
                    if rates
                ]
            ),
            *(
                ["  datasheet only     yes: no training run or calibration has checked it"]
                if spec.datasheet_only
                else []
            ),
        ]
    elif isinstance(spec, LinkTech):
        lines = [
            f"link {spec.name}  (family {spec.family.value}"
            + (f", protocol {spec.protocol})" if spec.protocol else ")"),
            f"  raw bandwidth      {spec.bandwidth_Bps / units.GB:.4f} GB/s per direction",
            f"  efficiency         {spec.efficiency:.2f}",
            f"  effective          {spec.effective_bandwidth_Bps / units.GB:.4f} GB/s per direction",
            f"  latency            {spec.latency_s / units.us:.2f} us",
        ]
    else:
        lines = [
            f"CPU {spec.name}  ({spec.vendor} {spec.architecture}, one socket)",
            f"  cores              {spec.cores} ({spec.threads_per_core} threads each)",
            f"  clock              {_fmt(spec.base_clock_hz, units.GHz, 2)} GHz base, "
            f"{_fmt(spec.boost_clock_hz, units.GHz, 2)} GHz boost",
            f"  peak FP32          {spec.peak_fp32_flops / units.GFLOPS:.1f} GFLOP/s "
            f"({spec.fp32_flop_per_cycle} FLOP/cycle/core at base clock)",
            f"  memory             {spec.memory_channels} x {spec.memory_type or '?'}, "
            f"{spec.memory_bandwidth_Bps / units.GB:.1f} GB/s",
            f"  PCIe               {spec.pcie_lanes} lanes gen {spec.pcie_gen}",
            f"  socket links       {spec.socket_links} x {spec.socket_link}",
            f"  TDP                {_fmt(spec.tdp_w, 1.0, 0)} W",
        ]
    if spec.aliases:
        lines.append(f"  aliases            {', '.join(spec.aliases)}")
    if spec.notes:
        lines.append(f"  notes              {spec.notes}")
    lines.append("  sources")
    lines += [f"    {key}: {text}" for key, text in spec.sources.items()]
    return lines


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        spec = _lookup(args.name)
    except UnknownHardwareError as exc:
        # One clean line (KeyError's str() would quote the message).
        return error_exit(exc.args[0])
    if args.json:
        kind = (
            "gpu" if isinstance(spec, GPUSpec) else "link" if isinstance(spec, LinkTech) else "cpu"
        )
        print_json({"kind": kind, **spec.to_dict()})
        return 0
    print("\n".join(_describe(spec)))
    return 0
