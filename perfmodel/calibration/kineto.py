"""Import a PyTorch profiler (Kineto) Chrome trace of a training step as per-layer times.

The trace is the JSON that ``torch.profiler.profile(...).export_chrome_trace(path)`` writes
(optionally gzipped): ``{"traceEvents": [...]}`` with complete events (``"ph": "X"``, ``ts`` and
``dur`` in microseconds). The categories used here (Chrome Trace Event Format; PyTorch Kineto):

- ``user_annotation``: ``torch.profiler.record_function`` ranges on the CPU thread. perfmodel's
  step runner brackets every leaf module's forward with ``layer:<name>|<ModuleClass>`` and the
  optimizer step with ``optimizer``; any trace with such ranges can be imported.
- ``cpu_op``: ATen operators, with ``args["Sequence number"]`` linking a forward operator to the
  autograd node that runs its backward (``autograd::engine::evaluate_function: XBackward0``,
  same sequence number, usually on the autograd engine's own thread).
- ``cuda_runtime`` / ``cuda_driver``: launch calls, with ``args["correlation"]``.
- ``kernel``, ``gpu_memcpy``, ``gpu_memset``: device activity with the same ``correlation``.

Attribution: each device event is charged to the layer whose range encloses its launch call
(forward), to the layer whose forward operator has the sequence number of the enclosing
``evaluate_function`` (backward), or to ``optimizer``; the rest is ``other``. A layer's time is the
sum of its kernels' durations (device busy time, launch gaps excluded). A trace without device
events (a CPU run) charges the operators' own CPU time instead.
"""

from __future__ import annotations

import bisect
import enum
import gzip
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.errors import ParseError

LAYER_PREFIX = "layer:"
OPTIMIZER_LABEL = "optimizer"
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
_BWD_PREFIX = "autograd::engine::evaluate_function:"


class Phase(str, enum.Enum):
    FORWARD = "fwd"
    BACKWARD = "bwd"
    OPTIMIZER = "optimizer"
    OTHER = "other"


@dataclass(frozen=True)
class LayerTime:
    """Measured time of one layer in one phase of a traced step.

    Attributes
    ----------
    layer
        Module path (``"layer1.0.conv1"``) or ``"optimizer"`` / ``"other"``.
    module
        Module class name (``"Conv2d"``), ``""`` when unknown.
    phase
        Forward, backward, optimizer or other.
    time_s
        Sum of the device-event durations (or CPU operator time on a CPU trace), in seconds.
    events
        Number of kernels (or operators) charged.
    """

    layer: str
    module: str
    phase: Phase
    time_s: float
    events: int


@dataclass(frozen=True)
class TraceSummary:
    """Per-layer times of one traced step plus totals, in seconds."""

    layers: tuple[LayerTime, ...]
    device_busy_s: float
    span_s: float
    on_device: bool
    source: str

    def total(self, phase: Phase | None = None) -> float:
        return sum(x.time_s for x in self.layers if phase is None or x.phase is phase)

    def by_layer(self) -> dict[tuple[str, Phase], LayerTime]:
        return {(x.layer, x.phase): x for x in self.layers}


