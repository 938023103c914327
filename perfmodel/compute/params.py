"""ComputeParams: every efficiency parameter of the compute-time model, named and documented.

Defaults are datasheet peaks times the efficiency model documented here; a calibration profile
replaces any field (``ComputeParams.from_dict``). Where a default is a fit, the fit and the rows
that fed it are stated; the validation tier (``tests/validation/test_compute_validation.py``)
judges the model on training measurements that fed no fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from perfmodel import units
from perfmodel._schema import require_fields
from perfmodel.compute.attention import AttentionBackend
from perfmodel.dtypes import DType
from perfmodel.errors import CalibrationError, ConfigError
from perfmodel.hardware.gpus import (
    SPLIT_ACCUMULATION_FACTOR,
    GemmFormat,
    GPUSpec,
    peak_with_fallback,
)


@dataclass(frozen=True)
class Tile:
    """A GEMM thread-block tile the library can choose: ``m x n`` outputs per CTA.

    Attributes
    ----------
    m, n
        Tile extent along the GEMM's ``m`` and ``n``.
    efficiency
        Throughput of a full tile relative to the largest tile (smaller tiles re-read operands
        more often per FLOP, so they reach less of the peak).
    ctas_per_sm
        Tiles resident on one SM at once (occupancy): a wave holds ``sm_count x ctas_per_sm``.
    """

    m: int
    n: int
    efficiency: float
    ctas_per_sm: int = 1


def _tile(entry: Any, where: str) -> Tile:
    """A :class:`Tile` of a profile file's ``[m, n, efficiency, ctas_per_sm]`` entry, or a
    :class:`CalibrationError` naming ``where`` for a side or an occupancy below 1 (a GEMM
    needs at least one tile per wave slot; :func:`~perfmodel.compute.gemm.gemm_efficiency`
    divides by them, and may skip a tile it cannot choose without reading it)."""
    tile = Tile(int(entry[0]), int(entry[1]), float(entry[2]), int(entry[3]))
    if min(tile.m, tile.n, tile.ctas_per_sm) < 1:
        raise CalibrationError(
            f"{where}: a tile's sides and CTAs per SM must be >= 1, got {list(entry)}",
            value=list(entry),
            where=where,
        )
    return tile


# CUTLASS/cuBLAS tile menu (CUTLASS default tensor-core threadblock shapes 256x128, 128x256,
# 128x128, 128x64, 64x64; NVIDIA "Matrix Multiplication Background User's Guide", sections
# "Tile quantization" and "Wave quantization"). The relative efficiencies of smaller tiles are
# estimates read from that guide's tile-size comparison (a 64x64 tile reaches roughly 70% of the
# large-tile rate because it re-reads operands twice as often per FLOP); they are calibration
# targets (ComputeParams.tensor_core_tiles / cuda_core_tiles).
_TC_TILES = (
    Tile(256, 128, 1.0),
    Tile(128, 256, 1.0),
    Tile(128, 128, 0.93),
    Tile(128, 64, 0.85, 2),
    Tile(64, 128, 0.85, 2),
    Tile(64, 64, 0.70, 4),
)
# CUDA-core (SIMT) SGEMM menu. cuBLAS/CUTLASS SGEMM kernels come in 128x128 down to 32x32 and
# 16x16-class tiles (CUTLASS ``sgemm`` threadblock shapes 128x128, 128x64, 64x64, 64x32, 32x32;
# cuBLAS ships ``sgemm_32x32_sliced1x4`` and 64x64 variants), with several CTAs resident per SM
# for the small ones. The previous menu stopped at 32x32 with one tile per 8 CTA slots, so a
# 256^3 FP32 GEMM (64 tiles of 32x32 on 132 SMs) was predicted at 27 us against 6.7 us measured
# on the H100; 16x16 tiles at 8 per SM (one or two warps each) spread it over every SM. Relative
# efficiencies of the small tiles are estimates (operand re-reads per FLOP grow as 1/tile side),
# calibration targets like the tensor-core menu.
_SIMT_TILES = (
    Tile(128, 128, 1.0),
    Tile(128, 64, 0.93, 2),
    Tile(64, 64, 0.80, 4),
    Tile(64, 32, 0.70, 4),
    Tile(32, 32, 0.55, 8),
    Tile(16, 16, 0.35, 8),
)

#: cuBLAS tensor-core alignment requirement, in elements, per GEMM dtype: the leading dimensions
#: (and hence ``k`` and ``n`` of a row-major ``(m x k) @ (k x n)``) must be multiples of 16 bytes
#: for the vectorised tensor-core kernels (cuBLAS documentation, "Tensor Core Usage": multiples of
#: 8 for FP16/BF16, 4 for TF32, 16 for FP8; NVIDIA "Matrix Multiplication Background User's
#: Guide", "Tensor Core Requirements"). FP32 on CUDA cores has no such requirement.
ALIGNMENT_ELEMENTS: Mapping[DType, int] = MappingProxyType(
    {DType.FP16: 8, DType.BF16: 8, DType.TF32: 4, DType.FP8: 16}
)

#: ``ComputeParams.k_overhead`` of 16-bit, TF32 and FP32 GEMMs: an estimate, two 32-deep
#: main-loop stages to fill and drain a CUTLASS-style software pipeline; not fitted.
DEFAULT_K_OVERHEAD = 64

#: GPU architectures whose FP8 GEMMs pay their tiles' output store beside the main loop
#: (``ComputeParams.k_overhead_for``: register-resident WGMMA accumulators; checked on H800).
STORE_BOUND_FP8_ARCHITECTURES = frozenset({"Hopper"})

#: Bytes of an output element of an FP8 GEMM in training (BF16 outputs: Transformer Engine and
#: torchao ``_scaled_mm`` with ``out_dtype=bfloat16``), for ``ComputeParams.k_overhead_for``.
FP8_GEMM_OUTPUT_BYTES = 2

#: Host time per kernel of a framework's eager training step, seconds
#: (``ComputeParams.host_dispatch_s``). ``pytorch-eager``: 35.55 us, the median over 10 host-bound
#: training steps measured on the lent H100 machine (PyTorch 2.11, its 16-core Xeon VM host;
#: ResNet-50 at batch 1-16 in bf16/fp32, GPT-2 at batch 1-2, the CIFAR VGG-19-BN at batch 4/16:
#: ``calibration/h100-sxm5-80gb/hostbound/steps-cuda.json``, per-step values 23-45 us) of
#: ``(step - optimizer) / modelled kernels`` (:func:`perfmodel.calibration.host.fit_eager_host`).
#: ResNet-50 at batch 32 was measured too and held out to judge it. (35.65 us before the H100
#: entry carried its measured memory efficiency, issue 24: the same fit, 0.02 us apart.) A bare eager launch of a
#: 1-element kernel costs 9.68 us on the same host (``launch/tiny-op``); a training step's ops also
#: pay the module call, autograd, cuDNN/cuBLAS plan lookup and allocator. The value belongs to that
#: host's CPU: a faster or slower host moves it.
#: Graph modes (CUDA graphs, ``torch.compile`` with ``mode="reduce-overhead"``, TF/XLA graphs)
#: issue kernels without per-op Python dispatch and are not modelled as host-bound (0).
#: Re-fitted when the modelled kernels of those steps changed (issue 24: the eager loss's FP32
#: casts, 3 + 4 kernels instead of 2 + 3): 35.65 -> 35.56 us.
#: The bare eager launch of a 1-element kernel on that host (``launch/tiny-op``), seconds.
BARE_EAGER_LAUNCH_S = 9.68 * units.us

HOST_DISPATCH_S: Mapping[str, float] = MappingProxyType(
    {
        "pytorch-eager": 35.55 * units.us,
        "cuda-graphs": 0.0,
        "tensorflow-graph": 0.0,
        "xla": 0.0,
        "none": 0.0,
    }
)


#: Host time of one kernel launch that a framework's C++ code issues inside a module call,
#: as a share of :data:`HOST_DISPATCH_S` (the host time of a modelled kernel of an eager step,
#: which also pays the Python module call, autograd and the allocator): 9.68 us / 35.55 us,
#: the bare eager launch of a 1-element kernel (``launch/tiny-op``) over the fitted per-kernel
#: time, both measured on the lent H100 machine's host (see :data:`HOST_DISPATCH_S`). Used for
#: Transformer Engine's grouped GEMM, whose ``multi_stream_cublas_gemm`` calls
#: ``nvte_cublas_gemm_v2`` once per local expert in a C++ loop
#: (``transformer_engine/common/gemm/cublaslt_gemm.cu``, TE v2.14): the module call is the
#: layer's modelled kernel, each further expert GEMM one bare launch on the same host
#: (:meth:`perfmodel.compute.ComputeModel.layer_time`). Scaling by ``host_dispatch_s`` keeps a
#: faster or slower host, and graph mode (0), consistent.
HOST_LAUNCH_SHARE = BARE_EAGER_LAUNCH_S / HOST_DISPATCH_S["pytorch-eager"]


#: Accepted spellings of a convolution memory format -> ``ComputeParams.conv_layout``.
MEMORY_FORMATS = {
    "nhwc": "nhwc",
    "channels_last": "nhwc",
    "channels-last": "nhwc",
    "nchw": "nchw",
    "contiguous": "nchw",
    "channels_first": "nchw",
    "channels-first": "nchw",
}


def parse_memory_format(text: object, where: str = "memory_format") -> str:
    """``"nhwc"`` or ``"nchw"`` from a user spelling (``channels_last``, ``contiguous`` ...).

    >>> parse_memory_format("channels_last"), parse_memory_format("NCHW")
    ('nhwc', 'nchw')

    Raises
    ------
    ConfigError
        Naming the value and ``where`` it came from.
    """
    key = str(text).strip().lower()
    if key not in MEMORY_FORMATS:
        raise ConfigError(
            f"{where}: unknown memory format {text!r}; expected nchw (PyTorch's default "
            "contiguous layout) or nhwc (channels_last)",
            value=text,
            where=where,
        )
    return MEMORY_FORMATS[key]


@dataclass(frozen=True)
class ComputeParams:
    """Efficiency parameters of :class:`perfmodel.compute.ComputeModel` for one GPU model.

    Attributes
    ----------
    gpu
        GPU model name these parameters describe.
    peak_flops
        Dense datasheet peak per :class:`DType` in FLOP/s.
    memory_bandwidth_Bps
        Datasheet device-memory bandwidth, bytes/s.
    sm_count
        Streaming multiprocessors (wave quantisation).
    gemm_ceilings
        Per-dtype fraction of the datasheet peak a large, well-shaped GEMM sustains on this GPU
        (the ceiling the tile/wave model starts from); a dtype listed here overrides
        ``tensor_core_efficiency``. :meth:`for_gpu` fills it from the catalogue's achieved rates
        (:meth:`perfmodel.hardware.GPUSpec.gemm_ceiling`: measured sustained rates at the
        board's power limit, or burst rates times the architecture's measured sustained/burst
        ratio, derated for a power-limited board); empty where the catalogue has none.
    gemm_ceiling_basis
        How each ``gemm_ceilings`` entry was obtained (``GemmCeiling.basis``), for reports.
    fp8_split_accumulation
        Rate of an FP8 GEMM with split (promoted) accumulation relative to fast accumulation.
        :meth:`for_gpu` takes :data:`perfmodel.hardware.gpus.SPLIT_ACCUMULATION_FACTOR` of the
        architecture (Hopper/Ada 1/1.15, Blackwell 1.0); 1.0 elsewhere.
    fp8_backward_split_accumulation
        FP8 training runs the input- and weight-gradient GEMMs with split accumulation and the
        forward with fast accumulation: Transformer Engine (``_2X_ACC_FPROP = False``,
        ``_2X_ACC_DGRAD = _2X_ACC_WGRAD = True``) and torchao float8 (``use_fast_accum=True``
        for the output GEMM only) both default to it. ``False``: every FP8 GEMM fast.
    attention_backend
        Fused-attention kernel library (:class:`perfmodel.compute.attention.AttentionBackend`),
        a property of the software stack (the training recipe sets it). ``generic`` (default)
        uses ``fused_attention_efficiency`` / ``fused_attention_bwd_efficiency``; a named
        backend uses its published efficiency by head dimension, sequence length and mask
        (:func:`perfmodel.compute.attention.attention_efficiency`).
    power_clock_ratio
        Sustained clock of this board relative to the board the published kernel benchmarks
        ran on (:meth:`perfmodel.hardware.GPUSpec.power_clock_ratio`: 0.876 for a 500 W H100
        against the 700 W part); multiplies the backend attention tables, whose numbers come
        from 700 W H100s. The GEMM ceilings carry the same derating already.
    tensor_core_efficiency
        Fraction of the tensor-core peak a large, well-shaped GEMM reaches where
        ``gemm_ceilings`` has no entry for the dtype (GPUs whose catalogue entry states no
        achieved rate: datasheet only). Default 0.76: the
        median (0.763) of the 11 best-shape matmul ceilings in the published rows whose source
        states a comparable dense peak (stas00/ml-engineering MAMF: A100 SXM 0.869, A100 PCIe
        0.811, H100 0.803, GH200 0.838, B200 0.776, GB200 0.729, H100 fp8 0.709, B200 fp8
        0.763; mli/transformers-benchmarks: A100 fp16 0.737, A100 tf32 0.744, V100 fp16 0.760;
        range 0.71-0.87). These rows are the fit and are reported as in-sample; DeepBench did
        not feed it.
    cuda_core_efficiency
        Same for FP32 on CUDA cores (SIMT). Default 0.90: the mli V100 fp32 ceiling (0.89,
        in-sample) and the ~90% of peak that large cuBLAS SGEMMs are commonly reported to reach
        on Pascal/Volta. The DeepBench V100 fp32 GEMM rows (0.82-0.94) did not feed it; they
        judge it.
    memory_efficiency
        Fraction of the datasheet bandwidth a streaming kernel reaches. Default 0.80: an
        engineering estimate at the low end of the 80-92% that STREAM-like GPU benchmarks
        (BabelStream, NVIDIA's bandwidthTest) typically report on HBM GPUs, since framework
        element-wise kernels rarely match a tuned copy kernel. Not fitted to any row here; a
        calibration profile replaces it with a measured value.
    kernel_launch_s
        Time per kernel beyond its roofline time (launch latency plus the tail of the previous
        kernel). Default 4 us: the order of the CUDA kernel launch latency (a few microseconds)
        usually quoted for back-to-back launches; an estimate, not fitted to any row.
    k_overhead
        Prologue/epilogue cost of one tile, as an equivalent number of ``k`` iterations: a GEMM
        with reduction length ``k`` runs at ``k / (k + k_overhead)`` of the tile's rate.
        ``None`` (default): :data:`DEFAULT_K_OVERHEAD` (64), except FP8 GEMMs on Hopper, which
        pay their tiles' output store (:meth:`k_overhead_for`); a number (a calibration
        profile, a user) applies to every dtype.
    split_k_efficiency
        Throughput factor of a split-K GEMM (the partial tiles are reduced by an extra pass).
        Default 0.90, an estimate; not fitted.
    tensor_core_tiles, cuda_core_tiles
        Tile menus the library chooses from (best predicted time wins, as cuBLAS heuristics
        aim to).
    winograd_speedup
        Effective FLOP-rate multiplier of 3x3 stride-1 FP32 convolutions with at least 16 input
        channels (cuDNN picks Winograd; Lavin & Gray 2016: F(2x2,3x3) saves 2.25x multiplies,
        F(4x4,3x3) 4x, minus transform cost). Default 3.0: the median (3.06) of the implied
        ratio, measured time over predicted time without Winograd, for the 5 DeepBench V100 fp32
        3x3 convolution rows with 64-512 input channels (ratios 1.9-3.2). These rows are
        in-sample in the validation tier.
    conv_efficiency
        Implicit-GEMM convolutions relative to a GEMM of the same shape (im2col address
        arithmetic, filter halos). Default 0.90: an estimate (NVIDIA's "Convolutional Layers
        User's Guide" treats implicit-GEMM convolutions as GEMMs of the implicit shape, with
        somewhat lower throughput); not fitted.
    fused_attention_efficiency
        Fraction of the tensor-core peak reached by the fused attention *forward* kernel.
        Default 0.50: the low end of the 50-73% of A100 peak that FlashAttention-2 reports
        (Dao 2023, abstract); not fitted (the H100 profile fits 0.41 +- 0.07).
    fused_attention_bwd_efficiency
        Same for the fused attention *backward* (FLOP counted as 2.5x the forward: five GEMMs
        against two). FlashAttention-2 reports its backward below its forward (Dao 2023,
        sec. 4.1: up to 63% of A100 peak backward against 73% forward). Default 0.24: the
        forward default times 0.47, the backward/forward efficiency ratio fitted (geometric
        mean of log ratios) on the five H100 SDPA microbenchmarks that timed both
        (``attention/bf16/*``: ratios 0.32-0.79, head_dim 64 lowest; see
        ``tests/compute/test_h100_fits.py``). Before this parameter the backward ran at the
        forward's efficiency and GPT-2's attention backward was predicted at 1/3 of its
        measured 3.50 ms.
    alignment_efficiency
        Throughput factor of a tensor-core GEMM whose ``k`` or ``n`` is not a multiple of the
        dtype's alignment (:data:`ALIGNMENT_ELEMENTS`): cuBLAS then falls back to kernels
        without 16-byte vector loads. Stated for 16-bit operands; the factor scales with the
        element size, ``min(1, alignment_efficiency x itemsize / 2)`` (TF32 doubles it), since
        the fallback kernels are limited by element loads, not by the dtype's MMA rate (the
        H100 runs a 4095^3 GEMM at 149 TFLOP/s in BF16 and 134 in TF32). Default 0.20: a
        least-squares fit in log space over the 6 unaligned tensor-core GEMMs of the H100
        profile (4095^3 and 3000x257x2048 in TF32, FP16, BF16) against the datasheet-default
        model, residual RMS 0.06 in ln; held-out check: GPT-2's LM head (vocabulary 50257) in
        the measured training steps (``tests/compute/test_h100_fits.py``). Convolutions are
        exempt (cuDNN pads odd channel counts).
    host_dispatch_s
        Host (CPU) time to issue one kernel in the framework's eager training step, seconds.
        The host enqueues kernels asynchronously, ahead of the GPU, so a step takes
        ``max(GPU time, kernels x host_dispatch_s)`` over the whole step (not per layer): the GPU
        hides the host until it outruns it (small batches). Default 0 (not modelled: graph-mode
        frameworks, or a software preset that models dispatch elsewhere);
        :data:`HOST_DISPATCH_S` lists per-framework values (PyTorch eager: 35.55 us, fitted on
        host-bound H100 training steps).
    elementwise_flop_dtype
        Format of non-GEMM arithmetic (FP32 on CUDA cores).
    cast_weights_each_step
        Mixed precision with ``torch.autocast`` casts the FP32 weights of convolutions and
        linear layers to 16 bit in every forward (``2 + 4`` bytes moved per parameter) and
        their gradients back to FP32 in backward; Apex O2 / Megatron keep a 16-bit copy instead
        and cast once in the optimizer step. It also stands for autocast's FP32 ops: layers
        marked ``LayerCost.autocast_fp32`` (layer norms, the residual stream) move FP32
        activations.
    fp32_conv_tf32
        FP32 convolutions run on TF32 tensor cores where the GPU has them (a software setting:
        PyTorch's ``torch.backends.cudnn.allow_tf32`` defaults to ``True``, its matmul flag to
        ``False``, PyTorch >= 1.12; :attr:`perfmodel.parallel.recipe.Recipe.fp32_conv_tf32`).
        Default ``False``: FP32 means FP32 on CUDA cores.
    conv_layout
        Memory format of convolution activations, a software setting: ``"nhwc"`` (TensorFlow,
        Keras, PyTorch ``channels_last``, as NVIDIA's mixed-precision recipes use) or ``"nchw"``
        (PyTorch's default). Tensor-core convolution kernels work on NHWC; with NCHW tensors cuDNN
        transposes the input and the output of every tensor-core convolution pass (PyTorch
        tutorial "Channels Last Memory Format"; NVIDIA "Convolutional Layers User's Guide",
        section "Tensor layouts"), which the model charges as one extra read and write of both
        tensors per pass at the memory rate. CUDA-core (FP32) kernels are native in NCHW.
    compute_capability
        The GPU's CUDA compute capability (:attr:`perfmodel.hardware.GPUSpec.compute_capability`;
        ``None``: not known, e.g. a profile written before it was recorded). The fused-attention
        tables of data-centre Blackwell are per generation, 10.0 (B200, GB200) and 10.3 (B300,
        GB300) (:func:`perfmodel.compute.attention.attention_efficiency`).
    """

    gpu: str
    peak_flops: Mapping[DType, float]
    memory_bandwidth_Bps: float
    sm_count: int
    gemm_ceilings: Mapping[DType, float] = field(default_factory=lambda: MappingProxyType({}))
    gemm_ceiling_basis: Mapping[DType, str] = field(default_factory=lambda: MappingProxyType({}))
    fp8_split_accumulation: float = 1.0
    fp8_backward_split_accumulation: bool = True
    attention_backend: AttentionBackend = AttentionBackend.GENERIC
    power_clock_ratio: float = 1.0
    tensor_core_efficiency: float = 0.76
    cuda_core_efficiency: float = 0.90
    memory_efficiency: float = 0.80
    kernel_launch_s: float = 4.0 * units.us
    k_overhead: float | None = None
    split_k_efficiency: float = 0.90
    tensor_core_tiles: tuple[Tile, ...] = _TC_TILES
    cuda_core_tiles: tuple[Tile, ...] = _SIMT_TILES
    winograd_speedup: float = 3.0
    conv_efficiency: float = 0.90
    fused_attention_efficiency: float = 0.50
    fused_attention_bwd_efficiency: float = 0.24
    alignment_efficiency: float = 0.20
    host_dispatch_s: float = 0.0
    elementwise_flop_dtype: DType = DType.FP32
    cast_weights_each_step: bool = True
    fp32_conv_tf32: bool = False
    conv_layout: str = "nhwc"
    architecture: str = ""
    compute_capability: tuple[int, int] | None = None
    source: str = "datasheet peaks x documented efficiency model (perfmodel.compute.params)"
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for name in (
            "tensor_core_efficiency",
            "cuda_core_efficiency",
            "memory_efficiency",
            "split_k_efficiency",
            "conv_efficiency",
            "fused_attention_efficiency",
            "fused_attention_bwd_efficiency",
            "alignment_efficiency",
            "fp8_split_accumulation",
            "power_clock_ratio",
        ):
            v = getattr(self, name)
            if not 0.0 < float(v) <= 1.0:
                raise CalibrationError(
                    f"ComputeParams.{name} must be in (0, 1], got {v}", value=v, where=name
                )
        if self.conv_layout not in ("nhwc", "nchw"):
            raise CalibrationError(
                f"ComputeParams.conv_layout must be 'nhwc' or 'nchw', got {self.conv_layout!r}",
                value=self.conv_layout,
                where="conv_layout",
            )
        if self.memory_bandwidth_Bps <= 0 or self.sm_count <= 0:
            raise CalibrationError(
                "ComputeParams needs positive memory_bandwidth_Bps and sm_count",
                value=(self.memory_bandwidth_Bps, self.sm_count),
                where=self.gpu,
            )
        if not (float(self.host_dispatch_s) >= 0.0):
            raise CalibrationError(
                f"ComputeParams.host_dispatch_s must be >= 0 s, got {self.host_dispatch_s}",
                value=self.host_dispatch_s,
                where="host_dispatch_s",
            )
        if (
            self.kernel_launch_s < 0
            or (self.k_overhead is not None and self.k_overhead < 0)
            or self.winograd_speedup <= 0
        ):
            raise CalibrationError(
                "ComputeParams: kernel_launch_s and k_overhead must be >= 0, winograd_speedup > 0",
                value=(self.kernel_launch_s, self.k_overhead, self.winograd_speedup),
                where=self.gpu,
            )
        for d, v in self.gemm_ceilings.items():
            if not 0.0 < float(v) <= 1.0:
                raise CalibrationError(
                    f"ComputeParams.gemm_ceilings[{d.value}] must be in (0, 1], got {v}",
                    value=v,
                    where="gemm_ceilings",
                )
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))
        object.__setattr__(self, "gemm_ceilings", MappingProxyType(dict(self.gemm_ceilings)))
        object.__setattr__(
            self, "gemm_ceiling_basis", MappingProxyType(dict(self.gemm_ceiling_basis))
        )
        object.__setattr__(
            self, "attention_backend", AttentionBackend.parse(self.attention_backend)
        )

    @classmethod
    def for_gpu(cls, gpu: GPUSpec, *, burst: bool = False, **overrides: Any) -> ComputeParams:
        """Datasheet peaks, bandwidth and SM count of ``gpu`` with its achieved ceilings
        (:meth:`perfmodel.hardware.GPUSpec.gemm_ceiling`, sustained at the board's power limit;
        ``burst=True``: the boost-clock burst a short microbenchmark sees), its achieved memory
        bandwidth where measured (``memory_efficiency = achieved / datasheet``) and the
        documented efficiency model elsewhere; ``overrides`` replace named fields.

        >>> from perfmodel.hardware import get_gpu
        >>> p = ComputeParams.for_gpu(get_gpu("H100-SXM5-80GB"))
        >>> round(p.gemm_ceiling(DType.BF16), 3), round(p.gemm_ceiling(DType.FP8), 3)
        (0.763, 0.684)
        >>> round(p.fp8_split_accumulation, 3), round(p.memory_efficiency, 4)
        (0.87, 0.7534)
        """
        ceilings: dict[DType, float] = {}
        basis: dict[DType, str] = {}
        for dtype, peak in gpu.peak_flops.items():
            # FP32/FP64 run on CUDA cores; FP6/FP4 are datasheet columns no training
            # precision uses (their measured block-scaled rates are GemmFormat.NVFP4/MXFP4)
            if dtype in (DType.FP32, DType.FP64, DType.FP6, DType.FP4) or peak <= 0:
                continue
            c = gpu.gemm_ceiling(dtype, burst=burst)
            if c is not None:
                ceilings[dtype] = min(1.0, c.flops / peak)
                basis[dtype] = c.basis
        split = 1.0
        fast = gpu.gemm_ceiling(GemmFormat.FP8, burst=burst)
        slow = gpu.gemm_ceiling(GemmFormat.FP8_SPLIT, burst=burst)
        if fast is not None and slow is not None:
            split = slow.flops / fast.flops
        elif DType.FP8 in gpu.peak_flops:
            split = SPLIT_ACCUMULATION_FACTOR.get(gpu.architecture, 1.0)
        kw: dict[str, Any] = {}
        if gpu.achieved_memory_bandwidth_Bps is not None:
            kw["memory_efficiency"] = min(
                1.0, gpu.achieved_memory_bandwidth_Bps / gpu.memory_bandwidth_Bps
            )
        base = cls(
            gpu=gpu.name,
            peak_flops=dict(gpu.peak_flops),
            memory_bandwidth_Bps=gpu.memory_bandwidth_Bps,
            sm_count=gpu.sm_count,
            architecture=gpu.architecture,
            compute_capability=gpu.compute_capability,
            gemm_ceilings=ceilings,
            gemm_ceiling_basis=basis,
            fp8_split_accumulation=split,
            power_clock_ratio=1.0 if burst else gpu.power_clock_ratio(),
            **kw,
        )
        return replace(base, **overrides) if overrides else base

    def gemm_ceiling(self, dtype: DType, *, split_accumulation: bool = False) -> float:
        """Fraction of ``dtype``'s peak a best-shape tensor-core GEMM reaches: the
        ``gemm_ceilings`` entry, else ``tensor_core_efficiency``; times
        ``fp8_split_accumulation`` for an FP8 GEMM with split accumulation."""
        c = self.gemm_ceilings.get(dtype, self.tensor_core_efficiency)
        if split_accumulation and dtype is DType.FP8:
            c *= self.fp8_split_accumulation
        return c

    def with_updates(self, **updates: Any) -> ComputeParams:
        """A copy with ``updates`` applied (what calibration produces)."""
        return replace(self, **updates)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (DType keys as strings, tiles as lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "peak_flops" or f.name == "gemm_ceilings":
                v = {d.value: float(x) for d, x in v.items()}
            elif f.name == "gemm_ceiling_basis":
                v = {d.value: str(x) for d, x in v.items()}
            elif f.name == "attention_backend":
                v = v.value
            elif f.name.endswith("_tiles"):
                v = [[t.m, t.n, t.efficiency, t.ctas_per_sm] for t in v]
            elif isinstance(v, DType):
                v = v.value
            elif f.name == "extra":
                v = dict(v)
            elif f.name == "compute_capability" and v is not None:
                v = list(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "ComputeParams") -> ComputeParams:
        """Inverse of :meth:`to_dict`; unknown keys raise :class:`CalibrationError`."""
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise CalibrationError(
                f"{where}: unknown ComputeParams field(s) {sorted(unknown)}",
                value=sorted(unknown),
                where=where,
            )
        required = ("gpu", "peak_flops", "memory_bandwidth_Bps", "sm_count")
        require_fields(data, required, where, error=CalibrationError)
        kw: dict[str, Any] = dict(data)
        kw["peak_flops"] = {
            DType.parse(k, where=f"{where}.peak_flops"): float(v)
            for k, v in data["peak_flops"].items()
        }
        for key in ("gemm_ceilings", "gemm_ceiling_basis"):
            if key in kw:
                kw[key] = {DType.parse(k, where=f"{where}.{key}"): v for k, v in kw[key].items()}
        if "attention_backend" in kw:
            kw["attention_backend"] = AttentionBackend.parse(
                kw["attention_backend"], where=f"{where}.attention_backend"
            )
        for key in ("tensor_core_tiles", "cuda_core_tiles"):
            if key in kw:
                kw[key] = tuple(_tile(t, f"{where}.{key}[{i}]") for i, t in enumerate(kw[key]))
        if "elementwise_flop_dtype" in kw:
            kw["elementwise_flop_dtype"] = DType.parse(kw["elementwise_flop_dtype"])
        if "extra" in kw:
            kw["extra"] = MappingProxyType(dict(kw["extra"]))
        if kw.get("compute_capability") is not None:
            major, minor = kw["compute_capability"]
            kw["compute_capability"] = (int(major), int(minor))
        return cls(**kw)

    def k_overhead_for(self, dtype: DType, rate_flops: float) -> float:
        """``k_overhead`` of a GEMM in ``dtype`` whose main loop runs at ``rate_flops``.

        An explicit ``k_overhead`` is returned as set. Otherwise :data:`DEFAULT_K_OVERHEAD`,
        except an FP8 GEMM on Hopper, which takes the time its tiles' output store adds: the
        WGMMA accumulator lives in registers, so each tile's epilogue writes its ``tm x tn``
        output tile (``c`` = 2 B per element: FP8 GEMMs of training write BF16) to device
        memory without overlapping the tile's main loop, and the GEMM takes its compute time
        plus its output bytes over the memory bandwidth ``B``. Per tile the store takes as long
        as ``R c / (2 B)`` main-loop iterations of ``2 tm tn`` FLOP at the rate ``R``::

            k_overhead = R x c / (2 x memory_bandwidth_Bps)

        (the datasheet bandwidth: a bulk store streams at the pins' rate). A documented check
        against a published kernel table that is not a validation row: DeepGEMM's FP8 GEMMs on
        H800 (deepseek-ai/DeepGEMM README at 55ab91f, 2025-03-25, "Normal GEMMs for dense
        models" M = 4096 rows and "Grouped GEMMs (contiguous layout)", 10 shapes,
        K = 512-16384): with the H100's FP8 burst rate (1,402.6 TFLOP/s, ``k_overhead`` = 419)
        the tile/wave model is within a median 4.8% of the 10 (signed -4.5%; worst +11.6%,
        N = 2112), against 10.6% (signed +10.6%, K = 512 at +55%) with the constant 64. The
        table's ``K = 512`` row, 751 TFLOP/s, is the store's signature: its output (268 MB)
        takes as long at 3.35 TB/s as its 137 TFLOP at the large-GEMM rate. The same store
        model for 16-bit GEMMs (``k_overhead`` 225 on an H100) was tried and not kept: it moves
        the classic training rows from 13.3% to 14.7% (single-GPU 14.0% to 16.2%), and no
        published 16-bit short-``k`` table is at hand to say whether cuBLAS's persistent
        16-bit kernels hide the store under the next tile's main loop (whose 16-bit main loop
        is twice as long per ``k`` as FP8's). Blackwell keeps the accumulator in tensor memory
        (CUTLASS "Utilities for SM100", SM100 epilogue flow), which its kernels double-buffer so
        one tile's epilogue runs beside the next tile's MMA (Triton's Gluon example
        "Overlapping Accumulator Block-Scaled Matrix Multiplication"): the B200's measured
        best-shape FP8 GEMM has ``k`` = 3072 at 76% of peak (stas00/ml-engineering MAMF table,
        15360 x 4096 x 3072), where a serialised store would cost about a tenth; it keeps 64.

        >>> from perfmodel.hardware import get_gpu
        >>> p = ComputeParams.for_gpu(get_gpu("H100-SXM5-80GB"))
        >>> round(p.k_overhead_for(DType.FP8, 1402.6e12))   # 1402.6e12 x 2 / (2 x 3.35e12)
        419
        >>> p.k_overhead_for(DType.BF16, 755e12)
        64.0
        """
        if self.k_overhead is not None:
            return float(self.k_overhead)
        if dtype is not DType.FP8 or self.architecture not in STORE_BOUND_FP8_ARCHITECTURES:
            return float(DEFAULT_K_OVERHEAD)
        return rate_flops * FP8_GEMM_OUTPUT_BYTES / (2.0 * self.memory_bandwidth_Bps)

    def peak(self, dtype: DType) -> float:
        """Peak FLOP/s for ``dtype`` with the framework fallbacks of
        :meth:`perfmodel.hardware.GPUSpec.peak` (:func:`~perfmodel.hardware.gpus.peak_with_fallback`:
        TF32 -> FP32 before Ampere; BF16 -> FP32 on Volta/Turing; an error where the GPU has no
        such format, e.g. BF16 on Pascal or FP8 before Hopper)."""
        return peak_with_fallback(self.peak_flops, dtype, self.architecture, self.gpu)

    def alignment_factor(self, dtype: DType, *dims: int) -> float:
        """Throughput factor of a GEMM in ``dtype`` whose leading dimensions are ``dims``.

        1.0 when every dimension is a multiple of :data:`ALIGNMENT_ELEMENTS` for ``dtype`` (or
        the GEMM runs on CUDA cores), else ``min(1, alignment_efficiency x itemsize / 2)``.

        >>> from perfmodel.hardware import get_gpu
        >>> p = ComputeParams.for_gpu(get_gpu("H100-SXM5-80GB"))
        >>> p.alignment_factor(DType.BF16, 50304, 768), p.alignment_factor(DType.BF16, 50257, 768)
        (1.0, 0.2)
        >>> p.alignment_factor(DType.TF32, 4095), p.alignment_factor(DType.FP32, 4095)
        (0.4, 1.0)
        """
        align = ALIGNMENT_ELEMENTS.get(dtype)
        if align is None or not self.uses_tensor_cores(dtype):
            return 1.0
        if all(int(d) % align == 0 for d in dims):
            return 1.0
        return min(1.0, self.alignment_efficiency * dtype.itemsize / 2.0)

    def uses_tensor_cores(self, dtype: DType) -> bool:
        """True when ``dtype`` GEMMs run on tensor cores of this GPU (peak above FP32's)."""
        fp32 = self.peak_flops.get(DType.FP32, 0.0)
        return dtype is not DType.FP32 and self.peak(dtype) > 1.5 * fp32
