"""The hardware of 2026: the ``systems2026.jsonl`` rows mapped to scenarios and predicted.

The rows (shipped in ``validation/systems2026.jsonl``, the ``modern.jsonl`` schema) are the
Megatron-Bridge 26.04.01 performance summary's GB300 NVL72, GB200 NVL72 and B300 rows
(``NVIDIA-NeMo/Megatron-Bridge@21d102f5``, ``docs/performance-summary.md``, the document and commit
of ``modern.jsonl``'s Megatron-Bridge rows): Llama 3 70B, Llama 3.1 405B, DeepSeek-V3, GPT-OSS
120B, Qwen3-30B-A3B and -235B-A22B, Kimi K2 and Nemotron 3. :func:`map_row` turns one into a
:class:`~perfmodel.api.Scenario` or says why it is not mapped:

* system: GB300 and GB200 rows run on NVL72 racks (``gb300-nvl72``, ``gb200-nvl72``: one rack of
  72 GPUs is one server, ``ceil(gpus / 72)`` racks), B300 rows on DGX B300 (``hgx-b300``, 8 per
  node); AMD Instinct rows map to ``mi300x-8`` / ``mi325x-8`` / ``mi355x-8``;
* model: the zoo entry of each (``llama`` with the stated shape, ``deepseek_v3`` with its
  multi-token-prediction module as the recipe trains it, ``gpt_oss_120b``, ``qwen3_30b_a3b``,
  ``qwen3_235b_a22b``; Kimi K2 as ``deepseek_v3`` with its own shape and no MTP);
* precision: FP8 is Transformer Engine current scaling (``te-current``: the perf scripts'
  ``fp8_cs``), MXFP8 ``mxfp8``; NVFP4 rows are not mapped (no training precision of the model
  runs FP4 GEMMs);
* plan: as stated (sequence parallelism with every ``tp > 1``); FSDP > 0 is Megatron FSDP
  (``zero=3``), FSDP = 0 the distributed optimizer (the ``megatron-core`` preset's); selective
  recomputation of the ``recompute_modules`` the row names (``selective: mla_up_proj``), none
  otherwise (``layernorm`` is not modelled: its norms' outputs stay counted, an over-estimate);
  the activation CPU offloading of the Megatron FSDP Llama 3 70B recipes
  (``cpu_offloading_num_layers``, :data:`ACTIVATION_OFFLOAD_2026`); Transformer Engine's
  in-place cross entropy (:data:`~perfmodel.accuracy_modern.MBRIDGE_SOFTWARE_OPTIONS`);
* MoE rows: the token dispatcher and the all-to-all overlap of each recipe
  (:data:`MOE_RECIPES_2026`), force-balanced and dropless as the document's footnote says;
* pipeline layouts: the layout a row's recipe states (Megatron-Core
  ``pipeline_model_parallel_layout``, :data:`PIPELINE_LAYOUTS_2026`: DeepSeek-V3 and Kimi K2),
  not the time-balanced cut;
* not mapped: hybrid Mamba-2/attention models (Nemotron 3, not in the zoo) and Muon (Kimi K2:
  its one momentum buffer is the ``momentum`` optimizer's state, its Newton-Schulz iterations are
  not modelled, so the row is mapped with that caveat in its note; its routing is one group,
  ``n_group = topk_group = 1``, as its ``config.json`` states); plans with more pipeline chunks
  than layers (Llama 3.1 405B on GB200 with PP 16 x VP 8 = 128 chunks for 126 layers: Megatron
  counts the embedding and the loss as pipeline layers, which the lowering does not).

Not modelled: CUDA graphs. The offloaded activations' copies are timed over NVLink-C2C on their
own stream beside compute (:mod:`perfmodel.parallel.offload`; they hide behind these rows'
blocks). Errors are signed, ``predicted / measured - 1`` of
tokens per second per GPU. Nothing here feeds the model: no constant is fitted to these rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfmodel.accuracy_modern import (
    MBRIDGE_AT,
    MBRIDGE_PERF_CONFIGS,
    MBRIDGE_SOFTWARE_OPTIONS,
    ModernResults,
    _predict_rows,
    megatron_plan,
)
from perfmodel.api import Scenario

#: System of each GPU named in a row (first match wins); its GPUs per server come from the
#: catalogue file (:func:`perfmodel.topology.builders.gpus_per_server`).
SYSTEMS: tuple[tuple[str, str], ...] = (
    ("GB300", "gb300-nvl72"),
    ("GB200", "gb200-nvl72"),
    ("B300", "hgx-b300"),
    ("MI355X", "mi355x-8"),
    ("MI325X", "mi325x-8"),
    ("MI300X", "mi300x-8"),
)


@dataclass(frozen=True)
class MoeRecipe2026:
    """Token dispatcher (``Scenario.moe_dispatcher``) and all-to-all overlap
    (``Scenario.ep_overlap``) of one Megatron-Bridge MoE performance recipe, with its source."""

    dispatcher: str
    ep_overlap: bool
    source: str


#: The 26.04.01 MoE rows' recipes by (model name prefix, GPU). The ``*_llm_pretrain.py``
#: functions set ``moe_token_dispatcher_type`` ('flex' with the base config's
#: ``moe_flex_dispatcher_backend``; the gpt-oss bridge's 'alltoall' where the base config names
#: no backend) and ``set_workload_base_configs`` applies ``moe_a2a_overlap`` (default False).
MOE_RECIPES_2026: Mapping[tuple[str, str], MoeRecipe2026] = {
    **{
        (model, gpu): MoeRecipe2026(
            "hybridep",
            False,
            MBRIDGE_PERF_CONFIGS
            + f"qwen/qwen3_workload_base_configs.py {name}_PRETRAIN_CONFIG_{gpu}_FP8_MX_"
            f"{variant} (moe_flex_dispatcher_backend='hybridep'); qwen3_llm_pretrain.py: "
            "moe_token_dispatcher_type 'flex'",
        )
        for model, name, variant in (
            ("Qwen3-30B-A3B", "QWEN3_30B_A3B", "V1"),
            ("Qwen3-235B-A22B", "QWEN3_235B_A22B", "V2"),
        )
        for gpu in ("GB300", "GB200", "B300")
    },
    **{
        ("DeepSeek-V3", gpu): MoeRecipe2026(
            "hybridep",
            False,
            MBRIDGE_PERF_CONFIGS
            + f"deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_{gpu}"
            "_V2 (moe_flex_dispatcher_backend='hybridep', moe_a2a_overlap=False)",
        )
        for gpu in ("GB300", "GB200", "B300")
    },
    **{
        ("GPT-OSS 120B", gpu): MoeRecipe2026(
            dispatcher,
            overlap,
            MBRIDGE_PERF_CONFIGS + f"gpt_oss/gpt_oss_workload_base_configs.py {config} ({why})",
        )
        for gpu, config, dispatcher, overlap, why in (
            (
                "GB300",
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_V2",
                "alltoall",
                False,
                "no flex backend: the bridge's moe_token_dispatcher_type 'alltoall'",
            ),
            (
                "GB200",
                "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2",
                "alltoall",
                True,
                "moe_a2a_overlap=True, no flex backend",
            ),
            (
                "B300",
                "GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2",
                "hybridep",
                False,
                "moe_flex_dispatcher_backend='hybridep'",
            ),
        )
    },
    ("Kimi K2", "GB300"): MoeRecipe2026(
        "hybridep",
        False,
        MBRIDGE_PERF_CONFIGS + "kimi/kimi_workload_base_configs.py KIMI_K2_PRETRAIN_CONFIG_GB300 "
        "(moe_flex_dispatcher_backend='hybridep', moe_a2a_overlap=False); kimi_llm_pretrain.py: "
        "apply_flex_dispatcher_backend, optimizer 'muon' by default",
    ),
}


#: Megatron FSDP recipes that offload the activations of their first ``n`` transformer layers to
#: the Grace CPU (``scripts/performance/utils/overrides.py``: ``cpu_offloading=True``,
#: ``cpu_offloading_weights=False``, ``cpu_offloading_num_layers=n``), by (model name prefix,
#: GPU, row precision): ``(n, source)``.
ACTIVATION_OFFLOAD_2026: Mapping[tuple[str, str, str], tuple[int, str]] = {
    ("Llama 3 70B", gpu, "FP8"): (
        n,
        MBRIDGE_PERF_CONFIGS
        + f"llama/llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_{gpu}_FP8_CS_V2 "
        f"(use_megatron_fsdp=True, cpu_offloading_num_layers={n})",
    )
    for gpu, n in (("GB300", 20), ("GB200", 40))
}

#: Megatron-Core ``recompute_modules`` names :class:`~perfmodel.workload.memory.RecomputeModule`
#: does not model (left out of a row's list: what they free stays counted).
_UNMODELLED_RECOMPUTE = frozenset({"layernorm", "moe", "shared_experts"})


def _recompute_modules(text: str) -> str | None:
    """``Scenario.recompute_modules`` of a row's ``recompute`` text (``selective: mla_up_proj``;
    the modelled names, comma-separated), ``None`` where it names none."""
    if ":" not in text:
        return None
    names = [n.strip() for n in text.split(":", 1)[1].split(",")]
    kept = [n for n in names if n and n not in _UNMODELLED_RECOMPUTE]
    return ",".join(kept) or None


def activation_offload(row: Mapping[str, Any]) -> tuple[int, str] | None:
    """The :data:`ACTIVATION_OFFLOAD_2026` entry of a row, ``None`` otherwise."""
    name, gpu = str(row["model"]["name"]), str(row["system"]["gpu"])
    prec = str(row["precision"]).upper()
    for (model, kind, precision), entry in ACTIVATION_OFFLOAD_2026.items():
        if name.startswith(model) and gpu.startswith(kind) and prec == precision:
            return entry
    return None


def load_rows(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``systems2026.jsonl`` in ``directory`` (default: the shipped copy); a
    ``published.jsonl`` path reads its sibling; a directory without the file gives no rows."""
    from perfmodel.catalogue import validation_rows

    return validation_rows(directory, "systems2026.jsonl")


