"""Software presets: the knobs of a training stack that users do not know by name.

One table (:data:`PRESETS`), documented in ``docs/predict.md``, and the options a scenario may
set beside its preset (:data:`SOFTWARE_OPTIONS`, :func:`with_software_options`). The preset's
value (:class:`SoftwarePreset`, :class:`TPOverlap` and the constants their defaults cite) lives in
:mod:`perfmodel.parallel.software_preset` and is imported here under the same names. Every number
cites where it comes from; numbers marked *estimate* are orders of magnitude from the cited
description, not fits to any validation row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from perfmodel import units
from perfmodel.comm.p2p_read import ProcessLayout
from perfmodel.compute.attention import AttentionBackend
from perfmodel.dtypes import DType
from perfmodel.errors import ConfigError
from perfmodel.parallel.plan import DPMode
from perfmodel.parallel.selective import SelectiveRecompute
from perfmodel.parallel.software_preset import (
    COMM_OVERLAP_COMPUTE_SLOWDOWN,
    PYTORCH_DISPATCH_PER_OP_S,
    TP_OVERLAP_UB_H100,
    SoftwarePreset,
    TPOverlap,
)
from perfmodel.parallel.stack_choices import (
    AmpStyle,
    CrossEntropy,
    MasterCopy,
    ParamOwners,
    ParamSync,
)
from perfmodel.workload.kernels import Fp8Recipe, Fusion, GradClip, OptimizerImpl
from perfmodel.workload.memory import ModuleRecompute, RecomputeModule

__all__ = [
    "COMM_OVERLAP_COMPUTE_SLOWDOWN",
    "MCORE_SELECTIVE",
    "OPTIMIZER_DTYPES",
    "PRESETS",
    "PYTORCH_DISPATCH_PER_OP_S",
    "SOFTWARE_OPTIONS",
    "TF_MIRRORED_SPLIT_PER_SAMPLE_S",
    "TP_OVERLAP_UB_H100",
    "SoftwareOption",
    "SoftwarePreset",
    "TPOverlap",
    "get_preset",
    "presets_markdown",
    "software_option_key",
    "with_software_options",
]

#: tf.distribute.MirroredStrategy + Keras fit: host time per sample of each extra replica.
#: Documented least-squares fit (through the origin) of ``step(n) - step(1) = c (n - 1) b`` over
#: four differences of published rows on one system (BSC MareNostrum 5, 4x H100, TF NGC 23.03,
#: CIFAR-10 at 128x128, jorditorresBCN/supercomputing-for-ai-book ch10): rows
#: torres-mn5-rn50v2-{1,2,4}g-step (b = 2048: +79 ms, +224 ms) and torres-mn5-rn152v2-{1,2,4}g-epoch
#: (b = 1024, 49/25/13 steps: +47 ms, +96 ms) give c = 35.9 us/sample (per-point estimates
#: 31-46 us). Those rows are therefore excluded from judging the model; the seeds (CTE-POWER,
#: another system) judge it. Mechanism (our reading): the strategy splits the global batch and
#: copies the replicas' shares from the host each step, outside the prefetch overlap.
TF_MIRRORED_SPLIT_PER_SAMPLE_S = 35.9 * units.us

_MB = units.MiB  # DDP's bucket_cap_mb and Horovod's fusion threshold are binary megabytes

#: Why the DeepSpeed presets run at most ZeRO-1 with pipeline parallelism
#: (``SoftwarePreset.pipeline_max_zero``): the pipeline engine's own assertion, in every release
#: since fbece50 (2021-04-19), v0.14.0 (the presets' version) and edaa722 (2026-08-22) included.
DEEPSPEED_PIPELINE_ZERO_SOURCE = (
    "DeepSpeed v0.14.0 and edaa722 deepspeed/runtime/pipe/engine.py PipelineEngine.__init__: "
    'assert self.zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are '
    'incompatible with pipeline parallelism" (pipeline_max_zero=1: ZeRO-1 at most with pp > 1)'
)

_DEEPSPEED_SOURCES = (
    "DeepSpeed 0.14 deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig): reduce_bucket_size "
    "and allgather_bucket_size default 5e8 elements; overlap_comm defaults to None, which its "
    "validator sets to True for stage 3 only; stage3_prefetch_bucket_size 5e7",
    "DeepSpeed config docs (fp16/bf16): the model is cast to 16 bit (no autocast), FP32 master "
    "weights and Adam moments live in the (partitioned) optimizer; communication_data_type "
    "defaults to the model's 16-bit type",
    "Rajbhandari et al. SC20 (ZeRO): stages 1/2 move 2x parameters per step like "
    "all-reduce (reduce-scatter + all-gather); stage 3 moves 3x",
    DEEPSPEED_PIPELINE_ZERO_SOURCE,
)

#: Megatron-Core's ``recompute_granularity='selective'``: the attention core checkpointed,
#: fused or not (core_v0.8.0 ``megatron/core/transformer/attention.py``:
#: ``checkpoint_core_attention = recompute_granularity == 'selective'``; at 4415119, the
#: Megatron-Bridge 26.04 pin, the default ``recompute_modules=["core_attn"]``).
MCORE_SELECTIVE = ModuleRecompute(frozenset({RecomputeModule.CORE_ATTN}))

_DEEPSPEED_ZERO1 = SoftwarePreset(
    name="deepspeed-zero1",
    dp_mode=DPMode.ALLREDUCE,
    bucket_elements=5e8,
    overlap_grad_comm=False,  # overlap_comm default False for stages 1 and 2
    zero=1,
    amp=AmpStyle.HALF_MODEL,
    sources=_DEEPSPEED_SOURCES,
    dispatch_mode="pytorch-eager",
    pipeline_max_zero=1,  # DEEPSPEED_PIPELINE_ZERO_SOURCE
)

#: Megatron-Core with Transformer Engine as NeMo 2.0 / Megatron-Bridge's performance recipes run it.
_MEGATRON_CORE = SoftwarePreset(
    name="megatron-core",
    dp_mode=DPMode.ALLREDUCE,
    amp=AmpStyle.HALF_MODEL,
    zero=1,
    distributed_optimizer=True,
    overlap_grad_comm=True,
    overlap_param_gather=True,
    tp_comm_overlap=True,
    bucket_params=40e6,
    bucket_params_per_dp=1e6,
    sequence_parallel_with_tp=True,
    fp8_saves_fp8_inputs=True,
    tp_overlap=TP_OVERLAP_UB_H100,
    sources=(
        "Megatron-Core 0.7-0.9 megatron/core/distributed/distributed_data_parallel_config.py"
        ": bucket_size default max(40000000, 1000000 x dp) parameters",
        "gradient buffer and reduction in bf16 (2 bytes), as the performance recipes run: "
        "NeMo-Framework-Launcher 24.07 (0b1a110c) examples/training/*/h100/*_fp8*.sh pass "
        "+training.model.optim.grad_sync_dtype=bf16; Megatron-Bridge (2026-04) "
        "perf_recipes/_common.py _benchmark_common and scripts/performance/configs/llama "
        "set ddp.grad_reduce_in_fp32 = False (Megatron-LM's own pretrain script keeps FP32 "
        "for bf16: the 'megatron' preset)",
        "NeMo 24.07 / Megatron-Bridge performance recipes: --use-distributed-optimizer, "
        "overlap_grad_reduce, overlap_param_gather and tp_comm_overlap (Transformer "
        "Engine userbuffers) enabled; bf16 model with FP32 master weights, FP8 via TE",
        "NeMo 2.0 nemo/collections/llm/recipes/precision/mixed_precision.py "
        "bf16_with_fp8_mixed: fp8='hybrid' (E4M3 forward, E5M2 backward), delayed "
        "scaling with amax_history_len 1024, fp8_params=True; Megatron-Core TE modules "
        "(fused norm-linear, RoPE apply_rope_fusion, bias-SwiGLU and bias-dropout-add "
        "fusions, fused cross-entropy), distributed optimizer with TE/apex fused Adam "
        "and clip_grad_norm_fp32 (multi_tensor_l2norm)",
        "NeMo 2.0 / Megatron-Bridge LLM recipes: sequence_parallel=True wherever "
        "tensor_model_parallel_size > 1 (Megatron-Core's own --sequence-parallel "
        "defaults to off; give sequence_parallel=false to model that)",
        "attention: Megatron-Core's TEDotProductAttention (transformer_impl="
        "'transformer_engine', the NeMo/Megatron-Bridge default); Transformer Engine "
        "selects cuDNN fused attention on sm90 and later and FlashAttention-2 on sm80",
    ),
    fusion=Fusion.TE,
    grad_clip=GradClip.L2NORM,
    fp8_params=True,
    dispatch_mode="pytorch-eager",
    attention_backend=AttentionBackend.CUDNN,
    selective_recompute=MCORE_SELECTIVE,
)


def _pytorch_native(**fields: Any) -> SoftwarePreset:
    """A preset of a PyTorch-native stack with ``fields``: what these stacks share
    (:class:`~perfmodel.parallel.software_preset.SoftwarePreset`): the optimizer step as
    ``torch.optim``'s ``foreach`` implementation, FP8 as torchao's tensor-wise dynamic scaling,
    and every op dispatched from Python (``"pytorch-eager"``)."""
    return SoftwarePreset(
        optimizer_impl=OptimizerImpl.FOREACH,
        fp8_recipe=Fp8Recipe.TORCHAO_TENSORWISE,
        dispatch_mode="pytorch-eager",
        **fields,
    )


#: PyTorch FSDP2 (``fully_shard``) with a bf16 ``MixedPrecisionPolicy``.
_FSDP2 = _pytorch_native(
    name="fsdp",
    dp_mode=DPMode.ALLREDUCE,
    overlap_grad_comm=True,
    zero=3,
    fsdp=True,
    amp=AmpStyle.FSDP_POLICY,
    sources=(
        "Zhao et al., PyTorch FSDP, VLDB 2023: per-unit all-gather in forward and backward, "
        "reduce-scatter of gradients in backward, prefetching overlaps them with compute",
        "PyTorch 2.4+ FSDP2 fully_shard docs: MixedPrecisionPolicy(param_dtype=bf16) keeps "
        "FP32 sharded parameters (the optimizer's copy), all-gathers in param_dtype; "
        "reduce_dtype=None reduces in param_dtype; forward/backward prefetch on separate "
        "streams (all-gather stream, reduce-scatter stream)",
        "with pipeline parallelism (torch.distributed.pipelining), reshard_after_forward=False "
        "as torchtitan's apply_fsdp sets it for PP ('to avoid per-microbatch all-gathers'; "
        "fully_shard's own default is True): each unit gathered once a step, its gradients "
        "reduce-scattered after the stage's last backward (Recipe.gather_per_step)",
    ),
)

#: Every preset states only what differs from the :class:`SoftwarePreset` defaults.
PRESETS: dict[str, SoftwarePreset] = {
    p.name: p
    for p in (
        _pytorch_native(
            name="pytorch-ddp",
            dp_mode=DPMode.ALLREDUCE,
            bucket_bytes=25 * _MB,
            first_bucket_bytes=1 * _MB,
            overlap_grad_comm=True,
            sources=(
                "torch.nn.parallel.DistributedDataParallel docs: bucket_cap_mb=25",
                "Li et al., PyTorch Distributed, VLDB 2020: buckets all-reduced during backward; "
                "first bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES)",
            ),
        ),
        SoftwarePreset(
            name="pytorch-apex",
            dp_mode=DPMode.ALLREDUCE,
            amp=AmpStyle.HALF_MODEL,
            sources=(
                "NVIDIA DeepLearningExamples PyTorch recipes (BERT, 19.07-21.11 containers): "
                "16-bit model with FP32 master weights in the fused optimizer, not autocast: "
                "apex amp.initialize(opt_level='O2') in PyTorch/LanguageModeling/BERT/"
                "run_pretraining.py @78ec680207ad (19.07) up to a9e2c1d5^, model.half() with "
                "FusedLAMBAMP master weights from a9e2c1d5 (2022-03; @729963dd47e7, 21.11) "
                "when allreduce_post_accumulation_fp16 is set, as scripts/run_pretraining.sh "
                "does by default",
                "one FP16 all-reduce of all gradients after the last accumulation step's "
                "backward (allreduce_post_accumulation: apex flat all-reduce @78ec680207ad; "
                "DDP with bucket_cap_mb = the GPU's memory, i.e. one bucket, and no_sync on the "
                "other steps @729963dd47e7)",
                "kernels: eager PyTorch with apex FusedLayerNorm and the jit-fused bias-GELU "
                "(modeling.py @78ec680207ad); from a9e2c1d5 the model is torch.jit.script-ed "
                "with nvFuser, which fuses pointwise chains: --compile models it",
            ),
            optimizer_impl=OptimizerImpl.FUSED,
            dispatch_mode="pytorch-eager",
        ),
        _pytorch_native(
            name="pytorch-dataparallel",
            dp_mode=DPMode.GPU_MERGE,
            dispatch_per_op_s=PYTORCH_DISPATCH_PER_OP_S,
            sources=(
                "torch.nn.DataParallel docs: replicate module from device_ids[0] every forward, "
                "scatter inputs, gather outputs; gradients reduced into device_ids[0]",
                "PyTorch docs: DataParallel is single-process multi-thread and suffers GIL contention",
            ),
            processes=ProcessLayout.PER_SERVER,
        ),
        SoftwarePreset(
            name="horovod",
            dp_mode=DPMode.ALLREDUCE,
            bucket_bytes=64 * _MB,
            overlap_grad_comm=True,
            fusion_cycle_s=5 * units.ms,
            comm_algorithm="ring",
            sources=(
                "Horovod docs/tensor-fusion.rst: HOROVOD_FUSION_THRESHOLD default 64 MB; "
                "HOROVOD_CYCLE_TIME default 5 ms (changed to 1 ms / 128 MB in v0.21.0, PR #2468)",
                "Sergeev & Del Balso 2018: ring all-reduce (NCCL)",
            ),
        ),
        SoftwarePreset(
            name="tf-mirrored",
            gradient_accumulation=False,
            dp_mode=DPMode.ALLREDUCE,
            sources=(
                "tf.distribute.MirroredStrategy docs: NcclAllReduce cross-device ops; gradients are "
                "all-reduced (batched into packs) after the gradient computation, before apply",
                "host split per sample: fit over the MareNostrum 5 rows, see "
                "TF_MIRRORED_SPLIT_PER_SAMPLE_S",
                "one process per server: MirroredStrategy replicates in-graph over the local GPUs "
                "(docs: 'synchronous training across multiple replicas on one machine'); the "
                "process's NcclManager (tensorflow/core/nccl/nccl_manager.cc, TF 1.13-2.x) keys "
                "a single-node communicator on the set of its local devices",
            ),
            host_split_per_sample_s=TF_MIRRORED_SPLIT_PER_SAMPLE_S,
            processes=ProcessLayout.PER_SERVER,
        ),
        SoftwarePreset(
            name="tf-replicated",
            gradient_accumulation=False,
            dp_mode=DPMode.ALLREDUCE,
            sources=(
                "tensorflow/benchmarks tf_cnn_benchmarks (2017): variable_update=replicated with "
                "NCCL all-reduce of the gradients after they are computed, in the same graph step; "
                "variable_update=parameter_server uses dp_mode=parameter-server",
                "one process per server: tf_cnn_benchmarks builds one replica tower per local GPU "
                "(--num_gpus) in its one graph, and the NCCL all-reduce runs in that process "
                "(tensorflow/core/nccl/nccl_manager.cc)",
            ),
            processes=ProcessLayout.PER_SERVER,
        ),
        SoftwarePreset(
            name="cuda-convnet2",
            gradient_accumulation=False,
            dp_mode=DPMode.ALLREDUCE,
            sources=(
                "Krizhevsky 2014, 'One weird trick...' (arXiv:1404.5997), sections 3-5: workers "
                "synchronise weight gradients every batch; no overlap with the backward pass is "
                "described, so we assume synchronisation after backward (an assumption)",
            ),
        ),
        SoftwarePreset(
            name="keras-multi-gpu",
            gradient_accumulation=False,
            dp_mode=DPMode.CPU_MERGE,
            sources=(
                "tf.keras.utils.multi_gpu_model docs (TF 1.15/2.1): sub-batches on each GPU, "
                "results concatenated on the CPU, cpu_merge=True keeps/merges weights on the CPU",
                "one process: multi_gpu_model replicates the model in-graph over the local GPUs",
            ),
            processes=ProcessLayout.PER_SERVER,
        ),
        SoftwarePreset(
            name="megatron",
            dp_mode=DPMode.ALLREDUCE,
            amp=AmpStyle.HALF_MODEL,
            fp32_grads_bf16=True,
            sources=(
                "Narayanan et al. SC21 (Megatron-LM PTD-P): data-parallel all-reduce of the "
                "contiguous gradient buffer after the pipeline flush (no overlap in that release)",
                "Megatron-LM megatron/arguments.py (2021): --fp16/--bf16 cast the model to 16 bit "
                "(Float16Module, no autocast) with FP32 master weights in the optimizer; bf16 "
                "requires accumulate_allreduce_grads_in_fp32 (FP32 main_grad buffer and "
                "all-reduce)",
            ),
            fusion=Fusion.TE,
            grad_clip=GradClip.L2NORM,
            dispatch_mode="pytorch-eager",
        ),
        _MEGATRON_CORE,
        # NeMo 1.0 trains Megatron-Core's GPT (mcore_gpt: True): the megatron-core stack with
        # Apex's distributed Adam, its bucket and no FP8 parameters.
        replace(
            _MEGATRON_CORE,
            name="nemo",
            bucket_bytes=100 * _MB,
            bucket_params=None,
            bucket_params_per_dp=0.0,
            master_copy=MasterCopy.APEX_DISTRIBUTED_ADAM,
            fp8_params=False,
            sources=(
                "NeMo 1.0 (24.07 container) Megatron-Core GPT with optim.name="
                "distributed_fused_adam (NeMo-Framework-Launcher 24.07 8325688d conf/training): "
                "Apex DistributedFusedAdam (NeMo MegatronDistributedFusedAdam) shards optimizer "
                "state over the data-parallel group with context parallelism; its state dtype "
                "optim.dtype defaults to FP32 (Apex's default; the 340B config sets bf16: "
                "--software-option optimizer_dtype=bf16); with a bf16 model and FP32 state NeMo "
                "sets store_params=False, store_param_remainders=True, with the model's dtype "
                "store_params=False (nemo/collections/nlp/models/language_modeling/"
                "megatron_base_model.py setup_optimization, NeMo r2.0.0rc1): the master copy is "
                "the 16 low bits beside the bf16 weight, or none; param_sync_dtype = the model's "
                "bf16 (no fp8_params in the launcher configs: FP8 weights are cast each step)",
                "its H100 FP8 examples for GPT and Llama (examples/training/{gpt,llama}/h100/"
                "*_fp8*.sh) pass optim.grad_sync_dtype=bf16 (Apex's default is FP32: "
                "--software-option grad_reduce_fp32=true); bucket_cap_mb 100 (Apex's default; "
                "the configs set 50-400: --software-option bucket_mb=...); overlap_grad_sync, "
                "overlap_param_sync and ub_tp_comm_overlap as the configs set them (GPT-3 175B "
                "and Nemotron-340B turn userbuffers off: --software-option tp_comm_overlap=false)",
                "mcore_gpt: True, transformer_engine: True in every launcher config: Megatron-Core "
                "TE modules (fused LayerNorm-linear, fused RoPE, bias-activation and "
                "bias-dropout-add fusions), cuDNN fused attention on Hopper; "
                "trainer.gradient_clip_val 1.0 (the optimizer's L2-norm clipping)",
            ),
        ),
        _DEEPSPEED_ZERO1,
        replace(_DEEPSPEED_ZERO1, name="deepspeed-zero2", zero=2),
        replace(_DEEPSPEED_ZERO1, name="deepspeed-zero3", zero=3, overlap_grad_comm=True),
        _FSDP2,
        # torchtitan shards every block with FSDP2 (fully_shard) as the fsdp preset does.
        replace(
            _FSDP2,
            name="torchtitan",
            fp32_grad_reduce=True,
            selective_recompute=SelectiveRecompute.OP,
            cross_entropy=CrossEntropy.EAGER_FP32,
            even_pipeline_split=False,
            sequence_parallel_with_tp=True,
            sources=(
                "torchtitan (Dec 2024) torchtitan/parallelisms/parallelize_llama.py: fully_shard "
                "per transformer block (FSDP2) with MixedPrecisionPolicy(param_dtype="
                "training.mixed_precision_param=bfloat16, reduce_dtype="
                "training.mixed_precision_reduce=float32); optional TP (async TP off by "
                "default) and PP; torch.compile and float8 (torchao) opt-in; selective AC "
                "'op' (every second matmul and the cheap ops re-run, SDPA saved)",
                "torchtitan 9dec370 train.py loss_fn: F.cross_entropy(pred.flatten(0, 1).float(), "
                "labels) on the 16-bit logits upcast to FP32, pred deleted before backward",
                "torchtitan 9dec370 torchtitan/optimizer.py: AdamW(fused=False, "
                "foreach=True); train.py clip_grad_norm_(max_norm=1.0, foreach=True); "
                "loss cross_entropy(pred.float()); models/norms.py RMSNorm in eager ops; "
                "float8.py converts every nn.Linear but 'output' (torchao tensor-wise)",
                "torchtitan parallelize_llama.py apply_tp: the TP plan shards the sequence "
                "around the norms (SequenceParallel), i.e. sequence parallelism with TP",
                "attention: torchtitan (Dec 2024) models/llama/model.py calls "
                "F.scaled_dot_product_attention (is_causal=True): PyTorch 2.6 nightlies pick "
                "the FlashAttention-2 kernels on H100 (cuDNN deprioritised after 2.5.0, pytorch "
                "issue #141133; torchtitan PR #1209)",
                "torchtitan 820504e parallelize_llama.py apply_fsdp: reshard_after_forward = not "
                "pp_enabled ('to avoid per-microbatch all-gathers'): with PP each unit gathered "
                "once a step, its gradients reduce-scattered after the stage's last backward "
                "(Recipe.gather_per_step)",
            ),
            grad_clip=GradClip.FOREACH,
            attention_backend=AttentionBackend.SDPA,
        ),
        SoftwarePreset(
            name="internevo",
            dp_mode=DPMode.ALLREDUCE,
            amp=AmpStyle.HALF_MODEL,
            zero=1,
            overlap_grad_comm=True,
            bucket_elements=512 * 1024 * 1024,
            zero_grad_allreduce=True,
            param_sync=ParamSync.OWNER_BROADCAST,
            sources=(
                "InternLM/InternEvo@34fc28d7 internlm/solver/optimizer/hybrid_zero_optim.py "
                "(HybridZeroOptimizer): gradients all-reduced over the data-parallel group in "
                "the 16-bit model dtype (reduce_tensor with dst_rank=None), bucket by bucket "
                "during the last micro-batch's backward (overlap_sync_grad); the FP32 master "
                "and Adam state of each rank's partition only (zero1); after the step every "
                "owner broadcasts its updated 16-bit partition (broadcast_params)",
                "InternEvo@34fc28d7 configs/7B_sft.py: hybrid_zero_optimizer overlap_sync_grad "
                "= overlap_sync_param = True, reduce_bucket_size = 512 x 1024 x 1024 elements; "
                "internlm/solver/optimizer/utils.py ParamBcastSyncHandler: owners by module "
                "order; HybridZeroOptimizer._step issues the broadcasts after "
                "torch.cuda.synchronize() and broadcast_params ends with another, so the step "
                "returns only once every broadcast is done: not overlapped with the next forward",
                "InternEvo@34fc28d7 configs/7B_sft.py model.use_flash_attn=True: the flash_attn "
                "package's FlashAttention-2 kernels",
            ),
            dispatch_mode="pytorch-eager",
            attention_backend=AttentionBackend.FLASH_ATTENTION_2,
        ),
        SoftwarePreset(
            name="crossbow",
            dp_mode=DPMode.CROSSBOW,
            overlap_grad_comm=True,
            sources=(
                "Koliousis et al., Crossbow, VLDB 2019: m learners per GPU, synchronous model "
                "averaging (SMA) with a central average model, overlapped with the next step",
            ),
        ),
    )
}


#: Optimizer-state dtypes a run may set (``optimizer_dtype``): the ones Apex
#: ``DistributedFusedAdam`` and PyTorch's fused Adam kernels take.
OPTIMIZER_DTYPES = (DType.FP32, DType.BF16, DType.FP16)


@dataclass(frozen=True)
class SoftwareOption:
    """A knob of a stack that a scenario may set beside its preset (``--software-option``):
    ``field`` of :class:`SoftwarePreset`, its kind (``bool``; ``mb``, a bucket size in binary
    megabytes; ``dtype``, one of :data:`OPTIMIZER_DTYPES`; ``count``, a whole number >= 0;
    ``zero-stage``, a ZeRO stage 0-3 or ``none``; ``cross-entropy``, a
    :class:`~perfmodel.parallel.stack_choices.CrossEntropy` or Megatron-Core's
    ``cross_entropy_fusion_impl`` name, ``te`` or ``native``; ``param-owners``, a
    :class:`~perfmodel.parallel.stack_choices.ParamOwners` or InternEvo's ``overlap_sync_param``
    value, ``true`` or ``false``; ``processes``, a
    :class:`~perfmodel.comm.p2p_read.ProcessLayout`), the framework settings that name it (accepted as aliases) and what it does."""

    field: str
    kind: str
    aliases: tuple[str, ...]
    help: str


#: The preset fields a scenario may override by name (``Scenario.software_options``,
#: ``--software-option KEY=VALUE``), for stacks configured per run: NeMo's launcher configs set
#: ``ub_tp_comm_overlap``, ``overlap_grad_sync``, ``grad_sync_dtype``... per model.
SOFTWARE_OPTIONS: dict[str, SoftwareOption] = {
    o.field if o.field != "fp32_grads_bf16" else "grad_reduce_fp32": o
    for o in (
        SoftwareOption(
            "tp_comm_overlap",
            "bool",
            ("ub_tp_comm_overlap",),
            "tensor-parallel collectives overlap the GEMMs (Megatron-Core tp_comm_overlap, NeMo "
            "ub_tp_comm_overlap: Transformer Engine userbuffers); off: on the compute stream",
        ),
        SoftwareOption(
            "overlap_grad_comm",
            "bool",
            ("overlap_grad_reduce", "overlap_grad_sync"),
            "gradient reductions start during backward (Megatron-Core overlap_grad_reduce, "
            "NeMo/Apex overlap_grad_sync)",
        ),
        SoftwareOption(
            "overlap_param_gather",
            "bool",
            ("overlap_param_sync",),
            "distributed-optimizer parameter all-gathers overlap the next forward",
        ),
        SoftwareOption(
            "fp32_grads_bf16",
            "bool",
            ("grad_reduce_in_fp32", "fp32_grad_reduce"),
            "half-model stacks accumulate and reduce bf16/fp8 gradients in FP32 (Megatron-Core "
            "grad_reduce_in_fp32; NeMo distributed_fused_adam grad_sync_dtype fp32, Apex's "
            "default); FSDP2 stacks reduce in FP32 (reduce_dtype)",
        ),
        SoftwareOption(
            "fp8_params",
            "bool",
            ("fp8_param_gather",),
            "FP8 linear weights stored and gathered in FP8 (Megatron --fp8-param-gather, NeMo "
            "fp8_params)",
        ),
        SoftwareOption(
            "optimizer_dtype",
            "dtype",
            ("optim_dtype", "optim.dtype", "exp_avg_dtype"),
            "dtype of the optimizer state (Adam's moments): fp32 (default), bf16 or fp16 (NeMo "
            "optim.dtype, Apex DistributedFusedAdam dtype; Megatron-Core exp_avg_dtype); under "
            "NeMo's Apex optimizer a state in the model's dtype also drops the master copy",
        ),
        SoftwareOption(
            "activation_offload_layers",
            "count",
            ("cpu_offloading_num_layers",),
            "transformer blocks whose saved activations are offloaded to host memory between "
            "their forward and backward (Megatron-Core cpu_offloading_num_layers, activations "
            "only; needs pp=1 and no recomputation, as Megatron-Core does)",
        ),
        SoftwareOption(
            "cross_entropy",
            "cross-entropy",
            ("cross_entropy_fusion_impl",),
            "how the loss keeps its backward's tensors: te-fused (te: Transformer Engine's "
            "parallel_cross_entropy, the 16-bit logits with their gradient written in place), "
            "default (native: FP32 softmax), eager-fp32 (F.cross_entropy on .float() logits; "
            "becomes loss-parallel with tp > 1, as torchtitan does; disable_loss_parallel not "
            "expressible), loss-parallel",
        ),
        SoftwareOption(
            "param_owners",
            "param-owners",
            ("overlap_sync_param",),
            "which rank owns and broadcasts each tensor under owner broadcasts (InternEvo): "
            "module-walk (overlap_sync_param=True, ParamBcastSyncHandler) or size-greedy "
            "(overlap_sync_param=False; InternLM/InternEvo before 2023-08-23)",
        ),
        SoftwareOption(
            "apex_rms_norm",
            "bool",
            (),
            "RMSNorm as apex MixedFusedRMSNorm on the FP32-cast residual, re-run in backward "
            "(InternLM fa7337b, July 2023)",
        ),
        SoftwareOption(
            "fused_rope",
            "bool",
            (),
            "rotary embedding as flash-attention's in-place rotary_emb kernel (InternLM fa7337b)",
        ),
        SoftwareOption(
            "processes",
            "processes",
            (),
            "how the stack maps a server's GPUs onto processes: per-gpu (torchrun, horovodrun, "
            "MultiWorkerMirroredStrategy with a worker per GPU) or per-server (in-graph "
            "replication: MirroredStrategy, tf_cnn_benchmarks, nn.DataParallel); NCCL <= 2.22 "
            "gives same-process NVLink peers direct pointers",
        ),
        SoftwareOption(
            "pipeline_max_zero",
            "zero-stage",
            (),
            "the highest ZeRO stage the stack runs with pipeline parallelism (pp > 1): 0-3, or "
            "none (no limit); the deepspeed presets say 1 (DeepSpeed's PipelineEngine refuses "
            "ZeRO-2/3); a stack that lifts that assertion may state 3",
        ),
        SoftwareOption(
            "bucket_bytes",
            "mb",
            ("bucket_mb", "bucket_cap_mb"),
            "gradient bucket size in MiB (PyTorch DDP bucket_cap_mb, Apex distributed_fused_adam "
            "bucket_cap_mb)",
        ),
    )
}


def software_option_key(name: str, *, where: str = "--software-option") -> str:
    """The :data:`SOFTWARE_OPTIONS` key of ``name`` or one of its aliases.

    >>> software_option_key("ub_tp_comm_overlap"), software_option_key("grad_reduce_in_fp32")
    ('tp_comm_overlap', 'grad_reduce_fp32')
    """
    key = str(name).strip().lower().replace("-", "_")
    if key in SOFTWARE_OPTIONS:
        return key
    for k, o in SOFTWARE_OPTIONS.items():
        if key in o.aliases:
            return k
    aliases = ", ".join(a for o in SOFTWARE_OPTIONS.values() for a in o.aliases)
    raise ConfigError(
        f"{where}: unknown option {name!r}; expected one of {', '.join(SOFTWARE_OPTIONS)} "
        f"(or their framework names: {aliases})",
        value=name,
        where=where,
    )


def _option_value(key: str, value: object, where: str) -> object:
    from perfmodel._schema import parse_flag

    kind = SOFTWARE_OPTIONS[key].kind
    if kind == "bool":
        return parse_flag(value, where=f"{where}: {key}")
    if kind == "cross-entropy":
        return CrossEntropy.parse(value, where=f"{where}: {key}")
    if kind == "param-owners":
        return ParamOwners.parse(value, where=f"{where}: {key}")
    if kind == "processes":
        return ProcessLayout.parse(str(value).strip(), where=f"{where}: {key}")
    if kind == "zero-stage":
        text = str(value).strip().lower()
        if text == "none":  # JSON null reads as None too
            return None
        if text not in ("0", "1", "2", "3"):  # a bool reads as "true"/"false": refused
            raise ConfigError(
                f"{where}: {key} must be a ZeRO stage 0, 1, 2 or 3 (or none: no limit), "
                f"got {value!r}",
                value=value,
                where=f"{where}: {key}",
            )
        return int(text)
    if kind == "count":
        try:
            n = int(str(value).strip()) if not isinstance(value, bool) else -1
        except ValueError:
            n = -1
        if n < 0:
            raise ConfigError(
                f"{where}: {key} must be a whole number >= 0, got {value!r}",
                value=value,
                where=f"{where}: {key}",
            )
        return n
    if kind == "dtype":
        aliases = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
        text = str(value).strip().lower().removeprefix("torch.")
        dt = DType.parse(aliases.get(text, text), where=f"{where}: {key}")
        if dt not in OPTIMIZER_DTYPES:
            raise ConfigError(
                f"{where}: {key} must be one of {', '.join(d.value for d in OPTIMIZER_DTYPES)}, "
                f"got {value!r}",
                value=value,
                where=f"{where}: {key}",
            )
        return dt
    try:
        mb = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        mb = float("nan")
    if not mb > 0 or mb == float("inf"):
        raise ConfigError(
            f"{where}: {key} must be a positive size in MiB, got {value!r}",
            value=value,
            where=f"{where}: {key}",
        )
    return mb * _MB


def with_software_options(
    preset: SoftwarePreset, options: Mapping[str, object], *, where: str = "--software-option"
) -> SoftwarePreset:
    """``preset`` with ``options`` (:data:`SOFTWARE_OPTIONS` names or aliases, values as text,
    bools or numbers) applied; its sources say what the scenario set. A bucket size replaces
    the preset's bucket rule (parameters or elements per bucket).

    >>> p = with_software_options(get_preset("nemo"), {"ub_tp_comm_overlap": "false"})
    >>> p.tp_comm_overlap, p.sources[-1]
    (False, 'scenario software option tp_comm_overlap=False')

    Raises
    ------
    ConfigError
        An unknown option or a value of the wrong kind, naming it.
    """
    if not options:
        return preset
    kw: dict[str, object] = {}
    said = []
    for name, value in options.items():
        key = software_option_key(name, where=where)
        v = _option_value(key, value, where)
        field_name = SOFTWARE_OPTIONS[key].field
        kw[field_name] = v
        if key == "grad_reduce_fp32":
            kw["fp32_grad_reduce"] = v
        if key == "bucket_bytes":
            kw.update(bucket_params=None, bucket_params_per_dp=0.0, bucket_elements=None)
            said.append(f"{key}={float(v) / _MB:g} MiB")  # type: ignore[arg-type]
        else:
            said.append(f"{key}={getattr(v, 'value', v)}")
    return replace(
        preset,
        **kw,  # type: ignore[arg-type]
        sources=(*preset.sources, "scenario software option " + ", ".join(said)),
    )


def get_preset(name: str, *, where: str = "--software") -> SoftwarePreset:
    """Look up a preset by name (case-insensitive); ``where`` names the input in the error.

    Raises
    ------
    ConfigError
        If the name is unknown; lists the presets.
    """
    key = str(name).lower().replace("_", "-")
    if key not in PRESETS:
        raise ConfigError(
            f"unknown software preset {name!r}; expected one of {', '.join(PRESETS)}",
            value=name,
            where=where,
        )
    return PRESETS[key]


def presets_markdown() -> str:
    """The preset table as Markdown (for ``docs/predict.md``)."""
    head = (
        "| preset | DP mode | bucket | overlap | fusion cycle | algorithm | ZeRO | host cost "
        "| conv layout | processes | sources |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for p in PRESETS.values():
        if p.bucket_params is not None:
            bucket = f"max({p.bucket_params:.0e}, {p.bucket_params_per_dp:.0e} x dp) params"
        elif p.bucket_elements is not None:
            bucket = f"{p.bucket_elements:.0e} elements"
        else:
            bucket = "all" if p.bucket_bytes is None else f"{p.bucket_bytes / _MB:.0f} MiB"
        zero = "FSDP" if p.fsdp else str(p.zero)
        if p.distributed_optimizer:
            zero = "distributed optimizer"
        host = []
        if p.host_step_s:
            host.append(f"{p.host_step_s * 1e3:g} ms/step")
        if p.host_split_per_sample_s:
            host.append(f"{p.host_split_per_sample_s * 1e6:.1f} us/sample of other replicas")
        if p.dispatch_per_op_s:
            host.append(f"{p.dispatch_per_op_s * 1e6:g} us/op x replicas (GIL)")
        if p.eager:
            host.append(f"eager issue {p.host_dispatch_s() * 1e6:.2f} us/kernel (step floor)")
        rows.append(
            f"| {p.name} | {p.dp_mode.value} | {bucket} | {'yes' if p.overlap_grad_comm else 'no'} "
            f"| {p.fusion_cycle_s * 1e3:g} ms | {p.comm_algorithm} | {zero} | {'; '.join(host) or '-'} "
            f"| {p.memory_format} | {p.processes.value} | {'; '.join(p.sources)} |"
        )
    return head + "\n".join(rows) + "\n"
