"""Map published single-GPU measurements to compute-model predictions.

Used by ``tests/validation/test_compute_validation.py`` (and usable by ``perfmodel validate``).
A row maps only where it states enough (GPU, model, batch, precision); every other row is skipped
with a reason. Rows that fed a default of :class:`~perfmodel.compute.ComputeParams` (the
best-shape matmul ceilings and the DeepBench fp32 3x3 convolutions behind ``winograd_speedup``)
are flagged ``in_sample``; the training rows fed no fit.

Row conventions honoured here (``shared/data/README.md``):

* "fp32" on Ampere and later in NGC PyTorch and TensorFlow >= 2.4 means TF32 tensor-core math
  (both enable it by default); on Volta and older it is FP32 on CUDA cores.
* "AMP"/"fp16 mixed" is :attr:`Precision.FP16`; "bf16 mixed" is :attr:`Precision.BF16`.
* PyTorch convolutions run in NCHW unless the recipe sets channels_last (DeepLearningExamples
  does for AMP only); TensorFlow and Keras use NHWC.
* A step is forward + backward + one optimizer step; with gradient accumulation the optimizer
  step is shared by the accumulated micro-batches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfmodel.compute.model import ComputeModel
from perfmodel.compute.params import ALIGNMENT_ELEMENTS, ComputeParams
from perfmodel.dtypes import DType, Precision
from perfmodel.errors import ConfigError
from perfmodel.hardware.gpus import GPUSpec, get_gpu
from perfmodel.workload._net import Net
from perfmodel.workload.layers import GemmShape
from perfmodel.workload.zoo import build_model


@dataclass(frozen=True)
class RowPrediction:
    """One mapped row: measured and predicted value in the row's unit."""

    id: str
    group: str
    gpu: str
    what: str
    measured: float
    predicted: float
    unit: str
    in_sample: bool = False
    note: str = ""

    @property
    def signed_error(self) -> float:
        """``(predicted - measured) / measured``; for time units a positive error means the
        model predicts a slower run, for rates a faster one."""
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class Skipped:
    """A row the compute tier cannot judge, and why."""

    id: str
    group: str
    reason: str


_GPU_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^(?=.*a100)(?=.*pcie)(?=.*40)", "A100-PCIE-40GB"),  # the words in any order
    (r"gh200", "GH200"),
    (r"gb200", "GB200"),
    (r"b200", "B200-SXM-180GB"),
    (r"h200", "H200-SXM-141GB"),
    (r"h100.*pcie", "H100-PCIE-80GB"),
    (r"h100.*64\s*gb", "H100-SXM5-64GB"),
    (r"h100", "H100-SXM5-80GB"),
    (r"a100.*pcie", "A100-PCIE-80GB"),
    (r"a100.*40\s*g", "A100-SXM4-40GB"),
    (r"a100", "A100-SXM4-80GB"),
    (r"v100.*(sxm3|dgx-2)", "V100-SXM3-32GB"),
    (r"v100.*32\s*gb", "V100-SXM2-32GB"),
    (r"v100", "V100-SXM2-16GB"),
    (r"p100", "P100-SXM2-16GB"),
    (r"k80", "K80"),
    (r"rtx\s*6000\s*ada", "RTX-6000-Ada"),
    (r"rtx\s*a6000", "RTX-A6000"),
    (r"rtx\s*3090\s*ti", "RTX-3090-Ti"),
    (r"rtx\s*3090", "RTX-3090"),
    (r"rtx\s*4090", "RTX-4090"),
)


def resolve_gpu(text: str) -> GPUSpec:
    """Catalogue GPU for a row's free-text GPU description.

    Raises
    ------
    ConfigError
        When the text names no known pattern or the catalogue lacks that GPU.
    """
    t = text.lower()
    for pattern, name in _GPU_PATTERNS:
        if re.search(pattern, t):
            return get_gpu(name, where="hardware.gpu")
    raise ConfigError(f"no catalogue GPU for {text!r}", value=text, where="hardware.gpu")


def _dtype(text: str) -> DType:
    t = text.lower()
    if "fp8" in t:
        return DType.FP8
    if "bf16" in t:
        return DType.BF16
    if "tf32" in t:
        return DType.TF32
    if "fp16" in t:
        return DType.FP16
    return DType.FP32