def _system(gpu: str) -> tuple[str, int] | None:
    from perfmodel.topology.builders import gpus_per_server

    for key, system in SYSTEMS:
        if key in gpu:
            return system, gpus_per_server(system)
    return None


def _model(m: Mapping[str, Any]) -> tuple[str, dict[str, Any], str] | str:
    """``(zoo model, arguments, optimizer)`` of a row's model block, or why not mapped."""
    name = str(m["name"])
    seq = int(m["seq_len"])
    if "architecture" in m:
        return f"{name}: {m['architecture']}; not in the zoo"
    if name.startswith("Llama"):
        args = {k: int(m[k]) for k in ("hidden", "layers", "heads", "kv_heads", "ffn_hidden")}
        return "llama", {**args, "vocab": int(m["vocab"]), "seq_len": seq}, "adamw"
    if name.startswith("DeepSeek-V3"):
        return "deepseek_v3", {"seq_len": seq, "mtp_layers": int(m.get("mtp_depth") or 0)}, "adamw"
    if name.startswith("Kimi K2"):
        return (
            "deepseek_v3",
            {
                "seq_len": seq,
                "heads": int(m["heads"]),
                "experts": int(m["experts"]),
                "first_dense_layers": int(m["dense_layers"]),
                "vocab": int(m["vocab"]),
                "router_groups": 1,
                "router_group_topk": 1,
                "mtp_layers": int(m.get("mtp_depth") or 0),
            },
            "momentum",
        )
    for prefix, zoo in (
        ("GPT-OSS 120B", "gpt_oss_120b"),
        ("Qwen3-30B-A3B", "qwen3_30b_a3b"),
        ("Qwen3-235B-A22B", "qwen3_235b_a22b"),
    ):
        if name.startswith(prefix):
            return zoo, {"seq_len": seq}, "adamw"
    return f"model {name!r} not mapped"


