"""Benchmark backends: NumPy on the CPU, PyTorch on the CPU or a CUDA GPU.

A backend prepares an operation (allocating rotating, non-zero inputs) and returns a zero-argument
callable plus its work (FLOP, bytes); :func:`perfmodel.calibration.timing.time_operation` times
it with the backend's :meth:`Backend.sample` timer (host clock for synchronous work, CUDA events
for GPU work). Nothing is imported at module load except NumPy: PyTorch is imported only when a
torch backend is created.

Every benchmark the backend cannot run raises :class:`Unsupported` with the reason, which the
runner records in the profile's ``status.skipped``.

Measuring what training sustains (issue 24): a GPU's matmul rate depends on its data and on how
long it has been busy. Low-entropy operands (zeros, small integers, a narrow uniform range) switch
fewer transistors and draw less power, so a power-limited GPU keeps a higher clock (Horace He,
"Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!", 2024:
an A100 GEMM at 295 TFLOP/s on zeros, 257 on ``randn``); and a short burst after an idle gap runs
at the boost clock, a training step held at the power limit does not (stas00/ml-engineering
MAMF vs MSMF: 11-17% apart on H200/B200). The torch backend therefore fills operands from a
normal distribution (:class:`OperandDistribution`, recorded in the provenance), runs each large
operation for ``sustain_s`` seconds before timing it, and logs the SM clock, board power and
clock-event (throttle) reasons with every measurement when NVML is available
(:class:`NvmlTelemetry`; nothing is logged, and nothing fails, without it).

Kept whole (issue 29): this module (~1,050 lines): the :class:`Backend` interface and its two
implementations read side by side, operation by operation; the torch half runs only on a GPU
machine, which the development machine is not.
"""

from __future__ import annotations

import enum
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from perfmodel import __version__
from perfmodel.calibration.profile import DeviceInfo, DeviceKind
from perfmodel.calibration.shapes import AttentionShape, ConvShape
from perfmodel.calibration.timing import (
    CLOCKS,
    DEFAULT_SUSTAIN_S,
    SUSTAIN_MIN_FLOP,
    Rotation,
    host_sample,
)
from perfmodel.dtypes import DType
from perfmodel.errors import CalibrationError, ConfigError
from perfmodel.units import MiB, parse_size


class Unsupported(Exception):
    """This backend cannot run this benchmark (the message says why)."""


@dataclass(frozen=True)
class Op:
    """A prepared operation: call ``fn()`` once per repetition.

    ``work_flop`` / ``work_bytes`` are the work of one call; ``sample`` overrides the backend's
    timer when the operation needs its own (host-device copies time with the host clock).
    """

    fn: Callable[[], object]
    work_flop: float | None = None
    work_bytes: float | None = None
    notes: str = ""
    graphable: bool = True  # may be timed as a CUDA-graph replay (GPU time, no host dispatch)


class OperandDistribution(str, enum.Enum):
    """How benchmark operands are filled.

    ``normal``: standard normal (``torch.randn``; a GEMM's left operand scaled by
    ``1/sqrt(k)`` so 16-bit sums stay in range), the distribution of trained weights and
    activations. ``uniform``: uniform in ``[0.5, 1.5)``, the low-entropy fill of profiles made
    before issue 24 (which draws less power and so overstates a power-limited GPU's rate).
    """

    NORMAL = "normal"
    UNIFORM = "uniform"


#: NVML clock-event ("throttle") reason bits (``nvmlClocksEventReasons`` in ``nvml.h``, NVML API
#: reference, "Clocks Event Reasons"; the older ``nvmlClocksThrottleReasons`` names).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_throttle_reasons(mask: int) -> list[str]:
    """Names of the set NVML clock-event bits of ``mask`` (unknown bits as hex).

    >>> decode_throttle_reasons(0x4 | 0x20)
    ['sw_power_cap', 'sw_thermal_slowdown']
    >>> decode_throttle_reasons(0)
    []
    """
    out = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    if rest:
        out.append(hex(rest))
    return out


@dataclass(frozen=True)
class TelemetrySample:
    """One reading of the GPU's state: SM clock (Hz), board power (W), NVML clock-event reason
    mask and temperature (C); ``None`` where the source cannot say."""

    sm_clock_hz: float | None
    power_w: float | None
    throttle_mask: int | None
    temperature_c: float | None = None


