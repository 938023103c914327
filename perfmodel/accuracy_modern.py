"""Today's large-model stacks: the ``modern.jsonl`` rows mapped to scenarios and predicted.

The rows (shipped in ``validation/modern.jsonl``; schema in that directory's README) are
torchtitan's December 2024 Llama 3.1 H100 tables (``--software torchtitan``), NVIDIA NeMo 24.07
FP8 DGX-H100 pre-training table (``--software nemo`` with each model's launcher configuration,
:data:`NEMO_2407_RECIPES`) and Megatron-Bridge 26.04.01 (``--software megatron-core``).
Two mappings split them:

* :func:`map_dense_row`: dense rows without context parallelism, on H100;
* :func:`map_moe_cp_row`: mixture-of-experts rows (Qwen3, DeepSeek-V3; H100 and B200) and
  context-parallel rows (``cp > 1``); :data:`MOE_CP_ROWS` are the ones quick enough for the
  validation tier and the accuracy table (the 256- to 1024-GPU rows take longer).

Each mapped row is predicted with the analytic executor; its error is signed,
``predicted / measured - 1`` of tokens per second per GPU. ``model_flops_per_gpu_per_s`` rows
restate the same runs in each source's own FLOP convention and are skipped (not independent
measurements). Nothing here feeds the model: no constant is fitted to these rows.

Assumed where a row is silent (each row's ``note`` states it): sequence parallelism with every
``tp > 1`` (Megatron-Core recipes and torchtitan's TP plan both shard the norms' sequence), no
recomputation where "not stated", AdamW; MXFP8 and FP8 are ``fp8``; DeepSeek-V3 without its
multi-token-prediction module (the zoo's ``deepseek_v3``). torchtitan's ``torch.compile`` rows
run the compiled kernels (``Scenario.compile``) and its async-TP rows are predicted as plain TP;
FP8 rows take the recipe they state (MXFP8, TE current scaling), their Megatron-Bridge config's
(:attr:`MoeRecipe.fp8_recipe`) or the stack's default.
torchtitan's rows run on the 96 GB HBM2e, 500 W H100 their hardware line states (:func:`_gpu`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from perfmodel.api import Scenario, predict
from perfmodel.errors import PerfModelError
from perfmodel.units import GiB

#: MoE and context-parallel rows predicted by the validation tier and the accuracy table: every
#: tokens/s row of ``modern.jsonl`` with experts or ``cp > 1``, 8 to 1,024 GPUs (about 10 s in
#: all with the analytic executor).
MOE_CP_ROWS = (
    "mbridge-260401-h100-qwen3-30b-16g-tokens",
    "mbridge-260401-b200-qwen3-30b-8g-tokens",
    "mbridge-260401-h100-qwen3-235b-256g-tokens",
    "mbridge-260401-b200-qwen3-235b-256g-tokens",
    "mbridge-260401-b200-dsv3-256g-tokens",
    "nemo2407-h100-llama3-8b-tokens",
    "nemo2407-h100-llama3-70b-tokens",
    "mbridge-260401-h100-llama31-405b-1024g-gbs1536-tokens",
    "tt-2412-t2-8b-fsdp4-cp2",
    "tt-2412-t2-8b-fsdp2-cp4",
    "tt-2412-t2-8b-fsdp1-cp8",
    "tt-2412-t6-405b-512g-fsdp4-cp2",
    "tt-2412-t6-405b-512g-fsdp2-cp4",
    "tt-2412-t6-405b-512g-fsdp1-cp8",
)


@dataclass(frozen=True)
class MoeRecipe:
    """Expert-parallel settings of the Megatron-Bridge performance config a MoE row ran with
    (the row's table names the model, GPU, precision and parallel sizes; the config at the
    same commit says the rest).

    Attributes
    ----------
    dispatcher
        ``Scenario.moe_dispatcher``: ``alltoall``, or the flex dispatcher's backend
        (``deepep``, ``hybridep``).
    ep_overlap
        ``moe_a2a_overlap`` (Megatron-Core ``overlap_moe_expert_parallel_comm``).
    source
        The config and the lines that set them.
    recompute_modules
        Megatron-Core ``recompute_modules`` of a selective-recompute config
        (``Scenario.recompute_modules``), ``None`` where the config recomputes nothing.
    fp8_recipe
        ``Scenario.fp8_recipe`` of the config's precision where the row does not name it:
        ``te-current`` for the H100 ``*_FP8_CS_*`` configs (``scripts/performance/utils/
        precision.py`` ``get_precision_config("fp8_cs")``: ``bf16_with_fp8_current_scaling_mixed``),
        ``None`` otherwise (MXFP8 rows state their recipe).
    """

    dispatcher: str
    ep_overlap: bool
    source: str
    recompute_modules: str | None = None
    fp8_recipe: str | None = None


#: The Megatron-Bridge repository at the commit every 26.04.01 row's recipe is read from, as the
#: sources spell it (a path inside the repository follows).
MBRIDGE_AT = "NVIDIA-NeMo/Megatron-Bridge @21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6 "

#: Its performance configs folder (the rows' base configs).
MBRIDGE_PERF_CONFIGS = MBRIDGE_AT + "scripts/performance/configs/"

#: The Megatron-Bridge 26.04.01 MoE rows' recipes by (model name prefix, GPU). The
#: ``*_llm_pretrain.py`` functions set ``moe_token_dispatcher_type`` ("flex" or "alltoall") and
#: ``set_workload_base_configs`` applies the base config's ``moe_flex_dispatcher_backend``
#: (``apply_flex_dispatcher_backend``) and ``moe_a2a_overlap`` (default False,
#: ``scripts/performance/utils/utils.py`` ``WorkloadBaseConfig``).
MBRIDGE_MOE_RECIPES: Mapping[tuple[str, str], MoeRecipe] = {
    ("Qwen3-30B-A3B", "B200"): MoeRecipe(
        "hybridep",
        False,
        MBRIDGE_PERF_CONFIGS
        + "qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1"
        " (= B200_BF16_V1: moe_flex_dispatcher_backend='hybridep'); qwen3_llm_pretrain.py "
        "qwen3_30b_a3b_pretrain_config_b200: moe_token_dispatcher_type='flex'",
    ),
    ("Qwen3-30B-A3B", "H100"): MoeRecipe(
        "hybridep",
        False,
        MBRIDGE_PERF_CONFIGS
        + "qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1"
        " (moe_flex_dispatcher_backend='hybridep', moe_a2a_overlap=False); qwen3_llm_pretrain.py "
        "qwen3_30b_a3b_pretrain_config_h100: moe_token_dispatcher_type='flex'",
        fp8_recipe="te-current",
    ),
    ("Qwen3-235B-A22B", "B200"): MoeRecipe(
        "alltoall",
        False,
        MBRIDGE_PERF_CONFIGS
        + "qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2"
        " (= B200_FP8_CS_V1 at 256 GPUs, GBS 8192: moe_a2a_overlap=False, no flex backend); "
        "qwen3_llm_pretrain.py qwen3_235b_a22b_pretrain_config_b200: "
        "moe_token_dispatcher_type='alltoall'",
    ),
    ("Qwen3-235B-A22B", "H100"): MoeRecipe(
        "alltoall",
        True,
        MBRIDGE_PERF_CONFIGS
        + "qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2"
        " (= H100_FP8_CS_V1, GBS 8192: moe_a2a_overlap=True, no flex backend); "
        "qwen3_llm_pretrain.py qwen3_235b_a22b_pretrain_config_h100: "
        "moe_token_dispatcher_type='alltoall'",
        fp8_recipe="te-current",
    ),
    ("DeepSeek-V3", "B200"): MoeRecipe(
        "deepep",
        True,
        MBRIDGE_PERF_CONFIGS + "deepseek/deepseek_workload_base_configs.py "
        "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (moe_flex_dispatcher_backend='deepep', "
        "moe_a2a_overlap=True, PP 8, VP 2, EP 32, recompute_modules=['mla_up_proj', 'mlp']); "
        "deepseek_llm_pretrain.py set_deepseek_v3_common_configs: "
        "recompute_granularity='selective'",
        recompute_modules="mla_up_proj,mlp",
    ),
}


@dataclass(frozen=True)
class NemoRecipe:
    """What a NeMo 24.07 performance-table row ran beside the sizes the table states: the
    model's NeMo-Framework-Launcher 24.07 training configuration and the example script for
    the model's FP8 runs (the table gives GBS, MBS, TP, PP, CP, VP and FP8; the rest is the
    config's). NeMo 24.07 is NeMo 1.0: Megatron-Core GPT with Transformer Engine and Apex's
    ``distributed_fused_adam`` (the ``nemo`` preset), whose knobs vary by model.

    Attributes
    ----------
    tp_comm_overlap
        ``ub_tp_comm_overlap`` (Transformer Engine userbuffers) of the config.
    grad_reduce_fp32
        The gradient reduce-scatter runs in FP32: ``optim.grad_sync_dtype`` unset, Apex
        ``DistributedFusedAdam``'s default (the optimizer dtype, FP32); ``False`` where the
        config or the example script sets ``grad_sync_dtype=bf16``.
    bucket_mb
        ``optim.bucket_cap_mb``.
    model_args
        Zoo arguments the config fixes and the row does not state (Nemotron: no biases, no
        dropout, untied embeddings).
    source
        The files read.
    optimizer_dtype
        ``optim.dtype`` where the config sets it (Apex ``DistributedFusedAdam``'s state dtype,
        ``--software-option optimizer_dtype``); ``None``: unset, Apex's FP32.
    recompute
        ``activations_checkpoint_granularity`` where the config sets it (``Scenario.recompute``
        of a row that states none); ``None``: null in the config, no recomputation.
    """

    tp_comm_overlap: bool
    grad_reduce_fp32: bool
    bucket_mb: float
    source: str
    model_args: Mapping[str, Any] = field(default_factory=dict)
    optimizer_dtype: str | None = None
    recompute: str | None = None

    def software_options(self) -> dict[str, Any]:
        """``Scenario.software_options`` of the recipe (on the ``nemo`` preset)."""
        opts: dict[str, Any] = {
            "tp_comm_overlap": self.tp_comm_overlap,
            "grad_reduce_fp32": self.grad_reduce_fp32,
            "bucket_bytes": self.bucket_mb,
        }
        if self.optimizer_dtype is not None:
            opts["optimizer_dtype"] = self.optimizer_dtype
        return opts


_NFL = "NVIDIA/NeMo-Framework-Launcher 24.07 (8325688d) "
_CONF = _NFL + "launcher_scripts/conf/training/"
_NEMOTRON_ARGS = {"bias": False, "dropout": False, "tied_embeddings": False}
_NEMOTRON_SRC = (
    " (bias: false, hidden_dropout/attention_dropout 0.0, share_embeddings_and_output_weights: "
    "false, ub_tp_comm_overlap: true, bucket_cap_mb: 100, no grad_sync_dtype: Apex "
    "DistributedFusedAdam reduces in its dtype, FP32); examples/training/nemotron/h100/"
    "nemotron_*_fp8.sh set no grad_sync_dtype"
)

#: The NeMo 24.07 performance rows' recipes by the table's model name and, where one model
#: has rows of different origin, GPU count. The GPT3-175B row on 512 GPUs links its TFLOP/s to
#: MLPerf: NVIDIA's MLPerf Training v4.0 GPT-3 submission at that size (tp 4, pp 8, micro-batch
#: 2) sets TP_COMM_OVERLAP=True, unlike the launcher's gpt3/175b.yaml.
NEMO_2407_RECIPES: Mapping[tuple[str, int | None], NemoRecipe] = {
    ("GPT3-5B", None): NemoRecipe(
        False,
        False,
        400,
        _CONF + "gpt3/5b.yaml; examples/training/gpt/h100/5b_fp8_8node.sh "
        "(+training.model.optim.grad_sync_dtype=bf16)",
    ),
    ("GPT3-20B", None): NemoRecipe(
        True,
        False,
        220,
        _CONF + "gpt3/20b.yaml (ub_tp_comm_overlap: True); "
        "examples/training/gpt/h100/20b_fp8_8node.sh (grad_sync_dtype=bf16)",
    ),
    ("GPT3-175B", None): NemoRecipe(
        False,
        False,
        220,
        _CONF + "gpt3/175b.yaml (ub_tp_comm_overlap: False); "
        "examples/training/gpt/h100/175b_fp8_16node.sh (128 GPUs, grad_sync_dtype=bf16)",
    ),
    ("GPT3-175B", 512): NemoRecipe(
        True,
        False,
        100,
        "mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/"
        "implementations/nemo/config_DGXH100_64x8x128x4x8_mbs2.sh (TP_COMM_OVERLAP=True, "
        "MICRO_BATCH_SIZE=2) and conf/optim/distributed_fused_adam.yaml (grad_sync_dtype: bf16, "
        "bucket_cap_mb 100)",
    ),
    ("LLAMA2-7B", None): NemoRecipe(
        False,
        False,
        125,
        _CONF + "llama/llama2_7b.yaml; examples/training/llama/h100/"
        "llama2_7b_fp8.sh (grad_sync_dtype=bf16)",
    ),
    ("LLAMA2-13B", None): NemoRecipe(
        False,
        False,
        125,
        _CONF + "llama/llama2_13b.yaml; examples/training/llama/h100/"
        "llama2_13b_fp8.sh (grad_sync_dtype=bf16)",
    ),
    ("LLAMA2-70B", None): NemoRecipe(
        True,
        False,
        125,
        _CONF + "llama/llama2_70b.yaml (ub_tp_comm_overlap: true); "
        "examples/training/llama/h100/llama2_70b_fp8.sh (grad_sync_dtype=bf16)",
    ),
    ("LLAMA3-8B", None): NemoRecipe(
        False,
        False,
        125,
        _CONF + "llama/llama3_8b.yaml; examples/training/llama/h100/"
        "llama3_8b_fp8.sh (grad_sync_dtype=bf16)",
    ),
    ("LLAMA3-70B", None): NemoRecipe(
        True,
        False,
        125,
        _CONF + "llama/llama3_70b.yaml (ub_tp_comm_overlap: true); "
        "examples/training/llama/h100/llama3_70b_fp8.sh (grad_sync_dtype=bf16, "
        "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192)",
    ),
    ("Nemotron-8B", None): NemoRecipe(
        True, True, 100, _CONF + "nemotron/nemotron_8b.yaml" + _NEMOTRON_SRC, _NEMOTRON_ARGS
    ),
    ("Nemotron-22B", None): NemoRecipe(
        True, True, 100, _CONF + "nemotron/nemotron_22b.yaml" + _NEMOTRON_SRC, _NEMOTRON_ARGS
    ),
    ("Nemotron-340B", None): NemoRecipe(
        False,
        False,
        50,
        _CONF + "nemotron/nemotron_340b.yaml (bias: false, dropout 0.0, untied, num_query_groups "
        "8, ub_tp_comm_overlap: False, activations_checkpoint_granularity: selective, optim "
        "grad_sync_dtype: bf16, dtype: bf16, bucket_cap_mb: 50): Apex DistributedFusedAdam "
        "keeps Adam's moments in bf16 and, the model being bf16 too, no master copy "
        "(NeMo r2.0.0rc1 megatron_base_model.py setup_optimization: store_params=False)",
        _NEMOTRON_ARGS,
        optimizer_dtype="bf16",
        recompute="selective",
    ),
}


def nemo_recipe(row: Mapping[str, Any]) -> NemoRecipe | None:
    """The :data:`NEMO_2407_RECIPES` entry of a NeMo 24.07 performance row (its source names
    the table row, ``row GPT3-175B (128 GPUs)``), ``None`` for any other row."""
    if "24.07" not in str(row.get("software", "")):
        return None
    m = re.search(r"row (\S+) \((\d+) GPUs\)", str(row.get("source", "")))
    if m is None:
        return None
    name, gpus = m.group(1), int(m.group(2))
    return NEMO_2407_RECIPES.get((name, gpus)) or NEMO_2407_RECIPES.get((name, None))


def moe_recipe(row: Mapping[str, Any]) -> MoeRecipe | None:
    """The :data:`MBRIDGE_MOE_RECIPES` entry of a Megatron-Bridge MoE row, ``None`` otherwise."""
    if not row["id"].startswith("mbridge-") or "experts" not in row["model"]:
        return None
    name, gpu = str(row["model"]["name"]), str(row["system"]["gpu"])
    for (model, kind), recipe in MBRIDGE_MOE_RECIPES.items():
        if name.startswith(model) and kind in gpu:
            return recipe
    return None


def _recompute(text: str | None) -> str:
    """``full`` / ``selective`` from the row's ``recompute`` text; ``none`` otherwise."""
    t = (text or "").lower()
    return "full" if t.startswith("full") else "selective" if t.startswith("selective") else "none"