def read_trace(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ``traceEvents`` list of a Chrome-trace JSON file (``.json`` or ``.json.gz``)."""
    return trace_events(read_trace_json(path), path)


def read_trace_json(path: str | os.PathLike[str]) -> Any:
    """The parsed JSON of a Chrome-trace file (``.json`` or ``.json.gz``), read once."""
    from perfmodel._io import parse_json, read_bytes

    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise ParseError(f"trace not found: {p}", value=str(p), where=str(p))
    raw = read_bytes(p)
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return parse_json(raw, p, error=ParseError)


def trace_events(data: Any, path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ``traceEvents`` list of a parsed trace (see :func:`read_trace_json`)."""
    p = Path(path)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ParseError(
            f"{p}: no 'traceEvents' list (is this a Chrome/Kineto trace?)",
            value=str(p),
            where=f"{p}: traceEvents",
        )
    return events


def _split_label(name: str) -> tuple[str, str]:
    body = name[len(LAYER_PREFIX) :]
    layer, _, module = body.partition("|")
    return layer, module


class _Intervals:
    """Complete events of one thread, for 'innermost enclosing event' queries."""

    def __init__(self, events: Iterable[dict[str, Any]]) -> None:
        evs = sorted(events, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        self.starts = [float(e["ts"]) for e in evs]
        self.events = evs

    def enclosing(self, t: float, pred: Any) -> dict[str, Any] | None:
        """Innermost (latest-starting) event satisfying ``pred`` with ``ts <= t <= ts + dur``."""
        i = bisect.bisect_right(self.starts, t) - 1
        while i >= 0:
            e = self.events[i]
            if pred(e) and float(e["ts"]) + float(e.get("dur", 0.0)) >= t:
                return e
            i -= 1
        return None


def summarize_trace(
    events: list[dict[str, Any]] | str | os.PathLike[str], *, source: str | None = None
) -> TraceSummary:
    """Per-layer forward/backward/optimizer times of a traced training step.

    Raises
    ------
    ParseError
        If the trace has no ``layer:`` ranges (nothing to attribute to).
    """
    if not isinstance(events, list):
        source = source or str(events)
        events = read_trace(events)
    source = source or "<events>"
    host_by_tid, device, launches = _split_events(events)
    if not any(
        str(e.get("name", "")).startswith(LAYER_PREFIX) for evs in host_by_tid.values() for e in evs
    ):
        raise ParseError(
            f"{source}: no '{LAYER_PREFIX}<name>' record_function ranges; trace the step with "
            "perfmodel's step runner or annotate modules the same way",
            value=source,
            where=source,
        )
    att = _Attribution(host_by_tid)
    on_device = bool(device)
    if on_device:
        for k in device:
            corr = (k.get("args") or {}).get("correlation")
            launch = launches.get(int(corr)) if corr is not None else None
            if launch is None:
                att.charge(("other", "", Phase.OTHER), float(k.get("dur", 0.0)))
                continue
            tid = (launch.get("pid"), launch.get("tid"))
            att.charge(att.classify(tid, float(launch["ts"])), float(k.get("dur", 0.0)))
        t0 = min(float(k["ts"]) for k in device)
        t1 = max(float(k["ts"]) + float(k.get("dur", 0.0)) for k in device)
        busy_us = sum(float(k.get("dur", 0.0)) for k in device)
    else:
        t0, t1, busy_us = att.charge_host_operators()
    acc = att.acc
    layers = tuple(
        LayerTime(
            layer=k[0], module=k[1], phase=k[2], time_s=acc[k][0] * 1e-6, events=int(acc[k][1])
        )
        for k in att.order
    )
    return TraceSummary(
        layers=layers,
        device_busy_s=busy_us * 1e-6,
        span_s=(t1 - t0) * 1e-6,
        on_device=on_device,
        source=source,
    )


def _split_events(
    events: list[dict[str, Any]],
) -> tuple[dict[Any, list[dict[str, Any]]], list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The complete events by host thread (``(pid, tid)``), the device kernels and memory
    operations, and the launches by correlation id."""
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e]
    host_by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    device: list[dict[str, Any]] = []
    launches: dict[int, dict[str, Any]] = {}
    for e in complete:
        cat = e.get("cat", "")
        if cat in _DEVICE_CATS:
            device.append(e)
        elif cat in _LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launches[int(corr)] = e
            host_by_tid[(e.get("pid"), e.get("tid"))].append(e)
        else:
            host_by_tid[(e.get("pid"), e.get("tid"))].append(e)
    return host_by_tid, device, launches


def _is_label(e: dict[str, Any]) -> bool:
    return str(e.get("name", "")).startswith(LAYER_PREFIX)


def _is_opt(e: dict[str, Any]) -> bool:
    return e.get("name") == OPTIMIZER_LABEL


def _is_bwd(e: dict[str, Any]) -> bool:
    return str(e.get("name", "")).startswith(_BWD_PREFIX)


class _Attribution:
    """Time charged to (layer, module, phase): a host time stamp's phase and layer from the
    ranges around it on its thread (a backward operator's layer by the sequence number of the
    forward operator it differentiates)."""

    def __init__(self, host_by_tid: dict[Any, list[dict[str, Any]]]) -> None:
        self.host_by_tid = host_by_tid
        self.trees = {tid: _Intervals(evs) for tid, evs in host_by_tid.items()}
        # forward operators: sequence number -> (layer, module)
        self.seq_to_layer: dict[int, tuple[str, str]] = {}
        for tid, evs in host_by_tid.items():
            tree = self.trees[tid]
            for e in evs:
                if e.get("cat") != "cpu_op" or _is_bwd(e):
                    continue
                seq = (e.get("args") or {}).get("Sequence number")
                if seq is None:
                    continue
                lab = tree.enclosing(float(e["ts"]), _is_label)
                if lab is not None and int(seq) not in self.seq_to_layer:
                    self.seq_to_layer[int(seq)] = _split_label(str(lab["name"]))
        self.acc: dict[tuple[str, str, Phase], list[float]] = defaultdict(lambda: [0.0, 0])
        self.order: list[tuple[str, str, Phase]] = []

    def classify(self, tid: Any, t: float) -> tuple[str, str, Phase]:
        tree = self.trees.get(tid)
        if tree is None:
            return "other", "", Phase.OTHER
        bwd = tree.enclosing(t, _is_bwd)
        if bwd is not None:
            seq = (bwd.get("args") or {}).get("Sequence number")
            if seq is not None and int(seq) in self.seq_to_layer:
                layer, module = self.seq_to_layer[int(seq)]
                return layer, module, Phase.BACKWARD
            return "other", "", Phase.BACKWARD
        lab = tree.enclosing(t, _is_label)
        if lab is not None:
            layer, module = _split_label(str(lab["name"]))
            return layer, module, Phase.FORWARD
        if tree.enclosing(t, _is_opt) is not None:
            return OPTIMIZER_LABEL, "", Phase.OPTIMIZER
        return "other", "", Phase.OTHER

    def charge(self, key: tuple[str, str, Phase], dur_us: float) -> None:
        if key not in self.acc:
            self.order.append(key)
        self.acc[key][0] += dur_us
        self.acc[key][1] += 1

    def charge_host_operators(self) -> tuple[float, float, float]:
        """A CPU trace: the top-level operators' durations charged (an operator inside another
        is skipped); (first start, last end, busy) in us."""
        for tid, evs in self.host_by_tid.items():
            ops = sorted(
                (e for e in evs if e.get("cat") == "cpu_op"),
                key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))),
            )
            outer_end = -1.0
            for e in ops:
                start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
                if end <= outer_end:
                    continue
                outer_end = end
                self.charge(self.classify(tid, start), end - start)
        host = [e for evs in self.host_by_tid.values() for e in evs if e.get("cat") == "cpu_op"]
        t0 = min((float(e["ts"]) for e in host), default=0.0)
        t1 = max((float(e["ts"]) + float(e.get("dur", 0.0)) for e in host), default=0.0)
        return t0, t1, sum(v[0] for v in self.acc.values())


MODULE_KIND = {
    "Conv1d": "conv",
    "Conv2d": "conv",
    "Conv3d": "conv",
    "Linear": "linear",
    "BatchNorm1d": "norm",
    "BatchNorm2d": "norm",
    "LayerNorm": "norm",
    "GroupNorm": "norm",
    "RMSNorm": "norm",
    "ReLU": "activation",
    "GELU": "activation",
    "SiLU": "activation",
    "Tanh": "activation",
    "MaxPool2d": "pool",
    "AvgPool2d": "pool",
    "AdaptiveAvgPool2d": "pool",
    "Embedding": "embedding",
    "Dropout": "elementwise",
    "Flatten": "elementwise",
    "CrossEntropyLoss": "loss",
    "SelfAttention": "attention",
    "CausalSelfAttention": "attention",
    "ResidualAdd": "elementwise",
}
"""PyTorch module class -> :class:`perfmodel.workload.layers.LayerKind` value (for per-kind validation)."""


def time_by_kind(summary: TraceSummary, kinds: Mapping[str, str] = MODULE_KIND) -> dict[str, float]:
    """Seconds per layer kind (forward + backward), plus ``optimizer`` and ``other``."""
    out: dict[str, float] = defaultdict(float)
    for lt in summary.layers:
        if lt.phase is Phase.OPTIMIZER:
            out["optimizer"] += lt.time_s
        elif lt.phase is Phase.OTHER or not lt.module:
            out["other"] += lt.time_s
        else:
            out[kinds.get(lt.module, "other")] += lt.time_s
    return dict(out)