def moe_recipe(row: Mapping[str, Any]) -> MoeRecipe2026 | None:
    """The :data:`MOE_RECIPES_2026` entry of a MoE row, ``None`` otherwise."""
    if "experts" not in row["model"]:
        return None
    name, gpu = str(row["model"]["name"]), str(row["system"]["gpu"])
    for (model, kind), recipe in MOE_RECIPES_2026.items():
        if name.startswith(model) and gpu.startswith(kind):
            return recipe
    return None


_DSV3 = (
    MBRIDGE_AT + "src/megatron/bridge/recipes/deepseek/deepseek_v3.py "
    "set_deepseek_v3_pipeline_model_parallel_layout layout_map"
)

#: Pipeline layouts the rows' recipes state (Megatron-Core ``pipeline_model_parallel_layout``,
#: ``Scenario.pipeline_layout``), by row id, with their source: a base config's ``pp_layout``,
#: else (``pp_layout`` unset: ``deepseek_llm_pretrain.py`` / ``kimi_llm_pretrain.py`` recompute
#: it) the recipe's map by ``(pp, vp)``. The DeepSeek-V3 layouts end with ``mtp`` + ``loss``
#: (``mtp_num_layers = 1``); Kimi K2's with ``loss`` alone.
PIPELINE_LAYOUTS_2026: Mapping[str, tuple[str, str]] = {
    "mbridge-260401-gb200-dsv3-256g-mxfp8-tokens": (
        "Et*4|(t*4|)*14tmL",
        _DSV3 + "[(4, 4)] (DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V2 sets no pp_layout)",
    ),
    "mbridge-260401-gb300-dsv3-256g-mxfp8-tokens": (
        "Et*4|(t*4|)*14tmL",
        MBRIDGE_PERF_CONFIGS
        + "deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 "
        "pp_layout (V2 inherits it)",
    ),
    "mbridge-260401-b300-dsv3-256g-mxfp8-tokens": (
        "Et*8|(t*8|)*6t*5mL",
        _DSV3 + "[(8, 1)] (DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V2: pp 8, no vp, no pp_layout)",
    ),
    "mbridge-260401-gb300-kimi-k2-256g-mxfp8-tokens": (
        "Et*4|(t*4|)*14tL",
        MBRIDGE_AT + "src/megatron/bridge/recipes/kimi/kimi_k2.py "
        "_get_kimi_k2_pipeline_layout[(4, 4)] "
        "(KIMI_K2_PRETRAIN_CONFIG_GB300 sets no pp_layout)",
    ),
}


