"""The microbenchmark suite: what is measured, in which order, within a time budget.

:func:`plan_suite` lists :class:`BenchItem` s for a backend (GEMM sweep over shapes and dtypes,
convolutions of the zoo CNNs, memory copy/elementwise, host-device transfers, launch overhead,
concurrent streams, real training steps). :func:`run_suite` runs them group by group, each group
getting a share of the budget (unused time rolls over to the next group), writes the profile after
every item (atomically; ``status.complete`` stays false until the end) and, with ``resume``, skips
what an earlier, interrupted run already measured.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

from perfmodel.calibration.backends import Backend, Op, Unsupported
from perfmodel.calibration.measurement import BenchKind, Measurement, TimingStats
from perfmodel.calibration.profile import CalibrationProfile, DeviceKind, read_profile
from perfmodel.calibration.shapes import AttentionShape, ConvShape
from perfmodel.calibration.steps import StepSpec, numpy_mlp_step, torch_step
from perfmodel.calibration.timing import TimingPolicy, time_operation
from perfmodel.dtypes import DType
from perfmodel.errors import CalibrationError
from perfmodel.units import KiB, MiB

GROUP_SHARES: dict[str, float] = {
    "launch": 0.03,
    "memory": 0.10,
    "gemm": 0.32,
    "conv": 0.15,
    "transfer": 0.06,
    "streams": 0.06,
    "collectives": 0.06,
    "steps": 0.22,
    "input": 0.02,
}
"""Fraction of the budget each group gets (unused time rolls over to the groups after it)."""

GROUP_ORDER = tuple(GROUP_SHARES)


@dataclass(frozen=True)
class BenchItem:
    """One entry of the suite.

    ``run(backend, policy)`` returns the measurements (one for a microbenchmark, several for a
    training step) or raises :class:`~perfmodel.calibration.backends.Unsupported`.
    """

    group: str
    key: str
    label: str
    run: Callable[[Backend, TimingPolicy], list[Measurement]] = field(repr=False)
    cost: float = 1.0  # relative share of the group's budget


def _item(
    group: str,
    key: str,
    label: str,
    kind: BenchKind,
    params: dict[str, Any],
    make: Callable[[Backend], Op],
) -> BenchItem:
    """A benchmark of one operation (:func:`_single`) in ``group``."""
    return BenchItem(group, key, label, _single(kind, key, params, make))


def _single(
    kind: BenchKind, key: str, params: dict[str, Any], make: Callable[[Backend], Op]
) -> Callable[[Backend, TimingPolicy], list[Measurement]]:
    def run(backend: Backend, policy: TimingPolicy) -> list[Measurement]:
        op = make(backend)
        try:
            stats = time_operation(op.fn, backend.prepare_timing(op), policy, where=key)
            backend.synchronize()
        finally:
            backend.release()
        return [
            Measurement(
                kind=kind,
                key=key,
                params={**params, "timing": backend.last_mode, **backend.telemetry_params()},
                timing=stats,
                work_flop=op.work_flop,
                work_bytes=op.work_bytes,
                backend=backend.name,
                notes=op.notes,
            )
        ]

    return run


def _input_runner(backend: Backend, policy: TimingPolicy) -> list[Measurement]:
    """Per-sample CPU cost of each input-pipeline path (:mod:`perfmodel.host.measure`)."""
    from perfmodel.host.measure import measure_input_timings

    # one sample of every path costs ~6.5 ms on one core (a 3-5 ms JPEG, 3 x 8 CIFAR samples at
    # ~0.1 ms): size the batches to the timing target, at least 8 samples per batch
    repeats = 5 if policy.target_s >= 0.2 else 3
    samples = max(8, min(64, int(policy.target_s / (repeats * 6.5e-3))))
    out = []
    for (dataset, loader), per_sample in measure_input_timings(
        samples=samples, repeats=repeats
    ).items():
        key = f"input/{dataset.value}/{loader.value}"
        out.append(
            Measurement(
                kind=BenchKind.INPUT,
                key=key,
                params={"dataset": dataset.value, "loader": loader.value, "timing": "thread_cpu"},
                timing=TimingStats.from_samples(per_sample, where=key),
                backend=backend.name,
                notes="CPU seconds per sample of one thread (perfmodel.host.measure)",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# shape lists
# ---------------------------------------------------------------------------------------------

# ResNet-50 (torchvision v1.5: stride in the 3x3) convolutions: (C_in, H, W, C_out, R, S, stride, pad)
RESNET50_CONVS: tuple[tuple[int, int, int, int, int, int, int, int], ...] = (
    (3, 224, 224, 64, 7, 7, 2, 3),
    (64, 56, 56, 64, 1, 1, 1, 0),
    (64, 56, 56, 64, 3, 3, 1, 1),
    (64, 56, 56, 256, 1, 1, 1, 0),
    (256, 56, 56, 64, 1, 1, 1, 0),
    (256, 56, 56, 128, 1, 1, 1, 0),
    (128, 56, 56, 128, 3, 3, 2, 1),
    (128, 28, 28, 512, 1, 1, 1, 0),
    (256, 56, 56, 512, 1, 1, 2, 0),
    (512, 28, 28, 128, 1, 1, 1, 0),
    (128, 28, 28, 128, 3, 3, 1, 1),
    (512, 28, 28, 256, 1, 1, 1, 0),
    (256, 28, 28, 256, 3, 3, 2, 1),
    (256, 14, 14, 1024, 1, 1, 1, 0),
    (512, 28, 28, 1024, 1, 1, 2, 0),
    (1024, 14, 14, 256, 1, 1, 1, 0),
    (256, 14, 14, 256, 3, 3, 1, 1),
    (1024, 14, 14, 512, 1, 1, 1, 0),
    (512, 14, 14, 512, 3, 3, 2, 1),
    (512, 7, 7, 2048, 1, 1, 1, 0),
    (1024, 14, 14, 2048, 1, 1, 2, 0),
    (2048, 7, 7, 512, 1, 1, 1, 0),
    (512, 7, 7, 512, 3, 3, 1, 1),
)
# VGG-16 / AlexNet-like layers: large 3x3 and 5x5 convolutions
OTHER_CNN_CONVS = (
    (64, 224, 224, 64, 3, 3, 1, 1),
    (256, 56, 56, 256, 3, 3, 1, 1),
    (512, 14, 14, 512, 3, 3, 1, 1),
    (64, 27, 27, 192, 5, 5, 1, 2),
)


def gemm_shapes(device: DeviceKind) -> list[tuple[int, int, int, int]]:
    """(m, n, k, batch) of the GEMM sweep.

    Square sizes (asymptotic rate), small-``m`` shapes (a small per-GPU batch: tile and wave
    quantisation), transformer shapes (QKV, projection, MLP, LM head of GPT-2 at 8 x 1024
    tokens), batched attention-like products, and odd sizes (not multiples of the tile).
    """
    if device is DeviceKind.CUDA:
        square = [(s, s, s, 1) for s in (256, 512, 1024, 2048, 4096, 8192)]
        small = [(m, 4096, 4096, 1) for m in (1, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024)]
        tfm = [
            (8192, 2304, 768, 1),
            (8192, 768, 768, 1),
            (8192, 3072, 768, 1),
            (8192, 768, 3072, 1),
            (8192, 50304, 768, 1),
            (2048, 1024, 4096, 1),
            (16384, 4096, 4096, 1),
        ]
        batched = [(1024, 1024, 64, 96), (1024, 64, 1024, 96), (512, 512, 64, 192)]
        odd = [(4095, 4095, 4095, 1), (1000, 1000, 1000, 1), (3000, 257, 2048, 1)]
    else:
        square = [(s, s, s, 1) for s in (64, 128, 256, 512, 1024)]
        small = [(m, 1024, 1024, 1) for m in (1, 8, 32, 64, 128, 256)]
        tfm = [
            (128, 1024, 512, 1),
            (128, 10, 1024, 1),
            (512, 1024, 128, 1),
            (1024, 512, 128, 1),
            (128, 2048, 2048, 1),
            (2048, 2048, 128, 1),
        ]
        batched = [(128, 128, 64, 16)]
        odd = [(1000, 1000, 1000, 1), (300, 257, 511, 1)]
    return square + small + tfm + batched + odd


def memory_sizes(device: DeviceKind) -> list[int]:
    if device is DeviceKind.CUDA:
        return [int(x * MiB) for x in (0.25, 1, 4, 16, 64, 256, 1024)]
    return [int(x * KiB) for x in (256,)] + [int(x * MiB) for x in (2, 8, 32, 128)]


def plan_suite(
    backend: Backend,
    *,
    groups: Sequence[str] | None = None,
    steps: Sequence[StepSpec] | None = None,
    trace_dir: Path | None = None,
) -> list[BenchItem]:
    """The benchmarks to run on ``backend``, in group order (see :data:`GROUP_SHARES`)."""
    wanted = set(groups or GROUP_ORDER)
    unknown = wanted - set(GROUP_ORDER)
    if unknown:
        raise CalibrationError(
            f"unknown benchmark group(s) {sorted(unknown)}; expected {', '.join(GROUP_ORDER)}",
            value=sorted(unknown),
            where="--only",
        )
    wanted &= set(backend.groups)
    dev = backend.device_kind
    items: list[BenchItem] = []
    for wants, plan in (
        ("launch" in wanted, _launch_items),
        ("input" in wanted, _input_items),
        ("memory" in wanted, _memory_items),
        ("gemm" in wanted, _gemm_items),
        ("gemm" in wanted and dev is DeviceKind.CUDA, _attention_items),
        ("conv" in wanted, _conv_items),
        ("transfer" in wanted, _transfer_items),
        ("streams" in wanted, _stream_items),
        ("collectives" in wanted and dev is DeviceKind.CUDA, _collective_items),
        ("steps" in wanted, lambda be: _step_items(be, steps, trace_dir)),
    ):
        if wants:
            items += plan(backend)
    return items


def _launch_items(backend: Backend) -> list[BenchItem]:
    """The launch-overhead benchmarks (eager; graph replay on a GPU)."""
    dev = backend.device_kind
    items: list[BenchItem] = []
    items.append(
        _item(
            "launch",
            "launch/tiny-op",
            "launch overhead (eager dispatch)",
            BenchKind.LAUNCH,
            {"launches": 1, "mode": "eager"},
            lambda b: b.launch(graph=False),
        )
    )
    if dev is DeviceKind.CUDA:
        items.append(
            _item(
                "launch",
                "launch/tiny-op-graph",
                "launch overhead (GPU, graph replay)",
                BenchKind.LAUNCH,
                {"launches": 1, "mode": "graph"},
                lambda b: b.launch(graph=True),
            )
        )
    return items


def _input_items(backend: Backend) -> list[BenchItem]:
    """The input pipeline benchmark (host CPU)."""
    items: list[BenchItem] = []
    items.append(
        BenchItem(
            "input",
            "input/samples",
            "input pipeline: JPEG decode + augment, CIFAR augment (host CPU)",
            _input_runner,
        )
    )
    return items


def _memory_items(backend: Backend) -> list[BenchItem]:
    """Copies and element-wise operations over the device's memory sizes."""
    dev = backend.device_kind
    items: list[BenchItem] = []
    for size in memory_sizes(dev):
        for kind, fname in ((BenchKind.COPY, "copy"), (BenchKind.ELEMENTWISE, "elementwise")):
            key = f"{fname}/{size}"
            make = (
                (lambda b, s=size: b.copy(s))
                if fname == "copy"
                else (lambda b, s=size: b.elementwise(s))
            )
            items.append(
                _item("memory", key, f"{fname} {size / MiB:.2f} MiB", kind, {"nbytes": size}, make)
            )
    return items