def _nemo_recompute(text: str | None, nemo: NemoRecipe | None) -> str:
    """The row's recomputation (:func:`_recompute`), or its NeMo config's where the row
    states none."""
    stated = _recompute(text)
    if stated == "none" and nemo is not None and nemo.recompute is not None:
        return nemo.recompute
    return stated


def _model(m: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Zoo model and arguments of a row's ``model`` block.

    DeepSeek-V3 (a ``dense_layers`` field) is the zoo's ``deepseek_v3``; rows with ``experts``
    are ``moe``; gated (SwiGLU) MLPs are ``llama``, two-matrix MLPs ``gpt``.
    """
    seq = int(m["seq_len"])
    if "dense_layers" in m:  # DeepSeek-V3 (shape of the zoo entry; MTP not modelled)
        return "deepseek_v3", {"seq_len": seq}
    common = {
        "hidden": int(m["hidden"]),
        "layers": int(m["layers"]),
        "heads": int(m["heads"]),
        "vocab": int(m["vocab"]),
        "seq_len": seq,
    }
    if "experts" in m:
        moe = {
            "experts": int(m["experts"]),
            "top_k": int(m["top_k"]),
            "expert_ffn_hidden": int(m["expert_ffn_hidden"]),
            "ffn_hidden": int(m["expert_ffn_hidden"]),
            "shared_experts": int(m.get("shared_experts") or 0),
        }
        if m.get("head_dim"):
            moe["head_dim"] = int(m["head_dim"])
        if "qk-layernorm" in str(m.get("mlp", "")):
            moe["qk_norm"] = True
        return "moe", {**common, "kv_heads": int(m.get("kv_heads") or m["heads"]), **moe}
    common["ffn_hidden"] = int(m["ffn_hidden"])
    mlp = str(m.get("mlp", "")).lower()
    if "swiglu" in mlp:
        return "llama", {**common, "kv_heads": int(m.get("kv_heads") or m["heads"])}
    if m.get("kv_heads"):  # grouped-query attention (Nemotron-4 340B: 8 groups)
        common["kv_heads"] = int(m["kv_heads"])
    if "squared-relu" in mlp:  # Nemotron: relu(x W1)^2 W2
        common["mlp"] = "relu2"
    if "rope" in mlp:  # the row's architecture text names rotary positions
        common["position"] = "rope"
    return "gpt", common


def _gpu(row: Mapping[str, Any]) -> str | None:
    """Catalogue GPU of a row whose part differs from its system's default, else ``None``.

    torchtitan's December 2024 H100 rows ran on Grand Teton hosts with 96 GB HBM2e H100s at a
    500 W power limit (the row's ``system.gpu`` says so): ``H100-SXM5-96GB-500W``, not the 700 W,
    80 GB HBM3 part of ``dgx-h100``.
    """
    text = str(row["system"]["gpu"]).lower()
    if "h100" in text and "96 gb" in text and "500 w" in text:
        return "H100-SXM5-96GB-500W"
    return None


def megatron_plan(p: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`Scenario` plan keys of a row's ``parallel`` table (Megatron's names: ``tp``,
    ``pp``, ``cp``, ``ep``, ``expert_tensor_parallel``, ``micro_batch``, ``virtual_pipeline``):
    interleaving only with ``pp > 1``, sequence parallelism with ``tp > 1`` (the published
    Megatron-Core and NeMo runs set ``--sequence-parallel`` with tensor parallelism)."""
    tp, pp = int(p["tp"]), int(p["pp"])
    v = int(p.get("virtual_pipeline") or 1)
    return {
        "tp": tp,
        "pp": pp,
        "cp": int(p.get("cp") or 1),
        "ep": int(p.get("ep") or 1),
        "etp": p.get("expert_tensor_parallel"),
        "microbatch": int(p["micro_batch"]),
        "interleave": v if pp > 1 else 1,
        "sequence_parallel": tp > 1,
    }


def _scenario(row: Mapping[str, Any], system: str) -> Scenario:
    """The :class:`Scenario` of a mapped row on ``system`` (plan, batch and precision as stated)."""
    m, p, s = row["model"], row["parallel"], row["system"]
    name, args = _model(m)
    nemo = nemo_recipe(row)
    if nemo is not None:
        args = {**args, **nemo.model_args}
    gpus = int(s["gpus"])
    prec = str(row["precision"]).lower()
    return Scenario(
        system=system,
        nodes=math.ceil(gpus / 8),
        gpus=gpus,
        gpu=_gpu(row),
        model=name,
        model_args=args,
        global_batch=int(p["global_batch"]),
        precision="fp8" if "fp8" in prec else prec,
        optimizer="adamw",
        **megatron_plan(p),
        recompute=_nemo_recompute(p.get("recompute"), nemo),
        software=_software(row),
        fidelity="analytic",
        compile=_compiled(row),
        fp8_recipe=_fp8_recipe(row),
        software_options=_software_options(row),
    )


def _compiled(row: Mapping[str, Any]) -> bool | None:
    """``True`` for the torchtitan rows run under ``torch.compile`` (their table or row names
    it, e.g. "FSDP + torch.compile"); ``None`` (the preset's kernels) otherwise."""
    if row["id"].startswith("tt-") and "torch.compile" in str(row.get("note", "")):
        return True
    return None


def _fp8_recipe(row: Mapping[str, Any]) -> str | None:
    """The FP8 recipe a row states: ``mxfp8`` for MXFP8 rows, Transformer Engine current
    scaling where the row says "current scaling" (Megatron-Bridge ``fp8_cs``); ``None`` (the
    preset's: TE delayed scaling for Megatron-Core/NeMo 24.07, torchao tensor-wise for
    torchtitan) otherwise."""
    prec = str(row["precision"]).lower()
    if "mxfp8" in prec:
        return "mxfp8"
    if "fp8" in prec and "current scaling" in str(row.get("note", "")).lower():
        return "te-current"
    return None


def _software(row: Mapping[str, Any]) -> str:
    """torchtitan for its rows (ids ``tt-``), ``nemo`` for NeMo 24.07's (NeMo 1.0 with Apex
    ``distributed_fused_adam``: :data:`NEMO_2407_RECIPES`), Megatron-Core for Megatron-Bridge."""
    if row["id"].startswith("tt-"):
        return "torchtitan"
    return "nemo" if nemo_recipe(row) is not None else "megatron-core"


#: ``Scenario.software_options`` of every Megatron-Bridge performance row: the perf scripts
#: set ``cross_entropy_fusion_impl = "te"`` (``scripts/performance/utils/overrides.py``) over
#: the recipes' ``cross_entropy_loss_fusion=True`` (``GPTModelProvider`` default), Transformer
#: Engine's in-place cross entropy (``CrossEntropy.TE_FUSED``).
MBRIDGE_SOFTWARE_OPTIONS: Mapping[str, Any] = {"cross_entropy": "te-fused"}


def _software_options(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's :class:`NemoRecipe` knobs (``Scenario.software_options``), Megatron-Bridge's
    :data:`MBRIDGE_SOFTWARE_OPTIONS`, else none."""
    nemo = nemo_recipe(row)
    if nemo is not None:
        return nemo.software_options()
    return dict(MBRIDGE_SOFTWARE_OPTIONS) if row["id"].startswith("mbridge-") else {}


def _is_moe_or_cp(row: Mapping[str, Any]) -> bool:
    p = row["parallel"]
    return "experts" in row["model"] or int(p.get("ep") or 1) > 1 or int(p.get("cp") or 1) > 1


def map_dense_row(row: Mapping[str, Any]) -> Scenario | str:
    """A :class:`Scenario` for a dense, non-context-parallel H100 row, or why it is skipped.

    Megatron-Core needs equal pipeline stages (``layers`` divisible by ``pp x v``); torchtitan
    rows are not held to it.
    """
    m, p, s = row["model"], row["parallel"], row["system"]
    if "experts" in m or int(p.get("ep") or 1) > 1:
        return "MoE (predicted in test_moe_cp_validation.py)"
    if int(p.get("cp") or 1) > 1:
        return "context parallel (predicted in test_moe_cp_validation.py)"
    if row["metric"] != "tokens_per_s_per_gpu":
        return "FLOP/s restatement of a tokens/s row"
    if "H100" not in s["gpu"]:
        return f"GPU {s['gpu']!r} not mapped"
    v = int(p.get("virtual_pipeline") or 1)
    if int(m["layers"]) % (int(p["pp"]) * v) and _software(row) != "torchtitan":
        return "layers not divisible by pp x v (Megatron needs equal stages)"
    return _scenario(row, "dgx-h100")


def map_moe_cp_row(row: Mapping[str, Any]) -> Scenario | str:
    """A :class:`Scenario` for a MoE or context-parallel row, or why it is not mapped.

    Expert tensor parallelism as the row states; token-dropless with forced balance as the
    Megatron-Bridge footnote says (the default ``load_imbalance = 1``); the token dispatcher,
    the combined-1F1B overlap, the selective recomputation modules and the FP8 recipe of the
    Megatron-Bridge MoE rows from their recipes (:data:`MBRIDGE_MOE_RECIPES`).
    """
    if not _is_moe_or_cp(row):
        return "neither MoE nor context parallel"
    if row["metric"] != "tokens_per_s_per_gpu":
        return "FLOP/s restatement of a tokens/s row"
    gpu = row["system"]["gpu"]
    system = "dgx-b200" if "B200" in gpu else "dgx-h100" if "H100" in gpu else None
    if system is None:
        return f"GPU {gpu!r} not mapped"
    sc = _scenario(row, system)
    recipe = moe_recipe(row)
    if recipe is not None:
        sc = replace(sc, moe_dispatcher=recipe.dispatcher, ep_overlap=recipe.ep_overlap)
        if recipe.recompute_modules:
            sc = replace(sc, recompute="selective", recompute_modules=recipe.recompute_modules)
        if recipe.fp8_recipe and sc.fp8_recipe is None and sc.precision == "fp8":
            sc = replace(sc, fp8_recipe=recipe.fp8_recipe)
    return sc


@dataclass(frozen=True)
class ModernPrediction:
    """One predicted row: tokens/s per GPU predicted, memory per GPU (GiB) and whether it fits."""

    row: Mapping[str, Any]
    tokens_per_s_per_gpu: float
    memory_gib: float
    fits: bool

    @property
    def error(self) -> float:
        """Signed error ``predicted / measured - 1`` of tokens per second per GPU."""
        return self.tokens_per_s_per_gpu / float(self.row["measured"]) - 1


@dataclass(frozen=True)
class ModernResults:
    """Predicted rows, skip reasons with their counts, and ``(id, message)`` of failed rows."""

    done: tuple[ModernPrediction, ...]
    skipped: Mapping[str, int] = field(default_factory=dict)
    failed: tuple[tuple[str, str], ...] = ()


def _predict_rows(
    rows: Iterable[Mapping[str, Any]],
    mapper: Callable[[Mapping[str, Any]], Scenario | str],
    *,
    unmapped_fails: bool = False,
) -> ModernResults:
    done: list[ModernPrediction] = []
    skipped: dict[str, int] = {}
    failed: list[tuple[str, str]] = []
    for row in rows:
        sc = mapper(row)
        if isinstance(sc, str) and unmapped_fails:
            failed.append((row["id"], f"not mapped: {sc}"))
            continue
        if isinstance(sc, str):
            skipped[sc] = skipped.get(sc, 0) + 1
            continue
        try:
            r = predict(sc, baseline=False)
        except PerfModelError as exc:
            failed.append((row["id"], str(exc)))
            continue
        done.append(
            ModernPrediction(
                row, r.tokens_per_s_per_gpu, r.memory_per_gpu_bytes / GiB, r.fits_in_memory
            )
        )
    return ModernResults(tuple(done), skipped, tuple(failed))


def dense_results(rows: Iterable[Mapping[str, Any]]) -> ModernResults:
    """Every row :func:`map_dense_row` maps, predicted (a few seconds on 2 cores)."""
    return _predict_rows(rows, map_dense_row)


def moe_cp_results(rows: Iterable[Mapping[str, Any]]) -> ModernResults:
    """The :data:`MOE_CP_ROWS` of ``rows``, predicted with :func:`map_moe_cp_row`.

    A row of :data:`MOE_CP_ROWS` that :func:`map_moe_cp_row` does not map counts as failed.
    """
    by_id = {r["id"]: r for r in rows}
    picked = [by_id[i] for i in MOE_CP_ROWS if i in by_id]
    return _predict_rows(picked, map_moe_cp_row, unmapped_fails=True)