def _group(row: Mapping[str, Any]) -> str:
    src = row["source"]
    rid = row["id"]
    if rid.startswith("seed-"):
        return "seed"
    if "DeepBench" in src:
        return "DeepBench conv" if "conv" in rid else "DeepBench GEMM"
    if "ml-engineering" in src:
        return "matmul ceiling (MAMF)"
    if "transformers-benchmarks" in src:
        return "matmul (mli)"
    if "DeepLearningExamples" in src:
        return "DeepLearningExamples"
    if "lambdal" in src:
        return "Lambda"
    if "tensorflow/tensorflow" in src:
        return "TF benchmarks"
    if "vTrain" in src:
        return "vTrain"
    if "supercomputing-for-ai" in src:
        return "BSC (Torres)"
    return src.split()[0]


#: DeepLearningExamples' PyTorch BERT pads the 30522-token vocabulary to a multiple of 8 for
#: tensor cores ("Padding for divisibility by 8" in ``run_pretraining.py``/``run_squad.py``,
#: ``config.vocab_size += 8 - vocab_size % 8`` at @78ec680207ad and @729963dd47e7).
DLE_BERT_VOCAB = 30528

#: NGC container from which DeepLearningExamples' PyTorch BERT pre-training runs the
#: ``model.half()`` model under ``torch.jit.script`` with nvFuser and the dense masked-LM head
#: (commit a9e2c1d5, 2022-03-02, "[BERT/PyT] update LDDL + NVFuser + Distillation"; its README
#: tables are of the 21.11 container). Earlier containers ran apex amp O2 and eager kernels
#: with the masked-LM head on every position (@78ec680207ad, 19.07).
DLE_BERT_NVFUSER_CONTAINER = (21, 11)

#: Masked positions per sequence of DeepLearningExamples' BERT pre-training by sequence length:
#: ``--max_predictions_per_seq`` 20 in phase 1 (``--max_seq_length=128``) and 80 in phase 2
#: (512), ``PyTorch/LanguageModeling/BERT/scripts/run_pretraining.sh`` @729963dd47e7.
DLE_BERT_MAX_PREDICTIONS = {128: 20, 512: 80}


@dataclass(frozen=True)
class DleBertRecipe:
    """How a DeepLearningExamples PyTorch BERT pre-training row ran (:func:`dle_bert_recipe`).

    Attributes
    ----------
    nvfuser
        ``torch.jit.script`` with nvFuser fuses the pointwise chains (dropout with the residual
        add); modelled as ``torch.compile``'s fusion (``Fusion.COMPILE``), which fuses the same
        chains.
    mlm_positions
        Positions per sequence the masked-LM head runs on (dense sequence output), ``None``:
        every position.
    source
        The commit the facts are read at.
    """

    nvfuser: bool
    mlm_positions: int | None
    source: str