def _gemm_items(backend: Backend) -> list[BenchItem]:
    """GEMMs of every shape in every dtype the backend times."""
    dev = backend.device_kind
    items: list[BenchItem] = []
    shapes = gemm_shapes(dev)
    for dtype in backend.gemm_dtypes:
        for m, n, k, batch in shapes:
            key = f"gemm/{dtype.value}/m{m}-n{n}-k{k}-b{batch}"
            params = {"m": m, "n": n, "k": k, "batch": batch, "dtype": dtype.value}
            items.append(
                _item(
                    "gemm",
                    key,
                    f"gemm {dtype.value} {m}x{n}x{k}" + (f" x{batch}" if batch > 1 else ""),
                    BenchKind.GEMM,
                    params,
                    lambda b, p=(m, n, k, batch, dtype): b.gemm(*p),
                )
            )
    return items


def _attention_items(backend: Backend) -> list[BenchItem]:
    """Fused attention forward and forward+backward (bf16; GPU only)."""
    items: list[BenchItem] = []
    # fused attention (GPT-2 small, longer sequences, a non-causal encoder), bf16
    for b, h, sq, d, causal in (
        (8, 12, 1024, 64, True),
        (16, 12, 512, 64, True),
        (4, 16, 2048, 128, True),
        (2, 32, 4096, 128, True),
        (8, 16, 512, 64, False),
    ):
        shape = AttentionShape(b, h, sq, d, causal)
        for backward in (False, True):
            phase = "fwd+bwd" if backward else "fwd"
            key = f"attention/bf16/b{b}-h{h}-s{sq}-d{d}-{'causal' if causal else 'full'}/{phase}"
            params = {**shape.params(), "dtype": "bf16", "phase": phase}
            items.append(
                _item(
                    "gemm",
                    key,
                    f"attention {phase} b{b} h{h} s{sq} d{d}",
                    BenchKind.ATTENTION,
                    params,
                    lambda be, p=(shape, DType.BF16, backward): be.attention(*p),
                )
            )
    return items


