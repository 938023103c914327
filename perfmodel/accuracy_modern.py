"""Today's large-model stacks: the ``modern.jsonl`` rows mapped to scenarios and predicted.

The rows (shipped in ``validation/modern.jsonl``; schema in that directory's README) are
torchtitan's December 2024 Llama 3.1 H100 tables (``--software torchtitan``), NVIDIA NeMo 24.07
FP8 DGX-H100 pre-training table and Megatron-Bridge 26.04.01 (``--software megatron-core``).
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
are predicted as their eager rows (compile's fusion is not modelled) and its async-TP rows as
plain TP. torchtitan's rows run on the 96 GB HBM2e, 500 W H100 their hardware line states
(:func:`_gpu`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfmodel.api import Scenario, predict
from perfmodel.errors import PerfModelError
from perfmodel.units import GiB

#: MoE and context-parallel rows predicted by the validation tier and the accuracy table
#: (mappable, and a few seconds in all; the 256-, 512- and 1024-GPU rows are left out for time).
MOE_CP_ROWS = (
    "mbridge-260401-h100-qwen3-30b-16g-tokens",
    "mbridge-260401-b200-qwen3-30b-8g-tokens",
    "nemo2407-h100-llama3-8b-tokens",
    "nemo2407-h100-llama3-70b-tokens",
    "tt-2412-t2-8b-fsdp4-cp2",
    "tt-2412-t2-8b-fsdp2-cp4",
    "tt-2412-t2-8b-fsdp1-cp8",
)


def _recompute(text: str | None) -> str:
    """``full`` / ``selective`` from the row's ``recompute`` text; ``none`` otherwise."""
    t = (text or "").lower()
    return "full" if t.startswith("full") else "selective" if t.startswith("selective") else "none"


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
    if "swiglu" in str(m.get("mlp", "")).lower():
        return "llama", {**common, "kv_heads": int(m.get("kv_heads") or m["heads"])}
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


def _scenario(row: Mapping[str, Any], system: str) -> Scenario:
    """The :class:`Scenario` of a mapped row on ``system`` (plan, batch and precision as stated)."""
    m, p, s = row["model"], row["parallel"], row["system"]
    name, args = _model(m)
    pp = int(p["pp"])
    tp = int(p["tp"])
    v = int(p.get("virtual_pipeline") or 1)
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
        tp=tp,
        pp=pp,
        cp=int(p.get("cp") or 1),
        ep=int(p.get("ep") or 1),
        etp=p.get("expert_tensor_parallel"),
        microbatch=int(p["micro_batch"]),
        interleave=v if pp > 1 else 1,
        sequence_parallel=tp > 1,
        recompute=_recompute(p.get("recompute")),
        software=_software(row),
        fidelity="analytic",
    )


def _software(row: Mapping[str, Any]) -> str:
    """torchtitan for its rows (ids ``tt-``), Megatron-Core for NeMo and Megatron-Bridge."""
    return "torchtitan" if row["id"].startswith("tt-") else "megatron-core"


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
    Megatron-Bridge footnote says (the default ``load_imbalance = 1``).
    """
    if not _is_moe_or_cp(row):
        return "neither MoE nor context parallel"
    if row["metric"] != "tokens_per_s_per_gpu":
        return "FLOP/s restatement of a tokens/s row"
    gpu = row["system"]["gpu"]
    system = "dgx-b200" if "B200" in gpu else "dgx-h100" if "H100" in gpu else None
    if system is None:
        return f"GPU {gpu!r} not mapped"
    return _scenario(row, system)


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
