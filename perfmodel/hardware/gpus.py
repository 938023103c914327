"""GPU specifications loaded from ``gpus.toml`` (datasheet numbers, each with a source).

Schema of one ``[[gpu]]`` table in ``gpus.toml``::

    name = "V100-SXM2-16GB"            # canonical name (used in topology files and on the CLI)
    aliases = ["v100", "v100-sxm2"]    # case-insensitive alternative names
    vendor = "NVIDIA"
    architecture = "Volta"
    compute_capability = "7.0"        # CUDA compute capability (NVIDIA GPUs; see GPUSpec)
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
    mxfp8_gemm = true                 # MX block-scaled FP8 GEMMs for training (see GPUSpec)
    [gpu.peak_TFLOPS]                  # dense (no sparsity) peaks; missing key = not supported
    fp64 = 7.8
    fp32 = 15.7
    fp16 = 125.0
    sustained_power_W = 700           # optional: board power the sustained rates were measured at
    idle_W = 88                       # optional: idle board power (power-limit model)
    memory_bandwidth_achieved_GBps = 2524.0  # optional: STREAM-class achieved HBM bandwidth
    [gpu.sustained_TFLOPS]             # optional: best-shape matmul rate held at the power limit
    bf16 = 755.0                       #   keys: GemmFormat values (bf16, fp16, tf32, fp8,
    fp8 = 1354.0                       #   fp8-split, nvfp4, mxfp4)
    [gpu.burst_TFLOPS]                 # optional: best-shape boost-clock burst (MAMF)
    bf16 = 794.5
    [gpu.sources]                      # one source per group of fields present (see SOURCE_GROUPS)
    compute = "NVIDIA Tesla V100 datasheet (2018), 'SXM2' column"
    memory = "..."
    sm = "..."                          # sm_count, boost clock, L2
    board = "..."                       # TDP, NVLink, Infinity Fabric, PCIe
    achieved = "..."                    # sustained/burst rates, idle power, achieved bandwidth:
                                        # say per value whether measured, derived or estimated;
                                        # on a datasheet-only GPU: published achieved rates
                                        # for the reader (they feed nothing)

Every group of fields present in an entry must name its source (``SOURCE_GROUPS``); the loader
rejects an entry that does not, so no number enters the catalogue unsourced.

Achieved rates (:meth:`GPUSpec.gemm_ceiling`): the datasheet peak is a boost-clock figure, and a
dense GEMM on normally distributed operands draws the board to its power limit, where the clock
settles below boost (stas00/ml-engineering, "Maximum Achievable and Sustainable Matmul FLOPS",
commit 0359db8: MSMF is 11-17% below the boost-burst MAMF on H200/B200). ``sustained_TFLOPS`` is
that measured sustained rate; an entry with only a burst rate gets the architecture's measured
sustained/burst ratio (:data:`SUSTAINED_OVER_BURST`), an entry with neither the documented
default fraction of its peak. A board run below the power its rates were measured at
(``tdp_W < sustained_power_W``) is derated by :func:`power_limited_clock_ratio`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._enum import ParsedEnum
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
#: Which fields each ``[gpu.sources]`` key vouches for. A group whose fields appear in an entry
#: must have a non-empty source.
SOURCE_GROUPS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "compute": ("peak_TFLOPS", "mxfp8_gemm"),
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
        "achieved": (
            "sustained_TFLOPS",
            "burst_TFLOPS",
            "sustained_power_W",
            "idle_W",
            "memory_bandwidth_achieved_GBps",
        ),
    }
)

#: Every field an entry may have: the required ones, those a source group vouches for, and
#: the unsourced ``aliases``, ``vendor``, ``datasheet_only`` and ``notes``.
_ALLOWED = set(_REQUIRED).union(*SOURCE_GROUPS.values()) | {
    "aliases",
    "vendor",
    "datasheet_only",
    "notes",
    "compute_capability",
}


class GemmFormat(str, ParsedEnum, where="gemm format"):
    """A matrix-multiply format whose achieved rate the catalogue can state.

    ``fp8`` is FP8 with the tensor core's fast accumulation (cuBLASLt
    ``CUBLASLT_MATMUL_DESC_FAST_ACCUM=1``, ``torch._scaled_mm(use_fast_accum=True)``);
    ``fp8-split`` is FP8 whose partial sums are periodically promoted to FP32 (split
    accumulator, the cuBLASLt default): Transformer Engine runs its dgrad and wgrad GEMMs so
    (``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``, ``_2X_ACC_FPROP = False``,
    ``transformer_engine/pytorch/module/base.py``, TE 1.x-2.x) and torchao's ``Float8LinearConfig``
    likewise (``gemm_config_output = Float8GemmConfig(use_fast_accum=True)``, the grad-input and
    grad-weight configs default to ``use_fast_accum=False``, ``torchao/float8/config.py``).
    ``nvfp4`` / ``mxfp4`` are Blackwell's block-scaled FP4 formats (rates only: no training
    precision uses them yet).
    """

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    FP8_SPLIT = "fp8-split"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"

    @classmethod
    def of(cls, dtype: DType, *, split_accumulation: bool = False) -> GemmFormat:
        """The format of a GEMM in ``dtype`` (``fp8-split`` for FP8 with split accumulation).

        >>> GemmFormat.of(DType.FP8, split_accumulation=True).value
        'fp8-split'
        """
        if dtype is DType.FP8 and split_accumulation:
            return cls.FP8_SPLIT
        return cls(dtype.value)

    @property
    def dtype(self) -> DType | None:
        """The :class:`DType` whose datasheet peak this format is measured against (``None`` for
        the FP4 formats, which the peak table does not list)."""
        if self is GemmFormat.FP8_SPLIT:
            return DType.FP8
        if self in (GemmFormat.NVFP4, GemmFormat.MXFP4):
            return None
        return DType(self.value)


#: Sustained over boost-burst best-shape matmul rate, per architecture: the board held at its
#: power limit (all GPUs of the node busy, 2 s windows) against a short burst after an idle
#: gap, same benchmark version and node. Source: stas00/ml-engineering commit 0359db8,
#: ``compute/accelerator/README.md``, "Maximum Achievable and Sustainable Matmul FLOPS comparison
#: table", BF16 (mamf-finder.py v4): A100 PCIe 80 GB 258/285 (300 W, 1326 vs 1395 MHz), H200
#: SXM 755/850 (700 W, ~1890 vs 1980 MHz), B200 SXM 1439/1737 (1000 W, ~1420 vs 1965 MHz). Used
#: for a GPU whose catalogue entry has a burst rate but no sustained one.
SUSTAINED_OVER_BURST: MappingProxyType[str, float] = MappingProxyType(
    {"Ampere": 258.0 / 285.0, "Hopper": 755.0 / 850.0, "Blackwell": 1439.0 / 1737.0}
)

#: FP8 GEMM rate with split (promoted) accumulation relative to fast accumulation, per
#: architecture. Hopper (and Ada, the same cuBLASLt fast-accumulation switch): 1/1.15, the middle
#: of the 1.1-1.2x speed-up fast accumulation gives FP8 training GEMMs on H100 (pytorch/ao issue
#: #2377, 2025-06, benchmark by the reporter; torchao maintainers confirm the trade-off).
#: Blackwell: 1.0 (sm100 tensor cores accumulate FP8 in FP32 at full rate; Transformer Engine
#: PR #2748 review: "there is no fastAccuMode for sm100").
SPLIT_ACCUMULATION_FACTOR: MappingProxyType[str, float] = MappingProxyType(
    {"Ada": 1.0 / 1.15, "Hopper": 1.0 / 1.15, "Blackwell": 1.0}
)

#: Exponent ``n`` of the power-limited clock model ``P - P_idle ~ f^n``
#: (:func:`power_limited_clock_ratio`): dynamic CMOS power ``C V^2 f`` with the supply voltage
#: raised in proportion to the clock over the DVFS range (textbook CMOS scaling, e.g. Rabaey,
#: Chandrakasan & Nikolic, "Digital Integrated Circuits", 2nd ed., ch. 5; Horace He, "Strangely,
#: Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!", 2024: "matmuls on
#: the H100 are primarily not compute or bandwidth limited, they are power limited"). An
#: exponent of 2 (voltage at its floor part of the range) would derate a 500 W H100 ~5% more.
POWER_CLOCK_EXPONENT = 3.0


def power_limited_clock_ratio(
    power_w: float, reference_w: float, idle_w: float, exponent: float = POWER_CLOCK_EXPONENT
) -> float:
    """Sustained clock at board power ``power_w`` relative to the clock at ``reference_w``.

    ``((P - P_idle) / (P_ref - P_idle)) ** (1 / n)``, capped at 1 (a higher limit than the
    measurement's buys nothing the measurement can vouch for). Dense GEMMs hold the board at its
    power limit, so their rate scales with this ratio.

    >>> round(power_limited_clock_ratio(500.0, 700.0, 88.0), 4)  # 500 W H100 vs 700 W
    0.8764
    >>> power_limited_clock_ratio(700.0, 700.0, 88.0)
    1.0

    Raises
    ------
    ConfigError
        If ``power_w`` or ``reference_w`` is not above ``idle_w``.
    """
    if power_w <= idle_w or reference_w <= idle_w:
        raise ConfigError(
            f"power limit {power_w} W / reference {reference_w} W must exceed the idle "
            f"power {idle_w} W",
            value=(power_w, reference_w, idle_w),
            where="power_limited_clock_ratio",
        )
    return min(1.0, ((power_w - idle_w) / (reference_w - idle_w)) ** (1.0 / exponent))


@dataclass(frozen=True)
class GemmCeiling:
    """Achieved best-shape matmul rate of one format on one GPU at its power limit.

    Attributes
    ----------
    flops
        FLOP/s a large, well-shaped GEMM sustains on normally distributed operands.
    basis
        How the number was obtained: ``"measured"`` (the entry's sustained rate),
        ``"burst x ..."`` (derived from a burst rate), ``"... x power limit ..."``.
    """

    flops: float
    basis: str


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
    compute_capability
        CUDA compute capability ``(major, minor)``, e.g. ``(8, 0)`` for the A100 and ``(8, 6)``
        for the other Ampere parts (NVIDIA, "CUDA GPUs - Compute Capability",
        developer.nvidia.com/cuda-gpus, and the CUDA C++ Programming Guide's compute
        capability table; the catalogue header cites them once); ``None`` for GPUs without
        CUDA (AMD). What NCCL reads as ``cudaCompCap`` (:mod:`perfmodel.comm.p2p_read`).
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
    sustained_flops, burst_flops
        Measured best-shape matmul rates per :class:`GemmFormat`, FLOP/s: held at the power limit
        (``sustained``) and in a short boost-clock burst (``burst``); empty where not measured.
        Read them through :meth:`gemm_ceiling`.
    sustained_power_w
        Board power the sustained rates were measured at (``None``: ``tdp_w``).
    idle_w
        Idle board power, W (power-limit model, :func:`power_limited_clock_ratio`).
    achieved_memory_bandwidth_Bps
        STREAM-class achieved device-memory bandwidth, bytes/s (``None``: not measured).
    mxfp8_gemm
        ``True`` when a training stack runs MX block-scaled FP8 GEMMs (1 x 32 blocks with E8M0
        scales, OCP MX v1.0; Transformer Engine's ``MXFP8BlockScaling``) on this GPU; the
        ``mxfp8`` FP8 recipe is refused elsewhere (:func:`perfmodel.pipeline.resolve.recipe_on`).
        The catalogue follows Transformer Engine's own check (``check_mxfp8_support``,
        ``transformer_engine/pytorch/quantization.py``, ROCm/TransformerEngine @030b792, which
        carries NVIDIA's branch unchanged): NVIDIA compute capability 10.x (B200, B300, GB200,
        GB300; 12.0, the RTX 50xx / RTX PRO 6000 Blackwell, is refused: "not supported on
        12.0+ architectures yet") and AMD gfx950 (CDNA 4: MI350X, MI355X). Default ``False``;
        ``sources["compute"]`` names the source where ``True``.
    sources
        One source per group of fields (``SOURCE_GROUPS``): compute, memory, sm, board; an
        optional ``achieved`` (the measured rates above, or, on a datasheet-only GPU, published
        rates for the reader).
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
    sustained_flops: MappingProxyType[GemmFormat, float] = field(
        default_factory=lambda: MappingProxyType({})
    )
    burst_flops: MappingProxyType[GemmFormat, float] = field(
        default_factory=lambda: MappingProxyType({})
    )
    sustained_power_w: float | None = None
    idle_w: float | None = None
    achieved_memory_bandwidth_Bps: float | None = None
    compute_capability: tuple[int, int] | None = None
    mxfp8_gemm: bool = False

    def power_clock_ratio(self) -> float:
        """Sustained clock of this board relative to the one its sustained rates were measured at
        (1 unless ``tdp_w < sustained_power_w``; :func:`power_limited_clock_ratio`).

        >>> from perfmodel.hardware import get_gpu
        >>> round(get_gpu("H100-SXM5-96GB-500W").power_clock_ratio(), 3)
        0.876
        """
        return self._power_ratio()[0]

    def _power_ratio(self) -> tuple[float, str]:
        """Clock ratio of this board's limit to the power the sustained rates were measured at."""
        ref = self.sustained_power_w
        if ref is None or self.tdp_w is None or self.tdp_w >= ref:
            return 1.0, ""
        if self.idle_w is None:
            raise ConfigError(
                f"GPU {self.name}: tdp_W {self.tdp_w} below sustained_power_W {ref} needs idle_W "
                "for the power-limit model",
                value=self.tdp_w,
                where=f"gpu {self.name}",
            )
        r = power_limited_clock_ratio(self.tdp_w, ref, self.idle_w)
        return r, f" x power limit {self.tdp_w:g}/{ref:g} W (clock ratio {r:.3f})"

    def gemm_ceiling(self, fmt: GemmFormat | DType, *, burst: bool = False) -> GemmCeiling | None:
        """Achieved best-shape matmul rate of ``fmt`` on this GPU, or ``None`` if unknown.

        Sustained (default; what a training step sees) or boost-burst (``burst=True``; what a
        short microbenchmark after an idle gap sees). In order:

        1. the measured rate of that regime;
        2. sustained from burst: ``burst x SUSTAINED_OVER_BURST[architecture]``; burst from
           sustained: the inverse;
        3. ``fp16`` from ``bf16`` (and back) where their peaks are equal (the same tensor-core
           rate); ``fp8-split`` from ``fp8 x SPLIT_ACCUMULATION_FACTOR[architecture]``; ``tf32``
           from the ``bf16`` fraction of peak (the same tensor cores at the same power limit).

        A sustained rate measured at more power than this board's ``tdp_w`` is multiplied by
        :func:`power_limited_clock_ratio` (``idle_w`` required).

        >>> from perfmodel.hardware import get_gpu
        >>> h = get_gpu("H100-SXM5-80GB").gemm_ceiling(GemmFormat.FP8_SPLIT)
        >>> round(h.flops / 1e12), h.basis
        (1177, 'measured x fast/split accumulation 0.870')
        """
        if isinstance(fmt, GemmFormat):
            f = fmt
        elif isinstance(fmt, DType):
            f = GemmFormat.of(fmt)
        else:  # a user's spelling ("bf16", "fp8-split")
            f = GemmFormat.parse(fmt, where=f"gpu {self.name}: gemm format")
        hit = self._direct_ceiling(f, burst)
        if hit is not None:
            return hit
        if f in (GemmFormat.FP16, GemmFormat.BF16):
            other = GemmFormat.BF16 if f is GemmFormat.FP16 else GemmFormat.FP16
            if self.peak_flops.get(DType.FP16) == self.peak_flops.get(DType.BF16):
                return self._direct_ceiling(other, burst)
            return None
        if f is GemmFormat.FP8_SPLIT:
            fast = self.gemm_ceiling(GemmFormat.FP8, burst=burst)
            factor = SPLIT_ACCUMULATION_FACTOR.get(self.architecture)
            if fast is None or factor is None:
                return None
            return GemmCeiling(
                fast.flops * factor, f"{fast.basis} x fast/split accumulation {factor:.3f}"
            )
        if f is GemmFormat.TF32 and DType.TF32 in self.peak_flops:
            half = self.gemm_ceiling(GemmFormat.BF16, burst=burst)
            if half is None or DType.BF16 not in self.peak_flops:
                return None
            frac = half.flops / self.peak_flops[DType.BF16]
            return GemmCeiling(
                frac * self.peak_flops[DType.TF32], f"bf16 fraction of peak {frac:.3f}"
            )
        return None

    def _direct_ceiling(self, f: GemmFormat, burst: bool) -> GemmCeiling | None:
        """The measured rate of ``f`` in the asked regime, or from the other regime's."""
        ratio = SUSTAINED_OVER_BURST.get(self.architecture)
        if burst:
            if f in self.burst_flops:
                return GemmCeiling(self.burst_flops[f], "measured burst")
            if f in self.sustained_flops and ratio is not None and not self._power_ratio()[1]:
                return GemmCeiling(
                    self.sustained_flops[f] / ratio,
                    f"sustained / sustained-over-burst {ratio:.3f} ({self.architecture})",
                )
            return None
        scale, note = self._power_ratio()
        if f in self.sustained_flops:
            return GemmCeiling(self.sustained_flops[f] * scale, "measured" + note)
        if f in self.burst_flops and ratio is not None:
            return GemmCeiling(
                self.burst_flops[f] * ratio * scale,
                f"burst x sustained-over-burst {ratio:.3f} ({self.architecture}){note}",
            )
        return None

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
            "sustained_flops": {f.value: v for f, v in self.sustained_flops.items()},
            "burst_flops": {f.value: v for f, v in self.burst_flops.items()},
            "sustained_power_w": self.sustained_power_w,
            "idle_w": self.idle_w,
            "achieved_memory_bandwidth_Bps": self.achieved_memory_bandwidth_Bps,
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
    rates = {key: _rates(entry, key, where) for key in ("sustained_TFLOPS", "burst_TFLOPS")}
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
        sources=sources,
        notes=str(entry.get("notes", "")),
        sustained_flops=rates["sustained_TFLOPS"],
        burst_flops=rates["burst_TFLOPS"],
        sustained_power_w=(
            number(entry, "sustained_power_W", where) if "sustained_power_W" in entry else None
        ),
        idle_w=number(entry, "idle_W", where) if "idle_W" in entry else None,
        achieved_memory_bandwidth_Bps=(
            number(entry, "memory_bandwidth_achieved_GBps", where) * units.GB
            if "memory_bandwidth_achieved_GBps" in entry
            else None
        ),
        compute_capability=_compute_capability(entry, where),
        mxfp8_gemm=(
            as_bool(entry["mxfp8_gemm"], "mxfp8_gemm", where=where, error=ConfigError)
            if "mxfp8_gemm" in entry
            else False
        ),
    )


def _compute_capability(entry: dict[str, Any], where: str) -> tuple[int, int] | None:
    """``entry["compute_capability"]`` (``"major.minor"``, e.g. ``"8.0"``) as ``(8, 0)``;
    ``None`` when absent.

    Raises
    ------
    ConfigError
        On text that is not two dot-separated non-negative integers.
    """
    if "compute_capability" not in entry:
        return None
    text = str(entry["compute_capability"])
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise ConfigError(
            f"{where}: compute_capability must read 'major.minor' (e.g. '8.0'), got {text!r}",
            value=entry["compute_capability"],
            where=f"{where}.compute_capability",
        )
    return int(major), int(minor)


def _rates(entry: dict[str, Any], key: str, where: str) -> MappingProxyType[GemmFormat, float]:
    """``entry[key]`` (a table of GemmFormat = TFLOPS) in FLOP/s; empty when absent.

    Raises
    ------
    ConfigError
        On a non-table, an unknown format or a non-positive rate.
    """
    table = entry.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: {key} must be a table", value=table, where=where)
    return MappingProxyType(
        {
            GemmFormat.parse(k, where=f"{where}.{key}"): number(table, k, f"{where}.{key}")
            * units.TFLOPS
            for k in table
        }
    )


def datasheet_note(gpu: GPUSpec) -> str | None:
    """The line a report prints for a GPU whose figures are datasheet only, else ``None``.

    A GPU with measured GEMM ceilings is not datasheet only; on a GPU of another vendor than
    NVIDIA the line then says which figures still are: every other measured part of the model
    (memory efficiency fits, the fused-attention kernel tables of
    :mod:`perfmodel.compute.attention`, the NCCL tuner) comes from NVIDIA GPUs, so its memory
    bandwidth, links and attention kernels rest on the datasheet and the generic efficiency
    model.

    >>> datasheet_note(get_gpu("L4")).startswith("hardware: L4 figures are datasheet only")
    True
    >>> "GEMM ceilings measured" in datasheet_note(get_gpu("MI300X"))
    True
    >>> datasheet_note(get_gpu("H100-SXM5-80GB")) is None
    True
    """
    if not gpu.datasheet_only:
        if gpu.vendor == "NVIDIA" or not (gpu.sustained_flops or gpu.burst_flops):
            return None
        measured = ", ".join(sorted(f.value for f in {**gpu.sustained_flops, **gpu.burst_flops}))
        bandwidth = "" if gpu.achieved_memory_bandwidth_Bps is not None else "memory bandwidth, "
        return (
            f"hardware: {gpu.name} GEMM ceilings measured ({measured}; "
            f"{gpu.sources.get('achieved', '')}); its {bandwidth}GPU-to-GPU links and "
            "attention kernels are datasheet only (peaks times the generic efficiency model: "
            f"no published {gpu.vendor} kernel tables)"
        )
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


_GPUS: Catalogue[GPUSpec] = Catalogue(
    table="gpu",
    kind="GPU",
    unknown="GPU model",
    command="gpus",
    spec_type=GPUSpec,
    parse=_parse_gpu,
    data=_DATA,
)

#: ``read_gpus(path) -> {canonical name: GPUSpec}``: a GPU catalogue file of the schema above
#: (the shipped one or a user's), its errors naming the file, the entry and the bad value.
read_gpus = _GPUS.read
#: ``list_gpus() -> list[GPUSpec]``: every GPU model of the shipped catalogue, in file order.
list_gpus = _GPUS.specs
#: ``get_gpu(name, where="gpu") -> GPUSpec``: the GPU model named ``name`` (canonical name or
#: alias, case-insensitive; a GPUSpec as is), an UnknownHardwareError naming ``where`` and the
#: closest names otherwise.
get_gpu = _GPUS.get
