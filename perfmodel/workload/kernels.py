"""The kernels a training stack launches: fusion modes, FP8 recipes and optimizer implementations.

A transformer block is the same arithmetic whatever runs it, but not the same kernels: PyTorch
eager launches one ATen kernel per operator (an RMSNorm written out in Python is eight kernels,
each reading and writing the whole activation), ``torch.compile`` (inductor) fuses each chain of
pointwise operators and reductions into one Triton kernel, and Megatron-Core with Transformer
Engine runs its own fused modules. The memory-bound kernels between the GEMMs differ by a factor
of several in bytes moved; that is the difference between a step's eager and compiled speed.

This module holds the facts, per stack, as values (no time: the compute model prices them):

* :class:`Fusion`: which decomposition a block is built with (the zoo's transformer builders and
  :class:`perfmodel.workload._net.Net` read it);
* :data:`OPS`: every memory-bound operator of a transformer block as the kernels it launches, each
  kernel's reads and writes per element (:class:`KernelIO`), per fusion mode, with its source;
* :class:`Fp8Recipe`: the FP8 training recipes with their cast / amax / transpose traffic per
  element (:class:`Fp8CastBytes`), which GEMM passes accumulate in split (promoted) mode, and
  whether weights are gathered in FP8;
* :class:`OptimizerImpl` and :class:`GradClip`: the bytes per parameter of an optimizer step as
  each implementation runs it (:func:`optimizer_bytes_per_param`);
* :class:`KernelRecipe`: the part of a training recipe a workload is built with (one hashable
  value, part of the workload cache key).

Bytes are device-memory traffic per element of the operator's tensor: ``read_a``/``write_a``
elements in the activation dtype (``Precision.activation_bytes``: 2 for bf16/fp16/fp8 recipes,
4 for fp32/tf32) and ``read_f``/``write_f`` elements in FP32. A kernel marked ``cast`` converts
between the two and is not launched when the activation dtype is FP32 already.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from perfmodel._enum import ParsedEnum, dashed, squash
from perfmodel.workload.layers import ExpertRole, KernelClass, LayerCost, LayerKind

#: Bytes of an FP32 element.
FP32_BYTES = 4

#: Other names of the fusion modes (looked up after lower-casing and dropping ``_`` and ``-``).
_FUSION_ALIASES = {
    "torchcompile": "compile",
    "inductor": "compile",
    "transformerengine": "te",
    "megatron": "te",
}
#: Other names of the FP8 recipes (looked up after lower-casing and reading ``_`` as ``-``).
_FP8_RECIPE_ALIASES = {
    "delayed": "te-delayed",
    "current": "te-current",
    "fp8-cs": "te-current",
    "tensorwise": "torchao-tensorwise",
    "rowwise": "torchao-rowwise",
    "mx": "mxfp8",
    "blockwise": "mxfp8",
}


class Fusion(
    str, ParsedEnum, where="fusion", noun="fusion mode", normalize=squash, aliases=_FUSION_ALIASES
):
    """How a stack turns a transformer block into kernels.

    ``eager``: PyTorch eager, one ATen kernel per operator, as torchtitan's Llama (torchtitan
    ``9dec370``, Dec 2024, ``torchtitan/models/llama/model.py`` and ``models/norms.py``
    ``RMSNorm``), Meta's reference Llama and HuggingFace models run it. ``compile``:
    ``torch.compile`` of each transformer block (torchtitan ``apply_compile``,
    ``parallelize_llama.py`` at ``9dec370``; inductor at torch 2.6), which fuses pointwise chains
    and row reductions into one kernel each; the loss stays eager (torchtitan ``train.py``:
    "compiling loss function causes CUDA errors, turning off for now"). ``te``: Megatron-Core
    with Transformer Engine modules (``TELayerNormColumnParallelLinear``, fused RoPE, the
    jit-fused bias-SwiGLU and bias-dropout-add, the fused vocabulary-parallel cross-entropy of
    ``megatron/core/fusions/fused_cross_entropy.py``, native GQA in TE's attention).
    """

    EAGER = "eager"
    COMPILE = "compile"
    TE = "te"


@dataclass(frozen=True)
class KernelIO:
    """One kernel's traffic per element of its operator's tensor (see the module docstring)."""

    name: str
    read_a: float = 0.0
    read_f: float = 0.0
    write_a: float = 0.0
    write_f: float = 0.0
    cast: bool = False

    def nbytes(self, act_bytes: float) -> float:
        """Bytes per element: ``(read_a + write_a) a + (read_f + write_f) 4``, or 0 for a cast
        when the activations are FP32 (``a = 4``: the conversion is a no-op, no kernel).

        >>> KernelIO("to_fp32", read_a=1, write_f=1, cast=True).nbytes(2)
        6.0
        >>> KernelIO("to_fp32", read_a=1, write_f=1, cast=True).nbytes(4)
        0.0
        """
        if not self.launched(act_bytes):
            return 0.0
        return float(
            (self.read_a + self.write_a) * act_bytes + (self.read_f + self.write_f) * FP32_BYTES
        )

    def launched(self, act_bytes: float) -> bool:
        """Whether the kernel runs at this activation width (a cast to FP32 of FP32 does not)."""
        return not (self.cast and act_bytes >= FP32_BYTES)


@dataclass(frozen=True)
class OpKernels:
    """The kernels of one operator in forward and backward, the class they are reported under
    and the source of the decomposition."""

    klass: KernelClass
    fwd: tuple[KernelIO, ...]
    bwd: tuple[KernelIO, ...]
    source: str

    def fwd_bytes(self, act_bytes: float) -> float:
        """Forward bytes per element (sum over the kernels)."""
        return sum(k.nbytes(act_bytes) for k in self.fwd)

    def bwd_bytes(self, act_bytes: float) -> float:
        """Backward bytes per element (sum over the kernels)."""
        return sum(k.nbytes(act_bytes) for k in self.bwd)

    def fwd_kernels(self, act_bytes: float) -> int:
        return sum(k.launched(act_bytes) for k in self.fwd)

    def bwd_kernels(self, act_bytes: float) -> int:
        return sum(k.launched(act_bytes) for k in self.bwd)


def _k(name: str, ra: float = 0, rf: float = 0, wa: float = 0, wf: float = 0, *, cast: bool = False) -> KernelIO:  # fmt: skip
    return KernelIO(name, ra, rf, wa, wf, cast)


_TT = "torchtitan 9dec370 (Dec 2024) torchtitan/models"
_AUTOGRAD = "PyTorch 2.6 tools/autograd/derivatives.yaml + FunctionsManual.cpp"

#: Memory-bound operators of a transformer block, per fusion mode: ``OPS[op][fusion]``.
#: Elements are those of the operator's input tensor (``rms_norm``: the normalised activations;
#: ``rope``: the query or key heads it rotates; ``repeat_kv``: the key or value heads before
#: the copy, ``n_rep`` copies written, see :func:`repeat_kv_kernels`; ``attn_out_copy``: the
#: attention output; ``swiglu``: one of the two ``ffn``-wide inputs; ``loss``: the logits).
OPS: dict[str, dict[Fusion, OpKernels]] = {
    "rms_norm": {
        Fusion.EAGER: OpKernels(
            KernelClass.NORM,
            fwd=(
                _k("x.float()", ra=1, wf=1, cast=True),
                _k("pow(2)", rf=1, wf=1),
                _k("mean(-1)", rf=1),
                _k("add(eps)"),
                _k("rsqrt"),
                _k("x * rsqrt", rf=1, wf=1),
                _k("type_as(x)", rf=1, wa=1, cast=True),
                _k("* weight", ra=1, wa=1),
            ),
            bwd=(
                _k("grad * weight", ra=1, wa=1),
                _k("grad * normed", ra=2, wa=1),
                _k("sum -> dweight", ra=1),
                _k("type_as backward", ra=1, wf=1, cast=True),
                _k("grad * rsqrt", rf=1, wf=1),
                _k("grad * x", rf=2, wf=1),
                _k("sum(-1) -> drsqrt", rf=1),
                _k("rsqrt backward"),
                _k("mean backward (expand / n)", wf=1),
                _k("x.pow(1)", rf=1, wf=1),
                _k("* 2", rf=1, wf=1),
                _k("grad * 2x", rf=2, wf=1),
                _k("accumulate dx", rf=2, wf=1),
                _k("float() backward", rf=1, wa=1, cast=True),
            ),
            source=f"{_TT}/norms.py RMSNorm: _norm(x.float()).type_as(x) * weight, "
            f"_norm = x * rsqrt(x.pow(2).mean(-1) + eps); backward: {_AUTOGRAD} (mul, pow, mean, "
            "rsqrt, _to_copy)",
        ),
        Fusion.COMPILE: OpKernels(
            KernelClass.NORM,
            fwd=(_k("fused rms_norm", ra=1, wa=1),),
            bwd=(_k("fused rms_norm dx", ra=2, wa=1), _k("fused dweight reduction", ra=2)),
            source="inductor (torch 2.6) generates one persistent reduction per row for the "
            "norm and, in backward, one kernel for dx and one reduction for dweight",
        ),
        Fusion.TE: OpKernels(
            KernelClass.NORM,
            fwd=(_k("te rmsnorm_fwd", ra=1, wa=1),),
            bwd=(_k("te rmsnorm_bwd (dx, dgamma partials)", ra=2, wa=1), _k("dgamma finalize")),
            source="Transformer Engine 1.x common/normalization rmsnorm_fwd/bwd kernels "
            "(TELayerNormColumnParallelLinear, RMSNorm)",
        ),
    },
    "rope": {
        Fusion.EAGER: OpKernels(
            KernelClass.ROPE,
            fwd=(
                _k("x.float()", ra=1, wf=1, cast=True),
                _k("complex * freqs_cis", rf=1, wf=1),
                _k("type_as(x)", rf=1, wa=1, cast=True),
            ),
            bwd=(
                _k("type_as backward", ra=1, wf=1, cast=True),
                _k("grad * conj(freqs_cis)", rf=1, wf=1),
                _k("float() backward", rf=1, wa=1, cast=True),
            ),
            source=f"{_TT}/llama/model.py apply_rotary_emb: view_as_complex(x.float()) * "
            "freqs_cis, view_as_real(...).type_as(x), for xq and xk",
        ),
        Fusion.COMPILE: OpKernels(
            KernelClass.ROPE,
            fwd=(_k("fused rope", ra=1, wa=1),),
            bwd=(_k("fused rope backward", ra=1, wa=1),),
            source="inductor fuses the cast, complex multiply and cast back into one kernel",
        ),
        Fusion.TE: OpKernels(
            KernelClass.ROPE,
            fwd=(_k("te fused_rope_forward", ra=1, wa=1),),
            bwd=(_k("te fused_rope_backward", ra=1, wa=1),),
            source="Transformer Engine fused_apply_rotary_pos_emb (Megatron-Core "
            "apply_rope_fusion=True, as the NeMo 2.0 / Megatron-Bridge Llama providers set)",
        ),
    },
    "attn_out_copy": {
        f: OpKernels(
            KernelClass.COPY,
            fwd=(_k("transpose(1, 2).contiguous()", ra=1, wa=1),),
            bwd=(),
            source=f"{_TT}/llama/model.py Attention.forward: SDPA output "
            "transpose(1, 2).contiguous() before wo (inductor keeps the copy: the GEMM input "
            "is realised); calibration/h100-sxm5-80gb GPT-2 trace: one direct_copy per layer",
        )
        for f in (Fusion.EAGER, Fusion.COMPILE)
    },
    "swiglu": {
        Fusion.EAGER: OpKernels(
            KernelClass.ACTIVATION,
            fwd=(_k("silu(w1 x)", ra=1, wa=1), _k("* (w3 x)", ra=2, wa=1)),
            bwd=(
                _k("grad * silu", ra=2, wa=1),
                _k("grad * up", ra=2, wa=1),
                _k("silu_backward", ra=2, wa=1),
            ),
            source=f"{_TT}/llama/model.py FeedForward: w2(F.silu(w1(x)) * w3(x)); backward "
            f"{_AUTOGRAD} (mul, silu_backward)",
        ),
        Fusion.COMPILE: OpKernels(
            KernelClass.ACTIVATION,
            fwd=(_k("fused silu * up", ra=2, wa=1),),
            bwd=(_k("fused swiglu backward", ra=3, wa=2),),
            source="inductor fuses silu and the product (the silu output is recomputed in the "
            "backward kernel)",
        ),
        Fusion.TE: OpKernels(
            KernelClass.ACTIVATION,
            fwd=(_k("bias_swiglu_impl", ra=2, wa=1),),
            bwd=(_k("bias_swiglu_back", ra=3, wa=2),),
            source="Megatron-Core megatron/core/fusions/fused_bias_swiglu.py (jit_fuser; "
            "bias_activation_fusion=True)",
        ),
    },
    "loss": {
        **{
            f: OpKernels(
                KernelClass.LOSS,
                fwd=(
                    _k("logits.float()", ra=1, wf=1, cast=True),
                    _k("log_softmax", rf=1, wf=1),
                    _k("nll_loss"),
                ),
                bwd=(
                    _k("nll_loss_backward zero-fill", wf=1),
                    _k("nll_loss_backward scatter"),
                    _k("log_softmax_backward", rf=2, wf=1),
                    _k("float() backward", rf=1, wa=1, cast=True),
                ),
                source="torchtitan 9dec370 train.py loss_fn: cross_entropy(pred.float(), "
                "labels) (eager also under --training.compile); PyTorch cross_entropy = "
                "log_softmax + nll_loss; calibration/h100-sxm5-80gb GPT-2 trace (autocast casts "
                "the logits the same way): FillFunctor<float> + softmax kernels + copies",
            )
            for f in (Fusion.EAGER, Fusion.COMPILE)
        },
        Fusion.TE: OpKernels(
            KernelClass.LOSS,
            fwd=(
                _k("float + max", ra=1, wf=1, cast=True),
                _k("sub max, exp, sum", rf=1, wf=1),
                _k("div by sum, log", rf=1, wf=1),
            ),
            bwd=(
                _k("softmax - onehot, * grad", rf=1, wf=1),
                _k("float() backward", rf=1, wa=1, cast=True),
            ),
            source="Megatron-Core megatron/core/fusions/fused_cross_entropy.py (jit-fused "
            "calculate_logits_max / calculate_predicted_logits / cross entropy, in FP32; "
            "cross_entropy_loss_fusion as the Megatron-Bridge recipes set it)",
        ),
    },
    # Megatron-Core's MoE bookkeeping around the router and the all-to-all dispatcher: per
    # element of the router's scores (local tokens x experts); the reductions and scalar ops
    # over the experts or the ranks move next to nothing, their launches are what costs.
    "moe_aux_loss": {
        Fusion.TE: OpKernels(
            KernelClass.SOFTMAX,
            fwd=(
                _k("fused_compute_score_for_moe_aux_loss", ra=1, wf=1.25),
                _k("routing_map.sum(dim=0) (tokens per expert)", rf=0.25),
                _k("fused_moe_aux_loss", rf=1),
                _k("aux_loss / coeff (tracker)"),
                _k("tracker values[layer] += loss"),
            ),
            bwd=(
                _k("MoEAuxLossAutoScaler: ones_like(aux_loss)"),
                _k("MoEAuxLossAutoScaler: * main_loss_backward_scale"),
                _k("fused_moe_aux_loss backward", wf=1),
                _k("fused_compute_score_for_moe_aux_loss backward", rf=2, wf=1),
                _k("logits grad: top-k path + aux-loss path", rf=2, wf=1),
            ),
            source="Megatron-LM 4415119 megatron/core/transformer/moe/router.py "
            "TopKRouter.routing / _apply_aux_loss / attach_and_log_load_balancing_loss and "
            "moe_utils.py get_tokens_per_expert_and_token_count, switch_load_balancing_loss_func, "
            "save_to_aux_losses_tracker, MoEAuxLossAutoScaler (moe_router_fusion=True: Transformer "
            "Engine's fused score and aux-loss kernels, as the Megatron-Bridge 26.04 perf "
            "recipes set it)",
        ),
    },
    "moe_alltoall_preprocess": {
        Fusion.TE: OpKernels(
            KernelClass.ELEMENTWISE,
            fwd=(
                _k("routing_map.sum(dim=0) (local tokens per expert)", rf=0.25),
                _k(".long()"),
                _k("input_splits: reshape(ep, local experts).sum(1)"),
                _k("global tokens per local expert: slice .contiguous()"),
                _k("tokens per rank: sum(axis=2)"),
                _k("output_splits_tp: sum(axis=1)"),
                _k("tokens per local expert: sum(dim=(0, 1))"),
                _k("D2H tokens_per_expert"),
                _k("D2H input_splits"),
                _k("D2H output_splits"),
                _k("D2H output_splits_tp"),
                _k("D2H num_out_tokens"),
            ),
            bwd=(),
            source="Megatron-LM 4415119 megatron/core/transformer/moe/token_dispatcher.py "
            "MoEAlltoAllTokenDispatcher.preprocess (dropless, ep > 1, moe_permute_fusion=True) "
            "and _maybe_dtoh_and_synchronize (the copies to the host before the sync); the "
            "all-gather of the tokens per expert over the expert-parallel group is the layer's "
            "collective",
        ),
    },
}


_INTERNLM_JULY = (
    "InternLM/InternLM fa7337b (2023-07-06, the code of InternEvo's train_performance table)"
)

#: RMSNorm as InternLM's July 2023 layer runs it (``_dropout_and_norm_attn`` /
#: ``_dropout_and_norm_ffn``, ``internlm/model/modeling_internlm.py`` lines 186-210 at
#: ``fa7337b``): ``norm(residual.float())`` with apex's ``MixedFusedRMSNorm`` (line 8; apex 23.05,
#: ``doc/en/install.md``), whose output takes the dtype of its 16-bit weight
#: (``csrc/layer_norm_cuda.cpp`` ``rms_norm_affine_mixed_dtypes``: ``output`` in ``gamma``'s
#: dtype); the backward's ``dx`` has the FP32 input's dtype and the cast's backward takes it back
#: to 16 bit. The dropout (``drop_rate=0``: ATen returns the input), the residual add and the
#: norm run inside ``activation_checkpoint`` (``dropout_selective_checkpoint=True`` by default
#: with ``checkpoint=False``, lines 68-75): their forward is re-run in backward; the re-run
#: residual add (one of the two norms of a layer has one) is charged to the norm at half.
#: Per element of the norm's input.
APEX_MIXED_RMS_NORM = OpKernels(
    KernelClass.NORM,
    fwd=(
        _k("residual.float()", ra=1, wf=1, cast=True),
        _k("apex rms_norm_affine_mixed_dtypes fwd", rf=1, wa=1),
    ),
    bwd=(
        _k("recompute: residual add (one norm in two)", ra=1, wa=0.5),
        _k("recompute: residual.float()", ra=1, wf=1, cast=True),
        _k("recompute: apex rms_norm fwd", rf=1, wa=1),
        _k("apex cuComputeGradInput (dx in FP32)", ra=1, rf=1, wf=1),
        _k("apex cuComputePartGradGammaBeta", ra=1, rf=1),
        _k("apex cuComputeGradGammaBeta"),
        _k("float() backward", rf=1, wa=1, cast=True),
    ),
    source=f"{_INTERNLM_JULY} internlm/model/modeling_internlm.py: apex.normalization."
    "fused_layer_norm.MixedFusedRMSNorm on residual.float(), re-run in backward "
    "(dropout_selective_checkpoint); apex 23.05 csrc/layer_norm_cuda_kernel.cu",
)

#: Rotary embedding as InternLM's July 2023 attention runs it: flash-attention's CUDA extension
#: ``rotary_emb.apply_rotary`` in place on the query and key halves of the packed ``qkv``
#: (``internlm/model/embedding.py`` lines 62-110 at ``fa7337b``, ``ApplyRotaryEmbQKV_``; forward
#: and backward one kernel each, reading and writing each rotated element once; flash-attention
#: v1.0.5, ``doc/en/install.md``). Per element of the rotated queries and keys.
FLASH_ATTN_ROTARY = OpKernels(
    KernelClass.ROPE,
    fwd=(_k("rotary_emb.apply_rotary (in place)", ra=1, wa=1),),
    bwd=(_k("rotary_emb.apply_rotary conj (in place)", ra=1, wa=1),),
    source=f"{_INTERNLM_JULY} internlm/model/embedding.py ApplyRotaryEmbQKV_ "
    "(flash-attention v1.0.5 csrc/rotary)",
)


def op_kernels(op: str, fusion: Fusion) -> OpKernels | None:
    """``OPS[op][fusion]``, or ``None`` where the stack launches no kernel for ``op`` (TE has
    no attention-output copy: its ``sbhd`` layout is contiguous)."""
    return OPS[op].get(fusion)


def repeat_kv_kernels(n_rep: int) -> OpKernels:
    """``repeat_kv`` of torchtitan's Llama (``9dec370``): ``unsqueeze(3).expand(..., n_rep,
    ...).reshape(...)`` of the key or value heads materialises ``n_rep`` copies for SDPA (one
    kernel reading each element once and writing it ``n_rep`` times); its backward sums the
    copies (one reduction). Per element of the key or value tensor before the copy. PyTorch
    SDPA's ``enable_gqa`` (2.5) is not used by torchtitan at that commit; Transformer Engine's
    attention takes grouped heads natively (no copy)."""
    return OpKernels(
        KernelClass.COPY,
        fwd=(_k("repeat_kv expand+reshape", ra=1, wa=n_rep),),
        bwd=(_k("repeat_kv backward (sum of copies)", ra=n_rep, wa=1),),
        source=f"{_TT}/llama/model.py repeat_kv",
    )


class Fp8Recipe(
    str,
    ParsedEnum,
    where="--fp8-recipe",
    noun="FP8 recipe",
    normalize=dashed,
    aliases=_FP8_RECIPE_ALIASES,
):
    """FP8 training recipes (``--fp8-recipe``).

    ``te-delayed``: Transformer Engine ``DelayedScaling`` (per-tensor scale from an amax history;
    TE 1.x, NeMo 24.07's default). ``te-current``: TE 2.x ``Float8CurrentScaling`` (per-tensor
    scale from the tensor itself, an extra amax pass; Megatron-Bridge's ``fp8_cs``).
    ``torchao-tensorwise``: torchao ``Float8LinearConfig()`` dynamic tensor-wise scaling
    (torchtitan's float8, torchao ``eab345c``). ``torchao-rowwise``: torchao ``all_axiswise``
    recipe (row-wise scales, CUTLASS row-wise kernel). ``mxfp8``: MX block scaling, 1 x 32
    blocks with E8M0 scales (Blackwell; TE 2.x ``MXFP8BlockScaling``).
    """

    TE_DELAYED = "te-delayed"
    TE_CURRENT = "te-current"
    TORCHAO_TENSORWISE = "torchao-tensorwise"
    TORCHAO_ROWWISE = "torchao-rowwise"
    MXFP8 = "mxfp8"

    @property
    def cast_bytes(self) -> Fp8CastBytes:
        """Bytes of the recipe's quantisation kernels per element (:class:`Fp8CastBytes`)."""
        return _FP8_CASTS[self]

    @property
    def split_accumulation(self) -> tuple[bool, bool, bool]:
        """Whether the forward (fprop), input-gradient (dgrad) and weight-gradient (wgrad) FP8
        GEMMs accumulate in split (promoted, slower) mode.

        Transformer Engine: ``_2X_ACC_FPROP = False``, ``_2X_ACC_DGRAD = True``,
        ``_2X_ACC_WGRAD = True`` (``transformer_engine/pytorch/module/base.py``, TE 1.x-2.x).
        torchao: ``gemm_config_output = Float8GemmConfig(use_fast_accum=True)``, grad_input and
        grad_weight ``Float8GemmConfig()`` (``use_fast_accum=False``; ``torchao/float8/config.py``
        at ``eab345c``). MXFP8 block-scaled GEMMs on Blackwell apply the scales inside the
        tensor-core instruction: no split accumulation in any pass.

        >>> Fp8Recipe.TE_DELAYED.split_accumulation
        (False, True, True)
        """
        if self is Fp8Recipe.MXFP8:
            return (False, False, False)
        return (False, True, True)

    @property
    def caches_weights(self) -> bool:
        """The FP8 weight (and its transpose) is cast once per step and reused by every
        micro-batch (Transformer Engine ``is_first_microbatch``, which Megatron-Core's TE
        wrappers pass); torchao casts the weight at every forward."""
        return self in (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8)

    @property
    def fsdp_fp8_all_gather(self) -> bool:
        """FSDP2 all-gathers the weights of FP8 linears in FP8 (torchao
        ``enable_fsdp_float8_all_gather`` with ``precompute_float8_dynamic_scale_for_fsdp``, the
        torchtitan docs/float8.md recommendation; tensor-wise scaling only, ``config.py`` asserts
        it)."""
        return self is Fp8Recipe.TORCHAO_TENSORWISE

    def split_quantize_launches(self, groups: int) -> int:
        """Kernel launches that quantise one tensor split row-wise over ``groups`` experts, as
        Transformer Engine's ``GroupedLinear`` does for its input (forward) and its output
        gradient (backward): ``tex.split_quantize`` (``transformer_engine/pytorch/module/
        grouped_linear.py``, ``csrc/extensions/cast.cpp`` ``multi_tensor_quantize_impl``,
        TE v2.9 to v2.14 alike, and v2.20.dev ``d0067d0``).

        * ``te-delayed`` (``Float8Quantizer``): one fused ``nvte_multi_cast_transpose`` for
          every split together: 1.
        * ``te-current`` (``Float8CurrentScalingQuantizer``): no fused path; each expert's
          ``quantize_impl`` launches ``zero_amax_kernel``, the amax reduction,
          ``compute_scale_from_amax_kernel`` and the cast-transpose
          (``common/recipe/current_scaling.cu``): ``4 x groups``.
        * ``mxfp8`` (``MXFP8Quantizer``): the outputs are allocated in bulk, then one
          ``nvte_quantize_v2`` per expert (the block scales need no amax pass):
          ``groups``.
        * torchao recipes do not run ``GroupedLinear``; their grouped path is not modelled,
          so one tensor keeps the dense count (:attr:`Fp8CastBytes.kernels_bwd`).

        >>> Fp8Recipe.TE_CURRENT.split_quantize_launches(8), Fp8Recipe.MXFP8.split_quantize_launches(8)
        (32, 8)
        >>> Fp8Recipe.TE_DELAYED.split_quantize_launches(8)
        1
        """
        g = max(int(groups), 1)
        if self is Fp8Recipe.TE_CURRENT:
            return 4 * g
        if self is Fp8Recipe.MXFP8:
            return g
        if self is Fp8Recipe.TE_DELAYED:
            return 1
        return self.cast_bytes.kernels_bwd

    @property
    def quantize_launches(self) -> int:
        """GPU kernels that quantise one tensor, undivided, under a Transformer Engine recipe
        (``tex.quantize``; TE v2.14 ``transformer_engine/pytorch/csrc/quantizer.cpp``):

        * ``te-delayed`` (``Float8Quantizer``): one cast-transpose, the amax fused and the
          scale from the amax history: 1.
        * ``te-current`` (``Float8CurrentScalingQuantizer::quantize_impl``, quantizer.cpp:857-896):
          ``zero_amax_kernel`` and the amax reduction (``nvte_compute_amax_with_config``,
          ``common/recipe/current_scaling.cu``:75 and :97-107), ``compute_scale_from_amax_kernel``
          (current_scaling.cu:258), then the cast (``nvte_quantize_v2``): 4 (the same in TE v2.9,
          v2.12 and v2.15).
        * ``mxfp8`` (``MXFP8Quantizer``): one ``nvte_quantize_v2``, the block amax local: 1.
        * torchao recipes: their per-layer counts (:attr:`Fp8CastBytes.kernels_fwd`) hold;
          here the backward count of one tensor, :attr:`Fp8CastBytes.kernels_bwd`.

        >>> [r.quantize_launches for r in (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8)]
        [1, 4, 1]
        """
        if self is Fp8Recipe.TE_CURRENT:
            return 4
        if self in (Fp8Recipe.TE_DELAYED, Fp8Recipe.MXFP8):
            return 1
        return self.cast_bytes.kernels_bwd

    @property
    def fuses_norm_quantize(self) -> bool:
        """Whether the norm of Transformer Engine's ``LayerNormLinear`` (the qkv and fc1 inputs
        of a TE transformer layer) quantises the linear's input itself, so that the linear's
        input cast changes to :meth:`norm_fed_input`.

        TE v2.14 ``pytorch/csrc/extensions/normalization.cpp``:93-120 (``layernorm_fwd``,
        ``rmsnorm_fwd`` alike) picks ``FULLY_FUSED`` for ``Float8Quantizer`` (delayed
        scaling: the norm kernel writes FP8), ``FUSED_NORM_AMAX_FP8`` for
        ``Float8CurrentScalingQuantizer`` (the norm writes its 16-bit output and its amax),
        and for ``MXFP8Quantizer`` the unfused norm-then-quantise unless
        ``NVTE_NORM_FWD_USE_CUDNN`` is set (off by default): MXFP8 is not fused. TE 1.x
        (``module/layernorm_linear.py`` v1.8:126-137, NeMo 24.07) writes the norm's output as
        FP8 under delayed scaling the same way. torchao recipes run no ``LayerNormLinear``.

        >>> [r.fuses_norm_quantize for r in (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8)]
        [True, True, False]
        """
        return self in (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT)

    def norm_fed_input(self) -> tuple[int, int, float, float]:
        """The input quantise of an FP8 linear fed by a fused norm (:attr:`fuses_norm_quantize`):
        ``(launches_fwd, launches_bwd, bytes_fwd, bytes_bwd)`` per input element, replacing
        :attr:`quantize_launches` and :attr:`Fp8CastBytes.x_fwd`/``x_bwd``.

        * ``te-delayed``: the norm writes the row-wise FP8 input (1 B instead of 2: the norm's
          saving, :meth:`norm_output_bytes`); the weight-gradient GEMM's transposed copy is
          one ``fp8_transpose`` (read 1 B, write 1 B) in backward (TE v1.8
          ``module/layernorm_linear.py``:584; TE v2.14 makes it in forward,
          ``common/normalization/layernorm/ln_api.cpp``:116-122, or, for a sequence-parallel
          gathered input, in backward, ``layernorm_linear.py``:201-204 and :824): ``(0, 1, 0, 2)``.
        * ``te-current``: the norm computes the amax, so ``quantize_with_amax``
          (``pytorch/csrc/quantizer.cpp``:903-909) runs no amax pass: ``amax.zero_()``
          before the norm (quantizer.cpp:755), ``compute_scale_from_amax_kernel`` and the
          cast-transpose (2 + 1 + 1 B): ``(3, 0, 4, 0)``.

        Raises
        ------
        ValueError
            For a recipe whose norm does not quantise (``fuses_norm_quantize`` false).

        >>> Fp8Recipe.TE_DELAYED.norm_fed_input(), Fp8Recipe.TE_CURRENT.norm_fed_input()
        ((0, 1, 0.0, 2.0), (3, 0, 4.0, 0.0))
        """
        if self is Fp8Recipe.TE_DELAYED:
            return 0, 1, 0.0, 2.0
        if self is Fp8Recipe.TE_CURRENT:
            return 3, 0, 4.0, 0.0
        raise ValueError(f"FP8 recipe {self.value!r} does not quantise in the norm")

    def norm_output_bytes(self, act_bytes: float) -> float:
        """Bytes per element the norm feeding an FP8 linear writes: 1 (FP8) where the norm
        writes the quantised input itself (delayed scaling, :meth:`norm_fed_input`), else the
        16-bit ``act_bytes`` (current scaling's norm writes its 16-bit output and the amax).

        >>> Fp8Recipe.TE_DELAYED.norm_output_bytes(2), Fp8Recipe.TE_CURRENT.norm_output_bytes(2)
        (1.0, 2.0)
        """
        return 1.0 if self is Fp8Recipe.TE_DELAYED else float(act_bytes)

    @property
    def scale_swizzle_bytes(self) -> float:
        """Bytes per element of one GEMM operand that Transformer Engine's scale swizzle moves
        before an MXFP8 GEMM: it reads one E8M0 scale per 32 elements and writes it in the
        GEMM's interleaved layout (1 + 1 B per 32 elements); 0 for the other recipes, whose
        GEMMs take per-tensor scales as they are (``swizzle_scales_for_gemm`` returns early,
        TE v2.14 ``pytorch/csrc/extensions/swizzle.cpp``:47-61)."""
        return 2.0 / 32 if self is Fp8Recipe.MXFP8 else 0.0

    def gemm_swizzle_launches(
        self, *, dgrad: bool = True, input_gathered: bool = False, grad_gathered: bool = False
    ) -> tuple[int, int]:
        """Scale-swizzle launches, forward and backward, around one FP8 linear's GEMMs.

        Transformer Engine v2.14 swizzles an MXFP8 operand's block scales into the GEMM layout
        inside the GEMM call (``pytorch/csrc/extensions/gemm.cpp``:281-282, one
        ``nvte_swizzle_scaling_factors`` per operand; grouped GEMMs one multi-tensor swizzle per
        operand list, gemm.cpp:545-547) unless the quantize kernel wrote them swizzled already.
        ``Linear``/``LayerNormLinear``/``GroupedLinear`` ask for that (``optimize_for_gemm``,
        ``module/linear.py``:1486-1495, ``grouped_linear.py``:1229-1239; since TE v2.12) for the
        input and the output gradient, not for the weight, and not for a tensor that
        sequence parallelism all-gathers (the column-parallel input, the row-parallel output
        gradient). So:

        * forward: the weight's row-wise scales (1), plus the gathered input's;
        * backward: the weight's column-wise scales for the input gradient (1 if ``dgrad``),
          the gathered input's column-wise scales for the weight gradient, the gathered
          output gradient's for both GEMMs (2).

        ``(0, 0)`` for per-tensor recipes (:attr:`scale_swizzle_bytes`).

        >>> Fp8Recipe.MXFP8.gemm_swizzle_launches(), Fp8Recipe.MXFP8.gemm_swizzle_launches(grad_gathered=True)
        ((1, 1), (1, 3))
        >>> Fp8Recipe.TE_CURRENT.gemm_swizzle_launches(input_gathered=True)
        (0, 0)
        """
        if self is not Fp8Recipe.MXFP8:
            return 0, 0
        fwd = 1 + int(input_gathered)
        return fwd, int(dgrad) + int(input_gathered) + 2 * int(grad_gathered)

    def cast_launches(
        self,
        groups: int = 1,
        weight_share: float = 1.0,
        *,
        dgrad: bool = True,
        input_gathered: bool = False,
        grad_gathered: bool = False,
        norm_fed: bool = False,
    ) -> tuple[int, int]:
        """GPU launches, forward and backward, of one FP8 linear layer's quantisation per
        micro-batch.

        Transformer Engine recipes: forward, the input (``split_quantize_launches(groups)``
        for a grouped linear, else :attr:`quantize_launches`) and the weight
        (``quantize_launches``, on the micro-batches that cast it: ``weight_share`` is the
        share of a cast each micro-batch carries, :attr:`KernelRecipe.weight_cast_share`, and
        the expected count ``weight_share x quantize_launches`` is rounded half up); backward,
        the output gradient (as the input); each plus :meth:`gemm_swizzle_launches`.
        ``norm_fed``: the input comes from a norm that quantises it (:attr:`fuses_norm_quantize`;
        ignored otherwise): its launches are :meth:`norm_fed_input`'s. torchao
        recipes: :attr:`Fp8CastBytes.kernels_fwd`/``kernels_bwd`` (casts at every
        micro-batch; their grouped path is not modelled).

        >>> Fp8Recipe.TE_CURRENT.cast_launches()  # input 4 + weight 4; output gradient 4
        (8, 4)
        >>> Fp8Recipe.TE_CURRENT.cast_launches(8, weight_share=1 / 16)  # 32 + 0; 32
        (32, 32)
        >>> Fp8Recipe.MXFP8.cast_launches(), Fp8Recipe.TE_DELAYED.cast_launches()
        ((3, 2), (2, 1))
        >>> Fp8Recipe.TE_CURRENT.cast_launches(norm_fed=True), Fp8Recipe.TE_DELAYED.cast_launches(norm_fed=True)
        ((7, 4), (1, 2))
        """
        if self not in (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8):
            return self.cast_bytes.kernels_fwd, self.cast_bytes.kernels_bwd
        g = max(int(groups), 1)
        q = self.quantize_launches
        act = self.split_quantize_launches(g) if g > 1 else q
        weight = int(q * min(max(weight_share, 0.0), 1.0) + 0.5)
        sw_f, sw_b = self.gemm_swizzle_launches(
            dgrad=dgrad, input_gathered=input_gathered, grad_gathered=grad_gathered
        )
        act_f, act_b = act, 0
        if norm_fed and self.fuses_norm_quantize:
            act_f, act_b = self.norm_fed_input()[:2]
        return act_f + weight + sw_f, act + act_b + sw_b

    @property
    def cast_calls(self) -> tuple[int, int]:
        """Quantise calls, forward and backward, of one FP8 linear layer that pay a
        module-level dispatch on the host (``host_dispatch_s``); every further launch of
        :meth:`cast_launches` costs the host a bare launch. Transformer Engine: the input's
        (forward) and the output gradient's (backward) ``tex.quantize``: (1, 1); the launches
        behind them (current scaling's zero-amax, amax and scale kernels, a grouped linear's
        per-expert loop, the GEMM call's scale swizzles) and the weight's cast on the
        micro-batches that cast it (inside the module's forward, whose dispatch the linear's
        GEMM pays) are bare. torchao: every kernel is its own call
        (:attr:`Fp8CastBytes.kernels_fwd`)."""
        if self in (Fp8Recipe.TE_DELAYED, Fp8Recipe.TE_CURRENT, Fp8Recipe.MXFP8):
            return 1, 1
        return self.cast_bytes.kernels_fwd, self.cast_bytes.kernels_bwd

    def weight_cache_bytes_per_param(self) -> float:
        """Bytes per FP8 linear parameter of the FP8 weight copies a recipe keeps between
        micro-batches: TE caches the FP8 weight and its transpose (Hopper: 1 + 1; MXFP8: row-
        and column-wise data, 1 + 1, plus one E8M0 scale per 32 elements each); torchao keeps
        none beyond the step (its casts are transient).

        >>> Fp8Recipe.TE_DELAYED.weight_cache_bytes_per_param()
        2.0
        """
        if self is Fp8Recipe.MXFP8:
            return 2.0 + 2.0 / 32
        if self.caches_weights:
            return 2.0
        return 0.0


@dataclass(frozen=True)
class Fp8CastBytes:
    """Quantisation traffic of one FP8 linear layer, bytes per element of its input ``x``
    (``m x k``), its output gradient ``dy`` (``m x n``) and its weight ``w`` (``k x n``): a
    16-bit source read, an FP8 copy (and transposed copy) written, plus a separate amax pass
    where the scale must be known before the cast.

    ``x_fwd``/``x_bwd``: casts of the input in forward / backward (re-quantised along the other
    axis for the weight gradient); ``dy_bwd``: of the output gradient; ``w_fwd``/``w_bwd``: of
    the weight for the forward and for the input gradient. ``kernels_fwd``/``kernels_bwd``:
    launches per linear layer of the torchao recipes; Transformer Engine's launches are
    counted by :meth:`Fp8Recipe.cast_launches` (0 here).
    """

    x_fwd: float
    x_bwd: float
    dy_bwd: float
    w_fwd: float
    w_bwd: float
    source: str
    kernels_fwd: int = 0
    kernels_bwd: int = 0


#: Per recipe: a 16-bit read is 2 B, an FP8 write 1 B, an amax pass a 2 B read.
_FP8_CASTS: dict[Fp8Recipe, Fp8CastBytes] = {
    Fp8Recipe.TE_DELAYED: Fp8CastBytes(
        x_fwd=4.0, x_bwd=0.0, dy_bwd=4.0, w_fwd=4.0, w_bwd=0.0,
        source="TE 1.x fp8_cast_transpose_fused: one kernel reads the 16-bit tensor (2 B) and "
        "writes the FP8 copy and its transpose (1 + 1 B), amax fused; the scale comes from the "
        "amax history (no extra pass); weight cast once per step, output gradient with "
        "fp8_cast_transpose_bgrad_fused",
    ),
    Fp8Recipe.TE_CURRENT: Fp8CastBytes(
        x_fwd=6.0, x_bwd=0.0, dy_bwd=6.0, w_fwd=6.0, w_bwd=0.0,
        source="TE 2.x Float8CurrentScaling: an amax kernel reads the tensor (2 B) before the "
        "cast-transpose (2 + 1 + 1 B)",
    ),
    Fp8Recipe.TORCHAO_TENSORWISE: Fp8CastBytes(
        x_fwd=6.0, x_bwd=0.0, dy_bwd=6.0, w_fwd=5.0, w_bwd=2.0, kernels_fwd=4, kernels_bwd=3,
        source="torchao eab345c float8_linear.py (tensor-wise: input and weight cast in "
        "forward, FP8 copies saved; grad_output cast in backward by NoopFwToFloat8BwDynamic) "
        "compiled by inductor: a global amax reduction (2 B read) then a cast kernel (2 B read, "
        "1 B write, plus the transposed FP8 copy the weight-gradient GEMM needs, 1 B); the "
        "weight's FP8 transpose for the input gradient (1 + 1 B)",
    ),
    Fp8Recipe.TORCHAO_ROWWISE: Fp8CastBytes(
        x_fwd=3.0, x_bwd=5.0, dy_bwd=8.0, w_fwd=3.0, w_bwd=5.0, kernels_fwd=2, kernels_bwd=4,
        source="torchao eab345c recipe all_axiswise (manual_float8_matmul_with_args_in_hp: "
        "16-bit input and weight saved, re-quantised in backward): a row-wise cast is one "
        "kernel (2 B read, 1 B write, amax of the row fused); a column-wise cast needs a "
        "column amax pass first (2 + 2 + 1 B); grad_output both ways (3 + 5 B)",
    ),
    Fp8Recipe.MXFP8: Fp8CastBytes(
        x_fwd=4.0 + 2.0 / 32, x_bwd=0.0, dy_bwd=4.0 + 2.0 / 32, w_fwd=4.0 + 2.0 / 32,
        w_bwd=0.0,
        source="TE 2.x MXFP8Quantizer: one kernel reads the 16-bit tensor and writes row- and "
        "column-wise MXFP8 data (1 + 1 B) with one E8M0 scale per 32 elements each; block "
        "amax local (no extra pass); weight once per step",
    ),
}  # fmt: skip


class OptimizerImpl(str, enum.Enum):
    """How the optimizer step runs: ``fused`` (one multi-tensor kernel reading each state
    tensor once: ``torch.optim`` ``fused=True``, apex/TE ``FusedAdam``, DeepSpeed's fused Adam)
    or ``foreach`` (``torch.optim``'s default on CUDA since 2.0: one ``_foreach_*`` kernel per
    arithmetic step, each a full pass over its tensors)."""

    FUSED = "fused"
    FOREACH = "foreach"


class GradClip(str, enum.Enum):
    """Gradient-norm clipping before the step: ``none``; ``foreach``
    (``torch.nn.utils.clip_grad_norm_(foreach=True)``: ``_foreach_norm`` reads the gradients,
    ``_foreach_mul_`` always rescales them by the clamped coefficient: 4 + 8 B per FP32
    gradient; torchtitan ``training.max_norm = 1.0``); ``l2norm`` (Megatron
    ``clip_grad_norm_fp32``: ``multi_tensor_l2norm`` reads the gradients, 4 B; the rescale runs
    only when the norm exceeds the limit)."""

    NONE = "none"
    FOREACH = "foreach"
    L2NORM = "l2norm"

    def bytes_per_param(self, grad_bytes: float) -> float:
        """Bytes per parameter (gradients of ``grad_bytes`` bytes each)."""
        if self is GradClip.FOREACH:
            return 3.0 * grad_bytes
        if self is GradClip.L2NORM:
            return float(grad_bytes)
        return 0.0


def optimizer_bytes_per_param(
    state_tensors: int,
    *,
    impl: OptimizerImpl,
    grad_bytes: float,
    working_copy_bytes: float,
    weight_decay: bool = True,
    state_bytes: float = 4.0,
    weight_bytes: float = 4.0,
) -> float:
    """Device-memory bytes per parameter of one optimizer step.

    ``state_bytes``: bytes per element of each state tensor (4: FP32; 2: Apex
    ``DistributedFusedAdam`` with ``dtype=bf16``); ``weight_bytes``: bytes of the weight value
    the step reads and writes (4: an FP32 master copy or FP32 parameters; 2 + 2: a bf16 weight
    with Apex's 16-bit remainder; 2: the 16-bit weights themselves, no master copy); the
    defaults are the FP32 step. ``w``, ``t`` and ``g`` below are these and the gradient's
    bytes.

    ``fused``: read the gradient, read and write the weight and each state tensor
    (``g + 2 w + 2 s t``), write the 16-bit working copy.

    ``foreach`` (``torch/optim/adamw.py _multi_tensor_adamw``, ``sgd.py _multi_tensor_sgd``,
    PyTorch 2.5/2.6), gradients of ``g`` bytes. AdamW (``s = 2``):
    ``_foreach_mul_(params, 1 - lr wd)`` 2 w, ``_foreach_lerp_(exp_avgs, grads)`` 2 t + g,
    ``_foreach_mul_(exp_avg_sqs, beta2)`` 2 t, ``_foreach_addcmul_(exp_avg_sqs, grads,
    grads)`` 2 t + 2 g, ``_foreach_sqrt`` 2 t, ``_foreach_div_`` 2 t, ``_foreach_add_(eps)``
    2 t, ``_foreach_addcdiv_(params, exp_avgs, denom)`` 2 w + 2 t: ``4 w + 14 t + 3 g``
    (``72 + 3 g`` in FP32). SGD with momentum (``s = 1``): ``_foreach_add(grads, params,
    alpha=wd)`` 2 g + w, ``_foreach_mul_(bufs)`` 2 t, ``_foreach_add_(bufs, grads)`` 2 t + g,
    ``_foreach_add_(params, bufs)`` 2 w + t: ``3 w + 5 t + 3 g``; plain SGD (``s = 0``):
    weight decay 2 g + w, update 2 w + g: ``3 w + 3 g``. Without weight decay its pass is
    dropped (AdamW: 2 w; SGD: 2 g + w).

    >>> optimizer_bytes_per_param(2, impl=OptimizerImpl.FUSED, grad_bytes=4, working_copy_bytes=0)
    28.0
    >>> optimizer_bytes_per_param(2, impl=OptimizerImpl.FOREACH, grad_bytes=4, working_copy_bytes=0)
    84.0
    >>> optimizer_bytes_per_param(1, impl=OptimizerImpl.FOREACH, grad_bytes=4, working_copy_bytes=0)
    44.0

    Adam with bf16 moments over bf16 weights and bf16 gradients (no master copy): 2 + 4 + 8.

    >>> optimizer_bytes_per_param(2, impl=OptimizerImpl.FUSED, grad_bytes=2,
    ...                           working_copy_bytes=0, state_bytes=2, weight_bytes=2)
    14.0
    """
    g, t, w = float(grad_bytes), float(state_bytes), float(weight_bytes)
    if impl is OptimizerImpl.FUSED:
        return g + 2.0 * w + 2.0 * t * state_tensors + working_copy_bytes
    if state_tensors >= 2:
        per = 4.0 * w + 14.0 * t + 3.0 * g - (0.0 if weight_decay else 2.0 * w)
    else:
        decay = 2.0 * g + w if weight_decay else 0.0
        per = decay + (
            2.0 * t + (2.0 * t + g) + (2.0 * w + t) if state_tensors == 1 else 2.0 * w + g
        )
    return per + working_copy_bytes


@dataclass(frozen=True)
class KernelRecipe:
    """What a workload is built with beyond its shapes (part of the workload's cache key).

    Attributes
    ----------
    fusion
        The decomposition of each block (:class:`Fusion`).
    fp8
        The FP8 recipe when the precision is FP8 (its cast kernels follow every FP8 linear),
        else ``None``.
    fsdp_copies
        FSDP2's copies are charged: after each all-gather the flat output is split into the
        unsharded parameters (``foreach_all_gather_copy_out``: ``split_with_sizes_copy``, read
        and write 2 B per parameter, in forward and again in backward: torchtitan reshards after
        forward without pipelining; with it, :attr:`fsdp_step_share`), and before each
        reduce-scatter the 16-bit gradients are copied into the FP32 reduce-scatter input
        (``foreach_reduce_scatter_copy_in``: ``torch._chunk_cat``, 2 B read, 4 B written with
        ``reduce_dtype=float32``), PyTorch ``_fsdp_collectives.py`` (2.6
        ``torch/distributed/fsdp/_fully_shard/``; 2.5 ``torch/distributed/_composable/fsdp/``).
        Charged per block (one FSDP unit each) and once for
        the root unit's parameters; the sharded copy-in of the all-gather (1/dp of these bytes)
        is left out.
    fsdp_reduce_bytes
        Bytes per gradient element of FSDP's reduce-scatter input (4 for ``reduce_dtype=
        float32``).
    fsdp_step_share
        FSDP2 holding its units gathered for the whole step
        (:attr:`~perfmodel.parallel.recipe.Recipe.gather_per_step`, pipelined): the share of
        one forward copy-out and one reduce-scatter copy-in each micro-batch carries
        (``1 / micro-batches``; no backward all-gather, so no backward copy-out), and every
        micro-batch's backward accumulates the unsharded gradient instead, one launch per
        parameter tensor (read the new 16-bit gradient and the accumulator, write the
        accumulator, in ``fsdp_reduce_bytes``; the first micro-batch's is a copy:
        ``FSDPParam.to_accumulated_grad_if_needed`` / ``accumulate_unsharded_grad_if_needed``
        upcast to ``reduce_dtype``, autograd's accumulation in the parameter's dtype without
        one; PyTorch 2.6 ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``). 0: the
        units are gathered in every forward and backward and reduced every micro-batch.
    weight_cast_share
        Share of a cached FP8 weight cast charged per micro-batch (``1 / micro-batches`` when
        :attr:`Fp8Recipe.caches_weights`, else 1).
    moe_sort_chunks
        The token dispatcher regroups the rows it receives by local expert after its
        all-to-all and back before the combine's (Megatron-Core ``MoEAlltoAllTokenDispatcher``
        ``dispatch_postprocess`` / ``combine_preprocess``: ``sort_chunks_by_idxs`` when a rank
        holds more than one expert, Megatron-LM 4415119 ``megatron/core/transformer/moe/
        token_dispatcher.py``): a copy of the routed rows each way, in forward and backward.
    moe_quant_padding
        The experts pad each expert's rows to the quantized GEMM's alignment before the first
        grouped GEMM and drop the padding after the second (Megatron-Core ``TEGroupedMLP``
        ``quantization_padding`` / ``quantization_unpadding``, Transformer Engine
        ``Fp8Padding``/``Fp8Unpadding``, unless the router or the Hybrid-EP dispatcher padded
        already, ``moe_utils.skip_routed_expert_padding`` at 4415119): a copy of the routed rows
        each way, in forward and backward.
    apex_rms_norm
        RMSNorms run as InternLM's July 2023 layer runs them (:data:`APEX_MIXED_RMS_NORM`:
        apex ``MixedFusedRMSNorm`` on the FP32-cast residual, re-run in backward) instead of the
        fusion mode's.
    fused_rope
        Rotary embeddings run as one in-place CUDA kernel each way (:data:`FLASH_ATTN_ROTARY`,
        flash-attention's ``rotary_emb`` extension) instead of the fusion mode's.
    """

    fusion: Fusion = Fusion.EAGER
    fp8: Fp8Recipe | None = None
    fsdp_copies: bool = False
    fsdp_reduce_bytes: int = 4
    fsdp_step_share: float = 0.0
    weight_cast_share: float = 1.0
    moe_sort_chunks: bool = False
    moe_quant_padding: bool = False
    apex_rms_norm: bool = False
    fused_rope: bool = False


def fp8_linear(layer: LayerCost) -> bool:
    """Whether FP8 recipes run ``layer``'s GEMMs in FP8: weight GEMMs (linear and
    convolution layers) except those kept in 16 bit (:attr:`LayerCost.keep_16bit`: the LM
    head) and the MoE router (Megatron-Core computes the router's logits in its own dtype,
    ``moe_router_dtype``; torchtitan's float8 conversion leaves it out). Attention products
    stay in BF16 (TE ``fp8_dpa=False`` by default; torchao converts ``nn.Linear`` only)."""
    return (
        layer.kind in (LayerKind.LINEAR, LayerKind.CONV)
        and layer.gemm is not None
        and not layer.keep_16bit
        and layer.expert_role is not ExpertRole.ROUTER
    )


#: The recipe of a workload built without a training recipe (the zoo's defaults).
DEFAULT_KERNELS = KernelRecipe()


__all__ = [
    "DEFAULT_KERNELS",
    "OPS",
    "Fp8CastBytes",
    "Fp8Recipe",
    "Fusion",
    "GradClip",
    "KernelIO",
    "KernelRecipe",
    "OpKernels",
    "OptimizerImpl",
    "fp8_linear",
    "op_kernels",
    "optimizer_bytes_per_param",
    "repeat_kv_kernels",
]