def _conv_items(backend: Backend) -> list[BenchItem]:
    """ResNet-50 and other CNN convolutions (one dtype on a CPU)."""
    dev = backend.device_kind
    items: list[BenchItem] = []
    batch = 64 if dev is DeviceKind.CUDA else 4
    conv_dtypes = [d for d in (DType.BF16, DType.TF32, DType.FP32) if d in backend.gemm_dtypes]
    if dev is not DeviceKind.CUDA:
        conv_dtypes = conv_dtypes[:1]
    for dtype in conv_dtypes:
        for c, h, w, kout, r, s, stride, pad in RESNET50_CONVS + OTHER_CNN_CONVS:
            key = f"conv/{dtype.value}/n{batch}-c{c}-h{h}-w{w}-k{kout}-r{r}-s{s}-st{stride}-p{pad}"
            shape = ConvShape(batch, c, h, w, kout, r, s, stride, pad)
            items.append(
                _item(
                    "conv",
                    key,
                    f"conv {dtype.value} {c}->{kout} {r}x{s}/{stride} @{h}",
                    BenchKind.CONV,
                    {**shape.params(), "dtype": dtype.value},
                    lambda b, p=(shape, dtype): b.conv(*p),
                )
            )
    return items


def _transfer_items(backend: Backend) -> list[BenchItem]:
    """Host-device copies, pinned and pageable, both ways."""
    items: list[BenchItem] = []
    sizes = [int(x * MiB) for x in (0.0625, 1, 16, 256)]
    for pinned in (True, False):
        for to_dev in (True, False):
            for size in sizes:
                kind = BenchKind.H2D if to_dev else BenchKind.D2H
                key = f"{kind.value}/{'pinned' if pinned else 'pageable'}/{size}"
                items.append(
                    _item(
                        "transfer",
                        key,
                        f"{kind.value} {'pinned' if pinned else 'pageable'} {size / MiB:.2f} MiB",
                        kind,
                        {"nbytes": size, "pinned": pinned},
                        lambda b, p=(size, pinned, to_dev): b.host_transfer(*p),
                    )
                )
    return items


