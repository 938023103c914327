"""A published training row as a :class:`perfmodel.api.Scenario` (the mapping the accuracy table
and the validation tier share; :mod:`perfmodel.accuracy` re-exports its public names).

:func:`map_row` reads a row's model, precision, system, interconnect and software and builds the
scenario, or raises :class:`~perfmodel.errors.ConfigError` naming the field a row does not state
enough of (the row is then skipped with that reason); :func:`predicted_value` turns the step report
into the row's own quantity (throughput, iteration time, TFLOP/s or epoch time).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from perfmodel.api import Scenario, predict
from perfmodel.compute.validation import DLE_BERT_VOCAB, dle_bert_recipe
from perfmodel.errors import PerfModelError


def assumed_precision(row: dict[str, Any]) -> bool:
    """vTrain rows do not state precision: predicted with fp16 and reported, never judged."""
    return row["id"].startswith("vtrain") and "not stated" in (row.get("precision") or "")


#: rows whose differences fitted TF_MIRRORED_SPLIT_PER_SAMPLE_S (excluded from judging)
FIT_ROWS = {
    "torres-mn5-rn50v2-1g-step",
    "torres-mn5-rn50v2-2g-step",
    "torres-mn5-rn50v2-4g-step",
    "torres-mn5-rn152v2-1g-epoch",
    "torres-mn5-rn152v2-2g-epoch",
    "torres-mn5-rn152v2-4g-epoch",
}


@dataclass(frozen=True)
class Mapped:
    row: dict[str, Any]
    scenario: Scenario
    metric: str  # throughput | iteration | tflops | epoch
    unit_scale: float  # measured value -> SI (samples/s, s)
    tokens_per_sample: int = 1
    paper_flop_per_step: float = 0.0
    interconnect: str = ""


def _gpt_args(text: str) -> dict[str, int] | None:
    m = re.search(r"h=(\d+), heads=(\d+), layers=(\d+), seq (\d+)", text)
    if not m:
        return None
    h, a, nl, s = (int(x) for x in m.groups())
    v = re.search(r"vocab(?:ulary)? (\d+)", text)
    args = {"hidden": h, "heads": a, "layers": nl, "seq_len": s}
    if v:
        args["vocab"] = int(v.group(1))
    return args


def _model(row: dict[str, Any]) -> tuple[str, dict[str, Any]] | str:
    t = row["model"]
    low = t.lower()
    if "transformer-xl" in low:
        return "model Transformer-XL is not in the zoo"
    if "gpt" in low:
        args = _gpt_args(t)
        if args is None:
            return "GPT row without h/heads/layers/seq"
        # Megatron-LM (2021) and Megatron-DeepSpeed (vTrain) used unfused attention
        return "gpt", {**args, "flash_attention": False}
    if "bert-large" in low:
        seq = (
            384
            if "squad" in low
            else int(re.search(r"seq (\d+)", t).group(1))
            if re.search(r"seq (\d+)", t)
            else 128
        )
        return "bert_large", {"seq_len": seq, "max_positions": 512}
    if "resnet50v2" in low.replace("-", ""):
        return "resnet50v2", {"image_size": 128, "num_classes": 10}
    if "resnet152v2" in low.replace("-", ""):
        return "resnet152v2", {"image_size": 128, "num_classes": 10}
    if re.search(r"resnet-?50", low):
        return "resnet50", {}
    if re.search(r"resnet-?152", low):
        return "resnet152", {}
    if "inceptionv3" in low.replace("-", "").replace(" ", ""):
        return "inception_v3", {}
    if "alexnet" in low:
        return "alexnet", {}
    if re.search(r"vgg-?16", low):
        return "vgg16", {}
    if "vit" in low and "631m" in low:
        return "vit_h_14", {"num_classes": 200}
    return f"model {t[:40]!r} not mapped"


def _precision(row: dict[str, Any]) -> str | None:
    p = (row.get("precision") or "").lower()
    if "tf32" in p:
        return "tf32"
    if "amp" in p or "fp16" in p:
        return "fp16"
    if "bf16" in p:
        return "bf16"
    if "fp32" in p:
        return "fp32"
    if "not stated" in p and row["id"].startswith("vtrain"):
        return "fp16"  # ASSUMED (Megatron-DeepSpeed example configs); these rows are not judged
    return None


def _system(row: dict[str, Any]) -> dict[str, Any] | str:
    h = row["hardware"]
    gpu = h["gpu"]
    g = gpu.lower()
    n = int(h["gpus"] or 0)
    per = int(h.get("gpus_per_node") or n or 1)
    nodes = max(1, math.ceil(n / per))
    out: dict[str, Any] = {"gpus": n, "nodes": nodes}
    if "dgx-2" in g or "sxm3" in g:
        out["system"] = "dgx2-v100"
    elif "v100-sxm2" in g:
        if "32gb" in g:
            return "DGX-1V with 32 GB V100 not in the catalogue (dgx1-v100 has a fixed 16 GB GPU)"
        out.update(system="dgx1-v100")
    elif "p100-sxm2" in g:
        out["system"] = "dgx1-p100"
    elif "a100-sxm4" in g or (g.strip() == "a100"):
        if "40gb" in g:
            return "DGX A100 40 GB not in the catalogue (dgx-a100 has a fixed 80 GB GPU)"
        out.update(system="dgx-a100")
    elif "a100 80gb sxm4" in g:
        out.update(system="dgx-a100")
    elif "h100 80gb sxm5" in g:
        out.update(system="dgx-h100")
    elif "h100 sxm5 64gb" in g:
        out.update(
            system="custom",
            gpu="H100-SXM5-64GB",
            gpus_per_node=4,
            intra_node="nvlink4",
            network="ib-ndr",
        )
    elif "a100 80gb pcie" in g:
        out.update(
            system="custom", gpu="A100-PCIE-80GB", gpus_per_node=max(n, 1), intra_node="pcie4"
        )
    elif "h100 80gb pcie" in g:
        out.update(
            system="custom", gpu="H100-PCIE-80GB", gpus_per_node=max(n, 1), intra_node="pcie5"
        )
    elif "rtx 3090" in g:
        out.update(system="custom", gpu="RTX-3090", gpus_per_node=max(n, 1), intra_node="pcie4")
    elif "rtx 4090" in g:
        out.update(system="custom", gpu="RTX-4090", gpus_per_node=max(n, 1), intra_node="pcie4")
    elif "k80" in g:
        if nodes > 1:
            return "K80 cluster network speed not stated"
        out.update(system="custom", gpu="K80", gpus_per_node=max(n, 1), intra_node="pcie3")
    elif "v100 16gb" in g:
        return "Lambda cloud V100 interconnect not stated"
    else:
        return f"GPU {gpu[:30]!r} not in the catalogue"
    # several DGX nodes: the catalogue default fabric of the system (InfiniBand, vendor standard)
    from perfmodel.comm.validation import stated_nccl

    nccl = stated_nccl(row)  # its P2P level; unstated (every training row today): the default
    if nccl:
        out["nccl"] = nccl
    return out


def _interconnect(row: dict[str, Any], sysd: dict[str, Any]) -> str:
    h = row["hardware"]
    if int(h["gpus"] or 1) == 1:
        return "single GPU"
    if sysd.get("nodes", 1) > 1:
        inter = (h.get("inter_node_link") or "").lower()
        return (
            "InfiniBand" if ("infiniband" in inter or "ib" in inter.split()) else "Ethernet/other"
        )
    intra = (h.get("intra_node_link") or "").lower()
    if intra.startswith("pcie"):
        return "PCIe"
    if "nvswitch" in intra:
        return "NVSwitch"
    if "nvlink" in intra and "no nvl" not in intra:
        return "NVLink"
    if "not stated" in intra:
        return "not stated"
    return "PCIe"


def _software(row: dict[str, Any]) -> dict[str, Any]:
    s = row["software"].lower()
    notes = (row.get("notes") or "").lower()
    if "megatron" in s:
        return {"software": "megatron", "optimizer": "adam"}
    if "horovod" in s:
        return {"software": "horovod", "optimizer": "momentum"}
    if "tf_cnn_benchmarks" in s:
        if "parameter_server" in notes:
            return {"software": "tf-replicated", "dp_mode": "parameter-server", "optimizer": "sgd"}
        return {"software": "tf-replicated", "optimizer": "sgd"}
    if "mirroredstrategy" in s:
        return {"software": "tf-mirrored", "optimizer": "sgd"}
    out: dict[str, Any] = {"software": "pytorch-ddp", "optimizer": "momentum"}
    src = row["source"]
    mixed = any(t in (row.get("precision") or "").lower() for t in ("amp", "mixed", "fp16"))
    if "DeepLearningExamples" in src and "/ConvNets" in src and mixed:
        # DLE ConvNets configs.yml: AMP recipes set memory_format nhwc; TF32/FP32 keep PyTorch's
        # NCHW default (the preset's). Lambda's configs run the same main.py without
        # --memory-format (default nchw), and the 2019 RN50v1.5 code predates channels_last.
        out["memory_format"] = "nhwc"
    if "lamb" in s:
        out["optimizer"] = "lamb"
    if "bert" in row["model"].lower() and "lamb" not in s:
        out["optimizer"] = "adam"
    dle = dle_bert_recipe(row)
    if dle is not None:
        # a 16-bit model with FP32 master weights in FusedLAMB, one all-reduce after the
        # accumulation (the pytorch-apex preset's sources); nvFuser from the 21.11 container
        out["software"] = "pytorch-apex"
        if dle.nvfuser:
            out["compile"] = True
    return out


def map_row(row: dict[str, Any]) -> Mapped | str:
    """A Scenario for ``row``, or the reason it is skipped."""
    if row.get("kind") != "training_scaling":
        return "not a training row"
    if row["id"].startswith("navid-"):
        return "seed case (tests/validation/test_seeds.py)"
    if row.get("value") is None or not isinstance(row["value"], (int, float)):
        return "no numeric value"
    model = _model(row)
    if isinstance(model, str):
        return model
    prec = _precision(row)
    if prec is None:
        return f"precision {row.get('precision')!r} not mapped"
    sysd = _system(row)
    if isinstance(sysd, str):
        return sysd
    if not sysd["gpus"]:
        return "GPU count not stated"
    name, margs = model
    dle = dle_bert_recipe(row)
    if dle is not None:  # padded vocabulary; the dense masked-LM head from 21.11 on
        margs = {**margs, "vocab": DLE_BERT_VOCAB}
        if dle.mlm_positions is not None:
            margs["mlm_positions"] = dle.mlm_positions
    batch = row.get("batch") or {}
    plan = row.get("plan") or {}
    dp, tp, pp = (plan.get(k) for k in ("dp", "tp", "pp"))
    mbs = plan.get("microbatches")
    per = batch.get("per_gpu")
    glob = batch.get("global")
    kw: dict[str, Any] = dict(model=name, model_args=margs, precision=prec, fidelity="analytic")
    kw.update(_software(row))
    kw.update(sysd)
    metric_text = row["metric"].lower()
    unit = (row.get("unit") or "").lower()
    tokens = 1
    paper_flop = 0.0
    if name == "gpt":
        if (
            not isinstance(tp, int)
            or not isinstance(pp, int)
            or not isinstance(dp, int)
            or not glob
        ):
            return "GPT row without plan or global batch"
        mb = per if isinstance(per, int) else 1  # PTD-P Table 1 omits it: 1 (assumption)
        kw.update(tp=tp, pp=pp, global_batch=int(glob), microbatch=mb, sequence_parallel=False)
        if row["id"].startswith("ptdp"):
            kw.update(
                recompute="full",
                schedule="interleaved" if pp > 1 else "1f1b",
                interleave=2 if pp > 1 and margs["layers"] % (2 * pp) == 0 else 1,
            )
            if kw["interleave"] == 1:
                kw["schedule"] = "1f1b"
            a = margs
            B, s, nl, h, V = glob, a["seq_len"], a["layers"], a["hidden"], a.get("vocab", 51200)
            # Narayanan et al. SC21 eq. (3): FLOP per iteration with activation recomputation
            paper_flop = 96 * B * s * nl * h * h * (1 + s / (6 * h) + V / (16 * nl * h))
    else:
        if tp not in (None, 1) or pp not in (None, 1):
            return "model-parallel plan for a non-GPT model"
        if isinstance(per, int):
            m = mbs if isinstance(mbs, int) else 1
            kw["batch_per_gpu"] = per * m
            # the row ran micro-batches of `per` (no accumulation when m = 1): stated, so pinned,
            # not left to the automatic micro-batch (which picks a smaller one where the memory
            # model over-estimates: Lambda BERT-large 112 on 80 GB, 82.9 GiB predicted)
            kw["microbatch"] = per
        elif isinstance(glob, int):
            kw["global_batch"] = glob
        else:
            return "batch size not stated"
    if name in ("bert_large", "gpt"):
        tokens = margs.get("seq_len", 1)
    if "tflop" in unit:
        metric, scale = "tflops", 1e12
    elif "throughput" in metric_text and (
        "images/s" in unit or "sequences/s" in unit or "samples" in unit
    ):
        metric, scale = "throughput", 1.0
    elif "throughput" in metric_text and "tokens/s" in unit:
        metric, scale = "tokens", 1.0
    elif ("iteration time" in metric_text or "time per step" in metric_text) and unit == "ms":
        metric, scale = "iteration", 1e-3
    elif "epoch time" in metric_text and unit == "s":
        metric, scale = "epoch", 1.0
        kw["dataset_size"] = 50_000
    else:
        return f"metric {row['metric'][:30]!r} [{unit}] not mapped"
    try:
        sc = Scenario(**kw)
    except (TypeError, PerfModelError) as exc:
        return f"scenario: {exc}"
    return Mapped(row, sc, metric, scale, tokens, paper_flop, _interconnect(row, sysd))


def predicted_value(m: Mapped) -> tuple[float, Any]:
    # no 1-GPU baseline: speedups are not judged here (scaling efficiency is computed from the
    # predicted 1-GPU rows of each table, test_scaling_efficiency_error)
    r = predict(m.scenario, baseline=False)
    if m.metric == "throughput":
        return r.throughput_samples_per_s, r
    if m.metric == "tokens":
        return r.throughput_samples_per_s * m.tokens_per_sample, r
    if m.metric == "iteration":
        return r.iteration_time_s, r
    if m.metric == "epoch":
        return r.epoch_time_s, r
    return m.paper_flop_per_step / r.iteration_time_s / r.num_gpus, r


def _group_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["source"],
        row["model"],
        row["precision"],
        row["hardware"]["gpu"],
        row["software"],
        row["metric"],
    )