class NvmlTelemetry:
    """GPU state through NVML (``pynvml``, the ``nvidia-ml-py`` package).

    ``nvml`` is the module (injected by tests); :func:`make_telemetry` builds one when pynvml
    imports and initialises.
    """

    source = "nvml"

    def __init__(self, nvml: Any, index: int = 0) -> None:
        self._nvml = nvml
        self._handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def read(self) -> TelemetrySample:
        m, h = self._nvml, self._handle

        def attempt(f: Callable[[], Any]) -> Any:
            try:
                return f()
            except Exception:  # a field this driver/GPU does not report
                return None

        clock = attempt(lambda: m.nvmlDeviceGetClockInfo(h, m.NVML_CLOCK_SM))
        power = attempt(lambda: m.nvmlDeviceGetPowerUsage(h))
        reasons = getattr(m, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            m, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        mask = attempt(lambda: reasons(h)) if reasons is not None else None
        temp = attempt(lambda: m.nvmlDeviceGetTemperature(h, m.NVML_TEMPERATURE_GPU))
        return TelemetrySample(
            sm_clock_hz=None if clock is None else float(clock) * 1e6,  # MHz
            power_w=None if power is None else float(power) / 1e3,  # mW
            throttle_mask=None if mask is None else int(mask),
            temperature_c=None if temp is None else float(temp),
        )


def make_telemetry(index: int = 0) -> NvmlTelemetry | None:
    """NVML telemetry of GPU ``index``, or ``None`` when pynvml is missing or NVML fails."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return NvmlTelemetry(pynvml, index)
    except Exception:
        return None


def summarize_telemetry(samples: list[TelemetrySample]) -> dict[str, Any]:
    """Measurement parameters from the readings taken while one operation was timed: median
    SM clock (MHz) and power (W), the OR of the clock-event masks and their names.

    >>> summarize_telemetry([TelemetrySample(1.83e9, 690.0, 0x4), TelemetrySample(1.79e9, 700.0, 0)])
    {'sm_clock_mhz': 1810.0, 'power_w': 695.0, 'throttle_mask': 4, 'throttle': ['sw_power_cap']}
    """
    out: dict[str, Any] = {}
    clocks = [x.sm_clock_hz for x in samples if x.sm_clock_hz is not None]
    power = [x.power_w for x in samples if x.power_w is not None]
    masks = [x.throttle_mask for x in samples if x.throttle_mask is not None]
    temps = [x.temperature_c for x in samples if x.temperature_c is not None]
    if clocks:
        out["sm_clock_mhz"] = round(statistics.median(clocks) / 1e6, 1)
    if power:
        out["power_w"] = round(statistics.median(power), 1)
    if masks:
        mask = 0
        for x in masks:
            mask |= x
        out["throttle_mask"] = mask
        out["throttle"] = decode_throttle_reasons(mask)
    if temps:
        out["temperature_c"] = round(max(temps), 1)
    return out


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _last_level_cache_bytes() -> int:
    """Largest CPU cache in bytes from sysfs (32 MiB when unknown)."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                path = os.path.join(base, entry, "size")
                with open(path) as fh:
                    best = max(best, parse_size(fh.read(), where=path))  # "32768K": binary
            except (OSError, ValueError):  # ConfigError is a ValueError
                continue
    except OSError:
        pass
    return best or 32 * MiB


def base_provenance(command: str | None = None) -> dict[str, Any]:
    """Provenance common to every backend: date, perfmodel version, host, Python, NumPy/SciPy."""
    import scipy

    libs: dict[str, str] = {"numpy": np.__version__, "scipy": scipy.__version__}
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]  # type: ignore[attr-defined]
        libs["numpy_blas"] = f"{blas.get('name')} {blas.get('version', '')}".strip()
    except (AttributeError, KeyError, TypeError):
        pass
    return {
        "created_utc": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "perfmodel_version": __version__,
        "host": platform.node(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "libraries": libs,
        "command": command,
    }


def resolve_gpu_model(device_name: str, memory_bytes: int | None) -> str | None:
    """Catalogue name of a GPU from the driver's name and memory size, or ``None``.

    A catalogue entry matches when its family token (``"H100"`` of ``"H100-SXM5-80GB"``) appears
    in the driver name, its form factor agrees (``PCIe`` in the name <-> a PCIe entry) and its
    memory is within 12% of the device's (marketing GB vs GiB and reserved memory).

    >>> resolve_gpu_model("NVIDIA H100 80GB HBM3", 85_520_809_984)
    'H100-SXM5-80GB'
    >>> resolve_gpu_model("NVIDIA A100-SXM4-80GB", None)  # the size the name states
    'A100-SXM4-80GB'
    """
    from perfmodel.hardware import list_gpus

    name = device_name.upper().replace("-", " ")
    is_pcie = "PCIE" in name
    if not memory_bytes:
        # the memory size the name states ("A100-SXM4-80GB", "H100 80GB HBM3"): an 80 GB part
        # must not resolve to the 40 GB entry of its family
        import re

        stated = re.search(r"(\d+)\s*GB", name)
        if stated:
            memory_bytes = int(stated.group(1)) * 10**9
    best: tuple[float, str] | None = None
    for spec in list_gpus():
        family = spec.name.split("-")[0].upper()
        if family not in name.split() and family not in name:
            continue
        if is_pcie != (spec.form_factor.upper() == "PCIE"):
            continue
        if memory_bytes:
            rel = abs(memory_bytes - spec.memory_bytes) / spec.memory_bytes
            if rel > 0.12:
                continue
        else:
            rel = 0.0
        if best is None or rel < best[0]:
            best = (rel, spec.name)
    return None if best is None else best[1]


class Backend:
    """Interface of a benchmark backend (see the module docstring)."""

    name: str = "abstract"
    device_kind: DeviceKind = DeviceKind.CPU
    #: dtypes the GEMM sweep runs on this backend
    gemm_dtypes: tuple[DType, ...] = ()
    cache_bytes: int = 32 * MiB
    #: benchmark groups this backend can run (see perfmodel.calibration.suite.GROUP_SHARES)
    groups: tuple[str, ...] = (
        "launch",
        "memory",
        "gemm",
        "conv",
        "transfer",
        "streams",
        "collectives",
        "steps",
        "input",
    )

    def device_info(self) -> DeviceInfo:
        raise NotImplementedError

    def provenance(self, command: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    #: how the last sample was timed ("host", "process", "cuda-events", "cuda-graph")
    last_mode: str = "host"

    def sample(self, fn: Callable[[], object], inner: int) -> float:
        return host_sample(fn, inner)

    def prepare_timing(self, op: Op) -> Callable[[Callable[[], object], int], float]:
        """The sample timer for ``op`` (default: :meth:`sample`)."""
        return self.sample

    def release(self) -> None:
        """Free per-operation timing state (captured graphs)."""

    def telemetry_params(self) -> dict[str, Any]:
        """Clock, power and throttle readings of the last timed operation (empty: none)."""
        return {}

    def synchronize(self) -> None:
        """Wait for all queued device work (no-op on synchronous backends)."""

    def gemm(self, m: int, n: int, k: int, batch: int, dtype: DType) -> Op:
        raise Unsupported(f"{self.name}: no GEMM")

    def conv(self, shape: ConvShape, dtype: DType) -> Op:
        raise Unsupported(f"{self.name}: no convolution library")

    def attention(self, shape: AttentionShape, dtype: DType, backward: bool) -> Op:
        raise Unsupported(f"{self.name}: no fused attention")

    def copy(self, nbytes: int) -> Op:
        raise Unsupported(f"{self.name}: no copy")

    def elementwise(self, nbytes: int) -> Op:
        raise Unsupported(f"{self.name}: no elementwise")

    def launch(self, graph: bool = True) -> Op:
        raise Unsupported(f"{self.name}: no launch benchmark")

    def host_transfer(self, nbytes: int, pinned: bool, to_device: bool) -> Op:
        raise Unsupported(f"{self.name}: host and device share memory (no transfer)")

    def streams(self, n_streams: int, m: int, n: int, k: int, dtype: DType, reps: int) -> Op:
        raise Unsupported(f"{self.name}: no concurrent streams")


def _np_dtype(dtype: DType) -> Any:
    if dtype is DType.FP32:
        return np.float32
    if dtype is DType.FP64:
        return np.float64
    raise Unsupported(f"numpy: no fast {dtype.value} GEMM")


class NumpyBackend(Backend):
    """NumPy on the CPU (BLAS GEMM, vectorised copies). Always available."""

    name = "numpy"
    device_kind = DeviceKind.CPU
    gemm_dtypes = (DType.FP32,)  # the training precision on a CPU; fp64 via gemm_dtypes=
    groups = ("launch", "memory", "gemm", "steps", "input")  # no conv library, device, streams

    def __init__(self, seed: int = 0, clock: str = "wall") -> None:
        self._rng = np.random.default_rng(seed)
        self.cache_bytes = _last_level_cache_bytes()
        if clock not in CLOCKS:
            raise ConfigError(
                f"--clock must be one of {sorted(CLOCKS)}, got {clock!r}",
                value=clock,
                where="--clock",
            )
        self.clock = clock

    def sample(self, fn: Callable[[], object], inner: int) -> float:
        self.last_mode = self.clock
        return CLOCKS[self.clock](fn, inner)

    def _rand(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        # Uniform in [0.5, 1.5): non-zero, no denormals, no overflow in long sums.
        return (self._rng.random(shape, dtype=np.float64) + 0.5).astype(dtype)

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(
            kind=DeviceKind.CPU,
            name=_cpu_model_name(),
            gpu_model=None,
            memory_bytes=_host_memory_bytes(),
            cores=len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
        )

    def provenance(self, command: str | None = None) -> dict[str, Any]:
        p = base_provenance(command)
        p["backend"] = self.name
        p["clock"] = self.clock
        p["operands"] = OperandDistribution.UNIFORM.value
        p["blas_threads_env"] = {
            k: os.environ[k]
            for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            if k in os.environ
        }
        p["last_level_cache_bytes"] = self.cache_bytes
        return p

    def gemm(self, m: int, n: int, k: int, batch: int, dtype: DType) -> Op:
        dt = _np_dtype(dtype)
        itemsize = np.dtype(dt).itemsize
        set_bytes = itemsize * batch * (m * k + k * n + m * n)
        count = Rotation.count(set_bytes, self.cache_bytes, max_total_bytes=5e8)
        a0 = self._rand((batch, m, k) if batch > 1 else (m, k), dt)
        b0 = self._rand((k, n), dt)
        # copies live at distinct addresses (what defeats the cache); the values need not differ
        sets = [
            (a0.copy(), b0.copy(), np.empty((batch, m, n) if batch > 1 else (m, n), dtype=dt))
            for _ in range(count)
        ]
        rot = Rotation(sets)  # type: ignore[arg-type]

        def fn() -> None:
            a, b, c = rot.next()  # type: ignore[misc]
            np.matmul(a, b, out=c)

        return Op(fn, work_flop=2.0 * m * n * k * batch, work_bytes=float(set_bytes))

    def copy(self, nbytes: int) -> Op:
        elems = max(1, nbytes // 4)
        count = Rotation.count(2 * 4 * elems, self.cache_bytes, max_total_bytes=1e9)
        sets = [
            (self._rand((elems,), np.float32), np.empty(elems, np.float32)) for _ in range(count)
        ]
        rot = Rotation(sets)  # type: ignore[arg-type]

        def fn() -> None:
            src, dst = rot.next()  # type: ignore[misc]
            np.copyto(dst, src)

        return Op(fn, work_bytes=2.0 * 4 * elems, notes="bytes read + written")

    def elementwise(self, nbytes: int) -> Op:
        elems = max(1, nbytes // 4)
        count = Rotation.count(3 * 4 * elems, self.cache_bytes, max_sets=64, max_total_bytes=5e8)
        a0 = self._rand((elems,), np.float32)
        b0 = self._rand((elems,), np.float32)
        sets = [(a0.copy(), b0.copy(), np.empty(elems, np.float32)) for _ in range(count)]
        rot = Rotation(sets)  # type: ignore[arg-type]

        def fn() -> None:
            a, b, c = rot.next()  # type: ignore[misc]
            np.add(a, b, out=c)

        return Op(fn, work_bytes=3.0 * 4 * elems, notes="c = a + b: 2 reads + 1 write")

    def launch(self, graph: bool = True) -> Op:
        if graph:
            raise Unsupported("numpy: no graphs (the eager launch benchmark measures dispatch)")
        a = self._rand((1,), np.float32)
        b = self._rand((1,), np.float32)
        c = np.empty(1, np.float32)

        def fn() -> None:
            np.add(a, b, out=c)

        return Op(fn, notes="dispatch overhead of one tiny NumPy operation")


class TorchBackend(Backend):
    """PyTorch on ``cpu`` or ``cuda`` (cuBLAS/cuDNN on the GPU, with ``cudnn.benchmark``)."""

    def __init__(
        self,
        device: str = "cuda",
        seed: int = 0,
        use_graphs: bool = True,
        *,
        operands: OperandDistribution | str = OperandDistribution.NORMAL,
        sustain_s: float | None = None,
        telemetry: Any = "auto",
    ) -> None:
        """``operands``: how inputs are filled (:class:`OperandDistribution`); ``sustain_s``:
        seconds a large operation runs before it is timed (default :data:`DEFAULT_SUSTAIN_S`
        on CUDA, 0 on the CPU); ``telemetry``: an object with ``read() -> TelemetrySample``,
        ``None`` for none, ``"auto"`` for NVML when available (CUDA only)."""
        try:
            import torch
        except ImportError as exc:
            raise CalibrationError(
                "the torch backend needs PyTorch (pip install 'perfmodel[torch]')",
                value=device,
                where="--device",
            ) from exc
        self.torch = torch
        if device == "cuda" and not torch.cuda.is_available():
            raise CalibrationError(
                "--device cuda: PyTorch sees no CUDA GPU", value=device, where="--device"
            )
        self.device = torch.device(device)
        self.use_graphs = use_graphs
        self.operands = OperandDistribution(operands)
        cuda = device == "cuda"
        self.sustain_s = float(
            DEFAULT_SUSTAIN_S if sustain_s is None and cuda else sustain_s or 0.0
        )
        if telemetry == "auto":
            telemetry = make_telemetry(torch.cuda.current_device()) if cuda else None
        self.telemetry = telemetry
        self._readings: list[TelemetrySample] = []
        self._graphs: dict[int, Any] = {}
        self.name = f"torch-{device}"
        self.device_kind = DeviceKind.CUDA if device == "cuda" else DeviceKind.CPU
        self._gen = torch.Generator(device=self.device).manual_seed(seed)
        if self.device_kind is DeviceKind.CUDA:
            props = torch.cuda.get_device_properties(self.device)
            self.props = props
            self.cache_bytes = int(getattr(props, "L2_cache_size", 50 * MiB))
            torch.backends.cudnn.benchmark = True
            dts = [DType.FP32, DType.TF32, DType.FP16, DType.BF16]
            if (props.major, props.minor) >= (8, 9) and hasattr(torch, "_scaled_mm"):
                dts.append(DType.FP8)
            self.gemm_dtypes = tuple(dts)
        else:
            self.props = None
            self.cache_bytes = _last_level_cache_bytes()
            self.gemm_dtypes = (DType.FP32, DType.BF16)
            self.groups = ("launch", "memory", "gemm", "conv", "steps", "input")

    # -- device description ---------------------------------------------------------------------
    def device_info(self) -> DeviceInfo:
        torch = self.torch
        if self.device_kind is DeviceKind.CUDA:
            p = self.props
            name = torch.cuda.get_device_name(self.device)
            return DeviceInfo(
                kind=DeviceKind.CUDA,
                name=name,
                gpu_model=resolve_gpu_model(name, int(p.total_memory)),
                memory_bytes=int(p.total_memory),
                cores=int(p.multi_processor_count),
                count=torch.cuda.device_count(),
                compute_capability=f"{p.major}.{p.minor}",
            )
        return DeviceInfo(
            kind=DeviceKind.CPU,
            name=_cpu_model_name(),
            memory_bytes=_host_memory_bytes(),
            cores=torch.get_num_threads(),
        )

    def provenance(self, command: str | None = None) -> dict[str, Any]:
        torch = self.torch
        p = base_provenance(command)
        p["backend"] = self.name
        p["libraries"]["torch"] = torch.__version__
        p["operands"] = self.operands.value
        p["sustain_s"] = self.sustain_s
        p["telemetry"] = getattr(self.telemetry, "source", "none") if self.telemetry else "none"
        if self.device_kind is DeviceKind.CUDA:
            p["cuda_version"] = torch.version.cuda
            p["cudnn_version"] = torch.backends.cudnn.version()
            p["driver_version"] = _nvidia_driver_version()
            p["l2_cache_bytes"] = self.cache_bytes
            try:
                v = torch.cuda.nccl.version()
                p["libraries"]["nccl"] = (
                    ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
                )
            except Exception:  # pragma: no cover - NCCL absent in some builds
                pass
        else:
            p["torch_threads"] = torch.get_num_threads()
        return p

    # -- timing ---------------------------------------------------------------------------------
    def synchronize(self) -> None:
        if self.device_kind is DeviceKind.CUDA:
            self.torch.cuda.synchronize(self.device)

    def sample(self, fn: Callable[[], object], inner: int) -> float:
        """CUDA events around ``inner`` eager calls (host dispatch included when it dominates)."""
        if self.device_kind is not DeviceKind.CUDA:
            self.last_mode = "host"
            return host_sample(fn, inner)
        torch = self.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        self.last_mode = "cuda-events"
        return start.elapsed_time(end) * 1e-3  # ms -> s

    def prepare_timing(self, op: Op) -> Callable[[Callable[[], object], int], float]:
        """On CUDA, time graphable operations as CUDA-graph replays of ``inner`` captured calls.

        A replay runs the kernels back to back without host dispatch, so a short kernel is timed
        at its GPU cost (what a busy training step sees: PyTorch queues kernels ahead of the GPU)
        rather than at Python/launch dispatch speed. The rotation of input sets is captured too
        (each captured call reads the next set). Operations that cannot be captured (pageable
        copies, several streams) or whose capture fails fall back to :meth:`sample`.
        """
        self._readings = []
        return self._sustained(op, self._timer(op))

    def _timer(self, op: Op) -> Callable[[Callable[[], object], int], float]:
        """The sample timer of ``op``: a CUDA-graph replay where possible, else :meth:`sample`."""
        if self.device_kind is not DeviceKind.CUDA or not self.use_graphs or not op.graphable:
            return self.sample
        torch = self.torch
        graphs: dict[int, Any] = {}
        self._graphs = graphs

        def graph_sample(fn: Callable[[], object], inner: int) -> float:
            g = graphs.get(inner)
            if g is None:
                try:
                    side = torch.cuda.Stream(device=self.device)
                    side.wait_stream(torch.cuda.current_stream(self.device))
                    with torch.cuda.stream(side):
                        fn()
                    torch.cuda.current_stream(self.device).wait_stream(side)
                    torch.cuda.synchronize(self.device)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        for _ in range(inner):
                            fn()
                    graphs[inner] = g
                except Exception:  # not capturable: time it eagerly
                    torch.cuda.synchronize(self.device)
                    return self.sample(fn, inner)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            self.last_mode = "cuda-graph"
            return start.elapsed_time(end) * 1e-3

        return graph_sample

    def _sustained(
        self, op: Op, timer: Callable[[Callable[[], object], int], float]
    ) -> Callable[[Callable[[], object], int], float]:
        """``timer`` that first runs a large ``op`` back to back for ``sustain_s`` seconds (its
        first call: the warm-up of :func:`~perfmodel.calibration.timing.time_operation`), and
        reads the telemetry after every sample."""
        sustain = self.sustain_s if (op.work_flop or 0.0) >= SUSTAIN_MIN_FLOP else 0.0
        state = {"heated": sustain <= 0}

        def sample(fn: Callable[[], object], inner: int) -> float:
            if not state["heated"]:
                state["heated"] = True
                t_end = time.monotonic() + sustain
                n = 1
                while time.monotonic() < t_end:
                    self.sample(fn, n)  # eager and synchronised: no graph per heating size
                    n = min(2 * n, 1024)
            t = timer(fn, inner)
            if self.telemetry is not None:
                try:
                    self._readings.append(self.telemetry.read())
                except Exception:  # telemetry must never fail a measurement
                    pass
            return t

        return sample

    def telemetry_params(self) -> dict[str, Any]:
        return summarize_telemetry(self._readings)

    def release(self) -> None:
        self._graphs = {}

    # -- helpers --------------------------------------------------------------------------------
    def _torch_dtype(self, dtype: DType) -> Any:
        t = self.torch
        return {
            DType.FP64: t.float64,
            DType.FP32: t.float32,
            DType.TF32: t.float32,
            DType.FP16: t.float16,
            DType.BF16: t.bfloat16,
        }[dtype]

    def _rand(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """Operands of :attr:`operands` distribution (callers scale a GEMM's left operand by
        ``1/sqrt(k)`` so long dot products stay in fp16 range)."""
        t = self.torch
        if self.operands is OperandDistribution.NORMAL:
            x = t.randn(shape, generator=self._gen, device=self.device, dtype=t.float32)
        else:
            x = t.rand(shape, generator=self._gen, device=self.device, dtype=t.float32) + 0.5
        return x.to(dtype)

    # -- benchmarks -----------------------------------------------------------------------------
    def gemm(self, m: int, n: int, k: int, batch: int, dtype: DType) -> Op:
        t = self.torch
        if dtype not in self.gemm_dtypes:
            raise Unsupported(f"{self.name}: {dtype.value} GEMM not supported here")
        if dtype is DType.FP8:
            return self._gemm_fp8(m, n, k, batch)
        tdt = self._torch_dtype(dtype)
        itemsize = dtype.itemsize
        set_bytes = itemsize * batch * (m * k + m * n) + itemsize * k * n
        count = Rotation.count(set_bytes, self.cache_bytes)
        scale = 1.0 / math.sqrt(k)
        sets = []
        for _ in range(count):
            a = self._rand((batch, m, k) if batch > 1 else (m, k), tdt) * scale
            b = self._rand((k, n), tdt)
            c = t.empty((batch, m, n) if batch > 1 else (m, n), device=self.device, dtype=tdt)
            sets.append((a, b, c))
        rot = Rotation(sets)  # type: ignore[arg-type]
        tf32 = dtype is DType.TF32
        cuda = self.device_kind is DeviceKind.CUDA

        def fn() -> None:
            if cuda:
                t.backends.cuda.matmul.allow_tf32 = tf32
            a, b, c = rot.next()  # type: ignore[misc]
            t.matmul(a, b, out=c)

        return Op(fn, work_flop=2.0 * m * n * k * batch, work_bytes=float(set_bytes))

    def _gemm_fp8(self, m: int, n: int, k: int, batch: int) -> Op:
        t = self.torch
        if batch != 1:
            raise Unsupported("fp8: batched GEMM not measured (torch._scaled_mm is 2-D)")
        if m % 16 or n % 16 or k % 16:
            raise Unsupported(f"fp8: torch._scaled_mm needs multiples of 16, got {m}x{n}x{k}")
        set_bytes = m * k + k * n + 2 * m * n
        count = Rotation.count(set_bytes, self.cache_bytes)
        one = t.ones((), device=self.device, dtype=t.float32)
        sets = []
        for _ in range(count):
            a = self._rand((m, k), t.float32).to(t.float8_e4m3fn)
            b = self._rand((n, k), t.float32).to(t.float8_e4m3fn).t()  # column-major B
            sets.append((a, b))
        rot = Rotation(sets)  # type: ignore[arg-type]

        def fn() -> None:
            a, b = rot.next()  # type: ignore[misc]
            # fast accumulation: the "fp8" format of the catalogue (torch's default is split
            # accumulation, GemmFormat.FP8_SPLIT, which profiles before issue 24 measured)
            t._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=t.bfloat16, use_fast_accum=True)

        try:
            fn()
        except Exception as exc:  # this torch/GPU combination has no FP8 GEMM
            raise Unsupported(f"fp8 GEMM failed: {exc}") from exc
        return Op(
            fn,
            work_flop=2.0 * m * n * k,
            work_bytes=float(set_bytes),
            notes="torch._scaled_mm e4m3 -> bf16, use_fast_accum=True",
        )

    def conv(self, shape: ConvShape, dtype: DType) -> Op:
        t = self.torch
        if dtype is DType.FP8:
            raise Unsupported("fp8 convolution not measured")
        tdt = self._torch_dtype(dtype)
        itemsize = dtype.itemsize
        n, c, h, w, k, r, s = shape.n, shape.c, shape.h, shape.w, shape.k, shape.r, shape.s
        if shape.out_h <= 0 or shape.out_w <= 0:
            raise ConfigError(f"conv {h}x{w} with kernel {r}x{s}: empty output", value=(h, w))
        set_bytes = itemsize * (shape.input_elems + shape.output_elems)
        count = Rotation.count(set_bytes, self.cache_bytes, max_sets=8)
        weight = self._rand((k, c, r, s), tdt) * (1.0 / math.sqrt(c * r * s))
        fmt = t.channels_last if self.device_kind is DeviceKind.CUDA else t.contiguous_format
        weight = weight.contiguous(memory_format=fmt)
        xs = [self._rand((n, c, h, w), tdt).contiguous(memory_format=fmt) for _ in range(count)]
        rot = Rotation(xs)  # type: ignore[arg-type]
        tf32 = dtype is DType.TF32
        cuda = self.device_kind is DeviceKind.CUDA
        F = t.nn.functional

        def fn() -> None:
            if cuda:
                t.backends.cudnn.allow_tf32 = tf32
            F.conv2d(rot.next(), weight, stride=shape.stride, padding=shape.pad)

        return Op(
            fn,
            work_flop=shape.flop,
            work_bytes=float(set_bytes + itemsize * shape.weight_elems),
            notes="channels_last" if self.device_kind is DeviceKind.CUDA else "NCHW",
        )

    def attention(self, shape: AttentionShape, dtype: DType, backward: bool) -> Op:
        """``scaled_dot_product_attention`` (FlashAttention kernels on Hopper/Ampere), forward or
        forward + backward. FLOP: :attr:`AttentionShape.fwd_flop` forward, backward 2.5x
        forward (Dao 2023); bytes: Q, K, V read and O written (x2 with the backward)."""
        t = self.torch
        if self.device_kind is not DeviceKind.CUDA:
            raise Unsupported("fused attention is measured on CUDA only")
        tdt = self._torch_dtype(dtype)
        causal = shape.causal
        q, k, v = (self._rand(shape.dims, tdt).requires_grad_(backward) for _ in range(3))
        grad = self._rand(shape.dims, tdt)
        F = t.nn.functional
        if backward:

            def fn() -> None:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                out.backward(grad)
                q.grad = k.grad = v.grad = None
        else:

            def fn() -> None:
                with t.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        fwd = shape.fwd_flop
        nbytes = shape.qkvo_bytes(dtype.itemsize)
        return Op(
            fn,
            work_flop=fwd * (3.5 if backward else 1.0),
            work_bytes=nbytes * (3.0 if backward else 1.0),
            notes="torch scaled_dot_product_attention"
            + (" forward + backward (eager)" if backward else ""),
            graphable=not backward,
        )

    def copy(self, nbytes: int) -> Op:
        t = self.torch
        elems = max(1, nbytes // 4)
        count = Rotation.count(8.0 * elems, self.cache_bytes)
        sets = [
            (self._rand((elems,), t.float32), t.empty(elems, device=self.device))
            for _ in range(count)
        ]
        rot = Rotation(sets)  # type: ignore[arg-type]

        def fn() -> None:
            src, dst = rot.next()  # type: ignore[misc]
            dst.copy_(src)

        return Op(fn, work_bytes=8.0 * elems, notes="bytes read + written")

    def elementwise(self, nbytes: int) -> Op:
        t = self.torch
        elems = max(1, nbytes // 4)
        count = Rotation.count(12.0 * elems, self.cache_bytes)
        sets = [
            (
                self._rand((elems,), t.float32),
                self._rand((elems,), t.float32),
                t.empty(elems, device=self.device),
            )
            for _ in range(count)
        ]
        rot = Rotation(sets)  # type: ignore[arg-type]

        def fn() -> None:
            a, b, c = rot.next()  # type: ignore[misc]
            t.add(a, b, out=c)

        return Op(fn, work_bytes=12.0 * elems, notes="c = a + b: 2 reads + 1 write")

    def launch(self, graph: bool = True) -> Op:
        """A 1-element in-place add. ``graph=True``: GPU cost per kernel (graph replay);
        ``graph=False``: eager back-to-back calls, i.e. the host dispatch rate of PyTorch."""
        t = self.torch
        x = self._rand((1,), t.float32)

        def fn() -> None:
            x.add_(1.0)

        what = "GPU cost per kernel (graph replay)" if graph else "eager PyTorch dispatch per op"
        return Op(fn, notes=f"back-to-back 1-element kernels: {what}", graphable=graph)

    def host_transfer(self, nbytes: int, pinned: bool, to_device: bool) -> Op:
        t = self.torch
        if self.device_kind is not DeviceKind.CUDA:
            raise Unsupported("host and device share memory (no transfer)")
        elems = max(1, nbytes // 4)
        host = t.rand(elems, dtype=t.float32) + 0.5
        if pinned:
            host = host.pin_memory()
        dev = self._rand((elems,), t.float32)

        if to_device:

            def fn() -> None:
                dev.copy_(host, non_blocking=pinned)
        else:

            def fn() -> None:
                host.copy_(dev, non_blocking=pinned)

        return Op(
            fn, work_bytes=4.0 * elems, notes="pinned" if pinned else "pageable", graphable=False
        )

    def streams(self, n_streams: int, m: int, n: int, k: int, dtype: DType, reps: int) -> Op:
        """``n_streams`` independent learners, each ``reps`` GEMMs of ``m x n x k`` on its own stream.

        One call = every learner finishes its ``reps`` GEMMs (the work of ``n_streams`` small-batch
        training iterations); comparing with ``n_streams = 1`` shows how much concurrent learners
        recover of the GPU a single small batch leaves idle (Crossbow, Koliousis et al. 2019).
        """
        t = self.torch
        if self.device_kind is not DeviceKind.CUDA:
            raise Unsupported("concurrent streams need a CUDA device")
        tdt = self._torch_dtype(dtype)
        streams = [t.cuda.Stream(device=self.device) for _ in range(n_streams)]
        bufs = [
            (
                self._rand((m, k), tdt) / math.sqrt(k),
                self._rand((k, n), tdt),
                t.empty((m, n), device=self.device, dtype=tdt),
            )
            for _ in range(n_streams)
        ]
        main = t.cuda.current_stream(self.device)
        tf32 = dtype is DType.TF32

        def fn() -> None:
            t.backends.cuda.matmul.allow_tf32 = tf32
            for st, (a, b, c) in zip(streams, bufs):
                st.wait_stream(main)
                with t.cuda.stream(st):
                    for _ in range(reps):
                        t.matmul(a, b, out=c)
            for st in streams:
                main.wait_stream(st)

        return Op(fn, work_flop=2.0 * m * n * k * reps * n_streams, graphable=False)


def _nvidia_driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def make_backend(device: str, *, prefer: str = "numpy", clock: str = "wall") -> Backend:
    """The backend for ``--device cpu|cuda``.

    ``cpu`` uses NumPy by default (``prefer="numpy"``), PyTorch with ``prefer="torch"``, and
    PyTorch-if-installed with ``prefer="auto"``; ``cuda`` always uses PyTorch.
    """
    if device == "cuda":
        return TorchBackend("cuda")  # normal operands, sustained large ops, NVML telemetry
    if device != "cpu":
        raise ConfigError(
            f"--device must be cpu or cuda, got {device!r}", value=device, where="--device"
        )
    if prefer == "torch":
        return TorchBackend("cpu")
    if prefer == "auto":
        try:
            import torch  # noqa: F401
        except ImportError:
            return NumpyBackend(clock=clock)
        return TorchBackend("cpu")
    return NumpyBackend(clock=clock)