def _stream_items(backend: Backend) -> list[BenchItem]:
    """Concurrent small GEMMs on 1-8 streams."""
    items: list[BenchItem] = []
    dtype = DType.BF16 if DType.BF16 in backend.gemm_dtypes else DType.FP32
    for m in (32, 256):
        for n_streams in (1, 2, 4, 8):
            key = f"streams/{dtype.value}/m{m}-n2048-k2048/x{n_streams}"
            params = {
                "streams": n_streams,
                "m": m,
                "n": 2048,
                "k": 2048,
                "dtype": dtype.value,
                "reps": 16,
            }
            items.append(
                _item(
                    "streams",
                    key,
                    f"{n_streams} concurrent learners, m={m}",
                    BenchKind.STREAMS,
                    params,
                    lambda b, p=(n_streams, m, 2048, 2048, dtype, 16): b.streams(*p),
                )
            )
    return items


def _collective_items(backend: Backend) -> list[BenchItem]:
    """NCCL collectives over every GPU of the machine (two or more)."""
    items: list[BenchItem] = []
    n_gpu = backend.device_info().count
    if n_gpu >= 2:
        items.append(
            BenchItem(
                "collectives",
                f"collectives/nccl/n{n_gpu}",
                f"NCCL collectives over {n_gpu} GPUs",
                _collectives_runner(n_gpu),
                cost=1.0,
            )
        )
    return items


