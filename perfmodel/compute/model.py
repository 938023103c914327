"""Per-layer compute time on one GPU: a roofline with shape-dependent GEMM efficiency.

For a layer pass with ``F`` FLOP and ``B`` bytes of device-memory traffic::

    t_c    = F / (peak(dtype) * eff * align),     t_m = B / (bandwidth * memory_efficiency)
    t_gpu  = max(t_c, t_m) + kernels * launch   (a pass without a GEMM)
    t_gpu  = (t_c**p + t_m**p)**(1/p) + kernels * launch   (a GEMM pass, p = 3)
    t_host = kernels * host_dispatch_s          (issue time on the host, reported apart)

A GEMM pass takes the smooth maximum of its compute and memory times
(:func:`~perfmodel.compute.gemm.gemm_roofline_time`): near the ridge point a GEMM's operand
stream and tensor-core main loop overlap imperfectly, which is where a GEMM with few rows per
weight matrix (small batches, the experts of a fine-grained MoE) runs.

``eff`` is the GEMM efficiency of the pass's matrix product (:func:`gemm_efficiency`): the
library picks the tile (and split-K factor) with the best predicted rate, and the rate is the
large-GEMM ceiling times tile quantisation (padding of the last tile row/column), wave
quantisation (a partial last wave of tiles leaves SMs idle) and the prologue/epilogue share of a
short reduction. A per-GPU batch of 16 on ResNet-50's 7x7 layers fills few tiles and SMs, which
is why small per-GPU batches lose throughput (NVIDIA "Matrix Multiplication Background User's
Guide", "Tile quantization" and "Wave quantization").

Layers without a GEMM (norms, activations, pooling, embeddings, losses) are nearly always
memory-bound; their FLOP run at the FP32 CUDA-core rate.

``align`` is the tensor-core alignment factor (:meth:`ComputeParams.alignment_factor`). The
second line is the host time an eager framework spends issuing the layer's kernels
(``ComputeParams.host_dispatch_s`` per kernel, 0 by default). The host issues kernels
asynchronously, ahead of the GPU, so it is not added to the layer: a step takes at least its
total host issue time (:meth:`ComputeModel.host_time`), which the step lowering and
:meth:`ComputeModel.step_time` apply. Fused attention uses separate forward and backward
efficiencies.

The value a layer's pricing returns (:class:`LayerTime`, :class:`Bound`) and a step's kernel
seconds by class live in :mod:`perfmodel.compute.layer_time` (imported here under the same names).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from perfmodel._memo import keep
from perfmodel.compute.layer_time import (
    BOUND_COMPUTE,
    BOUND_MEMORY,
    Bound,
    LayerTime,
    class_key,
    fp8_ceiling,
    kernel_class_seconds,
    layer_matmul_dtype,
    layer_time_of,
)
from perfmodel.dtypes import DTYPE_FP8, DTYPE_FP32, DTYPE_TF32, DType, Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware.gpus import GPUSpec
from perfmodel.workload.kernels import Fp8Recipe, GradClip, OptimizerImpl, optimizer_bytes_per_param
from perfmodel.workload.layers import (
    LAYER_ATTENTION,
    LAYER_CONV,
    LAYER_LINEAR,
    LAYER_MATMUL,
    ROLE_EXPERT,
    GemmShape,
    KernelClass,
    LayerCost,
    Workload,
)
from perfmodel.workload.memory import (
    OPTIMIZER_LAMB,
    Optimizer,
    Recompute,
    is_selectively_recomputed,
)

from .attention import AttentionEfficiency, attention_efficiency, ring_attention_efficiency
from .gemm import GemmEfficiency, gemm_efficiency, gemm_roofline_time
from .params import FP8_GEMM_OUTPUT_BYTES, HOST_LAUNCH_SHARE, ComputeParams

#: Ratio ``fwd_flop / (2 m n k batch)`` of a fused-attention layer below which its mask is taken
#: as causal (:func:`attention_shape`): a full mask gives ``(d + d_v) / d`` (2 for ``d_v = d``,
#: 1.67 for DeepSeek's MLA ``d = 192, d_v = 128``), a causal one half that (1, 0.83).
_CAUSAL_FLOP_RATIO = 1.25


@dataclass(frozen=True)
class AttentionShape:
    """What a fused-attention layer's efficiency depends on.

    ``seq`` is the key length one kernel call sweeps: the layer's query length ``m`` (equal to
    the key length without context parallelism; under ring context parallelism each of the
    ``cp`` steps is a local-by-local block, so the local length). ``ring_steps``: the kernel
    calls of a ring context-parallel attention (``cp``; 1 without), whose first is the causal
    block and the others unmasked when ``causal``
    (:func:`~perfmodel.compute.attention.ring_attention_efficiency`). ``sliding``: a causal
    sliding window of ``seq`` keys, as the layer states it
    (:attr:`~perfmodel.workload.layers.LayerCost.sliding_window`; the block
    ``GemmShape(span, 2 span, ...)`` of :meth:`perfmodel.workload._net.Net.attention`).
    """

    head_dim: int
    seq: int
    causal: bool
    ring_steps: int = 1
    sliding: bool = False


def attention_shape(layer: LayerCost) -> AttentionShape:
    """Head dimension, per-call sequence and mask of a fused-attention layer.

    The zoo's attention layer (:meth:`perfmodel.workload._net.Net.attention`) carries one
    kernel call's block ``GemmShape(m=s, n=s, k=d, batch=b h)``, ``ring_steps = cp`` and forward
    FLOP ``2 b s (s cp) h (d + d_v)``, halved under a causal mask; the mask is read from the
    ratio of one call's FLOP (``fwd_flop / ring_steps``) to the block's
    (:data:`_CAUSAL_FLOP_RATIO`). A causal layer is a sliding window where it says so
    (:attr:`~perfmodel.workload.layers.LayerCost.sliding_window` > 0, set by the zoo's window
    attention, :func:`perfmodel.workload._net_shapes._sliding_keys`); its block's shape
    (``GemmShape(span, 2 span, d, ...)``) is no evidence, as any causal block of ``n = 2 m``
    would match it.

    >>> from perfmodel.workload.layers import GemmShape, LayerCost, LayerKind
    >>> att = LayerCost(name="a", kind=LayerKind.ATTENTION, fwd_flop=2 * 8 * 1024**2 * 128,
    ...                 bwd_input_flop=1.0, bwd_weight_flop=0.0, params=0, fwd_bytes=1.0,
    ...                 bwd_bytes=1.0, activation_bytes=1.0, output_shape=(1,),
    ...                 gemm=GemmShape(1024, 1024, 128, 8))
    >>> attention_shape(att)
    AttentionShape(head_dim=128, seq=1024, causal=True, ring_steps=1, sliding=False)

    The same block as step 0 of a causal ring of 4 (four calls of equal FLOP):

    >>> from dataclasses import replace
    >>> attention_shape(replace(att, fwd_flop=4 * att.fwd_flop, ring_steps=4))
    AttentionShape(head_dim=128, seq=1024, causal=True, ring_steps=4, sliding=False)
    """
    g = layer.gemm
    assert g is not None
    gemm_flop = 2.0 * g.m * g.n * g.k * g.batch
    steps = max(int(layer.ring_steps), 1)
    causal = gemm_flop > 0 and layer.fwd_flop / (steps * gemm_flop) < _CAUSAL_FLOP_RATIO
    sliding = causal and layer.sliding_window > 0
    return AttentionShape(
        head_dim=max(int(g.k), 1),
        seq=max(int(layer.sliding_window if sliding else g.m), 1),
        causal=causal,
        ring_steps=steps,
        sliding=sliding,
    )


def _autocast_casts(
    layer: LayerCost, prec: Precision, p: ComputeParams
) -> tuple[float, float, int]:
    """``(weight cast bytes, input cast bytes, weight cast kernels)`` of one forward under
    autocast with ``cast_weights_each_step``: the FP32 weights (and bias) to 16 bit,
    ``4 + 2`` bytes per parameter, and a linear layer's FP32 input from a norm; zeros
    otherwise.

    Autocast casts the weights (and bias) of GEMM-like ops only (conv, linear); norms and
    embeddings keep FP32 weights (PyTorch "Automatic Mixed Precision" op reference). A layer
    without parameters of its own (a bare GEMM microbenchmark, a tied LM head) is charged no
    weight cast."""
    g = layer.gemm
    cast_w = cast_in_bytes = 0.0
    cast_w_kernels = 0
    autocast = p.cast_weights_each_step and prec.mixed
    if autocast and layer.kind in (LAYER_CONV, LAYER_LINEAR):
        weights = float(layer.params)
        bias = 0.0
        if layer.kind is LAYER_LINEAR and g is not None:
            bias = max(weights - g.k * g.n * g.batch, 0.0)
        if weights:
            cast_w = weights * (4 + prec.param_bytes)
            cast_w_kernels = 1 + (1 if bias else 0)
        if layer.casts_input and g is not None:
            cast_in_bytes = g.m * g.k * g.batch * (4.0 + prec.activation_bytes)
    return cast_w, cast_in_bytes, cast_w_kernels


@dataclass(frozen=True)
class _BwdPass:
    """How a GEMM layer's backward passes run: their dtype, whether a convolution or a routed
    experts' grouped GEMM, the rate multipliers (Winograd, alignment, the FP8 rates of the
    forward, input-gradient and weight-gradient passes) and the layout transposes' time."""

    dtype: DType
    conv: bool
    grouped: bool
    wino: float
    align: float
    fp8_rates: tuple[float, float, float]
    transpose_s: float


