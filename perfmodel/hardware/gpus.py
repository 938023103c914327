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
    l2_MB = 6.0
    tdp_W = 300
    nvlink_links = 6                  # 0 when none
    nvlink_gen = 2
    pcie_gen = 3
    [gpu.peak_TFLOPS]                  # dense (no sparsity) peaks; missing key = not supported
    fp64 = 7.8
    fp32 = 15.7
    fp16 = 125.0
    [gpu.sources]                      # one source per group of fields
    compute = "NVIDIA Tesla V100 datasheet (2018), 'SXM2' column"
    memory = "..."
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._io import load_toml
from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError, UnknownHardwareError

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
    "tdp_W",
    "nvlink_links",
    "nvlink_gen",
    "pcie_gen",
    "notes",
}


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet description of one GPU model.

    Attributes
    ----------
    peak_flops
        Dense peak rate in FLOP/s per :class:`DType` (an FMA counts as 2 FLOP).
    memory_bytes
        Device memory in bytes.
    memory_bandwidth_Bps
        Peak device-memory bandwidth in bytes/s.
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
    vendor: str = "NVIDIA"
    aliases: tuple[str, ...] = ()
    sources: MappingProxyType[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: str = ""

    def peak(self, dtype: DType | str) -> float:
        """Peak FLOP/s for ``dtype``; falls back as a framework would (TF32 -> FP32 on pre-Ampere).

        Raises
        ------
        ConfigError
            If the GPU cannot execute the format at all (e.g. FP8 before Hopper/Ada).
        """
        d = DType.parse(dtype) if isinstance(dtype, str) else dtype
        if d in self.peak_flops:
            return self.peak_flops[d]
        if d is DType.TF32 and DType.FP32 in self.peak_flops:
            return self.peak_flops[DType.FP32]
        if (
            d is DType.BF16
            and DType.FP16 in self.peak_flops
            and self.architecture in ("Volta", "Turing")
        ):
            # No BF16 units before Ampere: frameworks emulate at FP32 speed.
            return self.peak_flops[DType.FP32]
        raise ConfigError(
            f"GPU {self.name} has no {d.value} support", value=d.value, where=f"gpu {self.name}"
        )


def _parse_gpu(entry: dict[str, Any], where: str) -> GPUSpec:
    unknown = set(entry) - _ALLOWED
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}", value=sorted(unknown), where=where
        )
    for key in _REQUIRED:
        if key not in entry:
            raise ConfigError(f"{where}: missing key {key!r}", value=key, where=where)
    if "memory_bytes" in entry:
        mem = int(entry["memory_bytes"])
    elif "memory_GB" in entry:
        mem = int(float(entry["memory_GB"]) * units.GB)
    else:
        raise ConfigError(f"{where}: needs memory_bytes or memory_GB", value=None, where=where)
    peaks: dict[DType, float] = {}
    for key, value in entry["peak_TFLOPS"].items():
        dtype = DType.parse(key, where=f"{where}.peak_TFLOPS")
        if not float(value) > 0:
            raise ConfigError(f"{where}: non-positive peak {key}={value}", value=value, where=where)
        peaks[dtype] = float(value) * units.TFLOPS
    bw = float(entry["memory_bandwidth_GBps"])
    if bw <= 0 or mem <= 0 or int(entry["sm_count"]) <= 0:
        raise ConfigError(
            f"{where}: memory, bandwidth and sm_count must be positive",
            value=entry["name"],
            where=where,
        )
    return GPUSpec(
        name=str(entry["name"]),
        architecture=str(entry["architecture"]),
        form_factor=str(entry["form_factor"]),
        sm_count=int(entry["sm_count"]),
        memory_bytes=mem,
        memory_bandwidth_Bps=bw * units.GB,
        peak_flops=MappingProxyType(peaks),
        boost_clock_hz=float(entry["boost_clock_GHz"]) * units.GHz
        if "boost_clock_GHz" in entry
        else None,
        l2_bytes=int(float(entry["l2_MB"]) * units.MB) if "l2_MB" in entry else None,
        tdp_w=float(entry["tdp_W"]) if "tdp_W" in entry else None,
        nvlink_links=int(entry.get("nvlink_links", 0)),
        nvlink_gen=int(entry["nvlink_gen"]) if "nvlink_gen" in entry else None,
        pcie_gen=int(entry["pcie_gen"]) if "pcie_gen" in entry else None,
        vendor=str(entry.get("vendor", "NVIDIA")),
        aliases=tuple(str(a) for a in entry.get("aliases", ())),
        sources=MappingProxyType(dict(entry["sources"])),
        notes=str(entry.get("notes", "")),
    )


@lru_cache(maxsize=1)
def _catalogue() -> tuple[dict[str, GPUSpec], dict[str, str]]:
    data = load_toml(_DATA)
    specs: dict[str, GPUSpec] = {}
    index: dict[str, str] = {}
    for i, entry in enumerate(data.get("gpu", [])):
        where = f"{_DATA.name}: gpu[{i}] ({entry.get('name', '?')})"
        spec = _parse_gpu(entry, where)
        if spec.name in specs:
            raise ConfigError(
                f"{where}: duplicate GPU name {spec.name!r}", value=spec.name, where=where
            )
        specs[spec.name] = spec
        for key in (spec.name, *spec.aliases):
            k = key.lower()
            if k in index and index[k] != spec.name:
                raise ConfigError(
                    f"{where}: alias {key!r} already names {index[k]}", value=key, where=where
                )
            index[k] = spec.name
    return specs, index


def list_gpus() -> list[GPUSpec]:
    """All GPU models in the catalogue, in file order."""
    return list(_catalogue()[0].values())


def get_gpu(name: str | GPUSpec, *, where: str = "gpu") -> GPUSpec:
    """Look up a GPU by canonical name or alias (case-insensitive).

    Raises
    ------
    UnknownHardwareError
        Naming the bad value and the closest known names.
    """
    if isinstance(name, GPUSpec):
        return name
    specs, index = _catalogue()
    key = str(name).lower()
    if key in index:
        return specs[index[key]]
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(specs[index[c]].name for c in close)}?" if close else ""
    raise UnknownHardwareError(
        f"unknown GPU model {name!r} ({where}){hint} (see `perfmodel hw gpus`)",
        value=name,
        where=where,
    )