def _step_items(
    backend: Backend, steps: Sequence[StepSpec] | None, trace_dir: Path | None
) -> list[BenchItem]:
    """Training steps (``steps``, or the backend's default ones)."""
    items: list[BenchItem] = []
    for spec in steps if steps is not None else default_steps(backend):
        items.append(
            BenchItem(
                "steps",
                f"step/{spec.key}",
                f"training step {spec.key}",
                _step_runner(spec, trace_dir),
                cost=4.0,
            )
        )
    return items


def parse_step(text: str) -> StepSpec:
    """``MODEL:BATCH:PRECISION[:key=value,...]`` -> :class:`StepSpec` (``--step`` flag).

    >>> parse_step("gpt2:8:bf16:seq_len=1024,vocab=50304").key
    'gpt2/bf16/b8/seq_len1024-vocab50304'
    """
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise CalibrationError(
            f"--step {text!r}: expected MODEL:BATCH:PRECISION[:key=value,...]",
            value=text,
            where="--step",
        )
    try:
        batch = int(parts[1])
    except ValueError as exc:
        raise CalibrationError(
            f"--step {text!r}: batch {parts[1]!r} is not an integer", value=text, where="--step"
        ) from exc
    if batch < 1:
        raise CalibrationError(
            f"--step {text!r}: batch {batch} must be >= 1", value=text, where="--step"
        )
    from perfmodel.dtypes import Precision
    from perfmodel.errors import ConfigError
    from perfmodel.workload.zoo import get_model_info

    try:  # an unknown model or precision is bad input, not a skipped benchmark
        get_model_info(parts[0])
        Precision.parse(parts[2], where="--step")
    except ConfigError as exc:
        raise CalibrationError(f"--step {text!r}: {exc}", value=text, where="--step") from exc
    args: list[tuple[str, Any]] = []
    if len(parts) == 4 and parts[3]:
        for kv in parts[3].split(","):
            k, sep, v = kv.partition("=")
            if not sep:
                raise CalibrationError(
                    f"--step {text!r}: {kv!r} is not key=value", value=text, where="--step"
                )
            val: Any = (
                tuple(int(x) for x in v.split("x")) if "x" in v else int(v) if v.isdigit() else v
            )
            args.append((k, val))
    return StepSpec(parts[0], batch, parts[2], tuple(args))


def default_steps(backend: Backend) -> list[StepSpec]:
    """Training steps measured by default: ResNet-50 and GPT-2 on a GPU, a NumPy MLP on the CPU."""
    if backend.device_kind is DeviceKind.CUDA:
        return [
            StepSpec("resnet50", 128, "bf16"),
            StepSpec("gpt2", 8, "bf16", (("seq_len", 1024),)),
            StepSpec("resnet50", 64, "tf32"),
        ]
    return [StepSpec("mlp", 128, "fp32", (("widths", (512, 1024, 1024, 10)),))]


def _collectives_runner(n_gpu: int) -> Callable[[Backend, TimingPolicy], list[Measurement]]:
    def run(backend: Backend, policy: TimingPolicy) -> list[Measurement]:
        import subprocess

        from perfmodel.calibration.collectives import intra_node_link_class, measure_collectives

        info = backend.device_info()
        if not info.gpu_model:
            raise CalibrationError(
                f"collectives: GPU {info.name!r} is not in the catalogue, so the link class "
                "between GPUs cannot be named; import nccl-tests logs with --link instead",
                value=info.name,
                where="collectives",
            )
        smi = subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=60, check=False
        )
        if smi.returncode != 0:
            raise CalibrationError(
                "collectives: `nvidia-smi topo -m` failed, so the link class between GPUs is "
                f"unknown: {smi.stderr.strip()[:200]}",
                value=smi.returncode,
                where="collectives",
            )
        link_class = intra_node_link_class(smi.stdout, info.gpu_model)
        return measure_collectives(
            n_gpu,
            backend="nccl",
            device="cuda",
            repeats=max(5, policy.min_repeats),
            link_class=link_class,
        )

    return run


