"""Real training steps, measured: a NumPy MLP on the CPU, PyTorch zoo models on a GPU.

A step is forward + backward + optimizer update of one mini-batch. The whole step is timed
without instrumentation (median over repetitions after warm-up; CUDA events on a GPU); per-layer
times come from a separate instrumented run: per-layer host timers for the NumPy MLP, the PyTorch
profiler (Kineto trace, see :mod:`perfmodel.calibration.kineto`) for torch models.

The torch models are built here so that the step runs without downloads: ResNet-50 is
``torchvision.models.resnet50(weights=None)`` (He et al. 2016); the GPT-2-size model is a
Megatron/GPT-2 layout decoder (pre-LayerNorm, fused-QKV linear, ``scaled_dot_product_attention``
with causal mask, GELU MLP of width 4h, tied LM head) written out below.

Kept whole (issue 29): :func:`torch_step` (~170 lines) and :func:`numpy_mlp_step` (~120) are each
one measurement procedure whose phases (warm-up, timed repeats, instrumented run, records) share
the model, the step closure and the device synchronisation; ``torch_step`` runs only where torch
and a GPU are, so a split could not be checked on the development machine.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.errors import CalibrationError, ConfigError


@dataclass(frozen=True)
class StepSpec:
    """Which training step to measure.

    Attributes
    ----------
    model
        ``"mlp"`` (NumPy or torch), ``"resnet50"``, ``"vgg19_bn_cifar"``, ``"gpt2"`` (torch).
    batch_size
        Samples per step.
    precision
        ``"fp32"``, ``"tf32"`` or ``"bf16"`` (mixed: bf16 autocast, fp32 master weights).
    model_args
        ``widths`` for the MLP; ``seq_len``, ``layers``, ``hidden``, ``heads``, ``vocab`` for GPT-2;
        ``image_size`` and ``memory_format`` (``channels_last``, the default, or ``nchw``) for
        ResNet-50; ``memory_format`` (default ``nchw``, as the CIFAR scripts run it) for the CIFAR
        VGG-19-BN (bearpaw/pytorch-classification, 32x32 input, ``Linear(512, classes)`` head).
    """

    model: str
    batch_size: int
    precision: str = "fp32"
    model_args: tuple[tuple[str, Any], ...] = ()

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.model_args)

    @property
    def key(self) -> str:
        extra = "-".join(f"{k}{_fmt(v)}" for k, v in self.model_args)
        return f"{self.model}/{self.precision}/b{self.batch_size}" + (f"/{extra}" if extra else "")


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "x".join(str(x) for x in v)
    return str(v)


# ---------------------------------------------------------------------------------------------
# NumPy MLP (CPU)
# ---------------------------------------------------------------------------------------------


def numpy_mlp_step(
    widths: Sequence[int], batch_size: int, *, repeats: int = 7, seed: int = 0, clock: str = "wall"
) -> list[Measurement]:
    """Measure a NumPy MLP training step (FP32): Linear+ReLU layers, softmax cross-entropy, SGD.

    ``widths = (in, h1, ..., out)``. Layer ``fc{i}`` computes ``y = x @ W + b`` (``W`` of shape
    ``in x out``); ReLU follows every layer but the last. Backward computes ``dX = dY @ W.T``
    (skipped for the first layer, as frameworks do) and ``dW = X.T @ dY``; SGD updates
    ``W -= lr * dW`` in place (BLAS ``saxpy``: 12 bytes per parameter, as a fused optimizer kernel). Returns the whole-step measurement (median of ``repeats`` un-instrumented
    steps after one warm-up) and per-layer ``fwd``/``bwd`` measurements plus ``optimizer``.
    ``clock`` is ``"wall"`` (``time.perf_counter``) or ``"process"`` (``time.process_time``, see
    :func:`perfmodel.calibration.timing.process_sample`).
    """
    now = {"wall": time.perf_counter, "process": time.process_time}[clock]
    if len(widths) < 2 or any(int(w) <= 0 for w in widths) or batch_size <= 0:
        raise ConfigError(
            f"MLP widths {list(widths)} / batch {batch_size} must be positive (>= 2 widths)",
            value=widths,
            where="widths",
        )
    rng = np.random.default_rng(seed)
    ws = [
        (rng.standard_normal((a, b)).astype(np.float32) / np.float32(math.sqrt(a)))
        for a, b in itertools.pairwise(widths)
    ]
    bs = [np.full(b, 0.01, np.float32) for b in widths[1:]]
    x0 = rng.standard_normal((batch_size, widths[0])).astype(np.float32)
    labels = rng.integers(0, widths[-1], size=batch_size)
    lr = 1e-3
    n = len(ws)
    from scipy.linalg.blas import saxpy as axpy

    lap: dict[str, float] = {}

    def mark(name: str, t0: float) -> float:
        t1 = now()
        lap[name] = lap.get(name, 0.0) + (t1 - t0)
        return t1

    def step(timed: bool) -> None:
        t = now()
        acts = [x0]
        for i in range(n):
            y = acts[-1] @ ws[i]
            y += bs[i]
            if i < n - 1:
                np.maximum(y, 0.0, out=y)
            acts.append(y)
            if timed:
                t = mark(f"fc{i}/fwd", t)
        logits = acts[-1]
        z = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(batch_size), labels] -= 1.0
        dy = p / np.float32(batch_size)
        if timed:
            t = mark("loss/fwd", t)
        grads = [None] * n
        for i in reversed(range(n)):
            if i < n - 1:
                dy = dy * (acts[i + 1] > 0)
            gw = acts[i].T @ dy
            gb = dy.sum(axis=0)
            grads[i] = (gw, gb)
            if i > 0:
                dy = dy @ ws[i].T
            if timed:
                t = mark(f"fc{i}/bwd", t)
        for i in range(n):  # in-place axpy: read grad, read + write weight (no temporaries)
            axpy(grads[i][0].ravel(), ws[i].ravel(), a=-lr)  # type: ignore[index]
            axpy(grads[i][1], bs[i], a=-lr)  # type: ignore[index]
        if timed:
            mark("optimizer", t)

    step(False)  # warm-up
    whole = []
    for _ in range(repeats):
        t0 = now()
        step(False)
        whole.append(now() - t0)
    per_layer: dict[str, list[float]] = {}
    for _ in range(repeats):
        lap.clear()
        step(True)
        for k, v in lap.items():
            per_layer.setdefault(k, []).append(v)
    spec = StepSpec("mlp", batch_size, "fp32", (("widths", tuple(int(w) for w in widths)),))
    flop = 3.0 * 2.0 * batch_size * sum(a * b for a, b in itertools.pairwise(widths))
    common = {"model": "mlp", "batch_size": batch_size, "precision": "fp32"}
    out = [
        Measurement(
            kind=BenchKind.STEP,
            key=f"step/{spec.key}",
            params={
                **common,
                "widths": [int(w) for w in widths],
                "optimizer": "sgd",
                "framework": f"numpy {np.__version__}",
                "clock": clock,
            },
            timing=TimingStats.from_samples(whole, where="mlp step"),
            work_flop=flop,
            backend="numpy",
        )
    ]
    for name, samples in per_layer.items():
        layer, _, phase = name.partition("/")
        out.append(
            Measurement(
                kind=BenchKind.STEP_LAYER,
                key=f"step_layer/{spec.key}/{name}",
                params={
                    **common,
                    "layer": layer,
                    "module": "Linear" if layer.startswith("fc") else "",
                    "phase": phase or "optimizer",
                },
                timing=TimingStats.from_samples(samples, where=name),
                backend="numpy",
                notes="host timer around the layer's NumPy calls",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# PyTorch models
# ---------------------------------------------------------------------------------------------


def _torch_gpt(
    torch: Any, *, layers: int, hidden: int, heads: int, vocab: int, seq_len: int
) -> Any:
    nn = torch.nn
    F = torch.nn.functional

    class CausalSelfAttention(nn.Module):
        """Fused attention core (FlashAttention through SDPA), no projections."""

        def __init__(self) -> None:
            super().__init__()
            self.heads = heads

        def forward(self, qkv: Any) -> Any:
            b, s, three_h = qkv.shape
            h = three_h // 3
            q, k, v = qkv.view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return y.transpose(1, 2).reshape(b, s, h)

    class ResidualAdd(nn.Module):
        def forward(self, x: Any, y: Any) -> Any:
            return x + y

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.attn = CausalSelfAttention()
            self.proj = nn.Linear(hidden, hidden)
            self.add1 = ResidualAdd()
            self.ln2 = nn.LayerNorm(hidden)
            self.fc = nn.Linear(hidden, 4 * hidden)
            self.gelu = nn.GELU(approximate="tanh")
            self.fc_proj = nn.Linear(4 * hidden, hidden)
            self.add2 = ResidualAdd()

        def forward(self, x: Any) -> Any:
            x = self.add1(x, self.proj(self.attn(self.qkv(self.ln1(x)))))
            return self.add2(x, self.fc_proj(self.gelu(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(seq_len, hidden)
            self.add_pos = ResidualAdd()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied (GPT-2)

        def forward(self, idx: Any) -> Any:
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.add_pos(self.wte(idx), self.wpe(pos))
            for blk in self.blocks:
                x = blk(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


_MEMORY_FORMATS = {"channels_last": "channels_last", "nhwc": "channels_last", "nchw": "nchw",
                   "contiguous": "nchw"}  # fmt: skip


def memory_format_name(args: dict[str, Any], default: str = "channels_last") -> str:
    """``memory_format`` step argument -> ``"channels_last"`` or ``"nchw"`` (PyTorch's default
    contiguous layout); raises ConfigError on anything else."""
    raw = str(args.get("memory_format", default)).lower()
    if raw not in _MEMORY_FORMATS:
        raise ConfigError(
            f"step memory_format {raw!r}: expected channels_last (nhwc) or nchw (contiguous)",
            value=raw,
            where="--step",
        )
    return _MEMORY_FORMATS[raw]


def _memory_format(torch: Any, args: dict[str, Any], default: str = "channels_last") -> Any:
    name = memory_format_name(args, default)
    return torch.channels_last if name == "channels_last" else torch.contiguous_format


def _build_torch(spec: StepSpec, device: Any) -> tuple[Any, Any, Any, Any, str]:
    """(model, inputs, targets, optimizer, optimizer name) on ``device``."""
    import torch

    args = spec.args
    gen = torch.Generator(device="cpu").manual_seed(0)
    if spec.model == "resnet50":
        try:
            import torchvision
        except ImportError as exc:
            raise CalibrationError("resnet50 step needs torchvision", value="resnet50") from exc
        size = int(args.get("image_size", 224))
        model = torchvision.models.resnet50(
            weights=None, num_classes=int(args.get("num_classes", 1000))
        )
        fmt = _memory_format(torch, args)
        model = model.to(device=device, memory_format=fmt)
        x = torch.randn(spec.batch_size, 3, size, size, generator=gen).to(device, memory_format=fmt)
        y = torch.randint(
            0, int(args.get("num_classes", 1000)), (spec.batch_size,), generator=gen
        ).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        return model, x, y, opt, "sgd-momentum"
    if spec.model == "vgg19_bn_cifar":
        # bearpaw/pytorch-classification models/cifar/vgg.py, cfg 'E' with batch norm: 16 3x3
        # convolutions (bias) + BN + ReLU, five 2x2 max-pools, Linear(512, classes).
        cfg = [64, 64, "M", 128, 128, "M", *[256] * 4, "M", *[512] * 4, "M", *[512] * 4, "M"]
        layers: list[Any] = []
        c_in = 3
        for v in cfg:
            if v == "M":
                layers.append(torch.nn.MaxPool2d(2, 2))
            else:
                layers += [
                    torch.nn.Conv2d(c_in, int(v), 3, padding=1),
                    torch.nn.BatchNorm2d(int(v)),
                    torch.nn.ReLU(inplace=True),
                ]
                c_in = int(v)
        classes = int(args.get("num_classes", 10))
        fmt = _memory_format(torch, args, default="nchw")
        model = torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(512, classes)).to(
            device=device, memory_format=fmt
        )
        x = torch.randn(spec.batch_size, 3, 32, 32, generator=gen).to(device, memory_format=fmt)
        y = torch.randint(0, classes, (spec.batch_size,), generator=gen).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        return model, x, y, opt, "sgd-momentum"
    if spec.model == "gpt2":
        seq = int(args.get("seq_len", 1024))
        vocab = int(args.get("vocab", 50257))
        model = _torch_gpt(
            torch,
            layers=int(args.get("layers", 12)),
            hidden=int(args.get("hidden", 768)),
            heads=int(args.get("heads", 12)),
            vocab=vocab,
            seq_len=seq,
        ).to(device)
        x = torch.randint(0, vocab, (spec.batch_size, seq), generator=gen).to(device)
        y = torch.randint(0, vocab, (spec.batch_size, seq), generator=gen).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
        return model, x, y, opt, "adamw-fused" if device.type == "cuda" else "adamw"
    if spec.model == "mlp":
        widths = [int(w) for w in args.get("widths", (512, 1024, 1024, 10))]
        mods: list[Any] = []
        for i, (a, b) in enumerate(itertools.pairwise(widths)):
            mods.append(torch.nn.Linear(a, b))
            if i < len(widths) - 2:
                mods.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*mods).to(device)
        x = torch.randn(spec.batch_size, widths[0], generator=gen).to(device)
        y = torch.randint(0, widths[-1], (spec.batch_size,), generator=gen).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        return model, x, y, opt, "sgd"
    raise ConfigError(f"no torch step for model {spec.model!r}", value=spec.model, where="steps")


def torch_step(
    spec: StepSpec,
    device_name: str = "cuda",
    *,
    warmup: int = 8,
    repeats: int = 20,
    trace_path: str | Path | None = None,
) -> list[Measurement]:
    """Measure one PyTorch training step of ``spec``: whole step (events), per layer (profiler).

    Precision ``bf16``: ``torch.autocast(dtype=bfloat16)`` around forward and loss (FP32 master
    weights and optimizer). ``tf32``: TF32 allowed for matmuls and convolutions. ``fp32``: TF32
    disabled. The loss is ``cross_entropy`` (labelled ``loss`` in the trace). Per-layer times are
    imported from a Kineto trace of one step (written to ``trace_path`` when given).
    """
    import torch

    from perfmodel.calibration.kineto import LAYER_PREFIX, OPTIMIZER_LABEL, Phase, summarize_trace

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    tf32 = spec.precision in ("tf32", "bf16")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    model, x, y, opt, opt_name = _build_torch(spec, device)
    model.train()
    amp = spec.precision == "bf16"
    loss_fn = torch.nn.CrossEntropyLoss()

    def run_step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            out = model(x)
            loss = loss_fn(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        with torch.profiler.record_function(OPTIMIZER_LABEL):
            opt.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        run_step()
    sync()
    samples: list[float] = []
    for _ in range(repeats):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            run_step()
            e.record()
            e.synchronize()
            samples.append(s.elapsed_time(e) * 1e-3)
        else:
            t0 = time.perf_counter()
            run_step()
            samples.append(time.perf_counter() - t0)
    params = {
        "model": spec.model,
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "optimizer": opt_name,
        "framework": f"torch {torch.__version__}",
        **{k: list(v) if isinstance(v, tuple) else v for k, v in spec.model_args},
    }
    if spec.model == "resnet50":
        params.setdefault("image_size", 224)
        params["memory_format"] = memory_format_name(spec.args)
    if spec.model == "vgg19_bn_cifar":
        params["image_size"] = 32
        params["memory_format"] = memory_format_name(spec.args, "nchw")
    if spec.model == "gpt2":
        for k, v in (
            ("seq_len", 1024),
            ("layers", 12),
            ("hidden", 768),
            ("heads", 12),
            ("vocab", 50257),
        ):
            params.setdefault(k, v)
        params["attention"] = "torch scaled_dot_product_attention (causal)"
    n_params = sum(p.numel() for p in model.parameters())
    params["parameters"] = int(n_params)
    out = [
        Measurement(
            kind=BenchKind.STEP,
            key=f"step/{spec.key}",
            params=params,
            timing=TimingStats.from_samples(samples, where=f"{spec.key} step"),
            backend=f"torch-{device.type}",
            notes="whole step (zero_grad, forward, loss, backward, optimizer), un-instrumented",
        )
    ]

    # -- instrumented run: record_function around every leaf module ---------------------------
    handles = []
    open_ranges: dict[int, list[Any]] = {}

    def pre_hook(mod: Any, _inp: Any, name: str = "") -> None:
        rf = torch.profiler.record_function(f"{LAYER_PREFIX}{name}|{type(mod).__name__}")
        rf.__enter__()
        open_ranges.setdefault(id(mod), []).append(rf)

    def post_hook(mod: Any, _inp: Any, _out: Any) -> None:
        stack = open_ranges.get(id(mod))
        if stack:
            stack.pop().__exit__(None, None, None)

    for name, mod in model.named_modules():
        if len(list(mod.children())) == 0:
            handles.append(mod.register_forward_pre_hook(lambda m, i, _n=name: pre_hook(m, i, _n)))
            handles.append(mod.register_forward_hook(post_hook))
    loss_mod = loss_fn
    handles.append(loss_mod.register_forward_pre_hook(lambda m, i: pre_hook(m, i, "loss")))
    handles.append(loss_mod.register_forward_hook(post_hook))
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:
        with torch.profiler.profile(activities=activities, record_shapes=False) as prof:
            run_step()
            sync()
    finally:
        for h in handles:
            h.remove()
    with contextlib.ExitStack() as stack:
        if trace_path:
            trace = Path(trace_path)
        else:  # a temporary trace, deleted once summarised
            trace = Path(stack.enter_context(tempfile.TemporaryDirectory())) / f"{spec.model}.json"
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
        summary = summarize_trace(trace)
    for lt in summary.layers:
        out.append(
            Measurement(
                kind=BenchKind.STEP_LAYER,
                key=f"step_layer/{spec.key}/{lt.layer}/{lt.phase.value}",
                params={
                    "model": spec.model,
                    "batch_size": spec.batch_size,
                    "precision": spec.precision,
                    "layer": lt.layer,
                    "module": lt.module,
                    "phase": lt.phase.value,
                    "events": lt.events,
                },
                timing=TimingStats.from_samples([lt.time_s], where=lt.layer),
                backend=f"torch-{device.type}",
                notes=f"{'kernel' if summary.on_device else 'operator'} time from Kineto trace {trace.name}",
            )
        )
    out[0] = Measurement(
        kind=out[0].kind,
        key=out[0].key,
        params={
            **out[0].params,
            "traced_device_busy_s": summary.device_busy_s,
            "traced_span_s": summary.span_s,
            "traced_fwd_s": summary.total(Phase.FORWARD),
            "traced_bwd_s": summary.total(Phase.BACKWARD),
            "traced_optimizer_s": summary.total(Phase.OPTIMIZER),
            "traced_other_s": summary.total(Phase.OTHER),
            "trace_file": trace.name,
            "median_over_repeats": statistics.median(samples),
        },
        timing=out[0].timing,
        backend=out[0].backend,
        notes=out[0].notes,
    )
    return out