#: :meth:`ComputeModel._fp8_rates` of a layer whose GEMMs do not run in FP8
_NO_FP8_RATES = (1.0, 1.0, 1.0)

#: Entries a :class:`ComputeModel` keeps in its GEMM memo (shapes and grouped shapes, per
#: dtype), the oldest dropped first (:func:`perfmodel._memo.keep`): a GEMM's efficiency is a pure
#: function of (shape, dtype) once the model's parameters are fixed, so a dropped entry costs
#: a recompute, never a different answer. A GPT-3 plan asks for tens of shapes, a plan search
#: a few thousand; a sweep of distinct batches adds ~7 a scenario, which without a bound grew
#: without end in a long-lived process.
GEMM_MEMO_SIZE = 65_536

#: Entries a :class:`ComputeModel` keeps in its fused-attention memo (by attention shape and
#: backend), bounded as :data:`GEMM_MEMO_SIZE` and for the same reason.
ATTENTION_MEMO_SIZE = 16_384


class ComputeModel:
    """Predicts per-layer forward/backward times and the optimizer step on one GPU.

    Parameters
    ----------
    gpu
        Datasheet description (``perfmodel.hardware.get_gpu``).
    params
        Efficiency parameters; default ``ComputeParams.for_gpu(gpu)`` (no calibration).
    fp8_recipe
        The FP8 recipe of FP8 training (:class:`~perfmodel.workload.kernels.Fp8Recipe`): which
        GEMM passes accumulate in split mode (:func:`fp8_ceiling`); ``None``: fast
        accumulation everywhere.

    Examples
    --------
    A 8192^3 BF16 GEMM on an A100 runs at its sustained ceiling (0.787 of peak: the measured
    271.2 TFLOP/s burst times the Ampere sustained/burst ratio 258/285, see
    :meth:`perfmodel.hardware.GPUSpec.gemm_ceiling`) times the k factor 8192/(8192+64) and the
    wave factor (2048 256x128 tiles on 108 SMs = 18.96 waves of 19):

    >>> from perfmodel.hardware import get_gpu
    >>> from perfmodel.workload.layers import GemmShape
    >>> cm = ComputeModel(get_gpu("A100-SXM4-80GB"))
    >>> e = cm.gemm(GemmShape(8192, 8192, 8192), DType.BF16)
    >>> round(e.efficiency, 3)
    0.779
    """

    def __init__(
        self,
        gpu: GPUSpec,
        params: ComputeParams | None = None,
        *,
        fp8_recipe: Fp8Recipe | None = None,
    ) -> None:
        self._gpu = gpu
        self._fp8 = fp8_recipe
        self._params = params if params is not None else ComputeParams.for_gpu(gpu)
        # gemm_efficiency is a pure function of (shape, dtype) once the params are fixed; the
        # repeated layers of a transformer ask for the same few shapes hundreds of times
        self._gemm_cache: dict[tuple[GemmShape, DType], GemmEfficiency] = {}
        self._attention_cache: dict[tuple[AttentionShape, object], AttentionEfficiency] = {}
        # ComputeParams.peak and uses_tensor_cores per dtype: pure functions of the dtype once
        # the (frozen) params are fixed, read ~8 times by every new layer shape (issue 27)
        self._peaks: dict[DType, float] = {}
        self._tensor_cores: dict[DType, bool] = {}
        #: :meth:`_gemm_menu` per dtype
        self._gemm_menus: dict[DType, dict[str, Any]] = {}
        #: achieved memory bandwidth, B/s: the product :meth:`_mem_time` divides by
        self._mem_Bps = self._params.memory_bandwidth_Bps * self._params.memory_efficiency
        #: FLOP/s of a pass without a GEMM (:meth:`_scalar_time`; set on first use)
        self._scalar_flops_per_s: float | None = None

    @property
    def gpu(self) -> GPUSpec:
        """Datasheet description this model was built for."""
        return self._gpu

    @property
    def params(self) -> ComputeParams:
        """Efficiency parameters (fixed for the model's lifetime: build a new model to change
        them)."""
        return self._params

    def _peak(self, dtype: DType) -> float:
        """:meth:`ComputeParams.peak` of ``dtype`` (kept per dtype; raises as it does)."""
        got = self._peaks.get(dtype)
        if got is None:
            got = self._peaks[dtype] = self._params.peak(dtype)
        return got

    def _uses_tc(self, dtype: DType) -> bool:
        """:meth:`ComputeParams.uses_tensor_cores` of ``dtype`` (kept per dtype)."""
        got = self._tensor_cores.get(dtype)
        if got is None:
            got = self._tensor_cores[dtype] = self._params.uses_tensor_cores(dtype)
        return got

    # -- building blocks -----------------------------------------------------------------
    def gemm(self, gemm: GemmShape, dtype: DType) -> GemmEfficiency:
        """Tile/wave efficiency of ``gemm`` in ``dtype`` on this GPU (memoised per model)."""
        key = (gemm, dtype)
        hit = self._gemm_cache.get(key)
        if hit is not None:
            return hit
        menu = self._gemm_menus.get(dtype)
        if menu is None:
            menu = self._gemm_menus[dtype] = self._gemm_menu(dtype)
        hit = gemm_efficiency(gemm, **menu)
        return keep(self._gemm_cache, key, hit, GEMM_MEMO_SIZE)

    def _gemm_menu(self, dtype: DType) -> dict[str, Any]:
        """:func:`gemm_efficiency`'s keyword arguments for a ``dtype`` GEMM on this GPU (the
        tile menu, ceiling and ``k_overhead``): pure functions of the dtype once the (frozen)
        params are fixed, so :meth:`gemm` builds them once per dtype, not per new shape."""
        p = self._params
        tc = self._uses_tc(dtype)
        ceiling = p.gemm_ceiling(dtype) if tc else p.cuda_core_efficiency
        return {
            "sm_count": p.sm_count,
            "ceiling": ceiling,
            "tiles": p.tensor_core_tiles if tc else p.cuda_core_tiles,
            "k_overhead": p.k_overhead_for(dtype, self._peak(dtype) * ceiling),
            "split_k_efficiency": p.split_k_efficiency,
        }

    def grouped_gemm(self, gemm: GemmShape, dtype: DType) -> tuple[GemmEfficiency, int]:
        """Efficiency of the ``gemm.batch`` expert GEMMs of a grouped (mixture-of-experts) layer
        and the launches its busiest stream waits for (:mod:`perfmodel.compute.grouped`: the
        per-GEMM efficiency is :meth:`gemm`'s, for the experts that share the SMs at once)."""
        from perfmodel.compute.grouped import grouped_gemm_efficiency

        key = (gemm, dtype, "grouped")
        hit = self._gemm_cache.get(key)  # type: ignore[call-overload]
        if hit is None:
            g = grouped_gemm_efficiency(gemm, lambda s: self.gemm(s, dtype).efficiency)
            per = self.gemm(GemmShape(gemm.m, gemm.n, gemm.k, g.concurrent), dtype)
            hit = (replace(per, efficiency=g.efficiency), g.launches)
            keep(self._gemm_cache, key, hit, GEMM_MEMO_SIZE)  # type: ignore[arg-type]
        return hit  # type: ignore[return-value]

    def gemm_time(self, gemm: GemmShape, dtype: DType, *, itemsize: int | None = None) -> float:
        """Roofline time of one GEMM (no launch overhead), operands of ``itemsize`` bytes,
        including the tensor-core alignment factor (:meth:`ComputeParams.alignment_factor`).

        Compute and memory times combine as a GEMM pass's do
        (:func:`~perfmodel.compute.gemm.gemm_roofline_time`). The output has the operands'
        ``itemsize`` except an FP8 GEMM's, which writes BF16
        (:data:`~perfmodel.compute.params.FP8_GEMM_OUTPUT_BYTES`: Transformer Engine, torchao
        ``_scaled_mm(out_dtype=bfloat16)``, DeepGEMM)."""
        size = dtype.itemsize if itemsize is None else itemsize
        out_size = FP8_GEMM_OUTPUT_BYTES if itemsize is None and dtype is DTYPE_FP8 else size
        eff = self.gemm(gemm, dtype).efficiency * self.params.alignment_factor(
            dtype, gemm.n, gemm.k
        )
        t_c = gemm.flop / (self.params.peak(dtype) * eff)
        operands = gemm.batch * (gemm.m * gemm.k + gemm.k * gemm.n) * size
        nbytes = operands + gemm.batch * gemm.m * gemm.n * out_size
        return self._combine(t_c, self._mem_time(nbytes), gemm, dtype)

    def attention(self, layer: LayerCost) -> AttentionEfficiency:
        """Forward and backward efficiency of a fused-attention layer on this GPU under
        ``params.attention_backend`` (:func:`perfmodel.compute.attention.attention_efficiency`;
        a causal ring context-parallel layer blends its causal first step with its unmasked
        steps, :func:`perfmodel.compute.attention.ring_attention_efficiency`;
        the ``generic`` backend uses ``fused_attention_efficiency`` and
        ``fused_attention_bwd_efficiency``). Backend tables are scaled by
        ``params.power_clock_ratio`` (a power-limited board)."""
        p = self.params
        shape = attention_shape(layer)
        key = (shape, p.attention_backend)
        hit = self._attention_cache.get(key)
        if hit is not None:
            return hit
        generic = (p.fused_attention_efficiency, p.fused_attention_bwd_efficiency)
        e = attention_efficiency(
            p.attention_backend,
            p.architecture,
            shape.head_dim,
            shape.seq,
            shape.causal,
            generic=generic,
            compute_capability=p.compute_capability,
            sliding=shape.sliding,
        )
        if shape.causal and shape.ring_steps > 1:  # the ring's unmasked steps
            rest = attention_efficiency(
                p.attention_backend,
                p.architecture,
                shape.head_dim,
                shape.seq,
                False,
                generic=generic,
                compute_capability=p.compute_capability,
            )
            e = ring_attention_efficiency(e, rest, shape.ring_steps)
        # the power limit scales measured tables only, not the generic pair (its own ceiling)
        if p.power_clock_ratio != 1.0 and e.from_table:
            r = p.power_clock_ratio
            e = replace(e, fwd=e.fwd * r, bwd=e.bwd * r, source=f"{e.source} x power limit {r:.3f}")
        return keep(self._attention_cache, key, e, ATTENTION_MEMO_SIZE)

    def _mem_time(self, nbytes: float) -> float:
        return nbytes / self._mem_Bps

    def _scalar_time(self, flop: float) -> float:
        rate = self._scalar_flops_per_s
        if rate is None:  # the first call (peak raises where the GPU lacks the dtype)
            p = self._params
            rate = self._scalar_flops_per_s = (
                self._peak(p.elementwise_flop_dtype) * p.cuda_core_efficiency
            )
        return flop / rate

    def _winograd(self, layer: LayerCost, dtype: DType) -> float:
        """Rate multiplier of FP32 3x3 stride-1 convolutions (Winograd), else 1."""
        # layer_time skips the call for a layer that is not a convolution (this first test)
        if layer.kind is not LAYER_CONV or layer.gemm is None or self._uses_tc(dtype):
            return 1.0
        g = layer.gemm
        if g.batch != 1 or g.k % 9:
            return 1.0
        # cuDNN's Winograd kernels take 3x3 filters at stride 1 without dilation; when the layer
        # states its window that decides, else (imported/hand-built layers) any k = 9 C_in.
        if layer.conv_window is not None and layer.conv_window != (3, 3, 1, 1, 1, 1):
            return 1.0
        c_in = g.k // 9
        # and >= 16 input and output channels (cuDNN's Winograd applicability)
        if c_in < 16 or g.n < 16:
            return 1.0
        return self.params.winograd_speedup

    def _pass_time(
        self,
        flop: float,
        nbytes: float,
        gemm: GemmShape | None,
        dtype: DType,
        kernels: int,
        *,
        conv: bool = False,
        rate_multiplier: float = 1.0,
        grouped: bool = False,
    ) -> tuple[float, Bound, GemmEfficiency | None]:
        p = self._params
        launch = kernels * p.kernel_launch_s
        if flop <= 0 and nbytes <= 0:
            return 0.0, BOUND_MEMORY, None
        if gemm is None:
            t_c = self._scalar_time(flop)
            eff = None
        elif grouped:  # expert GEMMs: per-stream launches beyond the layer's own
            eff, launches = self.grouped_gemm(gemm, dtype)
            launch += (launches - 1) * p.kernel_launch_s
            t_c = flop / (self._peak(dtype) * eff.efficiency * rate_multiplier)
        else:
            eff = self.gemm(gemm, dtype)
            factor = eff.efficiency * (p.conv_efficiency if conv else 1.0) * rate_multiplier
            t_c = flop / (self._peak(dtype) * factor)
        t_m = nbytes / self._mem_Bps  # _mem_time
        bound = BOUND_COMPUTE if t_c >= t_m else BOUND_MEMORY
        return self._combine(t_c, t_m, None if conv else gemm, dtype) + launch, bound, eff

    def _combine(self, t_c: float, t_m: float, gemm: GemmShape | None, dtype: DType) -> float:
        """A pass's time from its compute and memory times: the smooth maximum of a
        tensor-core GEMM (:func:`~perfmodel.compute.gemm.gemm_roofline_time`, the domain of its
        fit: matrix multiplications), the sharp roofline otherwise (no GEMM, CUDA-core GEMMs,
        and implicit-GEMM convolutions, whose cuDNN kernels no table of the fit measured)."""
        if gemm is None or not self._uses_tc(dtype):
            return max(t_c, t_m)
        return gemm_roofline_time(t_c, t_m)

    # -- public API ----------------------------------------------------------------------
    def _alignment(self, layer: LayerCost, dtype: DType) -> float:
        """Alignment factor of a GEMM layer (1.0 for convolutions and non-GEMM layers).

        The leading dimensions of all three passes of ``(m x k) @ (k x n)`` are ``k`` and ``n``
        of the forward shape (the backward passes reuse the same tensors), so they decide.
        Convolutions are exempt: cuDNN pads odd channel counts.
        """
        g = layer.gemm
        if g is None or layer.kind not in (LAYER_LINEAR, LAYER_MATMUL):
            return 1.0
        return self.params.alignment_factor(dtype, g.n, g.k)

    @staticmethod
    def _bwd_kernel_split(
        layer: LayerCost, two_passes: bool, legacy_weight_kernels: int | None = None
    ) -> tuple[int, int]:
        """Kernel launches of the input-gradient and weight-gradient passes.

        Without ``layer.bwd_kernels`` (hand-built layers): ``kernels`` for the input gradient
        and ``legacy_weight_kernels`` (default ``kernels``) for the weight gradient.
        """
        if layer.bwd_kernels is None:
            k = max(layer.kernels, 1)
            return k, (k if legacy_weight_kernels is None else legacy_weight_kernels)
        total = max(int(layer.bwd_kernels), 0)
        if not two_passes:
            return total, 0
        k_in = (total + 1) // 2
        return k_in, total - k_in

    def layer_time(self, layer: LayerCost, precision: Precision | str) -> LayerTime:
        """Forward, input-gradient and weight-gradient time of ``layer`` under ``precision``.

        GEMM shapes of the backward passes: dgrad ``(m x n) @ (n x k)`` -> GEMM ``(m, k, n)``;
        wgrad ``(k x m) @ (m x n)`` -> GEMM ``(k, n, m)`` (the reduction runs over the batch);
        an activation x activation product computes both operand gradients.

        Pass times are GPU times; the host issue time of the layer's kernels is
        ``LayerTime.host_s`` (see the module docstring). Under mixed precision with
        ``cast_weights_each_step`` the forward casts the FP32 weights to 16 bit (one kernel,
        ``4 + 2`` bytes per parameter) and the backward casts the weight gradient back to FP32
        (autocast's cast is differentiable: one more kernel, ``2 + 4`` bytes per parameter);
        a linear layer fed by an FP32 norm casts its input (and its input gradient back).
        The casts are kernels of their own, run before or after the GEMM: their memory time
        adds to the pass (:meth:`_cast_time`, ``LayerTime.cast_s``), it is not hidden under a
        compute-bound GEMM's roofline.

        FP8 GEMM passes run at :func:`fp8_ceiling` of the pass's accumulation mode (the
        model's ``fp8_recipe``).
        """
        prec = (  # a member as is (Precision.parse returns it)
            precision
            if type(precision) is Precision
            else Precision.parse(precision, where="precision")
        )
        if layer.measured is not None:
            return self._measured_time(layer)
        dtype = layer_matmul_dtype(layer, prec)
        p = self._params
        g = layer.gemm
        conv = layer.kind is LAYER_CONV
        if conv and dtype is DTYPE_FP32 and p.fp32_conv_tf32 and DTYPE_TF32 in p.peak_flops:
            dtype = DTYPE_TF32  # cuDNN's TF32 convolutions (PyTorch's default; matmuls stay FP32)
        wino = self._winograd(layer, dtype) if conv else 1.0
        align = self._alignment(layer, dtype)
        cast_w, cast_in_bytes, cast_w_kernels = _autocast_casts(layer, prec, p)
        if p.cast_weights_each_step and prec.mixed and layer.autocast_fp32:
            scale = 4.0 / prec.activation_bytes
            layer = replace(
                layer, fwd_bytes=layer.fwd_bytes * scale, bwd_bytes=layer.bwd_bytes * scale
            )
        fp8_rates = self._fp8_rates(layer, dtype) if dtype is DTYPE_FP8 else _NO_FP8_RATES
        kernels_fwd = max(layer.kernels, 1)
        transpose_s = 0.0
        if conv and p.conv_layout == "nchw" and self._uses_tc(dtype):
            io_bytes = max(layer.fwd_bytes - layer.params * prec.param_bytes, 0.0)
            transpose_s = self._mem_time(2.0 * io_bytes) + 2 * p.kernel_launch_s
        host = p.host_dispatch_s
        if layer.kind is LAYER_ATTENTION and g is not None:
            return self._fused_attention_time(layer, dtype)
        # routed experts: the grouped GEMM's per-expert launches (perfmodel.compute.grouped)
        grouped = (
            layer.expert_role is ROLE_EXPERT
            and layer.kind is LAYER_LINEAR
            and g is not None
            and g.batch > 1
        )
        fwd, bound, eff = self._pass_time(
            layer.fwd_flop,
            layer.fwd_bytes,
            g,
            dtype,
            kernels_fwd,
            conv=conv,
            rate_multiplier=wino * align * fp8_rates[0],
            grouped=grouped,
        )
        # forward casts: the weights (and bias) to 16 bit, the FP32 input to 16 bit
        cast_fwd_kernels = cast_w_kernels + (1 if cast_in_bytes else 0)
        cast_s = cast_fwd_s = self._cast_time(cast_w + cast_in_bytes, cast_fwd_kernels)
        kernels_fwd += cast_fwd_kernels
        host_s = kernels_fwd * host
        gpu_s = fwd + transpose_s + cast_s
        fwd = gpu_s
        total_bwd_flop = layer.bwd_flop
        if total_bwd_flop > 0:
            share_in = layer.bwd_input_flop / total_bwd_flop
        else:
            share_in = 1.0 if layer.bwd_bytes else 0.0
        bytes_in = layer.bwd_bytes * share_in
        bytes_w = layer.bwd_bytes - bytes_in
        # FP32 gradients of the 16-bit weight (and bias) copies (ToCopyBackward); the input's
        # gradient is cast back to FP32 after the input-gradient pass
        if g is not None and layer.kind is LAYER_MATMUL:
            t_in, t_w, host_add = self._bwd_activation_product(layer, dtype, bytes_in, align)
        elif g is not None:
            bp = _BwdPass(dtype, conv, grouped, wino, align, fp8_rates, transpose_s)
            t_in, t_w, cast_s, host_add = self._bwd_gemm(
                layer, bp, bytes_in, bytes_w, cast_s, (cast_in_bytes, cast_w, cast_w_kernels)
            )
        else:
            t_in, t_w, cast_s, host_add = self._bwd_memory(
                layer, dtype, bytes_in, bytes_w, cast_s, cast_w
            )
        gpu_s += t_in + t_w
        host_s += host_add
        expert_f, expert_b = self._grouped_host_launches(layer, grouped) if grouped else (0.0, 0.0)
        bare_f, bare_b = self._fp8_cast_bare_launches(layer)
        expert_f -= bare_f * (1.0 - HOST_LAUNCH_SHARE) * host
        expert_b -= bare_b * (1.0 - HOST_LAUNCH_SHARE) * host
        host_s += expert_f + expert_b
        return layer_time_of(
            fwd_s=fwd,
            bwd_input_s=t_in,
            bwd_weight_s=t_w,
            bound=bound,
            efficiency=None
            if eff is None
            else eff.efficiency * (p.conv_efficiency if conv else 1.0) * align,
            waves=None if eff is None else eff.waves,
            tile=None if eff is None else eff.tile,
            host_bound=host > 0 and host_s > gpu_s,
            host_s=host_s,
            host_fwd_s=kernels_fwd * host + expert_f,
            cast_s=cast_s,
            cast_fwd_s=cast_fwd_s,
        )

    def _fp8_cast_bare_launches(self, layer: LayerCost) -> tuple[int, int]:
        """Launches, forward and backward, of an FP8 cast layer beyond the quantise calls the
        host issues for it (:attr:`~perfmodel.workload.kernels.Fp8Recipe.cast_calls`): current
        scaling's zero-amax, amax and scale kernels, a grouped linear's per-expert
        ``split_quantize`` loop, MXFP8's scale swizzles inside the GEMM call (:meth:`~perfmodel.
        workload.kernels.Fp8Recipe.cast_launches`) all come from one C++ call, so each costs
        the host a bare launch, ``HOST_LAUNCH_SHARE x host_dispatch_s``, not a modelled
        kernel's ``host_dispatch_s`` (:data:`~perfmodel.compute.params.HOST_LAUNCH_SHARE`).
        ``(0, 0)`` for any other layer or without a recipe."""
        if self._fp8 is None or layer.kernel_class is not KernelClass.FP8_CAST:
            return 0, 0
        calls_f, calls_b = self._fp8.cast_calls
        bwd = layer.kernels if layer.bwd_kernels is None else layer.bwd_kernels
        return max(layer.kernels - calls_f, 0), max(bwd - calls_b, 0)

    def _grouped_host_launches(self, layer: LayerCost, grouped: bool) -> tuple[float, float]:
        """Host seconds, forward and backward, of a grouped GEMM's per-expert launches beyond
        the layer's modelled kernels (0 unless ``grouped`` and the host is modelled).

        Transformer Engine's ``GroupedLinear`` runs ``multi_stream_cublas_gemm``, which calls
        cuBLASLt once per local expert from a C++ loop (``transformer_engine/common/gemm/
        cublaslt_gemm.cu``, TE v2.14; the CUTLASS grouped kernel is opt-in, Hopper and 16-bit
        only): ``groups = gemm.batch`` GEMMs forward and ``groups`` per backward pass (input and
        weight gradients). The layer's own modelled kernel pays the module call
        (``host_dispatch_s``); each further GEMM is one bare launch,
        ``HOST_LAUNCH_SHARE x host_dispatch_s``
        (:data:`~perfmodel.compute.params.HOST_LAUNCH_SHARE`):

        ``forward = (groups - 1) x share x host``, ``backward = passes x (groups - 1) x share x host``

        The GPU side of those launches is :mod:`perfmodel.compute.grouped`'s.
        """
        host = self._params.host_dispatch_s
        g = layer.gemm
        if not grouped or host <= 0 or g is None or g.batch <= 1:
            return 0.0, 0.0
        per = (g.batch - 1) * HOST_LAUNCH_SHARE * host
        passes = (layer.bwd_input_flop > 0) + (layer.bwd_weight_flop > 0)
        return per, passes * per

    def _fused_attention_time(self, layer: LayerCost, dtype: DType) -> LayerTime:
        """A fused attention layer (FlashAttention or another backend,
        :meth:`attention`): each pass at its backend's efficiency or its memory time, plus
        its launches."""
        p = self.params
        host = p.host_dispatch_s
        peak = p.peak(dtype)
        att = self.attention(layer)
        t_fc = layer.fwd_flop / (peak * att.fwd)
        t_bc = layer.bwd_flop / (peak * att.bwd)
        k_f = max(layer.kernels, 1)
        k_b = 2 * k_f if layer.bwd_kernels is None else max(layer.bwd_kernels, 1)
        t_fm = self._mem_time(layer.fwd_bytes)
        fwd_gpu = max(t_fc, t_fm) + k_f * p.kernel_launch_s
        bwd_gpu = max(t_bc, self._mem_time(layer.bwd_bytes)) + k_b * p.kernel_launch_s
        fwd, bwd = fwd_gpu, bwd_gpu
        bound = BOUND_COMPUTE if t_fc >= t_fm else BOUND_MEMORY
        return LayerTime(
            fwd,
            bwd,
            0.0,
            bound,
            att.fwd,
            None,
            f"fused ({att.backend.value})",
            host_bound=(k_f + k_b) * host > fwd_gpu + bwd_gpu,
            host_s=(k_f + k_b) * host,
            host_fwd_s=k_f * host,
        )

    def _bwd_activation_product(
        self, layer: LayerCost, dtype: DType, bytes_in: float, align: float
    ) -> tuple[float, float, float]:
        """Backward of an activation x activation product (``MATMUL``): one pass computing
        both operand gradients; ``(t_in, 0, host s)``."""
        g = layer.gemm
        assert g is not None
        host = self._params.host_dispatch_s
        k_in, _ = self._bwd_kernel_split(layer, False)
        if layer.bwd_kernels is None:
            k_in = 2 * max(layer.kernels, 1)
        g_in = GemmShape(g.m, g.k, g.n, g.batch)
        t_in, _, _ = self._pass_time(
            layer.bwd_input_flop, bytes_in, g_in, dtype, k_in, rate_multiplier=align
        )
        return t_in, 0.0, k_in * host

    def _bwd_gemm(
        self,
        layer: LayerCost,
        bp: _BwdPass,
        bytes_in: float,
        bytes_w: float,
        cast_s: float,
        casts: tuple[float, float, int],
    ) -> tuple[float, float, float, float]:
        """Backward of a GEMM layer with weights: the input-gradient pass (GEMM ``(m, k, n)``)
        and the weight-gradient pass (``(k, n, m)``), each with its layout transposes and its
        autocast cast back to FP32; ``(t_in, t_w, cast s so far, host s)``."""
        g = layer.gemm
        assert g is not None
        host = self._params.host_dispatch_s
        cast_in_bytes, cast_w, cast_w_kernels = casts
        t_in = t_w = 0.0
        has_in = layer.bwd_input_flop > 0
        has_w = layer.bwd_weight_flop > 0
        k_in, k_w = self._bwd_kernel_split(layer, has_in and has_w)
        if not has_in:
            k_in, k_w = 0, k_in + k_w
        g_in = GemmShape(g.m, g.k, g.n, g.batch)
        g_w = GemmShape(g.k, g.n, g.m, g.batch)
        if has_in:  # the input gradient's cast back to FP32: one kernel
            t_in, c, k_in = self._bwd_gemm_pass(
                bp, layer.bwd_input_flop, bytes_in, g_in, k_in, bp.fp8_rates[1], cast_in_bytes, 1
            )
            cast_s += c
        if has_w:  # the weight gradient's cast to FP32
            t_w, c, k_w = self._bwd_gemm_pass(
                bp,
                layer.bwd_weight_flop,
                bytes_w,
                g_w,
                k_w,
                bp.fp8_rates[2],
                cast_w,
                cast_w_kernels,
            )
            cast_s += c
        host_add = (k_in if has_in else 0) * host + (k_w if has_w else 0) * host
        return t_in, t_w, cast_s, host_add

    def _bwd_gemm_pass(
        self,
        bp: _BwdPass,
        flop: float,
        nbytes: float,
        gemm: GemmShape,
        kernels: int,
        fp8_rate: float,
        cast_bytes: float,
        cast_kernels: int,
    ) -> tuple[float, float, int]:
        """One backward GEMM pass of :meth:`_bwd_gemm`: the GEMM at ``bp``'s rate multipliers
        (Winograd x alignment x ``fp8_rate``), its layout transposes, and ``cast_kernels``
        casts of ``cast_bytes`` to FP32 where there are any; ``(s, cast s, kernels)``."""
        t, _, _ = self._pass_time(
            flop,
            nbytes,
            gemm,
            bp.dtype,
            max(kernels, 1),
            conv=bp.conv,
            rate_multiplier=bp.wino * bp.align * fp8_rate,
            grouped=bp.grouped,
        )
        t += bp.transpose_s
        if not cast_bytes:
            return t, 0.0, kernels
        c = self._cast_time(cast_bytes, cast_kernels)
        return t + c, c, kernels + cast_kernels

    def _bwd_memory(
        self,
        layer: LayerCost,
        dtype: DType,
        bytes_in: float,
        bytes_w: float,
        cast_s: float,
        cast_w: float,
    ) -> tuple[float, float, float, float]:
        """Backward of a layer without a GEMM (memory-bound): the input-gradient and
        weight-gradient kernels, and the weight gradient's cast back to FP32;
        ``(t_in, t_w, cast s so far, host s)``."""
        host = self._params.host_dispatch_s
        t_in = t_w = 0.0
        cast_back = cast_w
        has_in = bool(layer.bwd_input_flop or bytes_in)
        has_w = layer.bwd_weight_flop > 0 or bytes_w > 0 or bool(cast_back)
        k_in, k_w = self._bwd_kernel_split(layer, has_in and has_w, 1)
        if layer.bwd_kernels is not None and not has_in:
            k_in, k_w = 0, k_in + k_w
        if has_in:
            t_in, _, _ = self._pass_time(layer.bwd_input_flop, bytes_in, None, dtype, max(k_in, 1))
        if has_w:
            t_w, _, _ = self._pass_time(layer.bwd_weight_flop, bytes_w, None, dtype, max(k_w, 1))
            if cast_back:
                c = self._cast_time(cast_back, 1)
                t_w += c
                cast_s += c
                k_w += 1
        host_add = (k_in if has_in else 0) * host + (k_w if has_w else 0) * host
        return t_in, t_w, cast_s, host_add

    def _cast_time(self, nbytes: float, kernels: int) -> float:
        """GPU time of ``kernels`` dtype-conversion kernels moving ``nbytes`` in all (memory
        time at the achieved bandwidth plus a launch each); 0 without bytes."""
        if nbytes <= 0:
            return 0.0
        return nbytes / self._mem_Bps + kernels * self._params.kernel_launch_s

    def _fp8_rates(self, layer: LayerCost, dtype: DType) -> tuple[float, float, float]:
        """Rate multipliers of the forward, input-gradient and weight-gradient GEMMs of an FP8
        layer: :func:`fp8_ceiling` of each pass's accumulation mode (the model's FP8 recipe,
        :attr:`~perfmodel.workload.kernels.Fp8Recipe.split_accumulation`) over the ceiling
        :meth:`gemm` applied (the fast-accumulation ceiling); ``(1, 1, 1)`` for other dtypes.
        Without a recipe, ``ComputeParams.fp8_backward_split_accumulation`` says whether the
        backward passes split."""
        if dtype is not DTYPE_FP8 or layer.gemm is None:  # layer_time skips the call off FP8
            return _NO_FP8_RATES
        p = self.params
        if self._fp8 is not None:
            split = self._fp8.split_accumulation
        else:  # no recipe: Transformer Engine's default (fast forward, split backward)
            bwd = p.fp8_backward_split_accumulation
            split = (False, bwd, bwd)
        base = fp8_ceiling(p, split_accumulation=False)
        if base <= 0:
            return (1.0, 1.0, 1.0)
        rates = tuple(fp8_ceiling(p, split_accumulation=sp) / base for sp in split)
        return rates  # type: ignore[return-value]

    def _measured_time(self, layer: LayerCost) -> LayerTime:
        """A layer imported from a trace: its measured device times (backward as input
        gradient), and the host issue of its kernels as for any layer.

        Raises
        ------
        ConfigError
            On another GPU than the one measured: a trace gives times, not the FLOP and bytes a
            prediction for other hardware needs.
        """
        m = layer.measured
        assert m is not None
        if m.gpu.lower() != self.gpu.name.lower():
            raise ConfigError(
                f"layer {layer.name!r} was measured on {m.gpu}, not {self.gpu.name}: an imported "
                "trace scales out on the GPU it was recorded on only",
                value=self.gpu.name,
                where="--system",
            )
        k_f = max(layer.kernels, 1)
        k_b = 2 * k_f if layer.bwd_kernels is None else layer.bwd_kernels
        host = self._params.host_dispatch_s
        return LayerTime(
            m.fwd_s,
            m.bwd_s,
            0.0,
            BOUND_COMPUTE,
            host_bound=(k_f + k_b) * host > m.fwd_s + m.bwd_s,
            host_s=(k_f + k_b) * host,
            host_fwd_s=k_f * host,
        )

    def layer_times(self, workload: Workload) -> list[LayerTime]:
        """:meth:`layer_time` of every layer, in order."""
        return [self.layer_time(la, workload.precision) for la in workload.layers]

    def _step_sums(
        self, workload: Workload, recompute: Recompute | str = "none"
    ) -> tuple[float, float, float]:
        """(forward GPU s, backward GPU s, host issue s) of one micro-batch in one pass."""
        mode = Recompute.parse(recompute)
        fwd = bwd = host = 0.0
        for la in workload.layers:
            t = self.layer_time(la, workload.precision)
            fwd += t.fwd_s
            bwd += t.bwd_s
            host += t.host_s
            if (mode is Recompute.FULL and la.block is not None) or (
                mode is Recompute.SELECTIVE and is_selectively_recomputed(la)
            ):
                bwd += t.fwd_s
                host += t.host_fwd_s
        return fwd, bwd, host

    def workload_time(
        self, workload: Workload, recompute: Recompute | str = "none"
    ) -> tuple[float, float]:
        """Forward and backward time of one micro-batch, seconds.

        With ``recompute="full"`` the backward includes a second forward of every block; with
        ``"selective"`` it re-runs the attention core (the layers selective recomputation drops).
        """
        fwd, bwd, _ = self._step_sums(workload, recompute)
        return fwd, bwd

    def host_time(self, workload: Workload, recompute: Recompute | str = "none") -> float:
        """Host time to issue one micro-batch's forward and backward kernels, seconds.

        ``sum(LayerTime.host_s)`` (kernels x ``host_dispatch_s``), plus the forward kernels
        re-issued by recomputation (``LayerTime.host_fwd_s``); 0 for graph-mode stacks.
        """
        return self._step_sums(workload, recompute)[2]

    def step_time(
        self,
        workload: Workload,
        optimizer: Optimizer | str = "sgd",
        recompute: Recompute | str = "none",
    ) -> float:
        """One single-GPU training step: ``max(GPU forward + backward, host issue) + optimizer``.

        The host issues kernels asynchronously (CUDA streams queue them), so the step is set by
        the slower of the two; the optimizer's few fused kernels run after the last backward
        kernel is issued.
        """
        fwd, bwd, host = self._step_sums(workload, recompute)
        return max(fwd + bwd, host) + self.optimizer_time(
            workload.params, optimizer, workload.precision
        )

    def optimizer_time(
        self,
        params: int | float,
        optimizer: Optimizer | str,
        precision: Precision | str,
        *,
        grad_bytes: int | None = None,
        working_copy_bytes: int | None = None,
        impl: OptimizerImpl = OptimizerImpl.FUSED,
        clip: GradClip = GradClip.NONE,
        state_bytes: int = 4,
        weight_bytes: int = 4,
    ) -> float:
        """Time of one optimizer step over ``params`` parameters (memory-bound).

        Bytes per parameter (:func:`perfmodel.workload.kernels.optimizer_bytes_per_param`):
        ``fused`` (the default: one multi-tensor kernel, ``torch.optim`` ``fused=True``, apex /
        TE / DeepSpeed fused Adam) reads the gradient (``grad_bytes``), reads and writes the
        FP32 weights (master weights under mixed precision) and each FP32 state tensor
        (momentum: 1, Adam: 2), and writes the 16-bit working copy (``working_copy_bytes``, the
        cast of half-model stacks; 0 where the kept weights are the FP32 ones: autocast, FSDP2
        policies); ``foreach`` (``torch.optim``'s default on CUDA) makes one pass per
        arithmetic step (AdamW: ``72 + 3 g`` bytes). LAMB is always fused (``torch.optim`` has
        none: apex ``FusedLAMB``, DeepSpeed's). ``clip`` adds the gradient-norm clipping
        before the step (:class:`~perfmodel.workload.kernels.GradClip`). Defaults (``None``)
        follow the precision: 16-bit gradient and working copy under mixed precision; a
        training recipe (:class:`perfmodel.parallel.recipe.Recipe`) passes its own, with the
        bytes per element of its state tensors (``state_bytes``: 2 for bf16 moments) and of
        the weight the step updates (``weight_bytes``; :attr:`Recipe.compute`).

        >>> from perfmodel.hardware import get_gpu
        >>> cm = ComputeModel(get_gpu("V100-SXM2-16GB"))
        >>> # Adam fp32: 4 (grad) + 8 (w) + 16 (m, v) = 28 bytes/param; 1e9 params at 0.8*900 GB/s
        >>> round(cm.optimizer_time(1e9, "adam", "fp32"), 4)
        0.0389
        >>> # foreach AdamW: 72 + 3 x 4 = 84 bytes/param
        >>> round(cm.optimizer_time(1e9, "adamw", "fp32", impl=OptimizerImpl.FOREACH), 4)
        0.1167
        """
        prec = Precision.parse(precision, where="precision")
        opt = Optimizer.parse(optimizer)
        g = prec.grad_bytes if grad_bytes is None else grad_bytes
        if working_copy_bytes is None:
            working_copy_bytes = prec.param_bytes if prec.mixed else 0
        if opt is OPTIMIZER_LAMB:  # torch.optim has no LAMB: apex / DeepSpeed FusedLAMB
            impl = OptimizerImpl.FUSED
        per_param = optimizer_bytes_per_param(
            opt.state_bytes_per_param // 4,
            impl=impl,
            grad_bytes=g,
            working_copy_bytes=working_copy_bytes,
            state_bytes=state_bytes,
            weight_bytes=weight_bytes,
        )
        per_param += clip.bytes_per_param(g)
        if opt is OPTIMIZER_LAMB:  # per-layer norms of weights and updates: one more read pass
            per_param += 8
        return self._mem_time(float(params) * per_param) + 2 * self.params.kernel_launch_s


__all__ = [
    "Bound",
    "ComputeModel",
    "GemmEfficiency",
    "LayerTime",
    "class_key",
    "fp8_ceiling",
    "gemm_efficiency",
    "kernel_class_seconds",
    "layer_matmul_dtype",
]