def map_row(row: Mapping[str, Any]) -> Scenario | str:
    """A :class:`Scenario` for a ``systems2026.jsonl`` row, or why it is not mapped."""
    if row["metric"] != "tokens_per_s_per_gpu":
        return "not a tokens/s row"
    prec = str(row["precision"]).upper()
    if prec == "NVFP4":
        return "NVFP4 training: no training precision of the model runs FP4 GEMMs"
    sysd = row["system"]
    found = _system(str(sysd["gpu"]))
    if found is None:
        return f"GPU {sysd['gpu']!r} not mapped"
    system, per_node = found
    model = _model(row["model"])
    if isinstance(model, str):
        return model
    name, args, optimizer = model
    p = row["parallel"]
    pp = int(p["pp"])
    v = int(p.get("virtual_pipeline") or 1)
    layers = row["model"].get("layers")
    if layers is not None and pp * v > int(layers):
        return (
            "more pipeline chunks than layers (Megatron counts the embedding and the loss as "
            "pipeline layers, account_for_embedding/loss_in_pipeline_split; not modelled)"
        )
    gpus = int(sysd["gpus"])
    rec = str(p.get("recompute") or "").lower()
    fsdp = str(p.get("sharding") or "").startswith("Megatron FSDP")
    sc = Scenario(
        system=system,
        nodes=math.ceil(gpus / per_node),
        gpus=gpus,
        model=name,
        model_args=args,
        global_batch=int(p["global_batch"]),
        precision="bf16" if prec == "BF16" else "fp8",
        fp8_recipe={"FP8": "te-current", "MXFP8": "mxfp8"}.get(prec),
        optimizer=optimizer,
        **megatron_plan(p),
        recompute="selective" if rec.startswith("selective") else "none",
        recompute_modules=_recompute_modules(rec) if rec.startswith("selective") else None,
        zero=3 if fsdp else None,
        software="megatron-core",
        software_options=dict(MBRIDGE_SOFTWARE_OPTIONS),
        fidelity="analytic",
    )
    offload = activation_offload(row)
    if offload is not None:
        opts = {**sc.software_options, "activation_offload_layers": offload[0]}
        sc = replace(sc, software_options=opts)
    recipe = moe_recipe(row)
    if recipe is not None:
        sc = replace(sc, moe_dispatcher=recipe.dispatcher, ep_overlap=recipe.ep_overlap)
    layout = PIPELINE_LAYOUTS_2026.get(str(row["id"]))
    if layout is not None:
        sc = replace(sc, pipeline_layout=layout[0])
    return sc


def results(rows: Iterable[Mapping[str, Any]]) -> ModernResults:
    """Every row :func:`map_row` maps, predicted with the analytic executor; the others counted
    by reason (:class:`~perfmodel.accuracy_modern.ModernResults`)."""
    return _predict_rows(rows, map_row)


__all__ = [
    "ACTIVATION_OFFLOAD_2026",
    "MOE_RECIPES_2026",
    "SYSTEMS",
    "activation_offload",
    "load_rows",
    "map_row",
    "moe_recipe",
    "results",
]