def _step_runner(
    spec: StepSpec, trace_dir: Path | None
) -> Callable[[Backend, TimingPolicy], list[Measurement]]:
    def run(backend: Backend, policy: TimingPolicy) -> list[Measurement]:
        if backend.name == "numpy":
            if spec.model != "mlp":
                raise Unsupported(f"numpy backend runs only the MLP step, not {spec.model}")
            widths = spec.args.get("widths", (512, 1024, 1024, 10))
            clock = getattr(backend, "clock", "wall")
            return numpy_mlp_step(
                widths, spec.batch_size, repeats=max(5, policy.min_repeats), clock=clock
            )
        device = "cuda" if backend.device_kind is DeviceKind.CUDA else "cpu"
        trace = None
        if trace_dir is not None:
            trace = trace_dir / ("trace-" + re.sub(r"[^A-Za-z0-9.-]+", "-", spec.key) + ".json")
        try:
            return torch_step(spec, device, trace_path=trace)
        finally:
            _free_cuda()

    return run


# ---------------------------------------------------------------------------------------------
# runner
# ---------------------------------------------------------------------------------------------


class Progress:
    """A plain-text progress bar on stderr: one line per item (``\\r``-updated on a terminal)."""

    def __init__(
        self, total: int, budget_s: float, stream: TextIO | None = None, width: int = 24
    ) -> None:
        self.total = max(1, total)
        self.budget_s = budget_s
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.t0 = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, done: int, label: str, result: str = "") -> None:
        frac = min(1.0, done / self.total)
        filled = round(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.monotonic() - self.t0
        line = f"[{bar}] {done:>4}/{self.total} {elapsed:6.1f}s/{self.budget_s:.0f}s  {label}"
        if result:
            line += f"  {result}"
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _describe(ms: list[Measurement]) -> str:
    if not ms:
        return ""
    m = ms[0]
    parts = [f"{m.time_s * 1e6:.1f} us" if m.time_s < 1e-3 else f"{m.time_s * 1e3:.2f} ms"]
    if m.achieved_flops:
        parts.append(f"{m.achieved_flops / 1e12:.2f} TFLOP/s")
    elif m.achieved_Bps:
        parts.append(f"{m.achieved_Bps / 1e9:.1f} GB/s")
    if len(ms) > 1:
        parts.append(f"+{len(ms) - 1} layer times")
    return ", ".join(parts)


def new_profile(backend: Backend, command: str | None) -> CalibrationProfile:
    return CalibrationProfile(
        device=backend.device_info(),
        provenance=MappingProxyType(backend.provenance(command)),
    )


def run_suite(
    backend: Backend,
    items: Sequence[BenchItem],
    *,
    budget_s: float,
    out_path: str | Path,
    resume: bool = False,
    command: str | None = None,
    progress: Progress | None = None,
    finish: Callable[[CalibrationProfile], CalibrationProfile] | None = None,
    stop_after: int | None = None,
) -> CalibrationProfile:
    """Run ``items`` within ``budget_s`` seconds, saving the profile after each one.

    Parameters
    ----------
    resume
        Continue the profile at ``out_path``: items whose key is already measured (or that were
        unsupported) are skipped. The device must be the same.
    finish
        Applied to the profile once all items ran (the fits); its result is saved with
        ``status.complete = true`` unless items were skipped for lack of budget.
    stop_after
        Stop (as if interrupted) after this many items: for tests of resumption.
    """
    out = Path(out_path)
    profile = _start_profile(backend, out, resume, command)
    done = set(profile.measured_keys)
    skipped = _skipped_before(backend, profile)
    pending = [it for it in items if it.key not in done and it.key not in skipped]
    progress = progress or Progress(len(items), budget_s)
    t_start = time.monotonic()
    count_done = len(items) - len(pending)
    ran = 0
    carry = 0.0
    # shares are renormalised over the groups this run has items for
    present = {it.group for it in items}
    total_share = sum(GROUP_SHARES[g] for g in GROUP_ORDER if g in present) or 1.0
    for group in GROUP_ORDER:
        g_items = [it for it in pending if it.group == group]
        share = GROUP_SHARES[group] / total_share if group in present else 0.0
        if not g_items:
            carry += share * budget_s
            continue
        g_budget = share * budget_s + carry
        g_start = time.monotonic()
        for i, item in enumerate(g_items):
            if stop_after is not None and ran >= stop_after:
                profile = replace(profile, skipped=MappingProxyType(skipped), complete=False)
                profile.save(out)
                progress.close()
                return profile
            remaining_total = budget_s - (time.monotonic() - t_start)
            remaining_group = g_budget - (time.monotonic() - g_start)
            if remaining_total <= 0 or remaining_group <= 0:
                for rest in g_items[i:]:
                    skipped[rest.key] = "budget exhausted"
                progress.update(
                    count_done, f"{group}: budget exhausted, {len(g_items) - i} skipped"
                )
                break
            rest_cost = sum(it.cost for it in g_items[i:])
            # timing target: this item's share of what is left, about half spent in warm-up/setup
            target = 0.5 * min(remaining_group, remaining_total) * item.cost / rest_cost
            policy = TimingPolicy(target_s=max(5e-3, min(target, 0.3)))
            progress.update(count_done, item.label)
            ms = _run_item(backend, item, policy, skipped)
            count_done += 1
            ran += 1
            if ms:
                skipped.pop(item.key, None)
            profile = replace(profile.with_measurements(ms), skipped=MappingProxyType(skipped))
            profile.save(out)
            progress.update(count_done, item.label, _describe(ms) or skipped.get(item.key, ""))
        carry = max(0.0, g_budget - (time.monotonic() - g_start))
    progress.close()
    profile = replace(profile, skipped=MappingProxyType(skipped), complete=False)
    if finish is not None:
        profile = finish(profile)
    # complete = the suite ran to its end (items it had no budget for are listed in `skipped`)
    profile = replace(profile, complete=True)
    profile.save(out)
    return profile


def _start_profile(
    backend: Backend, out: Path, resume: bool, command: str | None
) -> CalibrationProfile:
    """A new profile of ``backend``'s device, or, with ``resume``, the one at ``out`` (the same
    device) with this run's start added to ``provenance.resumed_utc``."""
    if resume and out.exists():
        profile = read_profile(out)
        here = backend.device_info()
        if (profile.device.kind, profile.device.name) != (here.kind, here.name):
            raise CalibrationError(
                f"{out}: cannot resume a calibration of {profile.device.kind.value} "
                f"{profile.device.name!r} on {here.kind.value} {here.name!r} (field device.name)",
                value=profile.device.name,
                where=f"{out}: device.name",
            )
        prov = dict(profile.provenance)
        resumed = list(prov.get("resumed_utc", []))
        resumed.append(backend.provenance(command)["created_utc"])
        prov["resumed_utc"] = resumed
        profile = replace(profile, provenance=MappingProxyType(prov), complete=False)
        return profile
    return new_profile(backend, command)


def _skipped_before(backend: Backend, profile: CalibrationProfile) -> dict[str, str]:
    """What the run will not measure: the profile's skipped items (those skipped for lack of
    budget are tried again), the groups the backend does not support, the collectives on
    fewer than two GPUs."""
    skipped = {k: v for k, v in profile.skipped.items() if not v.startswith("budget")}
    for g in GROUP_ORDER:
        if g not in backend.groups:
            skipped[f"group:{g}"] = f"not supported by the {backend.name} backend"
    n_dev = profile.device.count if profile.device.kind is DeviceKind.CUDA else 0
    if n_dev < 2 and "collectives" in backend.groups:
        skipped["group:collectives"] = (
            f"collectives need >= 2 GPUs (found {n_dev}); import nccl-tests logs instead"
        )
    return skipped


def _run_item(
    backend: Backend, item: BenchItem, policy: TimingPolicy, skipped: dict[str, str]
) -> list[Measurement]:
    """``item``'s measurements, or none with the reason in ``skipped`` (unsupported, out of
    memory, an error: a failing benchmark is recorded, not fatal)."""
    try:
        ms = item.run(backend, policy)
    except Unsupported as exc:
        skipped[item.key] = f"unsupported: {exc}"
        ms = []
    except MemoryError as exc:
        skipped[item.key] = f"out of memory: {exc}"
        ms = []
    except Exception as exc:  # a failing benchmark is recorded, not fatal
        first = (str(exc).splitlines() or [""])[0][:300]
        oom = "out of memory" in str(exc).lower()
        skipped[item.key] = f"{'out of memory' if oom else 'error'}: {type(exc).__name__}: {first}"
        ms = []
        _free_cuda()
    return ms


def _free_cuda() -> None:
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:  # pragma: no cover
        pass
