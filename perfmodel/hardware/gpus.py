"""GPU specifications loaded from ``gpus.toml`` (datasheet numbers, each with a source).

Schema of one ``[[gpu]]`` table in ``gpus.toml``::

    name = "V100-SXM2-16GB"            # canonical name (used in topology files and on the CLI)
    aliases = ["v100", "v100-sxm2"]    # case-insensitive alternative names
    vendor = "NVIDIA"
    architecture = "Volta"
    form_factor = "SXM2"              # SXM2 | SXM3 | SXM4 | SXM5 | PCIe | ...
    sm_count = 80
    boost_clock_GHz = 1.53
    memory_GB = 16.0                  # decimal GB as marketed; see memory_bytes for GiB boards
    memory_bytes = 17179869184        # optional exact size in bytes (wins over memory_GB)
    memory_bandwidth_GBps = 900.0     # decimal GB/s
    l2_MiB = 6.0                      # binary MiB (NVIDIA's '6144 KB'); l2_MB (decimal) also accepted
    tdp_W = 300
    nvlink_links = 6                  # 0 when none
    nvlink_gen = 2
    pcie_gen = 3
    infinity_fabric_links = 7         # AMD GPU-to-GPU Infinity Fabric (xGMI) links, 0 when none
    infinity_fabric_GBps = 64.0       # per link per direction, decimal GB/s
    datasheet_only = true             # no measurement checks this GPU's figures (see GPUSpec)
    [gpu.peak_TFLOPS]                  # dense (no sparsity) peaks; missing key = not supported
    fp64 = 7.8
    fp32 = 15.7
    fp16 = 125.0
    [gpu.sources]                      # one source per group of fields present (see SOURCE_GROUPS)
    compute = "NVIDIA Tesla V100 datasheet (2018), 'SXM2' column"
    memory = "..."
    sm = "..."                          # sm_count, boost clock, L2
    board = "..."                       # TDP, NVLink, Infinity Fabric, PCIe
    achieved = "..."                    # optional: published achieved rates (informative)

Every group of fields present in an entry must name its source (``SOURCE_GROUPS``); the loader
rejects an entry that does not, so no number enters the catalogue unsourced.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._schema import as_bool
from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError
from perfmodel.hardware._catalogue import (
    Catalogue,
    aliases,
    check_keys,
    integer,
    number,
    source_table,
)

_DATA = Path(__file__).with_name("gpus.toml")

_REQUIRED = (
    "name",
    "architecture",
    "form_factor",
    "sm_count",
    "memory_bandwidth_GBps",
    "peak_TFLOPS",
    "sources",
)
_ALLOWED = set(_REQUIRED) | {
    "aliases",
    "vendor",
    "boost_clock_GHz",
    "memory_GB",
    "memory_bytes",
    "l2_MB",
    "l2_MiB",
    "tdp_W",
    "nvlink_links",
    "nvlink_gen",
    "pcie_gen",
    "pcie_p2p",
    "infinity_fabric_links",
    "infinity_fabric_GBps",
    "datasheet_only",
    "notes",
}

#: Which fields each ``[gpu.sources]`` key vouches for. A group whose fields appear in an entry
#: must have a non-empty source.
SOURCE_GROUPS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "compute": ("peak_TFLOPS",),
        "memory": ("memory_GB", "memory_bytes", "memory_bandwidth_GBps"),
        "sm": ("sm_count", "boost_clock_GHz", "l2_MB", "l2_MiB"),
        "board": (
            "tdp_W",
            "nvlink_links",
            "nvlink_gen",
            "pcie_gen",
            "pcie_p2p",
            "infinity_fabric_links",
            "infinity_fabric_GBps",
        ),
    }
)


def peak_with_fallback(
    peaks: Mapping[DType, float], dtype: DType, architecture: str, name: str
) -> float:
    """Peak FLOP/s of ``dtype`` from ``peaks`` with the framework fallbacks (one rule for
    :meth:`GPUSpec.peak` and ``ComputeParams.peak``): TF32 on a GPU without TF32 units runs at
    the FP32 rate (the framework keeps FP32 math); BF16 on Volta/Turing is emulated at the FP32
    rate (no BF16 units before Ampere).

    Raises
    ------
    ConfigError
        If the GPU cannot execute the format at all (FP8 before Hopper/Ada, BF16 before Volta).
    """
    if dtype in peaks:
        return peaks[dtype]
    if dtype is DType.TF32 and DType.FP32 in peaks:
        return peaks[DType.FP32]
    if dtype is DType.BF16 and DType.FP16 in peaks and architecture in ("Volta", "Turing"):
        return peaks[DType.FP32]
    raise ConfigError(
        f"GPU {name} has no {dtype.value} support", value=dtype.value, where=f"gpu {name}"
    )


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet description of one GPU model (values in SI units; sources in ``sources``).

    Attributes
    ----------
    name, aliases
        Canonical catalogue name and case-insensitive alternatives.
    architecture, form_factor, vendor
        E.g. ``"Volta"``, ``"SXM2"``, ``"NVIDIA"``.
    sm_count
        Streaming multiprocessors enabled on this product.
    memory_bytes
        Device memory in bytes (exact; binary sizes where the board carries them).
    memory_bandwidth_Bps
        Peak device-memory bandwidth in bytes/s (decimal, as datasheets state it).
    peak_flops
        Dense peak rate in FLOP/s per :class:`DType` (no structured sparsity; an FMA counts as
        2 FLOP). Tensor-core rates with FP32 accumulation where the GPU has tensor cores.
    boost_clock_hz, l2_bytes, tdp_w
        Maximum boost clock (Hz), L2 cache (bytes), board power (W); ``None`` where unknown.
    nvlink_links, nvlink_gen, pcie_gen
        NVLink count and generation (0 and ``None`` without NVLink), host PCIe generation.
    pcie_p2p
        Whether the driver lets two such GPUs access each other's memory over PCIe
        (peer-to-peer). ``False`` for GeForce cards whose driver refuses it (RTX 4090): NCCL
        then stages every GPU-to-GPU transfer through host memory (its SHM transport). NVLink
        peers are not affected. Default ``True``; the catalogue names a source where ``False``.
    infinity_fabric_links, infinity_fabric_link_Bps
        AMD Instinct GPU-to-GPU Infinity Fabric (xGMI) links and the raw bandwidth of one link
        per direction, bytes/s (0 and ``None`` without them). The 8-GPU OAM platforms join every
        GPU pair by one such link, no switch (``topologies/mi300x-8.toml``).
    datasheet_only
        ``True`` when no training measurement or calibration profile has checked perfmodel on
        this GPU and no measured ceiling feeds it: its predictions rest on the datasheet peaks
        times the generic efficiency model of
        :mod:`perfmodel.compute.params`. Predictions on it carry a note saying so
        (:func:`datasheet_note`). A published achieved rate, where one exists, is cited in
        ``sources["achieved"]`` for the reader; it does not feed the model. Default ``False``.
    sources
        One source per group of fields (``SOURCE_GROUPS``): compute, memory, sm, board; an
        optional ``achieved``.
    notes
        Caveats: disagreeing sources, assumptions, what CUDA sees as one device.

    Examples
    --------
    >>> from perfmodel.hardware import get_gpu
    >>> v100 = get_gpu("v100")
    >>> v100.name, v100.peak("fp16") / 1e12, v100.memory_bytes / 2**30
    ('V100-SXM2-16GB', 125.0, 16.0)
    >>> get_gpu("V100-SXM2-16GB").peak("bf16") == v100.peak("fp32")  # emulated at FP32 rate
    True
    """

    name: str
    architecture: str
    form_factor: str
    sm_count: int
    memory_bytes: int
    memory_bandwidth_Bps: float
    peak_flops: MappingProxyType[DType, float]
    boost_clock_hz: float | None = None
    l2_bytes: int | None = None
    tdp_w: float | None = None
    nvlink_links: int = 0
    nvlink_gen: int | None = None
    pcie_gen: int | None = None
    pcie_p2p: bool = True
    infinity_fabric_links: int = 0
    infinity_fabric_link_Bps: float | None = None
    datasheet_only: bool = False
    vendor: str = "NVIDIA"
    aliases: tuple[str, ...] = ()
    sources: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: str = ""

    def peak(self, dtype: DType | str) -> float:
        """Peak FLOP/s for ``dtype``; falls back as a framework would.

        TF32 on a GPU without TF32 units runs at the FP32 rate (the framework keeps FP32 math);
        BF16 on Volta/Turing is emulated at the FP32 rate.

        Raises
        ------
        ConfigError
            If the GPU cannot execute the format at all (e.g. FP8 before Hopper/Ada).
        """
        # DType is a str subclass: test for it first (str(DType.BF16) is 'DType.BF16').
        d = (
            dtype
            if isinstance(dtype, DType)
            else DType.parse(dtype, where=f"gpu {self.name}: dtype")
        )
        return peak_with_fallback(self.peak_flops, d, self.architecture, self.name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in SI units (``peak_flops`` keyed by dtype name, FLOP/s)."""
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "vendor": self.vendor,
            "architecture": self.architecture,
            "form_factor": self.form_factor,
            "sm_count": self.sm_count,
            "boost_clock_hz": self.boost_clock_hz,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_Bps": self.memory_bandwidth_Bps,
            "l2_bytes": self.l2_bytes,
            "tdp_w": self.tdp_w,
            "nvlink_links": self.nvlink_links,
            "nvlink_gen": self.nvlink_gen,
            "pcie_gen": self.pcie_gen,
            "pcie_p2p": self.pcie_p2p,
            "infinity_fabric_links": self.infinity_fabric_links,
            "infinity_fabric_link_Bps": self.infinity_fabric_link_Bps,
            "datasheet_only": self.datasheet_only,
            "peak_flops": {d.value: v for d, v in self.peak_flops.items()},
            "sources": dict(self.sources),
            "notes": self.notes,
        }


def _parse_gpu(entry: dict[str, Any], where: str) -> GPUSpec:
    """Validate one ``[[gpu]]`` table and convert it to SI units.

    Raises
    ------
    ConfigError
        On an unknown or missing key, a non-positive or non-numeric value, an unknown dtype, or a
        group of fields without a source; the message names ``where`` and the bad value.
    """
    check_keys(entry, _REQUIRED, _ALLOWED, where)
    if "memory_bytes" in entry:
        mem = integer(entry, "memory_bytes", where)
    elif "memory_GB" in entry:
        mem = round(number(entry, "memory_GB", where) * units.GB)
    else:
        raise ConfigError(f"{where}: needs memory_bytes or memory_GB", value=None, where=where)
    if not isinstance(entry["peak_TFLOPS"], dict) or not entry["peak_TFLOPS"]:
        raise ConfigError(
            f"{where}: peak_TFLOPS must be a non-empty table of dtype = TFLOPS",
            value=entry["peak_TFLOPS"],
            where=where,
        )
    peaks: dict[DType, float] = {}
    for key in entry["peak_TFLOPS"]:
        dtype = DType.parse(key, where=f"{where}.peak_TFLOPS")
        peaks[dtype] = number(entry["peak_TFLOPS"], key, f"{where}.peak_TFLOPS") * units.TFLOPS
    sources = source_table(entry, where)
    for group, fields in SOURCE_GROUPS.items():
        if any(f in entry for f in fields) and not str(sources.get(group, "")).strip():
            raise ConfigError(
                f"{where}: no source for {group} ({', '.join(f for f in fields if f in entry)});"
                f" add sources.{group}",
                value=group,
                where=where,
            )
    if "l2_MiB" in entry and "l2_MB" in entry:
        raise ConfigError(f"{where}: give l2_MiB or l2_MB, not both", value="l2", where=where)
    if "l2_MiB" in entry:
        l2: int | None = round(number(entry, "l2_MiB", where) * units.MiB)
    elif "l2_MB" in entry:
        l2 = round(number(entry, "l2_MB", where) * units.MB)
    else:
        l2 = None
    nvlink_links = (
        integer(entry, "nvlink_links", where, sign="non-negative") if "nvlink_links" in entry else 0
    )
    names = aliases(entry, where)
    if_links = (
        integer(entry, "infinity_fabric_links", where, sign="non-negative")
        if "infinity_fabric_links" in entry
        else 0
    )
    if_Bps = (
        number(entry, "infinity_fabric_GBps", where) * units.GB
        if "infinity_fabric_GBps" in entry
        else None
    )
    if (if_links > 0) != (if_Bps is not None):
        raise ConfigError(
            f"{where}: give infinity_fabric_links > 0 and infinity_fabric_GBps together",
            value=(if_links, entry.get("infinity_fabric_GBps")),
            where=where,
        )
    return GPUSpec(
        name=str(entry["name"]),
        architecture=str(entry["architecture"]),
        form_factor=str(entry["form_factor"]),
        sm_count=integer(entry, "sm_count", where),
        memory_bytes=mem,
        memory_bandwidth_Bps=number(entry, "memory_bandwidth_GBps", where) * units.GB,
        peak_flops=MappingProxyType(peaks),
        boost_clock_hz=number(entry, "boost_clock_GHz", where) * units.GHz
        if "boost_clock_GHz" in entry
        else None,
        l2_bytes=l2,
        tdp_w=number(entry, "tdp_W", where) if "tdp_W" in entry else None,
        nvlink_links=nvlink_links,
        nvlink_gen=integer(entry, "nvlink_gen", where) if "nvlink_gen" in entry else None,
        pcie_gen=integer(entry, "pcie_gen", where) if "pcie_gen" in entry else None,
        pcie_p2p=(
            as_bool(entry["pcie_p2p"], "pcie_p2p", where=where, error=ConfigError)
            if "pcie_p2p" in entry
            else True
        ),
        infinity_fabric_links=if_links,
        infinity_fabric_link_Bps=if_Bps,
        datasheet_only=(
            as_bool(entry["datasheet_only"], "datasheet_only", where=where, error=ConfigError)
            if "datasheet_only" in entry
            else False
        ),
        vendor=str(entry.get("vendor", "NVIDIA")),
        aliases=names,
        sources=MappingProxyType({str(k): str(v) for k, v in sources.items()}),
        notes=str(entry.get("notes", "")),
    )


def datasheet_note(gpu: GPUSpec) -> str | None:
    """The line a report prints for a GPU whose figures are datasheet only, else ``None``.

    >>> datasheet_note(get_gpu("MI300X")).startswith("hardware: MI300X")
    True
    >>> datasheet_note(get_gpu("H100-SXM5-80GB")) is None
    True
    """
    if not gpu.datasheet_only:
        return None
    line = (
        f"hardware: {gpu.name} figures are datasheet only (peaks, memory and links from "
        f"{gpu.vendor}'s datasheet; no training measurement or calibration profile has checked "
        "perfmodel on this GPU): compute uses the datasheet peaks times the generic efficiency "
        "model"
    )
    achieved = gpu.sources.get("achieved")
    if achieved:
        line += f"; published achieved rates, for comparison: {achieved}"
    return line


def read_gpus(path: str | os.PathLike[str]) -> dict[str, GPUSpec]:
    """Parse a GPU catalogue file (schema above) into ``{canonical name: GPUSpec}``.

    Used for the shipped ``gpus.toml`` and for user catalogues or tests.

    Raises
    ------
    ConfigError
        Naming the file, the entry and the bad value (see :func:`_parse_gpu`), a duplicate name,
        or an alias that already names another GPU.
    """
    return _GPUS.read(path)


_GPUS: Catalogue[GPUSpec] = Catalogue(
    table="gpu",
    kind="GPU",
    unknown="GPU model",
    command="gpus",
    spec_type=GPUSpec,
    parse=_parse_gpu,
    data=_DATA,
)


def list_gpus() -> list[GPUSpec]:
    """All GPU models in the catalogue, in file order."""
    return _GPUS.specs()


def get_gpu(name: str | GPUSpec, *, where: str = "gpu") -> GPUSpec:
    """Look up a GPU by canonical name or alias (case-insensitive).

    Raises
    ------
    UnknownHardwareError
        Naming the bad value and the closest known names.
    """
    return _GPUS.get(name, where)