def _ngc_container(row: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(year, month)`` of the NGC container a row states (``"PyTorch NGC 21.11"``,
    ``"pytorch:21.11-py3"``), ``None`` when it states none."""
    m = re.search(r"(?:NGC |:)(\d{2})\.(\d{2})", f"{row.get('software', '')} {row['source']}")
    return (int(m.group(1)), int(m.group(2))) if m else None


def dle_bert_recipe(row: Mapping[str, Any]) -> DleBertRecipe | None:
    """The :class:`DleBertRecipe` of a DeepLearningExamples PyTorch BERT pre-training row
    (``None`` for any other row). Both code generations run mixed precision as a 16-bit model
    with FP32 master weights in the fused LAMB optimizer (the ``pytorch-apex`` preset, no
    autocast casts) and pad the vocabulary (:data:`DLE_BERT_VOCAB`); from the 21.11 container
    on (:data:`DLE_BERT_NVFUSER_CONTAINER`) with nvFuser and the dense masked-LM head.

    >>> row = {"source": "NVIDIA/DeepLearningExamples @729963dd47e7 PyTorch/LanguageModeling/"
    ...        "BERT/README.md", "software": "PyTorch NGC 21.11, LAMB",
    ...        "model": "BERT-Large pretraining (seq 128)"}
    >>> dle_bert_recipe(row).mlm_positions
    20
    """
    src = str(row["source"])
    model = str(row.get("model", "")).lower()
    if "DeepLearningExamples" not in src or "LanguageModeling/BERT" not in src:
        return None
    if "pretraining" not in model:
        return None
    container = _ngc_container(row)
    new = container is not None and container >= DLE_BERT_NVFUSER_CONTAINER
    if not new:
        return DleBertRecipe(False, None, "DeepLearningExamples @78ec680207ad (apex amp O2)")
    m = re.search(r"seq (\d+)", model)
    seq = int(m.group(1)) if m else 128
    return DleBertRecipe(
        True,
        DLE_BERT_MAX_PREDICTIONS.get(seq),
        "DeepLearningExamples @729963dd47e7 (model.half(), nvFuser, dense sequence output)",
    )


def _prediction(
    row: Mapping[str, Any],
    group: str,
    gpu: GPUSpec,
    what: str,
    predicted: float,
    unit: str,
    *,
    in_sample: bool = False,
    note: str = "",
) -> RowPrediction:
    """The :class:`RowPrediction` of ``row`` (its id and measured value) on ``gpu``."""
    return RowPrediction(
        row["id"], group, gpu.name, what, float(row["value"]), predicted, unit, in_sample, note
    )


def _gpu_or_skip(row: Mapping[str, Any], group: str) -> GPUSpec | Skipped:
    """The row's GPU from the catalogue, or why the row is skipped."""
    try:
        return resolve_gpu(row["hardware"]["gpu"])
    except ConfigError as exc:
        return Skipped(row["id"], group, f"GPU not in catalogue ({exc.value})")


def _micro_params(gpu: GPUSpec) -> ComputeParams:
    """Microbenchmarks move no weights between precisions: no autocast weight casts. They time
    short runs (DeepBench, mli's matmul benchmark, the MAMF finder's 100 iterations after 50
    warm-up), so a GPU whose catalogue entry states burst rates is predicted in that regime
    (``ComputeParams.for_gpu(burst=True)``); training rows use the sustained rates."""
    return ComputeParams.for_gpu(gpu, cast_weights_each_step=False, burst=True)


def _gemm_rate(cm: ComputeModel, g: GemmShape, dtype: DType, *, pad: bool = False) -> float:
    """Achieved FLOP/s of ``g`` (its own FLOP over the predicted time incl. launch).

    ``pad``: the benchmark pads every dimension to the tensor-core alignment before timing
    (DeepBench ``gemm_bench.cu`` is built with ``PAD_KERNELS=1`` by default and pads the
    tensor-core problems), so the time is that of the padded GEMM.
    """
    timed = g
    align = ALIGNMENT_ELEMENTS.get(dtype)
    if pad and align and cm.params.uses_tensor_cores(dtype):
        timed = GemmShape(*(-(-x // align) * align for x in (g.m, g.n, g.k)), g.batch)
    t = cm.gemm_time(timed, dtype) + cm.params.kernel_launch_s
    return g.flop / t


#: Matmul-ceiling rows whose GPU entered the catalogue after ``tensor_core_efficiency`` was
#: fitted on the others (GB200: issue 25): judged, out of sample.
_JOINED_AFTER_FIT = frozenset({"mamf-gb200-sxm-bf16"})


def _predict_gemm(row: Mapping[str, Any], gpu: GPUSpec, group: str) -> RowPrediction:
    model = row["model"]
    dtype = _dtype(row["precision"])
    cm = ComputeModel(gpu, _micro_params(gpu))
    m = re.search(r"M=(\d+)\s+N=(\d+)\s+K=(\d+)", model) or re.search(
        r"MxNxK=(\d+)x(\d+)x(\d+)", model
    )
    in_sample = group.startswith("matmul") and row["id"] not in _JOINED_AFTER_FIT
    note = (
        "out of sample: its GPU joined the catalogue after the fit"
        if not in_sample and group.startswith("matmul")
        else ""
    )
    if m:
        shapes = [GemmShape(int(m.group(1)), int(m.group(2)), int(m.group(3)))]
    else:
        n = re.search(r"n=(\d+)", model)
        sizes = [int(n.group(1))] if n else [128, 512, 2048, 8192]
        shapes = [GemmShape(s, s, s) for s in sizes]
        in_sample = "up to" in model
        note = "max over n in {128, 512, 2048, 8192}" if not n else ""
    if group == "DeepBench GEMM":
        in_sample = False
    rate = max(_gemm_rate(cm, g, dtype, pad=group == "DeepBench GEMM") for g in shapes)
    return _prediction(
        row,
        group,
        gpu,
        f"{model} {dtype.value}",
        rate / 1e12,
        "TFLOP/s",
        in_sample=in_sample,
        note=note,
    )


def _predict_conv(row: Mapping[str, Any], gpu: GPUSpec, group: str) -> RowPrediction:
    model = row["model"]
    m = re.search(r"input (\d+)x(\d+)x(\d+), (\d+) filters", model)
    if not m:
        raise ConfigError(f"cannot read conv shape from {model!r}", value=model, where="model")
    h, w, c, k = (int(v) for v in m.groups())
    n = int(row["batch"]["per_gpu"])
    fp16 = "fp16" in row["precision"].lower()
    prec = Precision.FP16 if fp16 else Precision.FP32
    no_dgrad = "N/A" in row.get("notes", "")
    net = Net(n, prec)
    if not no_dgrad:
        net._first_weight_layer = False
    net.conv("conv", (n, c, h, w), k, 3, 1, 1)
    layer = net.layers[0]
    cm = ComputeModel(gpu, _micro_params(gpu))
    t = cm.layer_time(layer, prec)
    total_ms = t.total_s * 1e3
    return _prediction(
        row,
        group,
        gpu,
        f"conv {h}x{w}x{c}->{k} N={n} {prec.value}",
        total_ms,
        "ms",
        in_sample=not fp16,
        note="fp32 3x3 rows fed winograd_speedup" if not fp16 else "",
    )


@dataclass(frozen=True)
class _TrainingCase:
    model: str
    args: dict[str, Any]
    optimizer: str
    note: str = ""


def _training_case(row: Mapping[str, Any]) -> _TrainingCase | str:
    """Zoo model for a training row, or the reason it cannot be mapped."""
    m = row["model"].lower()
    if "transformer-xl" in m and "base" in m:
        return _TrainingCase(
            "transformer_xl", {}, "lamb", "adaptive-softmax tail shares from Zipf's law"
        )
    if "resnet50v2" in m or "resnet152v2" in m:
        name = "resnet50v2" if "resnet50v2" in m else "resnet152v2"
        size = 128 if "128" in m else 224
        classes = 10 if "cifar" in m else 1000
        return _TrainingCase(name, {"image_size": size, "num_classes": classes}, "sgd")
    if "resnet-50" in m or "resnet50" in m:
        return _TrainingCase("resnet50", {}, "momentum")
    if "resnet-152" in m:
        return _TrainingCase("resnet152", {}, "sgd")
    if "inceptionv3" in m or "inception_v3" in m:
        return _TrainingCase("inception_v3", {"image_size": 299}, "sgd")
    if "alexnet" in m:
        return _TrainingCase("alexnet", {}, "sgd")
    if "vgg16" in m:
        return _TrainingCase("vgg16", {}, "sgd")
    if "bert-large" in m and "squad" in m:
        return _TrainingCase(
            "bert_large", {"seq_len": 384, "head": "squad"}, "adam", "SQuAD max_seq_length 384"
        )  # the SQuAD head has no vocabulary-sized GEMM
    if "bert-large" in m and "pretraining" in m:
        seq = int(re.search(r"seq (\d+)", m).group(1)) if "seq" in m else 128
        args: dict[str, Any] = {"seq_len": seq, "head": "pretraining", "vocab": DLE_BERT_VOCAB}
        note = "vocabulary padded to 30528 (DeepLearningExamples run_pretraining.py)"
        dle = dle_bert_recipe(row)
        if dle is not None and dle.mlm_positions is not None:
            args["mlm_positions"] = dle.mlm_positions
            note += f"; masked-LM head on {dle.mlm_positions} positions"
        return _TrainingCase("bert_large", args, "lamb", note)
    if "vit" in m and "631m" in m:
        return _TrainingCase(
            "vit_h_14",
            {"image_size": 224, "num_classes": 200},
            "adamw",
            "approximate: 631M-parameter ViT taken as ViT-H/14 (630M at 200 classes)",
        )
    return f"model {row['model']!r} not mapped"


def _training_precision(text: str, gpu: GPUSpec) -> Precision:
    t = text.lower().strip()
    if t.startswith("bf16"):
        return Precision.BF16
    if t.startswith(("amp", "fp16")):
        return Precision.FP16
    if t.startswith("tf32"):
        return Precision.TF32
    # FP32 on Ampere+ runs TF32 tensor cores by default in NGC PyTorch and TF >= 2.4
    if gpu.architecture in ("Ampere", "Ada", "Hopper", "Blackwell"):
        return Precision.TF32
    return Precision.FP32


def _predict_training(
    row: Mapping[str, Any], gpu: GPUSpec, group: str, case: _TrainingCase
) -> RowPrediction | Skipped:
    batch = row["batch"]["per_gpu"]
    if not batch:
        return Skipped(row["id"], group, "per-GPU batch not stated")
    prec = _training_precision(row["precision"], gpu)
    dle = dle_bert_recipe(row)
    kernels = None
    if dle is not None and dle.nvfuser:
        from perfmodel.workload.kernels import Fusion, KernelRecipe

        kernels = KernelRecipe(fusion=Fusion.COMPILE)
    w = build_model(
        case.model,
        batch_size=int(batch),
        precision=prec,
        **({} if kernels is None else {"kernels": kernels}),
        **case.args,
    )
    # PyTorch keeps NCHW unless the recipe asks for channels_last; DeepLearningExamples'
    # ConvNets configs.yml sets memory_format nhwc for AMP only (TF32/FP32 stay NCHW). Lambda's
    # benchmark configs run the same main.py without --memory-format (its default: nchw), AMP
    # included (lambdal/deeplearning-benchmark pytorch/scripts/config_v1/*.sh).
    pytorch = "pytorch" in (row.get("software", "") + row["model"]).lower()
    lambda_cfg = "lambdal" in row.get("source", "")
    layout = "nchw" if pytorch and (lambda_cfg or not prec.mixed) else "nhwc"
    # DeepLearningExamples' BERT keeps a 16-bit model (apex O2 / model.half()): no autocast casts
    cm = ComputeModel(
        gpu, ComputeParams.for_gpu(gpu, conv_layout=layout, cast_weights_each_step=dle is None)
    )
    fwd, bwd = cm.workload_time(w)
    accumulation = 1
    glob = row["batch"].get("global")
    if glob and int(glob) > int(batch) * int(row["hardware"].get("gpus") or 1):
        accumulation = int(glob) // int(batch)
    opt = cm.optimizer_time(w.params, case.optimizer, prec)
    step_s = fwd + bwd + opt / accumulation
    unit = row["unit"].lower()
    note = case.note
    if "xla" in row["precision"].lower():
        note = (note + "; " if note else "") + "XLA fusion not modelled"
    what = f"{case.model} b={batch} {prec.value}"
    if "tokens/s" in unit:
        predicted, shown = batch * w.tokens_per_sample / step_s, "tokens/s"
    elif "images/s" in unit or "sequences/s" in unit:
        predicted, shown = batch / step_s, row["unit"].split(" (")[0]
    elif unit == "ms" and "step" in row["metric"]:
        predicted, shown = step_s * 1e3, "ms/step"
    elif unit == "s" and "epoch" in row["metric"]:
        n_images = 50_000 if "cifar" in row["model"].lower() or "50k" in row["model"] else None
        if n_images is None:
            return Skipped(row["id"], group, "epoch size not stated")
        steps = -(-n_images // int(batch))
        predicted, shown = steps * step_s, "s/epoch"
        note = (note + "; " if note else "") + f"{steps} steps of {batch}"
    else:
        return Skipped(row["id"], group, f"unit {row['unit']!r} not mapped")
    return _prediction(row, group, gpu, what, predicted, shown, note=note)


def predict_row(row: Mapping[str, Any]) -> RowPrediction | Skipped:
    """Prediction for one published row, or why it is skipped."""
    group = _group(row)
    kind = row["kind"]
    if kind == "compute_microbenchmark":
        gpu = _gpu_or_skip(row, group)
        if isinstance(gpu, Skipped):
            return gpu
        try:
            if "conv" in row["model"].lower():
                return _predict_conv(row, gpu, group)
            return _predict_gemm(row, gpu, group)
        except ConfigError as exc:
            return Skipped(row["id"], group, str(exc))
    if kind != "training_scaling":
        return Skipped(row["id"], group, f"kind {kind} is not single-GPU compute")
    if int(row["hardware"].get("gpus") or 0) != 1:
        return Skipped(row["id"], group, "more than one GPU (judged by the parallel tier)")
    case = _training_case(row)
    if isinstance(case, str):
        return Skipped(row["id"], group, case)
    gpu = _gpu_or_skip(row, group)
    if isinstance(gpu, Skipped):
        return gpu
    return _predict_training(row, gpu, group, case)


def deduplicate_runs(results: list[RowPrediction | Skipped]) -> list[RowPrediction | Skipped]:
    """Skip an epoch-time row when a step-time row of the same run exists (one run, one vote)."""
    ids = {r.id for r in results if isinstance(r, RowPrediction)}
    out: list[RowPrediction | Skipped] = []
    for r in results:
        if isinstance(r, RowPrediction) and r.id.endswith("-epoch"):
            twin = r.id[: -len("-epoch")] + "-step"
            if twin in ids:
                out.append(Skipped(r.id, r.group, f"same run as {twin}"))
                continue
        out.append(r)
    return out


__all__ = ["RowPrediction", "Skipped", "deduplicate_runs", "predict_row", "resolve_gpu"]
